"""The nodes part of the snapshot: each node's state, and the indexes placement reads.

``NodeState`` does a node's accounting (kube-scheduler's NodeInfo): its GPUs held whole, shared
or nominated, its allocatable headroom per whole-GPU resource, and the sums NodeResourcesFit and
NodePorts need (requests of every checked resource, pod count, host ports), charged and
uncharged with each holding and record (``charge``, ``charge_record``). Filters only read it.

Speed comes from an equivalence-class index (``NodeIndex``). Two GPU nodes with the same interned
topology, vendor, device count, free-GPU mask and allocatable headroom are interchangeable for a
whole-GPU pod except for their names, so ranking a pod against 5,000 nodes means ranking at most
a few hundred classes, each with a memoised best set, and then taking the first name in the
winning class (a lazily cleaned heap). A node leaves its class before a charge and joins its new
one after (``unindex``, ``index``). Per topology hierarchy a ``DomainIndex`` counts the classes
in each domain, kept up to date the same way.
Within a class, nodes differ for a whole-GPU pod with a target workload only by their shape as
the fragmentation measure reads it and whether a GPU pod uses them: each class keeps its nodes by
cards, untouched flag and cpu left (``NodeClass.shapes``, ``ShapeGroup``), so placement ranks
shapes, not nodes, at every cluster size (issue 32). It is kept lazily as the share index is: a
node that joins a class or whose records change its cpu is filed again when the shapes are next
read (``shaped``).
The share index (``shares.py``) groups the same GPU nodes by what a share reads of them (their
usable cards' state and cpu left). It is kept lazily: a node whose cards or cpu change (it leaves
or joins its class, or a record changes its cpu: ``refile_shares``) is only marked stale, and
the stale nodes are refiled when the index is next read (``shares``). A node's filing is a
function of its state alone, so the index read is the one an eager refile would have built,
while a workload of whole-GPU gangs, which holds and releases thousands of nodes between two
share decisions, does not refile them at every charge (bench-core's topology gangs: +30%).

Allocatable headroom: per configured whole-GPU resource name, the node's status.allocatable minus
what the pods held there ask for of it (the kubelet's effective request of every running pod, ours
or not, and the placements and reservations of ours), capped at the free GPU count (more can never
be used, and the cap keeps nodes whose allocatable is simply their GPU count in one class). None
for a node whose object has no status (hand-written manifests): no check.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal

import msgspec

from ..model.names import CORES_PER_CARD
from ..model.objects import NodeInput
from ..resources.gpusets import Topology
from ..resources.inventory import Inventory
from ..resources.memo import Memo
from ..resources.ports import PortUse, charge_ports
from ..resources.requests import parse_count
from .domains import Hierarchy, Path
from .fragmentation import Pool, PoolViews, Reach, Shape, free_cards
from .holdings import Holding
from .names import NameSet
from .podindex import PodRecord
from .shares import CardKey, CardState, ShareIndex


class CardUse(msgspec.Struct):
    """Shared use of one card: the sum of its shared pods' slices."""

    core: int = 0
    memory_mib: int = 0
    sgpu: int = 0
    pods: int = 0
    qos: str | None = None  # the sGPU QoS policy the card serves while it has sGPU pods
    qos_pods: int = 0


def read_allocatable(
    node: NodeInput,
    resources: tuple[str, ...],
    quantities: Memo[str, Decimal] | None,
    warnings: list[str],
) -> tuple[int, ...] | None:
    """The node's allocatable count of each whole-GPU resource (in ``resources``' order; None
    without a status); a malformed one is 0 (the node does not offer that resource) with a
    warning naming node and field. ``quantities``: the caller's memo of parsed quantities."""
    if node.allocatable is None:
        return None
    counts = []
    for resource in resources:
        text = node.allocatable.get(resource)
        count = 0
        if text is not None:
            try:
                count = parse_count(text, quantities)
            except ValueError as exc:
                warnings.append(
                    f"node {node.name}: status.allocatable[{resource}]: {exc}; "
                    f"the node is treated as not offering {resource}"
                )
        counts.append(count)
    return tuple(counts)


