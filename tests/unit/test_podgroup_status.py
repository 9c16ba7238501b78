"""PodGroups in the live scheduler, stepped by hand: the status topo-scheduler writes on a
scheduler-plugins PodGroup (what, when, and when not), unusable PodGroups keeping their pods
pending, the PodGroup watches feeding the snapshot, and the watches following their CRDs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from scheduler.config.tuning import Tuning
from scheduler.core.cycle import Unit, decide
from scheduler.core.model import names
from scheduler.core.model.decisions import Placed
from scheduler.core.model.objects import PodGroupInput, PodInput
from scheduler.core.snapshot import watched
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.kube.podgroups import (
    POD_GROUPS,
    VOLCANO_POD_GROUPS,
    ObservedStatus,
    PodGroup,
    PodGroupPhase,
    Write,
    decode_pod_group,
    observed_status,
)
from scheduler.service.intake import Intake
from scheduler.service.podbook import PodBook
from scheduler.service.podgroups import (
    Counts,
    CrdWatches,
    Desired,
    Patch,
    PodGroupStatuses,
    count_members,
    phase_of,
    read_group,
    snapshot_group,
)
from scheduler.service.queue import SchedulingQueue
from scheduler.service.tasks import Tasks
from scheduler.state.memory import MemoryStore
from tests.builders import MakeNode, MakePod
from tests.clock import ManualClock
from tests.lifecycle import Apiserver, Replica

PLUGINS = names.POD_GROUP_API
P = PodGroupPhase


def group(
    name: str = "job", minimum: int = 2, uid: str = "uid-1", foreign: bool = False
) -> PodGroupInput:
    return PodGroupInput(PLUGINS, "default", name, minimum, uid=uid, status_foreign=foreign)


def member(name: str, node: str = "n1", phase: str = "Pending", pg: str = "job") -> PodInput:
    pod = MakePod().Name(name).Req(1).Label(names.POD_GROUP_LABEL, pg).Obj()
    return msgspec.structs.replace(pod, node_name=node, phase=phase, uid=f"uid-{name}")


def obj(
    status: Any = None, spec: Any = None, api: str = "scheduling.x-k8s.io/v1alpha1"
) -> PodGroup:
    body: dict[str, Any] = {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "default", "uid": "uid-1"},
        "spec": {"minMember": 2} if spec is None else spec,
    }
    if status is not None:
        body["status"] = status
    return msgspec.json.decode(json.dumps(body).encode(), type=PodGroup)


class Patches:
    """The apiserver's podgroups/status, as the writer sees it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, int, int]] = []
        self.fail = False
        self.gate: asyncio.Event | None = None
        self.in_flight = 0
        self.most_in_flight = 0

    async def __call__(
        self, namespace: str, name: str, phase: PodGroupPhase, scheduled: int, running: int
    ) -> Write:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.fail:
                raise ConnectionError("apiserver unavailable")
            self.calls.append((namespace, name, phase.value, scheduled, running))
            return Write.DONE
        finally:
            self.in_flight -= 1


TUNING = Tuning()
PATCHES_IN_FLIGHT = TUNING.pod_group_patches_in_flight
CRD_CHECK_S, CRD_RETRY_S = TUNING.crd_check_seconds, TUNING.crd_retry_seconds
CRD_TIMES = (CRD_CHECK_S, CRD_RETRY_S)


def statuses(
    patch: Patch, leading: Callable[[], bool], assumed: Callable[[], list[PodInput]], *args: Any
) -> PodGroupStatuses:
    """A status writer at the default pace (run.tuning)."""
    return PodGroupStatuses(
        patch,
        leading,
        assumed,
        *args,
        patches_in_flight=PATCHES_IN_FLIGHT,
        pass_interval_s=TUNING.pod_group_pass_seconds,
        idle_pass_s=TUNING.pod_group_idle_seconds,
    )


class Writer:
    def __init__(self) -> None:
        self.api = Patches()
        self.leading = True
        self.assumed: list[PodInput] = []
        self.s = statuses(self.api, lambda: self.leading, lambda: self.assumed)

    async def one_pass(self) -> list[tuple[str, str, str, int, int]]:
        before = len(self.api.calls)
        await self.s.write(self.s.to_write())
        return self.api.calls[before:]

    def seen(self, g: PodGroupInput, phase: str = "", scheduled: int = 0, running: int = 0) -> None:
        """The PodGroup watch shows the group with this status (ours, say)."""
        self.s.group_set(g, ObservedStatus(phase, scheduled, running))


