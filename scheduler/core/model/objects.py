"""Kubernetes-shaped inputs of the core, holding only the fields the scheduler reads.

The shell (scheduler/kube's msgspec codecs, or the simulator's YAML reader) turns raw Node, Pod,
Namespace, PersistentVolumeClaim, PersistentVolume and PodDisruptionBudget objects into these
Structs; the core never sees a Kubernetes client type. Quantities stay strings, as the apiserver
sends them, and are parsed in the core so that a malformed value becomes a reason on that one pod
instead of an exception in the shell.

Selectors keep the API's shape (terms ORed, requirements ANDed) so that every filter in
``scheduler.core.filters`` reads like the kube-scheduler plugin it mirrors.
"""

from __future__ import annotations

import msgspec
from msgspec import Struct, field


class Taint(Struct, frozen=True):
    key: str
    effect: str
    value: str = ""


class Toleration(Struct, frozen=True):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes semantics: empty effect matches all effects, Exists ignores the value."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


class Requirement(Struct, frozen=True):
    """One requirement of a selector: ``key operator values``.

    Label selectors use In, NotIn, Exists, DoesNotExist; node selector terms also Gt and Lt.
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()


class LabelSelector(Struct, frozen=True):
    """metav1.LabelSelector: matchLabels and matchExpressions, ANDed. An empty selector matches
    everything; a missing one (``None`` where it is optional) matches nothing."""

    match_labels: dict[str, str] = field(default_factory=dict)
    match_expressions: tuple[Requirement, ...] = ()


class NodeSelectorTerm(Struct, frozen=True):
    """One term of a required node affinity: its expressions and fields are ANDed. A term with
    neither matches no node (the API's rule)."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()


class PreferredNodeTerm(Struct, frozen=True):
    weight: int
    term: NodeSelectorTerm


class PodAffinityTerm(Struct, frozen=True):
    """A (anti-)affinity term against pods: which pods (selector, namespaces) in which domain
    (nodes sharing ``topology_key``'s value). ``namespaces`` empty and ``namespace_selector``
    None mean the pod's own namespace; an empty namespace selector means every namespace.
    ``match_label_keys`` / ``mismatch_label_keys`` are already folded into ``label_selector``
    by the shell at decode time, as the apiserver does at pod creation."""

    topology_key: str
    label_selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None


class WeightedPodAffinityTerm(Struct, frozen=True):
    weight: int
    term: PodAffinityTerm


class Affinity(Struct, frozen=True):
    # None: no required node affinity. A tuple: the terms, ORed (empty matches no node).
    node_required: tuple[NodeSelectorTerm, ...] | None = None
    node_preferred: tuple[PreferredNodeTerm, ...] = ()
    pod_required: tuple[PodAffinityTerm, ...] = ()
    pod_preferred: tuple[WeightedPodAffinityTerm, ...] = ()
    anti_required: tuple[PodAffinityTerm, ...] = ()
    anti_preferred: tuple[WeightedPodAffinityTerm, ...] = ()


class SpreadConstraint(Struct, frozen=True):
    """A topologySpreadConstraint; ``match_label_keys`` is folded into the selector (as the
    apiserver does since v1.33's MatchLabelKeysInPodTopologySpreadSelectorMerge)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"  # Honor | Ignore
    node_taints_policy: str = "Ignore"  # Honor | Ignore


class HostPort(Struct, frozen=True):
    port: int
    protocol: str = "TCP"
    host_ip: str = "0.0.0.0"


class NamespaceInput(Struct, frozen=True):
    name: str
    labels: dict[str, str] = field(default_factory=dict)


class ClaimInput(Struct, frozen=True):
    """A PersistentVolumeClaim: bound once ``volume_name`` is set and the phase is Bound."""

    namespace: str
    name: str
    volume_name: str = ""
    phase: str = "Pending"
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class NetworkTopologyInput(Struct, frozen=True):
    """A Volcano PodGroup's ``spec.networkTopology``: how far apart its members may be, in
    Volcano's tiers (tier 1 nearest the nodes; ``core/gangs/constraints.py`` maps them onto the
    configured levels)."""

    mode: str = "hard"  # hard | soft
    highest_tier_allowed: int | None = None
    highest_tier_name: str | None = None


class PodGroupInput(Struct, frozen=True):
    """A PodGroup object a gang's pods name: scheduler-plugins' (``scheduling.x-k8s.io``),
    Volcano's (``scheduling.volcano.sh``) or the upstream Workload API's (``scheduling.k8s.io``,
    whose ``spec.schedulingPolicy.gang.minCount`` is ``min_member``; a ``basic`` policy is 1);
    each says how many members must run together."""

    group: str  # the CRD's API group: "scheduling.x-k8s.io" or "scheduling.volcano.sh"
    namespace: str
    name: str
    min_member: int = 0
    # scheduler-plugins' spec.scheduleTimeoutSeconds (None: the config's gang.waitTimeoutSeconds)
    schedule_timeout_seconds: int | None = None
    uid: str = ""
    # Its status is someone else's to write (Volcano's, or one scheduler-plugins' controller
    # writes): topo-scheduler leaves it alone (service/podgroups.py; the rule: docs/gangs.md,
    # "PodGroup status").
    status_foreign: bool = False
    # Volcano's spec.networkTopology (None: not said; scheduler-plugins' PodGroups have none).
    network_topology: NetworkTopologyInput | None = None
    # The upstream PodGroup's spec.schedulingConstraints.topology[].key: all its pods in one
    # domain of each key (a required constraint: gangs/constraints.pod_asks).
    topology_keys: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.group}/{self.namespace}/{self.name}"


class TopologyLevel(Struct, frozen=True):
    """One level of a topology hierarchy: a node-label key, with an optional alias by which pods
    may name it too (KAI's and our config's ``alias``)."""

    node_label: str
    alias: str = ""


class TopologyInput(Struct, frozen=True):
    """A cluster-scoped Topology object pods may name: Kueue's (``kueue.x-k8s.io``, v1beta1 or
    v1beta2) or KAI's (``kai.scheduler``): its levels, widest first."""

    kind: str  # as reasons name it: "Kueue" or "KAI"
    name: str
    levels: tuple[TopologyLevel, ...]

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.name}"


