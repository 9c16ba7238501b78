"""Where one pod (or one node's part of a gang) goes: rules 2, 4 and 5.

Rule 2, whole GPUs. Nodes are compared by a key, smallest first:
  binpack: (-set score, free GPUs, total GPUs, damage, name)
  spread:  (-set score, -free GPUs, total GPUs, damage, name)
The set score is rule 1's internal score of the best k-set on that node, so a multi-GPU pod goes to
the best-connected set first (that is why it asked us); for k = 1 it is always 0 and the key reduces
to "smallest fitting node, then least damage". Ranking runs over ClusterState's node classes, not
nodes; only the winning class is searched for a name, and only a pod with a node selector or a
node with a taint costs a scan of that class. Binpack with a target workload
(snapshot/fragmentation.py, a cluster holding at least ``min_pods`` pods on GPU nodes,
FragmentationSettings in core/settings.py) keeps the set score first and then ranks the nodes by
the fragmentation the pod would remove, not by their free GPUs: (-set score, -gain rank, used
before untouched, damage, name). "Smallest fitting node" is the measure's own answer whenever the
workload has pods a larger node must be kept whole for, and a fixed preference for it leaves more
GPUs idle (bench-frag). The same rule holds at every cluster size: what comes before the name is
read off the class's shape index (snapshot/nodes.NodeClass.shapes), so ranking costs what ranking
shapes costs, not nodes (``_least_fragmenting_node``). A cluster whose binpack order is
``smallestFit`` (CoreSettings.binpack_order, the file's placement.nodeOrder) never ranks by the
measure: the binpack key above decides, as the seeds' HAMi rule states it (``ranked_by``).
A class fits only when its allocatable headroom
covers what the pod asks for of each resource name (a node whose object has no status is not
checked), so the kubelet never refuses a pod for want of allocatable GPUs.

Rule 4, shared GPUs. A card fits when its free core percent, memory and sGPU slots cover the request
and its QoS matches (an idle card takes any). GPU policy binpack takes the busiest fitting cards,
spread the idlest; between nodes, binpack prefers the node whose chosen cards are busiest (keeping
idle cards whole for whole-GPU pods), spread the idlest. Binpack with a target workload takes the
card, and the node, whose fragmentation gain ranks highest instead; ties as for whole GPUs.
Shares, like pods without GPUs, are ranked over the snapshot's share index (snapshot/shares.py:
nodes grouped by their usable cards' state and cpu left), not node by node: what fits and how
it ranks is worked out once per group, and the filter chain is asked only about the names of
the best groups, in the order the rule ranks them, until one passes. With a target workload
(and no preference to score first) a candidate is ranked only when it could still win: the
highest rank a placement can reach on its node (Target.within: the pool's Target.ceiling made
tighter by the node's cpu left and cards) bounds it. A share reads the nodes in the order the
ties go (untouched, then name) and stops at the first that ranks at the highest ceiling with
a name the chain accepts (``_walk``); when a node per group is read without one, or for a pod
without GPUs, every candidate is filed under its bound and ranked only when it comes up, and
the first ranked at its own key with a name the chain accepts is the best (``_best_bounded``).

Rule 5. When nothing fits, every node is counted under the first filter it failed (the GPU reason
of a node the chain accepts is phrased once per share group or node class) and the counts
read like kube-scheduler's: "0/12 nodes are available: 8 have fewer than 4 free GPUs, 4 are not GPU
nodes." Allocatable comes in twice: a node whose allocatable itself is too small says so before it
is counted by its free GPUs; one with enough free GPUs but too little allocatable left says so
after. For a gang, "left" is checked against what all its pending replicas ask for together: a
node whose free GPUs would take more of the gang than its allocatable left covers is short of
allocatable.
"""

from __future__ import annotations

import bisect
import heapq
import operator
from collections import Counter
from collections.abc import Iterable, Set
from itertools import compress, repeat
from typing import Protocol, cast

from ..dra.allocator import NO_SOLUTION
from ..filters.chain import PodFilters
from ..model.decisions import ContainerDevices, Placement, Share
from ..model.names import CORES_PER_CARD
from ..model.objects import PodInput
from ..resources.accounting import PODS, pod_requests
from ..resources.gpusets import SetChoice
from ..resources.inventory import Inventory
from ..resources.requests import PodRequest, RequestError, SharedRequest, parse_request
from ..snapshot.cluster import ClusterState
from ..snapshot.fragmentation import NO_CUT, PoolViews, Reach, Shape, Target
from ..snapshot.names import NameSet
from ..snapshot.nodes import ClassKey, Demand, NodeClass, NodeState, ShapeGroup
from ..snapshot.shares import CardGroup, CardUseKey, ShareIndex
from .domainorder import DomainOrder, domain_order


class Filter(Protocol):
    """A pod's (or a group's) filter chain: filters.chain.PodFilters or GroupFilters."""

    @property
    def has_preferences(self) -> bool: ...

    @property
    def problem(self) -> str | None: ...

    @property
    def nowhere(self) -> bool:
        """True when no node can pass (known without asking each): skip the ranking."""
        ...

    def refused(self) -> Set[str]:
        """Names of nodes ``check`` refuses, known without asking each (not all of them)."""
        ...

    def check(self, node: NodeState) -> list[str]: ...

    def score(self, node: NodeState) -> int: ...


class WholeChoice:
    __slots__ = ("choice", "key", "node")

    def __init__(self, node: NodeState, choice: SetChoice, key: tuple[int, ...]) -> None:
        self.node = node
        self.choice = choice
        self.key = key


_Ranked = tuple[tuple[int, int, int, int], SetChoice] | None


def _class_key(cls: NodeClass, k: int, spread: bool) -> _Ranked:
    """The class's rank for k GPUs (computed once per class: it depends on its key alone)."""
    memo = cls.memo
    if (k, spread) in memo:
        return memo[(k, spread)]  # type: ignore[return-value]
    found = memo[(k, spread)] = _rank_of(cls, k, spread)
    return found


def _rank_of(cls: NodeClass, k: int, spread: bool) -> _Ranked:
    topology, _vendor, total, free, _headroom = cls.key
    free_count = free.bit_count()
    if free_count < k:
        return None
    choice = topology.best_set(free, k)
    if choice is None:
        return None
    score = choice.score if k >= 2 else 0
    return (-score, -free_count if spread else free_count, total, choice.damage), choice


