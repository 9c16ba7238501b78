"""PodGroups in the live scheduler: what the watches hand the snapshot, and the status that
topo-scheduler writes back on scheduler-plugins PodGroups nobody else writes (and the upstream
PodGroup's PodGroupInitiallyScheduled condition).

**Into the snapshot** (``snapshot_group``): a usable PodGroup is the core's ``PodGroupInput``. An
unusable one (``PodGroupError``: a minMember beyond the scheduler's bounds, a negative timeout)
is logged with its error and stored as a group with an impossible minimum, so that its pods stay
pending and the core tells them why, naming the PodGroup (``PodGroup ns/job: spec.minMember
-1 must be between 1 and 100000``): the bad minMember as written when that is the bad field,
else 0. It is never dropped, which would make its pods wait "for the PodGroup to exist".

**The status** (``PodGroupStatuses``), as scheduler-plugins' controller would write it, only for
scheduler-plugins PodGroups (``scheduling.x-k8s.io``), never Volcano's, and only while no other
controller writes it. Another writer is recognised by what topo-scheduler never writes
(``kube.podgroups.observed_status``: ``occupiedBy``, ``succeeded``, ``failed``,
``scheduleStartTime``, a phase such as ``Scheduling``); once seen on a PodGroup, that PodGroup's
status is left alone until the object is recreated (a new UID). Per PodGroup, from its members
(pods labelled ``scheduling.x-k8s.io/pod-group=<name>`` in its namespace, whichever scheduler
placed them):

- ``scheduled``: members bound to a node (the bound watch) or whose Binding succeeded and the
  watch has not shown yet (the pod book's ``assumed``), finished ones included;
- ``running``: members whose phase is Running;
- a member being deleted (deletionTimestamp set) counts in neither, nor as finished when it ends:
  it has left its group (its controller restarts the job or scales it down, an eviction took it),
  as a ReplicaSet or Job stops counting a pod active once its deletionTimestamp is set
  (``controller.IsPodActive``), and as the scheduler counts a gang's bound members
  (core/snapshot/holdings.py). A member that fails on its own is Failed before anyone deletes
  it, and stays counted as such. (scheduler-plugins' own controller counts by phase alone, so it
  counts a terminating Running pod as running.)
- ``phase`` (scheduler-plugins' order): Finished when at least minMember succeeded; Failed when
  one failed and failed + running + succeeded reach minMember; Running when running + succeeded
  reach it; Scheduled when ``scheduled`` reaches it; else Pending. A PodGroup whose phase is
  Finished or Failed is not written again (scheduler-plugins' controller stops there too).

For the upstream Workload API's PodGroups (``scheduling.k8s.io``, whose pods name them in
``spec.schedulingGroup``) it writes only the condition ``PodGroupInitiallyScheduled`` True
(reason ``Scheduled``), once, when ``scheduled`` first reaches minCount, as kube-scheduler does for
the groups of its own pods (the pods are ours, so no other scheduler writes it); a condition
already True is terminal and left alone.

It writes only what changed (against the status read from the watch, and against its own last
write, so that a field a CRD prunes is not written again and again), only as the leader, from
its own task (never on a pod's scheduling path), at most ``patches_in_flight`` at a time, and
forgets a PodGroup when it is deleted. A standby keeps what changed and writes it once elected.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

import msgspec
import structlog

from scheduler.core.model.names import POD_GROUP_API, POD_GROUP_LABEL, UPSTREAM_POD_GROUP_API
from scheduler.core.model.objects import PodGroupInput, PodInput
from scheduler.kube.podgroups import (
    MAX_MEMBERS,
    ObservedStatus,
    PodGroup,
    PodGroupError,
    PodGroupPhase,
    Write,
    observed_status,
    pod_group_from_obj,
)
from scheduler.kube.watch import Reflector

log = structlog.get_logger("podgroups")

_TERMINAL: Final = frozenset({PodGroupPhase.FINISHED.value, PodGroupPhase.FAILED.value})
_FINISHED: Final = frozenset({"Succeeded", "Failed"})  # pod phases

Patch = Callable[[str, str, PodGroupPhase, int, int], Awaitable[Write]]
# An upstream PodGroup's condition PodGroupInitiallyScheduled set True (namespace, name, message).
MarkScheduled = Callable[[str, str, str], Awaitable[Write]]
_WRITTEN_GROUPS: Final = frozenset({POD_GROUP_API, UPSTREAM_POD_GROUP_API})


# ---- into the snapshot -----------------------------------------------------------------------


class _LaxSpec(msgspec.Struct, rename="camel"):
    min_member: object = None


def snapshot_group(obj: PodGroup) -> PodGroupInput:
    """The PodGroup as the core reads it; an unusable one blocks its pods (module doc)."""
    try:
        return pod_group_from_obj(obj)
    except PodGroupError as exc:
        log.warning("unusable PodGroup: its pods stay pending", error=str(exc))
        return blocking_group(exc, obj)


def read_group(obj: PodGroup) -> tuple[PodGroupInput, ObservedStatus]:
    """A watched PodGroup: the snapshot's group and its status as read."""
    return snapshot_group(obj), observed_status(obj)


