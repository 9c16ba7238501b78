"""Issue 30, timeline 5, in the core: a terminating gang member (deletionTimestamp set) still holds
its GPUs in the snapshot but is not one of its gang's bound members, for every gang source.

A restarted gang (a JobSet or Kubeflow restart: the pods deleted, new ones created under new
names, the same PodGroup) is planned whole again, all or nothing. Before the fix the snapshot
counted the terminating members as bound: a PodGroup gang's new members were "surplus" and bound
one at a time (a partial gang holding GPUs), and a gang with a total (labels, Kueue, Koordinator)
waited with "4 members present" until the old members were gone. The snapshot is stepped by hand
(``add_bound_pod`` as the bound watch feeds it, ``remove_pod`` when a pod is gone).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from msgspec.structs import replace

from scheduler.core.cycle import Unit, assume, decide
from scheduler.core.model import names
from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.model.gangsources import group_minimum
from scheduler.core.model.objects import PodGroupInput, PodInput
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.holdings import Holding
from tests.builders import MakeNode, MakePod, cluster, schedule

JOB = "default/job"


def pod_group(api: str, minimum: int = 2) -> PodGroupInput:
    return PodGroupInput(group=api, namespace="default", name="job", min_member=minimum)


def _worker(name: str) -> MakePod:
    return MakePod().Name(name).Req(1)


# Each gang source: how a member of gang default/job (minimum 2, and a total of 2 where the
# source says one) is written, and the PodGroup it needs, if any.
SOURCES: dict[str, tuple[Callable[[str], MakePod | PodInput], PodGroupInput | None]] = {
    "labels": (lambda n: _worker(n).Gang("job", 2), None),
    "scheduler-plugins PodGroup": (
        lambda n: _worker(n).Label(names.POD_GROUP_LABEL, "job"),
        pod_group(names.POD_GROUP_API),
    ),
    "Kueue": (
        lambda n: (
            _worker(n)
            .Label(names.KUEUE_GROUP_LABEL, "job")
            .Annotation(names.KUEUE_TOTAL_ANNOTATION, "2")
        ),
        None,
    ),
    "Volcano": (
        lambda n: _worker(n).Annotation(names.VOLCANO_GROUP_ANNOTATION, "job"),
        pod_group(names.VOLCANO_POD_GROUP_API),
    ),
    "Koordinator": (
        lambda n: (
            _worker(n)
            .Annotation(names.KOORD_GANG_NAME_ANNOTATION, "job")
            .Annotation(names.KOORD_GANG_MIN_ANNOTATION, "2")
            .Annotation(names.KOORD_GANG_TOTAL_ANNOTATION, "2")
        ),
        None,
    ),
    "upstream PodGroup": (
        lambda n: replace(_worker(n).Obj(), scheduling_group="job"),
        pod_group(names.UPSTREAM_POD_GROUP_API),
    ),
}


def obj(pod: MakePod | PodInput) -> PodInput:
    return pod.Obj() if isinstance(pod, MakePod) else pod


def bound(pod: MakePod | PodInput, devices: str) -> PodInput:
    return replace(
        obj(pod),
        node_name="n",
        phase="Running",
        annotations={**obj(pod).annotations, names.DEVICES_ANNOTATION: devices},
    )


def running_gang(source: str, gpus: int) -> tuple[ClusterState, list[PodInput]]:
    """Node n with ``gpus`` GPUs and the gang's first members job-a0 and job-a1 running on GPUs
    0 and 1."""
    member, group = SOURCES[source]
    state: ClusterState = cluster(MakeNode().Name("n").GPUs(gpus))
    if group is not None:
        state.inputs.pod_groups.put(group)
    old = [bound(member("job-a0"), "0"), bound(member("job-a1"), "1")]
    for pod in old:
        assert state.add_bound_pod(pod) is None
    assert state.gang_bound == {JOB: {"default/job-a0", "default/job-a1"}}
    return state, old


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_restarted_gang_is_planned_whole_while_its_old_members_terminate(source: str) -> None:
    """The issue's timeline: minimum 2, the old members still terminating, one GPU free. Before
    the fix a PodGroup gang bound job-b0 alone and job-b1 waited "beyond its minimum"."""
    member, _ = SOURCES[source]
    state, old = running_gang(source, gpus=3)
    for pod in old:  # the restart: both deleted, their containers still stopping
        assert state.add_bound_pod(replace(pod, deleting=True)) is None
    # They hold their GPUs until they are gone.
    assert state.nodes["n"].free_mask == 0b100
    # The new members: the whole minimum is missing, and one GPU is free: nothing is placed.
    (decision,) = schedule(state, member("job-b0"), member("job-b1"))
    assert isinstance(decision, Unschedulable), decision
    assert "beyond its minimum" not in decision.reason
    assert "members present" not in decision.reason
    assert set(state.holdings) == {"default/job-a0", "default/job-a1"}
    # The gang has no bound member left; the old ones are held as terminating.
    assert state.gang_bound == {}
    assert all(h.terminating for h in state.holdings.values())
    # The old members are gone: the new ones are placed together.
    for pod in old:
        state.remove_pod(pod.key)
    (decision,) = schedule(state, member("job-b0"), member("job-b1"))
    assert isinstance(decision, Placed) and decision.waiting == ()
    assert sorted(p.pod for p in decision.placements) == ["default/job-b0", "default/job-b1"]
    assert state.gang_bound == {JOB: {"default/job-b0", "default/job-b1"}}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_replacement_member_is_the_missing_part_of_the_minimum(source: str) -> None:
    """One member deleted and replaced under a new name (a worker restart): the replacement is
    planned as the one member the minimum still needs, next to its running sibling, while the
    old one still holds its GPU."""
    member, _ = SOURCES[source]
    state, old = running_gang(source, gpus=3)
    assert state.add_bound_pod(replace(old[1], deleting=True)) is None
    (decision,) = schedule(state, member("job-a2"))
    assert isinstance(decision, Placed) and decision.waiting == ()
    ((pod, node, devices),) = [(p.pod, p.node, p.devices) for p in decision.placements]
    assert (pod, node, devices) == ("default/job-a2", "n", (2,))  # GPU 1 is still held
    assert state.gang_bound == {JOB: {"default/job-a0", "default/job-a2"}}


def test_an_elastic_gang_whose_minimum_terminates_plans_that_minimum_again() -> None:
    """PodGroup minMember 3 of 4 members; three are deleted and the surplus one survives: it is
    one bound member, so two of the three replacements are the minimum's missing part, all or
    nothing. One GPU is free: nothing is placed (before the fix the four members counted as
    bound, and job-b0 was bound alone as surplus)."""
    member, _ = SOURCES["scheduler-plugins PodGroup"]
    state: ClusterState = cluster(MakeNode().Name("n").GPUs(5))
    state.inputs.pod_groups.put(pod_group(names.POD_GROUP_API, minimum=3))
    old = [bound(member(f"job-a{i}"), str(i)) for i in range(4)]
    for pod in old:
        assert state.add_bound_pod(pod) is None
    for pod in old[:3]:
        assert state.add_bound_pod(replace(pod, deleting=True)) is None
    (decision,) = schedule(state, *(member(f"job-b{i}") for i in range(3)))
    assert isinstance(decision, Unschedulable), decision
    assert "nor the 2 its minimum needs" in decision.reason
    assert state.nodes["n"].free_mask == 0b10000
    assert state.gang_bound == {JOB: {"default/job-a3"}}


def _decided_in_flight() -> tuple[
    Callable[[str], MakePod | PodInput], ClusterState, dict[str, PodInput]
]:
    """A PodGroup gang of minMember 3 on a node of 4 GPUs, decided (job-a0..a2) and assumed as
    run's cycle assumes it, its Bindings to come: the member maker, the state, the pods."""
    member, _ = SOURCES["scheduler-plugins PodGroup"]
    state: ClusterState = cluster(MakeNode().Name("n").GPUs(4))
    state.inputs.pod_groups.put(pod_group(names.POD_GROUP_API, minimum=3))
    old = [obj(member(f"job-a{i}")) for i in range(3)]
    decision = decide(state, Unit("default/job", tuple(old)))
    assert isinstance(decision, Placed) and len(decision.placements) == 3
    pods = {p.key: p for p in old}
    for placement in decision.placements:  # as run's cycle assumes them, Bindings to come
        assume(state, placement, pods[placement.pod])
    return member, state, pods


