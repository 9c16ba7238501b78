"""Volumes, scheduling gates, priority order, gangs under the Kubernetes filters, and the scoped
tentative transaction, stepped by hand through the core."""

from __future__ import annotations

from scheduler.core.cycle import schedule_in_order
from scheduler.core.model.decisions import Placed, Unschedulable, Waiting
from scheduler.core.model.objects import ClaimInput, NodeSelectorTerm, Requirement, VolumeInput
from tests.builders import MakeNode, MakePod, cluster, schedule


def zone_node(name: str, zone: str, gpus: int = 8) -> MakeNode:
    return (
        MakeNode()
        .Name(name)
        .GPUs(gpus)
        .Label("topology.kubernetes.io/zone", zone)
        .Label("kubernetes.io/hostname", name)
    )


def zonal_volume(name: str, zone: str) -> VolumeInput:
    term = NodeSelectorTerm(
        match_expressions=(Requirement("topology.kubernetes.io/zone", "In", (zone,)),)
    )
    return VolumeInput(name, (term,))


def test_a_bound_claim_restricts_the_pod_to_its_volumes_nodes() -> None:
    state = cluster(zone_node("a", "z1"), zone_node("b", "z2"))
    state.inputs.volumes.put(zonal_volume("pv-1", "z2"))
    state.inputs.claims.put(ClaimInput("default", "data", volume_name="pv-1", phase="Bound"))
    (decision,) = schedule(state, MakePod().Name("p").Req(1).Claim("data"))
    assert isinstance(decision, Placed) and decision.placements[0].node == "b"


def test_a_volume_of_the_wrong_zone_reads_like_kube_scheduler() -> None:
    state = cluster(zone_node("a", "z1"))
    state.inputs.volumes.put(zonal_volume("pv-1", "z2"))
    state.inputs.claims.put(ClaimInput("default", "data", volume_name="pv-1", phase="Bound"))
    (decision,) = schedule(state, MakePod().Name("p").Req(1).Claim("data"))
    assert decision.reason == (
        "0/1 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity."
    )


def test_an_unbound_or_missing_claim_is_never_bound_blindly() -> None:
    state = cluster(zone_node("a", "z1"))
    state.inputs.claims.put(ClaimInput("default", "scratch"))
    unbound, missing = schedule(
        state,
        MakePod().Name("p").Req(1).Claim("scratch"),
        MakePod().Name("q").Req(1).Claim("nowhere"),
    )
    assert isinstance(unbound, Unschedulable)
    assert unbound.reason.startswith(
        "0/1 nodes are available: unbound PersistentVolumeClaim default/scratch is not "
        "supported by topo-scheduler"
    )
    assert missing.reason == '0/1 nodes are available: persistentvolumeclaim "nowhere" not found.'


def test_gated_pods_get_no_attempt_and_hold_nothing() -> None:
    state = cluster(zone_node("a", "z1", gpus=1))
    gated = MakePod().Name("gated").Req(1).Gate("kueue.x-k8s.io/admission").Obj()
    free = MakePod().Name("free").Req(1).Obj()
    decisions = schedule_in_order(state, [gated, free])
    assert decisions[0] == Waiting(
        ("default/gated",), "waiting for scheduling gates: kueue.x-k8s.io/admission"
    )
    assert isinstance(decisions[1], Placed) and decisions[1].placements[0].pod == "default/free"


def test_higher_priority_goes_first_in_a_backlog() -> None:
    state = cluster(zone_node("a", "z1", gpus=1))
    low = MakePod().Name("low").Req(1).Priority(10)
    high = MakePod().Name("high").Req(1).Priority(1000)
    low_decision, high_decision = [
        d for d in schedule(state, low, high) if isinstance(d, Placed | Unschedulable)
    ]
    assert isinstance(low_decision, Placed) and low_decision.placements[0].pod == "default/high"
    assert high_decision.pods == ("default/low",)


def test_a_gang_with_one_replica_per_node_gets_one_per_node() -> None:
    state = cluster(zone_node("a", "z1"), zone_node("b", "z1"), zone_node("c", "z1"))
    members = [
        MakePod()
        .Name(f"w-{i}")
        .Req(2)
        .Gang("job", 3)
        .Label("job", "job")
        .PodAntiAffinity("kubernetes.io/hostname", job="job")
        for i in range(3)
    ]
    (decision,) = schedule(state, *members)
    assert isinstance(decision, Placed)
    assert sorted(p.node for p in decision.placements) == ["a", "b", "c"]


def test_a_gang_that_needs_more_nodes_than_exist_for_its_anti_affinity_waits() -> None:
    state = cluster(zone_node("a", "z1"))
    members = [
        MakePod()
        .Name(f"w-{i}")
        .Req(1)
        .Gang("job", 2)
        .Label("job", "job")
        .PodAntiAffinity("kubernetes.io/hostname", job="job")
        for i in range(2)
    ]
    (decision,) = schedule(state, *members)
    assert isinstance(decision, Unschedulable)
    assert "cannot all be placed" in decision.reason


def test_gang_members_cpu_must_fit_together_on_a_node() -> None:
    node = MakeNode().Name("a").GPUs(8).Allocatable({"nvidia.com/gpu": 8, "cpu": "10"})
    other = MakeNode().Name("b").GPUs(8).Allocatable({"nvidia.com/gpu": 8, "cpu": "10"})
    state = cluster(node, other)
    members = [
        MakePod()
        .Name(f"w-{i}")
        .ContainerWith("m", requests={"cpu": "6"}, limits={"nvidia.com/gpu": "1"})
        .Gang("job", 2)
        for i in range(2)
    ]
    (decision,) = schedule(state, *members)
    assert isinstance(decision, Placed)
    assert sorted(p.node for p in decision.placements) == ["a", "b"]


def test_planning_leaves_no_undo_log_and_no_trace() -> None:
    state = cluster(zone_node("a", "z1"), zone_node("b", "z1"))
    before = (dict(state.holdings), len(state.index))
    members = [MakePod().Name(f"w-{i}").Req(8).Gang("job", 3).Obj() for i in range(3)]
    from scheduler.core.cycle import Unit, decide

    decision = decide(state, Unit("default/job", tuple(members)))
    assert isinstance(decision, Unschedulable)
    assert (dict(state.holdings), len(state.index)) == before
    assert not state._undo.open  # the log exists only while a scope is open


def test_nested_tentative_scopes_roll_back_to_their_own_mark() -> None:
    state = cluster(zone_node("a", "z1"))
    pod = MakePod().Name("p").Req(1).Obj()
    (decision,) = schedule_in_order(cluster(zone_node("a", "z1")), [pod])
    assert isinstance(decision, Placed)
    (placement,) = decision.placements
    with state.tentative():
        state.apply(placement, pod)
        with state.tentative():
            state.remove_pod(pod.key)
            assert pod.key not in state.holdings
        assert pod.key in state.holdings and pod.key in state.index.records
    assert pod.key not in state.holdings and len(state.index) == 0