def best_whole_node(
    state: ClusterState,
    filters: Filter,
    k: int,
    vendor: str,
    spread: bool,
    demand: Demand = (),
    frag: tuple[Target, int] | None = None,
    domains: DomainOrder | None = None,
) -> WholeChoice | None:
    """Rule 2: the best node for k whole GPUs of ``vendor`` that the filter chain accepts, whose
    allocatable headroom covers ``demand`` (the pods' GPUs per resource name). With ``frag``
    (the target workload and the pod's cpu), the nodes of the best key are told apart by the
    fragmentation the pod would leave on each; with ``domains`` (a pod that needs no domain),
    by the broken domains first (domainorder.py); then by name."""
    if filters.problem is not None or filters.nowhere:
        return None
    # (rank, position, class, set): the position makes every entry unique, so entries order
    # by rank without a key function and never compare classes.
    ranked: list[tuple[tuple[int, int, int, int], int, NodeClass, SetChoice]] = []
    # The usual demand is one resource name: checked inline, it costs next to nothing per class.
    index, n = demand[0] if len(demand) == 1 else (-1, 0)
    memo_key = (k, spread)
    for cls in state.iter_classes(vendor):
        headroom = cls.key[4]
        if headroom is not None and demand:
            if index >= 0:
                if headroom[index] < n:
                    continue
            elif any(headroom[i] < m for i, m in demand):
                continue
        # _class_key's memo read inline: this loop runs over every class for every pod.
        found = cls.memo[memo_key] if memo_key in cls.memo else _class_key(cls, k, spread)
        if found is not None:
            ranked.append((found[0], len(ranked), cls, found[1]))  # type: ignore[index]
    if filters.has_preferences:
        ranked.sort()
        return _best_preferred(state, [(r, c, s) for r, _, c, s in ranked], filters)
    if frag is not None:
        # With a target workload, a group is every class of the same set score, best first:
        # the measure ranks their nodes, not the free count (see _least_fragmenting_node).
        state.node_index.shaped(frag[0].views.reaches)
        scores: dict[int, list[tuple[tuple[int, int, int, int], NodeClass, SetChoice]]] = {}
        for entry_key, _, cls, choice in ranked:
            scores.setdefault(entry_key[0], []).append((entry_key, cls, choice))
        for score in sorted(scores):
            picked = _least_fragmenting_node(state, scores[score], filters, k, *frag, domains)
            if picked is not None:
                return WholeChoice(*picked)
        return None
    # Best rank first, one group of equal ranks at a time (in the order the classes came);
    # usually the first group takes the pod, so a heap (linear to build) serves instead of
    # sorting every class.
    heapq.heapify(ranked)
    while ranked:
        key = ranked[0][0]
        group: list[tuple[tuple[int, int, int, int], NodeClass, SetChoice]] = []
        while ranked and ranked[0][0] == key:
            entry_key, _, cls, choice = heapq.heappop(ranked)
            group.append((entry_key, cls, choice))
        if domains is not None:
            choices = {cls.key: choice for _, cls, choice in group}
            for node, cls in domains.nodes(cls for _, cls, _ in group):
                if not filters.check(node):
                    return WholeChoice(node, choices[cls.key], key)
            continue
        best: tuple[str, NodeClass, SetChoice] | None = None
        for _, cls, choice in group:
            name = _first_accepting(state, cls, filters, best[0] if best else None)
            if name is not None and (best is None or name < best[0]):
                best = (name, cls, choice)
        if best is not None:
            return WholeChoice(state.nodes[best[0]], best[2], key)
    return None


# Nodes the measure ties: a shape group's names (or those of one cpu left), their set and
# rank key, and their class's key.
_Tied = tuple[NameSet, SetChoice, tuple[int, int, int, int], ClassKey]


def _least_fragmenting_node(
    state: ClusterState,
    group: list[tuple[tuple[int, int, int, int], NodeClass, SetChoice]],
    filters: Filter,
    k: int,
    target: Target,
    cpu: int,
    domains: DomainOrder | None,
) -> tuple[NodeState, SetChoice, tuple[int, int, int, int]] | None:
    """Among the accepting nodes of one set score, the best by (the fragmentation gain's rank
    (snapshot/fragmentation.gain_rank), highest first; a node some GPU pod uses before an
    untouched one; the damage the set does; the name). What comes before the name is a function
    of a node's class, cards and untouched flag (NodeClass.shapes) and of its cpu left up to
    what the pod and the workload could use (Target.roomy): the classes' shape groups are
    ranked, each cpu value below that one by one and the rest together, not the nodes, and
    ranks are looked up by shape (most classes share a few). The filter chain is asked best
    first, only until one node passes: the smallest accepting name among the entries of the
    best rank (with ``domains``, a pod that needs no domain: the first accepting node in the
    domains' order, broken domains first, then by name), then of the next."""
    take = ((CORES_PER_CARD, CORES_PER_CARD),) * k
    seen: dict[Shape, int] = {}
    # (order, position, shape group, its cpus from, to, set, class key): the position makes
    # every entry unique; the names are gathered only for the entries the chain is asked about.
    ranked: list[
        tuple[
            tuple[int, int, int],
            int,
            ShapeGroup,
            int,
            int,
            SetChoice,
            tuple[int, int, int, int],
            ClassKey,
        ]
    ] = []
    roomies: dict[tuple[int, ...], int] = {}
    for key, cls, choice in group:
        damage = choice.damage
        for shapes in cls.shapes.values():
            cards, cpus, pool = shapes.cards, shapes.cpus, shapes.pool
            roomy = roomies.get(cards)
            if roomy is None:
                roomy = roomies[cards] = target.roomy(cards, cpu)
            below = bisect.bisect_left(cpus, roomy)
            for i in range(below):
                shape = (cpus[i], cards, pool)
                rank = seen.get(shape)
                if rank is None:
                    rank = seen[shape] = target.rank(shape, cpu, take)
                order = (-rank, shapes.untouched, damage)
                ranked.append((order, len(ranked), shapes, i, i + 1, choice, key, cls.key))
            if below < len(cpus):
                shape = (roomy, cards, pool)
                rank = seen.get(shape)
                if rank is None:
                    rank = seen[shape] = target.rank(shape, cpu, take)
                order = (-rank, shapes.untouched, damage)
                ranked.append((order, len(ranked), shapes, below, len(cpus), choice, key, cls.key))
    heapq.heapify(ranked)
    nodes = state.nodes
    while ranked:
        order = ranked[0][0]
        best: tuple[str, SetChoice, tuple[int, int, int, int]] | None = None
        tied: list[_Tied] = []
        while ranked and ranked[0][0] == order:
            _, _, shapes, start, stop, choice, key, cls_key = heapq.heappop(ranked)
            if start == 0 and stop == len(shapes.cpus):
                tied.append((shapes.names, choice, key, cls_key))
            else:
                tied += [(shapes.by_cpu[c], choice, key, cls_key) for c in shapes.cpus[start:stop]]
        if domains is not None:
            picked = _first_in_domains(state, tied, filters, domains)
            if picked is not None:
                return picked
            continue
        for names, choice, key, _ in tied:
            name = _first_accepting(state, names, filters, best[0] if best else None)
            if name is not None and (best is None or name < best[0]):
                best = (name, choice, key)
        if best is not None:
            return nodes[best[0]], best[1], best[2]
    return None


def _first_in_domains(
    state: ClusterState, tied: list[_Tied], filters: Filter, domains: DomainOrder
) -> tuple[NodeState, SetChoice, tuple[int, int, int, int]] | None:
    """The first node of the tied entries the chain accepts, in the domains' order (broken
    domains first), then by name: every node of the best rank is ordered, not only ranked.
    The domains are walked best first, a tier of equal rank at a time (DomainOrder.tiers),
    and only until a tier holds a node the chain accepts (issue 32: ranking every tied node,
    thousands when the untouched nodes tie, made single pods on bench-core's topology
    workload slower than 20 ms at the 99th percentile, and gathering them all by domain still
    cost 0.7 ms a decision)."""
    refused = filters.refused()
    for tier in domains.tiers({entry[3] for entry in tied}):
        for name in tier:
            if name in refused:
                continue
            for names, choice, key, _ in tied:
                if name in names.names:
                    node = state.nodes[name]
                    if not filters.check(node):
                        return node, choice, key
                    break
    return None


def _best_preferred(
    state: ClusterState,
    ranked: list[tuple[tuple[int, int, int, int], NodeClass, SetChoice]],
    filters: Filter,
) -> WholeChoice | None:
    """Among the accepting nodes of the best set score: highest preference, then the rest of
    the key, then the name."""
    pos = 0
    while pos < len(ranked):
        score = ranked[pos][0][0]
        best: tuple[tuple[int, tuple[int, ...], str], NodeState, SetChoice, tuple[int, ...]] | None
        best = None
        while pos < len(ranked) and ranked[pos][0][0] == score:
            key, cls, choice = ranked[pos]
            pos += 1
            for name in cls.in_order():
                node = state.nodes[name]
                if filters.check(node):
                    continue
                order = (-filters.score(node), key[1:], name)
                if best is None or order < best[0]:
                    best = (order, node, choice, key)
        if best is not None:
            return WholeChoice(best[1], best[2], best[3])
    return None


