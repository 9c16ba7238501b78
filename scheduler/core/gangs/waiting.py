"""Gangs waiting for a required domain, and the domain kept for them (issue 32 item 7).

A gang that requires one domain of a level (a clique, a rack) and finds none that holds it
waits; meanwhile gangs that need no domain (only a preferred level, or no constraint) would take
the free nodes of the domains nearest to holding it: a 64-pod gang preferring a block closes
every rack of the block it takes. With ``topology.yieldToRequired`` (the default) a gang without
a required level first tries its plans with the kept domain left out, and only when none packs
takes its ordinary plans: a preference yields to a requirement, as KAI and Kueue order required
placements before preferred ones, and as Volcano reserves nodes for the job that waits (its
reservation for a target job) without holding anything idle that nobody else could use.

Which gang waits is a function of the snapshot alone, so that ``run``, ``simulate``, a standby
and a restarted leader keep the same domain: the pending gangs (``ClusterState.pending_gangs``,
what the shells see pending) that hold nothing yet (no member assumed or bound), none of whose
pending members is gated, and whose constraint requires a level above the node, in the queue's
order (highest priority, then the oldest member's creationTimestamp, then the gang key). The
first of them with a domain of its level that has room for one of its members is the head (the
gang that has waited longest, Volcano's target job); the domain of its level with the most room
for its members is kept. A gang that just arrived and would fit counts too: it is decided in its
turn, before the gangs behind it in the queue. One domain for each waiting gang was tried first:
on bench-topology's seed 14 it stranded 18% more GPU-hours than none (docs/benchmarks.md).
Everything here is arithmetic on the snapshot's counts: stepped by hand in the tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from msgspec import Struct

from ..model.objects import PodInput
from ..resources.requests import RequestError, parse_request
from ..snapshot.cluster import ClusterState
from ..snapshot.domains import Hierarchy, Path
from .constraints import TopologyError, gang_constraint
from .domainchoice import Tree, path_fits


class WaitingGang(Struct, frozen=True):
    """A gang waiting for one domain of its required level: ``members`` of ``gpus`` whole GPUs
    of ``vendor`` each (asking ``demand`` of the GPU resources), in one domain of level
    ``level`` of ``hierarchy``."""

    hierarchy: Hierarchy
    level: int
    members: int
    gpus: int
    vendor: str
    demand: tuple[tuple[int, int], ...]


def waiting_of(state: ClusterState, pods: Sequence[PodInput]) -> WaitingGang | None:
    """What the gang of ``pods`` waits for, when it requires one domain above the node (else,
    or when its constraint or requests are malformed: None)."""
    settings = state.settings.topology
    try:
        constraint = gang_constraint(
            pods, state.inputs.pod_groups, settings, state.inputs.topologies
        )
        if constraint is None or constraint.required is None:
            return None
        if constraint.required >= constraint.hierarchy.host:
            return None
        requests = [parse_request(p, state.settings, state.memos.asks) for p in pods]
    except (TopologyError, RequestError):
        return None
    largest = max(requests, key=lambda r: r.gpus)
    if not largest.gpus or largest.vendor is None:
        return None
    return WaitingGang(
        hierarchy=constraint.hierarchy,
        level=constraint.required,
        members=len(pods),
        gpus=largest.gpus,
        vendor=largest.vendor,
        demand=state.demand(largest.resources),
    )


def waiting(state: ClusterState) -> Iterator[tuple[str, WaitingGang]]:
    """The pending gangs that wait for a domain of their required level, in the queue's order
    (module doc): read from the snapshot alone."""
    order = []
    for key, members in state.pending_gangs.items():
        if state.gang_bound.get(key):
            continue  # placed (assumed or bound), or being completed within its domain
        pods = [members[k] for k in sorted(members)]
        if any(p.scheduling_gates for p in pods):
            continue
        oldest = min(p.created for p in pods)
        order.append((-max(p.priority for p in pods), oldest, key, pods))
    order.sort(key=lambda row: row[:3])
    for _, _, key, pods in order:
        gang = waiting_of(state, pods)
        if gang is not None:
            yield key, gang


def kept_domains(state: ClusterState, gang: str, hierarchy: Hierarchy) -> list[Path]:
    """The domain kept for the head of the waiting gangs in ``hierarchy`` (other than
    ``gang``; a gang passed over when no domain of its level has room for one of its
    members): the domain of its level with the most room for its members, then by values.
    Empty when the setting is off or none waits."""
    if not state.settings.topology.yield_to_required:
        return []
    for key, head in waiting(state):
        if key == gang or head.hierarchy != hierarchy:
            continue
        fits = path_fits(state, hierarchy, head.vendor, head.gpus, head.demand)
        tree = Tree(hierarchy, fits, None)
        domains = tree.at(head.level)
        if domains:
            return [min(domains, key=lambda p: (-tree.cap[p], p))]
    return []


def spared(fits: list[tuple[Path, int, int]], domains: list[Path]) -> list[tuple[Path, int, int]]:
    """``path_fits``'s rows without the paths under ``domains``."""
    return [row for row in fits if not any(row[0][: len(d)] == d for d in domains)]
