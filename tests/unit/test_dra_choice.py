"""Choosing DRA devices by interconnect (core/dra/choice.py through the allocator): rule 1 of the
``nvidia.com/gpu`` path, where kube-scheduler takes the first devices that fit."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

from scheduler.core.dra.allocator import Outcome, allocate
from scheduler.core.dra.cel import Selectors
from scheduler.core.dra.inuse import InUse, in_use_from
from scheduler.core.model.dra import (
    AttributeValue,
    Device,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    ExactRequest,
    ResourceClaim,
    ResourcePool,
    ResourceSlice,
    SubRequest,
)
from scheduler.core.model.names import GPUS_ANNOTATION
from scheduler.core.model.objects import NodeInput
from scheduler.core.resources.gpusets import Topology, brute_force_best_set
from scheduler.core.resources.inventory import Inventory, read_inventory
from scheduler.core.settings import DraLimits

DRIVER = "gpu.nvidia.com"
CLASS = DeviceClass(DRIVER, selectors=(f"device.attributes['{DRIVER}'].type == 'gpu'",))
MIG_CLASS = DeviceClass("mig", selectors=(f"device.attributes['{DRIVER}'].type == 'mig'",))
CLASSES = {CLASS.name: CLASS, MIG_CLASS.name: MIG_CLASS}

# Four GPUs: 0-1 only across sockets (SYS), 2-3 an NVLink pair (NV4), the rest through the host
# bridge (PHB). First fit takes 0 and 1; the best pair is 2 and 3.
LINKS = [
    ["X", "SYS", "PHB", "PHB"],
    ["SYS", "X", "PHB", "PHB"],
    ["PHB", "PHB", "X", "NV4"],
    ["PHB", "PHB", "NV4", "X"],
]


def inventory(links: Sequence[Sequence[str]] = LINKS) -> Inventory:
    raw = json.dumps(
        {
            "vendor": "nvidia",
            "devices": [{"index": i, "uuid": f"GPU-{i}"} for i in range(len(links))],
            "links": [list(row) for row in links],
        }
    )
    found = read_inventory(NodeInput(name="n1", annotations={GPUS_ANNOTATION: raw}))
    assert found is not None
    return found


def nvidia_gpu(minor: int, index: int, **extra: AttributeValue) -> Device:
    """NVIDIA's full-GPU device: named by its minor number, which is not the NVML index."""
    return Device(f"gpu-{minor}", attributes={"type": "gpu", "uuid": f"GPU-{index}", **extra})


def slice_of(devices: Sequence[Device]) -> ResourceSlice:
    return ResourceSlice(
        "n1-gpus", DRIVER, ResourcePool("n1", 1, 1), node_name="n1", devices=tuple(devices)
    )


GPUS = slice_of([nvidia_gpu(i, i) for i in range(4)])


def claim(count: int = 1, name: str = "c", cls: str = DRIVER, **spec: object) -> ResourceClaim:
    request = DeviceRequest("gpus", exactly=ExactRequest(cls, count=count))
    return ResourceClaim("default", name, uid=name, requests=(request,), **spec)  # type: ignore[arg-type]


def run(
    claims: Sequence[ResourceClaim],
    slices: Sequence[ResourceSlice] = (GPUS,),
    inv: Inventory | None = None,
    in_use: InUse | None = None,
    limits: DraLimits | None = None,
) -> Outcome:
    return allocate(claims, CLASSES, slices, in_use or InUse(), "n1", {}, Selectors(), inv, limits)


def chosen(outcome: Outcome) -> list[str]:
    assert outcome.ok, outcome.reason
    return [r.device for a in outcome.allocations for r in a.results]


def test_without_topology_the_choice_is_kube_schedulers_first_fit() -> None:
    assert chosen(run([claim(2)])) == ["gpu-0", "gpu-1"]


def test_k_devices_take_the_best_connected_set() -> None:
    assert chosen(run([claim(2)], inv=inventory())) == ["gpu-2", "gpu-3"]


def test_devices_map_by_uuid_not_by_name() -> None:
    # Minors 0..3 carry NVML indices 2, 3, 0, 1: the NVLink pair is gpu-0 and gpu-1.
    shuffled = slice_of([nvidia_gpu(m, i) for m, i in enumerate([2, 3, 0, 1])])
    assert chosen(run([claim(2)], [shuffled], inventory())) == ["gpu-0", "gpu-1"]
    # Qualified attribute names map too.
    qualified = slice_of(
        [
            Device(f"gpu-{i}", attributes={"type": "gpu", f"{DRIVER}/uuid": f"GPU-{i}"})
            for i in range(4)
        ]
    )
    assert chosen(run([claim(2)], [qualified], inventory())) == ["gpu-2", "gpu-3"]


def test_one_device_takes_the_worst_connected_gpu() -> None:
    # 0 and 1 reach the others through PHB only; 2 and 3 have NVLink to keep for later.
    assert chosen(run([claim(1)], inv=inventory())) == ["gpu-0"]


