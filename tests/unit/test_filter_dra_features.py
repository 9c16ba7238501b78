"""DynamicResources and NodeDeclaredFeatures (kube-scheduler v1.37 defaults), stepped by hand:
an allocated claim restricts the pod to the nodes its allocation reaches; a claim nobody
allocated (or not created, or being deleted, or reserved to the limit) keeps the pod pending
with a reason, never a blind bind; an extended resource a DeviceClass backs is named as DRA's on
a node that lacks it; a pod that needs a node feature goes only where it is declared."""

from __future__ import annotations

from msgspec.structs import replace

from scheduler.core.filters.dra import RESERVED_FOR_MAX
from scheduler.core.filters.features import required_features
from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.model.dra import (
    Allocation,
    Device,
    DeviceClass,
    DeviceRequest,
    ExactRequest,
    ResourceClaim,
    ResourcePool,
    ResourceSlice,
)
from scheduler.core.model.objects import (
    NodeSelectorTerm,
    PodClaim,
    PodInput,
    Requirement,
)
from scheduler.core.resources.accounting import extended_resources
from tests.builders import MakeNode, MakePod, cluster, schedule


def nodes() -> tuple[MakeNode, MakeNode]:
    return (
        MakeNode().Name("a").GPUs(2).Label("kubernetes.io/hostname", "a"),
        MakeNode().Name("b").GPUs(2).Label("kubernetes.io/hostname", "b"),
    )


def on_node(name: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm(match_fields=(Requirement("metadata.name", "In", (name,)),)),)


def with_claim(pod: MakePod, claim: str = "nic", template: str = "") -> PodInput:
    return replace(pod.Obj(), resource_claims=(PodClaim("net", claim, template),))


def test_an_allocated_claim_binds_only_where_its_allocation_reaches() -> None:
    state = cluster(*nodes())
    state.inputs.resource_claims.put(
        ResourceClaim("default", "nic", "c1", allocation=Allocation(node_selector=on_node("b")))
    )
    (decision,) = schedule(state, with_claim(MakePod().Name("p").Req(1)))
    assert isinstance(decision, Placed) and decision.placements[0].node == "b"


def test_an_allocated_claim_on_no_candidate_node_reads_like_kube_scheduler() -> None:
    state = cluster(*nodes())
    state.inputs.resource_claims.put(
        ResourceClaim("default", "nic", allocation=Allocation(node_selector=on_node("z")))
    )
    (decision,) = schedule(state, with_claim(MakePod().Name("p").Req(1)))
    assert decision.reason == (
        "0/2 nodes are available: 2 resourceclaim not available on the node."
    )


def test_an_allocated_claim_without_a_node_selector_fits_every_node() -> None:
    state = cluster(*nodes())
    state.inputs.resource_claims.put(ResourceClaim("default", "nic", allocation=Allocation()))
    (decision,) = schedule(state, with_claim(MakePod().Name("p").Req(1)))
    assert isinstance(decision, Placed)


def test_an_unallocated_claim_is_allocated_where_its_devices_are() -> None:
    state = cluster(*nodes())
    nic = DeviceRequest("nic", ExactRequest("nic.example.com"))
    state.inputs.resource_claims.put(ResourceClaim("default", "nic", "c1", (nic,)))
    (decision,) = schedule(state, with_claim(MakePod().Name("p").Req(1)))
    assert isinstance(decision, Unschedulable)
    assert "device class nic.example.com does not exist" in decision.reason
    state.inputs.device_classes.put(
        DeviceClass("nic.example.com", ("device.driver == 'nic.example.com'",))
    )
    (decision,) = schedule(state, with_claim(MakePod().Name("p").Req(1)))
    assert decision.reason == "0/2 nodes are available: 2 cannot allocate all claims."
    state.inputs.resource_slices.put(
        ResourceSlice(
            "b-nics",
            "nic.example.com",
            ResourcePool("b", 1, 1),
            node_name="b",
            devices=(Device("nic-0"),),
        )
    )
    (decision,) = schedule(state, with_claim(MakePod().Name("p").Req(1)))
    assert isinstance(decision, Placed)
    (placement,) = decision.placements
    assert placement.node == "b"
    ((claim, uid, allocation, special),) = [
        (c.claim, c.uid, c.allocation, c.special) for c in placement.claims
    ]
    assert (claim, uid, special) == ("default/nic", "c1", False)
    assert [(r.request, r.device) for r in allocation.results] == [("nic", "nic-0")]
    assert allocation.node_selector == on_node("b")


