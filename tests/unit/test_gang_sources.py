"""Gang sources (issue 14): each of PodGroup, Kueue, Volcano and Koordinator alone gives the
same gang as ACK's labels; sources that disagree keep the pod pending with both named; an
elastic gang places its minimum together and its surplus when capacity appears."""

from __future__ import annotations

import pytest

from scheduler.core.cycle import Unit, decide, gang_of
from scheduler.core.model import names
from scheduler.core.model.decisions import Placed, Unschedulable, Waiting
from scheduler.core.model.gangsources import GangError, resolve
from scheduler.core.model.objects import PodGroupInput
from scheduler.core.snapshot.cluster import ClusterState
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.topologies import DGX1_V100


def pod_group(name: str, min_member: int, timeout: int | None = None) -> PodGroupInput:
    return PodGroupInput(
        group=names.POD_GROUP_API,
        namespace="default",
        name=name,
        min_member=min_member,
        schedule_timeout_seconds=timeout,
    )


def volcano_group(name: str, min_member: int) -> PodGroupInput:
    return PodGroupInput(
        group=names.VOLCANO_POD_GROUP_API, namespace="default", name=name, min_member=min_member
    )


def worker(name: str, gpus: int = 2) -> MakePod:
    return MakePod().Name(name).Req(gpus)


def native(name: str, job: str, n: int) -> MakePod:
    return worker(name).Gang(job, n)


def with_pod_group(name: str, group: str) -> MakePod:
    return worker(name).Label(names.POD_GROUP_LABEL, group)


def with_kueue(name: str, group: str, n: int) -> MakePod:
    return (
        worker(name)
        .Label(names.KUEUE_GROUP_LABEL, group)
        .Annotation(names.KUEUE_TOTAL_ANNOTATION, str(n))
    )


def with_volcano(name: str, group: str) -> MakePod:
    return worker(name).Annotation(names.VOLCANO_GROUP_ANNOTATION, group)


def with_koordinator(name: str, group: str, minimum: int, total: int | None = None) -> MakePod:
    pod = (
        worker(name)
        .Annotation(names.KOORD_GANG_NAME_ANNOTATION, group)
        .Annotation(names.KOORD_GANG_MIN_ANNOTATION, str(minimum))
    )
    if total is not None:
        pod = pod.Annotation(names.KOORD_GANG_TOTAL_ANNOTATION, str(total))
    return pod


def two_dgx() -> ClusterState:
    state: ClusterState = cluster(
        MakeNode().Name("dgx-a").Links(DGX1_V100), MakeNode().Name("dgx-b").Links(DGX1_V100)
    )
    state.inputs.pod_groups.put(pod_group("job", 3))
    state.inputs.pod_groups.put(volcano_group("job", 3))
    return state


def placements(decision: object) -> dict[str, tuple[str, tuple[int, ...]]]:
    assert isinstance(decision, Placed), decision
    return {p.pod.split("/")[1]: (p.node, p.devices) for p in decision.placements}


MAKERS = {
    "gpu-topology": lambda name: native(name, "job", 3),
    "PodGroup": lambda name: with_pod_group(name, "job"),
    "Kueue": lambda name: with_kueue(name, "job", 3),
    "Volcano": lambda name: with_volcano(name, "job"),
    "Koordinator": lambda name: with_koordinator(name, "job", 3),
}


@pytest.mark.parametrize("source", sorted(MAKERS))
def test_each_source_alone_gives_the_native_gang(source: str) -> None:
    make = MAKERS[source]
    expected = schedule(two_dgx(), *(MAKERS["gpu-topology"](f"w{i}") for i in range(3)))
    got = schedule(two_dgx(), *(make(f"w{i}") for i in range(3)))
    assert [placements(d) for d in got] == [placements(d) for d in expected]
    (decision,) = got
    assert isinstance(decision, Placed)
    assert {p.gang for p in decision.placements} == {"default/job"}


@pytest.mark.parametrize("source", sorted(MAKERS))
def test_each_source_waits_for_its_missing_members(source: str) -> None:
    state = two_dgx()
    (decision,) = schedule(state, *(MAKERS[source](f"w{i}") for i in range(2)))
    assert isinstance(decision, Waiting), decision
    assert decision.reason.startswith("gang default/job: 2 of 3 ")
    assert state.nodes["dgx-a"].free_mask == 0xFF


