"""The public annotation formats (scheduler/core/formats/): round trips, and bounded input.

Issue 12, item 8: a ``topo-scheduler.io/devices`` index of 1,000,000 used to make ``bits()`` block
the event loop for seconds per reconcile, and an inventory with device index 10,000 built a
10,000 x 10,000 matrix. Every such value is now refused before any work grows with it, with a
warning naming the pod or node and the field.
"""

from __future__ import annotations

import json

import pytest

from scheduler.agent.plugin.decide import AssignmentError, read_assignment
from scheduler.core.formats import FormatError
from scheduler.core.formats import allocated as allocated_format
from scheduler.core.formats import assignment as assignment_format
from scheduler.core.formats import devices as devices_format
from scheduler.core.formats import gpus as gpus_format
from scheduler.core.formats.allocated import AllocatedContainer, AllocatedRecord
from scheduler.core.formats.assignment import assignment_annotations
from scheduler.core.formats.gpus import MAX_DEVICES, DeviceEntry, GpuAnnotation
from scheduler.core.model.decisions import Placed
from scheduler.core.model.names import (
    ALLOCATED_ANNOTATION,
    ASSIGNMENT_ANNOTATION,
    DEVICES_ANNOTATION,
    GPUS_ANNOTATION,
    HAMI_REGISTER_ANNOTATION,
)
from scheduler.core.resources.gpusets import Topologies
from scheduler.core.resources.inventory import (
    InventoryError,
    check_annotation,
    inventory_json,
    read_inventory,
)
from scheduler.core.snapshot.cluster import ClusterState
from tests.builders import MakeNode, MakePod, cluster, schedule


def raw_inventory(indices: list[int], **extra: object) -> str:
    return json.dumps({"vendor": "nvidia", "devices": [{"index": i} for i in indices], **extra})


def node_warning(raw: str, name: str = "big") -> str:
    state = ClusterState()
    warning = state.set_node(MakeNode().Name(name).RawInventory(raw).Obj())
    assert warning is not None
    assert state.nodes[name].inventory is None  # excluded from GPU scheduling
    return warning


# ---- topo-scheduler.io/devices -------------------------------------------------------------


def test_devices_round_trip_and_bounds() -> None:
    assert devices_format.decode(devices_format.encode((0, 3, 63))) == (0, 3, 63)
    assert devices_format.decode(" ") == ()
    for raw, detail in [
        ("1,x", "'x' is not a GPU index"),
        ("-1", "negative index -1"),
        (str(MAX_DEVICES), f"index {MAX_DEVICES} is not below {MAX_DEVICES}"),
        ("1000000", "index 1000000 is not below 64"),
        ("0," * 600, "bytes, more than the 1024 allowed"),
    ]:
        with pytest.raises(FormatError, match=f"annotation {DEVICES_ANNOTATION}: ") as exc:
            devices_format.decode(raw)
        assert detail in str(exc.value)


def test_a_devices_index_of_a_million_is_refused_with_a_warning_naming_pod_and_field() -> None:
    state = cluster(MakeNode().Name("n").GPUs(8))
    pod = MakePod().Name("huge").Req(1).Bound("n", "1,1000000").Obj()
    warning = state.add_bound_pod(pod)
    assert warning == (
        f"pod default/huge: annotation {DEVICES_ANNOTATION}: index 1000000 is not below 64; "
        "its GPUs are not tracked"
    )
    assert "default/huge" not in state.holdings
    # The node keeps working.
    (decision,) = schedule(state, MakePod().Name("next").Req(8))
    assert isinstance(decision, Placed)


def test_an_oversized_devices_annotation_is_refused() -> None:
    state = cluster(MakeNode().Name("n").GPUs(8))
    pod = MakePod().Name("long").Req(1).Bound("n", "0" * 5000).Obj()
    warning = state.add_bound_pod(pod)
    assert warning is not None
    assert warning.startswith(f"pod default/long: annotation {DEVICES_ANNOTATION}: 5000 bytes")


# ---- topo-scheduler.io/gpus ----------------------------------------------------------------


def test_an_inventory_of_64_devices_is_read() -> None:
    node = MakeNode().Name("wide").RawInventory(raw_inventory(list(range(MAX_DEVICES)))).Obj()
    inventory = read_inventory(node)
    assert inventory is not None and len(inventory.devices) == MAX_DEVICES


def test_an_inventory_of_more_than_64_devices_is_refused() -> None:
    warning = node_warning(raw_inventory(list(range(MAX_DEVICES + 1))))
    assert warning.startswith(
        f"node big: annotation {GPUS_ANNOTATION}: devices: 65 devices, more than the 64 allowed"
    )


def test_a_device_index_of_10000_is_refused_before_any_matrix_is_built() -> None:
    warning = node_warning(raw_inventory([0, 10_000]))
    assert f"node big: annotation {GPUS_ANNOTATION}: devices[1].index: 10000 is not below 64" in (
        warning
    )


def test_a_links_matrix_of_10000_rows_is_refused_before_it_is_built() -> None:
    warning = node_warning(raw_inventory([0, 1], links=[[]] * 10_000))
    assert "links: 10000 rows, more than the 64 allowed" in warning


def test_an_oversized_inventory_is_refused() -> None:
    warning = node_warning(raw_inventory([0], model="x" * (gpus_format.MAX_BYTES + 1)))
    assert f"annotation {GPUS_ANNOTATION}: " in warning and "bytes, more than the 65536" in warning