def _first_accepting(
    state: ClusterState, cls: NameSet, filters: Filter, below: str | None
) -> str | None:
    """The smallest name in the class (or share group) the chain accepts (only names below
    ``below`` matter: a smaller one of an equal class is already chosen)."""
    name = cls.first()
    if below is not None and name >= below:
        return None
    if not filters.check(state.nodes[name]):
        return name
    refused = filters.refused()  # refused for their domain: not asked one by one
    for name in cls.in_order():
        if below is not None and name >= below:
            return None
        if name not in refused and not filters.check(state.nodes[name]):
            return name
    return None


def whole_placement(
    pod: PodInput, req: PodRequest, node: NodeState, indices: Iterable[int], gang: str | None
) -> Placement:
    inv = node.inventory
    assert inv is not None
    devices = tuple(sorted(indices))
    uuids = tuple(inv.device(i).uuid for i in devices)
    return Placement(
        pod.key,
        pod.uid,
        node.name,
        devices,
        uuids,
        (),
        gang,
        split_by_container(req, inv, devices),
        req.resources,
    )


def split_by_container(
    req: PodRequest, inv: Inventory, devices: tuple[int, ...]
) -> tuple[ContainerDevices, ...]:
    """Share the pod's GPUs out to its containers in the kubelet's order (sidecars first), each
    taking the best-connected subset of what is left (rule 1 inside the pod), so a two-GPU
    container of a four-GPU pod gets an NVLink pair, not whichever two come first."""
    left = 0
    for i in devices:
        left |= 1 << i
    out = []
    for name, k in req.containers:
        choice = inv.topology.best_set(left, k)
        if choice is None:  # cannot happen when the counts add up; then say nothing per container
            return ()
        left &= ~choice.mask
        mine = tuple(sorted(choice.indices))
        out.append(ContainerDevices(name, mine, tuple(inv.device(i).uuid for i in mine)))
    return tuple(out)


def ranked_by(state: ClusterState, spread: bool) -> Target | None:
    """The target workload binpack ranks nodes by (rule 6), or None, and the rules before it
    decide alone: a spread policy asks for the idlest nodes (or cards) and gets them; a cluster
    whose binpack order is ``smallestFit`` (placement.nodeOrder) wants the seeds' HAMi rule, the
    smallest fitting node and the busiest card, measure or not; and too few GPU pods held make
    no target."""
    if spread or state.settings.binpack_order == "smallestFit":
        return None
    return state.profile.target()


def place_whole(
    state: ClusterState, pod: PodInput, req: PodRequest, filters: Filter
) -> Placement | None:
    assert req.vendor is not None
    spread = req.node_policy == "spread"
    target = ranked_by(state, spread)
    found = best_whole_node(
        state,
        filters,
        req.gpus,
        req.vendor,
        spread,
        state.demand(req.resources),
        None if target is None else (target, _cpu(state, pod)),
        None if spread else domain_order(state),
    )
    if found is None:
        return None
    return whole_placement(pod, req, found.node, found.choice.indices, None)


def place_without_gpus(state: ClusterState, pod: PodInput, filters: PodFilters) -> Placement | None:
    """A pod of ours that asks for no GPU: non-GPU nodes first, so GPU nodes stay for GPU pods;
    then the preference score, then (on GPU nodes) the fragmentation its cpu would add and a
    node some GPU pod uses before an untouched one, then the name. GPU nodes are ranked by
    share group (snapshot/shares.py: what the measure reads of a node is its group's), as for
    shares."""
    if filters.problem is not None:
        return None
    best: tuple[tuple[int, str], NodeState] | None = None
    for name in state.node_index.plain:
        node = state.nodes[name]
        if filters.check(node):
            continue
        key = (-filters.score(node), name)
        if best is None or key < best[0]:
            best = (key, node)
    if best is not None:
        return Placement(pod.key, pod.uid, best[1].name, (), (), (), None)
    target = ranked_by(state, False)
    cpu = _cpu(state, pod)
    asked = _asked_cpu(filters)
    ranked: list[tuple[tuple[int, int, int], int, NameSet, list[_Fit]]] = []
    if target is not None and not filters.has_preferences:
        # Filed under their bounds and ranked as they come up, as shares are (place_shared):
        # a node whose cpu left feeds every class after the pod's ranks at the bound, 50.
        pending: list[_Pending] = []
        _file(pending, target, state.node_index.shares.groups(), (cpu, 0, asked))
        found = _best_bounded(state, target, pending, cpu, None, filters)
    else:
        for group in state.node_index.shares.groups():
            fresh = int(group.untouched) if target is not None else 0
            for left, names in group.by_cpu.items():
                if asked > left >= 0:
                    continue
                # On a GPU node, the cpu it takes may leave the held workload's classes no room.
                frag = (
                    0 if target is None else -target.rank((left, group.free, group.pool), cpu, ())
                )
                ranked.append(((frag, fresh, 0), len(ranked), names, []))
        found = (
            _best_scored(state, ranked, filters)
            if filters.has_preferences
            else _best_ranked(state, ranked, filters)
        )
    if found is None:
        return None
    return Placement(pod.key, pod.uid, found[0].name, (), (), (), None)


def _asked_cpu(filters: PodFilters) -> int:
    """The pod's cpu request as the filter chain checks it: a node whose cpu left (known, not
    -1) is below it is refused (Insufficient cpu), so the groups of such nodes are not ranked."""
    return next((n for r, n in filters.requests if r == "cpu"), 0)


# ---- shared GPUs (rule 4) --------------------------------------------------------------------


def _cpu(state: ClusterState, pod: PodInput) -> int:
    """The pod's cpu request in millicores (what the fragmentation measure weighs)."""
    return next(
        (n for r, n in pod_requests(pod, state.gpu_names, memo=state.memos.requests) if r == "cpu"),
        0,
    )


def _card_fit(
    memory_mib: int, use: CardUseKey | None, sgpu_per_card: int, req: SharedRequest
) -> tuple[int, int] | None:
    """(free cores after, memory MiB to charge) when a card of ``memory_mib`` in ``use`` (None:
    no pod shares it) fits, else None."""
    core, used_memory, sgpu, qos = use if use is not None else (0, 0, 0, None)
    memory = req.memory_mib
    if req.memory_ratio:
        if memory_mib <= 0:
            return None
        memory = memory_mib * req.memory_ratio // 100
    if core + req.core > CORES_PER_CARD:
        return None
    if memory and (memory_mib <= 0 or used_memory + memory > memory_mib):
        return None
    if req.sgpu:
        if sgpu_per_card <= 0 or sgpu + req.sgpu > sgpu_per_card:
            return None
        if qos is not None and qos != req.qos:
            return None
    return CORES_PER_CARD - core - req.core, memory


# What a memo holds no answer for yet (None is an answer: too few cards fit).
_UNKNOWN = object()
# (free cores after, card index, memory MiB to charge) of a card that fits a share.
_Fit = tuple[int, int, int]
# A group's answer for one request: the fitting cards a one-card share ranks by the measure (in
# busiest-first order, spread: idlest, the first of each free percent: the others rank the same
# and lose the tie to it), the cards the rules before the measure take, and the span of free
# percents the first bound the measure by (_card_span).
_Fits = tuple[list[_Fit], list[_Fit], tuple[int, int]] | None


