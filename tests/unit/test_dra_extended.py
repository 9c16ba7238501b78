"""Extended resources backed by a DeviceClass (v1.37, KEP-5004), stepped by hand: the special
claim kube-scheduler would create (dra/extended.py), allocated on nodes that leave the resource
to DRA together with the pod's own claims (one choice by interconnect), and the claim an earlier
attempt created."""

from __future__ import annotations

from msgspec.structs import replace

from scheduler.core.dra.extended import special_claim
from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.model.dra import (
    Allocation,
    DeviceClass,
    DeviceResult,
    RequestMapping,
    ResourceClaim,
)
from scheduler.core.model.objects import ContainerInput, PodClaim
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.unit.test_dra_filter import DRIVER, gpu_claim, gpu_slice

GPU = "nvidia.com/gpu"


def test_the_special_claim_has_kube_schedulers_requests_and_mappings() -> None:
    pod = replace(
        MakePod().Name("p").Obj(),
        init_containers=(
            ContainerInput("setup", limits={GPU: "1"}),  # reuses the main container's request
            ContainerInput("side", limits={GPU: "2"}, restart_policy="Always"),
        ),
        containers=(
            ContainerInput("main", requests={"cpu": "1", GPU: "2", "memory": "1Gi"}),
            ContainerInput("plain", requests={"cpu": "1"}),
        ),
    )
    found = special_claim(pod, {GPU: DRIVER})
    assert found is not None
    claim, mappings = found
    assert claim.name == "p-extended-resources-" and claim.extended and claim.owner == pod.uid
    assert [(r.name, r.exactly.count if r.exactly else 0) for r in claim.requests] == [
        ("container-1-request-0", 2),
        ("container-2-request-2", 2),  # after cpu and memory, by name
    ]
    assert mappings == (
        RequestMapping("side", GPU, "container-1-request-0"),
        RequestMapping("main", GPU, "container-2-request-2"),
        RequestMapping("setup", GPU, "container-1-request-0"),
    )
    assert special_claim(pod, {"example.com/fpga": "fpga"}) is None


LINKS = [
    ["X", "NV4", "SYS", "SYS"],
    ["NV4", "X", "SYS", "SYS"],
    ["SYS", "SYS", "X", "NV4"],
    ["SYS", "SYS", "NV4", "X"],
]


def dra_only_cluster() -> object:
    """Node a: 4 GPUs in two NVLink pairs, offered only through DRA (allocatable 0)."""
    state = cluster(MakeNode().Name("a").Links(LINKS).Allocatable({"cpu": "32"}))
    state.inputs.device_classes.put(
        DeviceClass(DRIVER, ("device.driver == 'gpu.nvidia.com'",), extended_resource_name=GPU)
    )
    state.inputs.resource_slices.put(gpu_slice("a", 4))
    held = Allocation(results=(DeviceResult("gpu", DRIVER, "a", "gpu-0"),))
    state.inputs.resource_claims.put(replace(gpu_claim("held"), allocation=held))
    return state


def test_a_gpu_request_and_a_claim_on_one_node_get_one_jointly_chosen_set() -> None:
    """GPU 0 is held; one GPU through nvidia.com/gpu and one through a claim: chosen apart,
    first fit would take 1 and 2 (PCIe); together they are the NVLink pair 2-3."""
    state = dra_only_cluster()
    state.inputs.resource_claims.put(gpu_claim("mine"))
    pod = replace(MakePod().Name("p").Req(1).Obj(), resource_claims=(PodClaim("g", "mine"),))
    (decision,) = schedule(state, pod)
    assert isinstance(decision, Placed)
    (placement,) = decision.placements
    taken = sorted(r.device for c in placement.claims for r in c.allocation.results)
    assert taken == ["gpu-2", "gpu-3"]
    assert {c.special for c in placement.claims} == {True, False}


def test_the_claim_an_earlier_attempt_created_stands_for_the_extended_resources() -> None:
    state = dra_only_cluster()
    pod = replace(MakePod().Name("p").Req(1).Obj(), extended_claim="p-extended-resources-x1")
    # Named on the pod but gone (deleted by the Unreserve of a failed Binding): none stands
    # for them, a new one is allocated (kube-scheduler looks it up by owner).
    (fresh,) = schedule(state, pod)
    assert isinstance(fresh, Placed)
    assert [c.special for c in fresh.placements[0].claims] == [True]
    # There and not allocated: stale, its creator deletes it first.
    unallocated = ResourceClaim(
        "default", "p-extended-resources-x1", "cu", extended=True, owner=pod.uid
    )
    state.inputs.resource_claims.put(unallocated)
    (stale,) = schedule(state, pod)
    assert isinstance(stale, Unschedulable)
    assert "cannot schedule extended resource claim" in stale.reason
    allocation = Allocation(results=(DeviceResult("container-0-request-0", DRIVER, "a", "gpu-1"),))
    created = ResourceClaim(
        "default",
        "p-extended-resources-x1",
        "cu",
        allocation=allocation,
        extended=True,
        owner=pod.uid,
    )
    state.inputs.resource_claims.put(created)
    (placed,) = schedule(state, replace(pod, name="p"))
    assert isinstance(placed, Placed) and placed.placements[0].claims == ()
    assert placed.placements[0].node == "a"
