"""The search: a Hypothesis state machine whose rules are the world's actions and faults, and
whose invariants are invariants.py's checks. Hypothesis draws the schedule (which rule, with
which arguments, how long between), runs it on a fresh world, and on a violation shrinks the
schedule to a shortest one that still fails; the failure names the seed and prints that
schedule twice: as Hypothesis' replayable steps (``state = SimMachine(); state.create_pod(...)``)
and as this world's timeline (simulated time, what happened, every Binding landed, every
election).

The world: two nodes of two GPUs (contention is the point), two replicas of the scheduler (a
third during a rolling update), the memory store (or the real Redis store: ``--redis`` in
soak.py). Pod names come from small pools so that names are reused (a pod recreated under its
name, a gang restarted).

Actions: single pods created, deleted (terminating first, then reaped), finished, recreated
under the same name; gangs by labels, PodGroup (scheduler-plugins), Kueue, the upstream
PodGroup, Volcano's PodGroup and Koordinator's annotations created, restarted (old members
terminating while the new ones come) and shrunk (the minimum lowered, members beyond it
deleted); pods and gangs of high priority, which preempt (victims evicted: terminating, then
reaped).
Faults: the next Binding's answer lost, timed out, 403, 409 after committing, 404 after
committing with the pod deleted at once, 500; an etcd stall of up to 30 s (longer than the
lease: writes commit when it ends); reads failing; either pod stream of either replica lagging, or
re-listing (410: a LIST delivered when the stream catches up); the leader's SIGTERM (a rolling
update: the new replica starts first) and SIGKILL; a FLUSHALL of the store. Time passes between
steps (``tick``); ``quiesce`` ends every fault, lets 120 s pass and checks the quiet-world
invariants, then ends the terminating pods (a kubelet's grace period) and checks them again
30 s later (so does the end of every run).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
from collections.abc import Callable, Coroutine
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from scheduler.core.model.dra import Allocation, ResourceClaim
from scheduler.core.model.names import (
    GANG_REPLICA_LABEL,
    KOORD_GANG_MIN_ANNOTATION,
    KOORD_GANG_NAME_ANNOTATION,
    KOORD_GANG_TOTAL_ANNOTATION,
    KUEUE_GROUP_LABEL,
    KUEUE_TOTAL_ANNOTATION,
    POD_GROUP_LABEL,
    SHARED_RESOURCE,
    VOLCANO_GROUP_ANNOTATION,
)
from scheduler.core.model.objects import PodClaim, PodGroupInput, PodInput
from scheduler.core.snapshot.watched import POD_GROUPS as POD_GROUP_KIND
from scheduler.core.snapshot.watched import RESOURCE_CLAIMS
from scheduler.kube.podgroups import POD_GROUPS, UPSTREAM_GROUP, VOLCANO_GROUP
from scheduler.state.base import History, Store
from scheduler.state.memory import MemoryStore
from tests.builders import MakeNode, MakePod

from . import invariants
from .vloop import Livelock, VirtualLoop
from .world import NAME, Backup, SimApiserver, World

NODES = {"n1": 2, "n2": 2}
SINGLE_NAMES = ("a", "b", "c", "d", "e")
GANG_JOBS = ("j", "k")
HIGH_NAMES = ("p", "q")  # single pods of high priority
HIGH_JOBS = ("h",)  # gangs of high priority
HIGH_PRIORITY = 1000  # every other pod has priority 0: a high one preempts them
# Where a gang's pods say they are one: gpu-topology labels, a scheduler-plugins PodGroup,
# Kueue's pod-group label and total count, the upstream Workload API's PodGroup, a Volcano
# PodGroup (named by an annotation), Koordinator's gang annotations. SimMachine's own rules draw
# only the first two (``create_gang``): the others are FullMachine's (``create_gang_from``).
GANG_SOURCES = ("labels", "PodGroup", "Kueue", "upstream PodGroup", "Volcano", "Koordinator")
# The PodGroup object behind each source that has one: its API group.
GROUP_OF = {
    "PodGroup": POD_GROUPS.group,
    "upstream PodGroup": UPSTREAM_GROUP,
    "Volcano": VOLCANO_GROUP,
}
OTHER_NAMES = ("o1", "o2")
SHARE_NAMES = ("s", "t", "u")  # single pods asking for shares of cards (FullMachine)
BIND_FAULTS = {
    "lose": "commits, its answer lost",
    "timeout": "never reaches etcd (the client times out)",
    "slow": "hangs 20s in a slow apiserver, then commits",
    "403": "is refused 403",
    "404": "commits, the pod deleted at once, answered 404",
    "409": "commits, answered 409",
    "500": "is refused 500",
    "500-committed": "commits, answered 500 (etcd's answer lost inside the apiserver)",
    "claim-fail": "has its ResourceClaim write fail first",
    "claim-timeout": "has its ResourceClaim write time out first",
}
STEP_S = 0.1  # time that passes after every action
QUIET_S = 120.0  # quiet time: a lease, a new leader, its 60 s for unsettled Bindings
REAPED_S = 30.0  # quiet time after the terminating pods ended: a scheduling cycle and its backoff


@dataclass
class Stats:
    """Counts over every run of the process (soak.py prints them)."""

    steps: int = 0
    checks: int = 0
    runs: int = 0
    simulated_s: float = 0.0


class ServerStore(MemoryStore):
    """The memory store as one Redis server, with a server id (Redis' ``run_id``): a copy of it
    (``promoted``) is the replica Sentinel promotes, a new server holding the master's data as
    of its last replicated write, and ``kept_history`` says what the Redis store's ``P:server``
    says there: the history is cut (the last writes may be lost) at the first election on a
    server other than the one that recorded the last election."""

    servers: ClassVar[itertools.count[int]] = itertools.count(1)

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock)
        self.server = next(self.servers)
        self.history_server = self.server  # where the last election was recorded

    async def kept_history(self, holder: str, epoch: int) -> History:
        history = await super().kept_history(holder, epoch)
        kept = history.kept and self.history_server == self.server
        self.history_server = self.server
        return History(kept, history.previous, history.settled)

    def promoted(self, loop: asyncio.AbstractEventLoop) -> ServerStore:
        copy = deepcopy(self, {id(loop): loop})  # the same clock, everything else copied
        copy.server = next(self.servers)
        return copy


@dataclass
class Backend:
    """Where the replicas' store lives: made fresh for each run, flushed on demand; ``promote``
    (None: no failover) a copy of the master as a promoted replica holds it."""

    make: Callable[[Callable[[], float]], Store] = ServerStore
    flush: Callable[[Store, Callable[[], float]], Coroutine[Any, Any, None]] | None = None
    promote: Callable[[Store, asyncio.AbstractEventLoop], Store] | None = None
    io_busy: Callable[[], bool] = field(default=lambda: False)
    on_jump: Callable[[float], None] = field(default=lambda seconds: None)


async def _flush_memory(store: Store, clock: Callable[[], float]) -> None:
    assert isinstance(store, ServerStore)
    store.__init__(clock)  # type: ignore[misc]


def _promote_memory(store: Store, loop: asyncio.AbstractEventLoop) -> Store:
    assert isinstance(store, ServerStore)
    return store.promoted(loop)


def gang_source(pod: PodInput) -> str:
    """Which of ``GANG_SOURCES`` a member of a gang the world made names."""
    if POD_GROUP_LABEL in pod.labels:
        return "PodGroup"
    if KUEUE_GROUP_LABEL in pod.labels:
        return "Kueue"
    if VOLCANO_GROUP_ANNOTATION in pod.annotations:
        return "Volcano"
    if KOORD_GANG_NAME_ANNOTATION in pod.annotations:
        return "Koordinator"
    return "upstream PodGroup" if pod.scheduling_group else "labels"


class SimMachine(RuleBasedStateMachine):
    stats: ClassVar[Stats] = Stats()
    # Rules left out of the search (soak.py --without): to look past a bug already found.
    disabled: ClassVar[frozenset[str]] = frozenset()
    backend: ClassVar[Backend] = Backend(flush=_flush_memory, promote=_promote_memory)

    def __init__(self) -> None:
        super().__init__()
        self.loop = VirtualLoop()
        self.loop.io_busy = self.backend.io_busy
        self.loop.on_jump = self.backend.on_jump
        self.started = self.loop.time()
        nodes = [MakeNode().Name(n).GPUs(g).Obj() for n, g in NODES.items()]
        self.api = SimApiserver(nodes, dict(NODES))
        self.world = World(self.loop, self.backend.make(self.loop.time), self.api)
        # The store's replica as Sentinel would promote it, copied at every tick (its data
        # lags the master's by the writes since: ``failover`` with lost writes).
        self.standby: Store | None = None
        self.timeline: list[tuple[float, str]] = []  # (simulated time, what happened)
        self.seen_binds = 0
        self.seen_terms = 0
        self.seen_evictions = 0
        self.seen_deleted = 0
        self.minimums: dict[str, int] = {}  # gang generation -> minimum
        self.disturbed: set[str] = set()
        # When the store last lost writes a leader may lead on past (a failover with writes
        # lost, or the end of a partition that kept the leader on the old master), or etcd was
        # last restored: the store check holds only for a leader elected since
        # (``_store_found``).
        self.store_cut_at = float("-inf")
        self.generation = 0
        self.violations: list[str] = []
        self.saved: Backup | None = None
        type(self).stats.runs += 1
        self._run(self._start())
        self._record()

    def enabled(self, rule: str) -> bool:
        return rule not in self.disabled

    async def _start(self) -> None:
        self.world.start_replica()
        self.world.start_replica()

        await asyncio.sleep(1.0)

    # ---- running the world -----------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            self.loop.run_until_complete(coro)
        except Livelock as exc:
            self._fail([str(exc)])

    def _inside(self, action: Callable[[], object]) -> None:
        """Run ``action`` inside the loop (what it starts needs a running loop)."""

        async def run() -> None:
            action()

        self._run(run())

    def _advance(self, seconds: float) -> None:
        self._run(asyncio.sleep(seconds))
        self._record()

    def _note(self, what: str) -> None:
        self.timeline.append((self.loop.time(), what))

    def _record(self) -> None:
        """The Bindings that landed and the elections since the last step, into the timeline,
        each at the time it happened."""
        happened = []
        for (holder, epoch), at in zip(
            self.world.terms[self.seen_terms :],
            self.world.elected_at[self.seen_terms :],
            strict=True,
        ):
            happened.append((at, f"  {holder} elected (epoch {epoch})"))
        self.seen_terms = len(self.world.terms)
        for b in self.api.landed[self.seen_binds :]:
            where = f"{b.node}/{b.devices}" if b.devices else b.node
            where += f" (shares {b.shares})" if b.shares else ""
            what = f"  {b.key.split('/')[1]} bound on {where} by {b.holder}"
            happened.append((b.at, what + f" (epoch {b.epoch})"))
        self.seen_binds = len(self.api.landed)
        for at, key in self.api.evictions[self.seen_evictions :]:
            name = key.split("/")[1]
            # A gang preempted is evicted whole: below its minimum from then on, rightly.
            self.disturbed.add(name.rpartition("-")[0])
            happened.append((at, f"  {name} evicted (preempted)"))
        self.seen_evictions = len(self.api.evictions)
        for at, key in self.api.deleted[self.seen_deleted :]:
            name = key.split("/")[1]
            self.disturbed.add(name.rpartition("-")[0])
            happened.append((at, f"  {name} deleted (right after its Binding committed)"))
        self.seen_deleted = len(self.api.deleted)
        for at, what in sorted(happened, key=lambda h: h[0]):
            self.timeline.append((at, what))

    def _act(self, what: str) -> None:
        type(self).stats.steps += 1
        self._note(what)

    def teardown(self) -> None:
        try:
            if not self.violations:
                self._quiet_checks()
        finally:
            type(self).stats.simulated_s += self.loop.time() - self.started
            with contextlib.suppress(Livelock):  # what spun before spins no more once stopped
                self.loop.run_until_complete(self.world.shutdown())
            self.loop.close()
            with contextlib.suppress(Exception):
                asyncio.set_event_loop(None)

    def _fail(self, found: list[str]) -> None:
        if not found:
            return
        self.violations = found
        lines = "\n".join(
            f"{at - self.started:9.2f}s  {what}"
            for at, what in sorted(self.timeline, key=lambda entry: entry[0])
        )
        raise AssertionError(
            "\n".join(found)
            + "\n\ntimeline (simulated time):\n"
            + lines
            + "\n\nat the end:\n"
            + "\n".join(self._replica_states())
        )

    def _replica_states(self) -> list[str]:
        out = []
        for r in self.world.replicas:
            if r.state == "stopped":
                continue
            role = "leader" if r.leading else "standby"
            stages = ", ".join(
                f"{e.key.split('/')[1]}:{e.stage.value}"
                for e in sorted(r.s.book.entries.values(), key=lambda e: e.key)
            )
            out.append(f"  {r.name} ({role}, epoch {r.leadership.epoch}): {stages}")
        return out

    # ---- pods ------------------------------------------------------------------------------

    def _pods(self) -> list[PodInput]:
        return sorted(self.api.pods.values(), key=lambda p: p.key)

    def _pick(self, index: int, which: Callable[[PodInput], bool]) -> PodInput | None:
        pods = [p for p in self._pods() if which(p)]
        return pods[index % len(pods)] if pods else None

    @precondition(lambda self: self.enabled("create_pod"))
    @rule(name=st.sampled_from(SINGLE_NAMES), gpus=st.integers(1, 2), claim=st.booleans())
    def create_pod(self, name: str, gpus: int, claim: bool) -> None:
        """A single pod; with ``claim``, it also has a ResourceClaim (DRA) a driver allocated,
        which the binder reserves for it before each Binding."""
        if f"default/{name}" in self.api.pods:
            return
        claim = claim and self.enabled("claims")
        self._act(f"create {name} ({gpus} GPU" + (", a ResourceClaim)" if claim else ")"))
        pod = MakePod().Name(name).Req(gpus).Obj()
        if claim:
            allocated = ResourceClaim(
                "default", f"{name}-claim", uid=f"claim-{name}", allocation=Allocation()
            )
            self.api.claims[allocated.key] = allocated
            for r in self.world.running():
                self._inside(
                    functools.partial(r.s.intake.event, RESOURCE_CLAIMS, "ADDED", allocated)
                )
            pod = msgspec.structs.replace(
                pod, resource_claims=(PodClaim("gpu", claim=allocated.name),)
            )
        self.api.create(pod)
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("create_other"))
    @rule(name=st.sampled_from(OTHER_NAMES), node=st.sampled_from(sorted(NODES)))
    def create_other(self, name: str, node: str) -> None:
        """A pod of another scheduler (a Job's, a DaemonSet's), bound by it: cpu, no GPU."""
        if f"default/{name}" in self.api.pods:
            return
        self._act(f"create {name} of default-scheduler, bound on {node} (1 cpu)")
        pod = MakePod().Name(name).Requests(cpu="1").Bound(node).Obj()
        self.api.create(msgspec.structs.replace(pod, scheduler_name="default-scheduler"))
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("create_gang"))
    @rule(
        job=st.sampled_from(GANG_JOBS),
        size=st.integers(2, 3),
        podgroup=st.booleans(),
    )
    def create_gang(self, job: str, size: int, podgroup: bool) -> None:
        if any(p.labels.get("job") == job for p in self.api.pods.values()):
            return
        self._create_gang(job, size, "PodGroup" if podgroup else "labels")
        self._advance(STEP_S)

    def _create_gang(self, job: str, size: int, source: str, priority: int = 0) -> None:
        self.generation += 1
        generation = f"{job}{self.generation}"
        self.minimums[generation] = size
        high = f", priority {priority}" if priority else ""
        self._act(f"create gang {generation} of {size} x 1 GPU ({source}{high})")
        if source in GROUP_OF:
            self._put_group(PodGroupInput(GROUP_OF[source], "default", job, min_member=size))
        for i in range(size):
            pod = MakePod().Name(f"{generation}-{i}").Req(1).Label("job", job).Priority(priority)
            if source == "PodGroup":
                pod = pod.Label(POD_GROUP_LABEL, job)
            elif source == "Kueue":
                pod = pod.Label(KUEUE_GROUP_LABEL, job)
                pod = pod.Annotation(KUEUE_TOTAL_ANNOTATION, str(size))
            elif source == "labels":
                pod = pod.Gang(job, size)
            elif source == "Volcano":
                pod = pod.Annotation(VOLCANO_GROUP_ANNOTATION, job)
            elif source == "Koordinator":
                pod = pod.Annotation(KOORD_GANG_NAME_ANNOTATION, job)
                pod = pod.Annotation(KOORD_GANG_MIN_ANNOTATION, str(size))
                pod = pod.Annotation(KOORD_GANG_TOTAL_ANNOTATION, str(size))
            made = pod.Obj()
            if source == "upstream PodGroup":
                made = msgspec.structs.replace(made, scheduling_group=job)
            self.api.create(made)

    def _put_group(self, group: PodGroupInput, change: str = "ADDED") -> None:
        """A PodGroup written (``change``: ADDED, MODIFIED) or deleted (DELETED), and every
        running replica's PodGroup watch told at once."""
        if change == "DELETED":
            self.api.groups.pop(group.key, None)
        else:
            self.api.groups[group.key] = group
        for r in self.world.running():
            self._inside(functools.partial(r.s.intake.event, POD_GROUP_KIND, change, group))

    @precondition(lambda self: self.enabled("restart_gang"))
    @rule(index=st.integers(0, 99))
    def restart_gang(self, index: int) -> None:
        """A JobSet or Kubeflow restart: the members are deleted (terminating) and new ones
        come under new names, the same gang."""
        old = self._pick(index, lambda p: "job" in p.labels and not p.deleting)
        if old is None:
            return
        job = old.labels["job"]
        members = [p for p in self._pods() if p.labels.get("job") == job and not p.deleting]
        self._act(f"restart gang {job}: {', '.join(p.name for p in members)} terminating")
        for p in members:
            self._terminate(p)
        size = int(old.labels.get(GANG_REPLICA_LABEL, "0")) or len(members)
        self._create_gang(job, size, gang_source(old), old.priority)
        self._advance(STEP_S)

    def _terminate(self, pod: PodInput) -> None:
        self.disturbed.add(pod.name.rpartition("-")[0])
        if pod.node_name:
            self.api.put(msgspec.structs.replace(pod, deleting=True))
        else:
            self.api.remove(pod.key)

    @precondition(lambda self: self.enabled("delete_pod"))
    @rule(index=st.integers(0, 99), graceful=st.booleans())
    def delete_pod(self, index: int, graceful: bool) -> None:
        pod = self._pick(index, lambda p: not p.deleting)
        if pod is None:
            return
        self._act(f"delete {pod.name}" + (" (terminating)" if graceful else ""))
        if graceful:
            self._terminate(pod)
        else:
            self.disturbed.add(pod.name.rpartition("-")[0])
            self.api.remove(pod.key)
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("reap"))
    @rule()
    def reap(self) -> None:
        """Terminating pods end: their containers stopped, the kubelet deletes them."""
        if self._reap():
            type(self).stats.steps += 1
            self._advance(STEP_S)

    def _reap(self) -> bool:
        gone = [p for p in self._pods() if p.deleting]
        if not gone:
            return False
        self._note(f"terminated: {', '.join(p.name for p in gone)}")
        for p in gone:
            self.api.remove(p.key)
        return True

    @precondition(lambda self: self.enabled("finish_pod"))
    @rule(index=st.integers(0, 99))
    def finish_pod(self, index: int) -> None:
        pod = self._pick(index, lambda p: bool(p.node_name) and not p.finished)
        if pod is None:
            return
        self._act(f"{pod.name} succeeded")
        self.disturbed.add(pod.name.rpartition("-")[0])
        self.api.put(msgspec.structs.replace(pod, phase="Succeeded"))
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("recreate_pod"))
    @rule(index=st.integers(0, 99), gpus=st.integers(1, 2))
    def recreate_pod(self, index: int, gpus: int) -> None:
        """Deleted and created again under its name with a new UID, maybe asking for another
        number of GPUs (a StatefulSet's pod, a training job's worker restarted, ``kubectl
        replace``)."""
        pod = self._pick(
            index,
            lambda p: p.scheduler_name == NAME and "job" not in p.labels and not p.deleting,
        )
        if pod is None:
            return
        shared = any(SHARED_RESOURCE in c.limits for c in pod.containers)
        self._act(f"recreate {pod.name} (new UID, " + ("its share)" if shared else f"{gpus} GPU)"))
        self.api.remove(pod.key)
        spec = MakePod().Name(pod.name).Req(gpus).Priority(pod.priority).Obj()
        fresh = msgspec.structs.replace(spec, resource_claims=pod.resource_claims)
        if shared:  # a share pod (FullMachine's create_shared) comes back asking the same
            fresh = msgspec.structs.replace(fresh, containers=pod.containers)
        self.api.create(fresh)
        self._advance(STEP_S)

    # ---- faults ----------------------------------------------------------------------------

    @precondition(lambda self: self.enabled("bind_fault"))
    @rule(kind=st.sampled_from(sorted(BIND_FAULTS)))
    def bind_fault(self, kind: str) -> None:
        if not self.enabled(kind):
            return
        self._act(f"fault: the next Binding {BIND_FAULTS[kind]}")
        if kind.startswith("claim-"):
            self.api.claim_faults.append(kind.removeprefix("claim-"))
        else:
            self.api.bind_faults.append(kind)
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("stall") and not self.api.stalled)
    @rule(seconds=st.sampled_from([2.0, 8.0, 20.0, 30.0]))
    def stall(self, seconds: float) -> None:
        self._act(f"etcd stalls for {seconds:.0f}s")
        self.api.stalled = True
        self.loop.call_later(seconds, self._end_stall)
        self._advance(STEP_S)

    def _end_stall(self) -> None:
        if self.api.stalled:
            self._note("etcd answers again")
            self.api.end_stall()

    @precondition(lambda self: self.enabled("reads_fail"))
    @rule(seconds=st.sampled_from([1.0, 10.0]))
    def reads_fail(self, seconds: float) -> None:
        self._act(f"pod reads fail for {seconds:.0f}s")
        self.api.reads_fail = True

        def back() -> None:
            self.api.reads_fail = False

        self.loop.call_later(seconds, back)
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("lag"))
    @rule(
        which=st.integers(0, 2),
        stream=st.sampled_from(["pending", "bound"]),
        seconds=st.sampled_from([1.0, 5.0, 20.0]),
    )
    def lag(self, which: int, stream: str, seconds: float) -> None:
        running = self.world.running()
        r = running[which % len(running)]
        self._act(f"{r.name}'s {stream} watch lags {seconds:.0f}s")
        r.streams.paused[stream] = True

        def caught_up() -> None:
            r.streams.paused[stream] = False

        self.loop.call_later(seconds, caught_up)
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("relist"))
    @rule(which=st.integers(0, 2), stream=st.sampled_from(["pending", "bound"]))
    def relist(self, which: int, stream: str) -> None:
        running = self.world.running()
        r = running[which % len(running)]
        self._act(f"{r.name}'s {stream} watch re-lists (410 Gone)")
        r.streams.relist(stream, *self.api.listed(stream))
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("handover") and len(self.world.running()) <= 2)
    @rule()
    def handover(self) -> None:
        """A rolling update: a new replica starts, then the leader gets SIGTERM."""
        leader = self.world.leader()
        if leader is None:
            return
        self._inside(self.world.start_replica)
        new = self.world.replicas[-1]
        self._act(f"rolling update: {new.name} started, {leader.name} gets SIGTERM")
        self._inside(leader.sigterm)
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("kill"))
    @rule()
    def kill(self) -> None:
        leader = self.world.leader()
        if leader is None:
            return
        self._act(f"{leader.name} gets SIGKILL")
        self._inside(leader.sigkill)
        self._inside(self.world.start_replica)
        new = self.world.replicas[-1]
        self._note(f"  {new.name} started")
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("etcd_restore"))
    @rule(restore=st.booleans())
    def etcd_restore(self, restore: bool) -> None:
        """An etcd backup now; or a restore of the last one (without --bump-revision)."""
        if not restore:
            self._act("etcd backup")
            self.saved = self.api.backup()
        elif self.saved is not None:
            self._act("etcd restored from the backup: resourceVersions go back")
            self.api.restore(self.saved)
            self.disturbed.update(self.minimums)  # gangs may be cut in two by the restore
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("flush_store"))
    @rule()
    def flush_store(self) -> None:
        if self.backend.flush is None:
            return
        self._act("FLUSHALL: the store loses everything")
        self._run(self.backend.flush(self.world.master, self.loop.time))
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("store_fault"))
    @rule(
        slow=st.booleans(),
        seconds=st.sampled_from([3.0, 12.0, 25.0]),
    )
    def store_fault(self, slow: bool, seconds: float) -> None:
        """The store unreachable for ``seconds`` (renewals fail: a leader's lease runs down
        while it still leads), or every call answering ``seconds`` late (a renewal answered
        after the local lease lapsed: the replica keeps its epoch and leads on)."""
        if slow:
            self._act(f"store calls answer {seconds:.0f}s late for {2 * seconds:.0f}s")
            self.world.faults.delay = seconds
            self.loop.call_later(2 * seconds, self._store_back)
        else:
            self._act(f"store unreachable for {seconds:.0f}s")
            self.world.faults.down = True
            self.loop.call_later(seconds, self._store_back)
        self._advance(STEP_S)

    def _store_back(self) -> None:
        faults = self.world.faults
        if faults.down or faults.delay:
            self._note("the store answers again")
        faults.down, faults.delay = False, 0.0

    def _promote(self) -> Store:
        assert self.backend.promote is not None
        return self.backend.promote(self.world.master, self.loop)

    @precondition(
        lambda self: (
            self.enabled("failover")
            and self.backend.promote is not None
            and self.world.old_master is None
        )
    )
    @rule(lost=st.booleans(), partition=st.sampled_from([0.0, 5.0, 20.0, 60.0]))
    def failover(self, lost: bool, partition: float) -> None:
        """Sentinel promotes the store's replica: with ``lost``, the master's writes since the
        last tick are lost (the replica lagged); with ``partition``, the leader still reaches
        the old master (which still takes its writes) for that long, until the old master
        rejoins as a replica of the new one (its own data replaced)."""
        world = self.world
        promoted = self.standby if lost and self.standby is not None else self._promote()
        leader = world.leader()
        cut = leader.name if leader is not None and partition > 0 else ""
        self._act(
            "store failover: the replica promoted"
            + (" (the writes since the last tick lost)" if lost else "")
            + (f"; {cut} still on the old master for {partition:.0f}s" if cut else "")
        )
        if cut:
            world.old_master, world.partitioned = world.master, {cut}
            self.loop.call_later(partition, self._heal)
        elif lost:
            self.store_cut_at = self.loop.time()
        world.master, self.standby = promoted, None
        self._advance(STEP_S)

    def _heal(self) -> None:
        if self.world.old_master is not None:
            self._note("the partition heals: the old master is a replica again")
            self.store_cut_at = self.loop.time()
        self.world.old_master, self.world.partitioned = None, set()

    @precondition(lambda self: self.enabled("witness_fault"))
    @rule(call=st.sampled_from(["read", "write"]), seconds=st.sampled_from([0.0, 5.0, 20.0]))
    def witness_fault(self, call: str, seconds: float) -> None:
        """The epoch witness's ConfigMap answers 403 (an authorization webhook timing out,
        RBAC re-applied by GitOps): the next ``call`` (read or compare-and-swap), or every one
        for ``seconds``."""
        if seconds:
            self._act(f"fault: every witness {call} is refused 403 for {seconds:.0f}s")
            self.api.witness_forbidden_until[call] = self.loop.time() + seconds
        else:
            self._act(f"fault: the next witness {call} is refused 403")
            self.api.witness_faults[call] += 1
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("delete_witness"))
    @rule()
    def delete_witness(self) -> None:
        """The epoch witness's ConfigMap deleted (by hand, a namespace cleanup)."""
        self._act("the epoch witness ConfigMap is deleted")
        self.api.config_maps.clear()
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("tick"))
    @rule(seconds=st.sampled_from([0.5, 2.0, 5.0, 16.0]))
    def tick(self, seconds: float) -> None:
        self._act(f"{seconds:.1f}s pass")
        if self.enabled("failover") and self.backend.promote is not None:
            self.standby = self._promote()  # the replica caught up to here
        self._advance(seconds)

    @precondition(lambda self: self.enabled("quiesce"))
    @rule()
    def quiesce(self) -> None:
        self._act("quiet: faults end")
        self._quiet_checks()

    # ---- invariants ------------------------------------------------------------------------

    @invariant()
    def safe(self) -> None:
        type(self).stats.checks += 5
        self._fail(
            invariants.double_gpus(self.api)
            + invariants.shared_gpus(self.api)
            + invariants.fencing(self.api.landed)
            + invariants.own_refusals(self.world.refused)
            + [gap for r in self.world.running() for gap in invariants.table_gaps(r)]
        )

    def _quiet_checks(self) -> None:
        self._end_stall()
        self._store_back()
        self._heal()
        self.api.witness_faults = {"read": 0, "write": 0}
        self.api.witness_forbidden_until = {"read": 0.0, "write": 0.0}
        self.api.bind_faults.clear()
        self.api.claim_faults.clear()
        self.api.reads_fail = False
        for r in self.world.running():
            r.streams.paused = {"pending": False, "bound": False}
        if not any(r.state == "running" for r in self.world.running()):
            self._inside(self.world.start_replica)
        self._advance(QUIET_S)
        self._note(f"(quiet for {QUIET_S:.0f}s)")
        self._fail(self._quiet_found())
        # Then the terminating pods end, as a kubelet ends every one within its grace period
        # (a checkpoint on SIGTERM may outlast the quiet time: the checks above held with
        # them still holding their GPUs), and the checks must hold again: left terminating
        # for good, a restarted gang's old members kept its new ones waiting and the quiet
        # checks never saw them bound (seed 75).
        if self._reap():
            self._advance(REAPED_S)
            self._note(f"(quiet for {REAPED_S:.0f}s more)")
            self._fail(self._quiet_found())

    def _quiet_found(self) -> list[str]:
        found = invariants.double_gpus(self.api) + invariants.shared_gpus(self.api)
        found += invariants.fencing(self.api.landed)
        found += invariants.partial_gangs(self.api, self.minimums, self.disturbed)
        for r in self.world.running():
            found += invariants.drift(self.api, r)
        found += invariants.liveness(self.api, set(self.minimums))
        found += invariants.stale_reservations(self.api)
        found += self._store_found()
        type(self).stats.checks += 8
        return found

    def _store_found(self) -> list[str]:
        """The leader's store against the apiserver (``invariants.store_records``), read as the
        auditor reads it: the records, then each node's GPU owners. Only for a leader elected
        since the store last lost writes: one that leads on through a failover that lost them
        (its lease was in the promoted copy) never reconciles, so the store lacks its last
        marks and reservations and keeps records it released, until the next election or
        conflict (found by this check, open on main: seeds 12, 21, 29, 33, 41, 47). Across an
        etcd restore it checks (a restore asks for a reconcile: sim seed 10; a release in
        flight lands before a reconcile begins, and before a reservation of its pod is sent:
        seed 1019)."""
        leader = self.world.leader()
        if leader is None or leader.leadership.epoch is None:
            return []
        term = self.world.term_of(leader.name, leader.leadership.epoch)
        if term < 0 or self.world.elected_at[term] <= self.store_cut_at:
            return []
        store = self.world.store_of(leader)
        read: dict[str, Any] = {}

        async def collect() -> None:
            read["records"] = await store.records()
            read["owners"] = {n.name: await store.owners(n.name) for n in self.api.nodes}

        self._run(collect())
        return invariants.store_records(self.api, read["records"], read["owners"])


