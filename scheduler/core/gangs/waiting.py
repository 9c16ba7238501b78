"""Gangs waiting for a required domain, and the domains kept for them (issue 32 item 7).

A gang that requires one domain of a level (a clique, a rack) and finds none that holds it
waits; meanwhile gangs that need no domain (only a preferred level, or no constraint) would take
the free nodes of the domains nearest to holding it: a 64-pod gang preferring a block closes
every rack of the block it takes. With ``topology.yieldToRequired`` (the default) a gang without
a required level first tries its plans with those domains left out, and only when none packs
takes its ordinary plans: a preference yields to a requirement, as KAI and Kueue order required
placements before preferred ones, and as Volcano reserves nodes for the job that waits (its
reservation for a target job) without holding anything idle that nobody else could use.

The queue tells the core which gangs wait (``cycle.note_waiting`` on a refusal or a skipped
retry, ``cycle.done_waiting`` once placed or gone), in the order they started waiting;
``kept_domains`` keeps one domain, for the gang at the head (the one that has waited longest,
Volcano's target job): the domain of its level with the most room for its members. One for
each waiting gang was tried first: on bench-topology's seed 14 it stranded 18% more GPU-hours
than none (more racks kept, so more gangs spread), where the head alone strands fewer on every
seed measured (docs/benchmarks.md). Everything here is arithmetic on the snapshot's counts:
stepped by hand in the tests.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model.objects import PodInput
from ..resources.requests import RequestError, parse_request
from ..snapshot.cluster import ClusterState
from ..snapshot.domains import Hierarchy, Path, WaitingGang
from .constraints import TopologyError, gang_constraint
from .domainchoice import Tree, path_fits


def waiting_of(state: ClusterState, pods: Sequence[PodInput]) -> WaitingGang | None:
    """What the gang of ``pods`` waits for, when it requires one domain above the node (else,
    or when its constraint or requests are malformed: None)."""
    settings = state.settings.topology
    try:
        constraint = gang_constraint(
            pods, state.inputs.pod_groups, settings, state.inputs.topologies
        )
        requests = [parse_request(p, state.settings, state.memos.asks) for p in pods]
    except (TopologyError, RequestError):
        return None
    if constraint is None or constraint.required is None:
        return None
    if constraint.required >= constraint.hierarchy.host:
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


def kept_domains(state: ClusterState, gang: str, hierarchy: Hierarchy) -> list[Path]:
    """The domain kept for the gang that has waited longest in ``hierarchy`` (other than
    ``gang``; passed over when no domain of its level has room for one of its members): the
    domain of its level with the most room for its members, then by values. Empty when the
    setting is off or none waits."""
    if not state.settings.topology.yield_to_required:
        return []
    for key, waiting in state.gangs_waiting.items():  # in the order they started waiting
        if key == gang or waiting.hierarchy != hierarchy:
            continue
        fits = path_fits(state, hierarchy, waiting.vendor, waiting.gpus, waiting.demand)
        tree = Tree(hierarchy, fits, None)
        domains = tree.at(waiting.level)
        if domains:
            return [min(domains, key=lambda p: (-tree.cap[p], p))]
    return []


def spared(fits: list[tuple[Path, int, int]], domains: list[Path]) -> list[tuple[Path, int, int]]:
    """``path_fits``'s rows without the paths under ``domains``."""
    return [row for row in fits if not any(row[0][: len(d)] == d for d in domains)]