class NodeState:
    """One node: its object, its GPUs and what is charged to it."""

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
        "pool",
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
        allocatable: tuple[int, ...] | None,
        pool: Pool,
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
        # The pods held here, each with its whole GPUs: an uncharge clears only the bits no
        # other pod holds (a double claim, which ``hold`` warns of, leaves them held).
        self.pods: dict[str, int] = {}
        self.nominated = 0  # GPUs held for nominated preemptors (ClusterState.nominate)
        # Per whole-GPU resource name (ClusterState.resources order): status.allocatable, None
        # when the node object has no status; and what the held pods ask for of each.
        self.allocatable = allocatable
        self.used = [0] * (len(allocatable) if allocatable is not None else 0)
        # Every other checked resource (cpu, memory, pods, extended...) of status.allocatable in
        # kube-scheduler's units; None without a status. ``requested``, ``pod_count`` and
        # ``ports`` sum the records of the pods on the node (resources.accounting, resources.ports).
        self.resources: dict[str, int] | None = None
        self.requested: dict[str, int] = {}
        self.pod_count = 0
        self.ports: PortUse = {}
        # Which pool of GPUs the node is, as a request class's reach sees it (fragmentation.Pool):
        # of its object, so a new node object makes a new NodeState and a new pool.
        self.pool = pool
        # ``shape()``'s answer, until the next charge changes the node.
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

    def shape(self) -> Shape:
        """The node as the fragmentation measure sees it (fragmentation.Shape): its cpu left and
        the free percent of its cards a pod could use (healthy, not held whole, not nominated),
        kept until a charge changes the node; a GPU node only."""
        if self.frag_shape is None:
            inv = self.inventory
            assert inv is not None
            taken = self.whole | self.nominated
            free = []
            for device in inv.devices:
                if not device.healthy or taken >> device.index & 1:
                    continue
                use = self.cards.get(device.index)
                free.append(CORES_PER_CARD - use.core if use is not None else CORES_PER_CARD)
            self.frag_shape = (self.cpu_left(), free_cards(free), self.pool)
        return self.frag_shape

    @property
    def untouched(self) -> int:
        """1 for a GPU node no GPU pod uses (no GPU held whole, no card shared), else 0: among
        nodes the measure ranks equal, placement keeps an untouched node for whatever comes
        next (bench-frag: any finer order of the ties, by free GPUs or cpu or the exact gain,
        leaves more GPUs idle)."""
        return int(not self.whole and not self.cards)

    def cpu_left(self) -> int:
        """Millicores of cpu the node has left (-1: its status says nothing of cpu)."""
        if self.resources is None or "cpu" not in self.resources:
            return -1
        return max(0, self.resources["cpu"] - self.requested.get("cpu", 0))

    def card_key(self) -> CardKey:
        """What a share (or a pod without GPUs) reads of the node's cards (shares.py); a GPU
        node only."""
        inv = self.inventory
        assert inv is not None
        taken = self.whole | self.nominated
        cards = self.cards
        usable: list[CardState] = []
        for device in inv.devices:
            if not device.healthy or taken >> device.index & 1:
                continue
            use = cards.get(device.index)
            usable.append(
                (
                    device.index,
                    device.memory_mib,
                    None if use is None else (use.core, use.memory_mib, use.sgpu, use.qos),
                )
            )
        return (
            inv.vendor,
            inv.sgpu_per_card,
            any(d.memory_mib > 0 for d in inv.devices),
            not self.whole and not cards,
            tuple(usable),
            self.pool,
        )

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

    def charge(self, holding: Holding, resource_index: Mapping[str, int], sign: int) -> None:
        """Charge (sign +1) or uncharge (-1) a holding: its GPUs, its share of each card, and
        its whole GPUs per resource name (``resource_index``: a name's place in ``used``)."""
        state = self
        state.frag_shape = None
        if sign > 0:
            state.whole |= holding.whole
            state.pods[holding.pod] = holding.whole
        else:
            state.pods.pop(holding.pod, None)
            if holding.whole:
                still = 0
                for other in state.pods.values():
                    still |= other
                state.whole &= ~(holding.whole & ~still)
        if state.allocatable is not None:
            for resource, n in holding.resources:
                index = resource_index.get(resource)
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

    def charge_record(self, record: PodRecord, sign: int) -> None:
        """Charge or uncharge a pod's record: its requests, one pod, its host ports."""
        node = self
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


