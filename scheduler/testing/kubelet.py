"""A test kubelet: the kubelet's side of the device plugin protocol, over real unix sockets.

No kubelet runs on the project's machines, so the device plugin is tested against this one. It
plays the parts the plugin meets, as the kubelet's device manager does them:
  - serves ``v1beta1.Registration`` on ``<root>/device-plugins/kubelet.sock``; inside Register it
    dials back to the plugin's socket, calls GetDevicePluginOptions (and uses that answer, not the
    request's options), then opens ListAndWatch in the background and keeps the device list;
  - serves ``v1.PodResourcesLister`` (List, Get) on ``<root>/pod-resources/kubelet.sock``, showing
    every active pod, its containers, and the devices each container got;
  - admits pods one at a time (``admit``): the pod enters the PodResources list first, then each
    GPU container in spec order gets GetPreferredAllocation with every free healthy device, the
    kubelet takes ``preferred ∩ available`` first and fills any shortfall arbitrarily (here: from
    the end of the list, so that a plugin that answers wrongly is caught), then Allocate; an error
    from either call fails the pod (``AdmissionError``) and it leaves the list, as with the
    kubelet's UnexpectedAdmissionError;
  - ``restart`` does what a restarting kubelet does to the folder: it deletes every socket in it
    (the plugin's too) and serves a new kubelet.sock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio

from scheduler.agent.plugin import rpc
from scheduler.agent.plugin.protos import deviceplugin_pb2 as dp
from scheduler.agent.plugin.protos import podresources_pb2 as pr


class AdmissionError(Exception):
    """The pod failed admission (the kubelet's UnexpectedAdmissionError)."""


@dataclass(frozen=True)
class Container:
    name: str
    gpus: int = 0


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    containers: tuple[Container, ...]


@dataclass
class _Endpoint:
    """A registered plugin: its channel, options and the ListAndWatch reader."""

    channel: grpc.aio.Channel
    client: rpc.DevicePluginClient
    options: dp.DevicePluginOptions
    reader: asyncio.Task[None] | None = None


@dataclass
class _Devices:
    health: dict[str, str] = field(default_factory=dict)
    updates: int = 0


class Kubelet:
    def __init__(self, root: Path, resource_name: str) -> None:
        self.resource_name = resource_name
        self.plugin_dir = root / "device-plugins"
        self.pod_resources_socket = root / "pod-resources" / "kubelet.sock"
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
        self.registrations: list[dp.RegisterRequest] = []
        self.devices = _Devices()
        # Active pods in admission order, and the devices each (pod, container) got.
        self.pods: dict[tuple[str, str], Pod] = {}
        self.allocated: dict[tuple[str, str, str], tuple[str, ...]] = {}
        self.pod_resources_delay = 0.0
        self._registration: grpc.aio.Server | None = None
        self._pod_resources: grpc.aio.Server | None = None
        self._endpoint: _Endpoint | None = None
        self._changed = asyncio.Condition()
        self._admission = asyncio.Lock()

    # ---- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        await self._serve_registration()
        await self.start_pod_resources()

    async def stop(self) -> None:
        await self._drop_endpoint()
        await self.stop_pod_resources()
        if self._registration is not None:
            await self._registration.stop(0)
            self._registration = None

    async def restart(self) -> None:
        """Like a kubelet restart: forget the plugin, delete every socket, serve anew."""
        await self._drop_endpoint()
        if self._registration is not None:
            await self._registration.stop(0)
            self._registration = None
        for path in self.plugin_dir.iterdir():
            if path.is_socket():
                path.unlink()
        await self._serve_registration()

    async def start_pod_resources(self) -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([rpc.pod_resources_handler(_PodResources(self))])
        server.add_insecure_port(rpc.unix_target(str(self.pod_resources_socket)))
        await server.start()
        self._pod_resources = server

    async def stop_pod_resources(self) -> None:
        """Make PodResources unavailable (the socket goes away, calls fail)."""
        if self._pod_resources is not None:
            await self._pod_resources.stop(0)
            self._pod_resources = None
        with contextlib.suppress(FileNotFoundError):
            self.pod_resources_socket.unlink()

    async def _serve_registration(self) -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([rpc.registration_handler(_Registration(self))])
        server.add_insecure_port(rpc.unix_target(str(self.plugin_dir / "kubelet.sock")))
        await server.start()
        self._registration = server

    async def _drop_endpoint(self) -> None:
        endpoint, self._endpoint = self._endpoint, None
        if endpoint is None:
            return
        if endpoint.reader is not None:
            endpoint.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await endpoint.reader
        await endpoint.channel.close()

    # ---- waiting for the plugin --------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Until ``predicate`` holds; it is re-checked after each registration or device list."""
        async with self._changed:
            await self._changed.wait_for(predicate)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    @property
    def plugin(self) -> rpc.DevicePluginClient:
        if self._endpoint is None:
            raise RuntimeError("no device plugin registered")
        return self._endpoint.client

    # ---- Registration (called by the plugin) -------------------------------------------------

    async def _register(self, request: dp.RegisterRequest) -> None:
        if request.version != rpc.API_VERSION:
            raise ValueError(f"unsupported version {request.version!r}")
        if request.resource_name != self.resource_name:
            raise ValueError(f"unexpected resource {request.resource_name!r}")
        await self._drop_endpoint()  # a plugin registering again replaces its old endpoint
        channel = grpc.aio.insecure_channel(
            rpc.unix_target(str(self.plugin_dir / request.endpoint))
        )
        client = rpc.DevicePluginClient(channel)
        try:
            # The nested call-back that needs the plugin to serve before it registers.
            options = await client.get_device_plugin_options(dp.Empty(), timeout=10)
        except BaseException:
            await channel.close()
            raise
        endpoint = _Endpoint(channel, client, options)
        endpoint.reader = asyncio.create_task(self._read_devices(client), name="kubelet-law")
        self._endpoint = endpoint
        self.registrations.append(request)
        await self._notify()

    async def _read_devices(self, client: rpc.DevicePluginClient) -> None:
        call = client.list_and_watch(dp.Empty())
        try:
            async for response in call:
                self.devices.health = {d.ID: d.health for d in response.devices}
                self.devices.updates += 1
                await self._notify()
        except grpc.aio.AioRpcError:
            return  # the plugin went away; it registers again when it is back
        finally:
            call.cancel()

    # ---- admission -------------------------------------------------------------------------

    def free_devices(self) -> list[str]:
        used = {u for ids in self.allocated.values() for u in ids}
        return sorted(
            u for u, h in self.devices.health.items() if h == rpc.HEALTHY and u not in used
        )

    async def admit(self, pod: Pod) -> dict[str, tuple[str, ...]]:
        """Admit one pod (one at a time, as the kubelet's sync loop does); its devices."""
        async with self._admission:
            key = (pod.namespace, pod.name)
            self.pods[key] = pod  # the pod is in PodResources' list before its admission
            got: dict[str, tuple[str, ...]] = {}
            try:
                for container in pod.containers:
                    if container.gpus > 0:
                        got[container.name] = await self._allocate(pod, container)
            except grpc.aio.AioRpcError as exc:
                self.remove(pod)
                raise AdmissionError(
                    f"pod {pod.namespace}/{pod.name}: {exc.code().name}: {exc.details()}"
                ) from None
            return got

    async def _allocate(self, pod: Pod, container: Container) -> tuple[str, ...]:
        plugin = self._endpoint
        if plugin is None:
            raise AdmissionError("no device plugin registered for " + self.resource_name)
        available = self.free_devices()
        n = container.gpus
        if len(available) < n:
            raise AdmissionError(f"{n} {self.resource_name} asked, {len(available)} free")
        chosen: list[str] = []
        if plugin.options.get_preferred_allocation_available:
            answer = await plugin.client.get_preferred_allocation(
                dp.PreferredAllocationRequest(
                    container_requests=[
                        dp.ContainerPreferredAllocationRequest(
                            available_deviceIDs=available, allocation_size=n
                        )
                    ]
                )
            )
            for u in answer.container_responses[0].deviceIDs:
                if u in available and u not in chosen and len(chosen) < n:
                    chosen.append(u)
        # The shortfall is filled arbitrarily; from the end, unlike any sensible preference.
        for u in reversed(available):
            if len(chosen) == n:
                break
            if u not in chosen:
                chosen.append(u)
        await plugin.client.allocate(
            dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=chosen)])
        )
        devices = tuple(chosen)
        self.allocated[(pod.namespace, pod.name, container.name)] = devices
        return devices

    def finish(self, pod: Pod) -> None:
        """The pod finished, but the kubelet still lists it in PodResources with its containers'
        devices freed (kubernetes issue 119423), until the pod object is deleted."""
        for c in pod.containers:
            self.allocated.pop((pod.namespace, pod.name, c.name), None)

    def remove(self, pod: Pod) -> None:
        """The pod finished or failed: it leaves the list and its devices are free again."""
        self.pods.pop((pod.namespace, pod.name), None)
        for c in pod.containers:
            self.allocated.pop((pod.namespace, pod.name, c.name), None)

    def pod_resources(self, pod: Pod) -> pr.PodResources:
        containers = []
        for c in pod.containers:
            ids = self.allocated.get((pod.namespace, pod.name, c.name))
            devices = (
                [pr.ContainerDevices(resource_name=self.resource_name, device_ids=ids)]
                if ids
                else []
            )
            containers.append(pr.ContainerResources(name=c.name, devices=devices))
        return pr.PodResources(name=pod.name, namespace=pod.namespace, containers=containers)


class _Registration:
    def __init__(self, kubelet: Kubelet) -> None:
        self._kubelet = kubelet

    async def register(self, request: dp.RegisterRequest, context: rpc.Context) -> dp.Empty:
        try:
            await self._kubelet._register(request)
        except (ValueError, grpc.aio.AioRpcError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return dp.Empty()


class _PodResources:
    def __init__(self, kubelet: Kubelet) -> None:
        self._kubelet = kubelet

    async def list(
        self, request: pr.ListPodResourcesRequest, context: rpc.Context
    ) -> pr.ListPodResourcesResponse:
        if self._kubelet.pod_resources_delay:
            await asyncio.sleep(self._kubelet.pod_resources_delay)
        pods = [self._kubelet.pod_resources(p) for p in self._kubelet.pods.values()]
        return pr.ListPodResourcesResponse(pod_resources=pods)

    async def get(
        self, request: pr.GetPodResourcesRequest, context: rpc.Context
    ) -> pr.GetPodResourcesResponse:
        pod = self._kubelet.pods.get((request.pod_namespace, request.pod_name))
        if pod is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")
        return pr.GetPodResourcesResponse(pod_resources=self._kubelet.pod_resources(pod))