def test_a_missing_pod_group_keeps_its_pods_waiting() -> None:
    state = cluster(MakeNode().Name("dgx-a").Links(DGX1_V100))
    (decision,) = schedule(state, with_pod_group("w0", "nowhere"))
    assert isinstance(decision, Waiting)
    assert "waiting for PodGroup default/nowhere (scheduling.x-k8s.io) to exist" in decision.reason


def test_two_sources_that_agree_are_one_gang() -> None:
    pods = [
        native(f"w{i}", "job", 3)
        .Label(names.KUEUE_GROUP_LABEL, "job")
        .Annotation(names.KUEUE_TOTAL_ANNOTATION, "3")
        for i in range(3)
    ]
    (decision,) = schedule(two_dgx(), *pods)
    assert isinstance(decision, Placed)
    assert len(decision.placements) == 3


def test_two_sources_that_disagree_on_the_size_keep_the_pod_pending_naming_both() -> None:
    pod = (
        native("w0", "job", 4)
        .Label(names.KUEUE_GROUP_LABEL, "job")
        .Annotation(names.KUEUE_TOTAL_ANNOTATION, "2")
        .Obj()
    )
    state = two_dgx()
    decision = decide(state, Unit(gang_of(pod), (pod,)))
    assert isinstance(decision, Unschedulable)
    assert decision.reason == (
        "gang default/job: pod default/w0: gang sources disagree on the gang's size: label "
        "gpu-topology=job with gpu-topology-replica=4; label kueue.x-k8s.io/pod-group-name=job "
        "with kueue.x-k8s.io/pod-group-total-count=2"
    )


def test_a_pod_group_whose_min_member_disagrees_with_the_labels_is_named() -> None:
    pod = native("w0", "job", 2).Label(names.POD_GROUP_LABEL, "job").Obj()
    state = two_dgx()  # PodGroup job: minMember 3
    decision = decide(state, Unit(gang_of(pod), (pod,)))
    assert isinstance(decision, Unschedulable)
    assert "gpu-topology-replica=2" in decision.reason
    assert "PodGroup job with minMember 3" in decision.reason


def test_two_sources_naming_different_gangs_are_refused() -> None:
    pod = native("w0", "a", 1).Annotation(names.VOLCANO_GROUP_ANNOTATION, "b").Obj()
    with pytest.raises(GangError, match="gang sources name different gangs"):
        resolve(pod, {})


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (
            MakePod().Name("p").Label(names.KUEUE_GROUP_LABEL, "g"),
            "label kueue.x-k8s.io/pod-group-name=g needs annotation "
            "kueue.x-k8s.io/pod-group-total-count",
        ),
        (
            MakePod()
            .Name("p")
            .Label(names.KUEUE_GROUP_LABEL, "g")
            .Annotation(names.KUEUE_TOTAL_ANNOTATION, "many"),
            "annotation kueue.x-k8s.io/pod-group-total-count: 'many' must be a positive integer",
        ),
        (
            MakePod().Name("p").Annotation(names.KOORD_GANG_NAME_ANNOTATION, "g"),
            "needs annotation gang.scheduling.koordinator.sh/min-available",
        ),
        (
            with_koordinator("p", "g", 3, 2),
            "gang.scheduling.koordinator.sh/total-number: 2 is below",
        ),
        (MakePod().Name("p").Label(names.POD_GROUP_LABEL, ""), "pod-group is empty"),
        (
            MakePod().Name("p").Gang("g", "1000000"),
            "gpu-topology-replica: '1000000' must be a positive integer (at most 100000)",
        ),
    ],
)
def test_malformed_sources_name_the_pod_and_field(pod: MakePod, message: str) -> None:
    with pytest.raises(GangError, match="pod default/p: ") as info:
        resolve(pod.Obj(), {})
    assert message in str(info.value)


# ---- elastic gangs --------------------------------------------------------------------------


def test_elastic_gang_places_its_minimum_together_and_leaves_the_surplus_pending() -> None:
    # One DGX-1 with 4 GPUs free; PodGroup minMember 2 of 3 pods of 2 GPUs each.
    state = cluster(
        MakeNode().Name("dgx-a").Links(DGX1_V100),
        running=(MakePod().Name("other").Req(4).Bound("dgx-a", "4,5,6,7"),),
    )
    state.inputs.pod_groups.put(pod_group("job", 2))
    (decision,) = schedule(state, *(with_pod_group(f"w{i}", "job") for i in range(3)))
    assert isinstance(decision, Placed)
    assert sorted(placements(decision)) == ["w0", "w1"]  # the smallest, then by name
    assert decision.waiting == ("default/w2",)
    assert "1 member(s) beyond its minimum of 2 wait for capacity" in decision.reason
    assert state.nodes["dgx-a"].free_mask == 0  # the minimum is applied


