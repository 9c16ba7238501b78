"""Gang planning (rule 3): a gang's pending members placed in one pass, all or nothing.

A gang (``model/gangsources.py``: ACK's labels, a PodGroup, Kueue, Volcano or Koordinator) has a
minimum, the members that must run together, and may have more (an elastic gang's surplus).
Planning starts only when at least the minimum exists (pending or already bound). Then:

1. One node for all pending members if any fits: the node is ranked by rule 2 as if one pod asked
   for all their GPUs, and the joint best set (rule 1) is split among the replicas, largest first,
   each taking the best subset of what is left of the joint set. Two 1-GPU replicas therefore share
   an NVLink pair instead of each taking a worst-connected GPU.
2. Otherwise the fewest nodes, greedily: the replicas (largest first) are packed onto the node that
   absorbs the most of their GPUs, ranked by rule 2 among equals; each node's share is again a joint
   set. For gangs of equal replicas (the usual case, and ACK's only case) this is the minimum number
   of nodes.
3. When not all pending members fit and more are pending than the minimum still needs, just
   that many (the smallest first) are planned as in 1 and 2; the rest are surplus. Surplus
   members (all pending ones once the minimum is bound) are placed one at a time, on a node of
   their siblings first; one that fits nowhere stays pending (``Placed.waiting``), which is not
   a failure of the gang.

In all, a node must also have the allocatable headroom for everything its part of the gang asks
for, per resource name: two 1-GPU replicas on one node need 2 allocatable GPUs left there. And the
Kubernetes filters hold for the members on each node together (``filters.chain.GroupFilters``):
each member passes alone, their cpu/memory/... fit together, their host ports do not collide, and
no member's required anti-affinity matches another member on the same node.

The plan runs inside ``ClusterState.tentative()``: the tentative placements let the next node's
members see what the previous ones took (their GPUs, resources and labels: the members' filters
are computed again after each node), and the scope rolls everything back on exit, whether the
plan succeeded or not. The caller applies a successful plan itself, the same way it applies a
single pod's placement.
"""

from __future__ import annotations

from collections.abc import Set

import msgspec
from msgspec import Struct

from ..filters.chain import GroupFilters, PodFilters
from ..model import names
from ..model.decisions import Decision, Placed, Placement, Unschedulable, Waiting
from ..model.gangsources import Gang, GangError, GangPending, group_minimum, resolve
from ..placement.devices import place_claims
from ..placement.nodes import (
    best_whole_node,
    no_node_reason,
    place_without_gpus,
    unschedulable_reason,
    whole_placement,
)
from ..resources.requests import RequestError
from ..snapshot.cluster import ClusterState
from ..snapshot.nodes import Demand, NodeState
from .claims import plan_claims_in_domains
from .constraints import TopologyError, TopologyPending, rank_order
from .indomains import Context, annotate, context, plan_in_domains, surplus_scopes
from .members import Member, split_joint, with_claims


class Size(Struct, frozen=True):
    """A gang's sizes as its members and PodGroup agree on them, and how many are bound."""

    minimum: int
    total: int  # 0: not said
    bound: int
    # Of ``bound``, those the bound watch shows bound (Holding.shown): the others are assumed
    # or reserved, their Bindings not answered yet.
    shown: int = 0
    # Planned through topology domains (gangs/indomains.py); None: as without topology.
    topology: Context | None = None