def relisted(w: Writer, pods: list[PodInput]) -> None:
    """A bound re-list, as the pod book tells the statuses: each pod listed is seen (effect
    group-count of bound-seen), each member it lacks is missing (group-drop of bound-missing)."""
    for pod in pods:
        w.s.member_seen(pod)
    tracked = {key for members in w.s.members.values() for key in members}
    for key in sorted(tracked - {p.key for p in pods}):
        w.s.member_missing(key)


# ---- the computation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phases", "assumed", "expected"),
    [
        ([], 0, P.PENDING),
        (["Pending"], 0, P.PENDING),
        (["Pending"], 1, P.SCHEDULED),  # bound + assumed reach the minimum
        (["Pending", "Pending"], 0, P.SCHEDULED),
        (["Running", "Pending"], 0, P.SCHEDULED),
        (["Running", "Running"], 0, P.RUNNING),
        (["Running", "Succeeded"], 0, P.RUNNING),  # scheduler-plugins: running + succeeded
        (["Succeeded", "Succeeded"], 0, P.FINISHED),
        (["Running", "Failed"], 0, P.FAILED),
        (["Failed"], 0, P.PENDING),  # one failed, the minimum not reached: not yet Failed
        (["Succeeded", "Succeeded", "Failed"], 0, P.FINISHED),  # Finished wins, as there
    ],
)
def test_phase_follows_scheduler_plugins_rules(
    phases: list[str], assumed: int, expected: PodGroupPhase
) -> None:
    assert phase_of(2, count_members(phases, assumed)) is expected


def test_counts() -> None:
    counts = count_members(["Pending", "Running", "Running", "Succeeded", "Failed"], assumed=1)
    assert counts == Counts(scheduled=6, running=2, succeeded=1, failed=1)


# ---- what is written, and when ------------------------------------------------------------------


async def test_status_is_written_as_members_are_placed_then_run() -> None:
    w = Writer()
    g = group()
    w.seen(g)
    # Nothing placed: Pending, which the fresh object's empty status does not say yet.
    assert await w.one_pass() == [("default", "job", "Pending", 0, 0)]
    w.seen(g, "Pending")  # the watch shows our write
    assert await w.one_pass() == []
    w.s.member_seen(member("a"))
    assert await w.one_pass() == [("default", "job", "Pending", 1, 0)]
    w.seen(g, "Pending", 1)
    w.s.member_seen(member("a"))  # no change for a: nothing to do
    assert await w.one_pass() == []
    w.s.member_seen(member("b"))  # b's Binding is seen by the bound watch
    assert await w.one_pass() == [("default", "job", "Scheduled", 2, 0)]
    w.seen(g, "Scheduled", 2)
    w.s.member_seen(member("a", phase="Running"))
    w.s.member_seen(member("b", phase="Running"))
    assert await w.one_pass() == [("default", "job", "Running", 2, 2)]


async def test_assumed_members_count_as_scheduled() -> None:
    w = Writer()
    g = group()
    w.seen(g, "Pending")
    w.s.member_seen(member("a"))
    w.assumed = [MakePod().Name("b").Label(names.POD_GROUP_LABEL, "job").Obj()]
    assert await w.one_pass() == [("default", "job", "Scheduled", 2, 0)]


async def test_only_on_change_also_when_the_crd_prunes_a_field() -> None:
    w = Writer()
    g = group()
    w.seen(g, "Pending")
    for name in ("a", "b"):
        w.s.member_seen(member(name))
    assert await w.one_pass() == [("default", "job", "Scheduled", 2, 0)]
    # scheduler-plugins' own CRD has no status.scheduled (dropped in its PR 574): the object
    # shows our phase without it. That is no reason to write the same again.
    w.seen(g, "Scheduled", 0)
    w.s.member_seen(member("a"))
    assert await w.one_pass() == []
    # Until something really changes.
    w.s.member_seen(member("a", phase="Running"))
    assert await w.one_pass() == [("default", "job", "Scheduled", 2, 1)]


async def test_the_status_read_is_not_written_again() -> None:
    w = Writer()
    g = group()
    for name in ("a", "b"):
        w.s.member_seen(member(name, phase="Running"))
    w.seen(g, "Running", 2, 2)  # a new leader finds it as it should be
    assert await w.one_pass() == []


