"""ClusterState: which node has which GPUs, and which pod holds which of them.

It is the core's snapshot, fed by the shell (watch events in the live scheduler, manifests in the
simulator) and read by the placement functions. It does no I/O and never reads a clock.

Speed comes from an equivalence-class index. Two GPU nodes with the same interned topology, vendor,
device count, free-GPU mask and allocatable headroom are interchangeable for a whole-GPU pod except
for their names, so ranking a pod against 5,000 nodes means ranking at most a few hundred classes,
each with a memoised best set, and then taking the first name in the winning class (a lazily
cleaned heap).

Allocatable headroom: per configured whole-GPU resource name, the node's status.allocatable minus
what the pods held there ask for of it (the kubelet's effective request of every running pod, ours
or not, and the placements and reservations of ours), capped at the free GPU count (more can never
be used, and the cap keeps nodes whose allocatable is simply their GPU count in one class). None
for a node whose object has no status (hand-written manifests): no check.

Every pod bound to a node, ours or not, GPU or not, is also a ``PodRecord`` in ``index``: the
Kubernetes filters (``filters``) read its labels, and each node keeps the sums NodeResourcesFit and
NodePorts need (requests of every checked resource, pod count, host ports), charged and uncharged
with the record.

Tentative changes (a gang being planned, a group checked on one node) run inside ``tentative()``, a
scoped transaction like KAI's statement: its undo log exists only while the scope is open, and the
scope always rolls back on exit, so a plan leaves no trace and nothing grows between decisions.

Nominations (issue 14's preemption, ``preemption.py``): while a preemptor's victims terminate,
the GPUs (and the cpu, memory... on the node) planned for it are held for it. A nomination is
not a holding: no pod holds it, the store never sees it as a claim. It is charged to its node as
a mask of GPUs that ``free_mask`` leaves out (and shared placement skips), plus the preemptor's
requests, so every pod is kept off it by the ordinary rules and the class index stays right.
``decide`` lifts, inside a tentative scope (``lifted_nominations``), the nominations that do not
bind the unit it decides: its own, and those of lower priority than it (kube-scheduler's rule
for nominated pods). Nominations are undone by ``tentative()`` like holdings and records.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

import msgspec
from msgspec import Struct

from ..formats import allocated as allocated_format
from ..formats import assignment as assignment_format
from ..formats import devices as devices_format
from ..model.decisions import Placement, Share
from ..model.gangsources import best_known
from ..model.names import ALLOCATED_ANNOTATION, ASSIGNMENT_ANNOTATION, DEVICES_ANNOTATION
from ..model.objects import (
    ClaimInput,
    DeviceClassInput,
    DisruptionBudgetInput,
    NamespaceInput,
    NodeInput,
    PodGroupInput,
    PodInput,
    ResourceClaimInput,
    TopologyInput,
    VolumeInput,
)
from ..resources.accounting import Amounts, extended_resources, node_allocatable
from ..resources.gpusets import Topology
from ..resources.inventory import Inventory, InventoryError, read_inventory
from ..resources.ports import PortUse, charge_ports, host_ports
from ..resources.requests import gpu_resource_names, kubelet_request, parse_count
from ..resources.resize import bound_requests
from ..settings import CoreSettings
from .domains import Hierarchy, Path
from .fragmentation import Profile, Shape, request_class
from .podindex import PodIndex, PodRecord


class CardUse(msgspec.Struct):
    """Shared use of one card: the sum of its shared pods' slices."""

    core: int = 0
    memory_mib: int = 0
    sgpu: int = 0
    pods: int = 0
    qos: str | None = None  # the sGPU QoS policy the card serves while it has sGPU pods
    qos_pods: int = 0


class Holding(msgspec.Struct, frozen=True):
    """What one pod holds on one node."""

    pod: str
    node: str
    whole: int  # mask of whole GPUs
    shares: tuple[Share, ...] = ()
    gang: str | None = None
    replicas: int = 0
    uid: str = ""
    # Whole GPUs per resource name that the kubelet admits the pod against (its effective
    # request, requests.kubelet_request): charged to the node's allocatable, whether or not a
    # mask of GPUs could be chosen for it.
    resources: tuple[tuple[str, int], ...] = ()
    # The mask is our guess (a pod bound by another scheduler, without our annotations): its
    # count is what matters, so it is chosen again (rule 1 over the free GPUs) whenever it no
    # longer fits the node, e.g. when the node or its inventory arrives after the pod.
    guessed: bool = False


class Nominated(Struct, frozen=True, kw_only=True):
    """What is held on a node for a preemptor while its victims terminate (preemption.py)."""

    pod: str  # the preemptor's namespace/name
    uid: str = ""
    priority: int  # its spec.priority: pods of this priority or lower cannot take what it holds
    node: str  # the node nominated for it (its status.nominatedNodeName)
    devices: tuple[int, ...] = ()  # whole GPUs (or shared cards) held for it, by index
    requests: Amounts = ()  # its cpu, memory... (filters.resources' units), held on the node


