"""The DRA filter allocating a pod's claims (filters/dra.py, placement/devices.py), stepped by
hand: devices are allocated on a node that has them, never one any visible claim (or our
assumed placement) holds; errors become reasons; the placement carries the allocations."""

from __future__ import annotations

from msgspec.structs import replace

from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.model.dra import (
    Allocation,
    Device,
    DeviceClass,
    DeviceRequest,
    DeviceResult,
    ExactRequest,
    ResourceClaim,
    ResourcePool,
    ResourceSlice,
)
from scheduler.core.model.objects import PodClaim, PodInput
from tests.builders import MakeNode, MakePod, cluster, schedule

DRIVER = "gpu.nvidia.com"
GPU_CLASS = DeviceClass(DRIVER, ("device.driver == 'gpu.nvidia.com'",))


def gpu_slice(node: str, n: int) -> ResourceSlice:
    return ResourceSlice(
        f"{node}-gpus",
        DRIVER,
        ResourcePool(node, 1, 1),
        node_name=node,
        devices=tuple(
            Device(f"gpu-{i}", attributes={"uuid": f"GPU-{node}-{i}", "type": "gpu"})
            for i in range(n)
        ),
    )


def gpu_claim(name: str, count: int = 1, device_class: str = DRIVER) -> ResourceClaim:
    request = DeviceRequest("gpu", ExactRequest(device_class, count=count))
    return ResourceClaim("default", name, f"uid-{name}", (request,))


def claiming(pod: str, *claims: str) -> PodInput:
    obj = MakePod().Name(pod).Obj()
    return replace(obj, resource_claims=tuple(PodClaim(f"c{i}", c) for i, c in enumerate(claims)))


def dra_cluster(*sizes: tuple[str, int]) -> object:
    state = cluster(*(MakeNode().Name(name).GPUs(max(n, 1)) for name, n in sizes))
    state.inputs.device_classes.put(GPU_CLASS)
    for name, n in sizes:
        if n:
            state.inputs.resource_slices.put(gpu_slice(name, n))
    return state


def devices(decision: object) -> list[tuple[str, str]]:
    assert isinstance(decision, Placed), decision
    return [
        (p.node, r.device)
        for p in decision.placements
        for c in p.claims
        for r in c.allocation.results
    ]


def test_nodes_without_a_candidate_device_are_refused_and_the_smallest_fitting_node_taken() -> None:
    state = dra_cluster(("a", 0), ("b", 4), ("c", 2))
    state.inputs.resource_claims.put(gpu_claim("one", 2))
    (decision,) = schedule(state, claiming("p", "one"))
    assert devices(decision) == [("c", "gpu-0"), ("c", "gpu-1")]


def test_assumed_devices_are_not_given_again_and_a_full_cluster_says_why() -> None:
    state = dra_cluster(("a", 1))
    for name in ("one", "two"):
        state.inputs.resource_claims.put(gpu_claim(name))
    first, second = schedule(state, claiming("p", "one"), claiming("q", "two"))
    assert devices(first) == [("a", "gpu-0")]
    assert isinstance(second, Unschedulable)
    assert second.reason == "0/1 nodes are available: 1 cannot allocate all claims."
    state.forget("default/p")  # the bind failed: its device is free again
    (again,) = schedule(state, claiming("q", "two"))
    assert devices(again) == [("a", "gpu-0")]


def test_a_device_another_scheduler_allocated_is_never_allocated_again() -> None:
    state = dra_cluster(("a", 2))
    theirs = Allocation(results=(DeviceResult("gpu", DRIVER, "a", "gpu-0"),))
    state.inputs.resource_claims.put(replace(gpu_claim("theirs"), allocation=theirs))
    state.inputs.resource_claims.put(gpu_claim("mine"))
    (decision,) = schedule(state, claiming("p", "mine"))
    assert devices(decision) == [("a", "gpu-1")]
    # Cleared by its owner: the device is free for the next pod.
    state.inputs.resource_claims.put(gpu_claim("theirs"))
    state.inputs.resource_claims.put(gpu_claim("next"))
    (later,) = schedule(state, claiming("q", "next"))
    assert devices(later) == [("a", "gpu-0")]


def test_a_claim_being_allocated_for_another_pod_makes_the_next_one_wait() -> None:
    state = dra_cluster(("a", 2))
    state.inputs.resource_claims.put(gpu_claim("shared"))
    first, second = schedule(state, claiming("p", "shared"), claiming("q", "shared"))
    assert devices(first) == [("a", "gpu-0")]
    assert isinstance(second, Unschedulable)
    assert "resource claim default/shared is in the process of being allocated" in second.reason
    # Written by the binder: the second pod joins it on the node its allocation reaches.
    allocation = first.placements[0].claims[0].allocation
    state.inputs.resource_claims.put(replace(gpu_claim("shared"), allocation=allocation))
    (joined,) = schedule(state, claiming("q", "shared"))
    assert isinstance(joined, Placed) and joined.placements[0].node == "a"
    assert joined.placements[0].claims == ()


