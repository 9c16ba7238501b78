"""Victim choice (issue 14, "Priority and gang-aware preemption"), stepped by hand.

Each test builds a snapshot with the builders, asks ``preempt`` for the unit ``decide`` could not
place, and checks the victims, the plan, and that the snapshot is left exactly as it was. The
tie-break tests each offer two candidates where the other one wins on every later key, so only
the key under test can decide.
"""

from __future__ import annotations

import msgspec
import pytest

from scheduler.core.cycle import Unit, apply_decision, decide, group_units
from scheduler.core.formats.assignment import assignment_annotations
from scheduler.core.model import names
from scheduler.core.model.decisions import Placed, Placement, Share, Unschedulable
from scheduler.core.model.objects import PodGroupInput, PodInput
from scheduler.core.preemption import candidates
from scheduler.core.preemption.preempt import NoPreemption, Preemption, preempt
from scheduler.core.settings import CoreSettings
from scheduler.core.snapshot.cluster import ClusterState
from tests.builders import MakeNode, MakePod, cluster
from tests.topologies import DGX1_V100, PCIE8

HIGH = 1000
LOW = 1


def unit_of(*pods: MakePod | PodInput) -> Unit:
    objs = [p.Obj() if isinstance(p, MakePod) else p for p in pods]
    (unit,) = group_units(objs)
    return unit


def run(state: ClusterState, *pods: MakePod | PodInput) -> Preemption | NoPreemption:
    """preempt, after checking that decide cannot place the unit; the state must not change."""
    unit = unit_of(*pods)
    assert not isinstance(decide(state, unit), Placed)
    before = (state.sizes(), dict(state.holdings), dict(state.index.records), free(state))
    result = preempt(state, unit)
    assert (state.sizes(), dict(state.holdings), dict(state.index.records), free(state)) == before
    return result


def free(state: ClusterState) -> dict[str, int]:
    return {name: node.free_mask for name, node in state.nodes.items()}


def victims(result: Preemption | NoPreemption) -> list[str]:
    assert isinstance(result, Preemption), result
    return [v.pod for v in result.victims]


def plan(result: Preemption | NoPreemption) -> dict[str, tuple[str, tuple[int, ...]]]:
    assert isinstance(result, Preemption), result
    return {p.pod: (p.node, p.devices) for p in result.placements}


def dgx(name: str = "dgx") -> MakeNode:
    return MakeNode().Name(name).Links(DGX1_V100)


def running(name: str, node: str, devices: str, priority: int = LOW, created: str = "") -> MakePod:
    gpus = len(devices.split(","))
    return MakePod().Name(name).Req(gpus).Priority(priority).Created(created).Bound(node, devices)


def shared_tenant(name: str, node: str, card: int, priority: int, created: str) -> MakePod:
    """A pod bound with 40% of one card, as our Binding would annotate it."""
    pod = MakePod().Name(name).Shared(core=40).Priority(priority).Created(created).Bound(node)
    share = Share(index=card, uuid=f"GPU-{node}-{card}", core=40, memory_mib=0)
    placement = Placement(f"default/{name}", "", node, (), (), (share,))
    for key, value in assignment_annotations(placement).items():
        pod.Annotation(key, value)
    return pod


def pending(name: str, gpus: int, priority: int = HIGH) -> MakePod:
    return MakePod().Name(name).Req(gpus).Priority(priority)


# ---- the three -----------------------------------------------------------------------


def test_a_low_priority_gang_of_2x4_is_evicted_whole_for_an_8_gpu_pod_never_one_member() -> None:
    state = cluster(
        dgx(),
        running=(
            running("w-0", "dgx", "0,1,2,3").Gang("job", 2),
            running("w-1", "dgx", "4,5,6,7").Gang("job", 2),
        ),
    )
    result = run(state, pending("big", 8))
    assert victims(result) == ["default/w-0", "default/w-1"]
    assert isinstance(result, Preemption)
    assert {v.gang for v in result.victims} == {"default/job"}
    assert {v.uid for v in result.victims} == {"uid-default-w-0", "uid-default-w-1"}
    assert plan(result) == {"default/big": ("dgx", (0, 1, 2, 3, 4, 5, 6, 7))}
    assert result.nominations[0].devices == (0, 1, 2, 3, 4, 5, 6, 7)
    assert result.nominations[0].priority == HIGH
    assert "preempts 2 pod(s) (1 gang(s))" in result.summary