def test_no_surplus_is_placed_beside_members_whose_bindings_are_in_flight() -> None:
    """Sim seed 11505: PodGroup minMember 3. The gang was decided (job-a0..a2 assumed, their
    Bindings in flight) and restarted at once: its pods deleted, job-b0..b2 created under the
    same PodGroup, before the Bindings were answered (an etcd stall). Counted as bound, the
    assumed members met the minimum and job-b0 was bound alone as surplus on the one free
    GPU; the Bindings then failed (the pods were gone) and the gang stayed 1 of 3 for good.
    Until the bound watch shows them, the new members are the minimum's part: all or none."""
    member, state, _ = _decided_in_flight()
    assert not any(h.shown for h in state.holdings.values())
    new = [member(f"job-b{i}") for i in range(3)]
    (decision,) = schedule(state, *new)
    assert isinstance(decision, Unschedulable), decision
    assert state.nodes["n"].free_mask == 0b1000
    # The Bindings landed: the bound watch shows the old members, the minimum is met, and a
    # new member is surplus, placed where it fits.
    for key, held in sorted(state.holdings.items()):
        shown = bound(member(key.split("/")[1]), str(held.whole.bit_length() - 1))
        assert state.add_bound_pod(shown) is None
    assert all(h.shown for h in state.holdings.values())
    (decision,) = schedule(state, *new)
    assert isinstance(decision, Placed), decision
    assert [p.pod for p in decision.placements] == ["default/job-b0"]


