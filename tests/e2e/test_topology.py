"""Cross-node topology end to end (issue 21): KWOK nodes labelled as blocks, racks and NVLink
cliques, gangs written our way, Kueue's way and KAI's way, each checked member by member (node
and GPUs) against the only placement their constraint allows.

One block of three racks: r1 with two 4-GPU nodes, r2 with three 4-GPU nodes, r3 with one 8-GPU
node; three gangs in a row, each with one rack left that its constraint allows. The scheduler
runs as a real process under deploy/'s role, configured with the block and rack levels; KAI's
Topology CRD (a stand-in with its group, version and shape) is installed before it starts, so
its Topology objects are watched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.kube.topologies import KAI_TOPOLOGIES
from scheduler.testing.controlplane import ControlPlane

from .live import Scenario, devices_of

BLOCK = "e2e.topo-scheduler.io/block"
RACK = "e2e.topo-scheduler.io/rack"
CLIQUE = "nvidia.com/gpu.clique"
INDEX = "batch.kubernetes.io/job-completion-index"

KAI_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": KAI_TOPOLOGIES.name},
    "spec": {
        "group": KAI_TOPOLOGIES.group,
        "scope": "Cluster",
        "names": {"kind": "Topology", "listKind": "TopologyList", "plural": "topologies"},
        "versions": [
            {
                "name": KAI_TOPOLOGIES.version,
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "levels": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "nodeLabel": {"type": "string"},
                                                "alias": {"type": "string"},
                                            },
                                        },
                                    }
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def kai_crd(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("crds") / "kai-topology-crd.yaml"
    path.write_text(yaml.safe_dump(KAI_CRD))
    (name,) = control_plane.apply_crds((path,))
    try:
        yield name
    finally:
        control_plane.delete_crd(name)


def configure(scenario: Scenario) -> None:
    scenario.config.write_text(
        scenario.config.read_text()
        + "topology:\n"
        + f"  levels: [{{nodeLabel: {BLOCK}, alias: block}}, {{nodeLabel: {RACK}, alias: rack}}]\n"
    )


def node(scenario: Scenario, rack: str, i: int, gpus: int) -> str:
    name = f"{scenario.id}-{rack}-{i}"
    block = f"b-{scenario.id}"
    scenario.plane.create_gpu_node(
        name,
        {"vendor": "nvidia", "devices": [{"index": d} for d in range(gpus)]},
        gpus=gpus,
        labels={"test": scenario.id, BLOCK: block, RACK: rack, CLIQUE: f"{block}.{rack}"},
    )
    return name


def members(
    scenario: Scenario, job: str, count: int, gpus: int, annotations: dict[str, str]
) -> list[str]:
    names = []
    for rank in reversed(range(count)):  # created last rank first: the rank label orders them
        name = f"{job}-{rank}"
        labels = {**scenario.gang_labels(job, count), INDEX: str(rank)}
        scenario.pod(name, gpus, labels=labels, annotations=annotations)
        names.append(name)
    return sorted(names)


def assignment(pod: dict[str, Any]) -> dict[str, Any]:
    raw = pod["metadata"]["annotations"]["topo-scheduler.io/assignment"]
    record: dict[str, Any] = json.loads(raw)
    return record


@pytest.mark.usefixtures("kai_crd")
async def test_gangs_of_ours_kueue_and_kai_stay_in_their_racks(
    scenario: Scenario, tmp_path: Path
) -> None:
    configure(scenario)
    r1 = [node(scenario, "r1", i, 4) for i in range(2)]
    r2 = [node(scenario, "r2", i, 4) for i in range(3)]
    (r3,) = [node(scenario, "r3", 0, 8)]
    scenario.plane.request(
        "POST",
        f"/apis/{KAI_TOPOLOGIES.api_version}/topologies",
        {
            "apiVersion": KAI_TOPOLOGIES.api_version,
            "kind": "Topology",
            "metadata": {"name": f"{scenario.id}-dc"},
            "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK, "alias": "shelf"}]},
        },
    )
    scenario.start_scheduler()

    # Ours: 3 x 4 GPUs in one rack: only r2 has three nodes.
    ours = members(scenario, "ours", 3, 4, {"topo-scheduler.io/topology-required": "rack"})
    pods = await scenario.wait_bound(ours, tries=200)
    assert {pods[n]["spec"]["nodeName"] for n in ours} == set(r2)
    for name in ours:
        assert devices_of(pods[name]) == [0, 1, 2, 3]
        record = assignment(pods[name])
        assert record["topology"]["rack"] == "r2"
        assert record["rank"] == int(name.rsplit("-", 1)[1])

    # Kueue's: 2 x 4 GPUs in one rack by its label key. r1 and r3 both hold exactly two:
    # BestFit's tie goes to the fewest nodes, r3's one 8-GPU node, where consecutive ranks share
    # it, each with its own half of the GPUs.
    kueue = members(scenario, "kueue", 2, 4, {"kueue.x-k8s.io/podset-required-topology": RACK})
    pods = await scenario.wait_bound(kueue, tries=200)
    assert {pods[n]["spec"]["nodeName"] for n in kueue} == {r3}
    got = [set(devices_of(pods[n])) for n in kueue]
    assert got[0] | got[1] == set(range(8)) and not got[0] & got[1]

    # KAI's: 2 x 4 GPUs in one "shelf" (its Topology's alias of the rack level): r1 is left.
    kai = members(
        scenario,
        "kai",
        2,
        4,
        {
            "kai.scheduler/topology": f"{scenario.id}-dc",
            "kai.scheduler/topology-required-placement": "shelf",
        },
    )
    pods = await scenario.wait_bound(kai, tries=200)
    assert {pods[n]["spec"]["nodeName"] for n in kai} == set(r1)
    assert all(devices_of(pods[n]) == [0, 1, 2, 3] for n in kai)
    assert assignment(pods[kai[0]])["topology"] == {BLOCK: f"b-{scenario.id}", "shelf": "r1"}

    # A fourth gang asking for a rack that no longer exists free waits with the shortfall.
    late = members(scenario, "late", 2, 4, {"topo-scheduler.io/topology-required": "rack"})
    reason = await scenario.wait_condition(late[0], "needs 2 pods in one rack")
    assert "needs 2 pods in one rack; no rack fits one" in reason, reason


async def test_a_gang_preempts_within_one_rack(scenario: Scenario) -> None:
    # Two racks of two 4-GPU nodes, every node held by a low-priority pod, then r1's second pod
    # gone: a high-priority gang of 2 x 4 GPUs in one rack costs one eviction in r1, two in r2.
    configure(scenario)
    r1 = [node(scenario, "r1", i, 4) for i in range(2)]
    r2 = [node(scenario, "r2", i, 4) for i in range(2)]
    low, high = f"{scenario.id}-low", f"{scenario.id}-high"
    scenario.plane.create_priority_class(low, 10)
    scenario.plane.create_priority_class(high, 1000)
    scenario.start_scheduler()
    for i in range(4):
        scenario.pod(f"low-{i}", 4, priority_class=low)
    pods = await scenario.wait_bound([f"low-{i}" for i in range(4)])
    where = {pods[f"low-{i}"]["spec"]["nodeName"]: f"low-{i}" for i in range(4)}
    assert set(where) == set(r1 + r2)
    scenario.delete_pod(where[r1[1]])
    labels = scenario.gang_labels("high", 2)
    required = {"topo-scheduler.io/topology-required": "rack"}
    for rank in range(2):
        scenario.pod(
            f"high-{rank}",
            4,
            labels={**labels, INDEX: str(rank)},
            annotations=required,
            priority_class=high,
        )
    pods = await scenario.wait_bound(["high-0", "high-1"], tries=300)
    assert {pods[f"high-{r}"]["spec"]["nodeName"] for r in range(2)} == set(r1)
    left = scenario.pods()
    # r1's low pod was evicted; r2's two were not touched.
    assert where[r1[0]] not in left or left[where[r1[0]]]["metadata"].get("deletionTimestamp")
    for name in (r2[0], r2[1]):
        pod = left[where[name]]
        assert pod["spec"]["nodeName"] == name and not pod["metadata"].get("deletionTimestamp")