def blocking_group(error: PodGroupError, obj: PodGroup) -> PodGroupInput:
    """A group whose minimum the core refuses, so that its pods wait with a reason naming it:
    the bad minMember itself when it is an integer out of bounds, else 0."""
    minimum = 0
    try:
        spec = msgspec.json.decode(bytes(obj.spec), type=_LaxSpec)
        value = spec.min_member
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and error.field.endswith("minMember")
        ):
            minimum = value
    except msgspec.DecodeError:
        pass
    return PodGroupInput(
        error.group, error.namespace, error.name, min_member=minimum, uid=obj.metadata.uid
    )


# ---- the status ------------------------------------------------------------------------------


class Counts(msgspec.Struct, frozen=True):
    scheduled: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0


class Desired(msgspec.Struct, frozen=True):
    phase: PodGroupPhase
    scheduled: int
    running: int


def phase_of(min_member: int, counts: Counts) -> PodGroupPhase:
    """scheduler-plugins' phase for these counts (its controller's order of rules), with
    Scheduled for a group whose minimum is placed but not yet running."""
    if counts.succeeded >= min_member:
        return PodGroupPhase.FINISHED
    if counts.failed and counts.failed + counts.running + counts.succeeded >= min_member:
        return PodGroupPhase.FAILED
    if counts.running + counts.succeeded >= min_member:
        return PodGroupPhase.RUNNING
    if counts.scheduled >= min_member:
        return PodGroupPhase.SCHEDULED
    return PodGroupPhase.PENDING


def count_members(phases: Iterable[str], assumed: int = 0) -> Counts:
    """Counts from the phases of the members bound (or finished) and the number assumed."""
    scheduled, running, succeeded, failed = assumed, 0, 0, 0
    for phase in phases:
        scheduled += 1
        if phase == "Running":
            running += 1
        elif phase == "Succeeded":
            succeeded += 1
        elif phase == "Failed":
            failed += 1
    return Counts(scheduled, running, succeeded, failed)


def group_of_pod(pod: PodInput) -> str | None:
    """The key (PodGroupInput.key) of the PodGroup whose status is written for the pod: the
    upstream one of its spec.schedulingGroup, else the scheduler-plugins one it names."""
    if pod.scheduling_group:
        return f"{UPSTREAM_POD_GROUP_API}/{pod.namespace}/{pod.scheduling_group}"
    name = pod.labels.get(POD_GROUP_LABEL)
    return f"{POD_GROUP_API}/{pod.namespace}/{name}" if name else None