# topology, vendor, device count, free mask, allocatable headroom (NodeState.headroom)
ClassKey = tuple[Topology, str, int, int, tuple[int, ...] | None]
# Whole GPUs asked per resource, as (index in ClusterState.resources, count), by index.
Demand = tuple[tuple[int, int], ...]


class ShapeGroup:
    """The nodes of one class with the same cards' free percent (a Shape's cards), the same
    untouched flag (NodeState.untouched) and pools the target's reaches treat alike (``pool``
    stands for them: NodeIndex.shaped), by cpu left: a
    whole-GPU pod's fragmentation rank differs between them only by their cpu left, and not at
    all above the cpu that feeds every class and the pod (fragmentation.Target.roomy), so
    placement ranks the cpu values below that one by one and the rest as one (``cpus`` is kept
    sorted for it)."""

    __slots__ = ("by_cpu", "cards", "cpus", "names", "pool", "untouched")

    def __init__(self, cards: tuple[int, ...], untouched: int, pool: Pool) -> None:
        self.cards = cards
        self.untouched = untouched
        self.pool = pool
        self.by_cpu: dict[int, NameSet] = {}
        self.cpus: list[int] = []
        # Every node of the group: the usual answer, when all of them have cpu to spare.
        self.names = NameSet()


class NodeClass(NameSet):
    """Nodes that are interchangeable for a whole-GPU pod, with the smallest name at hand, and
    the same nodes by shape (``shapes``: what the fragmentation measure tells apart within a
    class, so a pod ranks a class's shapes, not its nodes; filed by ``NodeIndex.shaped``)."""

    __slots__ = ("key", "memo", "shape_of", "shapes")

    def __init__(self, key: ClassKey) -> None:
        super().__init__()
        self.key = key
        # What placement derives from the key alone (its rank for k GPUs), kept while the class
        # lives: the key never changes, a node whose GPUs change moves to another class.
        self.memo: dict[tuple[object, ...], object] = {}
        self.shapes: dict[tuple[tuple[int, ...], int, Pool], ShapeGroup] = {}
        # Each node's group and cpu left as filed.
        self.shape_of: dict[str, tuple[ShapeGroup, int]] = {}

    def file_shape(self, name: str, shape: Shape, untouched: int) -> None:
        """File one of the class's nodes by its shape (after ``drop_shape``, or new)."""
        left, cards, pool = shape
        group = self.shapes.get((cards, untouched, pool))
        if group is None:
            group = self.shapes[(cards, untouched, pool)] = ShapeGroup(cards, untouched, pool)
        names = group.by_cpu.get(left)
        if names is None:
            names = group.by_cpu[left] = NameSet()
            bisect.insort(group.cpus, left)
        names.add(name)
        group.names.add(name)
        self.shape_of[name] = (group, left)

    def drop_shape(self, name: str) -> None:
        """The node leaves its shape (before it is filed again, or leaves the class)."""
        found = self.shape_of.pop(name, None)
        if found is None:
            return
        group, left = found
        group.names.names.discard(name)
        names = group.by_cpu[left]
        names.names.discard(name)
        if names.names:
            return
        del group.by_cpu[left]
        del group.cpus[bisect.bisect_left(group.cpus, left)]
        if not group.cpus:
            del self.shapes[(group.cards, group.untouched, group.pool)]


