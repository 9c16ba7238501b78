"""Output of `topo-scheduler simulate`: the JSON contract, and a table for people."""

from __future__ import annotations

from typing import Any

import msgspec

from scheduler.core.model.decisions import Placement
from scheduler.core.snapshot.holdings import bits
from scheduler.core.snapshot.nodes import NodeState

from .simulate import SimResult


def summary(result: SimResult) -> dict[str, Any]:
    gpu_nodes = [n for n in result.state.nodes.values() if n.inventory is not None]
    gpus = sum(n.total for n in gpu_nodes)
    # Only GPUs the inventory has: a running pod's annotation may name others (it is warned about).
    held = sum((n.whole & _device_mask(n)).bit_count() for n in gpu_nodes)
    shared_cards = sum(n.shared_mask.bit_count() for n in gpu_nodes)
    gangs = {p.gang for p in result.placements if p.gang}
    return {
        "nodes": len(result.state.nodes),
        "gpuNodes": len(gpu_nodes),
        "gpus": gpus,
        "gpusAllocated": held,
        "gpusShared": shared_cards,
        "gpusFree": sum(n.free_mask.bit_count() for n in gpu_nodes),
        "podsPlaced": len(result.placements),
        "podsPending": len(result.pending),
        "podsPreempted": sum(len(p.victims) for p in result.preemptions),
        "gangsPlaced": len(gangs),
        "podsIgnored": result.ignored_pods,
        "objectsIgnored": sum(result.ignored_objects.values()),
    }


def _device_mask(node: NodeState) -> int:
    mask = 0
    for device in node.inventory.devices if node.inventory else ():
        mask |= 1 << device.index
    return mask


def to_json(result: SimResult) -> bytes:
    placements = []
    for p in result.placements:
        item: dict[str, Any] = {
            "pod": p.pod,
            "node": p.node,
            "devices": list(p.devices),
            "gang": p.gang,
        }
        if p.shares:
            item["shares"] = [msgspec.to_builtins(s) for s in p.shares]
        if p.topology:  # a gang placed through topology domains (issue 21)
            item["topology"] = dict(p.topology)
            item["rank"] = p.rank
        if p.claims:  # the ResourceClaims the placement allocates (issue 29)
            item["claims"] = [
                {
                    "claim": c.claim,
                    "special": c.special,
                    "devices": [
                        {"request": r.request, "device": f"{r.driver}/{r.pool}/{r.device}"}
                        for r in c.allocation.results
                    ],
                }
                for c in p.claims
            ]
        placements.append(item)
    document = {
        "placements": placements,
        "pending": [{"pod": w.pod, "reason": w.reason, "state": w.state} for w in result.pending],
        "preemptions": [
            {"pod": pod, "victims": list(p.victims)} for p in result.preemptions for pod in p.pods
        ],
        "warnings": result.warnings,
        "summary": summary(result),
    }
    return msgspec.json.format(msgspec.json.encode(document), indent=2)


def _gang_domains(result: SimResult) -> list[str]:
    """Each gang placed through topology domains, its pods grouped by domain (by rank)."""
    gangs: dict[str, dict[tuple[tuple[str, str], ...], list[Placement]]] = {}
    for p in result.placements:
        if p.gang and p.topology:
            gangs.setdefault(p.gang, {}).setdefault(p.topology, []).append(p)
    if not gangs:
        return []
    lines = ["", "GANGS BY DOMAIN"]
    for gang in sorted(gangs):
        domains = gangs[gang]
        count = sum(len(members) for members in domains.values())
        lines.append(f"  gang {gang}: {count} pods in {len(domains)} domain(s)")
        for domain in sorted(domains):
            members = sorted(domains[domain], key=lambda p: (p.rank is None, p.rank or 0, p.pod))
            lines.append(f"    {','.join(f'{k}={v}' for k, v in domain)}")
            for p in members:
                devices = ",".join(str(i) for i in p.devices)
                lines.append(f"      rank {p.rank}  {p.pod}  {p.node}  GPU {devices}")
    return lines


