"""The test DRA driver's objects (scheduler/testing/dradriver.py), read back by our own codec and
allocated by the core's allocator: the shapes the e2e plane publishes are ones the scheduler
understands, and its devices map onto the node inventory's GPUs by UUID."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from scheduler.core.dra.allocator import Outcome, allocate
from scheduler.core.dra.cel import Selectors
from scheduler.core.dra.inuse import InUse
from scheduler.core.model.dra import DeviceClass, DeviceRequest, ExactRequest, ResourceClaim
from scheduler.core.model.names import GPUS_ANNOTATION
from scheduler.core.model.objects import NodeInput
from scheduler.core.resources.inventory import Inventory, read_inventory
from scheduler.kube.dracodec import convert_device_class, convert_resource_slice
from scheduler.testing.dradriver import (
    CHANNEL_CLASS,
    GPU_CLASS,
    GPU_DRIVER,
    H100,
    IMEX_DRIVER,
    MIG_CLASS,
    V100,
    device_classes,
    gpu_slices,
    imex_slice,
    pci_bus_id,
    pcie_root,
    to_json,
)

NODE = "n1"
# Four GPUs: 0-1 only across sockets (SYS), 2-3 an NVLink pair: first fit takes 0 and 1, the
# best pair is 2 and 3, which only a mapping of the devices onto the inventory can tell.
LINKS = [
    ["X", "SYS", "PHB", "PHB"],
    ["SYS", "X", "PHB", "PHB"],
    ["PHB", "PHB", "X", "NV4"],
    ["PHB", "PHB", "NV4", "X"],
]
INVENTORY: dict[str, Any] = {
    "vendor": "nvidia",
    "devices": [{"index": i, "uuid": f"GPU-{NODE}-{i}", "memoryMiB": 32768} for i in range(4)],
    "links": LINKS,
}
CLASSES = {c.name: c for c in (convert_device_class(to_json(d)) for d in device_classes())}


def inventory() -> Inventory:
    raw = json.dumps(INVENTORY)
    found = read_inventory(NodeInput(name=NODE, annotations={GPUS_ANNOTATION: raw}))
    assert found is not None
    return found


def claim(*requests: tuple[str, str, int, str]) -> ResourceClaim:
    """(request name, class, count, CEL selector or "") per request."""
    built = tuple(
        DeviceRequest(name, exactly=ExactRequest(cls, selectors=(cel,) if cel else (), count=n))
        for name, cls, n, cel in requests
    )
    return ResourceClaim("default", "c", uid="c", requests=built)


def run(c: ResourceClaim, slices: list[Any], inv: Inventory | None = None) -> Outcome:
    decoded = [convert_resource_slice(to_json(s)) for s in slices]
    return allocate([c], CLASSES, decoded, InUse(), NODE, {}, Selectors(), inv)


def devices(outcome: Outcome) -> list[str]:
    assert outcome.ok, outcome.reason
    return [r.device for a in outcome.allocations for r in a.results]


def test_one_slice_of_full_gpus_with_nvidias_attributes() -> None:
    (only,) = gpu_slices(NODE, INVENTORY, V100, node_uid="uid-1")
    raw = to_json(only)
    assert raw["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "uid-1"}
    ]
    spec = raw["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]) == (
        GPU_DRIVER,
        NODE,
        {"name": NODE, "generation": 1, "resourceSliceCount": 1},
    )
    gpu = spec["devices"][2]
    assert gpu["name"] == "gpu-2"
    assert gpu["attributes"]["uuid"] == {"string": f"GPU-{NODE}-2"}
    assert gpu["attributes"]["type"] == {"string": "gpu"}
    assert gpu["attributes"]["cudaComputeCapability"] == {"version": "7.0.0"}
    assert gpu["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": "0000:28:00.0"}
    assert gpu["attributes"]["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:20"}
    assert gpu["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 1}
    assert gpu["capacity"] == {"memory": {"value": "32768Mi"}}  # the inventory's memoryMiB
    decoded = convert_resource_slice(raw)
    assert [d.name for d in decoded.devices] == [f"gpu-{i}" for i in range(4)]


def test_the_devices_map_onto_the_inventory_by_uuid() -> None:
    slices = gpu_slices(NODE, INVENTORY, V100)
    two = claim(("gpus", GPU_CLASS, 2, ""))
    assert devices(run(two, slices)) == ["gpu-0", "gpu-1"]  # first fit, kube-scheduler's
    assert devices(run(two, slices, inventory())) == ["gpu-2", "gpu-3"]  # the NVLink pair


def test_the_partitionable_layout_counts_memory_slices_and_the_full_gpu() -> None:
    one_gpu = {"vendor": "nvidia", "devices": [{"index": 0, "uuid": "GPU-a"}]}
    slices = gpu_slices(NODE, one_gpu, H100, mig=True)
    counters, gpu0 = (to_json(s)["spec"] for s in slices)
    assert counters["pool"]["resourceSliceCount"] == 2 and "devices" not in counters
    (counter_set,) = counters["sharedCounters"]
    assert counter_set["name"] == "gpu-0-counter-set"
    assert counter_set["counters"]["memory-slice-7"] == {"value": "1"}
    assert counter_set["counters"]["copy-engines"] == {"value": "8"}
    names = [d["name"] for d in gpu0["devices"]]
    assert names[:3] == ["gpu-0", "gpu-0-mig-1g10gb-19-0", "gpu-0-mig-1g10gb-19-1"]
    mig = gpu0["devices"][1]["attributes"]
    assert mig["parentUUID"] == {"string": "GPU-a"} and "uuid" not in mig

    def small(n: int) -> ResourceClaim:
        profile = f"device.attributes['{GPU_DRIVER}'].profile == '1g.10gb'"
        return claim(("mig", MIG_CLASS, n, profile))

    assert len(devices(run(small(7), slices))) == 7
    assert not run(small(8), slices).ok  # seven placements
    # Two 3g.40gb take all eight memory slices: nothing else fits, not even the full GPU.
    half = f"device.attributes['{GPU_DRIVER}'].profile == '3g.40gb'"
    assert len(devices(run(claim(("mig", MIG_CLASS, 2, half)), slices))) == 2
    assert not run(claim(("mig", MIG_CLASS, 2, half), ("one", MIG_CLASS, 1, "")), slices).ok
    assert not run(claim(("mig", MIG_CLASS, 1, ""), ("gpu", GPU_CLASS, 1, "")), slices).ok


def test_the_imex_channel_and_the_charts_classes() -> None:
    channel = claim(("channel", CHANNEL_CLASS, 1, ""))
    assert devices(run(channel, [imex_slice(NODE)])) == ["channel-0"]
    assert to_json(imex_slice(NODE))["spec"]["driver"] == IMEX_DRIVER
    assert CLASSES[GPU_CLASS].extended_resource_name == "nvidia.com/gpu"
    plain = {d.metadata.name: d.spec.extended_resource_name for d in device_classes(False)}
    assert set(plain) == set(CLASSES) and not any(plain.values())
    assert isinstance(CLASSES[MIG_CLASS], DeviceClass)


def test_pci_locations_stay_valid_for_64_gpus() -> None:
    buses = [pci_bus_id(i) for i in range(64)]
    assert len(set(buses)) == 64
    assert all(re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:00\.0", b) for b in buses)
    assert [pcie_root(i) for i in (0, 1, 2, 17)] == [
        "pci0000:10",
        "pci0000:10",
        "pci0000:20",
        "pci0001:10",
    ]


def test_an_inventory_without_uuids_is_refused() -> None:
    with pytest.raises(ValueError, match="no uuid"):
        gpu_slices(NODE, {"vendor": "nvidia", "devices": [{"index": 0}]})


def test_consumable_shares_and_health_taints_as_nvidia_publishes_them() -> None:
    (shared,) = gpu_slices(NODE, INVENTORY, V100, shares="memory", unhealthy={1: "79"})
    gpu0, gpu1 = to_json(shared)["spec"]["devices"][:2]
    assert gpu0["allowMultipleAllocations"] is True
    assert gpu0["capacity"]["memory"] == {
        "value": "32768Mi",
        "requestPolicy": {
            "default": "32768Mi",
            "validRange": {"min": "1Mi", "max": "32768Mi", "step": "1Mi"},
        },
    }
    assert "taints" not in gpu0
    assert gpu1["taints"] == [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    (counted,) = gpu_slices(NODE, INVENTORY, V100, shares="4")
    capacity = to_json(counted)["spec"]["devices"][0]["capacity"]
    assert capacity["shares"]["value"] == "4"
    assert capacity["memory"]["requestPolicy"]["default"] == "0"
    decoded = convert_resource_slice(to_json(counted))
    assert decoded.devices[0].allow_multiple_allocations
    with pytest.raises(ValueError, match="shares"):
        gpu_slices(NODE, INVENTORY, V100, shares="some")
