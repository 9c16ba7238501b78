"""A gang planned through topology domains (issue 21): the domain, the nodes and each node's GPU
set chosen together.

``context`` says whether a gang is planned this way: when its members ask for a constraint
(``constraints``), or, with ``topology.compactGangs`` (the default), when some node carries
a label of a level above hostname. A cluster without topology labels and gangs without
constraints are planned exactly as before.

``plan_in_domains`` takes ``domainchoice.plans`` best first and realises each at the node level:
inside each leaf domain the members (consecutive ranks) are packed onto its nodes, the node that
takes the longest run of the next ranks first (then fewest free GPUs, binpack; most, spread; then
name), each node's share a joint best set (rule 1) split among them, every Kubernetes filter
checked for the members on the node together. A plan a filter defeats is dropped for the next.

Sticky: the members already bound fix the domain (the path they share): a replaced member, an
elastic gang's surplus, goes there; with a required level, nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice

from msgspec import Struct, structs

from ..filters.chain import GroupFilters, PodFilters
from ..model.decisions import Placement
from ..model.objects import PodInput
from ..snapshot.cluster import ClusterState
from ..snapshot.domains import Hierarchy, Path, configured, in_use
from ..snapshot.nodes import NodeState
from .constraints import Constraint, gang_constraint, rank_of, rank_order
from .domainchoice import Tree, path_fits, plans, shortfall
from .members import Member, split_joint
from .waiting import kept_domains, spared


class Context(Struct, frozen=True):
    hierarchy: Hierarchy
    constraint: Constraint | None  # None: compact by default
    compact: bool
    # Nodes whose shared domain the gang keeps to, besides its bound members' (its own
    # nominations' nodes, a preemption search's candidate domain): cycle.decide's ``within``.
    within: frozenset[str] = frozenset()

    @property
    def hard(self) -> bool:
        """A required level or slices: never placed outside them."""
        c = self.constraint
        return c is not None and (c.required is not None or c.slice_level is not None)


def context(
    state: ClusterState, pods: list[PodInput], within: frozenset[str] = frozenset()
) -> Context | None:
    """How the gang of these pods is planned through domains; None: as without topology.
    TopologyError / TopologyPending when its constraint is malformed or disputed."""
    settings = state.settings.topology
    constraint = gang_constraint(pods, state.inputs.pod_groups, settings, state.inputs.topologies)
    if constraint is not None:
        return Context(constraint.hierarchy, constraint, settings.compact_gangs, within)
    hierarchy = configured(settings)
    if settings.compact_gangs and in_use(hierarchy, state.label_keys):
        return Context(hierarchy, None, True, within)
    return None


def bound_path(state: ClusterState, gang: str, ctx: Context) -> Path:
    """The longest path the gang's bound members and ``ctx.within`` share (empty: none)."""
    hierarchy = ctx.hierarchy
    nodes = {state.holdings[k].node for k in state.gang_bound.get(gang, ()) if k in state.holdings}
    shared: Path | None = None
    for name in sorted(nodes | ctx.within):
        if name not in state.nodes:
            continue
        path = state.path_of(hierarchy, name)
        if shared is None:
            shared = path
        else:
            n = 0
            while n < min(len(shared), len(path)) and shared[n] == path[n]:
                n += 1
            shared = shared[:n]
    return shared or ()