def test_elastic_gang_below_its_minimum_places_nothing() -> None:
    state = cluster(
        MakeNode().Name("dgx-a").Links(DGX1_V100),
        running=(MakePod().Name("other").Req(6).Bound("dgx-a", "2,3,4,5,6,7"),),
    )
    state.inputs.pod_groups.put(pod_group("job", 2))
    (decision,) = schedule(state, *(with_pod_group(f"w{i}", "job") for i in range(3)))
    assert isinstance(decision, Unschedulable)
    assert "nor the 2 its minimum needs" in decision.reason
    assert state.nodes["dgx-a"].free_mask == 0b11


def test_surplus_member_binds_when_capacity_appears_next_to_its_siblings() -> None:
    state = cluster(
        MakeNode().Name("dgx-a").Links(DGX1_V100),
        MakeNode().Name("dgx-b").Links(DGX1_V100),
        running=(
            MakePod().Name("a-rest").Req(4).Bound("dgx-a", "4,5,6,7"),
            MakePod().Name("b-six").Req(6).Bound("dgx-b", "0,1,2,3,4,5"),
            MakePod().Name("b-two").Req(2).Bound("dgx-b", "6,7"),
        ),
    )
    state.inputs.pod_groups.put(pod_group("job", 2))
    (first,) = schedule(state, *(with_pod_group(f"w{i}", "job") for i in range(3)))
    assert isinstance(first, Placed) and first.waiting == ("default/w2",)
    assert {node for node, _ in placements(first).values()} == {"dgx-a"}
    # Capacity appears on both nodes: an NVLink pair on each. Alone, rule 2 would take dgx-b
    # (the fuller node); the surplus member goes next to its siblings instead.
    state.remove_pod("default/a-rest")
    state.remove_pod("default/b-two")
    lone = decide(state, Unit(None, (worker("lone").Obj(),)))
    assert placements(lone)["lone"][0] == "dgx-b"
    (second,) = schedule(state, with_pod_group("w2", "job"))
    assert placements(second)["w2"][0] == "dgx-a"


def test_surplus_member_that_fits_nowhere_is_not_a_gang_failure() -> None:
    state = cluster(
        MakeNode().Name("dgx-a").Links(DGX1_V100),
        running=(MakePod().Name("other").Req(4).Bound("dgx-a", "4,5,6,7"),),
    )
    state.inputs.pod_groups.put(pod_group("job", 2))
    schedule(state, *(with_pod_group(f"w{i}", "job") for i in range(2)))
    (decision,) = schedule(state, with_pod_group("w2", "job"))
    assert isinstance(decision, Unschedulable)
    assert decision.reason.startswith(
        "gang default/job: 1 member(s) beyond its minimum of 2 wait for capacity (not a gang "
        "failure); 0/1 nodes are available"
    )


def test_koordinator_min_available_below_total_is_elastic() -> None:
    state = cluster(
        MakeNode().Name("dgx-a").Links(DGX1_V100),
        running=(MakePod().Name("other").Req(4).Bound("dgx-a", "4,5,6,7"),),
    )
    pods = [with_koordinator(f"w{i}", "job", 2, 3) for i in range(3)]
    (decision,) = schedule(state, *pods)
    assert isinstance(decision, Placed)
    assert len(decision.placements) == 2 and decision.waiting == ("default/w2",)


def test_more_members_than_the_total_wait() -> None:
    state = two_dgx()
    pods = [with_koordinator(f"w{i}", "job", 2, 2) for i in range(3)]
    (decision,) = schedule(state, *pods)
    assert isinstance(decision, Waiting)
    assert decision.reason == "gang default/job: 3 members present but the gang's size says 2"


def test_pod_group_timeout_is_the_gangs_own() -> None:
    from scheduler.core.cycle import gang_timeout

    state = two_dgx()
    state.inputs.pod_groups.put(pod_group("job", 3, timeout=30))
    pod = with_pod_group("w0", "job").Obj()
    assert gang_timeout(state, Unit("default/job", (pod,))) == 30
    assert gang_timeout(state, Unit("default/job", (native("n", "x", 2).Obj(),))) is None
