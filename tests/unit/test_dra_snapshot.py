"""DRA in the snapshot (snapshot/devices.py): every claim's allocation is in use, whoever wrote
it, and leaves when cleared; an assumed placement's claims charge their devices until it is
forgotten (undone by a tentative scope), and the written allocation takes over from the assumed
one without counting a device twice."""

from __future__ import annotations

from msgspec.structs import replace

from scheduler.core.model.decisions import ClaimAllocation, Placement
from scheduler.core.model.dra import (
    Allocation,
    Device,
    DeviceClass,
    DeviceResult,
    ResourceClaim,
    ResourcePool,
    ResourceSlice,
)
from scheduler.core.snapshot.cluster import ClusterState
from tests.builders import MakeNode, MakePod

DRIVER = "gpu.nvidia.com"


def result(device: str, node: str = "n1", **kw: object) -> DeviceResult:
    return DeviceResult("gpu", DRIVER, node, device, **kw)  # type: ignore[arg-type]


def holding(*devices: str) -> Allocation:
    return Allocation(results=tuple(result(d) for d in devices))


def node_slice(node: str, n: int = 4) -> ResourceSlice:
    return ResourceSlice(
        f"{node}-slice",
        DRIVER,
        ResourcePool(node, 1, 1),
        node_name=node,
        devices=tuple(Device(f"gpu-{i}") for i in range(n)),
    )


def test_a_claim_allocated_by_anyone_is_in_use_until_cleared() -> None:
    state = ClusterState()
    claims = state.inputs.resource_claims
    claims.put(ResourceClaim("ns", "c", allocation=holding("gpu-0", "gpu-1")))
    assert set(state.devices.in_use.exclusive) == {(DRIVER, "n1", "gpu-0"), (DRIVER, "n1", "gpu-1")}
    claims.put(ResourceClaim("ns", "c", allocation=holding("gpu-1")))
    assert set(state.devices.in_use.exclusive) == {(DRIVER, "n1", "gpu-1")}
    claims.put(ResourceClaim("ns", "c"))
    assert state.devices.in_use.exclusive == {}
    claims.put(ResourceClaim("ns", "c", allocation=holding("gpu-2")))
    claims.remove("ns/c")
    assert state.devices.in_use.exclusive == {}


def test_admin_access_takes_nothing_and_two_claims_on_one_device_hold_it_until_both_go() -> None:
    state = ClusterState()
    claims = state.inputs.resource_claims
    admin = Allocation(results=(result("gpu-0", admin_access=True),))
    claims.put(ResourceClaim("ns", "watch", allocation=admin))
    assert state.devices.in_use.exclusive == {}
    claims.put(ResourceClaim("ns", "a", allocation=holding("gpu-0")))
    claims.put(ResourceClaim("ns", "b", allocation=holding("gpu-0")))  # another scheduler's race
    claims.remove("ns/a")
    assert (DRIVER, "n1", "gpu-0") in state.devices.in_use.exclusive
    claims.remove("ns/b")
    assert state.devices.in_use.exclusive == {}


def _placement(pod: str, *claims: ClaimAllocation) -> Placement:
    return Placement(f"default/{pod}", f"uid-{pod}", "n1", (), (), claims=claims)


def test_an_assumed_placement_charges_its_claims_until_forgotten_and_a_scope_undoes_it() -> None:
    state = ClusterState()
    state.set_node(MakeNode().Name("n1").Obj())
    pod = MakePod().Name("p").Obj()
    placed = _placement("p", ClaimAllocation("default/c", "cu", holding("gpu-0")))
    with state.tentative():
        state.apply(placed, pod)
        assert (DRIVER, "n1", "gpu-0") in state.devices.in_use.exclusive
    assert state.devices.in_use.exclusive == {}
    state.apply(placed, pod)
    with state.tentative():
        state.forget("default/p")
        assert state.devices.in_use.exclusive == {}
    assert (DRIVER, "n1", "gpu-0") in state.devices.in_use.exclusive
    state.forget("default/p")
    assert state.devices.in_use.exclusive == {}