def plan_in_domains(
    state: ClusterState, gang: str, members: list[Member], minimum: int, ctx: Context
) -> list[Placement] | str:
    """The members placed through the domains (applied to the open tentative scope, where a
    plan that fails half-way is taken back), or why not: the shortfall per level for a hard
    constraint, "" otherwise (the caller then plans without domains)."""
    gpu = [m for m in members if m.request.gpus]
    largest = max(gpu, key=lambda m: m.request.gpus)
    vendor = largest.request.vendor
    assert vendor is not None
    spread = largest.request.node_policy == "spread"
    ranked_pods = rank_order([m.pod for m in members])
    by_key = {m.pod.key: m for m in members}
    ranked = [by_key[p.key] for p in ranked_pods]
    fits = path_fits(
        state,
        ctx.hierarchy,
        vendor,
        largest.request.gpus,
        state.demand(largest.request.resources),
    )
    spill = state.settings.topology.spill_broken_first
    tree = Tree(ctx.hierarchy, fits, ctx.constraint, spill)
    sticky = bound_path(state, gang, ctx)
    n = len(ranked)
    c = ctx.constraint
    if c is not None and c.slice_size and n % c.slice_size:
        return f"gang {gang}: {n} pods cannot be cut into slices of {c.slice_size} ({c.says})"
    if c is not None and c.required == ctx.hierarchy.host:
        return _on_one_node(state, gang, ranked, vendor, spread, minimum, ctx, ranked_pods)
    index = state.domain_index(ctx.hierarchy)
    # The members' filters, kept across chunks and plans when no member can change another's.
    kept = None if _dynamic(ranked) else dict[str, PodFilters]()

    def pack(path: Path, part: list[Member]) -> list[Placement] | None:
        nodes = [state.nodes[name] for name in sorted(index.names.get(path, ()))]
        return pack_nodes(state, gang, part, nodes, vendor, spread, minimum, kept)

    if not ctx.hard and not sticky:
        # A gang that needs no domain leaves out those kept for the gangs that wait for one
        # (gangs/waiting.py) while one of its plans packs without them.
        keep = kept_domains(state, gang, ctx.hierarchy)
        if keep:
            narrow = Tree(ctx.hierarchy, spared(fits, keep), ctx.constraint, spill)
            found = try_plans(state, gang, narrow, ctx, sticky, ranked, ranked_pods, pack)
            if not isinstance(found, str):
                return found
    return try_plans(state, gang, tree, ctx, sticky, ranked, ranked_pods, pack)


def try_plans(
    state: ClusterState,
    gang: str,
    tree: Tree,
    ctx: Context,
    sticky: Path,
    ranked: list[Member],
    ranked_pods: list[PodInput],
    pack: Callable[[Path, list[Member]], list[Placement] | None],
) -> list[Placement] | str:
    """The domain plans of ``tree`` in order (at most topology.maxPlans), each cut into chunks
    of the ranked members that ``pack`` places in the chunk's domain: the first plan packed
    whole wins (annotated with domain and rank); a plan that fails half-way takes back its
    part so far. None packed: the shortfall per level for a hard constraint, "" otherwise.
    One loop for every kind of gang (GPUs by count here, devices by claims in claims.py)."""
    c = ctx.constraint
    n = len(ranked)
    for plan in islice(plans(tree, c, n, ctx.compact, sticky), state.settings.topology.max_plans):
        out: list[Placement] = []
        pos = 0
        for chunk in plan:
            part = ranked[pos : pos + chunk.count]
            pos += chunk.count
            placed = pack(chunk.path, part)
            if placed is None:
                for placement in out:  # this plan's part so far goes (the scope logs it)
                    state.forget(placement.pod)
                break
            out.extend(placed)
        else:
            return annotate(state, out, ctx, ranked_pods)
    if ctx.hard and c is not None:
        return f"gang {gang}: {shortfall(tree, c, n)}"
    return ""


def _on_one_node(
    state: ClusterState,
    gang: str,
    ranked: list[Member],
    vendor: str,
    spread: bool,
    minimum: int,
    ctx: Context,
    ranked_pods: list[PodInput],
) -> list[Placement] | str:
    """A required hostname level: the whole gang on one node, the tightest that holds it
    (fewest free GPUs after), then by name."""
    need = sum(m.request.gpus for m in ranked)
    candidates = sorted(
        (free - need, name)
        for cls in state.iter_classes(vendor)
        if (free := cls.key[3].bit_count()) >= need
        for name in cls.names
    )
    kept = None if _dynamic(ranked) else dict[str, PodFilters]()
    for _, name in candidates[: 4 * state.settings.topology.max_plans]:
        placed = pack_nodes(state, gang, ranked, [state.nodes[name]], vendor, spread, minimum, kept)
        if placed is not None:
            return annotate(state, placed, ctx, ranked_pods)
    return f"gang {gang}: needs {len(ranked)} pods on one node; no node holds them"


