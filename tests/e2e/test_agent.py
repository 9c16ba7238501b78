"""The node agent against the real apiserver, as deploy/'s agent identity (its ClusterRole, bound
by the control_plane fixture, is all it may use).

The probe reads captured nvidia-smi outputs from files (``agent.nvidia.topoFile``/``queryFile``,
a user feature: "probe from files"), which the tests rewrite to change or break the machine.
That a poll did not write is checked on the server: the apiserver's own request counter for
node PATCHes (KWOK's heartbeats are status PATCHes, counted apart) and the agent's managedFields
entry, which only a real change moves. KWOK rewrites node status all the time, so the node's
resourceVersion cannot show it. Waits count the agent's completed polls; nothing is timed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.agent.kube import FIELD_MANAGER, AgentApi
from scheduler.agent.loop import PROBE_FAILED_REASON, Agent, Outcome
from scheduler.agent.probe import Probed, Prober
from scheduler.config import parse_config
from scheduler.core.model.names import GPUS_ANNOTATION
from scheduler.core.model.objects import NodeInput
from scheduler.core.resources.inventory import Inventory, read_inventory
from scheduler.kube.client import api_client
from scheduler.testing.controlplane import ControlPlane
from tests.topologies import METAX8

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"
POLL_S = 0.05


async def admin(plane: ControlPlane, method: str, path: str, body: Any = None, **kw: Any) -> Any:
    return await asyncio.to_thread(plane.request, method, path, body, **kw)


async def node_of(plane: ControlPlane, name: str) -> dict[str, Any]:
    node: dict[str, Any] = await admin(plane, "GET", f"/api/v1/nodes/{name}")
    return node


def inventory_of(node: dict[str, Any]) -> Inventory:
    meta = node["metadata"]
    inventory = read_inventory(NodeInput(name=meta["name"], annotations=meta["annotations"]))
    assert inventory is not None
    return inventory


def agent_entry(node: dict[str, Any]) -> dict[str, Any] | None:
    for entry in node["metadata"].get("managedFields", []):
        if entry["manager"] == FIELD_MANAGER:
            return dict(entry)
    return None


async def node_patches(plane: ControlPlane) -> float:
    """Node PATCHes the apiserver served, metadata only (not KWOK's status heartbeats)."""
    text = (await admin(plane, "GET", "/metrics", raw=True)).decode()
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("apiserver_request_total{")
            and 'resource="nodes"' in line
            and 'verb="PATCH"' in line
            and 'subresource=""' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def warnings_about(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    selector = urllib.parse.quote(f"involvedObject.kind=Node,involvedObject.name={name}")
    events = await admin(
        plane, "GET", f"/api/v1/namespaces/default/events?fieldSelector={selector}"
    )
    return [e for e in events["items"] if e["reason"] == PROBE_FAILED_REASON]


async def polls(agent: Agent, more: int) -> None:
    await asyncio.wait_for(agent.wait_polls(agent.polls + more), 60)


@pytest.fixture
async def agent_api(control_plane: ControlPlane) -> AsyncIterator[AgentApi]:
    client = await api_client(str(control_plane.agent_kubeconfig))
    try:
        yield AgentApi(client)
    finally:
        await client.close()


async def test_agent_publishes_once_restores_and_keeps_the_last_topology_on_failure(
    control_plane: ControlPlane, agent_api: AgentApi, name: str, tmp_path: Path
) -> None:
    control_plane.create_gpu_node(name, None, gpus=8)
    topo, query = tmp_path / "topo.txt", tmp_path / "query.csv"
    shutil.copy(DATA / "dgx1-v100.topo.txt", topo)
    shutil.copy(DATA / "dgx1-v100.query.csv", query)
    config = parse_config(
        {"agent": {"nvidia": {"topoFile": str(topo), "queryFile": str(query)}}}
    ).agent
    agent = Agent(name, Prober(config), agent_api, poll_seconds=POLL_S)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop), name="agent")
    try:
        # 1. First poll: published, and the scheduler reads it as the DGX-1 it is.
        await polls(agent, 1)
        assert agent.last_outcome == Outcome.PATCHED
        node = await node_of(control_plane, name)
        inventory = inventory_of(node)
        assert [d.uuid for d in inventory.devices] == [
            f"GPU-3f1c2a10-0d6e-4b7a-9c41-5e2a8b7d000{i + 1}" for i in range(8)
        ]
        assert inventory.topology.scores[0][3] == 200 and inventory.topology.scores[0][5] == 10
        published = node["metadata"]["annotations"][GPUS_ANNOTATION]
        entry = agent_entry(node)
        assert entry is not None and entry["operation"] == "Update"

        # 2. Unchanged machine: polls go on, nothing is written.
        patches = await node_patches(control_plane)
        await polls(agent, 4)
        assert agent.outcomes[Outcome.UNCHANGED] >= 4 and agent.outcomes[Outcome.PATCHED] == 1
        assert await node_patches(control_plane) == patches
        node = await node_of(control_plane, name)
        assert agent_entry(node) == entry
        assert node["metadata"]["annotations"][GPUS_ANNOTATION] == published

        # 3. Someone else overwrites the annotation: the agent puts the truth back, once.
        other = json.dumps({"vendor": "nvidia", "devices": [{"index": 0}]})
        await admin(
            control_plane,
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"metadata": {"annotations": {GPUS_ANNOTATION: other}}},
            content_type="application/merge-patch+json",
        )
        await polls(agent, 2)
        assert agent.outcomes[Outcome.PATCHED] == 2
        node = await node_of(control_plane, name)
        assert node["metadata"]["annotations"][GPUS_ANNOTATION] == published

        # 4. The probe breaks: the last annotation stays, one Warning names node, file and line
        #    (not one per poll: the message is the same).
        lines = (DATA / "dgx1-v100.topo.txt").read_text().splitlines()
        lines[2] = lines[2].replace("NV1 ", "NVX ", 1)
        topo.write_text("\n".join(lines) + "\n")
        await polls(agent, 1)  # a poll under way may have read the file before the change
        patches = await node_patches(control_plane)
        failed_before = agent.outcomes[Outcome.PROBE_FAILED]
        await polls(agent, 4)
        assert agent.outcomes[Outcome.PROBE_FAILED] - failed_before == 4
        node = await node_of(control_plane, name)
        assert node["metadata"]["annotations"][GPUS_ANNOTATION] == published
        assert await node_patches(control_plane) == patches
        warnings = await warnings_about(control_plane, name)
        assert len(warnings) == 1, warnings
        event = warnings[0]
        assert event["type"] == "Warning"
        assert event["involvedObject"] == {
            "kind": "Node",
            "name": name,
            "uid": node["metadata"]["uid"],
            "apiVersion": "v1",
        }
        assert event["message"] == (
            "GPU topology probe failed (keeping the last published topology): "
            f"{topo}:3: row GPU1, column GPU0: unknown link code 'NVX'"
        )
        assert event["source"]["component"] == "topo-scheduler-agent"

        # 5. A different failure is a new Warning (the matrix is fine again, the device list
        #    is not).
        shutil.copy(DATA / "dgx1-v100.topo.txt", topo)
        query.write_text("0, GPU-a, 1, 0:1\n")
        await polls(agent, 2)
        warnings = await warnings_about(control_plane, name)
        assert len(warnings) == 2
        assert any(f"{query} lists GPUs 0, but {topo} has 8 GPUs" in w["message"] for w in warnings)

        # 6. The machine changes (another capture): published at the next poll.
        shutil.copy(DATA / "asus-esc8000a-e12-nics.topo.txt", topo)
        shutil.copy(DATA / "asus-esc8000a-e12.query.csv", query)
        patched = agent.outcomes[Outcome.PATCHED]
        await polls(agent, 2)
        assert agent.outcomes[Outcome.PATCHED] == patched + 1
        inventory = inventory_of(await node_of(control_plane, name))
        assert len(inventory.devices) == 4 and inventory.topology.scores[0][1] == 20
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_no_node_no_write(
    control_plane: ControlPlane, agent_api: AgentApi, name: str
) -> None:
    config = parse_config(
        {"agent": {"nvidia": {"topoFile": str(DATA / "h100-sxm5-8gpu.topo.txt")}}}
    )
    agent = Agent(name, Prober(config.agent), agent_api)
    assert await agent.poll() == Outcome.NODE_MISSING


