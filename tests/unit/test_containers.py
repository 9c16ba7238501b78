"""Per-container GPUs: a pod's GPUs are shared out to its containers (what the device plugin
hands each container), each container taking the best-connected part of what is left."""

from __future__ import annotations

import json

from scheduler.core.formats.assignment import assignment_annotations
from scheduler.core.model.decisions import Placed, Placement
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.topologies import DGX1_V100

NV2 = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}


def only(decision: object) -> Placement:
    assert isinstance(decision, Placed), decision
    (p,) = decision.placements
    return p


def test_two_containers_of_two_gpus_each_get_an_nvlink_pair() -> None:
    state = cluster(MakeNode().Name("dgx").Links(DGX1_V100))
    pod = (
        MakePod()
        .Name("p")
        .Container("trainer", {"nvidia.com/gpu": "2"})
        .Container("logger", {"cpu": "1"})
        .Container("evaluator", {"nvidia.com/gpu": "2"})
    )
    p = only(schedule(state, pod)[0])
    assert [c.name for c in p.containers] == ["trainer", "evaluator"]
    trainer, evaluator = p.containers
    assert trainer.devices in NV2 and evaluator.devices in NV2
    assert sorted(trainer.devices + evaluator.devices) == list(p.devices)
    assert trainer.uuids == tuple(f"GPU-dgx-{i}" for i in trainer.devices)


def test_a_sidecar_comes_first_as_the_kubelet_allocates_and_the_annotation_names_both() -> None:
    state = cluster(MakeNode().Name("dgx").Links(DGX1_V100))
    pod = (
        MakePod()
        .Name("p")
        .Container("main", {"nvidia.com/gpu": "1"})
        .InitContainer("profiler", {"nvidia.com/gpu": "1"}, sidecar=True)
    )
    p = only(schedule(state, pod)[0])
    record = json.loads(assignment_annotations(p)["topo-scheduler.io/assignment"])
    containers = record["containers"]
    assert [c["name"] for c in containers] == ["profiler", "main"]
    assert sorted(c["devices"][0] for c in containers) == list(p.devices)
    assert all(c["uuids"] == [f"GPU-dgx-{c['devices'][0]}"] for c in containers)


def test_shared_gpu_pods_have_no_per_container_split() -> None:
    state = cluster(MakeNode().Name("n").Links(DGX1_V100))
    p = only(schedule(state, MakePod().Name("s").Shared(core=10))[0])
    assert p.containers == ()
    record = json.loads(assignment_annotations(p)["topo-scheduler.io/assignment"])
    assert record["containers"] == []