def _fitting_cards(group: CardGroup, shared: SharedRequest, spread_cards: bool) -> _Fits:
    """What ``group``'s nodes offer ``shared`` (None: too few cards fit), remembered by the
    group: it depends on the group's key alone."""
    free, core = group.free, shared.core
    # Fewer than ``count`` cards with ``core`` free: too few fit (known without asking the
    # memo, which most groups of a full cluster would answer so). ``free`` leaves out the cards
    # with none free, which a share asking for no core could still use.
    if core and (len(free) < shared.cards or free[shared.cards - 1] < core):
        return None
    memo_key = (shared, spread_cards)
    if memo_key in group.memo:
        return group.memo[memo_key]  # type: ignore[return-value]
    _vendor, sgpu_per_card, _memory, _untouched, cards, _pool = group.key
    fits: list[_Fit] = []
    for index, memory_mib, use in cards:
        fit = _card_fit(memory_mib, use, sgpu_per_card, shared)
        if fit is not None:
            fits.append((fit[0], index, fit[1]))
    found: _Fits = None
    if len(fits) >= shared.cards:
        fits.sort(key=lambda f: (-f[0] if spread_cards else f[0], f[1]))
        distinct = [f for i, f in enumerate(fits) if not i or f[0] != fits[i - 1][0]]
        found = (distinct, fits[: shared.cards], _card_span(distinct, shared))
    group.memo[memo_key] = found
    return found


def place_shared(
    state: ClusterState, pod: PodInput, req: PodRequest, filters: PodFilters
) -> Placement | None:
    """Rule 4 (and rule 6 for shares): the best node and cards for a shared request.

    Nodes are ranked by group of the share index (snapshot/shares.py), never one by one: the
    cards that fit, the rank's key and the fragmentation gain are a group's, and the filter
    chain is asked about a group's names in name order, the best key first, only until one
    passes. A node whose cpu left is below the pod's request is not ranked at all: the chain
    would refuse it (Insufficient cpu). With preferences, every node the rank reaches is scored,
    as the score comes first."""
    shared = req.shared
    assert shared is not None
    if filters.problem is not None:
        return None
    spread_cards = req.gpu_policy == "spread"
    spread_nodes = req.node_policy == "spread"
    # Binpack weighs fragmentation first; spread asks for idle cards and nodes, and gets them.
    target = ranked_by(state, spread_cards or spread_nodes)
    cpu = _cpu(state, pod)
    asked = _asked_cpu(filters)
    core, count = shared.core, shared.cards
    index = state.node_index.shares
    # Ranked by the measure with no preference to score first: each candidate filed under the
    # rank it can reach at most, and ranked only when it comes up (_best_bounded).
    if target is not None and not filters.has_preferences:
        asks = (cpu, core * count, asked)
        known: _Known = {}
        walked = _walk(
            state,
            target,
            asks,
            shared,
            spread_cards,
            filters,
            index.group_count(shared.vendor, core),
            known,
        )
        if walked.decided:
            best = walked.best
            return None if best is None else _share_placement(pod, shared, *best)
        pending: list[_Pending] = []
        if walked.filed is not None:
            # Only a candidate ranking above the walk's best can beat it (_Walked).
            pending.append(walked.filed)
        groups = index.groups(shared.vendor, core)
        _file(pending, target, groups, asks, shared, spread_cards, known, walked)
        best = _best_bounded(state, target, pending, cpu, shared, filters)
        return None if best is None else _share_placement(pod, shared, *best)
    # (key, position, names, cards): the key is the node key's part before the name.
    ranked: list[tuple[tuple[int, int, int], int, NameSet, list[_Fit]]] = []
    for group in index.groups(shared.vendor, core):
        found = _fitting_cards(group, shared, spread_cards)
        if found is None:
            continue
        distinct, chosen, _span = found
        rest = (0, 0)
        if target is None:
            free_after = sum(f[0] for f in chosen)
            # Busiest (spread: idlest) cards, then idle cards kept whole on the nodes with most.
            rest = (-free_after if spread_nodes else free_after, group.idle)
        # Read once a group, not once per cpu left (some 1,700 candidates a share right after
        # the target changed: issue 32).
        pool, untouched, free = group.pool, int(group.untouched), group.free
        for left, names in group.by_cpu.items():
            if asked > left >= 0:
                continue
            if target is None:
                ranked.append(((0, *rest), len(ranked), names, chosen))
                continue
            frag, cards = _least_fragmenting(
                target, (left, free, pool), cpu, shared, distinct, chosen
            )
            # The measure weighs what the free counts would; its ties go to a node some GPU pod
            # uses already, then by name (bench-frag: any finer order leaves more idle).
            ranked.append(((frag, untouched, 0), len(ranked), names, cards))
    if filters.has_preferences:
        best = _best_scored(state, ranked, filters)
    else:
        best = _best_ranked(state, ranked, filters)
    return None if best is None else _share_placement(pod, shared, *best)


def _share_placement(
    pod: PodInput, shared: SharedRequest, node: NodeState, cards: list[_Fit]
) -> Placement:
    assert node.inventory is not None
    shares = tuple(
        Share(
            index=i,
            uuid=node.inventory.device(i).uuid,
            core=shared.core,
            memory_mib=memory,
            sgpu=shared.sgpu,
            qos=shared.qos,
        )
        for _, i, memory in sorted(cards, key=lambda f: f[1])
    )
    return Placement(pod.key, pod.uid, node.name, (), (), shares, None)


def _best_ranked(
    state: ClusterState,
    ranked: list[tuple[tuple[int, int, int], int, NameSet, list[_Fit]]],
    filters: Filter,
) -> tuple[NodeState, list[_Fit]] | None:
    """The smallest name the chain accepts among the groups of the best key, key by key (a
    heap: usually the first key takes the pod)."""
    heapq.heapify(ranked)
    while ranked:
        key = ranked[0][0]
        best: tuple[str, list[_Fit]] | None = None
        while ranked and ranked[0][0] == key:
            _, _, names, cards = heapq.heappop(ranked)
            name = _first_accepting(state, names, filters, best[0] if best else None)
            if name is not None and (best is None or name < best[0]):
                best = (name, cards)
        if best is not None:
            return state.nodes[best[0]], best[1]
    return None


# A share's candidate in _best_bounded: (key, stage, position, shape, names, the cards that fit
# (ranked: the cards taken), the busiest cards). The key is (minus the rank, untouched, a name):
# at stage 0 the rank is the ceiling and the name the candidate's first, at stage 1 the rank is
# the candidate's own, at stage 2 the name is the first its chain accepts.
_Pending = tuple[tuple[int, int, str], int, int, Shape, NameSet, list[_Fit], list[_Fit]]
# What _walk ranked: per (group, by id, and cpu left), its rank and the cards it takes.
_Known = dict[tuple[int, int], tuple[int, list[_Fit]]]