def test_the_written_allocation_takes_over_from_the_assumed_one() -> None:
    state = ClusterState()
    state.set_node(MakeNode().Name("n1").Obj())
    pod = MakePod().Name("p").Obj()
    state.apply(_placement("p", ClaimAllocation("default/c", "cu", holding("gpu-0"))), pod)
    claims = state.inputs.resource_claims
    claims.put(ResourceClaim("default", "c", "cu", allocation=holding("gpu-0")))
    assert state.devices.in_use.exclusive == {(DRIVER, "n1", "gpu-0"): 1}
    state.remove_pod("default/p")  # the pod left; its claim holds the device until cleared
    assert state.devices.in_use.exclusive == {(DRIVER, "n1", "gpu-0"): 1}
    claims.put(ResourceClaim("default", "c", "cu"))
    assert state.devices.in_use.exclusive == {}


def test_the_extended_resource_claim_is_one_account_with_the_assumed_special_claim() -> None:
    state = ClusterState()
    state.set_node(MakeNode().Name("n1").Obj())
    pod = MakePod().Name("p").Obj()
    special = ClaimAllocation("default/p-extended-resources-", "", holding("gpu-3"), special=True)
    state.apply(_placement("p", special), pod)
    created = ResourceClaim(
        "default",
        "p-extended-resources-x7k2q",
        "cu",
        allocation=holding("gpu-3"),
        extended=True,
        owner="uid-p",
    )
    state.inputs.resource_claims.put(created)
    assert state.devices.in_use.exclusive == {(DRIVER, "n1", "gpu-3"): 1}
    state.forget("default/p")
    assert state.devices.in_use.exclusive == {(DRIVER, "n1", "gpu-3"): 1}
    state.inputs.resource_claims.put(replace(created, allocation=None))
    assert state.devices.in_use.exclusive == {}


def test_slices_for_a_node_bring_every_slice_of_their_pools() -> None:
    state = ClusterState()
    slices = state.inputs.resource_slices
    slices.put(node_slice("n1"))
    slices.put(node_slice("n2"))
    fabric = ResourceSlice(
        "fabric-a", "nic.example.com", ResourcePool("fabric", 1, 2), all_nodes=True
    )
    fabric_b = replace(fabric, name="fabric-b", all_nodes=False, node_name="n9")
    slices.put(fabric)
    slices.put(fabric_b)
    assert [s.name for s in state.devices.slices_for("n1")] == ["fabric-a", "fabric-b", "n1-slice"]
    slices.remove("fabric-b")
    assert [s.name for s in state.devices.slices_for("n1")] == ["fabric-a", "n1-slice"]


def test_the_class_index_counts_free_devices_per_node_and_follows_claims() -> None:
    state = ClusterState()
    for name in ("n1", "n2"):
        state.set_node(MakeNode().Name(name).Obj())
        state.inputs.resource_slices.put(node_slice(name, 4 if name == "n1" else 2))
    state.inputs.device_classes.put(DeviceClass("gpu", ("device.driver == 'gpu.nvidia.com'",)))
    labels = state.nodes
    index = state.devices.class_index("gpu", labels)
    assert index is not None and index.free == {"n1": 4, "n2": 2}
    state.inputs.resource_claims.put(ResourceClaim("ns", "c", allocation=holding("gpu-0", "gpu-1")))
    assert index.free == {"n1": 2, "n2": 2}
    assert [(free, sorted(b.names)) for free, b in index.nodes_with(1)] == [(2, ["n1", "n2"])]
    state.set_node(MakeNode().Name("n3").Obj())
    state.inputs.resource_slices.put(node_slice("n3", 1))  # a slice change rebuilds the index
    index = state.devices.class_index("gpu", state.nodes)
    assert index is not None and index.free == {"n1": 2, "n2": 2, "n3": 1}
    never = DeviceClass("nic", ("device.driver == 'nic.example.com'",))
    state.inputs.device_classes.put(never)
    nic = state.devices.class_index("nic", labels)
    assert nic is not None and nic.free == {} and state.devices.class_index("x", labels) is None


def test_assumed_claims_leave_nothing_behind() -> None:
    state = ClusterState()
    state.set_node(MakeNode().Name("n1").Obj())
    before = state.sizes()
    for i in range(3):
        pod = MakePod().Name(f"p{i}").Obj()
        claim = ClaimAllocation(f"default/c{i}", "", holding(f"gpu-{i}"))
        state.apply(_placement(f"p{i}", claim), pod)
    assert state.sizes()["dra_assumed_pods"] == 3
    for i in range(3):
        state.remove_pod(f"default/p{i}")
    assert state.sizes() == before
