"""One simulation: the same ClusterState and cycle the live scheduler uses, fed from manifests.

Order of events: every node, namespace, claim, volume, PodGroup, Topology and DRA object
(ResourceSlices, DeviceClasses, ResourceClaims; a pending pod's claims from templates are
created as the resource claim controller would), then every running pod
(``spec.nodeName`` set; its ``topo-scheduler.io/devices`` annotation says which GPUs it holds),
then the pending pods of this scheduler as the live queue orders a backlog: higher
``spec.priority`` first, then file order, each decision applied before the next (a gang once all
its members are in, at its last member's position). Gated pods (``spec.schedulingGates``) wait
without an attempt. Pods of other schedulers, finished pods and pods being deleted are ignored; a
pod defined twice counts once, as its last definition. An unschedulable pod's table entry lists
why each node refuses it, against the cluster as the run leaves it. A unit that cannot be placed
preempts as the live leader would (``core/preemption/preempt.py``): its victims leave the cluster at
once and it takes their place; the output lists each preemption with its victims. Each
placement's allocated ResourceClaims are printed with their devices beside the pod's node.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from scheduler.config import Config
from scheduler.core.cycle import Unit, schedule_in_order
from scheduler.core.model.decisions import Decision, Placed, Placement, Unschedulable, Waiting
from scheduler.core.model.dra import ResourceClaim
from scheduler.core.model.objects import PodInput
from scheduler.core.placement.nodes import refusals
from scheduler.core.preemption.preempt import NoPreemption, preempt
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.holdings import bits

from .loader import Loaded


class Pending(msgspec.Struct, frozen=True):
    pod: str
    reason: str
    state: str  # "waiting" | "unschedulable"
    # Per node, why it refused the pod (at the end of the run), for unschedulable pods.
    refusals: tuple[tuple[str, str], ...] = ()


class Preempted(msgspec.Struct, frozen=True):
    """A preemption the simulation carried out: the preemptor's pods placed once the victims
    (evicted, gone from the output's cluster) left."""

    pods: tuple[str, ...]
    victims: tuple[str, ...]
    summary: str


class SimResult(msgspec.Struct):
    state: ClusterState
    placements: list[Placement]
    pending: list[Pending]
    warnings: list[str]
    ignored_pods: int
    # Objects of other kinds (ConfigMaps, Deployments...) in the input, by kind: skipped.
    ignored_objects: dict[str, int]
    new_pods: set[str]
    preemptions: list[Preempted] = msgspec.field(default_factory=list)


def simulate(loaded: Loaded, config: Config) -> SimResult:
    state = ClusterState(config.to_core())
    warnings: list[str] = []
    for node in loaded.nodes:
        if node.name in state.nodes:
            warnings.append(f"node {node.name}: defined twice; the last definition wins")
        warning = state.set_node(node)
        if warning:
            warnings.append(warning)
    inputs = state.inputs
    inputs.namespaces.replace(loaded.namespaces)
    inputs.claims.replace(loaded.claims)
    inputs.resource_claims.replace(loaded.resource_claims)
    inputs.device_classes.replace(loaded.device_classes)
    inputs.resource_slices.replace(loaded.resource_slices)
    inputs.device_taint_rules.replace(loaded.device_taint_rules)
    inputs.volumes.replace(loaded.volumes)
    for group in loaded.pod_groups:
        if group.key in inputs.pod_groups:
            warnings.append(f"PodGroup {group.key}: defined twice; the last definition wins")
        inputs.pod_groups.put(group)
    for topology in loaded.topologies:
        if topology.key in inputs.topologies:
            warnings.append(f"Topology {topology.key}: defined twice; the last definition wins")
        inputs.topologies.put(topology)
    templates = {t.key: t for t in loaded.claim_templates}
    pending = []
    ignored = 0
    for pod in _last_definitions(loaded.pods, warnings):
        if pod.node_name:
            if pod.node_name not in state.nodes:
                warnings.append(
                    f"pod {pod.key}: runs on node {pod.node_name}, which is not in the input"
                )
            warning = state.add_bound_pod(pod)
            if warning:
                warnings.append(warning)
            unknown = _unknown_devices(state, pod.key)
            if unknown:
                warnings.append(
                    f"pod {pod.key}: holds GPU {unknown} on node {pod.node_name}, "
                    "which has no such GPU"
                )
        elif pod.scheduler_name == config.scheduler_name and not (pod.finished or pod.deleting):
            # The live scheduler skips pods being deleted too; they never get a node.
            pending.append(_claims_from_templates(state, pod, templates))
        else:
            ignored += 1
    placements: list[Placement] = []
    waiting: list[Pending] = []
    by_key = {p.key: p for p in pending}
    preempted: list[Preempted] = []

    def preempting(unit: Unit, decision: Decision) -> Decision:
        """An unschedulable unit preempts as the live leader would; here the victims leave at
        once and the preemptor takes the plan ``preempt`` made for it."""
        if not isinstance(decision, Unschedulable):
            return decision
        result = preempt(state, unit)
        if isinstance(result, NoPreemption):
            return decision
        for key in (*(v.pod for v in result.victims), *result.waiting_for):
            state.remove_pod(key)
        preempted.append(
            Preempted(result.pods, tuple(v.pod for v in result.victims), result.summary)
        )
        return Placed(result.placements)

    for decision in schedule_in_order(state, pending, preempting):
        if isinstance(decision, Placed):
            placements.extend(decision.placements)
            waiting.extend(  # an elastic gang's surplus that fits nowhere yet
                Pending(p, decision.reason, "unschedulable", tuple(refusals(state, by_key[p])))
                for p in decision.waiting
            )
        elif isinstance(decision, Waiting):
            waiting.extend(Pending(p, decision.reason, "waiting") for p in decision.pods)
        else:
            waiting.extend(
                Pending(p, decision.reason, "unschedulable", tuple(refusals(state, by_key[p])))
                for p in decision.pods
            )
    return SimResult(
        state=state,
        placements=placements,
        pending=waiting,
        warnings=warnings,
        ignored_pods=ignored,
        ignored_objects=dict(loaded.skipped),
        new_pods={p.pod for p in placements},
        preemptions=preempted,
    )


def _claims_from_templates(
    state: ClusterState, pod: PodInput, templates: Mapping[str, ResourceClaim]
) -> PodInput:
    """What the resource claim controller does for a pending pod: a claim for each entry of
    ``spec.resourceClaims`` naming a template and no claim yet, named ``<pod>-<entry>`` (the
    controller's generateName without its random suffix), owned by the pod, recorded as the
    pod's claim. A template not in the input leaves the entry as it is (the pod waits)."""
    entries = []
    for entry in pod.resource_claims:
        template = templates.get(f"{pod.namespace}/{entry.template}") if entry.template else None
        if entry.claim or template is None:
            entries.append(entry)
            continue
        name = f"{pod.name}-{entry.name}"
        claim = msgspec.structs.replace(
            template, name=name, uid=f"{pod.uid}-{entry.name}", owner=pod.uid
        )
        if claim.key not in state.inputs.resource_claims:
            state.inputs.resource_claims.put(claim)
        entries.append(msgspec.structs.replace(entry, claim=name))
    if entries == list(pod.resource_claims):
        return pod
    return msgspec.structs.replace(pod, resource_claims=tuple(entries))


def _last_definitions(pods: list[PodInput], warnings: list[str]) -> list[PodInput]:
    """Each pod once, as its last definition (where that stands), like ``kubectl apply``.

    Two definitions of one namespace/name would otherwise both be scheduled, and the core (where a
    pod holds one thing at a time) would keep only the second placement while the output listed
    both.
    """
    last: dict[str, int] = {}
    for pos, pod in enumerate(pods):
        if pod.key in last:
            warnings.append(f"pod {pod.key}: defined twice; the last definition wins")
        last[pod.key] = pos
    return [pod for pos, pod in enumerate(pods) if last[pod.key] == pos]


def _unknown_devices(state: ClusterState, key: str) -> str:
    """GPU indices a running pod's annotation names but its node's inventory lacks ("" if none).

    The core charges them anyway; a person reading the simulation should hear about it.
    """
    holding = state.holdings.get(key)
    node = state.nodes.get(holding.node) if holding else None
    if holding is None or node is None or node.inventory is None:
        return ""
    known = 0
    for device in node.inventory.devices:
        known |= 1 << device.index
    return ",".join(str(i) for i in bits(holding.whole & ~known))