async def test_only_the_leader_writes_and_a_standby_writes_once_elected() -> None:
    w = Writer()
    w.leading = False
    w.seen(group())
    w.s.member_seen(member("a"))
    assert await w.one_pass() == []
    assert w.s.dirty == {f"{PLUGINS}/default/job"}  # kept for when it leads
    w.leading = True
    assert await w.one_pass() == [("default", "job", "Pending", 1, 0)]
    assert w.s.dirty == set()


async def test_a_failed_write_is_tried_again_at_the_next_pass() -> None:
    w = Writer()
    w.seen(group())
    w.api.fail = True
    assert await w.one_pass() == []
    assert w.s.dirty
    w.api.fail = False
    assert await w.one_pass() == [("default", "job", "Pending", 0, 0)]


async def test_writes_in_flight_are_bounded() -> None:
    w = Writer()
    for i in range(3 * PATCHES_IN_FLIGHT):
        w.seen(group(f"job-{i}", uid=f"uid-{i}"))
    w.api.gate = asyncio.Event()
    task = asyncio.create_task(w.one_pass())
    for _ in range(10):
        await asyncio.sleep(0)
    assert w.api.in_flight == PATCHES_IN_FLIGHT
    w.api.gate.set()
    assert len(await task) == 3 * PATCHES_IN_FLIGHT
    assert w.api.most_in_flight == PATCHES_IN_FLIGHT


# ---- whose status it is -----------------------------------------------------------------------


async def test_a_status_another_controller_writes_is_left_alone_for_good() -> None:
    w = Writer()
    g = group()
    # scheduler-plugins' controller moved it to Scheduling (a phase topo-scheduler never writes).
    w.s.group_set(g, observed_status(obj({"phase": "Scheduling"})))
    for name in ("a", "b"):
        w.s.member_seen(member(name, phase="Running"))
    assert await w.one_pass() == []
    # Later it says Running with counts that look like ours: still its status.
    w.s.group_set(g, observed_status(obj({"phase": "Running", "running": 2})))
    w.s.member_seen(member("a", phase="Pending"))
    assert await w.one_pass() == []
    # Recreated under the same name (a new UID) with an empty status: ours again.
    w.seen(group(uid="uid-2"))
    assert await w.one_pass() == [("default", "job", "Scheduled", 2, 1)]


@pytest.mark.parametrize(
    "status",
    [
        {"phase": "Pending", "occupiedBy": "default/llama"},  # the controller, pods with owners
        {"phase": "Running", "running": 2, "succeeded": 1},
        {"phase": "Running", "failed": 1},
        {"phase": "Pending", "scheduleStartTime": "2026-11-24T07:00:00Z"},
        {"phase": "Scheduling"},
        {"phase": "PreScheduling"},
        {"phase": "Unknown"},
        {"phase": 3},  # not a status anyone documented: not ours to overwrite
        "a string",
    ],
)
def test_foreign_statuses(status: Any) -> None:
    assert observed_status(obj(status)).foreign
    assert decode_pod_group(msgspec.json.encode(obj(status))).status_foreign


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, ObservedStatus()),
        ({}, ObservedStatus()),
        ({"phase": "Scheduled", "scheduled": 2}, ObservedStatus("Scheduled", 2, 0)),
        ({"phase": "Running", "scheduled": 2, "running": 2}, ObservedStatus("Running", 2, 2)),
        # Go's zero time, as a client may send it: null is absent.
        (
            {"phase": "Pending", "scheduleStartTime": None, "occupiedBy": ""},
            ObservedStatus("Pending"),
        ),
    ],
)
def test_statuses_topo_scheduler_may_write(status: Any, expected: ObservedStatus) -> None:
    assert observed_status(obj(status)) == expected
    assert not decode_pod_group(msgspec.json.encode(obj(status))).status_foreign


async def test_volcano_pod_groups_are_never_written() -> None:
    w = Writer()
    volcano = decode_pod_group(
        msgspec.json.encode(obj(api="scheduling.volcano.sh/v1beta1", spec={"minMember": 1}))
    )
    assert volcano.status_foreign
    w.s.group_set(volcano, ObservedStatus())
    w.s.member_seen(member("a"))
    assert await w.one_pass() == []
    assert w.s.sizes()["groups"] == 0