def _claims(result: SimResult) -> list[str]:
    """Each placement's allocated ResourceClaims, their devices beside the pod's node."""
    placed = [p for p in result.placements if p.claims]
    if not placed:
        return []
    lines = ["", "CLAIMS"]
    for p in placed:
        lines.append(f"  {p.pod}  {p.node}")
        for c in p.claims:
            name = f"{c.claim}<generated> (extended resources)" if c.special else c.claim
            devices = ", ".join(f"{r.driver}/{r.pool}/{r.device}" for r in c.allocation.results)
            lines.append(f"    {name}: {devices or 'no devices'}")
    return lines


def to_table(result: SimResult) -> str:
    lines: list[str] = []
    state = result.state
    for name in sorted(state.nodes):
        node = state.nodes[name]
        inv = node.inventory
        if inv is None:
            continue
        model = f" {inv.model}" if inv.model else ""
        lines.append(
            f"NODE {name}  ({inv.vendor}{model}, {node.total} GPUs, "
            f"{node.free_mask.bit_count()} free)"
        )
        owner: dict[int, list[str]] = {}
        for key in sorted(node.pods):
            holding = state.holdings.get(key)
            if holding is None:
                continue
            mark = "+" if key in result.new_pods else " "
            gang = f"  gang {holding.gang}" if holding.gang else ""
            for index in bits(holding.whole):
                owner.setdefault(index, []).append(f"{mark} {key}{gang}")
            for share in holding.shares:
                qos = f" {share.qos}" if share.qos else ""
                sgpu = f" sgpu {share.sgpu}" if share.sgpu else ""
                owner.setdefault(share.index, []).append(
                    f"{mark} {key}  share {share.core}% {share.memory_mib}MiB{sgpu}{qos}"
                )
        lines.append(f"  {'GPU':<4} {'UUID':<24} POD")
        for device in inv.devices:
            holders = owner.get(device.index) or (["  -"] if device.healthy else ["  (unhealthy)"])
            uuid = device.uuid if len(device.uuid) <= 24 else device.uuid[:21] + "..."
            for pos, holder in enumerate(holders):
                shown_index = str(device.index) if pos == 0 else ""
                shown = uuid if pos == 0 else ""
                lines.append(f"  {shown_index:<4} {shown:<24} {holder}")
        lines.append("")
    # The legend explains the "+" marks, so it only makes sense under at least one GPU table.
    lines.append("(+ placed by this simulation)" if lines else "No GPU nodes in the input.")
    lines.extend(_gang_domains(result))
    lines.extend(_claims(result))
    if result.preemptions:
        lines.append("")
        lines.append("PREEMPTED")
        for p in result.preemptions:
            lines.append(f"  {p.summary}")
    if result.pending:
        lines.append("")
        lines.append("PENDING")
        for w in result.pending:
            lines.append(f"  {w.pod}  [{w.state}]  {w.reason}")
            for name, why in w.refusals:
                lines.append(f"      {name}: {why}")
    if result.warnings:
        lines.append("")
        lines.append("WARNINGS")
        lines.extend(f"  {w}" for w in result.warnings)
    s = summary(result)
    lines.append("")
    lines.append(
        f"{s['podsPlaced']} placed, {s['podsPending']} pending; {s['gpusAllocated']} of "
        f"{s['gpus']} GPUs allocated whole, {s['gpusShared']} shared, {s['gpusFree']} free, "
        f"on {s['gpuNodes']} GPU nodes"
    )
    # Say what was left out, so a pod missing from the tables is not a mystery.
    ignored = [f"{n} {kind}" for kind, n in sorted(result.ignored_objects.items())]
    if result.ignored_pods:
        ignored.insert(0, f"{result.ignored_pods} pods not ours to schedule")
    if ignored:
        lines.append(f"Ignored: {', '.join(ignored)}.")
    return "\n".join(lines) + "\n"