# Round four's rules (and later rounds': gangs shrunk, shares), in a subclass: every rule a
# class has moves every seed's draws (Hypothesis draws a rule's index among all of them), so the
# world with them left out (make sim's SIM_CI_LEFT_OUT, the mutants' searches: ``machine_for``)
# is ``SimMachine`` itself, whose seeds draw what they drew before these rules came.
# (FullMachine's own seeds, the soak's, drew otherwise before shrink_gang and create_shared.)
NEW_RULES = frozenset({"create_high", "create_gang_from", "shrink_gang", "create_shared"})


class FullMachine(SimMachine):
    """The world with every rule: ``SimMachine``'s, and pods and gangs of high priority
    (preemption), gangs by Kueue, the upstream PodGroup, Volcano and Koordinator, gangs
    shrunk, and single pods asking for shares of cards."""

    @precondition(lambda self: self.enabled("create_high"))
    @rule(
        name=st.sampled_from(HIGH_NAMES),
        gpus=st.integers(1, 2),
        gang=st.sampled_from([0, 2, 3]),
        source=st.sampled_from(GANG_SOURCES),
    )
    def create_high(self, name: str, gpus: int, gang: int, source: str) -> None:
        """A pod of high priority (a PriorityClass's value on its spec, as admission writes it),
        or with ``gang`` a gang of that many: when it does not fit, the leader preempts pods of
        priority 0 (whole gangs, never one member alone) through the Eviction API; the fake
        apiserver makes each victim terminating, ``reap`` ends it like any deletion, and the
        preemptor binds on the GPUs its nomination holds."""
        if gang:
            job = HIGH_JOBS[0]
            if any(p.labels.get("job") == job for p in self.api.pods.values()):
                return
            self._create_gang(job, gang, source, HIGH_PRIORITY)
        else:
            if f"default/{name}" in self.api.pods:
                return
            self._act(f"create {name} ({gpus} GPU, priority {HIGH_PRIORITY})")
            self.api.create(MakePod().Name(name).Req(gpus).Priority(HIGH_PRIORITY).Obj())
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("create_gang_from"))
    @rule(
        job=st.sampled_from(GANG_JOBS),
        size=st.integers(2, 3),
        source=st.sampled_from(GANG_SOURCES[2:]),
    )
    def create_gang_from(self, job: str, size: int, source: str) -> None:
        """A gang of the other sources: Kueue's plain pod group (admitted: no gate left), the
        upstream PodGroup (scheduling.k8s.io, its gang policy's minCount) the pods name in
        spec.schedulingGroup, a Volcano PodGroup (scheduling.volcano.sh, its minMember) the pods
        name in annotation scheduling.k8s.io/group-name, or Koordinator's gang annotations
        (name, min-available, total-number: no object behind them)."""
        if any(p.labels.get("job") == job for p in self.api.pods.values()):
            return
        self._create_gang(job, size, source)
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("shrink_gang"))
    @rule(index=st.integers(0, 99), by=st.integers(1, 2), delete=st.booleans())
    def shrink_gang(self, index: int, by: int, delete: bool) -> None:
        """A job scaled down by its user: the gang's minimum lowered by ``by`` (to 1 at least)
        and, with ``delete``, its members beyond the new minimum deleted (the highest indexes
        first, as a StatefulSet or a training operator scales down; terminating when bound).
        The sources whose size is the member count itself (the gpu-topology replica label,
        Kueue's total count) always lose their members beyond it. The world deletes first, then
        writes the new minimum: the scheduler meanwhile sees too few members for the old one
        and waits, never binding a part. Where the minimum lives: the PodGroup's minMember
        (scheduler-plugins', Volcano's: written in place), the upstream PodGroup replaced by
        its controller (deleted, created again with the new minCount: a new UID), or each
        remaining member's label or annotations (patched; Koordinator's total-number is
        lowered with the members, else kept). The generation's minimum in ``minimums`` is the
        new one, and it is not ``disturbed``: it must hold its new minimum bound once quiet."""
        one = self._pick(index, lambda p: "job" in p.labels and not p.deleting)
        if one is None:
            return
        job, generation = one.labels["job"], one.name.rpartition("-")[0]
        minimum = max(1, self.minimums[generation] - by)
        if minimum == self.minimums[generation]:
            return
        source = gang_source(one)
        delete = delete or source in ("labels", "Kueue")
        members = sorted(
            (p for p in self._pods() if p.labels.get("job") == job and not p.deleting),
            key=lambda p: int(p.name.rpartition("-")[2]),
        )
        gone = members[minimum:] if delete else []
        self._act(
            f"shrink gang {generation} ({source}): minimum {self.minimums[generation]} -> "
            f"{minimum}" + (f", {', '.join(p.name for p in gone)} deleted" if gone else "")
        )
        for p in gone:
            if p.node_name:
                self.api.put(msgspec.structs.replace(p, deleting=True))
            else:
                self.api.remove(p.key)
        self.minimums[generation] = minimum
        if source in GROUP_OF:
            group = PodGroupInput(GROUP_OF[source], "default", job)
            group = self.api.groups.get(group.key, group)
            lowered = msgspec.structs.replace(group, min_member=minimum)
            if source == "upstream PodGroup":
                self._put_group(group, "DELETED")
                self._put_group(msgspec.structs.replace(lowered, uid=f"pg-{generation}-{minimum}"))
            else:
                self._put_group(lowered, "MODIFIED")
            self._advance(STEP_S)
            return
        for p in members[:minimum] if delete else members:
            if source == "labels":
                p = msgspec.structs.replace(
                    p, labels={**p.labels, GANG_REPLICA_LABEL: str(minimum)}
                )
            elif source == "Kueue":
                notes = {KUEUE_TOTAL_ANNOTATION: str(minimum)}
                p = msgspec.structs.replace(p, annotations={**p.annotations, **notes})
            else:
                notes = {KOORD_GANG_MIN_ANNOTATION: str(minimum)}
                if delete:
                    notes[KOORD_GANG_TOTAL_ANNOTATION] = str(minimum)
                p = msgspec.structs.replace(p, annotations={**p.annotations, **notes})
            self.api.put(p)
        self._advance(STEP_S)

    @precondition(lambda self: self.enabled("create_shared"))
    @rule(
        name=st.sampled_from(SHARE_NAMES),
        core=st.sampled_from([30, 50, 70]),
        memory=st.sampled_from([0, 8, 24]),
        cards=st.integers(1, 2),
    )
    def create_shared(self, name: str, core: int, memory: int, cards: int) -> None:
        """A single pod asking for a share of ``cards`` cards (Koordinator's
        ``koordinator.sh/gpu.shared``, ``gpu-core`` percent and ``gpu-memory`` of each card;
        every card has 32 GiB): the leader places it beside other shares on a card no pod holds
        whole, and writes the shares in its assignment annotation, which
        ``invariants.shared_gpus`` reads. Deleted, finished, recreated (with the same share) and
        preempted like any single pod."""
        if f"default/{name}" in self.api.pods:
            return
        gib = f", {memory} GiB" if memory else ""
        self._act(f"create {name} (a share of {cards} card{'s' * (cards > 1)}: {core}%{gib} each)")
        # Koordinator's amounts are totals over the pod's cards.
        total = f"{memory * cards}Gi" if memory else None
        pod = MakePod().Name(name).Shared(core=core * cards, memory=total, cards=cards)
        self.api.create(pod.Obj())
        self._advance(STEP_S)


def machine_for(disabled: frozenset[str]) -> type[SimMachine]:
    """The machine whose rules are the ones not ``disabled``: ``SimMachine`` when round four's
    are all left out (its seeds draw as before them), else ``FullMachine``."""
    return SimMachine if disabled >= NEW_RULES else FullMachine
