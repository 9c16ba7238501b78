"""One GPU node for device plugin tests: the test kubelet, our plugin, and the pods' annotations.

The apiserver is replaced by ``Annotations`` (what the scheduler wrote at bind time), since
``get_pod`` is an injected callable; tests that need the real apiserver live in tests/e2e.
Sockets go under a short /tmp folder: unix socket paths are limited to 107 bytes, which pytest's
tmp_path can exceed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from scheduler.agent.plugin.decide import Mode
from scheduler.agent.plugin.identify import GetPod
from scheduler.agent.plugin.server import DevicePluginServer, Injection, PluginConfig, Publish
from scheduler.core.model.names import ASSIGNMENT_ANNOTATION
from scheduler.core.resources.gpusets import Topology, link_score
from scheduler.core.resources.inventory import Device, Inventory
from scheduler.testing.kubelet import Container, Kubelet, Pod
from tests.topologies import DGX1_V100

RESOURCE = "topo-scheduler.io/gpu"
UUIDS = [f"GPU-{i:08x}-0000-4000-8000-00000000000{i}" for i in range(8)]
# Failure detector for hangs, not a timing assertion: a healthy run takes milliseconds.
BOUND = 20.0

T = TypeVar("T")


async def bounded(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, BOUND)


def dgx1_inventory() -> Inventory:
    scores = [
        [0 if i == j else link_score(c) for j, c in enumerate(row)]
        for i, row in enumerate(DGX1_V100)
    ]
    devices = tuple(Device(index=i, uuid=u) for i, u in enumerate(UUIDS))
    return Inventory(vendor="nvidia", devices=devices, topology=Topology.of(scores))


def write_cdi_spec(folder: Path, uuids: Sequence[str]) -> None:
    """A CDI spec like NVIDIA's toolkit writes: each GPU by index and by UUID, plus "all"."""
    folder.mkdir(parents=True, exist_ok=True)
    edits = {"deviceNodes": [{"path": "/dev/nvidia0"}]}
    devices = [{"name": str(i), "containerEdits": edits} for i in range(len(uuids))]
    devices += [{"name": u, "containerEdits": edits} for u in uuids]
    devices.append({"name": "all", "containerEdits": edits})
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices}
    (folder / "nvidia.json").write_text(json.dumps(spec))


@dataclass
class Annotations:
    """The apiserver's view of each pod's annotations; ``get_pod`` is the plugin's reader."""

    pods: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    reads: int = 0
    delay: float = 0.0
    error: Exception | None = None
    # Pods that finished (Succeeded or Failed): read as None, as AgentApi.pod_annotations does.
    finished: set[tuple[str, str]] = field(default_factory=set)

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, str] | None:
        self.reads += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        if (namespace, name) in self.finished:
            return None
        return self.pods.get((namespace, name))

    def bind(
        self,
        pod: Pod,
        containers: Mapping[str, Sequence[str]] | None = None,
        devices: Sequence[str] = (),
    ) -> None:
        """Write the assignment the scheduler writes at bind time (per container, or old style)."""
        if containers is not None:
            devices = [u for c in pod.containers for u in containers.get(c.name, ())]
        body: dict[str, object] = {
            "node": "node-a",
            "devices": [{"index": UUIDS.index(u), "uuid": u} for u in devices],
            "shares": [],
            "gang": None,
        }
        if containers is not None:
            body["containers"] = [
                {"name": c.name, "uuids": list(containers[c.name])}
                for c in pod.containers
                if c.name in containers
            ]
        self.pods[(pod.namespace, pod.name)] = {ASSIGNMENT_ANNOTATION: json.dumps(body)}


def pod(name: str, *containers: tuple[str, int], namespace: str = "default") -> Pod:
    return Pod(namespace, name, tuple(Container(n, g) for n, g in containers))


@dataclass
class Node:
    kubelet: Kubelet
    plugin: DevicePluginServer
    annotations: Annotations
    inventory: Inventory


@asynccontextmanager
async def gpu_node(
    mode: Mode = Mode.STRICT,
    injection: Injection = Injection.CDI,
    identify_timeout: float = 2.0,
    inventory: Inventory | None = None,
    get_pod: GetPod | None = None,
    publish: Publish | None = None,
) -> AsyncIterator[Node]:
    """A node whose plugin serves ``inventory`` (default: a DGX-1 with ``UUIDS``) and reads pods
    with ``get_pod`` (default: the in-memory ``Annotations``)."""
    root = Path(tempfile.mkdtemp(prefix="tk-", dir="/tmp"))
    write_cdi_spec(root / "cdi", UUIDS)
    kubelet = Kubelet(root, RESOURCE)
    annotations = Annotations()
    inventory = inventory or dgx1_inventory()
    config = PluginConfig(
        resource_name=RESOURCE,
        plugin_dir=kubelet.plugin_dir,
        pod_resources_socket=kubelet.pod_resources_socket,
        mode=mode,
        injection=injection,
        watch_interval=0.05,
        identify_timeout=identify_timeout,
        cdi_spec_dirs=(root / "cdi",),
    )
    plugin = DevicePluginServer(config, inventory, get_pod or annotations.get_pod, publish=publish)
    try:
        await kubelet.start()
        await plugin.start()
        await bounded(kubelet.wait_for(lambda: kubelet.devices.updates > 0))
        yield Node(kubelet, plugin, annotations, inventory)
    finally:
        await plugin.stop()
        await kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
