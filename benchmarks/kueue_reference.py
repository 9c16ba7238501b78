"""The reference for bench-topology's column (c): Kueue's Topology-Aware Scheduling order of
domains (written here from Kueue's KEP 2724 and docs, not from its code; the BestFit order checked
against Kueue's ``sortedDomains`` in pkg/cache/scheduler/tas_flavor_snapshot.go: pods that fit
descending, then level values, the last domain the tightest that holds the rest), followed by our
in-node GPU choice on each node it picks.

Kueue counts a node's capacity as a scalar: free GPUs // GPUs per pod (it has no in-node device
choice). Per level, a domain's capacity is the sum of its nodes'. Then:

- required level L: the domain of L that fits the gang most tightly (BestFit, one domain);
- preferred level L: that, else the same one level wider, up to the top; at the top, several
  domains (BestFit greedy);
- BestFit greedy over several domains: largest capacity first, the LAST one the tightest that
  holds the rest (Kueue's example: capacities 3,3,2,1 and 7 pods give 3+3+1); the count given to
  a domain is spread over its children the same way, down to the nodes;
- no constraint: LeastFreeCapacity (Kueue's default for unconstrained podsets since v0.15): the
  nodes of least capacity first.

On each node the pods it got share one joint best set (rule 1), split as our gang planning splits
it (``members.split_joint``); the plan is applied through the core's ``apply_decision``.
"""

from __future__ import annotations

from scheduler.core.cycle import apply_decision
from scheduler.core.gangs.members import Member, split_joint
from scheduler.core.model.decisions import Placed, Placement
from scheduler.core.resources.requests import parse_request
from scheduler.core.snapshot.cluster import ClusterState

from .topology_workload import BLOCK, RACK, Job, ours

# Domains as label tuples: (block,), (block, rack), (block, rack, node).
Domain = tuple[str, ...]


def _capacities(state: ClusterState, k: int) -> dict[Domain, int]:
    caps: dict[Domain, int] = {}
    for name, node in state.nodes.items():
        if node.inventory is None:
            continue
        cap = node.free_mask.bit_count() // k
        if not cap:
            continue
        labels = node.node.labels
        path = (labels[BLOCK], labels[RACK], name)
        for depth in range(1, 4):
            caps[path[:depth]] = caps.get(path[:depth], 0) + cap
    return caps


def _children(caps: dict[Domain, int], domain: Domain) -> list[Domain]:
    return [d for d in caps if len(d) == len(domain) + 1 and d[: len(domain)] == domain]


def _tightest(caps: dict[Domain, int], domains: list[Domain], n: int) -> Domain | None:
    holding = [d for d in domains if caps[d] >= n]
    return min(holding, key=lambda d: (caps[d], d)) if holding else None


def _best_fit(caps: dict[Domain, int], domains: list[Domain], n: int) -> list[tuple[Domain, int]]:
    """BestFit greedy: largest first, the last the tightest holding the rest ([] if short)."""
    out: list[tuple[Domain, int]] = []
    order = sorted(domains, key=lambda d: (-caps[d], d))
    left = n
    for pos, domain in enumerate(order):
        last = _tightest(caps, order[pos:], left)
        if last is not None:
            out.append((last, left))
            return out
        out.append((domain, caps[domain]))
        left -= caps[domain]
    return []


def _down(caps: dict[Domain, int], domain: Domain, n: int) -> list[tuple[str, int]]:
    """n pods inside ``domain`` spread down to nodes: (node, pods)."""
    if len(domain) == 3:
        return [(domain[2], n)]
    out = []
    for child, count in _best_fit(caps, _children(caps, domain), n):
        out.extend(_down(caps, child, count))
    return out


def _assign(caps: dict[Domain, int], job: Job) -> list[tuple[str, int]] | None:
    n = job.pods
    if job.level in ("nvlink", "block"):
        depth = 2 if job.level == "nvlink" else 1  # each rack is one NVLink clique
        levels = [depth] if job.level == "nvlink" else list(range(depth, 0, -1))
        for level in levels:
            domain = _tightest(caps, [d for d in caps if len(d) == level], n)
            if domain is not None:
                return _down(caps, domain, n)
        if job.level == "nvlink":
            return None
        spread = _best_fit(caps, [d for d in caps if len(d) == 1], n)
        if not spread:
            return None
        return [node for block, count in spread for node in _down(caps, block, count)]
    # Unconstrained: LeastFreeCapacity over the nodes.
    out = []
    left = n
    for node in sorted((d for d in caps if len(d) == 3), key=lambda d: (caps[d], d)):
        take = min(caps[node], left)
        out.append((node[2], take))
        left -= take
        if not left:
            return out
    return None


def kueue_then_ours(state: ClusterState, job: Job) -> list[Placement] | None:
    """Column (c): gangs by Kueue's domain order, then our in-node choice; single pods are not
    TAS podsets and go through our own decide, as in the other columns."""
    if job.pods == 1:
        return ours(False)(state, job)
    caps = _capacities(state, job.gpus)
    assignment = _assign(caps, job)
    if assignment is None:
        return None
    unit = job.unit(constraints=False)
    members = [
        Member(pod, parse_request(pod, state.settings, state.memos.asks)) for pod in unit.pods
    ]
    assert unit.gang is not None
    placements: list[Placement] = []
    pos = 0
    with state.tentative():
        for name, count in assignment:
            node = state.nodes[name]
            assert node.inventory is not None
            group = members[pos : pos + count]
            pos += count
            choice = node.inventory.topology.best_set(node.free_mask, count * job.gpus)
            if choice is None:
                return None
            split = split_joint(state, unit.gang, node, choice.mask, group, job.pods)
            if split is None:  # a member's DRA claims (the workload has none)
                return None
            placements += split
    decision = Placed(tuple(placements))
    apply_decision(state, decision, unit)
    return placements
