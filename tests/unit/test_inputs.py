"""Inventories (ours and HAMi's), pod requests, and bad input of each kind.

Bad input never crashes the core: a malformed inventory excludes that node with a warning naming
node and field; a malformed request makes that pod unschedulable with a reason naming the field.
"""

from __future__ import annotations

import json

import pytest

from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.resources.inventory import InventoryError, read_inventory
from scheduler.core.snapshot.cluster import ClusterState
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.topologies import DGX1_V100, PCIE8

GOOD = {
    "vendor": "nvidia",
    "devices": [{"index": 0}, {"index": 1}],
    "links": [["X", "NV1"], ["NV1", "X"]],
}


def inventory_error(raw: str) -> str:
    with pytest.raises(InventoryError) as exc:
        read_inventory(MakeNode().Name("gpu-3").RawInventory(raw).Obj())
    return str(exc.value)


def test_only_index_is_required_per_device() -> None:
    inv = read_inventory(MakeNode().Name("n").RawInventory(json.dumps(GOOD)).Obj())
    assert inv is not None
    assert [d.uuid for d in inv.devices] == ["n-gpu-0", "n-gpu-1"]
    assert all(d.healthy for d in inv.devices)
    assert inv.topology.scores[0][1] == 100


@pytest.mark.parametrize(
    "patch,field",
    [
        ({"vendor": "amd"}, "vendor"),
        ({"devices": []}, "devices"),
        ({"devices": [{"index": 0}, {"index": 0}]}, "devices[1].index"),
        ({"devices": [{"index": "zero"}]}, "devices[0].index"),
        ({"links": [["X", "NV1"], ["NV1"]]}, "links[1]"),
        ({"links": [["X", "NVX"], ["NVX", "X"]]}, "links[0][1]"),
        ({"links": [["X", "NV1"], ["PIX", "X"]]}, "links[0][1]: not symmetric"),
        ({"links": [["NV1", "NV1"], ["NV1", "X"]]}, "links[0][0]"),
        ({"links": None, "scores": [[0, 1], [2, 0]]}, "scores[0][1]: not symmetric"),
        ({"devices": [{"index": 0}, {"index": 5}]}, "links: 2x2 matrix but device index 5"),
        ({"scores": [[0, 1], [1, 0]]}, "links and scores"),
    ],
)
def test_malformed_inventory_names_node_annotation_and_field(
    patch: dict[str, object], field: str
) -> None:
    inv = {**GOOD, **patch}
    if inv.get("links") is None:
        inv.pop("links", None)
    message = inventory_error(json.dumps(inv))
    assert message.startswith("node gpu-3: annotation topo-scheduler.io/gpus: ")
    assert field in message


def test_inventory_that_is_not_json() -> None:
    assert "not valid JSON" in inventory_error("{vendor: nvidia")


def test_malformed_node_is_excluded_with_a_warning_and_others_still_work() -> None:
    state = ClusterState()
    warning = state.set_node(MakeNode().Name("bad").RawInventory('{"vendor": "nvidia"}').Obj())
    assert warning is not None and "node bad" in warning and "devices" in warning
    assert state.set_node(MakeNode().Name("good").Links(PCIE8).Obj()) is None
    (d,) = schedule(state, MakePod().Name("p").Req(8))
    assert isinstance(d, Placed)
    (e,) = schedule(state, MakePod().Name("q").Req(1))
    assert isinstance(e, Unschedulable)
    assert "1 has an invalid GPU inventory" in e.reason


def test_hami_json_register_and_scores() -> None:
    register = [
        {
            "id": f"GPU-{i}",
            "index": i,
            "count": 10,
            "devmem": 32768,
            "type": "NVIDIA-V100",
            "health": True,
        }
        for i in range(4)
    ]
    scores = [
        {
            "uuid": f"GPU-{i}",
            "score": {f"GPU-{j}": (200 if {i, j} == {2, 3} else 100) for j in range(4) if j != i},
        }
        for i in range(4)
    ]
    node = (
        MakeNode()
        .Name("hami")
        .NoGPUs()
        .Annotation("hami.io/node-nvidia-register", json.dumps(register))
        .Annotation("hami.io/node-nvidia-score", json.dumps(scores))
        .Obj()
    )
    inv = read_inventory(node)
    assert inv is not None and inv.vendor == "nvidia" and inv.model == "NVIDIA-V100"
    assert [d.uuid for d in inv.devices] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]
    assert inv.topology.scores[2][3] == 200
    state = cluster(node)
    (d,) = schedule(state, MakePod().Name("p").Req(2))
    assert isinstance(d, Placed) and d.placements[0].devices == (2, 3)


