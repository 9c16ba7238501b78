"""The search behind ``preemption.preempt``: candidates per node (a pod) or over the cluster (a
gang), the shortest prefix of victim options that fits, the reprieve, and the cheap necessary
conditions asked before ``decide`` so that a 5,000-node cluster is not ranked for every trial.

preemption/preempt.py's docstring says what the search does and why; this is how it stays bounded:

- per node, a lower bound on the candidate's rank (``_bound``, from GPU counts and the options'
  priorities and ages): nodes are tried in that order and the search stops at the first whose
  bound is worse than the best candidate found, and after ``max(100, 10%)`` nodes;
- before each ``decide`` (which, when nothing fits, explains why over every node), the GPUs left
  on the candidate node are counted from masks (``_gpus_left``, no state change), then inside the
  tentative scope the GPUs, allocatable and nominations (``_room``) and the pod's Kubernetes
  filters on that node;
- for a gang, the shortest prefix whose GPUs could hold its minimum is counted incrementally
  (``_first_room``) and the search for the fitting prefix starts there.

None of these decides anything: each only skips a ``decide`` that could not succeed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..cycle import Unit, decide, unit_priority
from ..filters.chain import PodFilters
from ..gangs.planning import Size
from ..model.decisions import Placed
from ..model.names import CORES_PER_CARD
from ..resources.requests import PodRequest, RequestError
from ..snapshot.cluster import ClusterState
from ..snapshot.domains import Path
from ..snapshot.nodes import NodeState
from ..snapshot.podindex import PodRecord
from .victims import Later, Option, Pool, Rank, gpu_mask, rank

# A victim set (as options) -> decide's plan if the unit fits once it is gone.
Fit = Callable[[Sequence[Option]], Placed | None]
# A cheap necessary condition, asked inside the tentative scope before decide.
Room = Callable[[ClusterState], bool]
# The best candidate: its rank, its victims, the plan.
Best = tuple[Rank, list[PodRecord], Placed]


def on_nodes(state: ClusterState, unit: Unit, req: PodRequest, pool: Pool) -> Best | None:
    """A single pod: one candidate per node, the best by rank. Nodes are tried in the order of
    a lower bound on their rank (``_bound``) and the search stops at the first whose bound is
    worse than the best found: no node after it can do better."""
    (pod,) = unit.pods
    mine = {pod.key}
    priority = unit_priority(unit)
    candidates: list[tuple[NodeBound, str, list[Option]]] = []
    for name in pool.nodes():
        node = state.nodes.get(name)
        if node is None:
            continue
        options = pool.options(name)
        on_node = _bound(state, node, req, pool, options)
        if on_node is not None:
            # Options come budget-keeping first: when even the first breaks a budget, every
            # candidate here does (a budget only shrinks as victims are added).
            broken = int(bool(pool.budgets.violating(options[0].pods)))
            candidates.append(((broken, *on_node), name, options))
    candidates.sort(key=lambda c: (c[0], c[1]))
    # kube-scheduler's DefaultPreemption bounds: at least this many candidate nodes, or this
    # percent of them.
    bounds = state.settings.preemption
    cap = max(
        bounds.min_candidate_nodes, len(state.nodes) * bounds.min_candidate_nodes_percent // 100
    )
    best: Best | None = None
    seen: set[tuple[str, ...]] = set()
    for bound, name, options in candidates[:cap]:
        if best is not None and bound > tuple(best[0][:6]):
            break  # sorted by bound: no node left can do better

        def room(state: ClusterState, name: str = name) -> bool:
            node = state.nodes[name]
            if not _room(state, node, req, mine, priority):
                return False
            try:
                filters = PodFilters(state, pod)
            except RequestError:
                return False
            return filters.problem is None and not filters.check(node)

        def fit(chosen: Sequence[Option], name: str = name, room: Room = room) -> Placed | None:
            if req.gpus and not _gpus_left(state, state.nodes[name], pool, chosen, req.gpus):
                return None  # counted without touching the state
            return fits(state, unit, pool, chosen, room)

        found = _shortest(pool, options, fit)
        if found is None:
            continue
        victims, placed = found
        ranked = rank(pool, victims)
        if ranked.keys in seen:
            continue
        seen.add(ranked.keys)
        if best is None or ranked < best[0]:
            best = (ranked, victims, placed)
    return best


def in_cluster(
    state: ClusterState, unit: Unit, requests: list[PodRequest], size: Size, pool: Pool
) -> Best | None:
    """A gang: one candidate over the whole cluster's options."""
    gpus = sorted(r.gpus for r in requests if r.gpus)
    vendor = next((r.vendor for r in requests if r.vendor), None)
    need = min(len(gpus), max(1, size.minimum - size.bound))

    def room(state: ClusterState) -> bool:
        """Enough free GPUs of the vendor for the members the gang needs at least, and enough
        nodes with room for its smallest member each (nominations ignored: decide weighs them)."""
        if not gpus:
            return True
        slots = total = 0
        for node in state.gpu_nodes():
            inv = node.inventory
            assert inv is not None
            if inv.vendor != vendor:
                continue
            free = (inv.healthy_mask & ~node.whole & ~node.shared_mask).bit_count()
            slots += free // gpus[0]
            total += free
        return slots >= need and total >= sum(gpus[:need])

    options = pool.options(None)
    start = _first_room(state, pool, options, vendor, gpus, need)
    if start is None:
        return None
    found = _shortest(pool, options, lambda chosen: fits(state, unit, pool, chosen, room), start)
    if found is None:
        return None
    victims, placed = found
    return rank(pool, victims), victims, placed


