"""DRA's part of the snapshot (issue 29): the devices every claim holds, the slices by node and
pool, and the per-class index the DRA filter pre-filters nodes by.

In use. Every claim's ``status.allocation`` (whoever wrote it: kube-scheduler, another
scheduler, a driver's controller, us) is charged to ``in_use`` as it arrives on the claims'
watch (``claim_changed``, the ``on_item`` of the RESOURCE_CLAIMS collection) and uncharged when
it is cleared, changed or the claim is deleted. A placement we assume charges the allocations
it makes (``assume``) until the pod is forgotten or leaves, as its GPUs are; once the binder has
written one and the watch brings it back, the written one counts instead (one *account* per
claim: the claim's key, or for the claim created for a pod's extended resources, which has a
name only once created, ``extended:<pod uid>``, the claim's controller). So a device is never
counted twice for one claim, and never offered while any visible claim holds it. A preemptor's
nomination holds the allocations its plan makes the same way (``nominate``), until it ends or a
decision it does not bind lifts it (snapshot/nominations.py).

Slices. ``slices_for(node)`` gives the slices the allocator must see for one node: those
published for it by name, those without a node name (node selectors, all nodes, per-device
selection), and every other slice of their pools (a pool is judged complete by all of its
slices), each with the taints of the DeviceTaintRules that match its devices patched in
(dra/taintrules.py, as kube-scheduler's slice tracker does). ``pools(node, labels)`` gathers
them into pools (dra/pools.py), remembered per node until a slice or a rule changes or the
node's labels do.

The class index. For the DRA filter to cost nothing on a node with no candidate device,
``ClassIndex`` keeps, for one DeviceClass, the node-local devices of each node that match the
class's selectors (CEL, evaluated once per device and kept in the snapshot's ``Selectors``),
how many of them are free, and the nodes by that count. It is built the first time a pod asks
for the class and then follows ``in_use`` (a charge re-counts only the nodes of the devices it
touches); a slice change re-reads the one node of its pool (else drops it), a class change
drops it. Devices of slices without a node name (network
attached) are not indexed: while any such device matches the class, every node reached by one
is a candidate (``ClassIndex.everywhere``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from ..dra.budget import Budget
from ..dra.cel import Selectors
from ..dra.inuse import DeviceId, InUse
from ..dra.pools import Candidate, Pool, gather_pools
from ..dra.taintrules import with_taint_rules
from ..model.dra import Allocation, DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice
from ..settings import DraLimits
from .names import NameSet
from .nodes import NodeState

# An account: the claim's key, or EXTENDED + the pod's uid for the claim created for a pod's
# extended resources.
EXTENDED = "extended:"


def account_of(claim: ResourceClaim) -> str:
    if claim.extended and claim.owner:
        return EXTENDED + claim.owner
    return claim.key


class ClassIndex:
    """One DeviceClass's node-local candidates: per node the matching devices, how many are
    free, and the nodes by free count (``by_free``)."""

    __slots__ = ("by_free", "devices", "everywhere", "free", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.devices: dict[str, tuple[DeviceId, ...]] = {}
        self.free: dict[str, int] = {}
        self.by_free: dict[int, NameSet] = {}
        # A network-attached device (a slice without a node name) matches the class.
        self.everywhere = False

    def drop(self, node: str) -> None:
        self.devices.pop(node, None)
        free = self.free.pop(node, None)
        if free is not None:
            self.by_free[free].names.discard(node)

    def put(self, node: str, devices: tuple[DeviceId, ...], in_use: InUse) -> None:
        self.devices[node] = devices
        self.recount(node, in_use)

    def recount(self, node: str, in_use: InUse) -> None:
        held = in_use.exclusive
        free = sum(1 for d in self.devices[node] if d not in held)
        before = self.free.get(node)
        if before == free:
            return
        if before is not None:
            self._bucket(before).names.discard(node)
        self.free[node] = free
        self._bucket(free).add(node)

    def _bucket(self, free: int) -> NameSet:
        found = self.by_free.get(free)
        if found is None:
            found = self.by_free[free] = NameSet()
        return found

    def nodes_with(self, least: int) -> Iterator[tuple[int, NameSet]]:
        """The buckets of nodes with at least ``least`` free devices, fewest first."""
        for free in sorted(k for k in self.by_free if k >= least):
            bucket = self.by_free[free]
            if bucket.names:
                yield free, bucket


class Devices:
    """The snapshot's DRA state: claims' allocations in use, slices indexed, class indexes."""

    __slots__ = (
        "_assumed",
        "_by_node",
        "_by_pod",
        "_by_pool",
        "_charged",
        "_classes",
        "_indexes",
        "_lifted",
        "_nodes",
        "_nominated",
        "_pools",
        "_rules",
        "_slices",
        "_unbound",
        "_watched",
        "in_use",
        "limits",
        "selectors",
        "version",
    )

    def __init__(
        self,
        slices: Mapping[str, ResourceSlice],
        classes: Mapping[str, DeviceClass],
        nodes: Mapping[str, NodeState],
        limits: DraLimits,
    ) -> None:
        self._slices = slices
        # The DeviceTaintRules, by name (their order is the order their taints are appended in).
        self._rules: tuple[DeviceTaintRule, ...] = ()
        self._classes = classes
        self._nodes = nodes
        self.limits = limits
        self.in_use = InUse()
        # Bumped whenever in_use changes: what was allocated against it is stale.
        self.version = 0
        # Compiled selectors and their verdicts per device, kept for the life of the snapshot.
        self.selectors = Selectors()
        # account -> claim key -> its watched allocation
        self._watched: dict[str, dict[str, Allocation]] = {}
        # account -> the allocation an assumed placement makes
        self._assumed: dict[str, Allocation] = {}
        # pod key -> the accounts and allocations it assumed
        self._by_pod: dict[str, tuple[tuple[str, Allocation], ...]] = {}
        # account -> what is charged to in_use for it now
        self._charged: dict[str, tuple[Allocation, ...]] = {}
        # Claims whose written allocation is not counted (ClusterState.lift_claim).
        self._lifted: set[str] = set()
        # preemptor pod key -> the allocations its nomination holds (ClusterState.nominate)
        self._nominated: dict[str, tuple[Allocation, ...]] = {}
        self._by_node: dict[str, set[str]] = {}
        self._unbound: set[str] = set()
        self._by_pool: dict[tuple[str, str], set[str]] = {}
        self._pools: dict[str, tuple[Mapping[str, str], list[Pool]]] = {}
        self._indexes: dict[str, ClassIndex] = {}

    # ---- claims ------------------------------------------------------------------------------

    def claim_changed(self, before: ResourceClaim | None, after: ResourceClaim | None) -> None:
        """A claim's watch event (Keyed.on_item): its allocation replaces the one before."""
        accounts = set()
        for claim, sign in ((before, -1), (after, +1)):
            if claim is None:
                continue
            account = account_of(claim)
            accounts.add(account)
            watched = self._watched.setdefault(account, {})
            if sign < 0:
                watched.pop(claim.key, None)
            elif claim.allocation is not None:
                watched[claim.key] = claim.allocation
            if not watched:
                del self._watched[account]
        for account in accounts:
            self._settle(account)

    def allocation(self, claim: ResourceClaim) -> Allocation | None:
        """The claim's allocation as the snapshot counts it: written, else assumed by us."""
        if claim.allocation is not None:
            return claim.allocation
        return self._assumed.get(account_of(claim))

    def lift(self, claim: ResourceClaim, lifted: bool) -> None:
        """Count the claim's written allocation as gone (``lifted``) or back again."""
        if lifted:
            self._lifted.add(claim.key)
        else:
            self._lifted.discard(claim.key)
        self._settle(account_of(claim))

    def is_lifted(self, key: str) -> bool:
        return key in self._lifted

    def assumed(self, account: str) -> Allocation | None:
        return self._assumed.get(account)

    def assume(self, pod: str, claims: tuple[tuple[str, Allocation], ...]) -> None:
        """The allocations the pod's assumed placement makes (empty: none, or it was
        forgotten), replacing what it assumed before."""
        before = self._by_pod.pop(pod, ())
        for account, _ in before:
            self._assumed.pop(account, None)
        if claims:
            self._by_pod[pod] = claims
            for account, allocation in claims:
                self._assumed[account] = allocation
        for account in {a for a, _ in before} | {a for a, _ in claims}:
            self._settle(account)

    def assumed_by(self, pod: str) -> tuple[tuple[str, Allocation], ...]:
        return self._by_pod.get(pod, ())

    def nominate(self, pod: str, allocations: tuple[Allocation, ...]) -> None:
        """Hold the allocations a preemptor's plan makes while its nomination stands (empty:
        it ended, or a decision lifts it). Charged beside the claims' own: while a victim's
        claim still holds a device, both count, and it is free only once both let it go."""
        before = self._nominated.pop(pod, ())
        if allocations:
            self._nominated[pod] = allocations
        if before == allocations:
            return
        self.version += 1
        for allocation in before:
            self.in_use.charge(allocation, -1)
        for allocation in allocations:
            self.in_use.charge(allocation, +1)
        self._recount(before + allocations)

    def _settle(self, account: str) -> None:
        """Charge what the account holds now: its written allocations (those not lifted),
        else its assumed one."""
        watched = self._watched.get(account)
        assumed = self._assumed.get(account)
        if watched:
            now = tuple(a for key, a in watched.items() if key not in self._lifted)
        else:
            now = (assumed,) if assumed is not None else ()
        before = self._charged.get(account, ())
        if now == before:
            return
        self.version += 1
        for allocation in before:
            self.in_use.charge(allocation, -1)
        for allocation in now:
            self.in_use.charge(allocation, +1)
        if now:
            self._charged[account] = now
        else:
            self._charged.pop(account, None)
        self._recount(before + now)

    def _recount(self, allocations: Iterable[Allocation]) -> None:
        if not self._indexes:
            return
        nodes = set()
        for allocation in allocations:
            for r in allocation.results:
                pool = self._by_pool.get((r.driver, r.pool), ())
                for name in pool:
                    node = self._slices[name].node_name
                    if node:
                        nodes.add(node)
        for index in self._indexes.values():
            for node in nodes:
                if node in index.devices:
                    index.recount(node, self.in_use)

    def sizes(self) -> dict[str, int]:
        """The size of each per-claim and per-pod structure (ClusterState.sizes)."""
        return {
            "dra_watched": len(self._watched),
            "dra_assumed": len(self._assumed),
            "dra_assumed_pods": len(self._by_pod),
            "dra_charged": len(self._charged),
            "dra_nominated": len(self._nominated),
            "dra_exclusive": len(self.in_use.exclusive),
        }

    # ---- slices and classes ------------------------------------------------------------------

    def slice_changed(self, before: ResourceSlice | None, after: ResourceSlice | None) -> None:
        """A slice's watch event (Keyed.on_item): the indexes follow, the memos are dropped."""
        if before is not None:
            self._file(before, -1)
        if after is not None:
            self._file(after, +1)
        node = self._only_node(before, after)
        if node is None:
            self.forget_derived()
            return
        # A pool of one node (NVIDIA's driver: one pool per node): only that node's pools and
        # index entries change, not the whole cluster's.
        state = self._nodes.get(node)
        self.node_changed(node, state.node.labels if state is not None else None)

    def _only_node(self, *changed: ResourceSlice | None) -> str | None:
        """The one node every slice of the changed slices' pools is published for, if any."""
        nodes = set()
        for s in changed:
            if s is None:
                continue
            if not s.node_name:
                return None
            nodes.add(s.node_name)
            for name in self._by_pool.get((s.driver, s.pool.name), ()):
                nodes.add(self._slices[name].node_name)
        return nodes.pop() if len(nodes) == 1 else None

    def rules_changed(self, rules: Mapping[str, DeviceTaintRule]) -> None:
        """The DeviceTaintRules changed (the DEVICE_TAINT_RULES collection's ``on_change``):
        every node's pools are gathered again with their taints. The class indexes stay: a
        taint does not change which devices match a class, only which the allocator takes."""
        self._rules = tuple(rules[name] for name in sorted(rules))
        self._pools.clear()

    def forget_derived(self) -> None:
        """Slices or classes changed: pools and class indexes are rebuilt when next read."""
        self._pools.clear()
        self._indexes.clear()

    def _file(self, s: ResourceSlice, sign: int) -> None:
        places: list[set[str]] = [self._by_pool.setdefault((s.driver, s.pool.name), set())]
        if s.node_name:
            places.append(self._by_node.setdefault(s.node_name, set()))
        else:
            places.append(self._unbound)
        for place in places:
            if sign > 0:
                place.add(s.name)
            else:
                place.discard(s.name)
        if sign < 0:
            if not self._by_pool[(s.driver, s.pool.name)]:
                del self._by_pool[(s.driver, s.pool.name)]
            if s.node_name and not self._by_node[s.node_name]:
                del self._by_node[s.node_name]

    def slices_for(self, node: str) -> list[ResourceSlice]:
        """The slices the allocator must see for ``node`` (see the module doc)."""
        names = self._by_node.get(node, set()) | self._unbound
        pools = {(self._slices[n].driver, self._slices[n].pool.name) for n in names}
        for pool in pools:
            names = names | self._by_pool[pool]
        return [with_taint_rules(self._slices[n], self._rules) for n in sorted(names)]

    def pools(self, node: str, labels: Mapping[str, str]) -> list[Pool]:
        found = self._pools.get(node)
        if found is not None and found[0] == labels:
            return found[1]
        pools = gather_pools(self.slices_for(node), node, labels)
        self._pools[node] = (labels, pools)
        return pools

    @property
    def has_slices(self) -> bool:
        return bool(self._slices)

    def class_index(self, name: str, nodes: Mapping[str, NodeState]) -> ClassIndex | None:
        """The class's index over ``nodes``, built on first use; None when no
        such class exists. A device whose class selector errs counts as a candidate: the
        allocator meets the error and says it."""
        index = self._indexes.get(name)
        if index is not None:
            return index
        device_class = self._classes.get(name)
        if device_class is None:
            return None
        index = ClassIndex(name)
        for node, state in nodes.items():
            self._index_node(index, device_class, node, state.node.labels)
        self._indexes[name] = index
        return index

    def node_changed(self, node: str, labels: Mapping[str, str] | None) -> None:
        """A node came or its labels changed (``labels``), or it left (None): its pools are
        gathered again and its entry in each class index follows."""
        self._pools.pop(node, None)
        for index in self._indexes.values():
            index.drop(node)
            device_class = self._classes.get(index.name)
            if labels is not None and device_class is not None:
                self._index_node(index, device_class, node, labels)

    def _index_node(
        self, index: ClassIndex, device_class: DeviceClass, node: str, labels: Mapping[str, str]
    ) -> None:
        matching: list[DeviceId] = []
        for pool in self.pools(node, labels):
            for c in pool.devices:
                if self._matches(device_class, c):
                    if c.node_name == node:
                        matching.append(c.id)
                    else:
                        index.everywhere = True
        if matching:
            index.put(node, tuple(matching), self.in_use)

    def _matches(self, device_class: DeviceClass, c: Candidate) -> bool:
        # Verdicts are memoised per device: after the first, the index costs lookups only.
        budget = Budget(DraLimits(evaluations=len(device_class.selectors)))
        device = c.device
        for expression in device_class.selectors:
            verdict = self.selectors.matches(
                expression,
                c.key,
                device.attributes,
                device.capacity,
                device.allow_multiple_allocations,
                budget,
            )
            if verdict is False:
                return False
        return True