class DomainIndex:
    """One hierarchy's view of the GPU nodes: per path (domains.Hierarchy.path), its nodes and
    how many of them are in each node class, kept as nodes change class (``NodeIndex.index``), so a
    gang counts what fits per domain over a few hundred paths, not every node. Per domain (every
    prefix of a path, the root ``()`` above them), also its free GPUs and GPUs (``sums``), how
    many of its nodes are in each class (``within``) and the domains one level down
    (``children``): a pod that needs no domain walks them to the broken ones
    (placement/domainorder.py) without summing the nodes."""

    __slots__ = ("children", "classes", "names", "sums", "where", "within")

    def __init__(self) -> None:
        self.names: dict[Path, set[str]] = {}
        self.classes: dict[Path, dict[ClassKey, int]] = {}
        self.where: dict[str, Path] = {}
        self.sums: dict[Path, list[int]] = {}
        self.within: dict[Path, dict[ClassKey, int]] = {}
        self.children: dict[Path, set[Path]] = {}

    def add(self, name: str, path: Path, key: ClassKey) -> None:
        self.where[name] = path
        self.names.setdefault(path, set()).add(name)
        counts = self.classes.setdefault(path, {})
        counts[key] = counts.get(key, 0) + 1
        self._charge(path, key, +1)

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
        self._charge(path, key, -1)

    def _charge(self, path: Path, key: ClassKey, sign: int) -> None:
        free, gpus = key[3].bit_count(), key[2]
        for depth in range(1, len(path) + 1):
            prefix = path[:depth]
            sums = self.sums.setdefault(prefix, [0, 0, 0])  # free GPUs, GPUs, nodes
            sums[0] += sign * free
            sums[1] += sign * gpus
            sums[2] += sign
            within = self.within.setdefault(prefix, {})
            within[key] = within.get(key, 0) + sign
            if not within[key]:
                del within[key]
            parent = path[: depth - 1]
            if sums[2]:
                self.children.setdefault(parent, set()).add(prefix)
            else:
                del self.sums[prefix], self.within[prefix]
                kids = self.children[parent]
                kids.discard(prefix)
                if not kids:
                    del self.children[parent]