def test_missing_deleting_and_template_claims_wait_with_their_reason() -> None:
    state = cluster(*nodes())
    state.inputs.resource_claims.put(
        ResourceClaim("default", "old", allocation=Allocation(), deleting=True)
    )
    missing, deleting, template = schedule(
        state,
        with_claim(MakePod().Name("p").Req(1), "nowhere"),
        with_claim(MakePod().Name("q").Req(1), "old"),
        with_claim(MakePod().Name("r").Req(1), "", template="gpu-template"),
    )
    assert 'waiting for resourceclaim "nowhere" to be created' in missing.reason
    assert 'resourceclaim "old" is being deleted' in deleting.reason
    assert "waiting for the ResourceClaim of template gpu-template to be created" in (
        template.reason
    )


def test_a_claim_reserved_to_the_limit_is_in_use_unless_reserved_for_the_pod() -> None:
    full = tuple(f"uid-{i}" for i in range(RESERVED_FOR_MAX))
    state = cluster(*nodes())
    state.inputs.resource_claims.put(
        ResourceClaim("default", "nic", allocation=Allocation(), reserved_for=full)
    )
    (decision,) = schedule(state, with_claim(MakePod().Name("p").Req(1)))
    assert "resourceclaim in use" in decision.reason
    mine = replace(with_claim(MakePod().Name("q").Req(1)), uid="uid-7")
    (placed,) = schedule(state, mine)
    assert isinstance(placed, Placed)


def test_device_classes_back_extended_resources_explicitly_and_implicitly() -> None:
    classes = [
        DeviceClass("gpu.example.com", extended_resource_name="example.com/gpu"),
        DeviceClass("fpga"),
    ]
    assert extended_resources(classes) == {
        "example.com/gpu": "gpu.example.com",
        "deviceclass.resource.kubernetes.io/gpu.example.com": "gpu.example.com",
        "deviceclass.resource.kubernetes.io/fpga": "fpga",
    }


def test_a_dra_backed_extended_resource_on_a_node_without_it_is_allocated_there() -> None:
    node = MakeNode().Name("a").GPUs(1).Allocatable({"cpu": "8", "nvidia.com/gpu": 1})
    state = cluster(node)
    pod = MakePod().Name("p").Req(1).ContainerWith("fpga", {"example.com/fpga": "1"}).Obj()
    (plain,) = schedule(state, pod)
    assert "Insufficient example.com/fpga" in plain.reason
    state.inputs.device_classes.put(
        DeviceClass("fpga.example.com", extended_resource_name="example.com/fpga")
    )
    (backed,) = schedule(state, replace(pod, name="q"))
    assert isinstance(backed, Unschedulable)
    assert backed.reason == "0/1 nodes are available: 1 cannot allocate all claims."
    state.inputs.resource_slices.put(
        ResourceSlice(
            "a-fpgas", "fpga.example.com", ResourcePool("a", 1, 1), node_name="a",
            devices=(Device("fpga-0"),),
        )
    )  # fmt: skip
    (placed,) = schedule(state, replace(pod, name="r", uid="uid-r"))
    assert isinstance(placed, Placed)
    (special,) = placed.placements[0].claims
    assert special.special and special.claim == "default/r-extended-resources-"
    assert [r.device for r in special.allocation.results] == ["fpga-0"]
    assert [(m.container, m.resource, m.request) for m in special.mappings] == [
        ("fpga", "example.com/fpga", "container-1-request-0")
    ]