async def test_a_finished_group_is_not_written_again() -> None:
    w = Writer()
    w.seen(group(), "Finished")
    w.s.member_seen(member("a", phase="Running"))
    assert await w.one_pass() == []


@pytest.mark.parametrize("minimum", [0, -1, 100_001])
async def test_an_unusable_group_is_not_written(minimum: int) -> None:
    w = Writer()
    w.seen(group(minimum=minimum))
    w.s.member_seen(member("a"))
    assert await w.one_pass() == []


# ---- members, and forgetting ------------------------------------------------------------------


async def test_finished_members_count_while_their_group_lives_and_leave_with_it() -> None:
    w = Writer()
    g = group()
    w.seen(g, "Running", 2, 2)
    for name in ("a", "b"):
        w.s.member_seen(member(name, phase="Running"))
    # Both succeed: they leave the bound watch (its selector drops finished pods) as DELETED.
    for name in ("a", "b"):
        w.s.member_ended(member(name, phase="Succeeded"))
    assert await w.one_pass() == [("default", "job", "Finished", 2, 0)]
    # A bound re-list does not show finished pods: they still count.
    relisted(w, [])
    assert w.s.sizes()["members"] == 2
    w.s.group_removed(g.key)
    assert w.s.sizes() == {
        "groups": 0, "members": 0, "member_of": 0, "dirty": 0, "sent": 0, "foreign": 0,
    }  # fmt: skip


async def test_the_members_follow_the_pod_books_transitions() -> None:
    """No tracker of its own: the book's bound-watch events count a member (group-count) and
    drop it (group-drop), a re-list included, and news older than the book's is no news."""
    clock = ManualClock(0.0)
    r = Replica(Apiserver(), MemoryStore(clock), clock)
    g = group()
    r.s.statuses.group_set(g, ObservedStatus("Pending"))
    a = r.api.create(member("a"))
    r.s.intake.bound_event("ADDED", a)
    assert r.s.statuses.members == {g.key: {"default/a": "Pending"}}
    running = r.api.stamp(msgspec.structs.replace(a, phase="Running"))
    r.s.intake.bound_event("MODIFIED", running)
    r.s.intake.bound_event("MODIFIED", a)  # older than what the book knows: dropped
    assert r.s.statuses.members == {g.key: {"default/a": "Running"}}
    r.s.intake.replace_bound([], r.api.version)  # a re-list that lacks it: gone
    assert r.s.statuses.members == {}
    b = r.api.create(member("b", phase="Running"))
    r.s.intake.bound_event("ADDED", b)
    finished = r.api.stamp(msgspec.structs.replace(b, phase="Succeeded"))
    r.s.intake.bound_event("DELETED", finished)  # finished: counted while its group lives
    assert r.s.statuses.members == {g.key: {"default/b": "Succeeded"}}
    await r.settle()


async def test_a_long_lived_group_keeps_at_most_its_minimum_of_finished_members() -> None:
    w = Writer()
    g = group()  # minMember 2
    w.seen(g, "Running", 2, 2)
    for i in range(50):  # members come, run and fail one after the other (a restarting job)
        w.s.member_seen(member(f"m{i}", phase="Running"))
        w.s.member_ended(member(f"m{i}", phase="Failed"))
    assert w.s.sizes()["members"] == 2 and w.s.sizes()["member_of"] == 2
    assert sorted(w.s.members[g.key]) == ["default/m48", "default/m49"]  # the latest


async def test_deleted_members_and_relists() -> None:
    w = Writer()
    g = group()
    w.seen(g, "Pending")
    relisted(w, [member("a"), member("b"), member("x", pg="other")])
    assert await w.one_pass() == [("default", "job", "Scheduled", 2, 0)]
    w.seen(g, "Scheduled", 2)
    w.s.member_ended(member("b"))  # deleted while pending on its node
    assert await w.one_pass() == [("default", "job", "Pending", 1, 0)]
    w.seen(g, "Pending", 1)
    relisted(w, [])  # a re-list without a: gone
    assert await w.one_pass() == [("default", "job", "Pending", 0, 0)]
    # A pod whose label moves to another group leaves the first.
    w.s.member_seen(member("c"))
    w.s.member_seen(member("c", pg="other"))
    assert w.s.members.get(g.key) is None
    # Members of a group that does not exist are tracked (it may come), and finished ones not.
    w.s.member_ended(member("d", pg="nowhere", phase="Failed"))
    assert f"{PLUGINS}/default/nowhere" not in w.s.members


