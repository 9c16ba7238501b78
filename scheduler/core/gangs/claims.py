"""A gang whose members ask for devices only through ResourceClaims, planned through topology
domains (issues 21 and 29) like a ``nvidia.com/gpu`` gang (gangs/indomains.py).

Counting. The domain choice (gangs/domainchoice.py) needs, per leaf domain, how many members fit
on its nodes. For claims that count comes from the snapshot's class index (snapshot/devices.py):
on a node, the members of the largest member's shape that fit are, over the DeviceClasses its
ExactCount requests name, the least of ``free devices of the class // devices asked of it``. A
node with eight free GPUs and one free IMEX channel therefore holds one member asking for two
GPUs and a channel, as the driver allows (one workload pod per node per ComputeDomain). Classes
the index cannot count (a network-attached device matches them) do not limit the count; the
allocator decides there.

Realising a plan. Inside each leaf domain the members (consecutive ranks) go to the node that
can take the longest run of the next ranks by those counts (then fewest free devices of the
leading class, binpack; most, spread; then name), each member's claims allocated there by the
DynamicResources filter after the members before it (filters/dra.py: the choice of devices by
interconnect, so each 2-GPU member takes an NVLink pair of what its siblings left), every
Kubernetes filter checked against the open tentative scope. A plan a filter or the allocator
defeats is taken back and the next is tried.

IMEX. NVIDIA's ComputeDomain controller gives the workload pods a claim template whose request
names the DeviceClass ``compute-domain-default-channel.nvidia.com``; the channels carry no
clique attribute, and IMEX works only between GPUs of one NVLink clique. A gang with such a
claim is therefore held to one domain of the hierarchy's ``nvlink`` level (a required level,
added to the gang's own constraint unless that already requires a level at least as narrow):
never placed across cliques, refused with the shortfall when no clique holds it.
"""

from __future__ import annotations

from msgspec import structs

from ..filters.chain import PodFilters
from ..model.decisions import Placement
from ..snapshot.cluster import ClusterState
from ..snapshot.domains import NVLINK, Path
from ..snapshot.nodes import NodeState
from .constraints import Constraint, rank_order
from .domainchoice import Tree
from .indomains import Context, annotate, bound_path, try_plans
from .members import Member

# The DeviceClass of a ComputeDomain's IMEX channel (NVIDIA's compute-domain controller writes
# it into the claim template it creates for the domain's workload pods).
IMEX_CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"

# Per DeviceClass, how many devices one member asks for.
Needs = dict[str, int]


def plan_claims_in_domains(
    state: ClusterState, gang: str, members: list[Member], minimum: int, ctx: Context
) -> list[Placement] | str:
    """Every member placed through the domains (applied to the open tentative scope), or why
    not: the shortfall for a hard constraint (IMEX's clique included), "" otherwise (the caller
    then places them without domains)."""
    ctx = with_imex(state, members, ctx)
    c = ctx.constraint
    ranked_pods = rank_order([m.pod for m in members])
    by_key = {m.pod.key: m for m in members}
    ranked = [by_key[p.key] for p in ranked_pods]
    n = len(ranked)
    if c is not None and c.slice_size and n % c.slice_size:
        return f"gang {gang}: {n} pods cannot be cut into slices of {c.slice_size} ({c.says})"
    needs = _largest_needs(state, ranked)
    paths: dict[Path, list[NodeState]] = {}
    for name in sorted(state.nodes):
        paths.setdefault(state.path_of(ctx.hierarchy, name), []).append(state.nodes[name])
    if c is not None and c.required == ctx.hierarchy.host:
        everyone = [node for nodes in paths.values() for node in nodes]
        holding = [node for node in everyone if _fit(state, node, needs) >= n]
        for node in sorted(holding, key=lambda node: (_free(state, node, needs), node.name)):
            placed = _pack(state, gang, ranked, [node], needs, False, minimum)
            if placed is not None:
                return annotate(state, placed, ctx, ranked_pods)
        return f"gang {gang}: needs {n} pods on one node; no node holds them"
    fits = []
    for path, nodes in paths.items():
        counts = [_fit(state, node, needs) for node in nodes]
        if sum(counts):
            fits.append((path, sum(counts), sum(1 for count in counts if count)))
    tree = Tree(ctx.hierarchy, fits, c, state.settings.topology.spill_broken_first)
    spread = any(m.request.node_policy == "spread" for m in ranked)
    sticky = bound_path(state, gang, ctx)

    def pack(path: Path, part: list[Member]) -> list[Placement] | None:
        return _pack(state, gang, part, paths.get(path, []), needs, spread, minimum)

    return try_plans(state, gang, tree, ctx, sticky, ranked, ranked_pods, pack)


