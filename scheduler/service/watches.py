"""The watches that feed one scheduler: which reflectors there are, when each starts, and when
the ones a decision needs have listed.

Three reflectors run from the start and must list before the replica competes for the lease
(``synced``): pending pods of this scheduler (``spec.schedulerName=<name>,spec.nodeName=``);
pods bound to a node and not finished (which GPUs are in use; a pod leaving this set, finished
or deleted, frees its GPUs: the two pod watches together tell a bind from a delete); nodes.
Everything they see goes to ``Intake``, and from there to the snapshot and the pod book.

PodDisruptionBudgets are watched from the start (preemption ranks its candidates by the budgets
they would break) but not waited for: a replica whose watch of them fails (no RBAC for them, say)
still schedules, and an eviction a budget refuses is still handled (preemption.py).

Optional ones: namespaces, claims and volumes, and DRA's objects (ResourceSlices, DeviceTaintRules,
DeviceClasses, ResourceClaims), once a pending pod needs them (``needed``: most clusters' pods use
no volume claim nor namespaceSelector, and a scheduler that never needs them asks the apiserver for
nothing more; DRA's are needed by a pod with a ResourceClaim or an extended resource, which a
DeviceClass may back); PodGroups (scheduler-plugins', Volcano's, the upstream Workload API's) and
Kueue's and KAI's Topology objects while their CRD exists (podgroups.py's ``CrdWatches``: checked at
start, then every minute). The PodGroup watches also feed the PodGroup status writer
(``Scheduler.statuses``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import structlog

from scheduler.config.tuning import Tuning
from scheduler.core.model.dra import (
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourcePool,
    ResourceSlice,
)
from scheduler.core.model.objects import PodInput, Taint, TopologyInput
from scheduler.core.snapshot.watched import (
    CLAIMS,
    DELETED,
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NAMESPACES,
    POD_GROUPS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    TOPOLOGIES,
    VOLUMES,
    Kind,
)
from scheduler.kube.api import KubeApi
from scheduler.kube.budgets import PodDisruptionBudget, budget_from_obj
from scheduler.kube.codec import (
    Claim,
    Namespace,
    Node,
    Pod,
    Volume,
    claim_from_obj,
    namespace_from_obj,
    node_from_obj,
    pod_from_obj,
    resource_version,
    volume_from_obj,
)
from scheduler.kube.dracodec import (
    Refused,
    decode_device_class,
    decode_device_taint_rule,
    decode_or_refuse,
    decode_resource_claim,
    decode_resource_slice,
    object_meta,
)
from scheduler.kube.podgroups import CUSTOM_RESOURCES, CustomResource, PodGroup, listed_as
from scheduler.kube.topologies import KINDS as TOPOLOGY_KINDS
from scheduler.kube.topologies import (
    TOPOLOGY_RESOURCES,
    Topology,
    TopologyObjectError,
    topology_or_error,
)
from scheduler.kube.watch import Reflector

from .podgroups import CrdWatches, read_group
from .scheduler import Scheduler

log = structlog.get_logger("app")

BOUND_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"

T = TypeVar("T")


class Watches:
    """Every reflector of one replica, and the tasks that run them."""

    def __init__(
        self, api: KubeApi, scheduler_name: str, scheduler: Scheduler, tuning: Tuning
    ) -> None:
        self.api = api
        self.scheduler = scheduler
        self.timing = tuning.watch_timing()  # every reflector's (run.tuning)
        intake = scheduler.intake
        pending_selector = f"spec.schedulerName={scheduler_name},spec.nodeName="
        # The ones a decision needs, listed before the replica competes for the lease.
        self.required: list[Reflector[Any]] = [
            Reflector(
                "nodes",
                Node,
                api.list_nodes,
                api.watch_nodes,
                lambda nodes: intake.replace_nodes([node_from_obj(n) for n in nodes]),
                lambda kind, n: intake.node_event(kind, node_from_obj(n)),
                _version,
                timing=self.timing,
            ),
            self._pod_reflector(
                "bound-pods",
                BOUND_SELECTOR,
                intake.bound_event,
                # Taken in as it arrives, page by page.
                PodList(intake.bound_list_begin, intake.bound_list_page, intake.bound_list_end),
                # Its bookmarks: how far the bound pods' view reaches (gangs count on it).
                lambda version: intake.bound_progress(resource_version(version)),
            ),
            self._pod_reflector(
                "pending-pods",
                pending_selector,
                intake.pending_event,
                # Told when it is asked for (the book's newest version then is what its own
                # version must reach, in one era), gathered page by page, and taken in as a
                # whole at its end, with its version.
                PodList(
                    intake.pending_list_begin, intake.pending_list_page, intake.pending_list_end
                ),
            ),
        ]
        preemptions = scheduler.preemptions
        self.budgets: Reflector[PodDisruptionBudget] = Reflector(
            "poddisruptionbudgets",
            PodDisruptionBudget,
            lambda: api.list_kind("poddisruptionbudgets"),
            lambda rv, t: api.watch_kind("poddisruptionbudgets", rv, t),
            lambda items: preemptions.replace_budgets([budget_from_obj(b) for b in items]),
            lambda change, b: preemptions.budget_event(change, budget_from_obj(b)),
            _version,
            timing=self.timing,
        )
        # Started the first time a pending pod needs them (``needed``).
        self._optional: dict[str, list[Reflector[Any]]] = {
            "namespaces": [
                self._lazy(
                    "namespaces",
                    Namespace,
                    namespace_from_obj,
                    NAMESPACES,
                )
            ],
            # DRA (issue 29): ResourceSlices, DeviceTaintRules, DeviceClasses and
            # ResourceClaims, once a pod uses a claim or asks for an extended resource (a
            # DeviceClass may back it). The rules are needed as the slices are: kube-scheduler
            # allocates from the slices with the rules' taints patched in.
            "dra": [
                self._dra(
                    "resourceslices",
                    decode_resource_slice,
                    lambda namespace, name: ResourceSlice(name, "", ResourcePool("", 0, 0)),
                    RESOURCE_SLICES,
                ),
                self._dra(
                    "devicetaintrules",
                    decode_device_taint_rule,
                    lambda namespace, name: DeviceTaintRule(name, Taint("", "")),
                    DEVICE_TAINT_RULES,
                ),
                self._dra(
                    "deviceclasses",
                    decode_device_class,
                    lambda namespace, name: DeviceClass(name),
                    DEVICE_CLASSES,
                ),
                self._dra(
                    "resourceclaims",
                    decode_resource_claim,
                    ResourceClaim,
                    RESOURCE_CLAIMS,
                    namespaced=True,
                ),
            ],
            "volumes": [
                self._lazy(
                    "persistentvolumeclaims",
                    Claim,
                    claim_from_obj,
                    CLAIMS,
                ),
                self._lazy(
                    "persistentvolumes",
                    Volume,
                    volume_from_obj,
                    VOLUMES,
                ),
            ],
        }
        self._started: dict[str, list[Reflector[Any]]] = {}
        self.crds = CrdWatches(
            api.crd_established,
            {name: self._pod_group_maker(r) for name, r in CUSTOM_RESOURCES.items()}
            | {name: self._topology_maker(r) for name, r in TOPOLOGY_RESOURCES.items()},
            self._crd_cleared,
            tuning.crd_check_seconds,
            tuning.crd_retry_seconds,
        )
        self._tasks: list[asyncio.Task[Any]] = []

    # ---- the steps app.run takes -------------------------------------------------------------

    async def start(self) -> None:
        """The required watches and the budgets' start; the CRDs there are now are read (before
        any decision) and looked at again every minute."""
        for reflector in [*self.required, self.budgets]:
            self._run(reflector)
        crds_read = await self.crds.check()
        self._tasks.append(asyncio.create_task(self.crds.run(crds_read), name="podgroup-crds"))

    async def synced(self) -> None:
        """Until every required watch has listed."""
        for reflector in self.required:
            await reflector.synced.wait()

    def unsynced(self) -> list[str]:
        """The required watches that have not listed yet (readiness says which)."""
        return [r.name for r in self.required if not r.synced.is_set()]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.crds.stop()

    def needed(self, kind: str) -> bool:
        """Start ``kind``'s watches if they are not running; True once they have listed. A
        PodGroup or Topology watch (by CRD name) runs while its CRD exists: True once listed, or
        when the CRD does not exist (the scheduler's ``watch_needed``)."""
        if kind in CUSTOM_RESOURCES or kind in TOPOLOGY_RESOURCES:
            return self.crds.ready(kind)
        if kind in self._optional:
            self._started[kind] = self._optional.pop(kind)
            for reflector in self._started[kind]:
                log.info("starting watch", watch=reflector.name)
                self._run(reflector)
        return all(r.synced.is_set() for r in self._started.get(kind, ()))

    def _pod_reflector(
        self,
        name: str,
        selector: str,
        event: Callable[[str, PodInput], None],
        relist: PodList,
        progress: Callable[[str], None] | None = None,
    ) -> Reflector[Pod]:
        """One of the two pod streams: listed in pages (``relist`` takes the LIST in), watched
        in resourceVersion order."""
        api = self.api
        return Reflector(
            name,
            Pod,
            lambda: api.list_pods(selector),
            lambda rv, t: api.watch_pods(rv, t, selector),
            lambda pods: None,  # taken in by relist
            lambda kind, p: event(kind, pod_from_obj(p)),
            _version,
            page_call=lambda token: api.list_pods_page(selector, token),
            convert=pod_from_obj,
            relist=relist,
            timing=self.timing,
            ordered=True,
            progress=progress,
        )

    def _run(self, reflector: Reflector[Any]) -> None:
        self._tasks.append(asyncio.create_task(reflector.run(), name=f"watch-{reflector.name}"))

    # ---- the reflectors ----------------------------------------------------------------------

    def _lazy(self, kind: str, struct: Any, convert: Any, watched: Kind[Any]) -> Reflector[Any]:
        api, intake = self.api, self.scheduler.intake
        return Reflector(
            kind,
            struct,
            lambda: api.list_kind(kind),
            lambda rv, t: api.watch_kind(kind, rv, t),
            lambda items: intake.replace(watched, [convert(item) for item in items]),
            lambda change, item: intake.event(watched, change, convert(item)),
            _version,
            timing=self.timing,
        )

    def _dra(
        self,
        kind: str,
        decode: Callable[[bytes], T],
        stub: Callable[[str, str], T],
        watched: Kind[T],
        namespaced: bool = False,
    ) -> Reflector[msgspec.Raw]:
        """A DRA kind, read as raw JSON so that one object beyond the API's limits (a slice of
        10,000 devices, a device with a megabyte of attributes: kube/dracodec.py's bounds) is
        refused on its own, with an error naming it and the field, instead of failing the
        whole LIST again and again. A refused object is not in the snapshot (a refused update
        removes what was there: ``stub`` makes its key)."""
        api, intake = self.api, self.scheduler.intake

        def read(raw: msgspec.Raw) -> T | None:
            found = decode_or_refuse(watched.name, decode, raw, namespaced)
            if isinstance(found, Refused):
                log.warning("DRA object refused", error=str(found))
                return None
            return found

        def replace(items: list[msgspec.Raw]) -> None:
            intake.replace(watched, [found for raw in items if (found := read(raw)) is not None])

        def event(change: str, raw: msgspec.Raw) -> None:
            found = read(raw)
            if found is not None:
                intake.event(watched, change, found)
            else:
                meta = object_meta(raw)
                intake.event(watched, DELETED, stub(meta.namespace or "default", meta.name))

        return Reflector(
            kind,
            msgspec.Raw,
            lambda: api.list_kind(kind),
            lambda rv, t: api.watch_kind(kind, rv, t),
            replace,
            event,
            lambda raw: object_meta(raw).resource_version,
            timing=self.timing,
        )

    def _pod_group_maker(self, resource: CustomResource) -> Callable[[], Reflector[Any]]:
        return lambda: self._pod_group_reflector(resource)

    def _topology_maker(self, resource: CustomResource) -> Callable[[], Reflector[Any]]:
        return lambda: self._topology_reflector(resource)

    def _pod_group_reflector(self, resource: CustomResource) -> Reflector[PodGroup]:
        """PodGroups of either API group, into the snapshot and the status writer."""
        kind, api = resource.name, self.api
        intake, statuses = self.scheduler.intake, self.scheduler.statuses

        def replace(items: list[PodGroup]) -> None:
            read = [read_group(listed_as(item, resource)) for item in items]
            intake.replace(POD_GROUPS, [group for group, _ in read], resource.group)
            statuses.groups_replaced(resource.group, read)

        def event(change: str, item: PodGroup) -> None:
            group, observed = read_group(item)
            intake.event(POD_GROUPS, change, group)
            if change == "DELETED":
                statuses.group_removed(group.key)
            else:
                statuses.group_set(group, observed)

        return Reflector(
            kind,
            PodGroup,
            lambda: api.list_kind(kind),
            lambda rv, t: api.watch_kind(kind, rv, t),
            replace,
            event,
            _version,
            timing=self.timing,
        )

    def _topology_reflector(self, resource: CustomResource) -> Reflector[Topology]:
        """Kueue's and KAI's Topology objects (issue 21)."""
        kind, api = resource.name, self.api
        project = TOPOLOGY_KINDS[resource.group]
        intake = self.scheduler.intake

        def usable(item: Topology) -> TopologyInput | None:
            found = topology_or_error(item)
            if isinstance(found, TopologyObjectError):
                log.warning("Topology not usable", error=str(found))
                return None
            return found

        def replace(items: list[Topology]) -> None:
            found = [usable(item) for item in items]
            intake.replace(TOPOLOGIES, [t for t in found if t is not None], project)

        def event(change: str, item: Topology) -> None:
            found = usable(item)
            if found is not None:
                intake.event(TOPOLOGIES, change, found)
            elif change == "DELETED":
                intake.event(TOPOLOGIES, change, TopologyInput(project, item.metadata.name, ()))

        return Reflector(
            kind,
            Topology,
            lambda: api.list_kind(kind),
            lambda rv, t: api.watch_kind(kind, rv, t),
            replace,
            event,
            _version,
            timing=self.timing,
        )

    def _crd_cleared(self, kind: str) -> None:
        """A CRD went away: what its watch had listed goes too."""
        intake = self.scheduler.intake
        if kind in TOPOLOGY_RESOURCES:
            project = TOPOLOGY_KINDS[TOPOLOGY_RESOURCES[kind].group]
            intake.replace(TOPOLOGIES, [], project)
            return
        resource = CUSTOM_RESOURCES[kind]
        intake.replace(POD_GROUPS, [], resource.group)
        self.scheduler.statuses.groups_replaced(resource.group, [])


class PodList:
    """A pod stream's LIST as kube/watch.py's Relist hands it over: begun when it is asked
    for, page by page, and ended with its version (a number, for the book's order)."""

    def __init__(
        self,
        begin: Callable[[], None],
        page: Callable[[list[PodInput]], None],
        end: Callable[[int], None],
    ) -> None:
        self.begin = begin
        self.page = page
        self._end = end

    def end(self, version: str) -> None:
        self._end(resource_version(version))


def _version(obj: Any) -> str:
    return str(obj.metadata.resource_version)
