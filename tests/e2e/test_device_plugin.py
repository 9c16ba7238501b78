"""The scheduler's choice made real on the node: live scheduler, real apiserver, our device plugin.

The live scheduler binds pods on a KWOK node; then the test kubelet (the kubelet's side of the
device plugin protocol, scheduler/testing/kubelet.py) admits them through our plugin, which reads
each pod's assignment from the real apiserver. No kubelet runs here, so admission order is ours
to choose: it is deliberately not the bind order.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient

from scheduler.agent.plugin.decide import Mode
from scheduler.core.model.names import ALLOCATED_ANNOTATION
from scheduler.kube.api import KubeApi
from scheduler.testing.controlplane import die_with_parent
from scheduler.testing.kubelet import Container, Kubelet, Pod
from tests.plugin_node import RESOURCE, UUIDS, bounded, gpu_node, write_cdi_spec
from tests.topologies import DGX1_V100

from .live import REPO, Scenario

NV2 = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}


def assigned(pod: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Container name -> the UUIDs the scheduler assigned it (the bind's annotation)."""
    record = json.loads(pod["metadata"]["annotations"]["topo-scheduler.io/assignment"])
    return {c["name"]: tuple(c["uuids"]) for c in record["containers"]}


def kubelet_pod(pod: dict[str, Any]) -> Pod:
    containers = tuple(
        Container(c["name"], int(c["resources"]["limits"].get(RESOURCE, "0")))
        for c in pod["spec"]["containers"]
    )
    return Pod(pod["metadata"]["namespace"], pod["metadata"]["name"], containers)


def allocated(pod: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Container name -> the UUIDs the device plugin reported it really got."""
    record = json.loads(pod["metadata"]["annotations"]["topo-scheduler.io/allocated"])
    return {c["name"]: tuple(c["uuids"]) for c in record["containers"]}


class Apiserver:
    """The plugin's two apiserver calls, as the agent makes them (KubeApi)."""

    def __init__(self, client: ApiClient) -> None:
        self.api = KubeApi(client)

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, str] | None:
        pod = await self.api.get_pod(namespace, name)
        return None if pod is None else pod.annotations

    async def publish(self, namespace: str, name: str, value: str) -> None:
        await self.api.annotate_pod(namespace, name, {ALLOCATED_ANNOTATION: value})


def dgx_node(scenario: Scenario) -> str:
    inventory = {
        "vendor": "nvidia",
        "devices": [{"index": i, "uuid": u} for i, u in enumerate(UUIDS)],
        "links": DGX1_V100,
    }
    return scenario.node("dgx", inventory, 8, RESOURCE)


async def wait_allocated(scenario: Scenario, names: list[str]) -> dict[str, dict[str, Any]]:
    for _ in range(300):
        pods = scenario.pods()
        if all(ALLOCATED_ANNOTATION in pods[n]["metadata"]["annotations"] for n in names):
            return pods
        await asyncio.sleep(0.1)
    raise AssertionError(f"not every pod of {names} got its allocated report")


async def test_pods_admitted_out_of_bind_order_get_exactly_their_assigned_gpus(
    scenario: Scenario, admin_api: ApiClient
) -> None:
    dgx_node(scenario)
    scenario.start_scheduler()
    gang = scenario.gang_labels("ddp", 2)
    scenario.pod("single", 1, RESOURCE)
    scenario.pod("pair", 2, RESOURCE)
    scenario.pod("two-containers", containers={"a": {RESOURCE: "1"}, "b": {RESOURCE: "2"}})
    scenario.pod("replica-0", 1, RESOURCE, labels=gang)
    scenario.pod("replica-1", 1, RESOURCE, labels=gang)
    names = ["single", "pair", "two-containers", "replica-0", "replica-1"]
    pods = await scenario.wait_bound(names)

    apiserver = Apiserver(admin_api)
    got: dict[str, dict[str, tuple[str, ...]]] = {}
    async with gpu_node(get_pod=apiserver.get_pod, publish=apiserver.publish) as node:
        for name in reversed(names):  # the kubelet admits in its own order, not bind order
            got[name] = await bounded(node.kubelet.admit(kubelet_pod(pods[name])))

    for name in names:
        assert got[name] == assigned(pods[name]), name
    every = [u for devices in got.values() for uuids in devices.values() for u in uuids]
    assert len(every) == len(set(every)) == 8  # every GPU, none to two containers
    joint = sorted(UUIDS.index(got[r]["main"][0]) for r in ("replica-0", "replica-1"))
    assert tuple(joint) in NV2  # the gang's replicas talk over NVLink
    (pair,) = got["pair"].values()
    assert tuple(sorted(UUIDS.index(u) for u in pair)) in NV2
    assert set(got["two-containers"]) == {"a", "b"}
    # What each container really got is published back to its pod.
    pods = await wait_allocated(scenario, names)
    for name in names:
        assert allocated(pods[name]) == got[name], name