class NodeState:
    __slots__ = (
        "allocatable",
        "cards",
        "error",
        "frag_shape",
        "healthy",
        "inventory",
        "name",
        "node",
        "nominated",
        "pod_count",
        "pods",
        "ports",
        "requested",
        "resources",
        "used",
        "whole",
    )

    def __init__(
        self,
        node: NodeInput,
        inventory: Inventory | None,
        error: str | None,
        allocatable: tuple[int, ...] | None = None,
    ) -> None:
        self.name = node.name
        self.node = node
        self.inventory = inventory
        # The healthy GPUs as a mask, read by every free_mask: the inventory never changes
        # for a NodeState (a new node object makes a new one).
        self.healthy = inventory.healthy_mask if inventory is not None else 0
        self.error = error
        self.whole = 0  # GPUs held whole
        self.cards: dict[int, CardUse] = {}  # shared use by card index
        self.pods: set[str] = set()
        self.nominated = 0  # GPUs held for nominated preemptors (ClusterState.nominate)
        # Per whole-GPU resource name (ClusterState.resources order): status.allocatable, None
        # when the node object has no status; and what the held pods ask for of each.
        self.allocatable = allocatable
        self.used = [0] * (len(allocatable) if allocatable is not None else 0)
        # Every other checked resource (cpu, memory, pods, extended...) of status.allocatable in
        # kube-scheduler's units; None without a status. ``requested``, ``pod_count`` and
        # ``ports`` sum the records of the pods on the node (filters.resources, filters.node).
        self.resources: dict[str, int] | None = None
        self.requested: dict[str, int] = {}
        self.pod_count = 0
        self.ports: PortUse = {}
        # fragmentation.shape_of's answer, until the next charge changes the node.
        self.frag_shape: Shape | None = None

    @property
    def shared_mask(self) -> int:
        mask = 0
        for index, use in self.cards.items():
            if use.pods:
                mask |= 1 << index
        return mask

    @property
    def free_mask(self) -> int:
        """Healthy GPUs held by nobody, whole or shared, nor nominated for a preemptor: what a
        whole-GPU pod can take."""
        taken = self.whole | self.nominated
        if self.cards:
            taken |= self.shared_mask
        return self.healthy & ~taken

    @property
    def total(self) -> int:
        return 0 if self.inventory is None else len(self.inventory.devices)

    def headroom(self) -> tuple[int, ...] | None:
        """Allocatable minus what is held, per resource, capped at the free GPU count."""
        if self.allocatable is None:
            return None
        free = self.free_mask.bit_count()
        # min(free, max(0, a - u)) per resource, spelled out: every hold and release asks.
        return tuple(
            [
                free if (left := a - u) > free else left if left > 0 else 0
                for a, u in zip(self.allocatable, self.used, strict=True)
            ]
        )


# topology, vendor, device count, free mask, allocatable headroom (NodeState.headroom)
ClassKey = tuple[Topology, str, int, int, tuple[int, ...] | None]
# Whole GPUs asked per resource, as (index in ClusterState.resources, count), by index.
Demand = tuple[tuple[int, int], ...]


class NodeClass:
    """Nodes that are interchangeable for a whole-GPU pod, with the smallest name at hand."""

    __slots__ = ("_heap", "key", "memo", "names")

    def __init__(self, key: ClassKey) -> None:
        self.key = key
        self.names: set[str] = set()
        self._heap: list[str] = []
        # What placement derives from the key alone (its rank for k GPUs), kept while the class
        # lives: the key never changes, a node whose GPUs change moves to another class.
        self.memo: dict[tuple[object, ...], object] = {}

    def add(self, name: str) -> None:
        self.names.add(name)
        heapq.heappush(self._heap, name)
        if len(self._heap) > 2 * len(self.names) + 64:
            self._heap = sorted(self.names)

    def first(self) -> str:
        heap = self._heap
        while heap[0] not in self.names:
            heapq.heappop(heap)
        return heap[0]

    def in_order(self) -> list[str]:
        return sorted(self.names)


class DomainIndex:
    """One hierarchy's view of the GPU nodes: per path (domains.Hierarchy.path), its nodes and
    how many of them are in each node class, kept as nodes change class (``_index``), so a
    gang counts what fits per domain over a few hundred paths, not every node."""

    __slots__ = ("classes", "names", "where")

    def __init__(self) -> None:
        self.names: dict[Path, set[str]] = {}
        self.classes: dict[Path, dict[ClassKey, int]] = {}
        self.where: dict[str, Path] = {}

    def add(self, name: str, path: Path, key: ClassKey) -> None:
        self.where[name] = path
        self.names.setdefault(path, set()).add(name)
        counts = self.classes.setdefault(path, {})
        counts[key] = counts.get(key, 0) + 1

    def discard(self, name: str, key: ClassKey) -> None:
        path = self.where.pop(name)
        names = self.names[path]
        names.discard(name)
        counts = self.classes[path]
        counts[key] -= 1
        if not counts[key]:
            del counts[key]
        if not names:
            del self.names[path], self.classes[path]