def test_members_in_flight_below_the_minimum_leave_the_new_members_all_or_none() -> None:
    """Sim seed 28372: PodGroup minMember 3. Two members of an earlier incarnation of the gang
    are assumed, their Bindings in flight (their pods removed meanwhile, by an etcd restore),
    and three new members are pending with 2 GPUs free. Counted as bound, the two left one
    new member as the minimum's part and the others surplus: two were placed, the third
    waited, and with the old Bindings failed the gang stood 2 of 3 bound. Until the bound
    watch shows them, the new members are the part not shown: all three or none."""
    member, state, pods = _decided_in_flight()
    state.forget("default/job-a2")  # its Binding refused: two left in flight
    del pods["default/job-a2"]
    new = [member(f"job-b{i}") for i in range(3)]
    (decision,) = schedule(state, *new)
    assert isinstance(decision, Unschedulable), decision
    assert state.nodes["n"].free_mask.bit_count() == 2
    # The old Bindings failed (their pods are gone): the three fit together now.
    for placement_pod in sorted(pods):
        state.forget(placement_pod)
    (decision,) = schedule(state, *new)
    assert isinstance(decision, Placed) and len(decision.placements) == 3


def test_a_terminating_holding_joins_no_gang_and_leaves_nothing_in_a_tentative_scope() -> None:
    state: ClusterState = cluster(MakeNode().Name("n").GPUs(2))
    with state.tentative():
        state.hold(Holding("default/a", "n", 0b1, gang=JOB, replicas=2, terminating=True))
        state.hold(Holding("default/b", "n", 0b10, gang=JOB, replicas=2))
        assert state.gang_bound == {JOB: {"default/b"}}
        assert state.nodes["n"].free_mask == 0
    assert state.gang_bound == {} and state.holdings == {}
    assert state.sizes()["gang_bound_pods"] == 0