def in_domains(
    state: ClusterState, unit: Unit, requests: list[PodRequest], size: Size, pool: Pool
) -> tuple[Best, Path] | None:
    """A gang with a required topology level (issue 21): one candidate per domain of that
    level, its victims only pods there (a gang victim counts when one of its pods is there, and
    goes whole), decide kept to the domain; the best by rank, and the domain. Domains are tried
    most free GPUs first (the fewest victims likely), those whose free GPUs and victims' GPUs
    together cannot hold the gang's need not at all, at most ``max_candidate_domains``
    (PreemptionSettings)."""
    ctx = size.topology
    assert ctx is not None and ctx.constraint is not None and ctx.constraint.required is not None
    level = ctx.constraint.required
    gpus = sorted(r.gpus for r in requests if r.gpus)
    need = sum(gpus[: max(1, size.minimum - size.bound)])
    domains: dict[Path, set[str]] = {}
    for path, names in state.domain_index(ctx.hierarchy).names.items():
        if len(path) > level:
            domains.setdefault(path[: level + 1], set()).update(names)
    options = pool.options(None)
    tried: list[tuple[int, Path, frozenset[str], list[Option]]] = []
    for domain, nodes in domains.items():
        mine = [o for o in options if any(r.node in nodes for r in o.pods)]
        free = sum(state.nodes[n].free_mask.bit_count() for n in nodes)
        freed = sum(
            gpu_mask(state.holdings[r.key]).bit_count()
            for o in mine
            for r in o.pods
            if r.node in nodes and r.key in state.holdings
        )
        if mine and free + freed >= need:
            tried.append((-free, domain, frozenset(nodes), mine))
    tried.sort(key=lambda t: (t[0], t[1]))
    best: tuple[Best, Path] | None = None
    for _, domain, within, mine in tried[: state.settings.preemption.max_candidate_domains]:

        def fit(chosen: Sequence[Option], within: frozenset[str] = within) -> Placed | None:
            return fits(state, unit, pool, chosen, None, within)

        found = _shortest(pool, mine, fit)
        if found is None:
            continue
        victims, placed = found
        ranked = rank(pool, victims)
        if best is None or ranked < best[0][0]:
            best = ((ranked, victims, placed), domain)
    return best


