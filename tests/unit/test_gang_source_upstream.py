"""The sixth gang source: the upstream Workload API's PodGroup (scheduling.k8s.io/v1beta1,
Kubernetes v1.37), named by a pod's spec.schedulingGroup.podGroupName. Alone it gives the same
gang as ACK's labels; its minCount is the minimum; a source that disagrees keeps the pod pending
with both named; a missing PodGroup keeps its pods waiting; its topology keys join the gang's
cross-node topology constraint."""

from __future__ import annotations

from msgspec.structs import replace

from scheduler.core.cycle import Unit, decide, gang_of
from scheduler.core.model import names
from scheduler.core.model.decisions import Placed, Unschedulable, Waiting
from scheduler.core.model.gangsources import resolve
from scheduler.core.model.objects import PodGroupInput, PodInput, TopologyLevel
from scheduler.core.settings import CoreSettings, TopologySettings
from scheduler.core.snapshot.cluster import ClusterState
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
    state.inputs.pod_groups.put(upstream_group("job", 3))
    return state


def test_an_upstream_pod_group_alone_gives_the_native_gang() -> None:
    native = schedule(two_dgx(), *(MakePod().Name(f"w{i}").Req(2).Gang("job", 3) for i in range(3)))
    (decision,) = schedule(two_dgx(), *(member(f"w{i}") for i in range(3)))
    assert isinstance(decision, Placed) and isinstance(native[0], Placed)
    got = {p.pod: (p.node, p.devices) for p in decision.placements}
    assert got == {p.pod: (p.node, p.devices) for p in native[0].placements}
    assert {p.gang for p in decision.placements} == {"default/job"}


def test_its_min_count_is_the_minimum() -> None:
    state = two_dgx()
    gang = resolve(member("w0"), state.inputs.pod_groups)
    assert gang is not None and gang.minimum == 3
    assert gang.sources == ("schedulingGroup",)
    (waiting,) = schedule(two_dgx(), member("w0"), member("w1"))
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
    state.inputs.pod_groups.put(upstream_group("job", 0))
    decision = decide(state, Unit(gang_of(member("w0")), (member("w0"),)))
    assert isinstance(decision, Unschedulable)
    assert "PodGroup default/job: spec.schedulingPolicy.gang.minCount 0 must be between" in (
        decision.reason
    )


def test_its_topology_key_joins_the_cross_node_topology_constraints() -> None:
    # Two racks of two 4-GPU nodes in one block; the rack level is configured by its label key.
    rack = "cloud.provider.com/topology-rack"
    levels = (TopologyLevel(rack, "rack"),)
    state = ClusterState(CoreSettings(topology=TopologySettings(levels=levels)))
    for name, value in (("a-0", "r1"), ("b-0", "r2"), ("b-1", "r2")):
        assert state.set_node(MakeNode().Name(name).GPUs(4).Label(rack, value).Obj()) is None
    state.inputs.pod_groups.put(upstream_group("job", 2, (rack,)))
    pods = tuple(member(f"w{i}", pod=MakePod().Name(f"w{i}").Req(4)) for i in range(2))
    decision = decide(state, Unit("default/job", pods))
    assert isinstance(decision, Placed)
    assert {p.node for p in decision.placements} == {"b-0", "b-1"}  # one rack, not a-0
    # A level the hierarchy does not have keeps the gang pending, naming the field.
    state.inputs.pod_groups.put(upstream_group("job", 2, ("example.com/nowhere",)))
    refused = decide(state, Unit("default/job", pods))
    assert not isinstance(refused, Placed)
    assert "spec.schedulingConstraints.topology[0].key=example.com/nowhere" in refused.reason