def _file(
    pending: list[_Pending],
    target: Target,
    groups: Iterable[CardGroup],
    asks: tuple[int, int, int],
    shared: SharedRequest | None = None,
    spread_cards: bool = False,
    known: _Known | None = None,
    walked: _Walked | None = None,
) -> None:
    """File the candidates of ``groups`` for _best_bounded under the highest rank each can
    reach (Target.within): one per cpu left the pod's cpu request fits in, of the groups
    whose cards fit ``shared`` (None: a pod without GPUs, which takes no card); one ``known``
    ranks (_walk ranked it) is filed ranked; with what a walk that ran out of its budget found
    (``walked``), only those that could rank above it. ``asks``: (the pod's cpu as the
    measure weighs it, the card percent it takes, its cpu request as the chain checks it).
    One call a decision, the loop over groups inside it: a share files some hundred groups,
    and what the loop reads per candidate is a few products (issue 32's tail)."""
    cpu, taken, asked = asks
    # A candidate of known cpu left whose cut is below ``floor`` cannot rank above ``least``;
    # for a one-card share, nor one below the floor of its cpu left's level (_Walked.floor_at).
    # No bound is below 0: with no best to beat, ``least`` -1 leaves nothing out.
    floor, least = NO_CUT, -1
    floors: dict[tuple[frozenset[Reach], tuple[int, int], int], int] = {}
    if walked is not None and walked.best is not None:
        floor, least, floors = walked.floor, walked.rank, walked.floors
    views, cut, bound, levels = target.views, target.cut, target.bound, target.asks
    unknown = len(levels)  # the level of a node whose cpu left is not known: every class fed
    fits: list[_Fit] = []
    busiest: list[_Fit] = []
    span = (0, 0)
    memo_key = (shared, spread_cards)
    for group in groups:
        if shared is not None:
            # _fitting_cards's memo read inline: this loop runs over every group for every share.
            found = cast(_Fits, group.memo.get(memo_key, _UNKNOWN))
            if found is _UNKNOWN:
                found = _fitting_cards(group, shared, spread_cards)
            if found is None:
                continue
            fits, busiest, span = found
        idle = group.free_sum
        by_level = least >= 0 and span[0] > 0
        blocked: frozenset[Reach] | None = None
        for left, names in group.by_cpu.items():
            each, level = 0, unknown
            if left >= 0:
                if asked > left:
                    continue
                each = cut(left, idle, cpu, taken)
                if each < floor:
                    continue
                level = bisect.bisect_right(levels, left)
            if blocked is None:
                blocked = views.blocked(group.pool)
            if by_level and left >= 0:
                assert walked is not None
                # floor_at's memo read inline (a call per candidate measured 3% on the p99)
                low = floors.get((blocked, span, level))
                if low is None:
                    low = walked.floor_at(target, blocked, span, level, asks)
                if each < low:
                    continue
            shape = (left, group.free, group.pool)
            ranked = known.get((id(group), left)) if known else None
            if ranked is None:
                high = bound(blocked, level, each, taken, span)
                if high <= least:
                    continue
                key = (-high, int(group.untouched), names.first())
                pending.append((key, 0, len(pending), shape, names, fits, busiest))
            else:  # (a few: the walk's own ranks; one no higher than the best loses to it)
                key = (-ranked[0], int(group.untouched), names.first())
                pending.append((key, 1, len(pending), shape, names, ranked[1], busiest))


class _Walked:
    """What _walk found: whether the nodes it read decide the share (``decided``), and the
    best node the chain accepts among them with the cards it takes (``best``; None: none).

    A walk that ran out of its budget before it decided still bounds the search that follows
    (place_shared files the rest): every node it read ranks no higher than ``best`` or was
    refused, and every node it did not read comes after ``best`` in the (untouched, name)
    order ties go by, so only a candidate ranking strictly above ``rank`` can beat it: not
    one of known cpu left whose cut is below ``floor`` (Target.cut_beyond) or, for a
    one-card share, below the floor of its cpu left's level (``floor_at``), nor one whose
    bound is no higher. ``best`` is filed as _best_bounded files a candidate the chain
    accepted (``filed``)."""

    __slots__ = ("best", "decided", "filed", "floor", "floors", "rank")

    def __init__(
        self,
        decided: bool,
        found: tuple[int, NodeState, CardGroup, int, list[_Fit]] | None = None,
        floor: int = NO_CUT,
    ) -> None:
        self.decided = decided
        self.best: tuple[NodeState, list[_Fit]] | None = None
        self.rank = 0
        self.filed: _Pending | None = None
        if found is not None:
            rank, node, group, left, cards = found
            self.best, self.rank = (node, cards), rank
            key = (-rank, int(group.untouched), node.name)
            self.filed = (key, 2, -1, (left, group.free, group.pool), NameSet(), cards, [])
        self.floor = floor
        self.floors: dict[tuple[frozenset[Reach], tuple[int, int], int], int] = {}

    def floor_at(
        self,
        target: Target,
        blocked: frozenset[Reach],
        span: tuple[int, int],
        level: int,
        asks: tuple[int, int, int],
    ) -> int:
        """The least cut with which a one-card share's bound (its cards' ``span``) on a node
        whose pool's views.blocked is ``blocked`` and whose cpu left covers the first
        ``level`` of the target's asks can be above the best (Target.cut_beyond at that
        level), remembered through the decision: groups alike in all three share it."""
        key = (blocked, span, level)
        found = self.floors.get(key)
        if found is None:
            cpu, taken, asked = asks
            found = self.floors[key] = target.cut_beyond(
                blocked, cpu, taken, asked < cpu, self.rank, level, span
            )
        return found


def _walk(
    state: ClusterState,
    target: Target,
    asks: tuple[int, int, int],
    shared: SharedRequest,
    spread_cards: bool,
    filters: Filter,
    budget: int,
    ranked: _Known,
) -> _Walked:
    """What _best_bounded finds for a share, read node by node in the order its keys tie in,
    while that is cheaper than filing every candidate: decided when the nodes read decide
    it, else after ``budget`` nodes (what filing reads: a group each) the best of those read,
    which bounds the filing that follows (_Walked).

    A candidate's key is (minus its rank, untouched, name), its rank at most its node's bound
    (Target.within), that at most its pool's ceiling (Target.ceiling), and a small share's
    candidates mostly tie at the highest ceiling (issue 32: at 5,000 nodes a share of a tenth
    of a card filed some 1,600, and filing alone cost several times the millisecond a share
    may take). Read in (untouched, name) order, a node can only beat the best so far with a
    higher rank, so one whose pool's ceiling or own bound is no higher is passed over
    unranked (most of them told by their cut alone, below the least that could still beat
    it: Target.cut_beyond, before their cards are read), one that ranks no higher is not
    asked about, and once the best reaches the highest ceiling of the share's vendor's pools
    no node still to read can beat it. The nodes short of the share's cpu or with no card
    its percent free are not read at all (ShareIndex.candidates: on a full cluster, eight
    in ten of those before the first that reaches the ceiling), but count against the
    budget as if they were, so a share files exactly when it would have. A share of much of
    a card seldom reaches it (placing most of a card takes it from classes that could use
    it): its candidates that could still beat the best so far are filed after ``budget``
    nodes, those it ranked with their ranks (``ranked``, filled). ``asks`` as _file's."""
    cpu, taken, asked = asks
    index = state.node_index.shares
    short = asked < cpu
    # Per the reaches that leave a pool out (what a pool's ceiling reads of it), the ceiling:
    # nodes with a taint each are a pool each (issue 32's review: 5,000 ceilings a share).
    views = target.views
    ceilings: dict[frozenset[Reach], int] = {}
    for pool in index.pools():
        blocked = views.blocked(pool)
        if blocked not in ceilings and (shared.vendor is None or pool[0] == shared.vendor):
            ceilings[blocked] = target.ceiling(pool, cpu, taken, short)
    if not ceilings:
        return _Walked(True)
    top = max(ceilings.values())
    best: tuple[int, str, CardGroup, int, list[_Fit]] | None = None
    decided = True
    # The least cut (Target.cut) of a node that can rank above the best so far: a node of
    # known cpu left below it is passed over without its bound (Target.cut_beyond). No floor
    # before there is a best.
    floor = NO_CUT
    # Per group read (by id: a group lives through the decision), its pool's ceiling and the
    # cards it offers, or None when too few fit.
    groups: dict[int, _Offer | None] = {}
    cut, bound, levels = target.cut, target.bound, target.asks
    nodes, over = index.candidates(shared.vendor, asked, shared.core, budget)
    for name, group, left in nodes:
        each = 0
        if left >= 0:
            if asked > left:
                continue
            # Told by its cut alone, before its cards are read (most nodes passed over are).
            if best is not None:
                each = cut(left, group.free_sum, cpu, taken)
                if each < floor:
                    continue
        at = id(group)
        if at in groups:
            offer = groups[at]
        else:
            offer = groups[at] = _offer(group, shared, spread_cards, views, ceilings)
        if offer is None or (best is not None and offer[0] <= best[0]):
            continue
        known = ranked.get((at, left))
        if known is None:
            if best is not None:
                level = bisect.bisect_right(levels, left) if left >= 0 else len(levels)
                if bound(offer[4], level, each, taken, offer[3]) <= best[0]:
                    continue
            shape = (left, group.free, group.pool)
            # The chain before the rank: most nodes it refuses here are short of memory, and a
            # rank costs several checks (issue 32: some 19 of the 23 ranks of the slowest
            # shares were of nodes the chain then refused).
            if filters.check(state.nodes[name]):
                continue
            frag, cards = _least_fragmenting(target, shape, cpu, shared, offer[1], offer[2])
            known = ranked[(at, left)] = (-frag, cards)
            if best is not None and -frag <= best[0]:
                continue
        elif (best is not None and known[0] <= best[0]) or filters.check(state.nodes[name]):
            continue
        rank, cards = known
        best = (rank, name, group, left, cards)
        if rank >= top:
            break
        floor = min(target.cut_beyond(blocked, cpu, taken, short, rank) for blocked in ceilings)
    else:
        if over:  # the budget ran out before the order did
            decided = False
    found = None if best is None else (best[0], state.nodes[best[1]], *best[2:])
    return _Walked(decided, found, floor)