def _first_room(
    state: ClusterState,
    pool: Pool,
    options: list[Option],
    vendor: str | None,
    gpus: list[int],
    need: int,
) -> int | None:
    """The shortest prefix of ``options`` after which the gang's ``room`` can hold, counted
    incrementally (each option's GPUs given back to its nodes, no decide): the prefix search
    starts there instead of deciding on every length below it. None: not even all of them."""
    if not gpus:
        return 1
    holdings = state.holdings
    gone = set(pool.going)
    free: dict[str, int] = {}
    slots = total = 0

    def count(node: NodeState) -> int:
        inv = node.inventory
        assert inv is not None
        held = 0
        for key in node.pods:
            if key not in gone:
                held |= gpu_mask(holdings[key])
        return (inv.healthy_mask & ~held).bit_count()

    for node in state.gpu_nodes():
        assert node.inventory is not None
        if node.inventory.vendor == vendor:
            free[node.name] = f = count(node)
            slots += f // gpus[0]
            total += f
    required = sum(gpus[:need])
    surplus: dict[str, int] = {}
    for length, option in enumerate(options, 1):
        pods: tuple[PodRecord, ...] = option.pods
        if option.surplus:
            assert option.gang is not None
            surplus[option.gang] = surplus.get(option.gang, 0) + 1
            if surplus[option.gang] > pool.gangs[option.gang].surplus:
                pods = pool.gangs[option.gang].members
        touched = set()
        for record in pods:
            if record.key not in gone:
                gone.add(record.key)
                holding = holdings.get(record.key)
                if holding is not None and holding.node in free:
                    touched.add(holding.node)
        for name in touched:
            before, after = free[name], count(state.nodes[name])
            free[name] = after
            slots += after // gpus[0] - before // gpus[0]
            total += after - before
        if slots >= need and total >= required:
            return length
    return None


def _shortest(
    pool: Pool, options: list[Option], fit: Fit, start: int = 1
) -> tuple[list[PodRecord], Placed] | None:
    """The shortest prefix of ``options`` (from ``start`` on) that fits, found by doubling the
    step then bisecting; then the reprieve: the options with no pod on the plan's nodes are
    dropped together if the fit holds without them, then each chosen option, the last added
    first, is dropped if the fit holds without it. Every check is ``fit``: decide's."""
    if not options or start > len(options):
        return None
    low, n, step = start - 1, start, 1
    placed = None
    while placed is None:
        n = min(n, len(options))
        placed = fit(options[:n])
        if placed is None:
            if n == len(options):
                return None
            low, n, step = n, start + step, 2 * step
    high = n
    while high - low > 1:
        mid = (low + high) // 2
        trial = fit(options[:mid])
        if trial is None:
            low = mid
        else:
            high, placed = mid, trial
    chosen = list(options[:high])
    plan = {p.node for p in placed.placements}
    near = [o for o in chosen if any(r.node in plan for r in o.pods)]
    if near and len(near) < len(chosen):
        trial = fit(near)
        if trial is not None:
            chosen, placed = near, trial
    for option in reversed(list(chosen)):
        if len(chosen) == 1:
            break  # nothing evicted did not fit: the last one is needed
        without = [o for o in chosen if o is not option]
        trial = fit(without)
        if trial is not None:
            chosen, placed = without, trial
    return pool.victims(chosen), placed


# units, pods, priorities (highest first), GPUs freed, (youngest creation,): each at most
Bound = tuple[int, int, tuple[int, ...], int, tuple[Later]]
# The same after the budget violations (Rank's first field): 1 when every option breaks one.
NodeBound = tuple[int, int, int, tuple[int, ...], int, tuple[Later]]


def _bound(
    state: ClusterState, node: NodeState, req: PodRequest, pool: Pool, options: list[Option]
) -> Bound | None:
    """A lower bound on the rank of ``node``'s candidate (each field at most the candidate's):
    None when even evicting every candidate there leaves the pod too few GPUs. The units come
    from GPU counts: the fewest options whose GPUs there cover what is missing."""
    inv = node.inventory
    lowest = (min(o.priority for o in options),)
    youngest = (Later(max(o.created for o in options)),)
    if req.shared is not None:
        vendor = req.shared.vendor
        if inv is None or (vendor is not None and inv.vendor != vendor):
            return None
        return 1, 1, lowest, 0, youngest
    if not req.gpus:
        return 1, 1, lowest, 0, youngest
    if inv is None or inv.vendor != req.vendor or len(inv.devices) < req.gpus:
        return None
    going = set(pool.going)
    candidates = {r.key for o in options for r in o.pods}
    held = blocked = 0
    for key in node.pods:
        mask = gpu_mask(state.holdings[key])
        if key not in going:
            held |= mask
            if key not in candidates:
                blocked |= mask
    if (inv.healthy_mask & ~blocked).bit_count() < req.gpus:
        return None
    short = req.gpus - (inv.healthy_mask & ~held).bit_count()
    if short <= 0:
        return 1, 1, lowest, 0, youngest  # GPUs are free: something else is short
    per_unit: dict[str, int] = {}  # GPUs on this node of each unit holding any here
    unit_priority: dict[str, int] = {}
    for option in options:
        unit = option.gang or option.name
        for r in option.pods:
            holding = state.holdings.get(r.key)
            if holding is not None and holding.node == node.name and gpu_mask(holding):
                per_unit[unit] = per_unit.get(unit, 0) | gpu_mask(holding)
                unit_priority[unit] = option.priority
    units, missing = 0, short
    for count in sorted((m.bit_count() for m in per_unit.values()), reverse=True):
        units += 1
        missing -= count
        if missing <= 0:
            break
    units = max(units, 1)
    # At least ``units`` of these units go, each with its highest member: the victims'
    # priorities, highest first, are at least the lowest ``units`` of them, highest first.
    lowest_units = tuple(sorted(sorted(unit_priority.values())[:units], reverse=True))
    return units, units, lowest_units or lowest, short, youngest