def test_hami_legacy_register_records() -> None:
    legacy = "GPU-a,10,32768,100,NVIDIA-T4,0,true:GPU-b,10,32768,100,NVIDIA-T4,0,false:"
    node = MakeNode().Name("old").NoGPUs().Annotation("hami.io/node-nvidia-register", legacy).Obj()
    inv = read_inventory(node)
    assert inv is not None
    assert [(d.index, d.uuid, d.healthy) for d in inv.devices] == [
        (0, "GPU-a", True),
        (1, "GPU-b", False),
    ]


def test_hami_score_naming_an_unknown_device_is_an_error() -> None:
    node = (
        MakeNode()
        .Name("h")
        .NoGPUs()
        .Annotation("hami.io/node-nvidia-register", json.dumps([{"id": "GPU-0", "index": 0}]))
        .Annotation("hami.io/node-nvidia-score", json.dumps([{"uuid": "GPU-9", "score": {}}]))
        .Obj()
    )
    with pytest.raises(
        InventoryError, match=r"node h: annotation hami.io/node-nvidia-score: \[0\].uuid"
    ):
        read_inventory(node)


def test_our_annotation_wins_over_hamis() -> None:
    node = (
        MakeNode()
        .Name("both")
        .Links(PCIE8)
        .Annotation("hami.io/node-nvidia-register", "garbage")
        .Obj()
    )
    inv = read_inventory(node)
    assert inv is not None and len(inv.devices) == 8


@pytest.mark.parametrize(
    "pod,reason",
    [
        (
            MakePod().Name("p").Req("1.5"),
            "containers[c0].resources.limits[nvidia.com/gpu]: '1.5' must be a whole",
        ),
        (MakePod().Name("p").Req("-1"), "must be a whole, non-negative number"),
        (MakePod().Name("p").Req("lots"), "'lots' is not a Kubernetes quantity"),
        (MakePod().Name("p").Req(1).Req(1, "metax-tech.com/gpu"), "GPUs of several vendors"),
        (
            MakePod().Name("p").Req(1).Shared(core=10),
            "whole GPUs (nvidia.com/gpu) and shared GPUs at once",
        ),
        (
            MakePod().Name("p").Req(1).GPUPolicy("fastest"),
            "annotation hami.io/gpu-scheduler-policy: 'fastest'",
        ),
        (
            MakePod().Name("p").Req(1).NodePolicy("pack"),
            "annotation hami.io/node-scheduler-policy: 'pack'",
        ),
        (
            MakePod().Name("p").Req(1).Gang("job", "two"),
            "label gpu-topology-replica: 'two' must be a positive",
        ),
        (MakePod().Name("p").Req(1).Gang("job", 0), "must be a positive integer"),
        (MakePod().Name("p").Req(1).Label("gpu-topology", "job"), "needs gpu-topology-replica"),
        (
            MakePod().Name("p").Req(1).Label("gpu-topology-replica", "2"),
            "gpu-topology (the job name) is missing",
        ),
        (
            MakePod().Name("p").Shared(core=10, sgpu=1, qos="turbo"),
            "metax-tech.com/sgpu-qos-policy: 'turbo'",
        ),
        (MakePod().Name("p").Shared(core=150), "more than 100 percent of one card"),
        (
            MakePod().Name("p").Shared(memory="1Gi", ratio=10),
            "set one of koordinator.sh/gpu-memory",
        ),
        (
            MakePod().Name("p").Shared(sgpu=1, cards=2, core=20),
            "MetaX sGPU serves one card per pod",
        ),
        (MakePod().Name("p").Shared(core=15, cards=2), "does not divide evenly over 2 shared GPUs"),
        (MakePod().Name("p").Shared(), "a shared GPU needs"),
        (
            MakePod().Name("p").Req(1).InitContainer("setup", {"nvidia.com/gpu": "1"}),
            "initContainers[setup] requests nvidia.com/gpu: GPUs on plain init containers",
        ),
    ],
)
def test_malformed_requests_make_the_pod_unschedulable_with_a_reason(
    pod: MakePod, reason: str
) -> None:
    state = cluster(MakeNode().Name("n").Links(DGX1_V100))
    (d,) = schedule(state, pod)
    assert isinstance(d, Unschedulable)
    assert d.reason.startswith("pod default/p: ") or d.reason.startswith("gang ")
    assert reason in d.reason


