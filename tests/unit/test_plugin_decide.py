"""The device plugin's pure decisions (scheduler/agent/plugin/decide.py), stepped by hand."""

from __future__ import annotations

import json

import pytest

from scheduler.agent.plugin.decide import (
    Assignment,
    AssignmentError,
    ContainerGpus,
    Mode,
    PodDevices,
    Target,
    check_allocation,
    pending,
    pick,
    preferred,
    read_assignment,
    topology_choice,
)
from scheduler.core.model.names import ASSIGNMENT_ANNOTATION
from tests.plugin_node import UUIDS, dgx1_inventory

A, B, C, D = UUIDS[:4]


def annotated(body: object) -> dict[str, str]:
    return {ASSIGNMENT_ANNOTATION: json.dumps(body)}


def test_read_per_container_assignment_skips_containers_without_gpus() -> None:
    got = read_assignment(
        annotated(
            {
                "node": "n",
                "devices": [{"index": 0, "uuid": A}, {"index": 1, "uuid": B}],
                "containers": [
                    {"name": "main", "uuids": [A]},
                    {"name": "idle", "uuids": []},
                    {"name": "aux", "uuids": [B]},
                ],
                "gang": None,
            }
        )
    )
    assert got == Assignment(
        (ContainerGpus("main", (A,)), ContainerGpus("aux", (B,))), per_container=True
    )


def test_read_old_assignment_is_one_pod_level_container() -> None:
    got = read_assignment(
        annotated({"devices": [{"index": 2, "uuid": C}, {"index": 3, "uuid": D}]})
    )
    assert got == Assignment((ContainerGpus(None, (C, D)),), per_container=False)


def test_read_assignment_absent_or_malformed() -> None:
    assert read_assignment({}) is None
    with pytest.raises(AssignmentError, match=ASSIGNMENT_ANNOTATION):
        read_assignment({ASSIGNMENT_ANNOTATION: "{not json"})
    with pytest.raises(AssignmentError):
        read_assignment(annotated({"containers": [{"name": "x"}]}))


def test_pending_is_the_first_assigned_container_without_devices() -> None:
    assignment = Assignment(
        (ContainerGpus("a", (A,)), ContainerGpus("b", (B, C))), per_container=True
    )
    fresh = PodDevices("ns", "p", {"a": (), "b": ()})
    assert pending(assignment, fresh) == ContainerGpus("a", (A,))
    half = PodDevices("ns", "p", {"a": (A,), "b": ()})
    assert pending(assignment, half) == ContainerGpus("b", (B, C))
    # A container PodResources does not list yet has no devices either.
    assert pending(assignment, PodDevices("ns", "p", {"a": (A,)})) == ContainerGpus("b", (B, C))
    done = PodDevices("ns", "p", {"a": (A,), "b": (B, C)})
    assert pending(assignment, done) is None


def test_pending_old_assignment_only_while_no_container_has_devices() -> None:
    assignment = Assignment((ContainerGpus(None, (A, B)),), per_container=False)
    assert pending(assignment, PodDevices("ns", "p", {"main": ()})) == assignment.containers[0]
    assert pending(assignment, PodDevices("ns", "p", {"main": (A, B)})) is None
    assert pending(Assignment((), per_container=False), PodDevices("ns", "p", {})) is None


def test_pick_one_candidate_even_if_it_does_not_fit() -> None:
    stale = Target("ns", "p", "main", (A, B))
    assert pick([stale], 1, {C}) is stale
    assert pick([], 1, None) is None


def test_pick_among_several_only_a_unique_fit() -> None:
    one = Target("ns", "one", "main", (A,))
    two = Target("ns", "two", "main", (B, C))
    also_two = Target("ns", "three", "main", (C, D))
    assert pick([one, two], 2, {A, B, C}) is two
    assert pick([one, two], 2, None) is two
    assert pick([one, two, also_two], 2, {A, B, C, D}) is None  # ambiguous: nobody
    assert pick([one, two, also_two], 2, {A, B, C}) is two  # GPUs decide


def test_preferred_answers_the_assignment_when_it_fits() -> None:
    inv = dgx1_inventory()
    target = Target("ns", "p", "main", (D, A))
    assert preferred(2, UUIDS, [], target, inv) == ([D, A], "assignment")
    # Not all available, wrong size, or missing a must-include device: own choice instead.
    assert preferred(2, UUIDS[1:], [], target, inv)[1] == "topology"
    assert preferred(3, UUIDS, [], target, inv)[1] == "topology"
    assert preferred(2, UUIDS, [B], target, inv)[1] == "topology"


def test_topology_choice_is_rule_one_over_the_available_gpus() -> None:
    inv = dgx1_inventory()
    # With GPUs 1, 2 and 5 taken, the answer is the core's rule 1 over the five left.
    available = [UUIDS[i] for i in (0, 3, 4, 6, 7)]
    best = inv.topology.best_set(0b11011001, 2)
    assert best is not None
    assert topology_choice(2, available, [], inv) == [UUIDS[i] for i in best.indices]
    # must-include devices come first and are kept.
    got = topology_choice(2, available, [UUIDS[6]], inv)
    assert got[0] == UUIDS[6] and len(got) == 2 and got[1] in available
    # Without an inventory, or for devices it does not know: a stable choice.
    assert topology_choice(2, ["x", "b", "a"], [], None) == ["a", "b"]
    assert topology_choice(0, UUIDS, [], inv) == []


def test_check_allocation_strict_and_adopt() -> None:
    target = Target("ns", "p", "main", (A, B))
    ok = check_allocation([B, A], target, Mode.STRICT)
    assert ok.accept and ok.matches
    refused = check_allocation([A, C], target, Mode.STRICT)
    assert not refused.accept and refused.matches is False
    assert refused.message == (
        f"pod ns/p container main: the kubelet allocated {A}, {C} but the scheduler assigned "
        f"{A}, {B} (device plugin mode strict: refused)"
    )
    adopted = check_allocation([A, C], target, Mode.ADOPT)
    assert adopted.accept and adopted.matches is False
    # Nobody identified: strict refuses what it cannot match to an assignment, adopt accepts.
    unknown = check_allocation([A], None, Mode.STRICT, "ambiguous: 2 pods wait for GPUs")
    assert not unknown.accept and unknown.matches is None
    assert unknown.message == (
        f"no pod identified for {A} (ambiguous: 2 pods wait for GPUs): device plugin mode "
        "strict refuses GPUs it cannot match to an assignment"
    )
    accepted = check_allocation([A], None, Mode.ADOPT)
    assert accepted.accept and accepted.matches is None