def _gpus_left(
    state: ClusterState, node: NodeState, pool: Pool, chosen: Sequence[Option], k: int
) -> bool:
    """At least ``k`` healthy GPUs on ``node`` once the victims of ``chosen`` and the terminating
    pods are gone (nominations not counted: ``_room`` does, inside the tentative scope)."""
    inv = node.inventory
    if inv is None:
        return False
    gone = {r.key for r in pool.victims(chosen)}
    gone.update(pool.going)
    held = 0
    for key in node.pods:
        if key not in gone:
            held |= gpu_mask(state.holdings[key])
    return (inv.healthy_mask & ~held).bit_count() >= k


def _room(
    state: ClusterState, node: NodeState, req: PodRequest, mine: set[str], priority: int
) -> bool:
    """The GPU part of the pod's fit on ``node`` as it is now, counted cheaply (no topology,
    no filters): a necessary condition, asked before ``decide``, whose answer when no node fits
    costs a reason over every node."""
    inv = node.inventory
    binding = 0  # nominations this pod must respect (decide lifts the others)
    for held in state.nominations.values():
        if held.node == node.name and held.pod not in mine and held.priority >= priority:
            for index in held.devices:
                binding |= 1 << index
    if req.gpus:
        if inv is None or inv.vendor != req.vendor:
            return False
        free = inv.healthy_mask & ~node.whole & ~node.shared_mask & ~binding
        if free.bit_count() < req.gpus:
            return False
        if node.allocatable is not None:
            for index, count in state.demand(req.resources):
                if node.allocatable[index] - node.used[index] < count:
                    return False
        return True
    if req.shared is not None:
        shared = req.shared
        if inv is None or (shared.vendor is not None and inv.vendor != shared.vendor):
            return False
        cards = 0
        for device in inv.devices:
            if not device.healthy or (node.whole | binding) >> device.index & 1:
                continue
            use = node.cards.get(device.index)
            if use is None or use.core + shared.core <= CORES_PER_CARD:
                cards += 1
        return cards >= shared.cards
    return True


def fits(
    state: ClusterState,
    unit: Unit,
    pool: Pool,
    chosen: Sequence[Option],
    room: Room | None,
    within: frozenset[str] = frozenset(),
) -> Placed | None:
    """decide's plan for ``unit`` with the terminating pods and the victims of ``chosen``
    gone, if it fits; ``room``, a cheap necessary condition, is asked first. ``within``: the
    nodes of the one domain a gang with a required topology level is searched in."""
    victims = pool.victims(chosen)
    with state.tentative():
        # Before the records go: the claims are found through the pods' uids.
        for claim in pool.claims_freed(victims):
            state.lift_claim(claim)
        for key in pool.going:
            _remove(state, key)
        for record in victims:
            _remove(state, record.key)
        if room is not None and not room(state):
            return None
        decision = decide(state, unit, within)
    return decision if isinstance(decision, Placed) else None


def _remove(state: ClusterState, key: str) -> None:
    """A pod's holding, record and the DRA allocations its placement assumed go, tentatively
    (never its orphaned holding: not logged)."""
    holding = state.holdings.get(key)
    if holding is not None:
        state.release(holding)
    state.drop_record(key)
    state.assume_claims(key, ())