def test_cel_errors_and_missing_classes_are_reasons_never_crashes() -> None:
    state = dra_cluster(("a", 2))
    state.inputs.device_classes.put(DeviceClass("broken", ("device.driver ==",)))
    state.inputs.resource_claims.put(gpu_claim("bad", device_class="broken"))
    state.inputs.resource_claims.put(gpu_claim("lost", device_class="nowhere"))
    runtime = DeviceClass("strict", ("device.attributes['gpu.nvidia.com'].missing == 1",))
    state.inputs.device_classes.put(runtime)
    state.inputs.resource_claims.put(gpu_claim("strict", device_class="strict"))
    bad, lost, strict = schedule(
        state, claiming("p", "bad"), claiming("q", "lost"), claiming("r", "strict")
    )
    assert isinstance(bad, Unschedulable) and "CEL compile error" in bad.reason
    assert "class broken: selector #0" in bad.reason
    assert isinstance(lost, Unschedulable)
    assert "claim default/lost, request gpu: device class nowhere does not exist" in lost.reason
    assert isinstance(strict, Unschedulable) and "CEL runtime error" in strict.reason


def test_the_claims_devices_are_chosen_by_interconnect() -> None:
    """GPUs 0-1 and 2-3 are NVLink pairs, 1-2 only PCIe: a 2-device claim gets a pair, a
    1-device claim then takes from the broken pair, not one of an intact one."""
    links = [
        ["X", "NV4", "SYS", "SYS"],
        ["NV4", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "NV4"],
        ["SYS", "SYS", "NV4", "X"],
    ]
    state = cluster(MakeNode().Name("a").Links(links))
    state.inputs.device_classes.put(GPU_CLASS)
    state.inputs.resource_slices.put(gpu_slice("a", 4))
    # One GPU of the first pair is held already: a 2-device claim takes the intact pair.
    held = Allocation(results=(DeviceResult("gpu", DRIVER, "a", "gpu-1"),))
    state.inputs.resource_claims.put(replace(gpu_claim("held"), allocation=held))
    state.inputs.resource_claims.put(gpu_claim("pair", 2))
    state.inputs.resource_claims.put(gpu_claim("single"))
    pair, single = schedule(state, claiming("p", "pair"), claiming("q", "single"))
    assert devices(pair) == [("a", "gpu-2"), ("a", "gpu-3")]
    assert devices(single) == [("a", "gpu-0")]


def test_a_gangs_claims_are_allocated_together_on_each_node() -> None:
    """Two members of 1 GPU each with an IMEX-like channel claim: node a has one channel, b two.
    Each member alone fits on a; together only b holds both, each with its own channel."""
    state = cluster(MakeNode().Name("a").GPUs(4), MakeNode().Name("b").GPUs(4))
    channels = DeviceClass("channel", ("device.driver == 'imex.example.com'",))
    state.inputs.device_classes.put(channels)
    for node, n in (("a", 1), ("b", 2)):
        state.inputs.resource_slices.put(
            ResourceSlice(
                f"{node}-channels",
                "imex.example.com",
                ResourcePool(node, 1, 1),
                node_name=node,
                devices=tuple(Device(f"channel-{i}") for i in range(n)),
            )
        )
    members = []
    for i in range(2):
        state.inputs.resource_claims.put(gpu_claim(f"ch-{i}", device_class="channel"))
        pod = MakePod().Name(f"m{i}").Req(1).Gang("job", 2).Obj()
        members.append(replace(pod, resource_claims=(PodClaim("imex", f"ch-{i}"),)))
    (decision,) = [d for d in schedule(state, *members) if isinstance(d, Placed)]
    assert sorted(devices(decision)) == [("b", "channel-0"), ("b", "channel-1")]
    # Both assumed: b's channels are in use, a's is free.
    held = state.devices.in_use.exclusive
    assert ("imex.example.com", "b", "channel-0") in held
    assert ("imex.example.com", "a", "channel-0") not in held


def test_a_gang_asking_gpus_only_through_claims_is_placed_all_or_nothing() -> None:
    links = [
        ["X", "NV4", "SYS", "SYS"],
        ["NV4", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "NV4"],
        ["SYS", "SYS", "NV4", "X"],
    ]
    state = cluster(MakeNode().Name("a").Links(links))
    state.inputs.device_classes.put(GPU_CLASS)
    state.inputs.resource_slices.put(gpu_slice("a", 4))
    members = []
    for i in range(3):
        state.inputs.resource_claims.put(gpu_claim(f"pair-{i}", 2))
        pod = MakePod().Name(f"w{i}").Gang("job", 3).Obj()
        members.append(replace(pod, resource_claims=(PodClaim("gpus", f"pair-{i}"),)))
    (refused,) = schedule(state, *members)
    assert isinstance(refused, Unschedulable)
    assert "cannot allocate all claims" in refused.reason
    assert state.devices.in_use.exclusive == {}  # nothing held by a gang that did not fit
    smaller = [replace(m, labels={**m.labels, "gpu-topology-replica": "2"}) for m in members[:2]]
    (placed,) = schedule(state, *smaller)
    assert isinstance(placed, Placed) and all(p.gang == "default/job" for p in placed.placements)
    pairs = sorted(
        tuple(r.device for c in p.claims for r in c.allocation.results) for p in placed.placements
    )
    assert pairs == [("gpu-0", "gpu-1"), ("gpu-2", "gpu-3")]  # each an NVLink pair
