"""Nominations in the snapshot (issue 14): GPUs held for a preemptor while its victims terminate.

Pods of equal or lower priority cannot take them, the preemptor itself can, a pod of higher
priority ignores them (kube-scheduler's rule for nominated pods). A nomination is no holding,
is undone by ``tentative()``, and leaves no trace once removed.
"""

from __future__ import annotations

from scheduler.core.cycle import Unit, apply_decision, decide, group_units
from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.nominations import Nominated
from tests.builders import MakeNode, MakePod, cluster
from tests.topologies import DGX1_V100, PCIE8

PRIORITY = 100


def held_for(pod: str = "default/pre", devices: tuple[int, ...] = (0, 1, 2, 3)) -> Nominated:
    return Nominated(
        pod=pod, uid=f"uid-{pod}", priority=PRIORITY, node="dgx", devices=devices, requests=()
    )


def nominated_node() -> ClusterState:
    state: ClusterState = cluster(MakeNode().Name("dgx").Links(DGX1_V100))
    state.nominate(held_for())
    return state


def unit(name: str, gpus: int, priority: int) -> Unit:
    (u,) = group_units([MakePod().Name(name).Req(gpus).Priority(priority).Obj()])
    return u


def devices(state: ClusterState, u: Unit) -> tuple[int, ...] | None:
    decision = decide(state, u)
    if isinstance(decision, Unschedulable):
        return None
    assert isinstance(decision, Placed)
    (placement,) = decision.placements
    return placement.devices


def test_a_nomination_keeps_pods_of_equal_or_lower_priority_off_its_gpus() -> None:
    state = nominated_node()
    assert devices(state, unit("low", 8, PRIORITY - 1)) is None
    assert devices(state, unit("equal", 8, PRIORITY)) is None
    assert devices(state, unit("low-4", 4, PRIORITY - 1)) == (4, 5, 6, 7)
    assert state.nodes["dgx"].free_mask == 0b11110000


def test_the_nominated_preemptor_and_a_higher_priority_pod_may_take_them() -> None:
    state = nominated_node()
    assert devices(state, unit("pre", 8, PRIORITY)) == tuple(range(8))
    assert devices(state, unit("higher", 8, PRIORITY + 1)) == tuple(range(8))
    # decide lifted them only for its own decision.
    assert state.nodes["dgx"].free_mask == 0b11110000
    assert set(state.nominations) == {"default/pre"}


def test_a_nomination_is_no_holding_and_leaves_no_trace() -> None:
    state = cluster(MakeNode().Name("dgx").Links(DGX1_V100))
    before = (state.sizes(), set(state.classes))
    state.nominate(held_for())
    assert state.holdings == {}
    sizes = state.sizes()
    assert (sizes["nominations"], sizes["nominated_on"], sizes["nominated_gpus"]) == (1, 1, 4)
    state.unnominate("default/pre")
    state.unnominate("default/pre")  # twice: nothing to do
    assert (state.sizes(), set(state.classes)) == before
    assert state.nodes["dgx"].free_mask == 0xFF


def test_a_nomination_rolls_back_inside_tentative() -> None:
    state = nominated_node()
    before = (state.sizes(), dict(state.nominations), state.nodes["dgx"].free_mask)
    with state.tentative():
        state.unnominate("default/pre")
        state.nominate(held_for("default/other", (6, 7)))
        with state.tentative():
            state.nominate(held_for("default/pre", (0,)))  # replaced, inside a nested scope
            assert state.nodes["dgx"].free_mask == 0b00111110
        assert state.nodes["dgx"].free_mask == 0b00111111
    assert (state.sizes(), dict(state.nominations), state.nodes["dgx"].free_mask) == before


def test_a_preemptor_has_one_nomination_the_last_one() -> None:
    state = nominated_node()
    state.nominate(held_for(devices=(6, 7)))
    assert state.nodes["dgx"].free_mask == 0b00111111
    assert state.nominations["default/pre"].devices == (6, 7)


def test_placing_the_preemptor_uses_its_nomination_up() -> None:
    state = nominated_node()
    u = unit("pre", 4, PRIORITY)
    decision = decide(state, u)
    apply_decision(state, decision, u)
    assert state.nominations == {}
    assert state.sizes()["nominated_gpus"] == 0


def test_a_nomination_made_before_its_node_arrives_is_charged_when_it_does() -> None:
    state = ClusterState()
    state.nominate(held_for())
    assert state.set_node(MakeNode().Name("dgx").Links(DGX1_V100).Obj()) is None
    assert state.nodes["dgx"].free_mask == 0b11110000
    assert state.set_node(MakeNode().Name("dgx").Links(DGX1_V100).Label("x", "y").Obj()) is None
    assert state.nodes["dgx"].free_mask == 0b11110000


def test_shared_pods_stay_off_nominated_cards() -> None:
    state: ClusterState = cluster(
        MakeNode().Name("dgx").Links(PCIE8),
        running=(MakePod().Name("w").Req(6).Bound("dgx", "0,1,2,3,4,5"),),
    )
    state.nominate(held_for(devices=(6, 7)))
    (u,) = group_units([MakePod().Name("s").Shared(core=10).Priority(PRIORITY).Obj()])
    assert isinstance(decide(state, u), Unschedulable)
    (hi,) = group_units([MakePod().Name("s").Shared(core=10).Priority(PRIORITY + 1).Obj()])
    assert isinstance(decide(state, hi), Placed)


def test_a_nomination_holds_the_preemptors_cpu_on_its_node() -> None:
    state: ClusterState = cluster(
        MakeNode().Name("dgx").Links(DGX1_V100).Allocatable({"cpu": 4, "nvidia.com/gpu": 8})
    )
    state.nominate(
        Nominated(pod="default/pre", priority=PRIORITY, node="dgx", requests=(("cpu", 3000),))
    )
    (low,) = group_units([MakePod().Name("c").Requests(cpu="2").Priority(PRIORITY).Obj()])
    assert isinstance(decide(state, low), Unschedulable)
    (pre,) = group_units([MakePod().Name("pre").Requests(cpu="3").Priority(PRIORITY).Obj()])
    assert isinstance(decide(state, pre), Placed)
    state.unnominate("default/pre")
    assert state.nodes["dgx"].requested == {} and state.nodes["dgx"].pod_count == 0