# What _offer finds of a group: (its pool's ceiling, the cards the measure ranks, the busiest,
# their span, its pool's views.blocked).
_Offer = tuple[int, list[_Fit], list[_Fit], tuple[int, int], frozenset[Reach]]


def _offer(
    group: CardGroup,
    shared: SharedRequest,
    spread_cards: bool,
    views: PoolViews,
    ceilings: dict[frozenset[Reach], int],
) -> _Offer | None:
    """For _walk: ``group``'s pool's ceiling, the cards it offers ``shared`` (those the
    measure ranks, the busiest), _card_span of them and its pool's views.blocked, or None
    when too few of its cards fit (as place_shared skips a group)."""
    if shared.vendor is not None and group.key[0] != shared.vendor:
        return None
    fits = _fitting_cards(group, shared, spread_cards)
    if fits is None:
        return None
    distinct, busiest, span = fits
    blocked = views.blocked(group.pool)
    return ceilings[blocked], distinct, busiest, span, blocked


def _card_span(fits: list[_Fit], shared: SharedRequest) -> tuple[int, int]:
    """The least and the most free percent (before) of the cards among ``fits`` a one-card
    share could take from: what Target.within bounds its gain by; (0, 0) for a share of
    several cards."""
    if shared.cards != 1:
        return 0, 0
    # In busiest-first order, or idlest-first for a spread policy (_fitting_cards).
    first, last = fits[0][0] + shared.core, fits[-1][0] + shared.core
    return min(first, last), max(first, last)


def _best_bounded(
    state: ClusterState,
    target: Target,
    pending: list[_Pending],
    cpu: int,
    shared: SharedRequest | None,
    filters: Filter,
) -> tuple[NodeState, list[_Fit]] | None:
    """The smallest (minus the rank, untouched, name) the chain accepts, as _best_ranked finds
    it, without ranking every candidate: each key is at most what the candidate can come to
    (its bound, Target.within, or its rank when _walk worked it out, and its first name), so
    the first candidate that comes up with its own rank and a name the chain accepts is the
    best. Most of a share's candidates have a bound below the best rank (on bench-core's
    share-heavy workload the bound is the rank itself on most nodes: issue 32), and a pod
    without GPUs ranks its bound, the ceiling of 50, on every node its cpu leaves room on, so
    most decisions rank a few dozen. ``shared`` None: a pod without GPUs (no cards taken)."""
    heapq.heapify(pending)
    while pending:
        key, stage, position, shape, names, fits, busiest = heapq.heappop(pending)
        if stage == 0:
            if shared is None:  # a pod without GPUs: its cpu alone
                frag, cards = -target.rank(shape, cpu, ()), fits
            else:
                frag, cards = _least_fragmenting(target, shape, cpu, shared, fits, busiest)
            ranked = ((frag, key[1], key[2]), 1, position, shape, names, cards, busiest)
            heapq.heappush(pending, ranked)
        elif stage == 1:
            name = _first_accepting(state, names, filters, None)
            if name is not None:
                accepted = ((key[0], key[1], name), 2, position, shape, names, fits, busiest)
                heapq.heappush(pending, accepted)
        else:
            return state.nodes[key[2]], fits
    return None


def _best_scored(
    state: ClusterState,
    ranked: list[tuple[tuple[int, int, int], int, NameSet, list[_Fit]]],
    filters: Filter,
) -> tuple[NodeState, list[_Fit]] | None:
    """With preferences: the best (preference score, key, name) the chain accepts."""
    best: tuple[tuple[int, tuple[int, int, int], str], NodeState, list[_Fit]] | None = None
    for key, _, names, cards in ranked:
        for name in names.names:
            node = state.nodes[name]
            if filters.check(node):
                continue
            order = (-filters.score(node), key, name)
            if best is None or order < best[0]:
                best = (order, node, cards)
    return None if best is None else (best[1], best[2])


def _least_fragmenting(
    target: Target,
    shape: Shape,
    cpu: int,
    shared: SharedRequest,
    distinct: list[_Fit],
    busiest: list[_Fit],
) -> tuple[int, list[_Fit]]:
    """(minus the gain rank, the cards) of a share on a node of ``shape``: one card, the one
    whose gain ranks highest (the busiest of those on ties: ``distinct`` is in busiest-first
    order, one card per free percent); several cards, the busiest, ranked by their gain
    together."""
    core = shared.core
    if shared.cards > 1:
        take = tuple((f[0] + core, core) for f in busiest)
        return -target.rank(shape, cpu, take), busiest
    best: tuple[int, _Fit] | None = None
    for fit in distinct:
        rank = target.rank(shape, cpu, ((fit[0] + core, core),))
        if best is None or rank > best[0]:
            best = (rank, fit)
    assert best is not None
    return -best[0], [best[1]]


# ---- reasons (rule 5) ------------------------------------------------------------------------

_PHRASES: dict[str, tuple[str, str]] = {
    "not-gpu": ("is not a GPU node", "are not GPU nodes"),
    "invalid": ("has an invalid GPU inventory", "have an invalid GPU inventory"),
}


def refusals(state: ClusterState, pod: PodInput) -> list[tuple[str, str]]:
    """Why each node refuses ``pod`` on its own (node, reason), by node name: what simulate's
    table shows under a pending pod. Empty when the pod cannot be parsed (its reason says why)."""
    try:
        req = parse_request(pod, state.settings, state.memos.asks)
        filters = PodFilters(state, pod)
    except RequestError:
        return []
    out: list[tuple[str, str]] = []
    demand = [(state.resource_index[r], r, n) for r, n in req.resources]
    dra = _dra_backed(state, demand)
    for name in sorted(state.nodes):
        node = state.nodes[name]
        if filters.problem is not None:
            out.append((name, filters.problem))
            continue
        if req.gpus or req.shared is not None:
            reasons = _node_reasons(node, filters, req, req.gpus, demand, demand, dra)
        else:
            reasons = list(filters.check(node))
        if reasons:
            out.append((name, "; ".join(r if isinstance(r, str) else r[0] for r in reasons)))
        else:
            out.append((name, "fits now"))
    return out