def with_imex(state: ClusterState, members: list[Member], ctx: Context) -> Context:
    """``ctx`` holding the gang to one NVLink clique when a member's unallocated claims ask for
    an IMEX channel and the hierarchy has the ``nvlink`` level."""
    level = ctx.hierarchy.find(NVLINK)
    c = ctx.constraint
    if level is None or (c is not None and c.required is not None and c.required >= level):
        return ctx
    if not any(_asks_imex(state, m) for m in members):
        return ctx
    says = "IMEX channel claims of one ComputeDomain"
    if c is None:
        c = Constraint(hierarchy=ctx.hierarchy, required=level, says=says)
    else:
        c = structs.replace(c, required=level, says=f"{c.says}; {says}" if c.says else says)
    return structs.replace(ctx, constraint=c)


def _asks_imex(state: ClusterState, member: Member) -> bool:
    claims = state.inputs.resource_claims
    pod = member.pod
    for entry in pod.resource_claims:
        claim = claims.get(f"{pod.namespace}/{entry.claim}") if entry.claim else None
        if claim is None or claim.allocation is not None:
            continue
        for request in claim.requests:
            specs = [request.exactly] if request.exactly is not None else []
            specs += [s.exactly for s in request.first_available]
            if any(s.device_class_name == IMEX_CHANNEL_CLASS for s in specs):
                return True
    return False


def _largest_needs(state: ClusterState, ranked: list[Member]) -> Needs:
    """The devices per class of the member asking for the most (its unallocated claims'
    ExactCount requests), the shape the domains are counted in."""
    best: Needs = {}
    for member in ranked:
        dra = PodFilters(state, member.pod).dra
        if dra is None:
            continue
        needs = dict(dra.variant(frozenset()).needs)
        if sum(needs.values()) > sum(best.values()):
            best = needs
    return best


def _fit(state: ClusterState, node: NodeState, needs: Needs) -> int:
    """How many members of the shape ``needs`` the node's free devices hold (see the module's
    docstring); a node without a countable class is not limited by devices (one member: the
    filters decide), and one without a needed class holds none."""
    count: int | None = None
    for class_name, need in needs.items():
        if need <= 0:
            continue
        index = state.devices.class_index(class_name, state.nodes)
        if index is None or index.everywhere:
            continue
        each = index.free.get(node.name, 0) // need
        count = each if count is None else min(count, each)
    return 1 if count is None else count


def _free(state: ClusterState, node: NodeState, needs: Needs) -> int:
    """The node's free devices of the leading class (the one the shape asks the most of)."""
    if not needs:
        return 0
    lead = max(sorted(needs), key=lambda name: needs[name])
    index = state.devices.class_index(lead, state.nodes)
    return 0 if index is None else index.free.get(node.name, 0)


def _pack(
    state: ClusterState,
    gang: str,
    members: list[Member],
    nodes: list[NodeState],
    needs: Needs,
    spread: bool,
    minimum: int,
) -> list[Placement] | None:
    """``members`` in consecutive runs on ``nodes`` (see the module's docstring), applied to the
    open tentative scope; None (and nothing of theirs applied) when they do not all fit."""
    remaining = list(members)
    out: list[Placement] = []
    while remaining:
        candidates = []
        for node in nodes:
            run = min(_fit(state, node, needs), len(remaining))
            if run:
                free = _free(state, node, needs)
                candidates.append((-run, -free if spread else free, node.name, node))
        candidates.sort(key=lambda c: c[:3])
        placed = 0
        for *_, node in candidates:
            for member in remaining:
                placement = _place_on(state, gang, member, node, minimum)
                if placement is None:
                    break
                out.append(placement)
                placed += 1
            if placed:
                break
        if not placed:
            for placement in out:
                state.forget(placement.pod)
            return None
        remaining = remaining[placed:]
    return out


def _place_on(
    state: ClusterState, gang: str, member: Member, node: NodeState, minimum: int
) -> Placement | None:
    """The member on ``node`` with its claims allocated after its siblings', applied; None
    when a filter (the allocator's included) refuses the node."""
    filters = PodFilters(state, member.pod)
    if filters.problem is not None or filters.check(node):
        return None
    claims = filters.dra.claims_on(node) if filters.dra is not None else ()
    pod = member.pod
    placement = Placement(
        pod.key, pod.uid, node.name, (), (), (), gang=gang, replicas=minimum, claims=claims
    )
    state.apply(placement, pod, minimum)
    return placement
