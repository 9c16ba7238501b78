"""The agent's device plugin host against the test kubelet: serves where the node opted in, for
the GPUs the probe found, and says why when it cannot.

Real unix sockets and the real protocol (scheduler/testing/kubelet.py); the probe's result is
given by hand as an Inventory, the way the agent's poll loop hands it over.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import msgspec
import pytest

from scheduler.agent.plugin.host import PluginHost, plugin_config
from scheduler.agent.plugin.server import Injection
from scheduler.config.agent import DevicePluginSettings
from scheduler.core.resources.inventory import Device, Inventory
from scheduler.testing.kubelet import Kubelet
from tests.plugin_node import RESOURCE, UUIDS, bounded, dgx1_inventory, write_cdi_spec

OPT_IN = {"topo-scheduler.io/device-plugin": "true"}


class Node:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.kubelet = Kubelet(root, RESOURCE)
        settings = DevicePluginSettings(
            resource_name=RESOURCE,
            cdi_spec_dirs=(str(root / "cdi"),),
            plugin_dir=str(self.kubelet.plugin_dir),
            pod_resources_socket=str(self.kubelet.pod_resources_socket),
        )
        # Faster than the 1 s default at noticing kubelet restarts; nothing else differs.
        config = dataclasses.replace(plugin_config(settings), watch_interval=0.05)
        self.host = PluginHost(settings, self.no_pods, publish=None, config=config)

    async def no_pods(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return None

    async def registered(self, count: int) -> None:
        await bounded(self.kubelet.wait_for(lambda: len(self.kubelet.registrations) >= count))


@pytest.fixture
async def node() -> AsyncIterator[Node]:
    root = Path(tempfile.mkdtemp(prefix="ph-", dir="/tmp"))  # short: unix socket paths
    write_cdi_spec(root / "cdi", UUIDS)
    n = Node(root)
    await n.kubelet.start()
    try:
        yield n
    finally:
        await n.host.stop()
        await n.kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


def with_devices(inventory: Inventory, devices: tuple[Device, ...]) -> Inventory:
    return msgspec.structs.replace(inventory, devices=devices)


def test_settings_become_the_plugin_config() -> None:
    settings = DevicePluginSettings(mode="adopt", injection="env", cdi_spec_dirs=("/x",))
    config = plugin_config(settings)
    assert config.resource_name == "topo-scheduler.io/gpu"
    assert config.mode.value == "adopt" and config.injection is Injection.ENV
    assert config.plugin_dir == Path("/var/lib/kubelet/device-plugins")
    assert config.pod_resources_socket == Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    assert config.cdi_spec_dirs == (Path("/x"),)


async def test_serves_only_on_a_node_that_opted_in(node: Node) -> None:
    inventory = dgx1_inventory()
    assert await node.host.update({"other": "label"}, inventory) is None
    assert node.host.server is None
    assert not any(node.kubelet.plugin_dir.glob("topo-scheduler.sock"))

    assert await node.host.update(OPT_IN, inventory) is None
    await node.registered(1)
    await bounded(node.kubelet.wait_for(lambda: node.kubelet.devices.updates > 0))
    assert node.kubelet.devices.health == dict.fromkeys(UUIDS, "Healthy")

    # Polls that find the same GPUs change nothing: no second registration.
    assert await node.host.update(OPT_IN, inventory) is None
    assert len(node.kubelet.registrations) == 1

    # The label removed: the plugin stops and its socket goes (the kubelet drops the resource).
    assert await node.host.update({}, inventory) is None
    assert node.host.server is None
    assert not (node.kubelet.plugin_dir / "topo-scheduler.sock").exists()


async def test_health_changes_reach_the_kubelet_without_registering_again(node: Node) -> None:
    inventory = dgx1_inventory()
    await node.host.update(OPT_IN, inventory)
    await bounded(node.kubelet.wait_for(lambda: node.kubelet.devices.updates > 0))
    sick = tuple(msgspec.structs.replace(d, healthy=d.index != 5) for d in inventory.devices)
    assert await node.host.update(OPT_IN, with_devices(inventory, sick)) is None
    await bounded(node.kubelet.wait_for(lambda: node.kubelet.devices.health[UUIDS[5]] != "Healthy"))
    assert node.kubelet.devices.health[UUIDS[5]] == "Unhealthy"
    assert len(node.kubelet.registrations) == 1


async def test_a_changed_device_list_registers_the_new_list(node: Node) -> None:
    inventory = dgx1_inventory()
    await node.host.update(OPT_IN, inventory)
    await node.registered(1)
    fewer = with_devices(inventory, inventory.devices[:4])
    assert await node.host.update(OPT_IN, fewer) is None
    await node.registered(2)
    await bounded(node.kubelet.wait_for(lambda: len(node.kubelet.devices.health) == 4))
    assert set(node.kubelet.devices.health) == set(UUIDS[:4])


async def test_missing_cdi_specs_are_a_problem_until_they_appear(node: Node) -> None:
    write_cdi_spec(node.root / "cdi", UUIDS[:7])  # the toolkit's spec lacks GPU 7
    problem = await node.host.update(OPT_IN, dgx1_inventory())
    assert problem is not None
    assert problem.startswith(f"device plugin {RESOURCE} not serving: ")
    assert UUIDS[7] in problem
    assert node.host.server is None and not node.kubelet.registrations

    write_cdi_spec(node.root / "cdi", UUIDS)  # fixed on the node: the next poll serves
    assert await node.host.update(OPT_IN, dgx1_inventory()) is None
    await node.registered(1)


async def test_a_node_of_another_vendor_is_a_problem(node: Node) -> None:
    metax = msgspec.structs.replace(dgx1_inventory(), vendor="metax")
    problem = await node.host.update(OPT_IN, metax)
    assert problem == f"device plugin {RESOURCE} serves NVIDIA GPUs; this node's are metax"
    assert node.host.server is None
