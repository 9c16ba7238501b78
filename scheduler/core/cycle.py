"""Entry points of the core: group pending pods into units, decide a unit, replay a sequence.

A unit is one pod, or every pending member of one gang. ``decide`` never mutates the state it is
given (gang planning rolls back its own tentative placements); the caller assumes a Placed
decision's placements once it has taken it: the simulator at once (``apply_decision``), the live
scheduler before it reserves the claims in the store (``assume``, service/cycle.py), so that the
next unit of a batch sees them, and forgets them when the reservation is refused or fenced.
``schedule_in_order`` is the simulator's loop, kept here so that the live scheduler and the
simulator share every rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
from msgspec import Struct

from .filters.chain import PodFilters
from .gangs.members import Member
from .gangs.planning import plan_gang
from .model.decisions import Decision, Placed, Placement, Unschedulable, Waiting
from .model.gangsources import best_known, gang_key
from .model.objects import PodInput
from .placement.devices import place_claims
from .placement.nodes import (
    no_node_reason,
    place_shared,
    place_whole,
    place_without_gpus,
    unschedulable_reason,
)
from .resources.requests import RequestError, parse_request
from .snapshot.cluster import ClusterState


class Unit(Struct, frozen=True):
    gang: str | None
    pods: tuple[PodInput, ...]


def gang_of(pod: PodInput) -> str | None:
    """The pod's gang key, or None (also for malformed gang sources: decide() reports those)."""
    return gang_key(pod)


def gang_minimum(state: ClusterState, pod: PodInput) -> int:
    """The minimum of the pod's gang as far as it is known (0: none, or unknown): what its
    holding and its store claim record."""
    gang = best_known(pod, state.inputs.pod_groups)
    return gang.minimum if gang else 0


def gang_timeout(state: ClusterState, unit: Unit) -> int | None:
    """The unit's own gang timeout (a PodGroup's scheduleTimeoutSeconds), None: the config's."""
    for pod in unit.pods:
        gang = best_known(pod, state.inputs.pod_groups)
        if gang is not None and gang.timeout_s is not None:
            return gang.timeout_s
    return None


def group_units(pods: Sequence[PodInput]) -> list[Unit]:
    """Pending pods as units, in the order of each unit's first pod."""
    units: list[Unit] = []
    gangs: dict[str, list[PodInput]] = {}
    order: list[str | PodInput] = []
    for pod in pods:
        key = gang_of(pod)
        if key is None:
            order.append(pod)
        elif key in gangs:
            gangs[key].append(pod)
        else:
            gangs[key] = [pod]
            order.append(key)
    for item in order:
        if isinstance(item, str):
            units.append(Unit(item, tuple(gangs[item])))
        else:
            units.append(Unit(None, (item,)))
    return units


def decide(state: ClusterState, unit: Unit, within: frozenset[str] = frozenset()) -> Decision:
    """The unit's decision on ``state``, which is left as it was. Nominations (GPUs and DRA
    devices held for preemptors) bind it unless they are its own or of lower priority than it:
    those are lifted for the decision (ClusterState.lifted_nominations).

    A gang placed through topology domains keeps to the domain its bound members, the nodes
    its own members are nominated to (a preemption's domain, while its victims leave) and
    ``within`` (nodes: preemption's search, one candidate domain at a time) share
    (gangs/indomains.py, sticky)."""
    nominated = {state.nominations[p.key].node for p in unit.pods if p.key in state.nominations}
    with state.lifted_nominations((p.key for p in unit.pods), unit_priority(unit)):
        return _decide_unit(state, unit, within | nominated)


def _decide_unit(state: ClusterState, unit: Unit, within: frozenset[str]) -> Decision:
    if unit.gang is None:
        (pod,) = unit.pods
        return _decide_pod(state, pod)
    members = []
    for pod in unit.pods:
        try:
            members.append(Member(pod, parse_request(pod, state.settings, state.memos.asks)))
        except RequestError as exc:
            keys = tuple(sorted(p.key for p in unit.pods))
            return Unschedulable(keys, f"gang {unit.gang}: {exc}")
    return plan_gang(state, unit.gang, members, within)