async def test_adopt_publishes_the_devices_the_kubelet_gave_and_the_scheduler_follows(
    scenario: Scenario, admin_api: ApiClient
) -> None:
    dgx_node(scenario)
    scheduler = scenario.start_scheduler()
    scenario.pod("a", 1, RESOURCE)
    pods = await scenario.wait_bound(["a"])
    (x,) = assigned(pods["a"])["main"]
    apiserver = Apiserver(admin_api)
    async with gpu_node(
        mode=Mode.ADOPT, get_pod=apiserver.get_pod, publish=apiserver.publish
    ) as node:
        # A pod the apiserver does not know (static, or foreign) is admitted first; the plugin
        # cannot identify it and makes the same rule-1 choice the scheduler made for a.
        foreign = await bounded(node.kubelet.admit(Pod("default", "foreign", (Container("c", 1),))))
        assert foreign == {"c": (x,)}
        got = await bounded(node.kubelet.admit(kubelet_pod(pods["a"])))
    (y,) = got["main"]
    assert y != x  # adopt accepted what the kubelet could give
    pods = await wait_allocated(scenario, ["a"])
    assert allocated(pods["a"]) == {"main": (y,)}
    # The scheduler takes the report as the truth: y is a's now, so b never gets it.
    for _ in range(300):
        if any(e.get("event") == "bound pod moved GPUs" for e in scheduler.lines()):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"the scheduler never took the report\n{scheduler.tail()}")
    scenario.pod("b", 1, RESOURCE)
    pods = await scenario.wait_bound(["b"])
    assert assigned(pods["b"])["main"] != (y,)


DATA = REPO / "tests" / "data" / "nvidia-smi"


def captured_uuids() -> list[str]:
    lines = (DATA / "dgx1-v100.query.csv").read_text().splitlines()
    return [line.split(",")[1].strip() for line in lines if line.strip()]


async def test_the_agent_process_serves_the_plugin_under_deploys_agent_identity(
    scenario: Scenario,
) -> None:
    """`topo-scheduler agent --device-plugin` as deploy/'s DaemonSet runs it (its own identity
    and role), on an opted-in node: it publishes the node's topology from captured nvidia-smi
    outputs, registers with the kubelet, and gives bound pods exactly their assigned GPUs."""
    uuids = captured_uuids()
    root = Path(tempfile.mkdtemp(prefix="ag-", dir="/tmp"))  # short: unix socket paths
    kubelet = Kubelet(root, RESOURCE)
    write_cdi_spec(root / "cdi", uuids)
    node = f"{scenario.id}-dgx"
    scenario.plane.create_gpu_node(
        node,
        None,  # no inventory yet: the agent publishes it
        gpus=8,
        resource=RESOURCE,
        labels={"test": scenario.id, "topo-scheduler.io/device-plugin": "true"},
    )
    config = scenario.dir / "agent.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "agent": {
                    "pollSeconds": 0.5,
                    "nvidia": {
                        "topoFile": str(DATA / "dgx1-v100.topo.txt"),
                        "queryFile": str(DATA / "dgx1-v100.query.csv"),
                    },
                    "devicePlugin": {
                        "pluginDir": str(kubelet.plugin_dir),
                        "podResourcesSocket": str(kubelet.pod_resources_socket),
                        "cdiSpecDirs": [str(root / "cdi")],
                    },
                }
            }
        )
    )
    log = scenario.dir / "agent.log"
    # Both processes are started before this process serves gRPC (the test kubelet): forking
    # while gRPC threads are busy is unsafe. The agent's plugin retries its registration until
    # the kubelet serves.
    scenario.start_scheduler()
    agent = subprocess.Popen(
        [
            sys.executable, "-m", "scheduler", "agent", "--device-plugin",
            "--node", node, "--config", str(config),
            "--kubeconfig", str(scenario.plane.agent_kubeconfig),
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )  # fmt: skip
    try:
        await kubelet.start()
        await bounded(kubelet.wait_for(lambda: kubelet.devices.updates > 0))
        assert kubelet.registrations[0].resource_name == RESOURCE
        assert kubelet.devices.health == dict.fromkeys(uuids, "Healthy")

        gang = scenario.gang_labels("ddp", 2)
        scenario.pod("pair", 2, RESOURCE)
        scenario.pod("replica-0", 1, RESOURCE, labels=gang)
        scenario.pod("replica-1", 1, RESOURCE, labels=gang)
        scenario.pod("single", 1, RESOURCE)
        names = ["pair", "replica-0", "replica-1", "single"]
        pods = await scenario.wait_bound(names)  # on the inventory the agent published
        got = {}
        for name in reversed(names):  # not the bind order
            got[name] = await bounded(kubelet.admit(kubelet_pod(pods[name])))
        for name in names:
            assert got[name] == assigned(pods[name]), name
        joint = sorted(uuids.index(got[r]["main"][0]) for r in ("replica-0", "replica-1"))
        assert tuple(joint) in NV2
        # The reports are written by the agent's identity: its role allows exactly that.
        pods = await wait_allocated(scenario, names)
        for name in names:
            assert allocated(pods[name]) == got[name], name
    finally:
        if agent.poll() is None:
            agent.terminate()  # SIGTERM: reports in flight land, the socket goes
        code = agent.wait(timeout=30)
        socket_left = (kubelet.plugin_dir / "topo-scheduler.sock").exists()
        await kubelet.stop()
        text = log.read_text(errors="replace")
        shutil.rmtree(root, ignore_errors=True)
    assert code == 0, text[-3000:]
    events = [json.loads(line).get("event") for line in text.splitlines() if line.startswith("{")]
    assert "topology published" in events and "device plugin serving" in events
    assert not socket_left