async def test_a_terminating_member_has_left_its_group() -> None:
    """Issue 30, timeline 5: a member being deleted (a restart, a scale-down, an eviction) counts
    as neither scheduled nor running, as a ReplicaSet or Job stops counting a pod active once its
    deletionTimestamp is set, nor as failed when it then ends; a member that fails on its own
    (Failed before anyone deletes it) stays counted as failed."""
    w = Writer()
    g = group()
    w.seen(g, "Running", 2, 2)
    for name in ("a", "b"):
        w.s.member_seen(member(name, phase="Running"))
    assert await w.one_pass() == []
    # The job restarts: both are deleted and terminate; the new members are not bound yet.
    for name in ("a", "b"):
        w.s.member_seen(msgspec.structs.replace(member(name, phase="Running"), deleting=True))
    assert await w.one_pass() == [("default", "job", "Pending", 0, 0)]
    w.seen(g, "Pending")
    for name in ("a", "b"):  # SIGTERM: they end Failed, still being deleted
        gone = msgspec.structs.replace(member(name, phase="Failed"), deleting=True)
        w.s.member_ended(gone)
    assert w.s.members.get(g.key) is None and await w.one_pass() == []
    for name in ("c", "d"):  # the restarted members run
        w.s.member_seen(member(name, phase="Running"))
    assert await w.one_pass() == [("default", "job", "Running", 2, 2)]  # not Failed
    w.seen(g, "Running", 2, 2)
    w.s.member_ended(member("c", phase="Failed"))  # a member fails on its own
    assert await w.one_pass() == [("default", "job", "Failed", 2, 1)]


async def test_groups_replaced_forgets_the_groups_a_list_lacks() -> None:
    w = Writer()
    w.seen(group("a", uid="1"))
    w.seen(group("b", uid="2"))
    w.s.groups_replaced(PLUGINS, [(group("b", uid="2"), ObservedStatus())])
    assert set(w.s.groups) == {f"{PLUGINS}/default/b"}
    w.s.groups_replaced(PLUGINS, [])
    assert w.s.sizes()["groups"] == 0


# ---- unusable PodGroups keep their pods pending --------------------------------------------------


def decide_gang(state: ClusterState, *pods: PodInput) -> Any:
    return decide(state, Unit("default/job", pods))


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"minMember": 100_001}, "spec.minMember 100001 must be between 1 and 100000"),
        ({"minMember": -1}, "spec.minMember -1 must be between 1 and 100000"),
        # The timeout is the bad field: the pods wait, the minimum named as unusable (0).
        ({"minMember": 2, "scheduleTimeoutSeconds": -5}, "spec.minMember 0 must be between"),
    ],
)
def test_an_unusable_pod_group_keeps_its_pods_pending(spec: dict[str, Any], reason: str) -> None:
    state = ClusterState()
    state.set_node(MakeNode().Name("n1").GPUs(8).Obj())
    g = snapshot_group(obj(spec=spec))
    assert g.key == f"{PLUGINS}/default/job" and g.uid == "uid-1"
    state.inputs.pod_groups.put(g)
    pods = [MakePod().Name(n).Req(1).Label(names.POD_GROUP_LABEL, "job").Obj() for n in ("a", "b")]
    decision = decide_gang(state, *pods)
    assert not isinstance(decision, Placed)
    assert f"PodGroup default/job: {reason}" in decision.reason
    # The same group, usable: placed.
    state.inputs.pod_groups.put(snapshot_group(obj(spec={"minMember": 2})))
    assert isinstance(decide_gang(state, *pods), Placed)


def test_read_group_gives_the_snapshot_and_the_status() -> None:
    g, observed = read_group(obj({"phase": "Scheduled", "scheduled": 2}))
    assert g == group(uid="uid-1") and observed == ObservedStatus("Scheduled", 2)


# ---- the watches: into the snapshot ----------------------------------------------------------