def test_a_gang_member_is_never_evicted_alone_even_when_one_would_do() -> None:
    # A 4-GPU pod would fit with w-1 gone alone; the gang goes whole or not at all.
    state = cluster(
        dgx(),
        running=(
            running("w-0", "dgx", "0,1,2,3").Gang("job", 2),
            running("w-1", "dgx", "4,5,6,7").Gang("job", 2),
        ),
    )
    assert victims(run(state, pending("half", 4))) == ["default/w-0", "default/w-1"]


def test_a_16_gpu_preemptor_on_an_8_gpu_cluster_evicts_nothing_and_says_why() -> None:
    state = cluster(dgx(), running=(running("w", "dgx", "0,1,2,3,4,5,6,7"),))
    result = run(state, pending("huge", 16))
    assert isinstance(result, NoPreemption)
    assert result.reason == f"no node where evicting pods of lower priority than {HIGH} makes room"
    assert result.weighed


def elastic_gang(state: ClusterState, minimum: int) -> None:
    state.inputs.pod_groups.put(
        PodGroupInput(group=names.POD_GROUP_API, namespace="default", name="el", min_member=minimum)
    )
    for i, devices in enumerate(["0,3", "1,2", "4,7", "5,6"]):
        member = running(f"m-{i}", "dgx", devices, created=f"2026-01-0{i + 1}T00:00:00Z")
        assert state.add_bound_pod(member.Label(names.POD_GROUP_LABEL, "el").Obj()) is None


def test_an_elastic_victim_gang_loses_only_its_surplus_when_that_suffices() -> None:
    state = cluster(dgx())
    elastic_gang(state, minimum=2)
    result = run(state, pending("four", 4))
    # Two members beyond the minimum of 2: the youngest two go, the gang keeps its minimum.
    assert victims(result) == ["default/m-2", "default/m-3"]
    assert plan(result) == {"default/four": ("dgx", (4, 5, 6, 7))}
    assert isinstance(result, Preemption) and "(1 gang(s))" in result.summary


def test_an_elastic_gang_goes_whole_when_its_surplus_is_not_enough() -> None:
    state = cluster(dgx())
    elastic_gang(state, minimum=2)
    result = run(state, pending("six", 6))
    assert victims(result) == ["default/m-0", "default/m-1", "default/m-2", "default/m-3"]


def test_a_gang_whose_minimum_is_its_size_has_no_surplus() -> None:
    state = cluster(dgx())
    elastic_gang(state, minimum=4)
    assert len(victims(run(state, pending("two", 2)))) == 4


# ---- who may preempt, who may be a victim -----------------------------------------------------


def test_equal_priority_is_never_a_victim() -> None:
    state = cluster(dgx(), running=(running("peer", "dgx", "0,1,2,3,4,5,6,7", priority=HIGH),))
    result = run(state, pending("big", 8))
    assert isinstance(result, NoPreemption)
    # Known without weighing anything: no pod of lower priority, none terminating.
    assert result == NoPreemption(
        pods=("default/big",),
        reason=f"no running pod of lower priority than {HIGH}",
        weighed=False,
    )


def test_a_gang_with_one_member_of_equal_priority_is_no_victim() -> None:
    state = cluster(
        dgx(),
        running=(
            running("w-0", "dgx", "0,1,2,3").Gang("job", 2),
            running("w-1", "dgx", "4,5,6,7", priority=HIGH).Gang("job", 2),
        ),
    )
    assert isinstance(run(state, pending("big", 8)), NoPreemption)


def test_preemption_policy_never_preempts_nothing_and_says_why() -> None:
    state = cluster(dgx(), running=(running("w", "dgx", "0,1,2,3,4,5,6,7"),))
    pod = msgspec.structs.replace(pending("polite", 8).Obj(), preemption_policy="Never")
    result = run(state, pod)
    assert result == NoPreemption(
        pods=("default/polite",),
        reason="preemptionPolicy Never (default/polite): it waits for room instead of evicting "
        "pods of lower priority",
    )


def test_a_terminating_victim_is_not_chosen_again_its_room_is_waited_for() -> None:
    state = cluster(dgx(), running=(running("going", "dgx", "0,1,2,3,4,5,6,7").Deleting(),))
    result = run(state, pending("big", 8))
    assert isinstance(result, Preemption)
    assert result.victims == ()
    assert result.waiting_for == ("default/going",)
    assert plan(result) == {"default/big": ("dgx", (0, 1, 2, 3, 4, 5, 6, 7))}
    assert "evicting nothing" in result.summary