def pack_nodes(
    state: ClusterState,
    gang: str,
    members: list[Member],
    nodes: list[NodeState],
    vendor: str,
    spread: bool,
    minimum: int,
    kept: dict[str, PodFilters] | None = None,
) -> list[Placement] | None:
    """Consecutive runs of ``members`` on ``nodes`` (see the module's docstring), applied to the
    open tentative scope; None when they do not all fit. ``kept``: the filters of a gang none
    of whose members has inter-pod terms or spread (``_dynamic``), from earlier calls of its
    plan, reused and added to."""
    remaining = list(members)
    out: list[Placement] = []
    dynamic = _dynamic(members)
    filters = {} if kept is None or dynamic else kept
    for m in remaining:
        if m.pod.key not in filters:
            filters[m.pod.key] = PodFilters(state, m.pod)
    usable = [n for n in nodes if n.inventory is not None and n.inventory.vendor == vendor]
    free_of = {node.name: node.free_mask.bit_count() for node in usable}
    while remaining:
        if dynamic and out:
            filters = {m.pod.key: PodFilters(state, m.pod) for m in remaining}
        candidates: list[tuple[tuple[int, int, str], int, NodeState]] = []
        for node in usable:
            free = free_of[node.name]
            run, total = 0, 0
            for m in remaining:
                if total + m.request.gpus > free:
                    break
                total += m.request.gpus
                run += 1
            if run:
                candidates.append(((-run, -free if spread else free, node.name), run, node))
        candidates.sort(key=lambda c: c[0])
        found: tuple[NodeState, list[Member], int] | None = None
        for _, run, node in candidates:
            assert node.inventory is not None
            headroom = node.headroom()
            while run > 0:
                part = remaining[:run]
                total = sum(m.request.gpus for m in part)
                demand = state.demand(r for m in part for r in m.request.resources)
                choice = node.inventory.topology.best_set(node.free_mask, total) if total else None
                fits = (total == 0 or choice is not None) and (
                    headroom is None or all(headroom[i] >= x for i, x in demand)
                )
                group = GroupFilters(state, [filters[m.pod.key] for m in part])
                if fits and group.problem is None and not group.check(node):
                    found = (node, part, choice.mask if choice is not None else 0)
                    break
                run -= 1
            if found is not None:
                break
        if found is None:
            return None
        node, part, joint = found
        split = split_joint(state, gang, node, joint, part, minimum)
        if split is None:
            return None
        out.extend(split)
        free_of[node.name] = node.free_mask.bit_count()
        remaining = remaining[len(part) :]
    return out


def _dynamic(members: list[Member]) -> bool:
    """Whether placing some of the members can change the others' filters: only through
    inter-pod (anti-)affinity and topology spread. Without those a member's filters are the
    same before and after its siblings are placed (or taken back): computed once per gang."""
    return any(m.pod.affinity is not None or m.pod.spread for m in members)


def annotate(
    state: ClusterState, placements: list[Placement], ctx: Context, ranked: list[PodInput]
) -> list[Placement]:
    """Each placement with its node's domain and its member's rank (its rank label, else its
    position by rank then name)."""
    position = {p.key: i for i, p in enumerate(ranked)}
    pods = {p.key: p for p in ranked}
    out = []
    for placement in placements:
        labels = ctx.hierarchy.labels(state.path_of(ctx.hierarchy, placement.node))
        rank = rank_of(pods[placement.pod])
        out.append(
            structs.replace(
                placement,
                topology=tuple(labels.items()),
                rank=position[placement.pod] if rank is None else rank,
            )
        )
    return out


def surplus_scopes(state: ClusterState, gang: str, ctx: Context) -> list[set[str]]:
    """Where a surplus (or replacement) member may go, in order: the nodes of each domain its
    bound members share, narrowest first, up to the required level (with a hard constraint the
    last scope is that domain; without, the caller tries everywhere after)."""
    sticky = bound_path(state, gang, ctx)
    if not sticky:
        return []
    floor = 0
    if ctx.constraint is not None and ctx.constraint.required is not None:
        floor = ctx.constraint.required + 1
    scopes = []
    for depth in range(len(sticky), max(floor, 1) - 1, -1):
        prefix = sticky[:depth]
        scopes.append(
            {name for name in state.nodes if state.path_of(ctx.hierarchy, name)[:depth] == prefix}
        )
    return scopes