class IntakeHarness:
    def __init__(self, needed: dict[str, bool] | None = None) -> None:
        self.state = ClusterState()
        self.wakes = 0
        self.asked: list[str] = []
        self.needed = needed or {}

        def watch_needed(kind: str) -> bool:
            self.asked.append(kind)
            return self.needed.get(kind, True)

        harness = self
        tuning = Tuning()

        class Queue(SchedulingQueue):
            def on_cluster_event(self) -> int:
                harness.wakes += 1
                return super().on_cluster_event()

        class NoEffects:
            def dispatch(self, *args: object) -> None:
                pass

        self.intake = Intake(
            "topo-scheduler",
            self.state,
            PodBook(),
            NoEffects(),  # type: ignore[arg-type]
            lambda name: None,
            Queue(
                lambda: 0.0,
                initial_backoff_s=tuning.pod_initial_backoff_seconds,
                max_backoff_s=tuning.pod_max_backoff_seconds,
                max_unschedulable_s=tuning.pod_max_unschedulable_seconds,
            ),
            Tasks(),
            watch_needed,
        )


def test_pod_group_events_set_the_snapshot_and_wake_waiting_pods() -> None:
    h = IntakeHarness()
    g = group()
    h.intake.event(watched.POD_GROUPS, "ADDED", g)
    assert h.state.inputs.pod_groups == {g.key: g} and h.wakes == 1
    h.intake.event(watched.POD_GROUPS, "MODIFIED", g)  # a status change: nothing the core reads
    assert h.wakes == 1
    bigger = msgspec.structs.replace(g, min_member=3)
    h.intake.event(watched.POD_GROUPS, "MODIFIED", bigger)
    assert h.state.inputs.pod_groups[g.key].min_member == 3 and h.wakes == 2
    h.intake.event(watched.POD_GROUPS, "DELETED", bigger)
    assert h.state.inputs.pod_groups == {} and h.wakes == 3


def test_a_relist_replaces_one_api_groups_pod_groups() -> None:
    h = IntakeHarness()
    volcano = PodGroupInput(names.VOLCANO_POD_GROUP_API, "default", "v", 2)
    h.intake.replace(watched.POD_GROUPS, [volcano], names.VOLCANO_POD_GROUP_API)
    h.intake.replace(watched.POD_GROUPS, [group("a"), group("b")], PLUGINS)
    h.intake.replace(watched.POD_GROUPS, [group("b")], PLUGINS)
    assert set(h.state.inputs.pod_groups) == {volcano.key, f"{PLUGINS}/default/b"}
    h.intake.replace(watched.POD_GROUPS, [], PLUGINS)  # its CRD went away
    assert set(h.state.inputs.pod_groups) == {volcano.key}
    assert h.wakes == 4  # every LIST wakes the pods that waited for it


def test_a_pod_naming_a_pod_group_waits_for_its_watch_to_list() -> None:
    h = IntakeHarness({POD_GROUPS.name: False, VOLCANO_POD_GROUPS.name: True})
    plain = MakePod().Name("p").Req(1).Obj()
    # Every GPU pod asks for DRA's watches too (a DeviceClass may back nvidia.com/gpu).
    assert h.intake.watches_ready(plain) and h.asked == ["dra"]
    pg = MakePod().Name("a").Req(1).Label(names.POD_GROUP_LABEL, "job").Obj()
    assert not h.intake.watches_ready(pg)
    assert h.asked == ["dra", POD_GROUPS.name, "dra"]
    volcano = MakePod().Name("v").Req(1).Annotation(names.VOLCANO_GROUP_ANNOTATION, "j").Obj()
    assert h.intake.watches_ready(volcano)
    assert h.asked[-2] == VOLCANO_POD_GROUPS.name


# ---- the watches follow their CRDs ------------------------------------------------------------


class FakeReflector:
    def __init__(self, name: str) -> None:
        self.name = name
        self.synced = asyncio.Event()
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            self.stopped.set()


async def test_watches_start_with_their_crd_and_stop_when_it_goes() -> None:
    exists = {POD_GROUPS.name: True, VOLCANO_POD_GROUPS.name: False}
    made: list[FakeReflector] = []
    cleared: list[str] = []

    async def established(name: str) -> bool:
        if name == "broken":
            raise ConnectionError("apiserver unavailable")
        return exists[name]

    def maker(name: str) -> Any:
        def make() -> Any:
            made.append(FakeReflector(name))
            return made[-1]

        return make

    kinds = [POD_GROUPS.name, VOLCANO_POD_GROUPS.name]
    crds = CrdWatches(established, {k: maker(k) for k in kinds}, cleared.append, *CRD_TIMES)
    await crds.check()
    await asyncio.sleep(0)  # the watch task starts
    assert [r.name for r in made] == [POD_GROUPS.name]
    # Listed or not running: a pod may be decided; started and not listed: it waits.
    assert not crds.ready(POD_GROUPS.name) and crds.ready(VOLCANO_POD_GROUPS.name)
    made[0].synced.set()
    assert crds.ready(POD_GROUPS.name)
    await crds.check()  # nothing changed: nothing started twice
    assert len(made) == 1
    exists[POD_GROUPS.name], exists[VOLCANO_POD_GROUPS.name] = False, True
    await crds.check()
    assert made[0].stopped.is_set() and cleared == [POD_GROUPS.name]
    assert [r.name for r in made] == [POD_GROUPS.name, VOLCANO_POD_GROUPS.name]
    await asyncio.sleep(0)
    assert crds.ready(POD_GROUPS.name)
    await crds.stop()
    assert made[1].stopped.is_set() and crds.running == {}