def test_gpus_sum_over_containers_and_sidecars() -> None:
    state = cluster(MakeNode().Name("n").Links(DGX1_V100))
    pod = (
        MakePod()
        .Name("p")
        .Req(2)
        .Req(1)
        .InitContainer("sidecar", {"nvidia.com/gpu": "1"}, sidecar=True)
    )
    (d,) = schedule(state, pod)
    assert isinstance(d, Placed) and len(d.placements[0].devices) == 4


def test_malformed_devices_annotation_on_a_running_pod_is_a_warning() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8))
    warning = state.add_bound_pod(MakePod().Name("r").Req(1).Bound("n", "zero").Obj())
    assert warning is not None
    assert (
        "pod default/r: annotation topo-scheduler.io/devices: 'zero' is not a GPU index" in warning
    )


def test_a_gpu_claimed_twice_by_running_pods_is_reported() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8))
    assert state.add_bound_pod(MakePod().Name("a").Req(1).Bound("n", "3").Obj()) is None
    warning = state.add_bound_pod(MakePod().Name("b").Req(1).Bound("n", "3").Obj())
    assert warning == "node n: GPU 3 claimed by default/b and by default/a"


def test_running_pod_of_another_scheduler_without_annotation_still_counts() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8))
    assert state.add_bound_pod(MakePod().Name("other").Req(6).Bound("n").Obj()) is None
    assert state.nodes["n"].free_mask.bit_count() == 2


def test_pod_event_before_its_node_is_kept_until_the_node_arrives() -> None:
    state = ClusterState()
    state.add_bound_pod(MakePod().Name("early").Req(2).Bound("late-node", "0,1").Obj())
    state.set_node(MakeNode().Name("late-node").Links(PCIE8).Obj())
    assert state.nodes["late-node"].free_mask == 0b11111100


def test_node_refresh_keeps_holdings_and_deleted_node_drops_them() -> None:
    state = cluster(
        MakeNode().Name("n").Links(PCIE8), running=(MakePod().Name("r").Req(2).Bound("n", "0,1"),)
    )
    state.set_node(MakeNode().Name("n").Links(PCIE8).Unhealthy(7).Obj())
    assert state.nodes["n"].free_mask == 0b01111100
    state.remove_node("n")
    assert "n" not in state.nodes and not state.classes


def test_assume_then_bound_event_replaces_the_assumed_holding() -> None:
    """The live flow: the core's placement is assumed, then the bound pod's event arrives."""
    from scheduler.core.cycle import Unit, apply_decision, decide
    from scheduler.core.formats.assignment import assignment_annotations

    state = cluster(MakeNode().Name("n").Links(DGX1_V100))
    pod = MakePod().Name("p").Req(2)
    unit = Unit(None, (pod.Obj(),))
    decision = decide(state, unit)
    assert isinstance(decision, Placed)
    apply_decision(state, decision, unit)
    apply_decision(state, decision, unit)  # applying twice must not charge twice
    held = state.nodes["n"].free_mask
    assert held.bit_count() == 6
    bound = pod.Bound("n")
    for key, value in assignment_annotations(decision.placements[0]).items():
        bound.Annotation(key, value)
    assert state.add_bound_pod(bound.Obj()) is None
    assert state.nodes["n"].free_mask == held
    state.remove_pod("default/p")
    assert state.nodes["n"].free_mask == 0xFF


def allocated(*uuids: str) -> str:
    return json.dumps({"containers": [{"name": "main", "uuids": list(uuids)}]})


def test_what_the_device_plugin_reports_allocated_is_the_truth() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8))
    pod = MakePod().Name("p").Req(2).Bound("n", "0,1")
    assert state.add_bound_pod(pod.Obj()) is None
    assert state.nodes["n"].free_mask == 0b11111100
    # The kubelet gave GPUs 4 and 5 (device plugin mode adopt): the snapshot follows.
    pod.Annotation("topo-scheduler.io/allocated", allocated("GPU-n-4", "GPU-n-5"))
    assert state.add_bound_pod(pod.Obj()) is None
    assert state.nodes["n"].free_mask == 0b11001111
    assert state.holdings["default/p"].whole == 0b110000


def test_an_allocated_annotation_naming_a_foreign_gpu_is_a_warning_and_loses_nothing() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8))
    pod = (
        MakePod()
        .Name("p")
        .Req(1)
        .Bound("n", "0")
        .Annotation("topo-scheduler.io/allocated", allocated("GPU-elsewhere-0"))
    )
    warning = state.add_bound_pod(pod.Obj())
    assert warning == (
        "pod default/p: annotation topo-scheduler.io/allocated: containers[0].uuids: "
        "'GPU-elsewhere-0' is not a GPU of node n; the assignment's GPUs are tracked instead"
    )
    assert state.holdings["default/p"].whole == 0b1