class ClusterState:
    def __init__(self, settings: CoreSettings | None = None) -> None:
        self.settings = settings or CoreSettings()
        # The whole-GPU resource names in a fixed order: NodeState.allocatable/used and the
        # class key's headroom are tuples in this order.
        self.resources: tuple[str, ...] = tuple(sorted(self.settings.gpu_resources))
        self.resource_index = {r: i for i, r in enumerate(self.resources)}
        # Whole and shared GPU resource names: charged by the GPU rules, not NodeResourcesFit.
        self.gpu_names = gpu_resource_names(self.settings)
        self.nodes: dict[str, NodeState] = {}
        self.holdings: dict[str, Holding] = {}
        # The request class of every pod held on a known GPU node: the target workload the
        # fragmentation measure weighs placements by (fragmentation.py).
        self.profile = Profile(self.settings.fragmentation)
        # Holdings whose node is not known yet (a pod event that beat its node's event).
        self._orphans: dict[str, Holding] = {}
        self.classes: dict[ClassKey, NodeClass] = {}
        # The same classes per vendor, in the same order: placement ranks one vendor's.
        self._vendor_classes: dict[str, dict[ClassKey, NodeClass]] = {}
        self._class_of: dict[str, ClassKey] = {}
        # The open tentative scope's undo log; None outside one (see ``tentative``).
        self._undo: list[tuple[str, Holding | PodRecord | Nominated | str]] | None = None
        self._replaying = False
        # Every pod bound or assumed on a node, for the Kubernetes filters; and which are where
        # (also for nodes not known yet: their records are charged when the node arrives).
        self.index = PodIndex()
        self._on_node: dict[str, set[str]] = {}
        # How many nodes carry each label key: a gang whose members repel each other on a key
        # every node has cannot share any node, which is known without scanning them.
        self.label_keys: dict[str, int] = {}
        self.namespaces: dict[str, NamespaceInput] = {}
        self.claims: dict[str, ClaimInput] = {}
        self.volumes: dict[str, VolumeInput] = {}
        # PodDisruptionBudgets by namespace/name: which victims preemption would rather spare.
        self.budgets: dict[str, DisruptionBudgetInput] = {}
        # DRA (filters/dra.py): ResourceClaims by namespace/name, DeviceClasses by name, and
        # the extended resources the DeviceClasses back (resource -> class).
        self.resource_claims: dict[str, ResourceClaimInput] = {}
        self.device_classes: dict[str, DeviceClassInput] = {}
        self.dra_extended: dict[str, str] = {}
        # PodGroup objects by PodGroupInput.key (gang sizes for pods that name one).
        self.pod_groups: dict[str, PodGroupInput] = {}
        # Bound gang members: gang key -> pod keys (for "k of N present" and conflicts).
        self.gang_bound: dict[str, set[str]] = {}
        # Nominations by preemptor pod key, and which are on each node (also nodes not known
        # yet: charged when the node arrives).
        self._nominations: dict[str, Nominated] = {}
        self._nominated_on: dict[str, set[str]] = {}
        # Kueue and KAI Topology objects by TopologyInput.key (issue 21), and each node's path
        # in each hierarchy asked about (dropped with the node's object, or all of them when a
        # Topology changes: there are a few hierarchies, not one per pod).
        self.topologies: dict[str, TopologyInput] = {}
        self._paths: dict[Hierarchy, dict[str, Path]] = {}
        self._domains: dict[Hierarchy, DomainIndex] = {}

    # ---- nodes -----------------------------------------------------------------------------

    def set_node(self, node: NodeInput) -> str | None:
        """Add or refresh a node. Returns a warning when its inventory or its allocatable
        amount of a whole-GPU resource is malformed (several are joined by "; ")."""
        warnings: list[str] = []
        try:
            inventory = read_inventory(node)
            error = None
        except InventoryError as exc:
            inventory, error = None, str(exc)
            warnings.append(f"{exc}; node excluded from GPU scheduling")
        allocatable = self._read_allocatable(node, warnings)
        old = self.nodes.get(node.name)
        state = NodeState(node, inventory, error, allocatable)
        if node.allocatable is not None:
            state.resources = node_allocatable(node.allocatable, self.gpu_names)
        for key in self._on_node.get(node.name, ()):
            self._charge_record(state, self.index.records[key], +1)
        for key in self._nominated_on.get(node.name, ()):
            self._charge_nomination(state, self._nominations[key], +1)
        self._unindex(node.name)
        for paths in self._paths.values():
            paths.pop(node.name, None)
        if old is not None:
            self._count_labels(old.node, -1)
        self._count_labels(node, +1)
        self.nodes[node.name] = state
        pods = set(old.pods) if old else set()
        pods |= {k for k, h in self._orphans.items() if h.node == node.name}
        guessed = []
        for key in sorted(pods):
            holding = self.holdings.get(key) or self._orphans.pop(key)
            if holding.guessed:
                guessed.append(holding)
                continue
            self.holdings[key] = holding
            self._charge(state, holding, +1)
        # Guessed masks last, so that they are chosen among the GPUs nobody else holds.
        for holding in guessed:
            holding = self._guess(state, holding)
            self.holdings[holding.pod] = holding
            self._charge(state, holding, +1)
        self._index(state)
        for key in state.pods | self._on_node.get(node.name, set()):
            self._reprofile(key)
        return "; ".join(warnings) or None

    def _read_allocatable(self, node: NodeInput, warnings: list[str]) -> tuple[int, ...] | None:
        """The node's allocatable count of each whole-GPU resource; a malformed one is 0 (the
        node does not offer that resource) with a warning naming node and field."""
        if node.allocatable is None:
            return None
        counts = []
        for resource in self.resources:
            text = node.allocatable.get(resource)
            count = 0
            if text is not None:
                try:
                    count = parse_count(text)
                except ValueError as exc:
                    warnings.append(
                        f"node {node.name}: status.allocatable[{resource}]: {exc}; "
                        f"the node is treated as not offering {resource}"
                    )
            counts.append(count)
        return tuple(counts)

    def demand(self, resources: Iterable[tuple[str, int]]) -> Demand:
        """Whole GPUs per resource name (several requests are summed) as a Demand."""
        total: dict[int, int] = {}
        for resource, n in resources:
            index = self.resource_index.get(resource)
            if index is not None and n:
                total[index] = total.get(index, 0) + n
        return tuple(sorted(total.items()))

    def remove_node(self, name: str) -> None:
        state = self.nodes.pop(name, None)
        if state is None:
            return
        self._unindex(name)
        for paths in self._paths.values():
            paths.pop(name, None)
        self._count_labels(state.node, -1)
        for key in state.pods:
            holding = self.holdings.pop(key, None)
            if holding is not None:
                self._orphans[key] = holding
        for key in state.pods | self._on_node.get(name, set()):
            self._reprofile(key)

    # ---- pods ------------------------------------------------------------------------------

    def add_bound_pod(self, pod: PodInput) -> str | None:
        """Record what a bound pod holds, from its annotations. Returns a warning, if any."""
        if not pod.node_name or pod.finished:
            self.remove_pod(pod.key)
            return None
        gang = best_known(pod, self.pod_groups)  # once, for the record and the holding
        gang_key, minimum = (gang.key, gang.minimum) if gang is not None else (None, 0)
        self.put_record(record_of(pod, pod.node_name, self.gpu_names, gang_key, minimum))
        try:
            holding = self._holding_from_annotations(pod, gang_key, minimum)
        except ValueError as exc:
            return f"pod {pod.key}: {exc}; its GPUs are not tracked"
        if holding is None:
            self._drop_holding(pod.key)
            return None
        warning = None
        try:
            allocated = self._allocated_mask(pod)
        except ValueError as exc:  # a bad report loses nothing: the assignment still stands
            allocated = None
            warning = f"pod {pod.key}: {exc}; the assignment's GPUs are tracked instead"
        if allocated is not None and holding.whole:
            holding = msgspec.structs.replace(holding, whole=allocated)
        elif allocated and holding.guessed:  # the device plugin says which: no guess needed
            holding = msgspec.structs.replace(holding, whole=allocated, guessed=False)
        self._drop_holding(pod.key)
        return self.hold(holding) or warning

    def remove_pod(self, key: str) -> None:
        """The pod left its node (deleted, finished): its holding and its record go."""
        self._drop_holding(key)
        self.drop_record(key)

    def _drop_holding(self, key: str) -> None:
        orphan = self._orphans.pop(key, None)
        if orphan is not None and orphan.gang:  # its node left first: no release to do it
            self._leave_gang(orphan.gang, key)
        holding = self.holdings.get(key)
        if holding is not None:
            self.release(holding)

    def held(self, key: str) -> Holding | None:
        """What the pod holds: on its node, or waiting for its node to (re)appear."""
        return self.holdings.get(key) or self._orphans.get(key)

    def _leave_gang(self, gang: str, key: str) -> None:
        members = self.gang_bound.get(gang)
        if members is not None:
            members.discard(key)
            if not members:
                del self.gang_bound[gang]

    def forget(self, key: str) -> None:
        """Undo an assumed placement (the bind failed): its holding and its record go."""
        self.remove_pod(key)

    # ---- records (every pod on a node, for the Kubernetes filters) -----------------------

    def put_record(self, record: PodRecord) -> None:
        previous = self.index.records.get(record.key)
        if previous == record:
            return
        self._log(("record", previous or record.key))
        if previous is not None:
            self._unrecord(previous)
        self.index.add(record)
        self._on_node.setdefault(record.node, set()).add(record.key)
        node = self.nodes.get(record.node)
        if node is not None:
            self._charge_record(node, record, +1)
        self._reprofile(record.key)

    def drop_record(self, key: str) -> None:
        previous = self.index.records.get(key)
        if previous is None:
            return
        self._log(("record", previous))
        self._unrecord(previous)

    def _unrecord(self, record: PodRecord) -> None:
        self.index.remove(record.key)
        keys = self._on_node.get(record.node)
        if keys is not None:
            keys.discard(record.key)
            if not keys:
                del self._on_node[record.node]
        node = self.nodes.get(record.node)
        if node is not None:
            self._charge_record(node, record, -1)
        self._reprofile(record.key)

    def _charge_record(self, node: NodeState, record: PodRecord, sign: int) -> None:
        node.frag_shape = None
        node.pod_count += sign
        requested = node.requested
        for resource, n in record.requests:
            left = requested.get(resource, 0) + sign * n
            if left:
                requested[resource] = left
            else:
                del requested[resource]
        if record.host_ports:
            charge_ports(node.ports, record.host_ports, sign)

    def _count_labels(self, node: NodeInput, sign: int) -> None:
        counts = self.label_keys
        for key in node.labels:
            n = counts.get(key, 0) + sign
            if n:
                counts[key] = n
            else:
                del counts[key]

    def on_every_node(self, key: str) -> bool:
        return self.label_keys.get(key, 0) == len(self.nodes)

    def set_namespace(self, namespace: NamespaceInput) -> None:
        self.namespaces[namespace.name] = namespace

    def remove_namespace(self, name: str) -> None:
        self.namespaces.pop(name, None)

    def set_claim(self, claim: ClaimInput) -> None:
        self.claims[claim.key] = claim

    def remove_claim(self, key: str) -> None:
        self.claims.pop(key, None)

    def set_volume(self, volume: VolumeInput) -> None:
        self.volumes[volume.name] = volume

    def remove_volume(self, name: str) -> None:
        self.volumes.pop(name, None)

    def set_topology(self, topology: TopologyInput) -> None:
        self.topologies[topology.key] = topology
        self._forget_hierarchies()

    def remove_topology(self, key: str) -> None:
        if self.topologies.pop(key, None) is not None:
            self._forget_hierarchies()

    def _forget_hierarchies(self) -> None:
        """A Topology object changed: the hierarchies built from the old one are not asked
        about again (they are rebuilt when asked)."""
        self._paths.clear()
        self._domains.clear()

    def domain_index(self, hierarchy: Hierarchy) -> DomainIndex:
        """The hierarchy's DomainIndex, built on first use and then kept up to date."""
        index = self._domains.get(hierarchy)
        if index is None:
            index = self._domains[hierarchy] = DomainIndex()
            for name, key in self._class_of.items():
                index.add(name, self.path_of(hierarchy, name), key)
        return index

    def path_of(self, hierarchy: Hierarchy, name: str) -> Path:
        """The node's path in the hierarchy (domains.Hierarchy.path), remembered per node."""
        paths = self._paths.setdefault(hierarchy, {})
        found = paths.get(name)
        if found is None:
            found = paths[name] = hierarchy.path(self.nodes[name].node)
        return found

    def set_budget(self, budget: DisruptionBudgetInput) -> None:
        self.budgets[budget.key] = budget

    def remove_budget(self, key: str) -> None:
        self.budgets.pop(key, None)

    def set_resource_claim(self, claim: ResourceClaimInput) -> None:
        self.resource_claims[claim.key] = claim

    def remove_resource_claim(self, key: str) -> None:
        self.resource_claims.pop(key, None)

    def set_device_class(self, device_class: DeviceClassInput) -> None:
        self.device_classes[device_class.name] = device_class
        self.dra_extended = extended_resources(self.device_classes.values())

    def remove_device_class(self, name: str) -> None:
        if self.device_classes.pop(name, None) is not None:
            self.dra_extended = extended_resources(self.device_classes.values())

    def set_pod_group(self, group: PodGroupInput) -> None:
        self.pod_groups[group.key] = group

    def remove_pod_group(self, key: str) -> None:
        self.pod_groups.pop(key, None)

    def hold(self, holding: Holding) -> str | None:
        """Charge a holding to its node (assume). Returns a warning on a double claim.

        A pod holds one thing at a time: its previous holding, if any, is released first.
        """
        previous = self.holdings.get(holding.pod)
        if previous is not None:
            self.release(previous)
        self._orphans.pop(holding.pod, None)
        state = self.nodes.get(holding.node)
        if holding.guessed and state is not None:
            holding = self._guess(state, holding)
        self._log(("hold", holding))
        if holding.gang:
            self.gang_bound.setdefault(holding.gang, set()).add(holding.pod)
        if state is None:
            self._orphans[holding.pod] = holding
            return None
        warning = None
        clash = holding.whole & (state.whole | state.shared_mask)
        if clash:
            others = sorted(
                k
                for k in state.pods
                if (self.holdings[k].whole | _share_mask(self.holdings[k])) & clash
            )
            gpus = ",".join(str(i) for i in bits(clash))
            warning = (
                f"node {state.name}: GPU {gpus} claimed by {holding.pod} and by {', '.join(others)}"
            )
        self.holdings[holding.pod] = holding
        self._unindex(state.name)
        self._charge(state, holding, +1)
        self._index(state)
        self._reprofile(holding.pod)
        return warning

    def release(self, holding: Holding) -> None:
        """Undo a holding (forget, or the pod finished or was deleted)."""
        if self.holdings.get(holding.pod) != holding:
            return
        self._log(("release", holding))
        del self.holdings[holding.pod]
        self._reprofile(holding.pod)
        if holding.gang:
            self._leave_gang(holding.gang, holding.pod)
        state = self.nodes.get(holding.node)
        if state is None:
            return
        self._unindex(state.name)
        self._charge(state, holding, -1)
        self._index(state)

    def apply(self, placement: Placement, pod: PodInput, replicas: int = 0) -> None:
        """Assume a placement the core decided (before the shell has bound it): its GPUs, and
        the pod's record on the node for the Kubernetes filters. A nomination of the pod is used
        up: it holds what it was placed on now (a forget does not bring the nomination back)."""
        self.unnominate(placement.pod)
        # The record first: the profile reads the pod's cpu request from it when it is held.
        self.put_record(record_of(pod, placement.node, self.gpu_names, placement.gang, replicas))
        self.hold(holding_of(placement, replicas))

    @contextmanager
    def tentative(self) -> Iterator[None]:
        """A scope whose changes are always undone on exit (KAI's statement): gang planning
        places members here to see what the previous ones took, then returns a decision and
        leaves the state exactly as it was. Scopes nest; the undo log lives only while the
        outermost one is open."""
        outer = self._undo is None
        if outer:
            self._undo = []
        assert self._undo is not None
        mark = len(self._undo)
        try:
            yield
        finally:
            self._rollback(mark)
            if outer:
                self._undo = None

    def _log(self, entry: tuple[str, Holding | PodRecord | Nominated | str]) -> None:
        if self._undo is not None and not self._replaying:
            self._undo.append(entry)

    def _rollback(self, mark: int) -> None:
        undo = self._undo
        assert undo is not None
        self._replaying = True
        try:
            while len(undo) > mark:
                op, item = undo.pop()
                if op == "nomination":  # put back what it was: a nomination, or none
                    if isinstance(item, Nominated):
                        self.nominate(item)
                    else:
                        assert isinstance(item, str)
                        self.unnominate(item)
                elif op == "hold":
                    assert isinstance(item, Holding)
                    self.release(item)
                elif op == "release":
                    assert isinstance(item, Holding)
                    self.hold(item)
                elif isinstance(item, PodRecord):  # a record replaced or dropped: put it back
                    self.put_record(item)
                else:  # a record added where there was none
                    assert isinstance(item, str)
                    self.drop_record(item)
        finally:
            self._replaying = False

    # ---- nominations (preemption.py) -------------------------------------------------------

    def nominate(self, nomination: Nominated) -> None:
        """Hold ``nomination.devices`` (and its requests) on its node for the preemptor while
        its victims terminate; a preemptor has one nomination, the last one given."""
        previous = self._nominations.get(nomination.pod)
        if previous == nomination:
            return
        self._log(("nomination", previous or nomination.pod))
        if previous is not None:
            self._unnominate(previous)
        self._nominations[nomination.pod] = nomination
        self._nominated_on.setdefault(nomination.node, set()).add(nomination.pod)
        state = self.nodes.get(nomination.node)
        if state is not None:
            self._unindex(state.name)
            self._charge_nomination(state, nomination, +1)
            self._index(state)

    def unnominate(self, pod: str) -> None:
        """The preemptor bound, left, or gave its nomination up: what it held is free again."""
        previous = self._nominations.get(pod)
        if previous is None:
            return
        self._log(("nomination", previous))
        self._unnominate(previous)

    def _unnominate(self, nomination: Nominated) -> None:
        del self._nominations[nomination.pod]
        keys = self._nominated_on[nomination.node]
        keys.discard(nomination.pod)
        if not keys:
            del self._nominated_on[nomination.node]
        state = self.nodes.get(nomination.node)
        if state is not None:
            self._unindex(state.name)
            self._charge_nomination(state, nomination, -1)
            self._index(state)

    def _charge_nomination(self, state: NodeState, nomination: Nominated, sign: int) -> None:
        mask = 0
        for key in self._nominated_on.get(state.name, ()):
            for index in self._nominations[key].devices:
                mask |= 1 << index
        state.nominated = mask
        held = PodRecord(
            key=nomination.pod, namespace="", node=state.name, requests=nomination.requests
        )
        self._charge_record(state, held, sign)

    @property
    def nominations(self) -> Mapping[str, Nominated]:
        """The nominations by preemptor pod key (read-only)."""
        return MappingProxyType(self._nominations)

    @contextmanager
    def lifted_nominations(self, pods: Iterable[str], priority: int) -> Iterator[None]:
        """A scope in which the nominations that do not bind a unit of these pods and this
        priority are lifted (tentatively): its own, and those of lower priority than it. A pod
        of equal or lower priority stays off a nomination; a higher one ignores it, as
        kube-scheduler treats nominated pods."""
        if not self._nominations:
            yield
            return
        mine = set(pods)
        lift = sorted(
            key for key, n in self._nominations.items() if key in mine or n.priority < priority
        )
        if not lift:
            yield
            return
        with self.tentative():
            for key in lift:
                self.unnominate(key)
            yield

    # ---- queries ---------------------------------------------------------------------------

    def sizes(self) -> dict[str, int]:
        """The size of each per-pod structure (for tests and the soak benchmark): after pods
        come and go, each is back where it was."""
        return {
            "holdings": len(self.holdings),
            "orphans": len(self._orphans),
            "undo": len(self._undo) if self._undo is not None else 0,
            "on_node": len(self._on_node),
            "on_node_pods": sum(len(keys) for keys in self._on_node.values()),
            "node_pods": sum(len(state.pods) for state in self.nodes.values()),
            "gang_bound": len(self.gang_bound),
            "gang_bound_pods": sum(len(keys) for keys in self.gang_bound.values()),
            "nominations": len(self._nominations),
            "nominated_on": sum(len(keys) for keys in self._nominated_on.values()),
            "nominated_gpus": sum(s.nominated.bit_count() for s in self.nodes.values()),
            "profile": len(self.profile),
            **{f"index.{name}": n for name, n in self.index.sizes().items()},
        }

    def gpu_nodes(self) -> Iterator[NodeState]:
        return (s for s in self.nodes.values() if s.inventory is not None)

    def class_of(self, name: str) -> NodeClass | None:
        """The node's class (None: not a GPU node)."""
        key = self._class_of.get(name)
        return None if key is None else self.classes[key]

    def iter_classes(self, vendor: str) -> Iterator[NodeClass]:
        return iter(self._vendor_classes.get(vendor, {}).values())

    # ---- internals -------------------------------------------------------------------------

    def _index(self, state: NodeState) -> None:
        inv = state.inventory
        if inv is None:
            return
        key: ClassKey = (
            inv.topology,
            inv.vendor,
            len(inv.devices),
            state.free_mask,
            state.headroom(),
        )
        cls = self.classes.get(key)
        if cls is None:
            cls = self.classes[key] = NodeClass(key)
            self._vendor_classes.setdefault(inv.vendor, {})[key] = cls
        cls.add(state.name)
        self._class_of[state.name] = key
        for hierarchy, index in self._domains.items():
            index.add(state.name, self.path_of(hierarchy, state.name), key)

    def _unindex(self, name: str) -> None:
        key = self._class_of.pop(name, None)
        if key is None:
            return
        cls = self.classes[key]
        cls.names.discard(name)
        if not cls.names:
            del self.classes[key]
            same_vendor = self._vendor_classes[key[1]]
            del same_vendor[key]
            if not same_vendor:
                del self._vendor_classes[key[1]]
        for index in self._domains.values():
            index.discard(name, key)

    def _charge(self, state: NodeState, holding: Holding, sign: int) -> None:
        state.frag_shape = None
        if sign > 0:
            state.whole |= holding.whole
            state.pods.add(holding.pod)
        else:
            state.whole &= ~holding.whole
            state.pods.discard(holding.pod)
        if state.allocatable is not None:
            for resource, n in holding.resources:
                index = self.resource_index.get(resource)
                if index is not None:
                    state.used[index] += sign * n
        for share in holding.shares:
            use = state.cards.setdefault(share.index, CardUse())
            use.core += sign * share.core
            use.memory_mib += sign * share.memory_mib
            use.sgpu += sign * share.sgpu
            use.pods += sign
            if share.qos:
                use.qos_pods += sign
                use.qos = share.qos if use.qos_pods else None
            if not use.pods:
                del state.cards[share.index]

    def _reprofile(self, key: str) -> None:
        """The pod's request class in the target workload, from what is known of it now (asked
        wherever its record, its holding or its node comes or goes): its GPUs when it holds
        some on a known node; else, when it is recorded on a known GPU node asking for cpu, a
        class of no cards (its cpu competes with the GPU pods', as in FGD's target workload);
        else none. Whoever bound it, so a restart reads the same. Not in a tentative scope: it
        is undone on exit, and the profile stays as it was (gang planning places and takes back
        every member of every candidate domain)."""
        if self._undo is not None:
            return
        record = self.index.records.get(key)
        cpu = next((n for r, n in record.requests if r == "cpu"), 0) if record else 0
        holding = self.holdings.get(key)
        found = None
        if holding is not None:
            found = request_class(cpu, holding.whole.bit_count(), (s.core for s in holding.shares))
        if found is None and record is not None and cpu > 0:
            node = self.nodes.get(record.node)
            if node is not None and node.inventory is not None:
                found = (cpu, 0, 0)
        self.profile.charge(key, found)

    def _holding_from_annotations(
        self, pod: PodInput, gang_key: str | None, replicas: int
    ) -> Holding | None:
        raw_assignment = pod.annotations.get(ASSIGNMENT_ANNOTATION)
        raw_devices = pod.annotations.get(DEVICES_ANNOTATION)
        shares: tuple[Share, ...] = ()
        if raw_assignment:
            shares = tuple(assignment_format.decode(raw_assignment).shares)
        whole = 0
        if raw_devices is not None and raw_devices.strip():
            whole = devices_format.mask(devices_format.decode(raw_devices))
        elif not shares:
            return self._unannotated(pod, gang_key, replicas)
        resources = kubelet_request(pod, self.settings)
        return Holding(
            pod.key, pod.node_name, whole, shares, gang_key, replicas, pod.uid, resources
        )

    def _allocated_mask(self, pod: PodInput) -> int | None:
        """The GPUs the node's device plugin reports the pod's containers really got, as a mask
        (None when it has not reported, or the node's inventory is not known yet: then the
        assignment stands until the next event for this pod)."""
        raw = pod.annotations.get(ALLOCATED_ANNOTATION)
        state = self.nodes.get(pod.node_name)
        if not raw or state is None or state.inventory is None:
            return None
        record = allocated_format.decode(raw)
        by_uuid = {d.uuid: d.index for d in state.inventory.devices}
        mask = 0
        for pos, container in enumerate(record.containers):
            for uuid in container.uuids:
                if uuid not in by_uuid:
                    raise ValueError(
                        f"annotation {ALLOCATED_ANNOTATION}: containers[{pos}].uuids: "
                        f"{uuid!r} is not a GPU of node {pod.node_name}"
                    )
                mask |= 1 << by_uuid[uuid]
        return mask

    def _unannotated(self, pod: PodInput, gang: str | None, replicas: int) -> Holding | None:
        """A bound pod with GPUs but none of our annotations (bound by another scheduler).

        What the kubelet admitted it against is real whatever it looks like to us (a request
        parse_request refuses, a node or inventory not known yet), so it is charged in full to
        the node's allocatable. Which GPUs the node gave it is not known: its mask is guessed
        (rule 1 over the free GPUs, in ``hold`` and again whenever the node changes), so the
        count stays right, which is what keeps us from over-committing the node. A pod already
        held keeps its guess while that still fits.
        """
        resources = kubelet_request(pod, self.settings)
        if not resources:
            return None
        previous = self.holdings.get(pod.key)
        whole = 0
        if previous is not None and previous.guessed and previous.node == pod.node_name:
            whole = previous.whole
        return Holding(
            pod.key, pod.node_name, whole, (), gang, replicas, pod.uid, resources, guessed=True
        )

    def _guess(self, state: NodeState, holding: Holding) -> Holding:
        """A guessed holding's mask on ``state`` (charged with everything else on it): its own
        while that still fits, else rule 1's best set of its GPUs of the node's vendor among
        the free ones (as many as are free, if fewer: each is in use by someone)."""
        inv = state.inventory
        whole = 0
        if inv is not None:
            vendor = inv.vendor
            gpu_resources = self.settings.gpu_resources
            need = sum(n for r, n in holding.resources if gpu_resources.get(r) == vendor)
            devices = 0
            for d in inv.devices:
                devices |= 1 << d.index
            taken = state.whole | state.shared_mask
            mine = holding.whole
            if mine.bit_count() == need and not mine & ~devices and not mine & taken:
                whole = mine
            else:
                free = state.free_mask
                k = min(need, free.bit_count())
                choice = inv.topology.best_set(free, k) if k else None
                whole = choice.mask if choice is not None else 0
        if whole == holding.whole:
            return holding
        return msgspec.structs.replace(holding, whole=whole)


