"""When, and for which GPUs, the node agent serves the device plugin (``agent --device-plugin``).

The agent's poll loop hands every good probe to ``PluginHost.update`` with the node's labels, so
the plugin always serves what the probe found, and the node's labels decide whether it serves:

- the node does not match ``agent.devicePlugin.nodeSelector``: no plugin. One that was serving
  is stopped; removing the opt-in label is how a node goes back to another plugin. Two plugins
  that advertise the same GPUs under two resource names would give each GPU out twice, so the
  plugin serves only where the operator said NVIDIA's is off;
- it matches and nothing serves: start a plugin for the probed devices;
- the device list changed (a GPU replaced, fewer GPUs after a fault): stop and start again, so
  the kubelet reads the new list from a new registration;
- same devices: health changes go to the open ListAndWatch streams, and the topology the
  plugin's own fallback choice uses is replaced.

A plugin that cannot start (a GPU without a CDI spec entry, an unwritable socket folder, a node
whose GPUs are not NVIDIA's) is a problem ``update`` returns for the agent to report as a node
Warning; the next poll tries again, so fixing the node needs no restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import structlog

from scheduler.config.agent import DevicePluginSettings
from scheduler.core.resources.inventory import Inventory

from .decide import Mode
from .identify import GetPod
from .server import DevicePluginServer, Injection, PluginConfig, Publish

log = structlog.get_logger("device-plugin")


def plugin_config(settings: DevicePluginSettings) -> PluginConfig:
    return PluginConfig(
        resource_name=settings.resource_name,
        plugin_dir=Path(settings.plugin_dir),
        socket_name=settings.socket_name,
        pod_resources_socket=Path(settings.pod_resources_socket),
        mode=Mode(settings.mode),
        injection=Injection(settings.injection),
        cdi_kind=settings.cdi_kind,
        cdi_spec_dirs=tuple(Path(d) for d in settings.cdi_spec_dirs),
        identify_timeout=settings.identify_timeout_seconds,
        watch_interval=settings.socket_check_seconds,
        register_timeout=settings.register_timeout_seconds,
        report_interval=settings.report_interval_seconds,
        report_tries=settings.report_tries,
        published_pods=settings.published_pods,
    )


class PluginHost:
    def __init__(
        self,
        settings: DevicePluginSettings,
        get_pod: GetPod,
        publish: Publish | None,
        config: PluginConfig | None = None,
    ) -> None:
        self.settings = settings
        self.config = config or plugin_config(settings)
        self._get_pod = get_pod
        self._publish = publish
        self.server: DevicePluginServer | None = None
        self._uuids: tuple[str, ...] = ()

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.settings.node_selector.items())

    async def update(self, labels: Mapping[str, str], inventory: Inventory) -> str | None:
        """Serve what ``inventory`` holds if the node opted in; a problem to report, or None."""
        resource = self.config.resource_name
        if not self.selects(labels):
            if self.server is not None:
                log.info("node no longer selected: device plugin stopped", resource=resource)
                await self.stop()
            return None
        if inventory.vendor != "nvidia":
            await self.stop()
            vendor = inventory.vendor
            return f"device plugin {resource} serves NVIDIA GPUs; this node's are {vendor}"
        uuids = tuple(d.uuid for d in inventory.devices)
        if self.server is not None and uuids != self._uuids:
            log.info("GPUs changed: serving the device plugin again", resource=resource)
            await self.stop()
        if self.server is None:
            server = DevicePluginServer(
                self.config, inventory, self._get_pod, publish=self._publish
            )
            try:
                await server.start()
            except Exception as exc:  # CDI specs, socket folder, gRPC: reported, retried
                await server.stop()
                return f"device plugin {resource} not serving: {exc}"
            self.server, self._uuids = server, uuids
            log.info(
                "device plugin serving",
                resource=resource,
                gpus=len(uuids),
                socket=str(server.socket_path),
                mode=self.config.mode.value,
                injection=self.config.injection.value,
            )
            return None
        self.server.inventory = inventory
        for device in inventory.devices:
            self.server.set_health(device.uuid, device.healthy)
        return None

    async def stop(self) -> None:
        if self.server is not None:
            server, self.server, self._uuids = self.server, None, ()
            await server.stop()
