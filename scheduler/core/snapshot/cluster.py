"""ClusterState: which node has which GPUs, and which pod holds which of them.

It is the core's snapshot, fed by the shell (watch events in the live scheduler, manifests in the
simulator) and read by the placement functions. It does no I/O and never reads a clock.

It composes the parts beside it in ``core/snapshot/``, each with one job, and keeps them consistent:

- ``nodes``: every node's ``NodeState`` (its accounting) and the indexes over them (``NodeIndex``:
  equivalence classes, topology domains, label keys);
- ``holdings``: which pod holds which GPUs or card shares, and the bound members of each gang
  (a terminating pod holds its GPUs but is no bound member: ``snapshot/holdings.py``);
- ``records``: every pod bound to a node, ours or not, GPU or not, as the Kubernetes filters read
  it (``PodRecord``), charged to its node's sums;
- ``topocounts``: the records matching each selector in use per topology domain, and the nodes
  per domain (``domain_counts``), charged with the records and the nodes' labels: what the
  spread and inter-pod affinity PreFilter read instead of walking the pods;
- ``nominations``: what is held on a node for a preemptor while its victims terminate;
- ``watched``: the watched inputs (namespaces, claims, volumes, budgets, DRA objects, PodGroups,
  Topologies), one keyed collection each;
- ``undo``: the typed operations a ``tentative()`` scope reverts;
- ``memos``: what is remembered between decisions (parsed specs and quantities, topologies);
- and the fragmentation ``profile`` (``fragmentation``), the request class of every pod held.

The methods here are the changes that touch several parts at once (a holding charges its node,
moves the node to another class, joins a gang, re-reads the pod's profile entry), and are the
only way the shell changes the snapshot. The parts' data is read directly (``nodes``,
``holdings``, ``index``...): reading never changes anything.

Tentative changes (a gang being planned, a group checked on one node) run inside ``tentative()``,
a scoped transaction like KAI's statement (``snapshot/undo.py``): its log of operations exists
only while the scope is open, and the scope always rolls back on exit, so a plan leaves no trace
and nothing grows between decisions.

Nominations (issue 14's preemption, ``snapshot/nominations.py``) are charged to their node like
a holding and its record, and undone by ``tentative()`` like them. ``decide`` lifts, inside a
tentative scope (``lifted_nominations``), the nominations that do not bind the unit it decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

import msgspec

from ..model.decisions import ClaimAllocation, Placement
from ..model.dra import Allocation, ResourceClaim
from ..model.gangsources import best_known, gang_key
from ..model.objects import NodeInput, PodInput
from ..resources.accounting import extended_resources, node_allocatable
from ..resources.inventory import InventoryError, read_inventory
from ..resources.requests import gpu_resource_names
from ..settings import CoreSettings
from .bound import allocated_mask, annotated_holding, guess, short
from .devices import EXTENDED, Devices
from .domains import Hierarchy, Path
from .fragmentation import ANYWHERE, Profile, pool_of, request_class
from .holdings import Holding, Holdings, bits, holding_of, share_mask
from .memos import Memos
from .nodes import Demand, DomainIndex, NodeClass, NodeIndex, NodeState, read_allocatable
from .nominations import Nominated, Nominations
from .podindex import PodRecord
from .records import Records, record_of
from .topocounts import TopologyCounts
from .undo import ClaimLifted, ClaimsAssumed, Held, Recorded, Released, Renominated, UndoLog
from .watched import Inputs


class ClusterState:
    def __init__(self, settings: CoreSettings | None = None) -> None:
        self.settings = settings or CoreSettings()
        # The whole-GPU resource names in a fixed order: NodeState.allocatable/used and the
        # class key's headroom are tuples in this order.
        self.resources: tuple[str, ...] = tuple(sorted(self.settings.gpu_resources))
        self.resource_index = {r: i for i, r in enumerate(self.resources)}
        # Whole and shared GPU resource names: charged by the GPU rules, not NodeResourcesFit.
        self.gpu_names = gpu_resource_names(self.settings)
        # The parts, and their data as it is read (the same objects: a part changes them).
        self.node_index = NodeIndex()
        self.nodes: dict[str, NodeState] = self.node_index.states
        self.classes = self.node_index.classes
        self.label_keys = self.node_index.label_keys
        self._holdings = Holdings()
        self.holdings: dict[str, Holding] = self._holdings.on_nodes
        self.gang_bound = self._holdings.gang_bound
        self._records = Records()
        self.index = self._records.index
        # Matching pods per topology domain for the selectors in use (the filters' PreFilter).
        self.domain_counts = TopologyCounts()
        self._nominations = Nominations()
        # The request class of every pod held on a known GPU node: the target workload the
        # fragmentation measure weighs placements by (``fragmentation``).
        self.profile = Profile(self.settings.fragmentation)
        self._undo = UndoLog()
        # What is remembered between decisions (parsed specs and quantities, topologies).
        self.memos = Memos(self.settings.memos)
        # The watched inputs, and what is derived from them: the extended resources the
        # DeviceClasses back (resource -> class), and the nodes' paths in the hierarchies.
        self.inputs = Inputs()
        self.dra_extended: dict[str, str] = {}
        # The pending (unbound) pods of gangs, by gang key then pod key, as the shells see
        # them: the live pod book's kept pods, simulate's backlog, bench-topology's arrivals.
        # gangs/waiting.py reads from them which gang waits for a domain of its required level.
        self.pending_gangs: dict[str, dict[str, PodInput]] = {}
        self._pending_gang: dict[str, str] = {}  # pod key -> its key in pending_gangs
        self.inputs.device_classes.on_change = self._read_device_classes
        self.inputs.topologies.on_change = self.node_index.forget_hierarchies
        # DRA: the devices every claim holds (ours assumed included), slices by node and pool,
        # the class indexes (snapshot/devices.py).
        self.devices = Devices(
            self.inputs.resource_slices, self.inputs.device_classes, self.nodes, self.settings.dra
        )
        self.inputs.resource_claims.on_item = self.devices.claim_changed
        self.inputs.resource_slices.on_item = self.devices.slice_changed
        rules = self.inputs.device_taint_rules
        rules.on_change = lambda: self.devices.rules_changed(rules)

    # ---- nodes -----------------------------------------------------------------------------

    def set_node(self, node: NodeInput) -> str | None:
        """Add or refresh a node. Returns a warning when its inventory or its allocatable
        amount of a whole-GPU resource is malformed (several are joined by "; ")."""
        warnings: list[str] = []
        try:
            inventory = read_inventory(node, self.memos.topologies)
            error = None
        except InventoryError as exc:
            inventory, error = None, str(exc)
            warnings.append(f"{exc}; node excluded from GPU scheduling")
        allocatable = read_allocatable(node, self.resources, self.memos.quantities, warnings)
        pool = pool_of(
            node,
            inventory.vendor if inventory is not None else "",
            self.settings.fragmentation.pool_labels,
        )
        state = NodeState(node, inventory, error, allocatable, pool)
        # The pools' GPUs, which the target's contest of pools reads.
        self.profile.count_node(node.name, pool, state.healthy.bit_count())
        if node.allocatable is not None:
            state.resources = node_allocatable(
                node.allocatable, self.gpu_names, self.memos.quantities
            )
        for key in self._records.on(node.name):
            state.charge_record(self.index.records[key], +1)
        for key in self._nominations.on(node.name):
            self._charge_nomination(state, self._nominations.by_pod[key], +1)
        old = self.node_index.put(state)
        self._relabel(node.name, old.node.labels if old else None, node.labels)
        if old is None or old.node.labels != node.labels:
            self.devices.node_changed(node.name, node.labels)
        orphans = self._holdings.orphans
        pods = set(old.pods) if old else set()
        pods |= {k for k, h in orphans.items() if h.node == node.name}
        guessed = []
        for key in sorted(pods):
            holding = self.holdings.get(key) or orphans.pop(key)
            if holding.guessed:
                guessed.append(holding)
                continue
            self.holdings[key] = holding
            state.charge(holding, self.resource_index, +1)
        # Guessed masks last, so that they are chosen among the GPUs nobody else holds.
        for holding in guessed:
            holding = guess(state, holding, self.settings)
            self.holdings[holding.pod] = holding
            state.charge(holding, self.resource_index, +1)
        self.node_index.index(state)
        for key in state.pods.keys() | set(self._records.on(node.name)):
            self._reprofile(key)
        return "; ".join(warnings) or None

    def demand(self, resources: Iterable[tuple[str, int]]) -> Demand:
        """Whole GPUs per resource name (several requests are summed) as a Demand."""
        total: dict[int, int] = {}
        for resource, n in resources:
            index = self.resource_index.get(resource)
            if index is not None and n:
                total[index] = total.get(index, 0) + n
        return tuple(sorted(total.items()))

    def remove_node(self, name: str) -> None:
        state = self.node_index.pop(name)
        if state is None:
            return
        self._relabel(name, state.node.labels, None)
        self.devices.node_changed(name, None)
        self.profile.count_node(name, None, 0)
        for key in state.pods:
            holding = self.holdings.pop(key, None)
            if holding is not None:
                self._holdings.orphans[key] = holding
        for key in state.pods.keys() | set(self._records.on(name)):
            self._reprofile(key)

    # ---- pods ------------------------------------------------------------------------------

    def add_bound_pod(self, pod: PodInput) -> str | None:
        """Record what a bound pod holds, from its annotations. Returns a warning, if any.
        A pod being deleted is held as ``terminating``: its GPUs stay charged, but it no longer
        counts among its gang's bound members."""
        self.drop_pending(pod.key)
        if not pod.node_name or pod.finished:
            self.remove_pod(pod.key)
            return None
        gang = best_known(pod, self.inputs.pod_groups)  # once, for the record and the holding
        gang_key, minimum = (gang.key, gang.minimum) if gang is not None else (None, 0)
        self.put_record(
            record_of(
                pod,
                pod.node_name,
                self.gpu_names,
                self.settings.fragmentation.pool_labels,
                gang_key,
                minimum,
                self.memos.requests,
            )
        )
        try:
            holding = annotated_holding(
                pod, gang_key, minimum, self.settings, self.holdings.get(pod.key), self.memos
            )
        except ValueError as exc:
            return f"pod {pod.key}: {exc}; its GPUs are not tracked"
        if holding is None:
            self._drop_holding(pod.key)
            return None
        warning = None
        try:
            allocated = allocated_mask(pod, self.nodes.get(pod.node_name))
        except ValueError as exc:  # a bad report loses nothing: the assignment still stands
            allocated = None
            warning = f"pod {pod.key}: {exc}; the assignment's GPUs are tracked instead"
        if allocated is not None and holding.whole:
            holding = msgspec.structs.replace(holding, whole=allocated)
        elif allocated and holding.guessed:  # the device plugin says which: no guess needed
            holding = msgspec.structs.replace(holding, whole=allocated, guessed=False)
        if self._held_as(holding):
            return warning
        self._drop_holding(pod.key)
        return self.hold(holding) or warning

    def _held_as(self, holding: Holding) -> bool:
        """Whether the pod already holds exactly ``holding`` on its node, so that releasing and
        holding it again would leave everything as it is (the event of a bound pod repeats:
        the kubelet's status updates, the confirm after our own Binding); then marks its gang
        changed, as the release and hold would. Not for a guessed holding (hold guesses its
        mask again), shares (a card's QoS is its last pod's), a tentative scope (its undo log
        records both), or a mask another pod claims too (hold warns of the double claim).
        Everything else the release and hold touch comes back the same: the node's charges
        are sums, its class and domains a function of them, the profile's target a function
        of the pods' classes (fragmentation.Profile), and the record, which decides the class
        with the holding, is already in place (put_record re-profiles it when it changes)."""
        if holding.guessed or holding.shares or self._undo.open:
            return False
        if self.holdings.get(holding.pod) != holding:
            return False
        state = self.nodes.get(holding.node)
        if state is None:
            return False
        others = 0
        for key, mask in state.pods.items():
            if key != holding.pod:
                others |= mask
        if holding.whole & (others | state.shared_mask):
            return False
        if holding.gang and holding.gang in self._holdings.gang_bound:
            self._holdings.gangs_changed.add(holding.gang)
        return True

    def remove_pod(self, key: str) -> None:
        """The pod left its node (deleted, finished): its holding, its record and the DRA
        allocations it assumed go (the claims' own allocations stay until they are cleared)."""
        self._drop_holding(key)
        self.drop_record(key)
        self.assume_claims(key, ())

    def _drop_holding(self, key: str) -> None:
        orphan = self._holdings.orphans.pop(key, None)
        if orphan is not None:  # its node left first: no release to do it
            self._holdings.leave_gang(orphan)
        holding = self.holdings.get(key)
        if holding is not None:
            self.release(holding)

    def set_pending(self, pod: PodInput) -> None:
        """The pod is pending (unbound, ours), as last seen: kept when it is a gang's member
        (``pending_gangs``). Not a holding: an assumed placement leaves it pending until the
        pod is bound (``add_bound_pod``) or gone (``drop_pending``)."""
        self.drop_pending(pod.key)
        gang = gang_key(pod)
        if gang is not None:
            self.pending_gangs.setdefault(gang, {})[pod.key] = pod
            self._pending_gang[pod.key] = gang

    def drop_pending(self, key: str) -> None:
        """The pod is no longer pending (bound, or gone)."""
        gang = self._pending_gang.pop(key, None)
        if gang is None:
            return
        members = self.pending_gangs[gang]
        del members[key]
        if not members:
            del self.pending_gangs[gang]

    def take_gangs_changed(self) -> set[str]:
        """The gangs whose bound members changed since the last call (the service's queue
        orders a gang being completed first, queue.py)."""
        changed, self._holdings.gangs_changed = self._holdings.gangs_changed, set()
        return changed

    def held(self, key: str) -> Holding | None:
        """What the pod holds: on its node, or waiting for its node to (re)appear."""
        return self._holdings.held(key)

    def forget(self, key: str) -> None:
        """Undo an assumed placement (the bind failed): its holding and its record go."""
        self.remove_pod(key)

    def hold(self, holding: Holding) -> str | None:
        """Charge a holding to its node (assume). Returns a warning on a double claim.

        A pod holds one thing at a time: its previous holding, if any, is released first.
        """
        previous = self.holdings.get(holding.pod)
        if previous is not None:
            self.release(previous)
        self._holdings.orphans.pop(holding.pod, None)
        state = self.nodes.get(holding.node)
        if holding.guessed and state is not None and not self._undo.reverting:
            holding = guess(state, holding, self.settings)
        self._undo.log(Held(holding))
        self._holdings.join_gang(holding)
        if state is None:
            self._holdings.orphans[holding.pod] = holding
            return None
        warning = None
        clash = holding.whole & (state.whole | state.shared_mask)
        if clash:
            others = sorted(
                k
                for k in state.pods
                if (self.holdings[k].whole | share_mask(self.holdings[k])) & clash
            )
            gpus = ",".join(str(i) for i in bits(clash))
            warning = (
                f"node {state.name}: GPU {gpus} claimed by {holding.pod} and by {', '.join(others)}"
            )
        self.holdings[holding.pod] = holding
        self.node_index.unindex(state.name)
        state.charge(holding, self.resource_index, +1)
        self.node_index.index(state)
        self._reprofile(holding.pod)
        return warning

    def release(self, holding: Holding) -> None:
        """Undo a holding (forget, or the pod finished or was deleted)."""
        if self.holdings.get(holding.pod) != holding:
            return
        self._undo.log(Released(holding))
        del self.holdings[holding.pod]
        self._reprofile(holding.pod)
        self._holdings.leave_gang(holding)
        state = self.nodes.get(holding.node)
        if state is None:
            return
        self.node_index.unindex(state.name)
        # A double claim (a bound re-list charges a pod as its page comes and frees at its end
        # the one that left those GPUs) stays held by the other pod: NodeState.charge.
        state.charge(holding, self.resource_index, -1)
        if not self._undo.reverting:
            self._fill_short(state)
        self.node_index.index(state)

    def _fill_short(self, state: NodeState) -> None:
        """The guessed holdings on the node short of GPUs (bound.short) are guessed again among
        the GPUs free now: the GPUs they use are among those just freed, and counted free they
        were given to the next pod (a GPU the kubelet then refuses it, or two pods on one).
        Logged like any change, so a tentative scope restores the short masks (the undo holds
        the logged holdings as they were, guessing nothing: ``hold``)."""
        for key in sorted(state.pods):
            holding = self.holdings[key]
            if not short(state, holding, self.settings):
                continue
            self._undo.log(Released(holding))
            state.charge(holding, self.resource_index, -1)
            holding = guess(state, holding, self.settings)
            self._undo.log(Held(holding))
            self.holdings[key] = holding
            state.charge(holding, self.resource_index, +1)

    def unhold(self, holding: Holding) -> None:
        """Take a hold back (a tentative scope's undo): release it from its node, or drop it
        where it waits for its node."""
        if self._holdings.orphans.get(holding.pod) == holding:
            del self._holdings.orphans[holding.pod]
            self._holdings.leave_gang(holding)
            return
        self.release(holding)

    def apply(
        self, placement: Placement, pod: PodInput, replicas: int = 0, shown: bool = False
    ) -> None:
        """Assume a placement the core decided (before the shell has bound it, unless
        ``shown``: Holding.shown): its GPUs, and the pod's record on the node for the
        Kubernetes filters. A nomination of the pod is used up: it holds what it was placed on
        now (a forget does not bring the nomination back)."""
        self.unnominate(placement.pod)
        # The record first: the profile reads the pod's cpu request from it when it is held.
        record = record_of(
            pod,
            placement.node,
            self.gpu_names,
            self.settings.fragmentation.pool_labels,
            placement.gang,
            replicas,
            self.memos.requests,
        )
        self.put_record(record)
        self.hold(holding_of(placement, replicas, shown))
        if placement.claims:
            self.charge_claims(placement.pod, placement.uid, placement.claims)

    def charge_claims(self, pod: str, uid: str, claims: Iterable[ClaimAllocation]) -> None:
        """Assume the claims a placement of the pod (``uid``) allocates: each by its account
        (snapshot/devices.py; the special claim by the pod's uid)."""
        self.assume_claims(
            pod,
            tuple((EXTENDED + uid if c.special else c.claim, c.allocation) for c in claims),
        )

    def hold_reloaded(self, holding: Holding) -> str | None:
        """Hold a previous leader's reservation (reloaded or inherited from the store): its
        GPUs, and the DRA allocations its placement made, whose writes may yet land."""
        warning = self.hold(holding)
        if holding.claims:
            self.charge_claims(holding.pod, holding.uid, holding.claims)
        return warning

    def assume_claims(self, pod: str, claims: tuple[tuple[str, Allocation], ...]) -> None:
        """The DRA allocations the pod's placement makes, by account (snapshot/devices.py),
        charged until it is forgotten or leaves; empty drops them."""
        before = self.devices.assumed_by(pod)
        if before == claims:
            return
        self._undo.log(ClaimsAssumed(pod, before))
        self.devices.assume(pod, claims)

    def lift_claim(self, claim: ResourceClaim, lifted: bool = True) -> None:
        """Count the claim's written allocation as gone (``lifted``), or again. A preemption's
        dry run (preemption/candidates.py) lifts the claims of the pods it would evict, inside a
        tentative scope: outside one, a claim's devices are free only once its allocation is
        cleared on the apiserver."""
        if self.devices.is_lifted(claim.key) == lifted:
            return
        self._undo.log(ClaimLifted(claim, lifted))
        self.devices.lift(claim, lifted)

    # ---- records (every pod on a node, for the Kubernetes filters) -----------------------

    def put_record(self, record: PodRecord) -> None:
        previous = self._records.get(record.key)
        if previous == record:
            return
        self._undo.log(Recorded(record.key, previous))
        if previous is not None:
            self._unrecord(previous)
        self._records.add(record)
        node = self.nodes.get(record.node)
        if node is not None:
            node.charge_record(record, +1)
            self.node_index.refile_shares(node)
        self.domain_counts.record(record, node.node.labels if node is not None else None, +1)
        self._reprofile(record.key)

    def drop_record(self, key: str) -> None:
        previous = self._records.get(key)
        if previous is None:
            return
        self._undo.log(Recorded(key, previous))
        self._unrecord(previous)

    def _unrecord(self, record: PodRecord) -> None:
        self._records.remove(record)
        node = self.nodes.get(record.node)
        if node is not None:
            node.charge_record(record, -1)
            self.node_index.refile_shares(node)
        self.domain_counts.record(record, node.node.labels if node is not None else None, -1)
        self._reprofile(record.key)

    # ---- tentative scopes (snapshot/undo.py) -------------------------------------------------

    @contextmanager
    def tentative(self) -> Iterator[None]:
        """A scope whose changes are always undone on exit (KAI's statement): gang planning
        places members here to see what the previous ones took, then returns a decision and
        leaves the state exactly as it was. Scopes nest."""
        with self._undo.scope(self):
            yield

    # ---- nominations (preemption/preempt.py) -----------------------------------------------

    def nominate(self, nomination: Nominated) -> None:
        """Hold ``nomination.devices`` (and its requests) on its node, and the DRA devices of
        ``nomination.allocations``, for the preemptor while its victims terminate; a preemptor
        has one nomination, the last one given."""
        previous = self._nominations.by_pod.get(nomination.pod)
        if previous == nomination:
            return
        self._undo.log(Renominated(nomination.pod, previous))
        if previous is not None:
            self._unnominate(previous)
        self._nominations.add(nomination)
        self.devices.nominate(nomination.pod, nomination.allocations)
        state = self.nodes.get(nomination.node)
        if state is not None:
            self.node_index.unindex(state.name)
            self._charge_nomination(state, nomination, +1)
            self.node_index.index(state)

    def unnominate(self, pod: str) -> None:
        """The preemptor bound, left, or gave its nomination up: what it held is free again."""
        previous = self._nominations.by_pod.get(pod)
        if previous is None:
            return
        self._undo.log(Renominated(pod, previous))
        self._unnominate(previous)

    def _unnominate(self, nomination: Nominated) -> None:
        self._nominations.remove(nomination)
        self.devices.nominate(nomination.pod, ())
        state = self.nodes.get(nomination.node)
        if state is not None:
            self.node_index.unindex(state.name)
            self._charge_nomination(state, nomination, -1)
            self.node_index.index(state)

    def _charge_nomination(self, state: NodeState, nomination: Nominated, sign: int) -> None:
        state.nominated = self._nominations.mask_on(state.name)
        held = PodRecord(
            key=nomination.pod, namespace="", node=state.name, requests=nomination.requests
        )
        state.charge_record(held, sign)

    @property
    def nominations(self) -> Mapping[str, Nominated]:
        """The nominations by preemptor pod key (read-only)."""
        return MappingProxyType(self._nominations.by_pod)

    @contextmanager
    def lifted_nominations(self, pods: Iterable[str], priority: int) -> Iterator[None]:
        """A scope in which the nominations that do not bind a unit of these pods and this
        priority are lifted (tentatively): its own, and those of lower priority than it."""
        lift = self._nominations.lifted(pods, priority) if self._nominations.by_pod else []
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
        holdings = self._holdings.sizes()
        records = self._records.sizes()
        return {
            "holdings": holdings["holdings"],
            "orphans": holdings["orphans"],
            "undo": len(self._undo),
            "on_node": records["on_node"],
            "on_node_pods": records["on_node_pods"],
            "node_pods": sum(len(state.pods) for state in self.nodes.values()),
            "gang_bound": holdings["gang_bound"],
            "gang_bound_pods": holdings["gang_bound_pods"],
            "pending_gangs": len(self.pending_gangs),
            "pending_gang_pods": len(self._pending_gang),
            **self._nominations.sizes(),
            "nominated_gpus": sum(s.nominated.bit_count() for s in self.nodes.values()),
            "profile": len(self.profile),
            **self.devices.sizes(),
            **{k: v for k, v in records.items() if k.startswith("index.")},
        }

    def gpu_nodes(self) -> Iterator[NodeState]:
        return self.node_index.gpu_nodes()

    def class_of(self, name: str) -> NodeClass | None:
        """The node's class (None: not a GPU node)."""
        return self.node_index.class_of(name)

    def iter_classes(self, vendor: str) -> Iterator[NodeClass]:
        return self.node_index.iter_classes(vendor)

    def on_every_node(self, key: str) -> bool:
        return self.node_index.on_every_node(key)

    def domain_index(self, hierarchy: Hierarchy) -> DomainIndex:
        """The hierarchy's DomainIndex, built on first use and then kept up to date."""
        return self.node_index.domain_index(hierarchy)

    def path_of(self, hierarchy: Hierarchy, name: str) -> Path:
        """The node's path in the hierarchy (domains.Hierarchy.path), remembered per node."""
        return self.node_index.path_of(hierarchy, name)

    # ---- internals -------------------------------------------------------------------------

    def _relabel(
        self, name: str, before: Mapping[str, str] | None, after: Mapping[str, str] | None
    ) -> None:
        """The node came (``before`` None), left (``after`` None) or was refreshed: its domains
        and its pods' move in the topology counts (nothing to do when its labels stay)."""
        if before == after:
            return
        if before is not None:
            self.domain_counts.node(name, before, -1)
        if after is not None:
            self.domain_counts.node(name, after, +1)
        records = self.index.records
        self.domain_counts.relabel((records[k] for k in self._records.on(name)), before, after)

    def _read_device_classes(self) -> None:
        self.dra_extended = extended_resources(self.inputs.device_classes.values())
        self.devices.forget_derived()

    def _reprofile(self, key: str) -> None:
        """The pod's request class in the target workload, from what is known of it now (asked
        wherever its record, its holding or its node comes or goes): its GPUs when it holds
        some on a known node; else, when it is recorded on a known GPU node asking for cpu, a
        class of no cards (its cpu competes with the GPU pods', as in FGD's target workload);
        else none. Whoever bound it, so a restart reads the same. Not in a tentative scope: it
        is undone on exit, and the profile stays as it was (gang planning places and takes back
        every member of every candidate domain)."""
        if self._undo.open:
            return
        record = self._records.get(key)
        cpu = next((n for r, n in record.requests if r == "cpu"), 0) if record else 0
        holding = self.holdings.get(key)
        found = None
        if holding is not None:
            # Its cards are its node's vendor's: a class pinned to that vendor's pools.
            held = self.nodes.get(holding.node)
            vendor = held.inventory.vendor if held is not None and held.inventory else ""
            _, terms, tolerations = record.reach if record is not None else ANYWHERE
            found = request_class(
                cpu,
                holding.whole.bit_count(),
                (s.core for s in holding.shares),
                (vendor, terms, tolerations),
            )
        if found is None and record is not None and cpu > 0:
            node = self.nodes.get(record.node)
            if node is not None and node.inventory is not None:
                # Its idle GPUs all count wherever it runs: where that is makes no class apart.
                found = (cpu, 0, 0, ANYWHERE)
        self.profile.charge(key, found)