def test_a_surplus_member_goes_next_to_a_running_sibling_not_a_terminating_one() -> None:
    """An elastic gang's surplus member is placed on its siblings' nodes first: those of the
    members that stay. Alone it would take dgx-a (the fuller node, rule 2), where a member that
    is being deleted still holds its GPUs; it goes to dgx-b, next to the running member."""
    member, _ = SOURCES["scheduler-plugins PodGroup"]
    state: ClusterState = cluster(
        MakeNode().Name("dgx-a").GPUs(8), MakeNode().Name("dgx-b").GPUs(8)
    )
    state.inputs.pod_groups.put(pod_group(names.POD_GROUP_API, minimum=1))
    stays = replace(bound(member("job-a0"), "0,1"), node_name="dgx-b")
    going = replace(bound(member("job-a1"), "0,1,2,3"), node_name="dgx-a", deleting=True)
    other = MakePod().Name("other").Req(2).Bound("dgx-a", "4,5")
    for pod in (stays, going, other.Obj()):
        assert state.add_bound_pod(pod) is None
    (decision,) = schedule(state, _worker("job-b0").Label(names.POD_GROUP_LABEL, "job"))
    assert isinstance(decision, Placed), decision
    assert [(p.pod, p.node) for p in decision.placements] == [("default/job-b0", "dgx-b")]


GROUP_SOURCES = sorted(s for s, (_, group) in SOURCES.items() if group is not None)


@pytest.mark.parametrize("source", GROUP_SOURCES)
def test_a_pod_group_lowered_under_bound_members_sizes_them_too(source: str) -> None:
    """Soak seed 5963: a gang of 3 whose size a PodGroup holds has two members bound (job-a0,
    job-a1, charged with minimum 3) and job-a2's Binding failed. The job is scaled down: job-a1
    deleted, the PodGroup's minimum lowered to 2 (the upstream one replaced with the new
    minCount). Before the fix job-a0's holding kept minimum 3 against job-a2's 2, and the gang
    waited for good ("members disagree on the gang's size (2, 3)") beside free GPUs, below its
    new minimum; it is the missing part of it now, and stale-gang and preemption read the same
    minimum (``group_minimum``)."""
    member, group = SOURCES[source]
    assert group is not None
    state: ClusterState = cluster(MakeNode().Name("n").GPUs(3))
    state.inputs.pod_groups.put(replace(group, min_member=3))
    for name, gpu in (("job-a0", "0"), ("job-a1", "1")):
        assert state.add_bound_pod(bound(member(name), gpu)) is None
    assert {h.replicas for h in state.holdings.values()} == {3}
    state.remove_pod("default/job-a1")  # scaled down
    if source == "upstream PodGroup":  # replaced by its controller: a new UID
        state.inputs.pod_groups.event("DELETED", replace(group, min_member=3))
    state.inputs.pod_groups.put(replace(group, min_member=2))
    assert group_minimum(JOB, state.inputs.pod_groups) == 2
    (decision,) = schedule(state, member("job-a2"))
    assert isinstance(decision, Placed) and decision.waiting == (), decision
    assert [(p.pod, p.node) for p in decision.placements] == [("default/job-a2", "n")]
    assert state.gang_bound == {JOB: {"default/job-a0", "default/job-a2"}}


def test_a_gang_sized_by_labels_keeps_its_bound_members_minimum() -> None:
    """Without a PodGroup, a bound member's size is its own labels' (changed in its event):
    a pending member that says another size waits, naming both."""
    state: ClusterState = cluster(MakeNode().Name("n").GPUs(3))
    assert state.add_bound_pod(bound(_worker("job-a0").Gang("job", 3), "0")) is None
    assert group_minimum(JOB, state.inputs.pod_groups) == 0
    (decision,) = schedule(state, _worker("job-a2").Gang("job", 2))
    assert not isinstance(decision, Placed)
    assert "members disagree on gpu-topology-replica (2, 3)" in decision.reason
