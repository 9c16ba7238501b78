"""msgspec codecs from raw Kubernetes JSON (or YAML-loaded dicts) to the core's inputs.

The Structs mirror v1 Node and v1 Pod but declare only the fields the scheduler reads; msgspec
skips the rest cheaply (a real pod has hundreds of fields). They are not strict about unknown
fields on purpose, unlike the config file. Quantities arrive as strings from the apiserver but as
numbers from hand-written YAML (``nvidia.com/gpu: 1``), so both are accepted and kept as strings
for the core's quantity parser, which reports malformed values per pod (and, for a node's
status.allocatable, per node, with a warning). Of a node's status only allocatable (or capacity,
which the apiserver copies into a missing allocatable) is read; heartbeats and conditions are not.

``matchLabelKeys`` / ``mismatchLabelKeys`` of affinity terms and spread constraints are folded into
their label selectors here (``key In [pod's value]`` / ``key NotIn [...]``), as the apiserver does
when it creates the pod; a selector already folded by the apiserver only gets the same requirement
twice, which changes nothing. Host ports get the API's defaults (TCP, hostIP 0.0.0.0).

No kubernetes-asyncio import here: the hot path never builds client model objects.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import msgspec

from scheduler.core.model.objects import (
    Affinity,
    ClaimInput,
    ContainerInput,
    ContainerStatusInput,
    HostPort,
    LabelSelector,
    NamespaceInput,
    NodeInput,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodClaim,
    PodInput,
    PreferredNodeTerm,
    Requirement,
    ResizeStatus,
    SpreadConstraint,
    Taint,
    Toleration,
    VolumeInput,
    WeightedPodAffinityTerm,
)

Quantity = str | int | float


class ObjectMeta(msgspec.Struct, rename="camel"):
    name: str = ""
    namespace: str = "default"
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    deletion_timestamp: str | None = None
    creation_timestamp: str = ""


class TaintWire(msgspec.Struct):
    key: str
    effect: str
    value: str = ""


class NodeSpecWire(msgspec.Struct):
    unschedulable: bool = False
    taints: list[TaintWire] | None = None


class NodeStatusWire(msgspec.Struct, rename="camel"):
    # Only these of a node's status; conditions, images and heartbeats are skipped.
    allocatable: dict[str, Quantity] | None = None
    capacity: dict[str, Quantity] | None = None
    declared_features: list[str] | None = None


class Node(msgspec.Struct):
    metadata: ObjectMeta
    spec: NodeSpecWire = msgspec.field(default_factory=NodeSpecWire)
    status: NodeStatusWire | None = None


class Resources(msgspec.Struct):
    limits: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None


class PortWire(msgspec.Struct, rename="camel"):
    container_port: int = 0
    host_port: int = 0
    protocol: str = "TCP"
    host_ip: str = msgspec.field(default="", name="hostIP")  # not camel case: "IP"


class RestartRuleWire(msgspec.Struct):
    action: str = ""


class MountWire(msgspec.Struct, rename="camel"):
    bind_mount_options: list[str] | None = None


class ContainerWire(msgspec.Struct, rename="camel"):
    name: str = ""
    resources: Resources = msgspec.field(default_factory=Resources)
    restart_policy: str = ""
    ports: list[PortWire] | None = None
    restart_policy_rules: list[RestartRuleWire] | None = None
    volume_mounts: list[MountWire] | None = None


class RequirementWire(msgspec.Struct):
    key: str
    operator: str
    values: list[str] | None = None


class LabelSelectorWire(msgspec.Struct, rename="camel"):
    match_labels: dict[str, str] | None = None
    match_expressions: list[RequirementWire] | None = None


class NodeSelectorTermWire(msgspec.Struct, rename="camel"):
    match_expressions: list[RequirementWire] | None = None
    match_fields: list[RequirementWire] | None = None


class NodeSelectorWire(msgspec.Struct, rename="camel"):
    node_selector_terms: list[NodeSelectorTermWire] = msgspec.field(default_factory=list)


class PreferredTermWire(msgspec.Struct):
    weight: int
    preference: NodeSelectorTermWire


class NodeAffinityWire(msgspec.Struct):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelectorWire | None = None
    preferredDuringSchedulingIgnoredDuringExecution: list[PreferredTermWire] | None = None


class PodAffinityTermWire(msgspec.Struct, rename="camel"):
    topology_key: str = ""
    label_selector: LabelSelectorWire | None = None
    namespaces: list[str] | None = None
    namespace_selector: LabelSelectorWire | None = None
    match_label_keys: list[str] | None = None
    mismatch_label_keys: list[str] | None = None


class WeightedTermWire(msgspec.Struct, rename="camel"):
    weight: int
    pod_affinity_term: PodAffinityTermWire


class PodAffinityWire(msgspec.Struct):
    requiredDuringSchedulingIgnoredDuringExecution: list[PodAffinityTermWire] | None = None
    preferredDuringSchedulingIgnoredDuringExecution: list[WeightedTermWire] | None = None


class AffinityWire(msgspec.Struct, rename="camel"):
    node_affinity: NodeAffinityWire | None = None
    pod_affinity: PodAffinityWire | None = None
    pod_anti_affinity: PodAffinityWire | None = None


class SpreadWire(msgspec.Struct, rename="camel"):
    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    label_selector: LabelSelectorWire | None = None
    min_domains: int | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None
    match_label_keys: list[str] | None = None


class ClaimSourceWire(msgspec.Struct, rename="camel"):
    claim_name: str = ""


class VolumeWire(msgspec.Struct, rename="camel"):
    name: str = ""
    persistent_volume_claim: ClaimSourceWire | None = None
    ephemeral: dict[str, Any] | None = None


class GateWire(msgspec.Struct):
    name: str


class TolerationWire(msgspec.Struct):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class PodClaimWire(msgspec.Struct, rename="camel"):
    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class SchedulingGroupWire(msgspec.Struct, rename="camel"):
    pod_group_name: str | None = None


class PodSpecWire(msgspec.Struct, rename="camel"):
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    node_selector: dict[str, str] | None = None
    tolerations: list[TolerationWire] | None = None
    containers: list[ContainerWire] = msgspec.field(default_factory=list)
    init_containers: list[ContainerWire] | None = None
    overhead: dict[str, Quantity] | None = None
    affinity: AffinityWire | None = None
    topology_spread_constraints: list[SpreadWire] | None = None
    volumes: list[VolumeWire] | None = None
    scheduling_gates: list[GateWire] | None = None
    priority: int | None = None
    preemption_policy: str | None = None
    resources: Resources | None = None
    host_network: bool = False
    host_users: bool | None = None
    resource_claims: list[PodClaimWire] | None = None
    scheduling_group: SchedulingGroupWire | None = None


class StatusResourcesWire(msgspec.Struct):
    requests: dict[str, Quantity] | None = None


class ContainerStatusWire(msgspec.Struct, rename="camel"):
    name: str = ""
    resources: StatusResourcesWire | None = None
    allocated_resources: dict[str, Quantity] | None = None


class ConditionWire(msgspec.Struct):
    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""


class PodClaimStatusWire(msgspec.Struct, rename="camel"):
    name: str = ""
    resource_claim_name: str | None = None


class ExtendedClaimStatusWire(msgspec.Struct, rename="camel"):
    resource_claim_name: str = ""


class PodStatusWire(msgspec.Struct, rename="camel"):
    phase: str = "Pending"
    nominated_node_name: str = ""
    # What in-place resize accounting reads (filters/resize.py), and the claims of templates.
    container_statuses: list[ContainerStatusWire] | None = None
    init_container_statuses: list[ContainerStatusWire] | None = None
    resources: StatusResourcesWire | None = None
    allocated_resources: dict[str, Quantity] | None = None
    conditions: list[ConditionWire] | None = None
    resource_claim_statuses: list[PodClaimStatusWire] | None = None
    extended_resource_claim_status: ExtendedClaimStatusWire | None = None


class Pod(msgspec.Struct):
    metadata: ObjectMeta
    spec: PodSpecWire = msgspec.field(default_factory=PodSpecWire)
    status: PodStatusWire = msgspec.field(default_factory=PodStatusWire)


def _quantities(values: dict[str, Quantity] | None) -> dict[str, str]:
    if not values:
        return {}
    return {k: v if isinstance(v, str) else _number(v) for k, v in values.items()}


def _number(v: int | float) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _container(c: ContainerWire) -> ContainerInput:
    return ContainerInput(
        c.name,
        limits=_quantities(c.resources.limits),
        requests=_quantities(c.resources.requests),
        restart_policy=c.restart_policy,
        host_ports=tuple(
            HostPort(p.host_port, p.protocol or "TCP", p.host_ip or "0.0.0.0")
            for p in c.ports or ()
            if p.host_port > 0
        ),
    )


def _requirements(reqs: list[RequirementWire] | None) -> tuple[Requirement, ...]:
    return tuple(Requirement(r.key, r.operator, tuple(r.values or ())) for r in reqs or ())


def _selector(
    wire: LabelSelectorWire | None,
    labels: dict[str, str],
    match_keys: list[str] | None = None,
    mismatch_keys: list[str] | None = None,
) -> LabelSelector | None:
    if wire is None:
        return None
    extra = [Requirement(k, "In", (labels[k],)) for k in match_keys or () if k in labels]
    extra += [Requirement(k, "NotIn", (labels[k],)) for k in mismatch_keys or () if k in labels]
    return LabelSelector(
        match_labels=dict(wire.match_labels or {}),
        match_expressions=_requirements(wire.match_expressions) + tuple(extra),
    )


def _node_term(t: NodeSelectorTermWire) -> NodeSelectorTerm:
    return NodeSelectorTerm(_requirements(t.match_expressions), _requirements(t.match_fields))


def _pod_term(t: PodAffinityTermWire, labels: dict[str, str]) -> PodAffinityTerm:
    return PodAffinityTerm(
        topology_key=t.topology_key,
        label_selector=_selector(
            t.label_selector, labels, t.match_label_keys, t.mismatch_label_keys
        ),
        namespaces=tuple(t.namespaces or ()),
        namespace_selector=_selector(t.namespace_selector, {}),
    )


def _pod_terms(
    wire: PodAffinityWire | None, labels: dict[str, str]
) -> tuple[tuple[PodAffinityTerm, ...], tuple[WeightedPodAffinityTerm, ...]]:
    if wire is None:
        return (), ()
    required = tuple(
        _pod_term(t, labels) for t in wire.requiredDuringSchedulingIgnoredDuringExecution or ()
    )
    preferred = tuple(
        WeightedPodAffinityTerm(w.weight, _pod_term(w.pod_affinity_term, labels))
        for w in wire.preferredDuringSchedulingIgnoredDuringExecution or ()
    )
    return required, preferred


def _affinity(wire: AffinityWire | None, labels: dict[str, str]) -> Affinity | None:
    if wire is None:
        return None
    node_required: tuple[NodeSelectorTerm, ...] | None = None
    node_preferred: tuple[PreferredNodeTerm, ...] = ()
    if wire.node_affinity is not None:
        required = wire.node_affinity.requiredDuringSchedulingIgnoredDuringExecution
        if required is not None:
            node_required = tuple(_node_term(t) for t in required.node_selector_terms)
        node_preferred = tuple(
            PreferredNodeTerm(p.weight, _node_term(p.preference))
            for p in wire.node_affinity.preferredDuringSchedulingIgnoredDuringExecution or ()
        )
    pod_required, pod_preferred = _pod_terms(wire.pod_affinity, labels)
    anti_required, anti_preferred = _pod_terms(wire.pod_anti_affinity, labels)
    return Affinity(
        node_required=node_required,
        node_preferred=node_preferred,
        pod_required=pod_required,
        pod_preferred=pod_preferred,
        anti_required=anti_required,
        anti_preferred=anti_preferred,
    )


def _spread(c: SpreadWire, labels: dict[str, str]) -> SpreadConstraint:
    return SpreadConstraint(
        max_skew=c.max_skew,
        topology_key=c.topology_key,
        when_unsatisfiable=c.when_unsatisfiable,
        label_selector=_selector(c.label_selector, labels, c.match_label_keys),
        min_domains=c.min_domains,
        node_affinity_policy=c.node_affinity_policy or "Honor",
        node_taints_policy=c.node_taints_policy or "Ignore",
    )


def _claims(pod_name: str, volumes: list[VolumeWire] | None) -> tuple[str, ...]:
    out = []
    for v in volumes or ():
        if v.persistent_volume_claim is not None and v.persistent_volume_claim.claim_name:
            out.append(v.persistent_volume_claim.claim_name)
        elif v.ephemeral is not None:
            out.append(f"{pod_name}-{v.name}")  # the claim a generic ephemeral volume gets
    return tuple(out)


def node_from_obj(node: Node, resources: Collection[str] | None = None) -> NodeInput:
    """``resources``: keep only these names of status.allocatable (the whole-GPU resources, the
    only ones the core reads), so that a NodeInput changes when they change and not otherwise."""
    return NodeInput(
        node.metadata.name,
        labels=dict(node.metadata.labels or {}),
        annotations=dict(node.metadata.annotations or {}),
        unschedulable=node.spec.unschedulable,
        taints=tuple(Taint(t.key, t.effect, t.value) for t in node.spec.taints or ()),
        allocatable=_allocatable(node.status, resources),
        declared_features=tuple(node.status.declared_features or ())
        if node.status is not None
        else (),
    )


def _allocatable(
    status: NodeStatusWire | None, resources: Collection[str] | None
) -> dict[str, str] | None:
    if status is None:
        return None
    # The apiserver defaults a missing allocatable to the capacity; hand-written YAML gets the same.
    values = status.allocatable if status.allocatable is not None else status.capacity
    quantities = _quantities(values)
    if resources is None:
        return quantities
    return {k: v for k, v in quantities.items() if k in resources}


def pod_from_obj(pod: Pod) -> PodInput:
    spec = pod.spec
    labels = dict(pod.metadata.labels or {})
    containers = (*spec.containers, *(spec.init_containers or ()))
    return PodInput(
        pod.metadata.namespace or "default",
        pod.metadata.name,
        uid=pod.metadata.uid,
        scheduler_name=spec.scheduler_name,
        node_name=spec.node_name,
        phase=pod.status.phase,
        labels=labels,
        annotations=dict(pod.metadata.annotations or {}),
        containers=tuple(_container(c) for c in spec.containers),
        init_containers=tuple(_container(c) for c in spec.init_containers or ()),
        node_selector=dict(spec.node_selector or {}),
        tolerations=tuple(
            Toleration(t.key, t.operator, t.value, t.effect) for t in spec.tolerations or ()
        ),
        deleting=pod.metadata.deletion_timestamp is not None,
        created=pod.metadata.creation_timestamp,
        overhead=_quantities(spec.overhead),
        affinity=_affinity(spec.affinity, labels),
        spread=tuple(_spread(c, labels) for c in spec.topology_spread_constraints or ()),
        claims=_claims(pod.metadata.name, spec.volumes),
        scheduling_gates=tuple(g.name for g in spec.scheduling_gates or ()),
        priority=spec.priority or 0,
        preemption_policy=spec.preemption_policy or "PreemptLowerPriority",
        nominated_node=pod.status.nominated_node_name,
        version=resource_version(pod.metadata.resource_version),
        level_requests=_quantities(spec.resources.requests if spec.resources else None),
        resize=_resize(pod.status),
        resource_claims=_pod_claims(spec.resource_claims, pod.status.resource_claim_statuses),
        extended_claim=pod.status.extended_resource_claim_status.resource_claim_name
        if pod.status.extended_resource_claim_status is not None
        else "",
        restart_rule_actions=tuple(
            sorted({r.action for c in containers for r in c.restart_policy_rules or ()})
        ),
        host_network=spec.host_network,
        host_users=spec.host_users,
        bind_mount_options=any(
            m.bind_mount_options for c in containers for m in c.volume_mounts or ()
        ),
        scheduling_group=(spec.scheduling_group.pod_group_name or "")
        if spec.scheduling_group is not None
        else "",
        shown_reason=_shown_reason(pod.status),
    )


def _shown_reason(status: PodStatusWire) -> str | None:
    """The message of the PodScheduled=False condition, the reason a scheduler wrote (None:
    no such condition)."""
    for c in status.conditions or ():
        if c.type == "PodScheduled" and c.status == "False":
            return c.message
    return None


def _resize(status: PodStatusWire) -> ResizeStatus | None:
    """What the kubelet reports of a bound pod's resources; None when it reports none (every
    pending pod, and bound pods of kubelets that predate in-place resize)."""
    containers = tuple(
        ContainerStatusInput(
            c.name,
            actuated=_quantities(c.resources.requests)
            if c.resources is not None and c.resources.requests is not None
            else None,
            allocated=_quantities(c.allocated_resources)
            if c.allocated_resources is not None
            else None,
        )
        for c in (*(status.container_statuses or ()), *(status.init_container_statuses or ()))
        if (c.resources is not None and c.resources.requests is not None)
        or c.allocated_resources is not None
    )
    pod_actuated = (
        _quantities(status.resources.requests)
        if status.resources is not None and status.resources.requests is not None
        else None
    )
    pod_allocated = (
        _quantities(status.allocated_resources) if status.allocated_resources is not None else None
    )
    infeasible = any(
        c.type == "PodResizePending" and c.reason == "Infeasible" for c in status.conditions or ()
    )
    if not (containers or pod_actuated is not None or pod_allocated is not None or infeasible):
        return None
    return ResizeStatus(containers, pod_actuated, pod_allocated, infeasible)


def _pod_claims(
    claims: list[PodClaimWire] | None, statuses: list[PodClaimStatusWire] | None
) -> tuple[PodClaim, ...]:
    """spec.resourceClaims, each with its ResourceClaim's name: given, or for a template the
    one the resource claim controller recorded in status.resourceClaimStatuses ("" until then)."""
    created = {s.name: s.resource_claim_name or "" for s in statuses or ()}
    out = []
    for c in claims or ():
        if c.resource_claim_name:
            out.append(PodClaim(c.name, c.resource_claim_name))
        else:
            template = c.resource_claim_template_name or ""
            out.append(PodClaim(c.name, created.get(c.name, ""), template))
    return tuple(out)


def resource_version(text: str) -> int:
    """A resourceVersion as a number (KEP-5504: a positive decimal integer); 0 when it is not
    one (unknown: nothing is ordered by it)."""
    return int(text) if text.isdigit() else 0


# ---- namespaces, claims and volumes (namespaceSelector and the volume filter) ---------------


class Namespace(msgspec.Struct):
    metadata: ObjectMeta


class ClaimSpecWire(msgspec.Struct, rename="camel"):
    volume_name: str = ""


class ClaimStatusWire(msgspec.Struct):
    phase: str = "Pending"


class Claim(msgspec.Struct):
    metadata: ObjectMeta
    spec: ClaimSpecWire = msgspec.field(default_factory=ClaimSpecWire)
    status: ClaimStatusWire = msgspec.field(default_factory=ClaimStatusWire)


class VolumeNodeAffinityWire(msgspec.Struct):
    required: NodeSelectorWire | None = None


class VolumeSpecWire(msgspec.Struct, rename="camel"):
    node_affinity: VolumeNodeAffinityWire | None = None


class Volume(msgspec.Struct):
    metadata: ObjectMeta
    spec: VolumeSpecWire = msgspec.field(default_factory=VolumeSpecWire)


def namespace_from_obj(ns: Namespace) -> NamespaceInput:
    return NamespaceInput(ns.metadata.name, dict(ns.metadata.labels or {}))


def claim_from_obj(claim: Claim) -> ClaimInput:
    return ClaimInput(
        claim.metadata.namespace or "default",
        claim.metadata.name,
        volume_name=claim.spec.volume_name,
        phase=claim.status.phase,
        deleting=claim.metadata.deletion_timestamp is not None,
    )


def volume_from_obj(volume: Volume) -> VolumeInput:
    affinity = volume.spec.node_affinity
    required = None
    if affinity is not None and affinity.required is not None:
        required = tuple(_node_term(t) for t in affinity.required.node_selector_terms)
    return VolumeInput(volume.metadata.name, required)


_pod_decoder = msgspec.json.Decoder(Pod)
_node_decoder = msgspec.json.Decoder(Node)


def decode_pod(raw: bytes) -> PodInput:
    return pod_from_obj(_pod_decoder.decode(raw))


def decode_node(raw: bytes, resources: Collection[str] | None = None) -> NodeInput:
    return node_from_obj(_node_decoder.decode(raw), resources)


def convert_pod(obj: dict[str, Any]) -> PodInput:
    """From a YAML-loaded dict; raises msgspec.ValidationError naming the field path."""
    return pod_from_obj(msgspec.convert(obj, Pod, strict=False))


def convert_node(obj: dict[str, Any], resources: Collection[str] | None = None) -> NodeInput:
    return node_from_obj(msgspec.convert(obj, Node, strict=False), resources)


def reserved_for_patch(pod: str, uid: str) -> dict[str, Any]:
    """A ResourceClaim status patch (strategic merge, by uid) reserving it for a pod."""
    return {"status": {"reservedFor": [{"resource": "pods", "name": pod, "uid": uid}]}}


def unreserved_for_patch(claim_uid: str, uid: str) -> dict[str, Any]:
    """A ResourceClaim status patch (strategic merge) deleting the pod ``uid`` from its
    ``reservedFor``, as kube-scheduler's DRA Unreserve does; ``claim_uid`` (when known) is the
    precondition that it is still the claim reserved (a recreated claim of the same name is
    left alone: the apiserver refuses the patch). The allocation stays."""
    patch: dict[str, Any] = {"status": {"reservedFor": [{"$patch": "delete", "uid": uid}]}}
    if claim_uid:
        patch["metadata"] = {"uid": claim_uid}
    return patch
