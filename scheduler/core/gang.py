"""Gang planning (rule 3): every pending replica placed in one pass, all or nothing.

A gang is (namespace, job) from the ``gpu-topology`` label; ``gpu-topology-replica`` says how many
members it has. Planning starts only when all N members exist (pending or already bound). Then:

1. One node for all pending members if any fits: the node is ranked by rule 2 as if one pod asked
   for all their GPUs, and the joint best set (rule 1) is split among the replicas, largest first,
   each taking the best subset of what is left of the joint set. Two 1-GPU replicas therefore share
   an NVLink pair instead of each taking a worst-connected GPU.
2. Otherwise the fewest nodes, greedily: the replicas (largest first) are packed onto the node that
   absorbs the most of their GPUs, ranked by rule 2 among equals; each node's share is again a joint
   set. For gangs of equal replicas (the usual case, and ACK's only case) this is the minimum number
   of nodes.

In both, a node must also have the allocatable headroom for everything its part of the gang asks
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

from msgspec import Struct

from .cluster import ClusterState, Demand, NodeState
from .decisions import Decision, Placed, Placement, Unschedulable, Waiting
from .filters.chain import GroupFilters, PodFilters
from .objects import PodInput
from .placement import best_whole_node, unschedulable_reason, whole_placement
from .requests import PodRequest, RequestError


class Member(Struct, frozen=True):
    pod: PodInput
    request: PodRequest


def check_gang(
    state: ClusterState, gang: str, members: list[Member]
) -> Waiting | Unschedulable | None:
    """Why the gang cannot be planned yet (waiting) or at all (unschedulable); None when it can."""
    keys = tuple(sorted(m.pod.key for m in members))
    counts = {m.request.gang.replicas for m in members if m.request.gang}
    bound = state.gang_bound.get(gang, set()) - set(keys)
    counts |= {
        state.holdings[k].replicas
        for k in bound
        if k in state.holdings and state.holdings[k].replicas
    }
    if len(counts) > 1:
        listed = ", ".join(str(c) for c in sorted(counts))
        return Waiting(keys, f"gang {gang}: members disagree on gpu-topology-replica ({listed})")
    replicas = counts.pop()
    present = len(members) + len(bound)
    if present > replicas:
        return Waiting(
            keys,
            f"gang {gang}: {present} members present but gpu-topology-replica says {replicas}",
        )
    if present < replicas:
        return Waiting(keys, f"gang {gang}: {present} of {replicas} replicas present")
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
    return None


def plan_gang(state: ClusterState, gang: str, members: list[Member]) -> Decision:
    problem = check_gang(state, gang, members)
    if problem is not None:
        return problem
    keys = tuple(sorted(m.pod.key for m in members))
    ordered = sorted(members, key=lambda m: (-m.request.gpus, m.pod.key))
    gpu_members = [m for m in ordered if m.request.gpus > 0]
    if not gpu_members:
        return Unschedulable(keys, f"gang {gang}: no member asks for GPUs")
    vendor = gpu_members[0].request.vendor
    assert vendor is not None
    spread = gpu_members[0].request.node_policy == "spread"
    total = sum(m.request.gpus for m in gpu_members)

    try:
        member_filters = [PodFilters(state, m.pod) for m in ordered]
    except RequestError as exc:
        return Unschedulable(keys, f"gang {gang}: {exc}")
    everyone = GroupFilters(state, member_filters)
    with state.tentative():
        placements = _plan_one_node(state, gang, ordered, vendor, spread, everyone, total)
    if placements is None:
        with state.tentative():
            placements = _plan_fewest_nodes(state, gang, ordered, vendor, spread)
    if placements is None:
        largest = gpu_members[0].request.gpus
        joint = [r for m in gpu_members for r in m.request.resources]
        each = GroupFilters(state, member_filters, joint=False)
        reason = unschedulable_reason(state, each, gpu_members[0].request, largest, joint)
        return Unschedulable(
            keys,
            f"gang {gang}: {len(members)} pending replicas need {total} GPUs and cannot all be "
            f"placed; {reason}",
        )
    placements.sort(key=lambda p: p.pod)
    return Placed(tuple(placements))


def _plan_one_node(
    state: ClusterState,
    gang: str,
    ordered: list[Member],
    vendor: str,
    spread: bool,
    filters: GroupFilters,
    total: int,
) -> list[Placement] | None:
    demand = state.demand(r for m in ordered for r in m.request.resources)
    found = best_whole_node(state, filters, total, vendor, spread, demand)
    if found is None:
        return None
    return _split(state, gang, found.node, found.choice.mask, ordered)


def _split(
    state: ClusterState, gang: str, node: NodeState, joint: int, group: list[Member]
) -> list[Placement]:
    """Give each member (largest first) the best subset of the joint set that is left."""
    assert node.inventory is not None
    topology = node.inventory.topology
    out = []
    left = joint
    for member in group:
        k = member.request.gpus
        if k == 0:
            indices: tuple[int, ...] = ()
        else:
            choice = topology.best_set(left, k)
            assert choice is not None
            indices = choice.indices
            left &= ~choice.mask
        placement = whole_placement(member.pod, member.request, node, indices, gang)
        replicas = member.request.gang.replicas if member.request.gang else 0
        state.apply(placement, member.pod, replicas)
        out.append(placement)
    return out


def _plan_fewest_nodes(
    state: ClusterState, gang: str, ordered: list[Member], vendor: str, spread: bool
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
        out.extend(_split(state, gang, node, joint, group))
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