def test_features_are_inferred_as_kube_scheduler_infers_them() -> None:
    pod = MakePod().Name("p").Req(1).Obj()
    assert required_features(pod) == frozenset()
    assert required_features(replace(pod, restart_rule_actions=("RestartAllContainers",))) == {
        "RestartAllContainersOnContainerExits"
    }
    assert required_features(replace(pod, restart_rule_actions=("Restart",))) == frozenset()
    assert required_features(replace(pod, host_network=True, host_users=False)) == {
        "UserNamespacesHostNetworkSupport"
    }
    assert required_features(replace(pod, host_network=True)) == frozenset()
    assert required_features(replace(pod, bind_mount_options=True)) == {"VolumeBindMountOptions"}


def test_a_pod_needing_a_feature_goes_only_where_it_is_declared() -> None:
    a, b = nodes()
    declared = replace(b.Obj(), declared_features=("RestartAllContainersOnContainerExits",))
    state = cluster(a, declared)
    pod = replace(MakePod().Name("p").Req(1).Obj(), restart_rule_actions=("RestartAllContainers",))
    (decision,) = schedule(state, pod)
    assert isinstance(decision, Placed) and decision.placements[0].node == "b"
    (nowhere,) = schedule(cluster(*nodes()), replace(pod, name="q"))
    assert nowhere.reason == (
        "0/2 nodes are available: 2 node(s) didn't match Pod's required features."
    )


def test_a_dra_backed_gpu_on_nodes_without_it_is_allocated_there() -> None:
    # One GPU node (all 2 GPUs busy) and one node whose GPUs only DRA offers (allocatable 0).
    gpu = MakeNode().Name("gpu").GPUs(2).Allocatable({"nvidia.com/gpu": 2})
    dra_node = MakeNode().Name("dra").NoGPUs().Allocatable({"cpu": "8"})
    busy = MakePod().Name("busy").Req(2).Bound("gpu", "0,1")
    state = cluster(gpu, dra_node, running=(busy,))
    (plain,) = schedule(state, MakePod().Name("p").Req(1))
    assert "1 is not a GPU node" in plain.reason
    state.inputs.device_classes.put(
        DeviceClass("gpu.nvidia.com", extended_resource_name="nvidia.com/gpu")
    )
    (backed,) = schedule(state, MakePod().Name("q").Req(1))
    assert isinstance(backed, Unschedulable)
    assert backed.reason == (
        "0/2 nodes are available: 1 cannot allocate all claims, 1 has fewer than 1 free GPU."
    )
    state.inputs.resource_slices.put(
        ResourceSlice(
            "dra-gpus", "gpu.nvidia.com", ResourcePool("dra", 1, 1), node_name="dra",
            devices=(Device("gpu-0"), Device("gpu-1")),
        )
    )  # fmt: skip
    (placed,) = schedule(state, MakePod().Name("r").Req(2))
    assert isinstance(placed, Placed)
    ((placement),) = placed.placements
    assert placement.node == "dra" and placement.devices == () and placement.resources == ()
    (special,) = placement.claims
    assert special.special and [r.device for r in special.allocation.results] == [
        "gpu-0",
        "gpu-1",
    ]
    assert [(r.name, r.exactly.count if r.exactly else 0) for r in special.requests] == [
        ("container-0-request-0", 2)
    ]


def test_the_newest_class_backs_an_extended_resource_then_the_smallest_name() -> None:
    old = DeviceClass(
        "a-old", extended_resource_name="nvidia.com/gpu", created="2026-01-01T00:00:00Z"
    )
    new = DeviceClass(
        "z-new", extended_resource_name="nvidia.com/gpu", created="2026-06-01T00:00:00Z"
    )
    twin = DeviceClass("b-twin", extended_resource_name="nvidia.com/gpu", created=new.created)
    assert extended_resources([old, new])["nvidia.com/gpu"] == "z-new"
    assert extended_resources([new, twin, old])["nvidia.com/gpu"] == "b-twin"