class PodGroupStatuses:
    """Members of scheduler-plugins PodGroups, and the status patches (module doc). The members
    follow the pod book: its effects tell which pods the bound watch shows placed, running,
    finished, deleted or missing from a re-list (every bound pod has an entry, ours or not)."""

    def __init__(
        self,
        patch: Patch | None,
        leading: Callable[[], bool],
        assumed: Callable[[], Iterable[PodInput]] = tuple,
        mark_scheduled: MarkScheduled | None = None,
        *,
        patches_in_flight: int,
        pass_interval_s: float,
        idle_pass_s: float,
    ) -> None:
        self._patch = patch
        # The writer's pace (run.tuning): status patches in flight at once, at most; passes at
        # least ``pass_interval_s`` apart (a burst of member changes becomes one pass); a look
        # again every ``idle_pass_s`` without being woken (leadership gained, failed writes).
        self.patches_in_flight = patches_in_flight
        self.pass_interval_s = pass_interval_s
        self.idle_pass_s = idle_pass_s
        self._mark_scheduled = mark_scheduled
        self._leading = leading
        self._assumed = assumed  # pods whose Binding succeeded, not yet seen bound
        self.groups: dict[str, PodGroupInput] = {}
        self.observed: dict[str, ObservedStatus] = {}
        self._foreign: set[str] = set()  # sticky while the object (its UID) lives
        self._sent: dict[str, tuple[str, Desired]] = {}  # key -> (uid, last written)
        # Members seen bound or finished: group key -> pod key -> phase; and the other way.
        self.members: dict[str, dict[str, str]] = {}
        self._member_of: dict[str, str] = {}
        self.dirty: set[str] = set()
        self._wake = asyncio.Event()

    # ---- PodGroups (the PodGroup watch) ------------------------------------------------------

    def group_set(self, group: PodGroupInput, observed: ObservedStatus) -> None:
        if group.group not in _WRITTEN_GROUPS:
            return  # Volcano's: read, never written
        key = group.key
        previous = self.groups.get(key)
        if previous is not None and previous.uid != group.uid:
            self._foreign.discard(key)  # recreated: a new object, judged afresh
            self._sent.pop(key, None)
        if group.status_foreign or observed.foreign:
            if key not in self._foreign:
                log.info("PodGroup status written by another controller: left alone", group=key)
            self._foreign.add(key)
        self.groups[key] = group
        self.observed[key] = observed
        self._mark(key)

    def group_removed(self, key: str) -> None:
        self.groups.pop(key, None)
        self.observed.pop(key, None)
        self._foreign.discard(key)
        self._sent.pop(key, None)
        self.dirty.discard(key)
        members = self.members.get(key)
        if members:  # finished members are kept only for an existing group
            for pod in [p for p, phase in members.items() if phase in _FINISHED]:
                self._drop_member(pod)

    def groups_replaced(
        self, api_group: str, groups: Iterable[tuple[PodGroupInput, ObservedStatus]]
    ) -> None:
        listed = list(groups)
        keys = {g.key for g, _ in listed}
        for key in [k for k, g in self.groups.items() if g.group == api_group and k not in keys]:
            self.group_removed(key)
        for group, observed in listed:
            self.group_set(group, observed)

    # ---- members: the pod book's transitions (effects GROUP_COUNT and GROUP_DROP) ----------

    def member_seen(self, pod: PodInput) -> None:
        """The bound watch shows ``pod`` on a node (placed, running): counted in its group,
        unless it is being deleted (module doc)."""
        key = group_of_pod(pod)
        if self._member_of.get(pod.key) not in (None, key) or pod.deleting:
            self._drop_member(pod.key)  # it names another group now, or is leaving
        if key is not None and not pod.deleting:
            self._set_member(key, pod.key, pod.phase)

    def member_ended(self, pod: PodInput) -> None:
        """``pod`` was deleted or finished: a finished one is counted while its group lives,
        unless it finished while being deleted (module doc)."""
        key = group_of_pod(pod)
        if self._member_of.get(pod.key) not in (None, key):
            self._drop_member(pod.key)
        if key is not None and pod.finished and not pod.deleting and key in self.groups:
            self._set_member(key, pod.key, pod.phase)
        else:
            self._drop_member(pod.key)

    def member_missing(self, pod: str) -> None:
        """A bound re-list lacks the pod: deleted, or finished unseen; a member seen finished
        stays counted."""
        group = self._member_of.get(pod)
        if group is not None and self.members.get(group, {}).get(pod) not in _FINISHED:
            self._drop_member(pod)

    def _set_member(self, group: str, pod: str, phase: str) -> None:
        members = self.members.setdefault(group, {})
        if members.get(pod) != phase:
            members[pod] = phase
            self._member_of[pod] = group
            self._mark(group)
            if phase in _FINISHED:
                self._trim_finished(group, members)

    def _trim_finished(self, group: str, members: dict[str, str]) -> None:
        """Keep at most minMember finished members of a group, the latest: the phase needs no
        more (Finished at minMember succeeded), and a long-lived group whose members come and go
        must not grow with every pod it ever had (their deletions are not seen: the bound
        watch stops showing a pod when it finishes)."""
        pg = self.groups.get(group)
        keep = pg.min_member if pg is not None and pg.min_member > 0 else 1
        finished = [p for p, phase in members.items() if phase in _FINISHED]
        for pod in finished[: max(0, len(finished) - keep)]:
            self._drop_member(pod)

    def _drop_member(self, pod: str) -> None:
        group = self._member_of.pop(pod, None)
        if group is None:
            return
        members = self.members.get(group)
        if members is not None:
            members.pop(pod, None)
            if not members:
                del self.members[group]
        self._mark(group)

    def _mark(self, key: str) -> None:
        if key in self.groups:
            self.dirty.add(key)
            self._wake.set()

    # ---- what to write -----------------------------------------------------------------------

    def desired(self, key: str, assumed: int = 0) -> Desired | None:
        """The status to write for ``key``, or None when it is not ours to write."""
        group = self.groups.get(key)
        if group is None or key in self._foreign:
            return None
        if not 1 <= group.min_member <= MAX_MEMBERS:  # unusable: its pods wait, nothing to say
            return None
        if self.observed[key].phase in _TERMINAL or self.observed[key].initially_scheduled:
            return None
        members = self.members.get(key, {})
        counts = count_members(members.values(), assumed)
        return Desired(phase_of(group.min_member, counts), counts.scheduled, counts.running)

    def to_write(self) -> list[tuple[PodGroupInput, Desired]]:
        """The patches one pass sends (the dirty set is emptied); [] when not leading."""
        if not self._leading() or not self.dirty:
            return []
        assumed: dict[str, int] = {}
        for pod in self._assumed():
            key = group_of_pod(pod)
            if key in self.dirty and pod.key not in self._member_of:
                assumed[key] = assumed.get(key, 0) + 1
        out = []
        for key in sorted(self.dirty):
            desired = self.desired(key, assumed.get(key, 0))
            if desired is None:
                continue
            group, observed = self.groups[key], self.observed[key]
            if group.group == UPSTREAM_POD_GROUP_API:
                # Only the condition, once, when the minimum is first scheduled.
                if desired.phase is PodGroupPhase.PENDING or key in self._sent:
                    continue
                out.append((group, desired))
                continue
            if (observed.phase, observed.scheduled, observed.running) == (
                desired.phase.value,
                desired.scheduled,
                desired.running,
            ):
                continue
            if self._sent.get(key) == (group.uid, desired):
                continue  # written; the watch has not shown it (or the CRD prunes a field)
            out.append((group, desired))
        self.dirty.clear()
        return out

    async def write(self, writes: list[tuple[PodGroupInput, Desired]]) -> None:
        limit = asyncio.Semaphore(self.patches_in_flight)

        async def one(group: PodGroupInput, desired: Desired) -> None:
            async with limit:
                if not self._leading():
                    self._mark(group.key)
                    return
                try:
                    result = await self._send(group, desired)
                except Exception as exc:
                    log.warning("PodGroup status not written", group=group.key, error=str(exc))
                    self._mark(group.key)  # tried again at the next pass
                    return
                if result is Write.DONE and group.key in self.groups:
                    self._sent[group.key] = (group.uid, desired)
                    log.info(
                        "PodGroup status written", group=group.key, phase=desired.phase.value,
                        scheduled=desired.scheduled, running=desired.running,
                    )  # fmt: skip

        await asyncio.gather(*(one(g, d) for g, d in writes))

    async def _send(self, group: PodGroupInput, desired: Desired) -> Write:
        if group.group == UPSTREAM_POD_GROUP_API:
            if self._mark_scheduled is None:
                return Write.GONE
            message = (
                f"{desired.scheduled} pods scheduled by topo-scheduler "
                f"(minCount {group.min_member})"
            )
            return await self._mark_scheduled(group.namespace, group.name, message)
        if self._patch is None:
            return Write.GONE
        return await self._patch(
            group.namespace, group.name, desired.phase, desired.scheduled, desired.running
        )

    async def run(self) -> None:
        """The writer's own task: a pass whenever something changed (or every
        ``idle_pass_s``)."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.idle_pass_s):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.write(self.to_write())
            except Exception:
                log.exception("PodGroup status pass failed")
            await asyncio.sleep(self.pass_interval_s)

    def sizes(self) -> dict[str, int]:
        return {
            "groups": len(self.groups),
            "members": sum(len(m) for m in self.members.values()),
            "member_of": len(self._member_of),
            "dirty": len(self.dirty),
            "sent": len(self._sent),
            "foreign": len(self._foreign),
        }


# ---- the watches, while their CRD exists ------------------------------------------------------


class CrdWatches:
    """One reflector per CRD, running while ``established(name)`` says the CRD exists: checked
    by ``check`` (at start, then every ``interval`` in ``run``, every ``retry_s`` while a CRD
    cannot be read: one GET each; run.tuning.crdCheckSeconds and crdRetrySeconds). A CRD that
    goes away stops its reflector, and ``cleared(name)`` drops what it had listed."""

    def __init__(
        self,
        established: Callable[[str], Awaitable[bool]],
        reflectors: dict[str, Callable[[], Reflector[Any]]],
        cleared: Callable[[str], None],
        interval: float,
        retry_s: float,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._established = established
        self._sleep = sleep
        self._make = reflectors
        self._cleared = cleared
        self.interval = interval
        self.retry_s = retry_s
        self.running: dict[str, tuple[Reflector[Any], asyncio.Task[None]]] = {}

    def ready(self, name: str) -> bool:
        """Whether a pod may be decided as far as this watch goes: listed, or not running (its
        CRD does not exist, so nothing can be listed)."""
        entry = self.running.get(name)
        return entry is None or entry[0].synced.is_set()

    async def check(self) -> bool:
        """Start and stop watches as the CRDs say; False when a CRD could not be read."""
        ok = True
        for name in self._make:
            try:
                exists = await self._established(name)
            except Exception as exc:  # keep things as they are; look again soon
                log.warning("cannot read CRD", crd=name, error=str(exc))
                ok = False
                continue
            if exists and name not in self.running:
                reflector = self._make[name]()
                log.info("starting watch", watch=name)
                task = asyncio.create_task(reflector.run(), name=f"watch-{name}")
                self.running[name] = (reflector, task)
            elif not exists and name in self.running:
                log.info("CRD gone: stopping its watch", watch=name)
                await self._stop(name)
                self._cleared(name)
        return ok

    async def run(self, ok: bool = True) -> None:
        """Check again every ``interval`` (``retry_s`` after a failed read); ``ok``: whether
        the check before this loop read every CRD."""
        while True:
            await self._sleep(self.interval if ok else min(self.interval, self.retry_s))
            ok = await self.check()

    async def _stop(self, name: str) -> None:
        _, task = self.running.pop(name)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def stop(self) -> None:
        for name in list(self.running):
            await self._stop(name)