def _before_nodes(state: ClusterState, filters: Filter) -> str | None:
    """The reason when no node needs asking: an empty cluster, or a pod-level problem."""
    if not state.nodes:
        return "0/0 nodes are available: the cluster has no nodes."
    if filters.problem is not None:
        return f"0/{len(state.nodes)} nodes are available: {filters.problem}."
    return None


def no_node_reason(state: ClusterState, filters: Filter) -> str:
    """Why a pod that asks for no GPU fits nowhere: kube-scheduler's reasons alone."""
    early = _before_nodes(state, filters)
    if early is not None:
        return early
    counts: Counter[Reason] = Counter()
    for node in state.nodes.values():
        counts.update(filters.check(node))
    return _histogram(len(state.nodes), counts)


def unschedulable_reason(
    state: ClusterState,
    filters: Filter,
    req: PodRequest,
    gpus: int | None = None,
    joint: Iterable[tuple[str, int]] | None = None,
) -> str:
    """kube-scheduler style: "0/12 nodes are available: 3 Insufficient cpu, 5 have fewer than 4
    free GPUs." Every node is counted under each reason of the first check it fails (the filter
    chain can give several, e.g. Insufficient cpu and Insufficient memory), and the parts are
    sorted as text, as kube-scheduler sorts them.

    For a gang, ``req`` and ``gpus`` are its largest member's and ``joint`` is what all its
    pending members ask for per resource name: a node that has free GPUs for more of the gang
    than its allocatable left covers is short of allocatable, not of GPUs.
    """
    early = _before_nodes(state, filters)
    if early is not None:
        return early
    counts: Counter[Reason] = Counter()
    k = req.gpus if gpus is None else gpus
    demand = [(state.resource_index[r], r, n) for r, n in req.resources]
    together = demand
    if joint is not None:
        together = [(index, state.resources[index], n) for index, n in state.demand(joint)]
    dra = _dra_backed(state, demand)
    if dra:  # a node's reason depends on its allocatable of a DRA-backed resource
        for node in state.nodes.values():
            counts.update(_node_reasons(node, filters, req, k, demand, together, dra))
        return _histogram(len(state.nodes), counts)
    nodes = state.nodes
    for name in state.node_index.plain:
        node = nodes[name]
        counts[_PHRASES["invalid" if node.error else "not-gpu"]] += 1
    if isinstance(filters, PodFilters) and _resources_only(filters):
        _count_by_row(state, filters, req, k, demand, together, counts)
        return _histogram(len(state.nodes), counts)
    # A GPU node the chain accepts has the GPU reason, which is the same for every node of a
    # share group (a share's reads the inventory alone) or of a node class and allocatable (a
    # whole-GPU pod's): worked out once per group, not per node.
    check = filters.check
    if req.shared is not None:
        for group in state.node_index.shares.groups():
            first = nodes[next(iter(next(iter(group.by_cpu.values())).names))]
            gpu = _gpu_reason(first, req, k, demand, together)
            for names in group.by_cpu.values():
                for name in names.names:
                    if not _counted(counts, check(nodes[name])):
                        counts[gpu] += 1
        return _histogram(len(state.nodes), counts)
    for cls in state.classes.values():
        by_allocatable: dict[tuple[tuple[int, ...] | None, tuple[int, ...]], Reason] = {}
        for name in cls.names:
            node = nodes[name]
            if _counted(counts, check(node)):
                continue
            # The class key holds what the reason reads but the allocatable and what is used.
            memo_key = (node.allocatable, tuple(node.used))
            reason = by_allocatable.get(memo_key)
            if reason is None:
                reason = by_allocatable[memo_key] = _gpu_reason(node, req, k, demand, together)
            counts[reason] += 1
    return _histogram(len(state.nodes), counts)


def _resources_only(filters: PodFilters) -> bool:
    """True when the chain can refuse a node that is neither cordoned nor tainted and has a
    status only for want of resources (NodeResourcesFit): no node selector or required
    affinity, host ports, volumes, spread, inter-pod terms, claims or DRA-backed resources
    (``dra``), or features, whose answers read more of a node than what it has left."""
    return not (
        filters.pinned
        or filters.ports
        or filters.volumes is not None
        or filters.spread is not None
        or filters.interpod is not None
        or filters.dra is not None
        or filters.features
    )


# What a whole-GPU pod's GPU reason reads of a node beside its group's key (vendor, idle cards):
# its device count, allocatable and what is held of it.
_WholeKey = tuple[int, tuple[int, ...] | None, tuple[int, ...]]
# A GPU node as a refused pod's reason reads it when the chain asks only for resources
# (ShareIndex.counted): what it has left of pods and of each resource asked for (allocatable
# minus requested; None: it is cordoned, tainted or has no status, and the chain is asked about
# it), what a share's GPU reason reads of its group's key (vendor, sGPU slots, card memory), what
# a whole-GPU pod's reads (vendor, idle cards, the node's _WholeKey), each as its number in
# ShareIndex.reads, and the node.
_Row = tuple[tuple[int, ...] | None, int, int, NodeState]


# What a pod needs left of a resource it does not ask for: less than any node can have left.
_UNASKED = -(1 << 126)


def _row(index: ShareIndex, node: NodeState, group: CardGroup, asked: tuple[str, ...]) -> _Row:
    whole = (group.key[0], group.idle, (node.total, node.allocatable, tuple(node.used)))
    have = node.resources
    lefts: tuple[int, ...] | None = None
    if have is not None and not node.node.unschedulable and not node.node.taints:
        used = node.requested
        lefts = (
            have.get(PODS, 0) - node.pod_count,
            *[have.get(r, 0) - used.get(r, 0) for r in asked],
        )
    return (lefts, index.read_id(group.key[:3]), index.read_id(whole), node)


# A _Row's parts, and a by_left entry's row, read in C.
_ROW_OF = operator.itemgetter(2)
_LEFTS_OF = operator.itemgetter(0)
_SHARE_READS = operator.itemgetter(1)
_WHOLE_READS = operator.itemgetter(2)
_NODE_OF = operator.itemgetter(3)