def test_hami_inventories_keep_the_same_bounds() -> None:
    def hami(register: object) -> str:
        node = (
            MakeNode()
            .Name("h")
            .NoGPUs()
            .Annotation(HAMI_REGISTER_ANNOTATION, json.dumps(register))
            .Obj()
        )
        with pytest.raises(InventoryError) as exc:
            read_inventory(node)
        return str(exc.value)

    assert "[0].index: 10000 is not below 64" in hami([{"id": "GPU-0", "index": 10_000}])
    many = [{"id": f"GPU-{i}", "index": i} for i in range(MAX_DEVICES + 1)]
    assert "65 devices, more than the 64 allowed" in hami(many)


def test_the_agent_never_publishes_an_inventory_beyond_the_bounds() -> None:
    annotation = GpuAnnotation(
        vendor="nvidia", devices=tuple(DeviceEntry(index=i) for i in range(MAX_DEVICES + 1))
    )
    with pytest.raises(InventoryError, match="more than the 64 allowed"):
        check_annotation(gpus_format.encode(annotation), "n")


def test_gpus_encode_is_canonical_and_read_back() -> None:
    annotation = GpuAnnotation(
        vendor="nvidia",
        devices=(DeviceEntry(index=0, uuid="GPU-a"), DeviceEntry(index=1, uuid="GPU-b")),
        links=(("X", "NV2"), ("NV2", "X")),
    )
    text = gpus_format.encode(annotation)
    assert text == (
        '{"vendor":"nvidia","devices":[{"index":0,"uuid":"GPU-a"},{"index":1,"uuid":"GPU-b"}],'
        '"links":[["X","NV2"],["NV2","X"]]}'
    )
    topologies = Topologies()  # one snapshot's: the same matrix is the same Topology
    inventory = check_annotation(text, "n", topologies)
    # The store's copy reads back to the same inventory.
    stored = inventory_json(inventory)
    again = read_inventory(MakeNode().Name("n").RawInventory(stored).Obj(), topologies)
    assert again == inventory


# ---- topo-scheduler.io/assignment ------------------------------------------------------------


def test_assignment_annotations_read_back() -> None:
    state = cluster(MakeNode().Name("n").GPUs(4))
    (decision,) = schedule(state, MakePod().Name("p").Req(2))
    assert isinstance(decision, Placed)
    placement = decision.placements[0]
    annotations = assignment_annotations(placement)
    assert devices_format.decode(annotations[DEVICES_ANNOTATION]) == placement.devices
    record = assignment_format.decode(annotations[ASSIGNMENT_ANNOTATION])
    assert record.node == "n"
    assert [(d.index, d.uuid) for d in record.devices] == list(
        zip(placement.devices, placement.uuids, strict=True)
    )
    assert record.containers is not None
    assert [(c.name, tuple(c.devices), tuple(c.uuids)) for c in record.containers] == [
        (c.name, c.devices, c.uuids) for c in placement.containers
    ]
    assert assignment_format.encode(record) == annotations[ASSIGNMENT_ANNOTATION]


def test_assignment_indices_and_size_are_bounded() -> None:
    share = {"index": 1_000_000, "uuid": "u", "core": 10, "memoryMiB": 1}
    for body, detail in [
        ({"node": "n", "shares": [share]}, "shares: index 1000000 is not in 0..63"),
        ({"node": "n", "devices": [{"index": -2, "uuid": "u"}]}, "devices: index -2"),
        ({"node": "n" * (assignment_format.MAX_BYTES + 1)}, "bytes, more than the 32768"),
    ]:
        with pytest.raises(FormatError, match=f"annotation {ASSIGNMENT_ANNOTATION}: ") as exc:
            assignment_format.decode(json.dumps(body))
        assert detail in str(exc.value)
    # The core names the pod; the device plugin refuses it as a malformed assignment.
    state = cluster(MakeNode().Name("n").GPUs(4))
    pod = (
        MakePod()
        .Name("s")
        .Req(1)
        .Bound("n", "0")
        .Annotation(ASSIGNMENT_ANNOTATION, json.dumps({"node": "n", "shares": [share]}))
        .Obj()
    )
    warning = state.add_bound_pod(pod)
    assert warning is not None and warning.startswith(
        f"pod default/s: annotation {ASSIGNMENT_ANNOTATION}: shares: index 1000000"
    )
    with pytest.raises(AssignmentError, match="shares: index 1000000"):
        read_assignment({ASSIGNMENT_ANNOTATION: json.dumps({"node": "n", "shares": [share]})})


# ---- topo-scheduler.io/allocated -------------------------------------------------------------


def test_allocated_round_trip_and_bounds() -> None:
    record = AllocatedRecord([AllocatedContainer("main", ["GPU-a", "GPU-b"])])
    text = allocated_format.encode(record)
    assert text == '{"containers":[{"name":"main","uuids":["GPU-a","GPU-b"]}]}'
    assert allocated_format.decode(text) == record
    too_many = AllocatedRecord([AllocatedContainer("main", [f"G{i}" for i in range(65)])])
    with pytest.raises(FormatError, match="65 GPUs, more than the 64"):
        allocated_format.decode(allocated_format.encode(too_many))
    with pytest.raises(FormatError, match=f"annotation {ALLOCATED_ANNOTATION}: .* bytes"):
        allocated_format.decode(" " * (allocated_format.MAX_BYTES + 1))


def test_an_oversized_allocated_report_leaves_the_assignment_standing() -> None:
    state = cluster(MakeNode().Name("n").GPUs(4))
    pod = (
        MakePod()
        .Name("r")
        .Req(1)
        .Bound("n", "2")
        .Annotation(ALLOCATED_ANNOTATION, "x" * (allocated_format.MAX_BYTES + 1))
        .Obj()
    )
    warning = state.add_bound_pod(pod)
    assert warning is not None and warning.startswith(
        f"pod default/r: annotation {ALLOCATED_ANNOTATION}: "
    )
    assert warning.endswith("the assignment's GPUs are tracked instead")
    assert state.holdings["default/r"].whole == 1 << 2
