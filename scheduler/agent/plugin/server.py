"""The kubelet device plugin (API v1beta1): serves GPUs by UUID and enforces the assignment.

Life cycle (the kubelet's rules are in the shared device-plugin facts):
  1. serve the DevicePlugin service on ``<plugin_dir>/<socket_name>`` (a grpc.aio server: the
     endless ListAndWatch stream is a coroutine, so it can never hold a worker thread that
     GetPreferredAllocation or Allocate would need; a thread-pool server hangs exactly there);
  2. only then register with the kubelet's Registration service on ``<plugin_dir>/kubelet.sock``:
     inside Register the kubelet dials back for GetDevicePluginOptions and opens ListAndWatch;
  3. watch both sockets: a restarting kubelet deletes every socket in the folder and recreates its
     own, so when kubelet.sock changes (inode or ctime) or ours is gone we serve again on a new
     socket and register again. Polling ``stat`` once per ``watch_interval`` needs no inotify.

Devices are reported without NUMA topology, and GetDevicePluginOptions announces
GetPreferredAllocation: with no topology the kubelet always asks us and honours an answer of
exactly ``allocation_size`` available IDs. The answer comes from the pod's assignment (identify.py
finds the pod, decide.py decides), else from our own topology choice; it is never an error.
Allocate checks the kubelet's devices against the assignment (mode strict refuses a mismatch with
FAILED_PRECONDITION, mode adopt accepts and records it) and injects the GPUs as CDI devices
(``nvidia.com/gpu=<UUID>``, checked against the node's CDI specs before serving: cdi.py) or as
``NVIDIA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
import grpc.aio
import structlog

from scheduler.core.formats import allocated as allocated_format
from scheduler.core.formats.allocated import AllocatedContainer, AllocatedRecord
from scheduler.core.resources.inventory import Inventory

from . import cdi, decide, rpc
from .identify import GetPod, Identifier, ListPods, pod_devices
from .protos import deviceplugin_pb2 as dp
from .protos import podresources_pb2 as pr

log = structlog.get_logger("device-plugin")

KUBELET_SOCKET: Final = "kubelet.sock"
DEFAULT_RESOURCE: Final = "topo-scheduler.io/gpu"
# Reconnect quickly to a restarted kubelet's PodResources socket: grpc's default backoff grows
# to two minutes, during which every identification would fail.
_FAST_RECONNECT: Final = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class Injection(enum.StrEnum):
    CDI = "cdi"
    ENV = "env"


@dataclass(frozen=True)
class PluginConfig:
    resource_name: str = DEFAULT_RESOURCE
    plugin_dir: Path = Path("/var/lib/kubelet/device-plugins")
    socket_name: str = "topo-scheduler.sock"
    pod_resources_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    mode: decide.Mode = decide.Mode.STRICT
    injection: Injection = Injection.CDI
    cdi_kind: str = "nvidia.com/gpu"
    cdi_spec_dirs: tuple[Path, ...] = cdi.DEFAULT_SPEC_DIRS
    watch_interval: float = 1.0
    # Budget of one identification (PodResources List + apiserver reads); the kubelet waits.
    identify_timeout: float = 2.0
    register_timeout: float = 10.0
    # After mode adopt accepted GPUs for a pod it could not identify, PodResources is read every
    # ``report_interval``, up to ``report_tries`` times, for the container that got them (the
    # kubelet lists it once Allocate has returned and the rest of the pod's containers are
    # allocated).
    report_interval: float = 0.2
    report_tries: int = 50
    # Pods whose allocations are remembered for publishing (the oldest are forgotten first): far
    # more than a node admits between two pods leaving, so a pod's containers always add up.
    published_pods: int = 256


Publish = Callable[[str, str, str], Awaitable[None]]
"""``publish(namespace, name, value)``: write the pod's ``topo-scheduler.io/allocated``."""


@dataclass(frozen=True)
class AllocationRecord:
    """One Allocate'd container: whom we took it for, what it got, whether that matched."""

    target: decide.Target | None
    devices: tuple[str, ...]
    matches: bool | None


@dataclass
class _Health:
    uuid: str
    healthy: bool