def test_a_terminating_pod_counts_as_going_and_only_the_rest_is_evicted() -> None:
    state = cluster(
        dgx(),
        running=(
            running("going", "dgx", "0,1,2,3").Deleting(),
            running("a", "dgx", "4,5"),
            running("b", "dgx", "6,7"),
        ),
    )
    result = run(state, pending("six", 6))
    assert isinstance(result, Preemption)
    assert result.waiting_for == ("default/going",)
    assert len(result.victims) == 1  # one 2-GPU pod more is enough


def test_a_pod_that_fits_or_whose_gang_waits_is_no_preemptor() -> None:
    state = cluster(dgx(), running=(running("low", "dgx", "7"),))
    fits = preempt(state, unit_of(pending("small", 1)))
    assert fits == NoPreemption(pods=("default/small",), reason="it fits without evicting anything")
    waiting = preempt(state, unit_of(pending("g-0", 1).Gang("g", 2)))
    assert isinstance(waiting, NoPreemption)
    assert waiting.reason == "not a preemptor yet: gang default/g: 1 of 2 replicas present"


def test_kubernetes_filters_count_a_node_the_pod_cannot_use_is_no_candidate() -> None:
    state = cluster(
        dgx("a").Label("zone", "x"),
        dgx("b").Label("zone", "y"),
        running=(running("va", "a", "0,1,2,3,4,5,6,7"), running("vb", "b", "0,1,2,3,4,5,6,7")),
    )
    result = run(state, pending("picky", 8).NodeSelector("zone", "y"))
    assert victims(result) == ["default/vb"]


# ---- the order: fewest units, lowest priority, fewest GPUs beyond need, youngest --------------


def test_fewest_units_first_even_against_lower_priority_and_younger_victims() -> None:
    state = cluster(
        dgx("a"),
        dgx("b"),
        running=(
            running("one", "a", "0,1,2,3,4,5,6,7", priority=5, created="2020-01-01T00:00:00Z"),
            running("x", "b", "0,1,2,3", priority=0, created="2026-01-01T00:00:00Z"),
            running("y", "b", "4,5,6,7", priority=0, created="2026-01-01T00:00:00Z"),
        ),
    )
    assert victims(run(state, pending("big", 8))) == ["default/one"]


def test_a_gang_counts_as_one_unit_against_two_lone_pods() -> None:
    state = cluster(
        dgx("a"),
        dgx("b"),
        running=(
            running("g-0", "a", "0,1,2,3", priority=5).Gang("job", 2),
            running("g-1", "a", "4,5,6,7", priority=5).Gang("job", 2),
            running("x", "b", "0,1,2,3", priority=0),
            running("y", "b", "4,5,6,7", priority=0),
        ),
    )
    assert victims(run(state, pending("big", 8))) == ["default/g-0", "default/g-1"]


def test_then_lowest_priority_even_against_a_younger_victim() -> None:
    state = cluster(
        dgx("a"),
        dgx("b"),
        running=(
            running("young", "a", "0,1,2,3,4,5,6,7", priority=5, created="2026-06-01T00:00:00Z"),
            running("low", "b", "0,1,2,3,4,5,6,7", priority=1, created="2020-01-01T00:00:00Z"),
        ),
    )
    assert victims(run(state, pending("big", 8))) == ["default/low"]


def test_then_fewest_gpus_freed_beyond_the_need_even_against_a_younger_victim() -> None:
    state = cluster(
        dgx("a"),
        dgx("b"),
        running=(
            running("eight", "a", "0,1,2,3,4,5,6,7", created="2026-06-01T00:00:00Z"),
            running("four", "b", "0,1,2,3", created="2020-01-01T00:00:00Z"),
            running("keeper", "b", "4,5,6,7", priority=HIGH + 1),
        ),
    )
    result = run(state, pending("need-4", 4))
    assert victims(result) == ["default/four"]
    assert plan(result) == {"default/need-4": ("b", (0, 1, 2, 3))}


def test_then_the_youngest_even_against_node_name_order() -> None:
    state = cluster(
        dgx("a"),
        dgx("b"),
        running=(
            running("old", "a", "0,1,2,3,4,5,6,7", created="2026-01-01T00:00:00Z"),
            running("new", "b", "0,1,2,3,4,5,6,7", created="2026-06-01T00:00:00Z"),
        ),
    )
    result = run(state, pending("big", 8))
    assert victims(result) == ["default/new"]
    assert plan(result) == {"default/big": ("b", (0, 1, 2, 3, 4, 5, 6, 7))}