class NodeIndex:
    """The nodes by name (``states``, which ``ClusterState.nodes`` is) and their indexes: the
    equivalence classes, by key and by vendor; each hierarchy's domain index and each node's
    path in it; how many nodes carry each label key."""

    __slots__ = (
        "_by_vendor",
        "_class_of",
        "_domains",
        "_paths",
        "_reshaped",
        "_shares",
        "_stale",
        "_views",
        "classes",
        "label_keys",
        "plain",
        "states",
    )

    def __init__(self) -> None:
        self.states: dict[str, NodeState] = {}
        self.classes: dict[ClassKey, NodeClass] = {}
        # The same classes per vendor, in the same order: placement ranks one vendor's.
        self._by_vendor: dict[str, dict[ClassKey, NodeClass]] = {}
        self._class_of: dict[str, ClassKey] = {}
        # Each node's path in each hierarchy asked about (dropped with the node's object, or all
        # of them when a Topology changes: there are a few hierarchies, not one per pod).
        self._paths: dict[Hierarchy, dict[str, Path]] = {}
        self._domains: dict[Hierarchy, DomainIndex] = {}
        # How many nodes carry each label key: a gang whose members repel each other on a key
        # every node has cannot share any node, which is known without scanning them.
        self.label_keys: dict[str, int] = {}
        # The GPU nodes by what a share (or a pod without GPUs) reads of them (shares.py), and
        # the names of the other nodes (no inventory, or an invalid one).
        self._shares = ShareIndex()
        # Nodes to refile before the share index is read (a dict: refiled in a fixed order).
        self._stale: dict[str, None] = {}
        # Nodes to file by shape in their class before the classes' shapes are read (``shaped``).
        self._reshaped: dict[str, None] = {}
        # The pools as the shape groups tell them apart (``shaped``).
        self._views = PoolViews(())
        self.plain: set[str] = set()

    @property
    def shares(self) -> ShareIndex:
        """The share index, each stale node refiled first (dropped, and filed again under its
        key as it is now if it is still an indexed GPU node)."""
        if self._stale:
            shares = self._shares
            for name in self._stale:
                shares.drop(name)
                state = self.states.get(name)
                if state is not None and name in self._class_of:
                    shares.file(name, state.card_key(), state.cpu_left())
            self._stale.clear()
        return self._shares

    def shaped(self, reaches: Iterable[Reach]) -> None:
        """File every node marked since the last call by its shape in its class
        (NodeClass.shapes), as it is now: what a charge or a record changed (``index``,
        ``refile_shares``). Lazy, as the share index is: a node's filing is a function of its
        state alone, so the classes' shapes read are the ones an eager refile would have
        built, and a gang workload that holds and releases thousands of nodes between two
        whole-GPU decisions does not refile them at every charge.

        A shape's pool is filed as the pools ``reaches`` (the target workload's) treat alike:
        the measure reads nothing else of a pool (fragmentation.Target.frag), so their
        nodes share a group (issue 32: bench-core's three instance types, pool labels no class
        of its target is pinned to, made three times the groups a whole-GPU pod ranks, single
        pods p50 0.30 -> 0.89 ms). The groups tell apart the pools of every reach of the last
        refile, a superset of the target's: a target whose reach is new refiles every node,
        one whose reach left does not (a finer split ranks the same), so a class at the edge
        of the target's coverage refiles once, not each time it comes back."""
        if not self._views.reaches.issuperset(reaches):
            self._views = PoolViews(reaches)
            self._reshaped.update(dict.fromkeys(self._class_of))
        if not self._reshaped:
            return
        classes, class_of, states, views = self.classes, self._class_of, self.states, self._views
        views.trim(len(states))  # more pools than nodes: some are of nodes gone
        for name in self._reshaped:
            key = class_of.get(name)
            if key is not None:
                cls = classes[key]
                state = states[name]
                left, cards, pool = state.shape()
                cls.drop_shape(name)
                cls.file_shape(name, (left, cards, views.of(pool)), state.untouched)
        self._reshaped.clear()

    def put(self, state: NodeState) -> NodeState | None:
        """Store ``state`` in place of the node's previous one (returned), out of every index
        until ``index``."""
        name = state.name
        self.unindex(name)
        for paths in self._paths.values():
            paths.pop(name, None)
        old = self.states.get(name)
        if old is not None:
            self._count_labels(old.node, -1)
        self._count_labels(state.node, +1)
        self.states[name] = state
        if state.inventory is None:
            self.plain.add(name)
        else:
            self.plain.discard(name)
        return old

    def pop(self, name: str) -> NodeState | None:
        """The node left: it leaves every index too."""
        state = self.states.pop(name, None)
        if state is None:
            return None
        self.plain.discard(name)
        self.unindex(name)
        # Gone for good: out of the share index now, so nothing of it waits to be refiled.
        del self._stale[name]
        self._shares.drop(name)
        for paths in self._paths.values():
            paths.pop(name, None)
        self._count_labels(state.node, -1)
        return state

    def index(self, state: NodeState) -> None:
        """File the node under its class (and domains) as it is now; GPU nodes only."""
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
            self._by_vendor.setdefault(inv.vendor, {})[key] = cls
        cls.add(state.name)
        self._class_of[state.name] = key
        self._stale[state.name] = None
        self._reshaped[state.name] = None
        for hierarchy, index in self._domains.items():
            index.add(state.name, self.path_of(hierarchy, state.name), key)

    def unindex(self, name: str) -> None:
        """Take the node out of its class (and domains), before a charge changes its key."""
        self._stale[name] = None
        key = self._class_of.pop(name, None)
        if key is None:
            return
        cls = self.classes[key]
        cls.names.discard(name)
        cls.drop_shape(name)
        if not cls.names:
            del self.classes[key]
            same_vendor = self._by_vendor[key[1]]
            del same_vendor[key]
            if not same_vendor:
                del self._by_vendor[key[1]]
        for index in self._domains.values():
            index.discard(name, key)

    def refile_shares(self, state: NodeState) -> None:
        """A record charged to the node changed its cpu left: its place in the share index and
        its shape in its class."""
        self._stale[state.name] = None
        self._reshaped[state.name] = None

    def class_of(self, name: str) -> NodeClass | None:
        """The node's class (None: not a GPU node)."""
        key = self._class_of.get(name)
        return None if key is None else self.classes[key]

    def iter_classes(self, vendor: str) -> Iterator[NodeClass]:
        return iter(self._by_vendor.get(vendor, {}).values())

    def gpu_nodes(self) -> Iterator[NodeState]:
        return (s for s in self.states.values() if s.inventory is not None)

    def on_every_node(self, key: str) -> bool:
        return self.label_keys.get(key, 0) == len(self.states)

    def forget_hierarchies(self) -> None:
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
            found = paths[name] = hierarchy.path(self.states[name].node)
        return found

    def _count_labels(self, node: NodeInput, sign: int) -> None:
        counts = self.label_keys
        for key in node.labels:
            n = counts.get(key, 0) + sign
            if n:
                counts[key] = n
            else:
                del counts[key]
