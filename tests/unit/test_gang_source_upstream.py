"""The sixth gang source: the upstream Workload API's PodGroup (scheduling.k8s.io/v1beta1,
Kubernetes v1.37), named by a pod's spec.schedulingGroup.podGroupName. Alone it gives the same
gang as ACK's labels; its minCount is the minimum; a source that disagrees keeps the pod pending
with both named; a missing PodGroup keeps its pods waiting; its topology keys are recorded in
the gang."""

from __future__ import annotations

from msgspec.structs import replace

from scheduler.core import names
from scheduler.core.cluster import ClusterState
from scheduler.core.cycle import Unit, decide, gang_of
from scheduler.core.decisions import Placed, Unschedulable, Waiting
from scheduler.core.gangsources import resolve
from scheduler.core.objects import PodGroupInput, PodInput
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.topologies import DGX1_V100


def upstream_group(name: str, min_count: int, keys: tuple[str, ...] = ()) -> PodGroupInput:
    return PodGroupInput(
        group=names.UPSTREAM_POD_GROUP_API,
        namespace="default",
        name=name,
        min_member=min_count,
        topology_keys=keys,
    )


def member(name: str, group: str = "job", pod: MakePod | None = None) -> PodInput:
    return replace((pod or MakePod().Name(name).Req(2)).Obj(), scheduling_group=group)


def two_dgx() -> ClusterState:
    state: ClusterState = cluster(
        MakeNode().Name("dgx-a").Links(DGX1_V100), MakeNode().Name("dgx-b").Links(DGX1_V100)
    )
    state.set_pod_group(upstream_group("job", 3, ("topology.kubernetes.io/zone",)))
    return state


def test_an_upstream_pod_group_alone_gives_the_native_gang() -> None:
    native = schedule(two_dgx(), *(MakePod().Name(f"w{i}").Req(2).Gang("job", 3) for i in range(3)))
    (decision,) = schedule(two_dgx(), *(member(f"w{i}") for i in range(3)))
    assert isinstance(decision, Placed) and isinstance(native[0], Placed)
    got = {p.pod: (p.node, p.devices) for p in decision.placements}
    assert got == {p.pod: (p.node, p.devices) for p in native[0].placements}
    assert {p.gang for p in decision.placements} == {"default/job"}


def test_its_min_count_is_the_minimum_and_the_gang_keeps_its_topology_keys() -> None:
    state = two_dgx()
    gang = resolve(member("w0"), state.pod_groups)
    assert gang is not None and gang.minimum == 3
    assert gang.sources == ("schedulingGroup",)
    assert gang.topology_keys == ("topology.kubernetes.io/zone",)
    (waiting,) = schedule(state, member("w0"), member("w1"))
    assert isinstance(waiting, Waiting) and waiting.reason.startswith("gang default/job: 2 of 3 ")


def test_a_missing_upstream_pod_group_keeps_its_pods_waiting() -> None:
    state = cluster(MakeNode().Name("dgx-a").Links(DGX1_V100))
    (decision,) = schedule(state, member("w0", "nowhere"))
    assert isinstance(decision, Waiting)
    assert "waiting for PodGroup default/nowhere (scheduling.k8s.io) to exist" in decision.reason


def test_a_source_that_disagrees_with_min_count_is_named_with_it() -> None:
    pod = member("w0", pod=MakePod().Name("w0").Req(2).Gang("job", 2))
    decision = decide(two_dgx(), Unit(gang_of(pod), (pod,)))
    assert isinstance(decision, Unschedulable)
    assert decision.reason == (
        "gang default/job: pod default/w0: gang sources disagree on the gang's size: label "
        "gpu-topology=job with gpu-topology-replica=2; "
        "spec.schedulingGroup.podGroupName=job with minCount 3"
    )


def test_a_min_count_out_of_bounds_names_the_field() -> None:
    state = two_dgx()
    state.set_pod_group(upstream_group("job", 0))
    decision = decide(state, Unit(gang_of(member("w0")), (member("w0"),)))
    assert isinstance(decision, Unschedulable)
    assert "PodGroup default/job: spec.schedulingPolicy.gang.minCount 0 must be between" in (
        decision.reason
    )