def record_of(
    pod: PodInput,
    node: str,
    gpu_names: frozenset[str],
    gang: str | None = None,
    minimum: int = 0,
) -> PodRecord:
    """What the Kubernetes filters keep of a pod on ``node``: labels, requests (GPU resources
    left out: the GPU rules charge those), host ports, required anti-affinity; and what
    preemption weighs it by: priority, uid, creation time, its gang and that gang's minimum
    (as the caller knows them: from the pod's sources, or the placement)."""
    anti = pod.affinity.anti_required if pod.affinity is not None else ()
    return PodRecord(
        key=pod.key,
        namespace=pod.namespace,
        node=node,
        labels=pod.labels,
        requests=bound_requests(pod, gpu_names),
        host_ports=host_ports(pod),
        anti_required=anti,
        terminating=pod.deleting,
        priority=pod.priority,
        uid=pod.uid,
        created=pod.created,
        gang=gang,
        minimum=minimum,
    )


def holding_of(placement: Placement, replicas: int = 0) -> Holding:
    """What a placement holds once assumed: its whole GPUs as a mask, and its shares."""
    whole = 0
    for i in placement.devices:
        whole |= 1 << i
    return Holding(
        placement.pod,
        placement.node,
        whole,
        placement.shares,
        placement.gang,
        replicas,
        placement.uid,
        placement.resources,
    )


def bits(mask: int) -> list[int]:
    """The indices set in ``mask``, ascending."""
    out = []
    i = 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return out


def _share_mask(holding: Holding) -> int:
    mask = 0
    for s in holding.shares:
        mask |= 1 << s.index
    return mask