class DisruptionBudgetInput(Struct, frozen=True):
    """A policy/v1 PodDisruptionBudget as preemption weighs it (core/preemption/budgets.py): which
    pods of its namespace it covers, how many of them may be disrupted now
    (``status.disruptionsAllowed``) and the pods whose eviction the apiserver already counted
    (``status.disruptedPods``, names)."""

    namespace: str
    name: str
    selector: LabelSelector | None = None
    allowed: int = 0
    disrupted: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class VolumeInput(Struct, frozen=True):
    """A PersistentVolume: its required node affinity (None: usable from any node)."""

    name: str
    node_required: tuple[NodeSelectorTerm, ...] | None = None


class NodeInput(Struct, frozen=True):
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    # status.allocatable as quantity strings, parsed by the core: every resource (cpu, memory,
    # pods, ephemeral-storage, hugepages-*, extended ones). None when the object carries no status
    # at all (a hand-written manifest): then no resource is checked. A status without allocatable
    # (nor capacity, which the apiserver copies into it) offers nothing, as for kube-scheduler.
    allocatable: dict[str, str] | None = None
    # status.declaredFeatures (NodeDeclaredFeatures, filters/features.py).
    declared_features: tuple[str, ...] = ()


class ContainerInput(Struct, frozen=True):
    name: str
    limits: dict[str, str] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=dict)
    # Only meaningful on init containers: "Always" marks a sidecar, which runs beside the app.
    restart_policy: str = ""
    # Ports with a hostPort (the others take nothing on the node).
    host_ports: tuple[HostPort, ...] = ()


class ContainerStatusInput(Struct, frozen=True):
    """What the kubelet reports of one (init) container's resources: ``actuated`` is
    ``status.containerStatuses[].resources.requests``, ``allocated`` its ``allocatedResources``
    (None: not reported)."""

    name: str
    actuated: dict[str, str] | None = None
    allocated: dict[str, str] | None = None