def check_gang(
    state: ClusterState, gang: str, members: list[Member], within: frozenset[str] = frozenset()
) -> Waiting | Unschedulable | Size:
    """Why the gang cannot be planned yet (waiting) or at all (unschedulable), else its sizes."""
    keys = tuple(sorted(m.pod.key for m in members))
    gangs: list[Gang] = []
    for m in members:
        try:
            resolved = resolve(m.pod, state.inputs.pod_groups)
        except GangPending as exc:
            return Waiting(keys, f"gang {gang}: {exc}")
        except GangError as exc:
            return Unschedulable(keys, f"gang {gang}: {exc}")
        if resolved is not None:
            gangs.append(resolved)
    native = all(g.sources == ("gpu-topology",) for g in gangs)
    size_name = names.GANG_REPLICA_LABEL if native else "the gang's size"
    minimums = {g.minimum for g in gangs}
    bound = state.gang_bound.get(gang, set()) - set(keys)
    if bound and not group_minimum(gang, state.inputs.pod_groups):
        minimums |= {
            state.holdings[k].replicas
            for k in bound
            if k in state.holdings and state.holdings[k].replicas
        }
    totals = {g.total for g in gangs if g.total}
    if len(minimums) > 1 or len(totals) > 1:
        listed = ", ".join(str(c) for c in sorted(minimums | totals))
        return Waiting(keys, f"gang {gang}: members disagree on {size_name} ({listed})")
    minimum = minimums.pop()
    total = totals.pop() if totals else 0
    present = len(members) + len(bound)
    word = "replicas" if native else "members"
    if total and present > total:
        return Waiting(keys, f"gang {gang}: {present} members present but {size_name} says {total}")
    if present < minimum:
        return Waiting(keys, f"gang {gang}: {present} of {minimum} {word} present")
    vendors = {m.request.vendor for m in members if m.request.vendor}
    if any(m.request.shared is not None for m in members):
        return Unschedulable(
            keys, f"gang {gang}: gang members must ask for whole GPUs, not shared GPUs"
        )
    if len(vendors) > 1:
        return Unschedulable(
            keys,
            f"gang {gang}: members ask for GPUs of several vendors ({', '.join(sorted(vendors))})",
        )
    try:
        topology = context(state, [m.pod for m in members], within)
    except TopologyPending as exc:
        return Waiting(keys, f"gang {gang}: {exc}")
    except TopologyError as exc:
        return Unschedulable(keys, f"gang {gang}: {exc}")
    holdings = state.holdings
    shown = sum(1 for k in bound if (h := holdings.get(k)) is not None and h.shown)
    return Size(minimum, total, len(bound), shown=shown, topology=topology)


def plan_gang(
    state: ClusterState, gang: str, members: list[Member], within: frozenset[str] = frozenset()
) -> Decision:
    """Place the gang's pending members: at least the part of its minimum not bound yet, all
    or nothing, and as many of the others as fit.

    1. Every pending member together, if they fit (one node, else the fewest nodes).
    2. Else, when more are pending than the minimum still needs, just that many, the smallest
       first (all or nothing); the others are surplus.
    3. Surplus members (all of them, once the minimum is bound) are placed one at a time, on
       a node of their siblings first; one that fits nowhere waits for capacity, which is not a
       failure of the gang.
    """
    size = check_gang(state, gang, members, within)
    if not isinstance(size, Size):
        return size
    keys = tuple(sorted(m.pod.key for m in members))
    ordered = sorted(members, key=lambda m: (-m.request.gpus, m.pod.key))
    gpu_members = [m for m in ordered if m.request.gpus > 0]
    if not gpu_members:
        return _plan_claims(state, gang, ordered, size, keys)
    need = minimum_part(size, len(members))
    with state.tentative():
        placements: list[Placement] = []
        surplus = ordered
        if need:
            found = _plan_together(state, gang, ordered, size.minimum, size.topology)
            surplus = []
            if isinstance(found, str) and len(ordered) > need:
                core = _core(ordered, need, size.topology)
                found = _plan_together(
                    state, gang, _largest_first(core), size.minimum, size.topology
                )
                surplus = [m for m in ordered if m not in core]
            if isinstance(found, str):
                if found:  # a hard topology constraint's shortfall
                    return Unschedulable(keys, found)
                return _not_together(state, gang, members, ordered, need)
            placements = found
        left = _place_surplus(state, gang, surplus, size.minimum, placements, size.topology)
    placements = sorted(
        (msgspec.structs.replace(p, replicas=size.minimum) for p in placements),
        key=lambda p: p.pod,
    )
    if not placements:
        return Unschedulable(keys, _surplus_reason(gang, size, left))
    waiting = tuple(sorted(left))
    return Placed(tuple(placements), waiting, _surplus_reason(gang, size, left) if left else "")


def minimum_part(size: Size, pending: int) -> int:
    """How many of the ``pending`` members are the part of the gang's minimum still missing,
    placed all together or none (the others are surplus, placed one at a time). A minimum met
    only with members whose Bindings have not been seen to land is not met: if they fail
    (their pods deleted by a restart of the gang meanwhile), surplus placed beside them is a
    gang below its minimum, bound for good (sim seed 11505: a restarted PodGroup gang's new
    member bound alone beside the deleted incarnation's Bindings, which then failed). Until
    they are seen bound, the pending members are the part not yet shown; so too when those
    members only lower the part missing (sim seed 28372: a restarted gang's earlier members,
    their Bindings in flight across an etcd restore that removed their pods, left one member of
    the new incarnation's three as the minimum's part and the others surplus: two were bound,
    the third waited for good)."""
    need = max(0, size.minimum - size.bound)
    if size.shown < size.minimum:
        need = max(need, min(pending, size.minimum - size.shown))
    return need