def _count_by_row(
    state: ClusterState,
    filters: PodFilters,
    req: PodRequest,
    k: int,
    demand: list[tuple[int, str, int]],
    together: list[tuple[int, str, int]],
    counts: Counter[Reason],
) -> None:
    """Every GPU node counted as ``check`` and ``_gpu_reason`` would count it, for a chain that
    asks only for resources (``_resources_only``): what each node has left of pods and of what
    the pod asks for is kept in the share index (ShareIndex.counted, derived again only for the
    nodes refiled since), also per resource in ascending order (ShareIndex.by_left): the nodes
    short of each resource are counted by bisection, and only the nodes with enough of the
    resource fewest have enough of are compared with the pod's requests, without asking the
    chain (issue 32: the reason walked every node). The GPU reason of a node the chain accepts
    is worked out once per distinct thing it reads (a share's: its group key's vendor, sGPU
    slots and card memory; a whole-GPU pod's: the vendor, idle cards and the node's
    _WholeKey)."""
    index = state.node_index.shares
    names = index.counted_of
    amounts = dict(filters.requests)
    if not amounts.keys() <= set(names):
        names = index.counted_of = (*names, *sorted(amounts.keys() - set(names)))
        index.recount()
    elif index.stale_reads:
        index.recount()
    rows = cast("dict[str, _Row]", index.counted)
    if index.uncounted:
        nodes = state.nodes
        for name, group in index.uncounted.items():
            row = _row(index, nodes[name], group, names)
            index.count(name, row, row[0])
        index.uncounted.clear()
    # (pods, each resource kept): what the pod needs left of each, itself counted; of a resource
    # it does not ask for, nothing (no node has less than _UNASKED left).
    wants = (1, *(amounts.get(r, _UNASKED) for r in names))
    shared = req.shared is not None
    check = filters.check
    # The nodes the chain accepts: of those whose left is not known, the ones it passes.
    accepted_rows = [
        row for name in index.unknown if not _counted(counts, check((row := rows[name])[3]))
    ]
    # The nodes short of each resource, counted in its column; those with enough of every
    # one are among the nodes with enough of the scarcest, read one by one.
    short = [0] * len(wants)
    if index.by_left:
        short = [
            bisect.bisect_left(column, (n, ""))
            for column, n in zip(index.by_left, wants, strict=True)
        ]
        scarcest = max(range(len(short)), key=short.__getitem__)
        column = cast("list[tuple[int, str, _Row]]", index.by_left[scarcest])
        tail = column[short[scarcest] :]
        # Only a resource some node is short of can refuse one of the scarcest's tail: most
        # refused pods are short of one or two (issue 32: comparing every resource of some
        # 3,000 nodes was most of a refused share's reason).
        others = [j for j, n in enumerate(short) if n and j != scarcest]
        # Compared and gathered in C (map, compress), not row by row in Python: the tail is
        # some 3,000 nodes, and a loop over them was most of a refused pod's reason.
        kept: list[_Row] = list(map(_ROW_OF, tail))
        if others:
            lefts: list[tuple[int, ...]] = list(map(_LEFTS_OF, kept))
            for j in others:
                enough = list(
                    map(operator.ge, map(operator.itemgetter(j), lefts), repeat(wants[j]))
                )
                kept, lefts = list(compress(kept, enough)), list(compress(lefts, enough))
        accepted_rows += kept
    # What the GPU reason of each reads (its number), counted in one call.
    reads = list(map(_SHARE_READS if shared else _WHOLE_READS, accepted_rows))
    accepted = Counter(reads)
    # Any node of a share's part has its GPU reason (it reads the part alone).
    first = dict(zip(reads, map(_NODE_OF, accepted_rows), strict=True)) if shared else {}
    for what, n in accepted.items():
        if shared:
            counts[_gpu_reason(first[what], req, k, demand, together)] += n
        else:
            vendor, free, node_key = cast("tuple[str, int, _WholeKey]", index.reads[what])
            counts[_whole_reason(vendor, free, node_key, req, k, demand, together)] += n
    reasons = ("Too many pods", *(f"Insufficient {r}" for r in names))
    for reason, n in zip(reasons, short, strict=True):
        if n:
            counts[reason] += n


def _counted(counts: Counter[Reason], reasons: list[str]) -> bool:
    """Count a node under the chain's reasons; False when there are none (it passes)."""
    if not reasons:
        return False
    if len(reasons) == 1:
        counts[reasons[0]] += 1
    else:
        counts.update(reasons)
    return True


# kube-scheduler's reasons read the same for any count ("3 node(s) were unschedulable"); ours
# come as (singular, plural): "1 is not a GPU node", "2 are not GPU nodes".
Reason = str | tuple[str, str]


def _histogram(total: int, counts: Counter[Reason]) -> str:
    parts = sorted(
        f"{n} {reason if isinstance(reason, str) else reason[0 if n == 1 else 1]}"
        for reason, n in counts.items()
    )
    return f"0/{total} nodes are available: {', '.join(parts)}."


def _dra_backed(
    state: ClusterState, demand: list[tuple[int, str, int]]
) -> list[tuple[int, str, str]]:
    """The whole-GPU resources asked for that a DeviceClass backs (DRA-backed extended
    resources, v1.37 GA), with that class."""
    return [(i, r, state.dra_extended[r]) for i, r, _ in demand if r in state.dra_extended]


def _node_reasons(
    node: NodeState,
    filters: Filter,
    req: PodRequest,
    k: int,
    demand: list[tuple[int, str, int]],
    together: list[tuple[int, str, int]],
    dra: list[tuple[int, str, str]],
) -> list[Reason]:
    # A node with none of a GPU resource that a DeviceClass backs gives it through DRA: the
    # filter chain's DRA filter allocates it there (the special claim), and says why not.
    backed = any(
        node.allocatable is not None and node.allocatable[index] == 0 for index, _, _ in dra
    )
    if backed:
        return list(filters.check(node)) or [NO_SOLUTION]
    if node.inventory is None:
        return [_PHRASES["invalid" if node.error else "not-gpu"]]
    reasons: list[Reason] = list(filters.check(node))
    if reasons:
        return reasons
    return [_gpu_reason(node, req, k, demand, together)]


def _gpu_reason(
    node: NodeState,
    req: PodRequest,
    k: int,
    demand: list[tuple[int, str, int]],
    together: list[tuple[int, str, int]],
) -> tuple[str, str]:
    inv = node.inventory
    assert inv is not None
    if req.shared is not None:
        s = req.shared
        if s.vendor is not None and inv.vendor != s.vendor:
            return (f"has no {s.vendor} GPUs", f"have no {s.vendor} GPUs")
        if s.sgpu and inv.sgpu_per_card <= 0:
            return ("has no sGPU slots", "have no sGPU slots")
        if (s.memory_mib or s.memory_ratio) and all(d.memory_mib <= 0 for d in inv.devices):
            return ("reports no GPU memory", "report no GPU memory")
        need = [f"{s.core}% free cores"] if s.core else []
        if s.memory_mib:
            need.append(f"{s.memory_mib} MiB free memory")
        if s.memory_ratio:
            need.append(f"{s.memory_ratio}% free memory")
        if s.sgpu:
            need.append(f"{s.sgpu} free sGPU slot{'s' if s.sgpu > 1 else ''} (QoS {s.qos})")
        what = " and ".join(need)
        if s.cards == 1:
            return (f"has no GPU with {what}", f"have no GPU with {what}")
        few = f"fewer than {s.cards} GPUs with {what}"
        return (f"has {few}", f"have {few}")
    whole = (len(inv.devices), node.allocatable, tuple(node.used))
    return _whole_reason(inv.vendor, node.free_mask.bit_count(), whole, req, k, demand, together)


def _whole_reason(
    vendor: str,
    free: int,
    node: _WholeKey,
    req: PodRequest,
    k: int,
    demand: list[tuple[int, str, int]],
    together: list[tuple[int, str, int]],
) -> tuple[str, str]:
    """A whole-GPU pod's GPU reason on a node of ``vendor`` with ``free`` GPUs free, and its
    device count, allocatable and what is held of it (``node``)."""
    total, allocatable, used = node
    if vendor != req.vendor:
        return (f"has no {req.vendor} GPUs", f"have no {req.vendor} GPUs")
    noun = "GPU" if k == 1 else "GPUs"
    if total < k:
        return (f"has fewer than {k} {noun} in total", f"have fewer than {k} {noun} in total")
    if allocatable is not None:
        # Never enough, however many pods leave (e.g. the device plugin registers another
        # resource name, or is down): that is the reason, not the free GPUs.
        for index, resource, n in demand:
            if allocatable[index] < n:
                return _too_little(resource)
    if allocatable is not None and free >= k:
        # What is left of the allocatable limits the node more than its free GPUs do, and does
        # not cover everything asked (for one pod: its request, which its free GPUs cover).
        for index, resource, n in together:
            left = allocatable[index] - used[index]
            if left < n and left < free:
                return _too_little(resource)
    return (f"has fewer than {k} free {noun}", f"have fewer than {k} free {noun}")


def _too_little(resource: str) -> tuple[str, str]:
    return (f"has too little allocatable {resource}", f"have too little allocatable {resource}")