class ResizeStatus(Struct, frozen=True):
    """A bound pod's resources as its kubelet reports them (in-place resize): per container,
    and at pod level (``status.resources.requests``, ``status.allocatedResources``);
    ``infeasible``: condition PodResizePending has reason Infeasible. resources/resize.py."""

    containers: tuple[ContainerStatusInput, ...] = ()
    pod_actuated: dict[str, str] | None = None
    pod_allocated: dict[str, str] | None = None
    infeasible: bool = False


class PodClaim(Struct, frozen=True):
    """One entry of ``spec.resourceClaims``: ``claim`` is the ResourceClaim's name (from
    ``resourceClaimName``, or for a template from ``status.resourceClaimStatuses``; "" while the
    claim of a template has not been created); ``template`` names the template, if any."""

    name: str
    claim: str = ""
    template: str = ""


class PodInput(Struct, frozen=True):
    namespace: str
    name: str
    uid: str = ""
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    phase: str = "Pending"
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    containers: tuple[ContainerInput, ...] = ()
    init_containers: tuple[ContainerInput, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    deleting: bool = False
    # metadata.creationTimestamp (RFC 3339, sorts as text): the queue's FIFO order, as in
    # kube-scheduler's default queue sort.
    created: str = ""
    overhead: dict[str, str] = field(default_factory=dict)
    affinity: Affinity | None = None
    spread: tuple[SpreadConstraint, ...] = ()
    # Names of the PersistentVolumeClaims its volumes use (generic ephemeral volumes included,
    # as "<pod>-<volume>"), in the pod's namespace.
    claims: tuple[str, ...] = ()
    scheduling_gates: tuple[str, ...] = ()
    priority: int = 0
    preemption_policy: str = "PreemptLowerPriority"
    # status.nominatedNodeName: set by the leader while a preemptor's victims leave; a new
    # leader clears one that no live nomination backs.
    nominated_node: str = ""
    # metadata.resourceVersion as a number (0: unknown). Two objects of one pod name are ordered
    # by it: they never coexist, so every version of a newer pod exceeds every version of the
    # one it replaced (the service drops watch news older than what it knows; KEP-5504 made
    # resource versions of one resource comparable). Not a scheduling input.
    version: int = 0
    # spec.resources.requests (limits under them, as the apiserver defaults them): pod-level
    # cpu, memory, hugepages-* replace the containers' sum (resources/accounting.py).
    level_requests: dict[str, str] = field(default_factory=dict)
    # The kubelet's view of a bound pod's resources (None: it reported none).
    resize: ResizeStatus | None = None
    # spec.resourceClaims (DRA, filters/dra.py).
    resource_claims: tuple[PodClaim, ...] = ()
    # status.extendedResourceClaimStatus.resourceClaimName: the claim created for its extended
    # resources backed by a DeviceClass (KEP-5004), once written ("" before).
    extended_claim: str = ""
    # What NodeDeclaredFeatures infers features from (filters/features.py): the actions of every
    # (init) container's restartPolicyRules, hostNetwork, hostUsers, and whether any volume
    # mount sets bindMountOptions.
    restart_rule_actions: tuple[str, ...] = ()
    host_network: bool = False
    host_users: bool | None = None
    bind_mount_options: bool = False
    # spec.schedulingGroup.podGroupName: the upstream PodGroup (scheduling.k8s.io) it belongs to.
    scheduling_group: str = ""
    # The message of its PodScheduled=False condition (None: it shows none): the reason a
    # scheduler last wrote, which the service compares with its own (service/effects.py). Not a
    # scheduling input.
    shown_reason: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def same_as(self, other: PodInput | None) -> bool:
        """The same pod object, whatever its version and the reason it shows (a status write
        of ours changes only those)."""
        return other is not None and self == msgspec.structs.replace(
            other, version=self.version, shown_reason=self.shown_reason
        )

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")