def run_agent(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "topo-scheduler"
    return subprocess.run(
        [str(exe), "agent", "--once", "--kubeconfig", str(plane.agent_kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_cli_publishes_a_static_model_chosen_by_node_label(
    control_plane: ControlPlane, name: str, tmp_path: Path
) -> None:
    control_plane.create_gpu_node(
        name, None, gpus=8, resource="metax-tech.com/gpu", labels={"gpu-model": "c500"}
    )
    model = tmp_path / "c500.yaml"
    model.write_text(
        yaml.safe_dump(
            {
                "vendor": "metax",
                "devices": [{"index": i, "memoryMiB": 65536} for i in range(8)],
                "links": METAX8,
                "sgpuPerCard": 16,
            }
        )
    )
    config = tmp_path / "scheduler.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "agent": {
                    "models": [
                        {"name": "other", "nodeSelector": {"gpu-model": "x"}, "topologyFile": "/x"},
                        {
                            "name": "metax-c500",
                            "nodeSelector": {"gpu-model": "c500"},
                            "topologyFile": str(model),
                        },
                    ]
                }
            }
        )
    )
    args = ("--node", name, "--config", str(config))
    result = await asyncio.to_thread(run_agent, control_plane, *args)
    assert result.returncode == 0, result.stderr + result.stdout
    logs = [json.loads(line) for line in result.stdout.splitlines()]
    published = [line for line in logs if line["event"] == "topology published"]
    assert published and published[0]["source"] == "agent.models[1] (metax-c500)"
    node = await node_of(control_plane, name)
    inventory = inventory_of(node)
    assert (inventory.vendor, inventory.model, inventory.sgpu_per_card) == (
        "metax",
        "metax-c500",
        16,
    )
    assert inventory.topology.scores[0][1] == 100 and inventory.topology.scores[0][4] == 50

    # Again: nothing to write.
    patches = await node_patches(control_plane)
    result = await asyncio.to_thread(run_agent, control_plane, *args)
    assert result.returncode == 0, result.stderr
    assert await node_patches(control_plane) == patches

    # A broken model file: exit 1, the annotation stays, the node has a Warning.
    model.write_text("vendor: metax\ndevices: [{index: 0, memoryMib: 1}]\n")
    result = await asyncio.to_thread(run_agent, control_plane, *args)
    assert result.returncode == 1
    after = await node_of(control_plane, name)
    assert (
        after["metadata"]["annotations"][GPUS_ANNOTATION]
        == (node["metadata"]["annotations"][GPUS_ANNOTATION])
    )
    (warning,) = await warnings_about(control_plane, name)
    assert warning["message"].endswith(f"{model}: topology.devices[0].memoryMib: unknown field")


class CrashingProbe:
    async def probe(self, labels: dict[str, str]) -> Probed:
        raise RuntimeError("boom")


async def test_a_crashing_probe_is_a_reported_failure_not_a_dead_agent(
    control_plane: ControlPlane, agent_api: AgentApi, name: str
) -> None:
    control_plane.create_gpu_node(name, None, gpus=8)
    agent = Agent(name, CrashingProbe(), agent_api, poll_seconds=POLL_S)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop), name="agent")
    try:
        await polls(agent, 3)
        assert agent.outcomes[Outcome.PROBE_FAILED] == 3
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    (warning,) = await warnings_about(control_plane, name)
    assert warning["message"] == (
        "GPU topology probe failed (no topology published yet): internal error: RuntimeError: boom"
    )
    node = await node_of(control_plane, name)
    assert GPUS_ANNOTATION not in node["metadata"]["annotations"]