def test_on_one_node_the_lowest_priority_youngest_go_first_and_the_unneeded_stay() -> None:
    state = cluster(
        MakeNode().Name("n").Links(PCIE8),
        running=(
            running("p5-old", "n", "0,1", priority=5, created="2026-01-01T00:00:00Z"),
            running("p5-new", "n", "2,3", priority=5, created="2026-02-01T00:00:00Z"),
            running("p1", "n", "4,5", priority=1, created="2025-01-01T00:00:00Z"),
            running("keep", "n", "6,7", priority=HIGH),
        ),
    )
    assert victims(run(state, pending("four", 4))) == ["default/p1", "default/p5-new"]


# ---- shared GPUs -----------------------------------------------------------------------------


def shared_node() -> ClusterState:
    return cluster(
        MakeNode().Name("n").Links(PCIE8),
        running=(
            running("whole", "n", "0,1,2,3,4,5", priority=HIGH + 1),
            shared_tenant("s1", "n", 6, LOW, "2026-01-01T00:00:00Z"),
            shared_tenant("s2", "n", 6, LOW, "2026-01-02T00:00:00Z"),
            shared_tenant("s3", "n", 7, LOW, "2026-03-01T00:00:00Z"),
            shared_tenant("s4", "n", 7, LOW, "2026-03-02T00:00:00Z"),
            MakePod().Name("cpu").Requests(cpu="1").Priority(0).Bound("n"),
        ),
    )


def test_a_whole_gpu_preemptor_evicts_every_tenant_of_the_card_and_nothing_else() -> None:
    result = run(shared_node(), pending("one", 1))
    # Card 7's tenants are the younger pair; never one tenant alone, never the cpu pod.
    assert victims(result) == ["default/s3", "default/s4"]
    assert plan(result) == {"default/one": ("n", (7,))}


def test_two_whole_gpus_take_both_shared_cards_tenants_and_nothing_else() -> None:
    result = run(shared_node(), pending("two", 2))
    assert victims(result) == ["default/s1", "default/s2", "default/s3", "default/s4"]
    assert plan(result) == {"default/two": ("n", (6, 7))}
    assert isinstance(result, Preemption) and result.summary.endswith("frees 2 GPU(s)")


# ---- gang preemptors -------------------------------------------------------------------------


def test_a_gang_preemptor_across_two_nodes_evicts_what_both_nodes_need() -> None:
    state = cluster(
        dgx("a"),
        dgx("b"),
        dgx("c"),
        running=(
            running("va", "a", "0,1,2,3,4,5,6,7", priority=1),
            running("vb", "b", "1,2,3,4,5,6,7", priority=2),
            running("vb-one", "b", "0", priority=0),
            running("vc", "c", "0,1,2,3,4,5,6,7", priority=HIGH),
        ),
    )
    # Node b's GPUs are held by two pods: the gang's member there needs both gone.
    gang = [pending(f"t-{i}", 8).Gang("train", 2) for i in range(2)]
    result = run(state, *gang)
    assert victims(result) == ["default/va", "default/vb", "default/vb-one"]
    assert sorted(plan(result).values()) == [
        ("a", (0, 1, 2, 3, 4, 5, 6, 7)),
        ("b", (0, 1, 2, 3, 4, 5, 6, 7)),
    ]
    assert isinstance(result, Preemption)
    assert result.summary.startswith("gang default/train (priority 1000) preempts 3 pod(s)")


def test_a_gang_preemptor_keeps_the_victims_it_does_not_need() -> None:
    state = cluster(
        dgx("a"),
        dgx("b"),
        running=(
            running("a-low", "a", "0,1,2,3", priority=1),
            running("a-mid", "a", "4,5,6,7", priority=2),
            running("b-low", "b", "0,1,2,3", priority=1),
            running("b-mid", "b", "4,5,6,7", priority=3),
        ),
    )
    gang = [pending(f"t-{i}", 4).Gang("train", 2) for i in range(2)]
    assert victims(run(state, *gang)) == ["default/a-low", "default/b-low"]


def test_a_gang_that_cannot_fit_however_many_go_evicts_nothing() -> None:
    state = cluster(dgx(), running=(running("v", "dgx", "0,1,2,3,4,5,6,7"),))
    gang = [pending(f"t-{i}", 8).Gang("train", 2) for i in range(2)]
    result = run(state, *gang)
    assert isinstance(result, NoPreemption)
    assert result.reason == (
        f"evicting every pod of lower priority than {HIGH} would not make room"
    )