def _decide_pod(state: ClusterState, pod: PodInput) -> Decision:
    try:
        req = parse_request(pod, state.settings, state.memos.asks)
        filters = PodFilters(state, pod)
    except RequestError as exc:
        return Unschedulable((pod.key,), str(exc))
    if req.shared is not None:
        placement = place_shared(state, pod, req, filters)
    elif req.gpus:
        placement = place_whole(state, pod, req, filters)
        if placement is None and filters.dra is not None and filters.dra.gpu_backed:
            placement = place_claims(state, pod, filters, req.node_policy == "spread", gpus=True)
    else:
        if filters.dra is not None and filters.dra.allocates:
            placement = place_claims(state, pod, filters, req.node_policy == "spread")
        else:
            placement = place_without_gpus(state, pod, filters)
        if placement is None:
            return Unschedulable((pod.key,), no_node_reason(state, filters))
    if placement is None:
        return Unschedulable((pod.key,), unschedulable_reason(state, filters, req))
    if filters.dra is not None and filters.dra.allocates:
        # The ResourceClaims allocated on the chosen node (filters/dra.py), for the binder.
        node = state.nodes[placement.node]
        placement = msgspec.structs.replace(placement, claims=filters.dra.claims_on(node))
    return Placed((placement,))


def assume(state: ClusterState, placement: Placement, pod: PodInput, shown: bool = False) -> None:
    """Assume one placement of a decision: the one way a decision becomes part of the snapshot,
    in ``run`` (the pod book's ASSUME, as the cycle places it) and ``simulate`` alike. Its gang's
    minimum is the one the plan resolved (``Placement.replicas``). ``shown``: the pod is bound
    as it is assumed (Holding.shown: ``simulate`` binds at once, and no Binding fails there);
    ``run`` holds it as shown when the bound watch shows it."""
    state.apply(placement, pod, placement.replicas, shown)


def apply_decision(state: ClusterState, decision: Decision, unit: Unit) -> None:
    """Assume every placement of a Placed decision (no-op for the others), bound at once as
    ``simulate`` and the benchmarks bind (``assume``'s ``shown``)."""
    if not isinstance(decision, Placed):
        return
    pods = {p.key: p for p in unit.pods}
    for placement in decision.placements:
        assume(state, placement, pods[placement.pod], shown=True)


def gated(pod: PodInput) -> Waiting | None:
    """A pod with scheduling gates is not attempted at all (kube-scheduler's SchedulingGates
    PreEnqueue): no decision, no reservation, not unschedulable; it waits for its gates."""
    if not pod.scheduling_gates:
        return None
    return Waiting((pod.key,), f"waiting for scheduling gates: {', '.join(pod.scheduling_gates)}")


def unit_priority(unit: Unit) -> int:
    """kube-scheduler's PrioritySort: a pod's spec.priority; a gang goes by its highest member."""
    return max(p.priority for p in unit.pods)


def schedule_in_order(
    state: ClusterState,
    pods: Sequence[PodInput],
    after: Callable[[Unit, Decision], Decision] | None = None,
) -> list[Decision]:
    """Decide pending pods as a backlog, applying each placement before the next decision.

    The order is the live queue's: higher ``spec.priority`` first, then the file order (which
    stands for creation time). A gang is decided once, at the position of its last member in
    ``pods`` (all members present then, if they ever will be); a non-gang pod at its own
    position. Gated pods get a Waiting decision and are not attempted. ``after`` may replace a
    decision before it is applied (the simulator's preemption: an unschedulable unit placed once
    its victims are gone). Every pod is pending in ``state`` from the start, as the live pod
    book keeps the pending pods the watch shows (gangs/waiting.py reads the gangs among them).
    """
    decisions: list[Decision] = []
    ready = []
    for pod in pods:
        state.set_pending(pod)
    for pod in pods:
        waiting = gated(pod)
        if waiting is None:
            ready.append(pod)
        else:
            decisions.append(waiting)
    units = group_units(ready)
    last_pos: dict[str, int] = {}
    for pos, pod in enumerate(ready):
        key = gang_of(pod)
        if key is not None:
            last_pos[key] = pos
    position = {id(pod): pos for pos, pod in enumerate(ready)}

    def when(unit: Unit) -> tuple[int, int]:
        if unit.gang is not None:
            return -unit_priority(unit), last_pos[unit.gang]
        return -unit_priority(unit), position[id(unit.pods[0])]

    for unit in sorted(units, key=when):
        decision = decide(state, unit)
        if after is not None:
            decision = after(unit, decision)
        apply_decision(state, decision, unit)
        decisions.append(decision)
    return decisions