def _plan_claims(
    state: ClusterState, gang: str, ordered: list[Member], size: Size, keys: tuple[str, ...]
) -> Decision:
    """A gang asking for devices only through ResourceClaims (issue 29): every pending member
    placed as a single pod would be (placement/devices.py; one without claims as any pod
    without GPUs), one after the other inside a tentative scope so that each sees the devices
    of those before it; all of them or none (no elastic surplus). Through topology domains
    (gangs/claims.py) when the gang is planned that way, unless Kueue pinned its domain; a hard
    constraint (an IMEX channel's clique included) is then never left."""
    if not any(m.pod.resource_claims for m in ordered):
        return Unschedulable(keys, f"gang {gang}: no member asks for GPUs")
    topology = size.topology
    if topology is not None and not (topology.constraint and topology.constraint.pinned):
        with state.tentative():
            try:
                found = plan_claims_in_domains(state, gang, ordered, size.minimum, topology)
            except RequestError as exc:
                return Unschedulable(keys, f"gang {gang}: {exc}")
        if isinstance(found, list):
            return Placed(tuple(sorted(found, key=lambda p: p.pod)))
        if found:  # a hard constraint's shortfall: never placed outside its domains
            return Unschedulable(keys, found)
    placements: list[Placement] = []
    with state.tentative():
        for member in sorted(ordered, key=lambda m: m.pod.key):
            try:
                filters = PodFilters(state, member.pod)
            except RequestError as exc:
                return Unschedulable(keys, f"gang {gang}: {exc}")
            if filters.dra is not None and filters.dra.allocates:
                spread = member.request.node_policy == "spread"
                placement = place_claims(state, member.pod, filters, spread)
            else:  # a member without devices (a launcher)
                placement = place_without_gpus(state, member.pod, filters)
            if placement is None:
                why = filters.problem or no_node_reason(state, filters)
                return Unschedulable(keys, f"gang {gang}: pod {member.pod.key}: {why}")
            if filters.dra is not None:
                claims = filters.dra.claims_on(state.nodes[placement.node])
                placement = msgspec.structs.replace(
                    placement, gang=gang, replicas=size.minimum, claims=claims
                )
            state.apply(placement, member.pod, size.minimum)
            placements.append(placement)
    return Placed(tuple(sorted(placements, key=lambda p: p.pod)))


def _largest_first(members: list[Member]) -> list[Member]:
    return sorted(members, key=lambda m: (-m.request.gpus, m.pod.key))


def _core(ordered: list[Member], need: int, topology: Context | None) -> list[Member]:
    """The members an elastic gang's minimum is planned with: the smallest first, or through
    topology, the first ranks."""
    if topology is not None:
        by_key = {m.pod.key: m for m in ordered}
        return [by_key[p.key] for p in rank_order([m.pod for m in ordered])[:need]]
    return sorted(ordered, key=lambda m: (m.request.gpus, m.pod.key))[:need]


def _plan_together(
    state: ClusterState,
    gang: str,
    ordered: list[Member],
    minimum: int,
    topology: Context | None = None,
) -> list[Placement] | str:
    """All of ``ordered`` placed (through the topology's domains; else one node, else the
    fewest), applied to the open tentative scope. When they cannot all be placed nothing stays
    applied and the result is why: a hard topology constraint's shortfall, else ""."""
    gpu_members = [m for m in ordered if m.request.gpus > 0]
    if not gpu_members:
        return ""
    pinned = topology is not None and topology.constraint is not None and topology.constraint.pinned
    if topology is not None and not pinned:
        found = plan_in_domains(state, gang, ordered, minimum, topology)
        if isinstance(found, list):  # applied to the open scope already
            return found
        if topology.hard:  # its shortfall: never placed outside its domains
            return found
    vendor = gpu_members[0].request.vendor
    assert vendor is not None
    spread = gpu_members[0].request.node_policy == "spread"
    total = sum(m.request.gpus for m in gpu_members)
    try:
        member_filters = [PodFilters(state, m.pod) for m in ordered]
    except RequestError:
        return ""
    everyone = GroupFilters(state, member_filters)
    with state.tentative():
        placements = _plan_one_node(state, gang, ordered, vendor, spread, everyone, total, minimum)
    if placements is None:
        with state.tentative():
            placements = _plan_fewest_nodes(state, gang, ordered, vendor, spread, minimum)
    if placements is None:
        return ""
    if topology is not None:
        placements = annotate(state, placements, topology, rank_order([m.pod for m in ordered]))
    return _applied(state, ordered, placements, minimum)