# ---- after the preemption --------------------------------------------------------------------


def test_the_plan_is_what_decide_chooses_once_the_victims_are_gone() -> None:
    state = cluster(
        dgx(),
        running=(
            running("w-0", "dgx", "0,1,2,3").Gang("job", 2),
            running("w-1", "dgx", "4,5,6,7").Gang("job", 2),
        ),
    )
    unit = unit_of(pending("big", 8))
    result = preempt(state, unit)
    assert isinstance(result, Preemption)
    for nomination in result.nominations:
        state.nominate(nomination)
    # A pod of lower priority arriving while the victims terminate and after they left.
    lower = unit_of(pending("sneak", 4, priority=HIGH - 1))
    for victim in result.victims:
        state.remove_pod(victim.pod)
    assert isinstance(decide(state, lower), Unschedulable)
    decision = decide(state, unit)
    assert isinstance(decision, Placed)
    assert decision.placements == result.placements
    apply_decision(state, decision, unit)
    assert state.nominations == {}


# ---- nominations and bounds ------------------------------------------------------------------


def test_another_preemptors_nomination_of_equal_priority_is_respected_a_higher_one_not() -> None:
    state = cluster(dgx(), running=(running("v", "dgx", "0,1,2,3,4,5,6,7"),))
    first = preempt(state, unit_of(pending("first", 8)))
    assert isinstance(first, Preemption) and victims(first) == ["default/v"]
    for nomination in first.nominations:
        state.nominate(nomination)
    # v is terminating now (evicted): its GPUs are held for "first".
    v = running("v", "dgx", "0,1,2,3,4,5,6,7").Deleting().Obj()
    assert state.add_bound_pod(v) is None
    second = run(state, pending("second", 8))
    assert isinstance(second, NoPreemption)
    assert second.reason == f"no running pod of lower priority than {HIGH} to evict"
    higher = run(state, pending("higher", 8, priority=HIGH + 1))
    assert isinstance(higher, Preemption)
    assert higher.victims == () and higher.waiting_for == ("default/v",)
    # The nominee itself waits for v, evicting nothing more.
    again = preempt(state, unit_of(pending("first", 8)))
    assert isinstance(again, Preemption) and again.victims == ()


def test_a_malformed_request_is_no_preemptor() -> None:
    state = cluster(dgx(), running=(running("v", "dgx", "0,1,2,3,4,5,6,7"),))
    result = preempt(state, unit_of(MakePod().Name("bad").Req("x").Priority(HIGH)))
    assert isinstance(result, NoPreemption)
    assert result.reason.startswith("not a preemptor: ")


def packed(n: int, created: bool) -> ClusterState:
    """n DGX nodes, each full with four 2-GPU pods of priority 0, 1 or 2 (and, if ``created``,
    node i's pods the younger the higher i)."""
    nodes = [dgx(f"n{i:03d}") for i in range(n)]
    pods = [
        running(
            f"p{i}-{j}",
            f"n{i:03d}",
            f"{2 * j},{2 * j + 1}",
            priority=(i + j) % 3,
            created=f"2026-01-01T{i // 60:02d}:{i % 60:02d}:00Z" if created else "",
        )
        for i in range(n)
        for j in range(4)
    ]
    state: ClusterState = cluster(*nodes, running=tuple(pods))
    return state


def count_decides(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = candidates.decide

    def counted(state: ClusterState, unit: Unit, within: frozenset[str] = frozenset()) -> object:
        calls[0] += 1
        return real(state, unit, within)

    monkeypatch.setattr(candidates, "decide", counted)
    return calls


def test_on_many_equal_nodes_the_search_stops_after_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = packed(300, created=False)
    calls = count_decides(monkeypatch)
    result = run(state, pending("big", 8))
    assert isinstance(result, Preemption) and len(result.victims) == 4
    # 300 candidates that tie on every key: max(100, 10%) of them are tried, one decide each
    # (the GPU counts refuse every shorter prefix without deciding).
    assert calls[0] == CoreSettings().preemption.min_candidate_nodes


def test_the_lower_bound_skips_nodes_that_cannot_beat_the_best(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = packed(300, created=True)
    calls = count_decides(monkeypatch)
    result = run(state, pending("big", 8))
    # Lowest priorities first ((2, 1, 0, 0) beats (2, 2, 1, 0) and (2, 1, 1, 0)), then the
    # youngest of those: node 297.
    assert victims(result) == [f"default/p297-{j}" for j in range(4)]
    assert calls[0] <= 3, calls
