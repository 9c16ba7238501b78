"""Which pod and container is the kubelet admitting? PodResources List plus the apiserver.

One identification = one PodResources List, then one apiserver read per pod that may be pending
(decide.py explains the rule). To keep the reads to about one per admission, the shape of each
pod's assignment (which containers are assigned GPUs, or that it has no assignment) is remembered
while the pod stays in the kubelet's list: a pod whose assigned containers all have devices, or
that is not ours, is not read again. The UUIDs themselves are never cached: a pending pod is
always read fresh, so a pod re-created under the same name cannot inherit an old assignment.

The whole identification runs under one time budget (the kubelet waits on GetPreferredAllocation
and Allocate inside its sync loop, without a timeout of its own) and never raises: PodResources
down, the apiserver slow or a malformed annotation all end as "nobody identified", with a reason
for the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from collections.abc import Set as AbstractSet

import structlog

from . import decide
from .protos import podresources_pb2 as pr

log = structlog.get_logger("device-plugin")

GetPod = Callable[[str, str], Awaitable[Mapping[str, str] | None]]
"""``get_pod(namespace, name)``: the pod's annotations, or None when the pod is gone or finished.
A finished pod the kubelet still lists in PodResources (kubernetes issue 119423: its containers
show no devices once they are freed) would otherwise look pending, and make the pod really being
admitted ambiguous, or be taken for it."""

ListPods = Callable[[], Awaitable[list[decide.PodDevices]]]

_Key = tuple[str, str]
# Per pod: the names of its assigned containers (None inside for a pod-level assignment), or
# None for a pod without (a readable) assignment.
_Shape = tuple[str | None, ...] | None


def pod_devices(response: pr.ListPodResourcesResponse, resource: str) -> list[decide.PodDevices]:
    """The PodResources answer reduced to our resource's device IDs per container."""
    pods = []
    for pod in response.pod_resources:
        devices = {
            c.name: tuple(i for d in c.devices if d.resource_name == resource for i in d.device_ids)
            for c in pod.containers
        }
        pods.append(decide.PodDevices(pod.namespace, pod.name, devices))
    return pods


class Identifier:
    def __init__(self, list_pods: ListPods, get_pod: GetPod, timeout: float) -> None:
        self._list_pods = list_pods
        self._get_pod = get_pod
        self._timeout = timeout
        self._shapes: dict[_Key, _Shape] = {}

    async def identify(
        self, size: int, available: AbstractSet[str] | None
    ) -> tuple[decide.Target | None, str]:
        """The container being admitted, or None and why not."""
        try:
            async with asyncio.timeout(self._timeout):
                pods = await self._list_pods()
                self._forget_gone(pods)
                maybe = [p for p in pods if self._may_be_pending(p)]
                # A TaskGroup, not gather: one failed read cancels the others instead of
                # leaving them running after we have given up.
                async with asyncio.TaskGroup() as group:
                    reads = [group.create_task(self._read(p)) for p in maybe]
                found = [r.result() for r in reads]
        except TimeoutError:
            return None, f"no answer from PodResources and the apiserver within {self._timeout}s"
        except Exception as exc:  # any failure here must end as "unidentified"
            if isinstance(exc, ExceptionGroup):
                exc = exc.exceptions[0]
            return None, f"identification failed: {type(exc).__name__}: {exc}"
        candidates = [t for t in found if t is not None]
        target = decide.pick(candidates, size, available)
        if target is not None:
            return target, "identified"
        if not candidates:
            return None, "no pod with an assigned container still waiting for its GPUs"
        names = ", ".join(t.describe() for t in candidates)
        return None, f"ambiguous: {len(candidates)} pods wait for GPUs ({names})"

    def _forget_gone(self, pods: list[decide.PodDevices]) -> None:
        present = {(p.namespace, p.name) for p in pods}
        for key in [k for k in self._shapes if k not in present]:
            del self._shapes[key]

    def _may_be_pending(self, pod: decide.PodDevices) -> bool:
        key = (pod.namespace, pod.name)
        if key not in self._shapes:
            return True
        shape = self._shapes[key]
        if shape is None:
            return False
        if shape and shape[0] is None:
            return not any(pod.devices.values())
        return any(not pod.devices.get(name or "") for name in shape)

    async def _read(self, pod: decide.PodDevices) -> decide.Target | None:
        key = (pod.namespace, pod.name)
        annotations = await self._get_pod(pod.namespace, pod.name)
        if annotations is None:
            return None
        try:
            assignment = decide.read_assignment(annotations)
        except decide.AssignmentError as exc:
            log.warning("unreadable assignment", pod=f"{key[0]}/{key[1]}", error=str(exc))
            self._shapes[key] = None
            return None
        if assignment is None:
            self._shapes[key] = None
            return None
        self._shapes[key] = tuple(c.name for c in assignment.containers)
        container = decide.pending(assignment, pod)
        if container is None:
            return None
        return decide.Target(pod.namespace, pod.name, container.name, container.uuids)