def _applied(
    state: ClusterState, ordered: list[Member], placements: list[Placement], minimum: int
) -> list[Placement]:
    """The plan applied again to the open scope (its own scope rolled back): kept for the
    surplus members that follow."""
    pods = {m.pod.key: m.pod for m in ordered}
    for placement in placements:
        state.apply(placement, pods[placement.pod], minimum)
    return placements


def _not_together(
    state: ClusterState, gang: str, members: list[Member], ordered: list[Member], need: int
) -> Unschedulable:
    keys = tuple(sorted(m.pod.key for m in members))
    gpu_members = [m for m in ordered if m.request.gpus > 0]
    total = sum(m.request.gpus for m in gpu_members)
    try:
        member_filters = [PodFilters(state, m.pod) for m in ordered]
    except RequestError as exc:
        return Unschedulable(keys, f"gang {gang}: {exc}")
    largest = gpu_members[0].request.gpus
    joint = [r for m in gpu_members for r in m.request.resources]
    each = GroupFilters(state, member_filters, joint=False)
    reason = unschedulable_reason(state, each, gpu_members[0].request, largest, joint)
    if need < len(members):
        return Unschedulable(
            keys,
            f"gang {gang}: {len(members)} pending replicas need {total} GPUs and cannot all be "
            f"placed, nor the {need} its minimum needs; {reason}",
        )
    return Unschedulable(
        keys,
        f"gang {gang}: {len(members)} pending replicas need {total} GPUs and cannot all be "
        f"placed; {reason}",
    )


class _OnNodes:
    """A member's filters restricted to some nodes (its siblings'): tried before all nodes."""

    def __init__(self, inner: PodFilters, nodes: set[str]) -> None:
        self.inner = inner
        self.nodes = nodes

    @property
    def has_preferences(self) -> bool:
        return self.inner.has_preferences

    @property
    def problem(self) -> str | None:
        return self.inner.problem

    @property
    def nowhere(self) -> bool:
        return self.inner.nowhere or not self.nodes

    def refused(self) -> Set[str]:
        return self.inner.refused()

    def check(self, node: NodeState) -> list[str]:
        if node.name not in self.nodes:
            return ["is not a node of its gang"]
        return self.inner.check(node)

    def score(self, node: NodeState) -> int:
        return self.inner.score(node)


def _place_surplus(
    state: ClusterState,
    gang: str,
    surplus: list[Member],
    minimum: int,
    placements: list[Placement],
    topology: Context | None = None,
) -> dict[str, str]:
    """Place surplus members one at a time (applied to the open scope, added to
    ``placements``); returns the keys of those that fit nowhere, with why. Through topology,
    after its siblings' nodes each domain they share is tried, narrowest first; with a hard
    constraint, nowhere else."""
    left: dict[str, str] = {}
    for member in surplus:
        req = member.request
        try:
            filters = PodFilters(state, member.pod)
        except RequestError as exc:
            left[member.pod.key] = str(exc)
            continue
        siblings = {
            state.holdings[k].node for k in state.gang_bound.get(gang, set()) if k in state.holdings
        }
        placement: Placement | None = None
        if req.gpus and req.vendor is not None:
            spread = req.node_policy == "spread"
            demand = state.demand(req.resources)
            scopes = [siblings]
            if topology is not None:
                scopes += surplus_scopes(state, gang, topology)
            found = None
            for scope in scopes:
                found = best_whole_node(
                    state, _OnNodes(filters, scope), req.gpus, req.vendor, spread, demand
                )
                if found is not None:
                    break
            if found is None and not (topology is not None and topology.hard):
                found = best_whole_node(state, filters, req.gpus, req.vendor, spread, demand)
            if found is not None:
                placement = with_claims(
                    state,
                    member,
                    whole_placement(member.pod, req, found.node, found.choice.indices, gang),
                )
                if placement is not None and topology is not None:
                    (placement,) = annotate(state, [placement], topology, [member.pod])
        if placement is None:
            left[member.pod.key] = unschedulable_reason(state, filters, req)
            continue
        state.apply(placement, member.pod, minimum)
        placements.append(placement)
    return left