def test_devices_in_use_are_neither_chosen_nor_damaged() -> None:
    taken = claim(1, name="taken")
    held = in_use_from(
        [
            ResourceClaim(
                "default",
                "taken",
                requests=taken.requests,
                allocation=run([claim(2)], inv=inventory()).allocations[0],
            )
        ]
    )
    assert chosen(run([claim(2)], inv=inventory(), in_use=held)) == ["gpu-0", "gpu-1"]


def test_a_pods_claims_get_one_jointly_chosen_set() -> None:
    outcome = run([claim(1, name="a"), claim(1, name="b")], inv=inventory())
    assert chosen(outcome) == ["gpu-2", "gpu-3"]


def test_constraints_still_hold_and_the_best_within_them_wins() -> None:
    # matchAttribute on the socket forbids the NVLink pair (2 and 3 sit on different sockets).
    sockets = slice_of([nvidia_gpu(i, i, socket=s) for i, s in enumerate([0, 0, 0, 1])])
    same_socket = claim(2, constraints=(DeviceConstraint(match_attribute=f"{DRIVER}/socket"),))
    # 0-2 and 1-2 (PHB) beat 0-1 (SYS); 0 and 1 tie, and the lower index wins.
    assert chosen(run([same_socket], [sockets], inventory())) == ["gpu-0", "gpu-2"]


def test_first_available_order_comes_before_connectivity() -> None:
    request = DeviceRequest(
        "gpus",
        first_available=(
            SubRequest("three", ExactRequest(DRIVER, count=3)),
            SubRequest("two", ExactRequest(DRIVER, count=2)),
        ),
    )
    outcome = run([ResourceClaim("default", "c", requests=(request,))], inv=inventory())
    assert [r.request for r in outcome.allocations[0].results] == ["gpus/three"] * 3
    # {0, 2, 3} and {1, 2, 3} tie on both keys; the lower indices win, as in rule 1.
    assert chosen(outcome) == ["gpu-0", "gpu-2", "gpu-3"]


def test_without_an_inventory_pcie_root_and_numa_give_a_coarse_distance() -> None:
    def at(minor: int, root: str, numa: int) -> Device:
        where: dict[str, AttributeValue] = {
            "resource.kubernetes.io/pcieRoot": root,
            "resource.kubernetes.io/numaNode": numa,
        }
        return nvidia_gpu(minor, minor, **where)

    located = slice_of(
        [
            at(0, "pci0000:00", 0),
            at(1, "pci0000:40", 1),
            at(2, "pci0000:80", 1),
            at(3, "pci0000:80", 1),
        ]
    )
    assert chosen(run([claim(2)], [located])) == ["gpu-2", "gpu-3"]
    # One device: the one farthest from the rest.
    assert chosen(run([claim(1)], [located])) == ["gpu-0"]


def test_mig_devices_map_to_their_parent_gpu() -> None:
    migs = slice_of(
        [
            Device(
                f"gpu-{p}-mig-1g10gb-{k}",
                attributes={"type": "mig", "uuid": f"MIG-{p}-{k}", "parentUUID": f"GPU-{p}"},
            )
            for p in range(4)
            for k in range(2)
        ]
    )
    # Two slices of one GPU are closer than any link.
    assert chosen(run([claim(2, cls="mig")], [migs], inventory())) == [
        "gpu-0-mig-1g10gb-0",
        "gpu-0-mig-1g10gb-1",
    ]


def test_the_choice_is_rule_one_on_random_topologies() -> None:
    rng = random.Random(29)
    codes = ["NV1", "NV2", "NV4", "NV12", "PIX", "PXB", "PHB", "NODE", "SYS"]
    for _ in range(40):
        n = rng.randint(2, 8)
        links = [["X"] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                links[i][j] = links[j][i] = rng.choice(codes)
        inv = inventory(links)
        k = rng.randint(1, n)
        best = brute_force_best_set(inv.topology, (1 << n) - 1, k)
        assert best is not None
        got = run([claim(k)], [slice_of([nvidia_gpu(i, i) for i in range(n)])], inv)
        indices = tuple(sorted(int(d.removeprefix("gpu-")) for d in chosen(got)))
        topology: Topology = inv.topology
        assert (topology.internal_score(indices), topology.damage(indices, (1 << n) - 1)) == (
            best.score,
            best.damage,
        )


def test_the_search_is_bounded_on_a_large_slice() -> None:
    many = slice_of(
        [
            Device(
                f"gpu-{i}",
                attributes={"type": "gpu", "resource.kubernetes.io/pcieRoot": f"pci{i % 16}"},
            )
            for i in range(128)
        ]
    )
    limits = DraLimits(steps=20_000, solutions=64)
    outcome = run([claim(8), claim(8, name="d")], [many], limits=limits)
    assert len(chosen(outcome)) == 16
    # Each claim's 8 devices on one PCIe root (devices i and i + 16k share root i % 16).
    for allocation in outcome.allocations:
        assert len({int(r.device.removeprefix("gpu-")) % 16 for r in allocation.results}) == 1
