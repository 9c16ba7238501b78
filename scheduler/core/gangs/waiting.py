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
retry, ``cycle.done_waiting`` once placed or gone); ``kept_domains`` chooses, for each waiting
gang in turn (by key), the domain of its level with the most room for its members that no
earlier one took. Everything here is arithmetic on the snapshot's counts: stepped by hand in
the tests.
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
    """The domains kept for the gangs waiting in ``hierarchy`` (other than ``gang``): for each
    in turn, by key, the domain of its level with the most room for its members (then by
    values) that no earlier one took. Empty when the setting is off or none waits."""
    if not state.settings.topology.yield_to_required:
        return []
    out: list[Path] = []
    trees: dict[tuple[str, int, tuple[tuple[int, int], ...]], Tree] = {}
    for key in sorted(state.gangs_waiting):
        waiting = state.gangs_waiting[key]
        if key == gang or waiting.hierarchy != hierarchy:
            continue
        shape = (waiting.vendor, waiting.gpus, waiting.demand)
        tree = trees.get(shape)
        if tree is None:
            fits = path_fits(state, hierarchy, waiting.vendor, waiting.gpus, waiting.demand)
            tree = trees[shape] = Tree(hierarchy, fits, None)
        free = [p for p in tree.at(waiting.level) if p not in out]
        if free:
            out.append(min(free, key=lambda p: (-tree.cap[p], p)))
    return out


def spared(fits: list[tuple[Path, int, int]], domains: list[Path]) -> list[tuple[Path, int, int]]:
    """``path_fits``'s rows without the paths under ``domains``."""
    return [row for row in fits if not any(row[0][: len(d)] == d for d in domains)]