def _surplus_reason(gang: str, size: Size, left: dict[str, str]) -> str:
    reasons = sorted(set(left.values()))
    return (
        f"gang {gang}: {len(left)} member(s) beyond its minimum of {size.minimum} wait for "
        f"capacity (not a gang failure); {'; '.join(reasons)}"
    )


def _plan_one_node(
    state: ClusterState,
    gang: str,
    ordered: list[Member],
    vendor: str,
    spread: bool,
    filters: GroupFilters,
    total: int,
    minimum: int,
) -> list[Placement] | None:
    demand = state.demand(r for m in ordered for r in m.request.resources)
    found = best_whole_node(state, filters, total, vendor, spread, demand)
    if found is None:
        return None
    return split_joint(state, gang, found.node, found.choice.mask, ordered, minimum)


def _plan_fewest_nodes(
    state: ClusterState,
    gang: str,
    ordered: list[Member],
    vendor: str,
    spread: bool,
    minimum: int,
) -> list[Placement] | None:
    remaining = list(ordered)
    out: list[Placement] = []
    demands = {m.pod.key: state.demand(m.request.resources) for m in ordered}
    # The resources the gang asks for: only their headroom matters for grouping.
    asked = sorted({index for d in demands.values() for index, _ in d})
    while remaining:
        # Again after every node: the members placed so far count for the others' filters.
        filters = {m.pod.key: PodFilters(state, m.pod) for m in remaining}
        # A node with c free GPUs (and that allocatable headroom) absorbs the replicas that fit,
        # largest first; only the distinct groups this yields need ranking, each once (rule 2
        # over all nodes).
        groups: dict[tuple[str, ...], tuple[list[Member], Demand]] = {}
        for c, room in sorted(_capacities(state, vendor, asked), key=_capacity_order):
            group, cap = [], c
            left = None if room is None else dict(zip(asked, room, strict=True))
            for m in remaining:
                need = demands[m.pod.key]
                if m.request.gpus > cap:
                    continue
                if left is not None and any(left[i] < n for i, n in need):
                    continue
                group.append(m)
                cap -= m.request.gpus
                if left is not None:
                    for i, n in need:
                        left[i] -= n
            # Its prefixes too: the Kubernetes filters may refuse the whole group on every node
            # (cpu for all of them, anti-affinity between them) but take fewer members.
            for size in range(len(group), 0, -1):
                part = group[:size]
                if any(m.request.gpus for m in part):
                    need_all = state.demand(r for m in part for r in m.request.resources)
                    groups.setdefault(tuple(m.pod.key for m in part), (part, need_all))
        best: tuple[tuple[int, tuple[int, ...], str], list[Member], NodeState, int] | None = None
        for group, need_all in groups.values():
            placed = sum(m.request.gpus for m in group)
            group_filters = GroupFilters(state, [filters[m.pod.key] for m in group])
            found = best_whole_node(state, group_filters, placed, vendor, spread, need_all)
            if found is None:
                continue
            key = (-placed, found.key, found.node.name)
            if best is None or key < best[0]:
                best = (key, group, found.node, found.choice.mask)
        if best is None:
            return None
        _, group, node, joint = best
        split = split_joint(state, gang, node, joint, group, minimum)
        if split is None:
            return None
        out.extend(split)
        taken = {m.pod.key for m in group}
        remaining = [m for m in remaining if m.pod.key not in taken]
    return out


Capacity = tuple[int, tuple[int, ...] | None]


def _capacities(state: ClusterState, vendor: str, asked: list[int]) -> set[Capacity]:
    """Distinct (free GPUs, headroom of the gang's resources) over the vendor's node classes."""
    out: set[Capacity] = set()
    for cls in state.iter_classes(vendor):
        headroom = cls.key[4]
        room = None if headroom is None else tuple(headroom[i] for i in asked)
        out.add((cls.key[3].bit_count(), room))
    return out


def _capacity_order(capacity: Capacity) -> tuple[int, bool, tuple[int, ...]]:
    free, room = capacity
    return (free, room is not None, room or ())