async def test_a_crd_that_cannot_be_read_changes_nothing() -> None:
    calls = 0

    async def established(name: str) -> bool:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise ConnectionError("apiserver unavailable")
        return True

    made: list[FakeReflector] = []

    def make() -> Any:
        made.append(FakeReflector(POD_GROUPS.name))
        return made[-1]

    crds = CrdWatches(established, {POD_GROUPS.name: make}, lambda name: None, *CRD_TIMES)
    assert await crds.check()
    await asyncio.sleep(0)
    assert not await crds.check()  # the GET fails: the watch keeps running
    assert POD_GROUPS.name in crds.running and not made[0].stopped.is_set()
    await crds.stop()


async def test_a_failed_crd_read_is_retried_sooner() -> None:
    naps: list[float] = []

    async def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 3:
            raise asyncio.CancelledError

    reads = iter([False, True])

    async def established(name: str) -> bool:
        if next(reads):
            return False
        raise ConnectionError("apiserver unavailable")

    make = {POD_GROUPS.name: lambda: FakeReflector("x")}
    crds = CrdWatches(established, make, lambda name: None, *CRD_TIMES, sleep=nap)
    with pytest.raises(asyncio.CancelledError):
        await crds.run(ok=False)
    assert naps == [CRD_RETRY_S, CRD_RETRY_S, CRD_CHECK_S]  # 5, 5, 60 by default


def test_desired_is_plain_data() -> None:
    assert Desired(P.RUNNING, 2, 2) == Desired(PodGroupPhase("Running"), 2, 2)


# ---- the upstream PodGroup's condition (scheduling.k8s.io/v1beta1) ----------------------------


async def test_the_upstream_condition_is_written_once_when_the_minimum_is_scheduled() -> None:
    marked: list[tuple[str, str, str]] = []

    async def mark(namespace: str, name: str, message: str) -> Write:
        marked.append((namespace, name, message))
        return Write.DONE

    w = Writer()
    w.s = statuses(w.api, lambda: w.leading, lambda: w.assumed, mark)
    upstream = PodGroupInput(names.UPSTREAM_POD_GROUP_API, "default", "job", 2, uid="u1")
    w.s.group_set(upstream, ObservedStatus())

    def in_group(name: str) -> PodInput:
        pod = msgspec.structs.replace(member(name), labels={})
        return msgspec.structs.replace(pod, scheduling_group="job")

    w.s.member_seen(in_group("a"))
    assert await w.one_pass() == [] and marked == []  # 1 of 2: nothing to say yet
    w.s.member_seen(in_group("b"))
    await w.one_pass()
    assert marked == [("default", "job", "2 pods scheduled by topo-scheduler (minCount 2)")]
    assert w.api.calls == []  # no scheduler-plugins phase on an upstream group
    w.s.member_seen(msgspec.structs.replace(in_group("a"), phase="Running"))
    await w.one_pass()
    assert len(marked) == 1  # terminal: written once
    # A group whose condition someone already set True is left alone.
    w.s.group_set(
        msgspec.structs.replace(upstream, uid="u2"), ObservedStatus(initially_scheduled=True)
    )
    w.s.member_seen(in_group("c"))
    await w.one_pass()
    assert len(marked) == 1


def test_the_upstream_condition_is_read_from_the_status() -> None:
    status = {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True"}]}
    up = obj(status, {"schedulingPolicy": {"gang": {"minCount": 2}}}, "scheduling.k8s.io/v1beta1")
    group, observed = read_group(up)
    assert observed.initially_scheduled and not observed.foreign
    assert not group.status_foreign and group.min_member == 2