@dataclass
class _State:
    devices: list[_Health] = field(default_factory=list)
    # Replaced (and the old one set) on every change: each ListAndWatch stream waits on the
    # event it saw last, so a change wakes every stream without locks.
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class DevicePluginServer:
    def __init__(
        self,
        config: PluginConfig,
        inventory: Inventory | None,
        get_pod: GetPod,
        *,
        devices: Sequence[tuple[str, bool]] | None = None,
        list_pods: ListPods | None = None,
        publish: Publish | None = None,
    ) -> None:
        self.config = config
        self.inventory = inventory
        if devices is None:
            devices = [(d.uuid, d.healthy) for d in inventory.devices] if inventory else []
        self._state = _State([_Health(u, h) for u, h in devices])
        self._list = list_pods or self._list_pods
        self._identifier = Identifier(self._list, get_pod, config.identify_timeout)
        self._server: grpc.aio.Server | None = None
        self._pod_resources: grpc.aio.Channel | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._registered_with: tuple[int, int] | None = None
        self.registrations = 0
        self.allocations: list[AllocationRecord] = []
        # What the kubelet really gave each pod's containers, published back to the pod (the
        # scheduler takes it as the truth, which matters when mode adopt accepted a mismatch).
        self._publish = publish
        self._allocated: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
        self._publishing: set[asyncio.Task[None]] = set()
        self._sending: set[tuple[str, str]] = set()  # pods with a publish in flight
        self._dirty: set[tuple[str, str]] = set()  # ... that changed since it started
        self.registered = asyncio.Event()

    @property
    def socket_path(self) -> Path:
        return self.config.plugin_dir / self.config.socket_name

    # ---- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Serve, try to register, and keep watching the kubelet (registration is retried).

        With CDI injection, raises cdi.CdiSpecError before serving when a GPU has no CDI spec
        entry: better no GPUs on the node than containers that fail at creation.
        """
        if self.config.injection is Injection.CDI:
            uuids = [d.uuid for d in self._state.devices]
            cdi.check_specs(self.config.cdi_spec_dirs, self.config.cdi_kind, uuids)
        await self._serve()
        await self._check_kubelet()
        self._watch_task = asyncio.create_task(self._watch(), name="device-plugin-watch")

    async def stop(self) -> None:
        if self._publishing:  # let reports in flight land: the scheduler relies on them
            await asyncio.wait(self._publishing, timeout=self.config.identify_timeout)
            for task in self._publishing:
                task.cancel()
            await asyncio.gather(*self._publishing, return_exceptions=True)
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
            self._watch_task = None
        if self._server is not None:
            await self._server.stop(0)
            self._server = None
        if self._pod_resources is not None:
            await self._pod_resources.close()
            self._pod_resources = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    def set_health(self, uuid: str, healthy: bool) -> None:
        """Change one device's health; every open ListAndWatch stream sends the new list."""
        for d in self._state.devices:
            if d.uuid == uuid and d.healthy != healthy:
                d.healthy = healthy
                old, self._state.changed = self._state.changed, asyncio.Event()
                old.set()

    async def _serve(self) -> None:
        if self._server is not None:
            await self._server.stop(0)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # a stale socket from an earlier run blocks the bind
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([rpc.device_plugin_handler(self)])
        server.add_insecure_port(rpc.unix_target(str(self.socket_path)))
        await server.start()
        self._server = server
        log.info("device plugin serving", socket=str(self.socket_path))

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.config.watch_interval)
            try:
                await self._check_kubelet()
            except Exception as exc:  # the watch must outlive any one failure
                log.warning("device plugin watch failed", error=f"{type(exc).__name__}: {exc}")

    def _kubelet_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.config.plugin_dir / KUBELET_SOCKET)
        except FileNotFoundError:
            return None
        # The inode alone can be reused at once by a recreated file; the ctime cannot.
        return st.st_ino, st.st_ctime_ns

    async def _check_kubelet(self) -> None:
        own_missing = not self.socket_path.exists()
        if own_missing:
            log.info("device plugin socket gone (kubelet restart?): serving again")
            await self._serve()
        identity = self._kubelet_identity()
        if identity is not None and (identity != self._registered_with or own_missing):
            await self._register(identity)

    async def _register(self, identity: tuple[int, int]) -> None:
        request = dp.RegisterRequest(
            version=rpc.API_VERSION,
            endpoint=self.config.socket_name,
            resource_name=self.config.resource_name,
            options=self._options(),
        )
        target = rpc.unix_target(str(self.config.plugin_dir / KUBELET_SOCKET))
        try:
            async with grpc.aio.insecure_channel(target) as channel:
                await rpc.RegistrationClient(channel).register(
                    request, timeout=self.config.register_timeout
                )
        except grpc.aio.AioRpcError as exc:
            # Not registered: the next watch tick tries again.
            log.warning("registration failed", code=str(exc.code()), details=exc.details())
            return
        self._registered_with = identity
        self.registrations += 1
        self.registered.set()
        log.info("registered with the kubelet", resource=self.config.resource_name)

    def _options(self) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    async def _list_pods(self) -> list[decide.PodDevices]:
        if self._pod_resources is None:
            self._pod_resources = grpc.aio.insecure_channel(
                rpc.unix_target(str(self.config.pod_resources_socket)), options=_FAST_RECONNECT
            )
        client = rpc.PodResourcesClient(self._pod_resources)
        response = await client.list(
            pr.ListPodResourcesRequest(), timeout=self.config.identify_timeout
        )
        return pod_devices(response, self.config.resource_name)

    # ---- the DevicePlugin service ----------------------------------------------------------

    async def get_device_plugin_options(
        self, request: dp.Empty, context: rpc.Context
    ) -> dp.DevicePluginOptions:
        return self._options()

    async def list_and_watch(
        self, request: dp.Empty, context: rpc.Context
    ) -> AsyncIterator[dp.ListAndWatchResponse]:
        while True:
            changed = self._state.changed
            yield dp.ListAndWatchResponse(
                devices=[
                    dp.Device(ID=d.uuid, health=rpc.HEALTHY if d.healthy else rpc.UNHEALTHY)
                    for d in self._state.devices
                ]
            )
            await changed.wait()

    async def get_preferred_allocation(
        self, request: dp.PreferredAllocationRequest, context: rpc.Context
    ) -> dp.PreferredAllocationResponse:
        answers = []
        for req in request.container_requests:
            ids = await self._prefer(
                req.allocation_size, list(req.available_deviceIDs), list(req.must_include_deviceIDs)
            )
            answers.append(dp.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return dp.PreferredAllocationResponse(container_responses=answers)

    async def _prefer(self, size: int, available: list[str], must: list[str]) -> list[str]:
        # Never an error: the kubelet would fail the pod for good.
        try:
            target, why = await self._identifier.identify(size, set(available))
            ids, source = decide.preferred(size, available, must, target, self.inventory)
            log.info(
                "preferred allocation",
                pod=target.describe() if target else None,
                identification=why,
                source=source,
                devices=ids,
            )
            return ids
        except Exception as exc:  # the kubelet must get an answer
            log.error("preferred allocation failed", error=f"{type(exc).__name__}: {exc}")
            return available[:size]

    async def allocate(
        self, request: dp.AllocateRequest, context: rpc.Context
    ) -> dp.AllocateResponse:
        answers = []
        for req in request.container_requests:
            devices = tuple(req.devices_ids)
            target, why = await self._identifier.identify(len(devices), None)
            verdict = decide.check_allocation(devices, target, self.config.mode, why)
            if not verdict.accept:
                log.warning("allocation refused", reason=verdict.message)
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, verdict.message)
            if verdict.matches is not True:
                log.warning("allocation unchecked or adopted", reason=verdict.message or why)
            self.allocations.append(AllocationRecord(target, devices, verdict.matches))
            if target is not None and target.container is not None:
                self._record(target.namespace, target.name, target.container, devices)
            elif target is None and devices:
                self._spawn(self._report_unidentified(devices))
            answers.append(self._inject(devices))
        return dp.AllocateResponse(container_responses=answers)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name="publish-allocated")
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _report_unidentified(self, devices: tuple[str, ...]) -> None:
        """Mode adopt accepted GPUs for a pod it could not identify: once the kubelet lists the
        container that got exactly these GPUs (it records them when Allocate returns), report
        them on its pod, so the scheduler counts them, whoever it meant them for."""
        wanted = set(devices)
        for _ in range(self.config.report_tries):
            await asyncio.sleep(self.config.report_interval)
            try:
                pods = await self._list()
            except Exception as exc:  # PodResources down: try again, then give up
                log.warning("listing pods to report GPUs failed", error=f"{exc}")
                continue
            owners = [
                (p.namespace, p.name, container)
                for p in pods
                for container, ids in p.devices.items()
                if set(ids) == wanted
            ]
            if len(owners) == 1:
                namespace, name, container = owners[0]
                log.info(
                    "reporting GPUs of an unidentified allocation",
                    pod=f"{namespace}/{name}",
                    container=container,
                    devices=list(devices),
                )
                self._record(namespace, name, container, devices)
                return
        log.warning(
            "GPUs accepted for an unidentified pod were never listed: not reported",
            devices=list(devices),
        )

    def _record(self, namespace: str, name: str, container: str, devices: tuple[str, ...]) -> None:
        """Remember a container's devices and publish the pod's whole report in the background
        (Allocate must not wait on the apiserver: the kubelet's sync loop does)."""
        key = (namespace, name)
        pod = self._allocated.pop(key, {})
        pod[container] = devices
        self._allocated[key] = pod  # re-inserted: the most recent pods are kept
        while len(self._allocated) > self.config.published_pods:
            del self._allocated[next(iter(self._allocated))]
        if self._publish is None:
            return
        if key in self._sending:  # one writer per pod, so reports land in order
            self._dirty.add(key)
            return
        self._sending.add(key)
        self._spawn(self._send(key))

    async def _send(self, key: tuple[str, str]) -> None:
        assert self._publish is not None
        try:
            while True:
                self._dirty.discard(key)
                pod = self._allocated.get(key, {})
                record = AllocatedRecord([AllocatedContainer(c, list(u)) for c, u in pod.items()])
                try:
                    await self._publish(key[0], key[1], allocated_format.encode(record))
                except Exception as exc:  # the assignment still stands for the scheduler
                    log.warning(
                        "publishing allocated devices failed",
                        pod=f"{key[0]}/{key[1]}",
                        error=f"{type(exc).__name__}: {exc}",
                    )
                if key not in self._dirty:
                    return
        finally:
            self._sending.discard(key)

    def _inject(self, devices: Sequence[str]) -> dp.ContainerAllocateResponse:
        if self.config.injection is Injection.ENV:
            return dp.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(devices)})
        return dp.ContainerAllocateResponse(
            cdi_devices=[dp.CDIDevice(name=f"{self.config.cdi_kind}={u}") for u in devices]
        )

    async def pre_start_container(
        self, request: dp.PreStartContainerRequest, context: rpc.Context
    ) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()
