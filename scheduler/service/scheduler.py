"""The live scheduler: the loop, leadership, and the wiring of its parts around the pod book.

Data flows one way: watch events -> snapshot (ClusterState) and pod book -> core decision ->
store reservation -> bind -> confirmation by the bound watch (docs/architecture.md).

- intake.py: watch events into the snapshot and pod book events;
- podbook.py: one entry per pod with its stage, and the one transition table;
- effects.py: what each transition does (queue, snapshot, store, Bindings, re-reads, reports);
- cycle.py: the scheduling cycle (serial): pop, decide, assume, reserve;
- binder.py: the binding cycle (concurrent): a unit's Bindings, handed over by the cycle once
  its reservation is answered, each pod's outcome returned;
- storesync.py: claims from holdings, the writes after binds, reconcile;
- preemption.py: victims for an unschedulable unit; its nominations are the book's events;
- podgroups.py: the PodGroup statuses, whose members follow the book.

The parts are built in the order they need each other and handed to each other whole; nothing
is set on a part after it is built. The watches call ``intake`` directly (watches.py), the loop
below calls ``cycle``.

Leadership: only the leader schedules. On election it reads from the apiserver the names its
book holds under another UID than a store record (a same-name recreation its watches lag
behind), inherits the store records of pods it does not know (a graceful handover's last
binds: storesync.py), reconciles the store against the apiserver's bound pods (in the same store
call it writes every node's inventory), loads the reservations a previous leader left for pods
that are still pending (held where they are until that leader's Bindings can no longer land:
run.tuning.bindCommitSeconds after the election, the pod book's UNSETTLED), and only then takes
the first pod; when the store cannot say who led before, or may have lost its last writes (a
restart from disk, a replica promoted by Sentinel, flushed or new: ``kept_history``), it may
have lost the reservations of that leader's last Bindings too: it first waits one lease (that
leader stops sending: the fencing rule in binder.py) plus bindCommitSeconds (a Binding sent
may still commit), and reconciles again before deciding, so that the store also records the
pods those Bindings bound (``first_wait``).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

import structlog

from scheduler.config import Preemption
from scheduler.config.tuning import Tuning
from scheduler.core.settings import CoreSettings
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.state.base import Record, Store, StoreError

from .apiserver import Cluster
from .binder import Binder, bind_timeout_for
from .cycle import Cycle
from .effects import Effects, report
from .intake import Intake
from .leader import Leadership
from .metrics import Metrics
from .podbook import (
    DEPOSED_STAGES,
    SCHEDULABLE_STAGES,
    Ctx,
    Event,
    Explanation,
    PodBook,
    Stage,
    Transition,
)
from .podgroups import MarkScheduled, Patch, PodGroupStatuses
from .preemption import Preemptions
from .queue import SchedulingQueue
from .stalegangs import StaleGangs
from .storesync import StoreSync
from .tasks import Tasks
from .witness import Witness

log = structlog.get_logger("scheduler")


class Scheduler:
    def __init__(
        self,
        settings: CoreSettings,
        scheduler_name: str,
        cluster: Cluster,
        store: Store,
        leadership: Leadership,
        metrics: Metrics,
        clock: Callable[[], float],
        bind_concurrency: int = 64,
        gang_wait_timeout: float = 600.0,
        bind_timeout: float | None = None,
        wait_for_unknown_leader: bool = True,
        stale_gang_policy: str = "report",
        stale_gang_grace: float = 60.0,
        # The config file's preemption section and run.tuning (None: their defaults); each
        # value goes to the part that uses it.
        preemption: Preemption | None = None,
        tuning: Tuning | None = None,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        # Starts the namespace ("namespaces"), claim and volume ("volumes") or PodGroup watches
        # the first time a pending pod needs them; True once they have listed (watches.py).
        # Without those watches (tests) everything is known.
        watch_needed: Callable[[str], bool] = lambda kind: True,
        witness: Witness | None = None,
        # The PodGroup status writes (app.py: the apiserver's); without them (tests) the
        # statuses are kept and never written.
        patch_pod_group: Patch | None = None,
        mark_initially_scheduled: MarkScheduled | None = None,
    ) -> None:
        self.name = scheduler_name
        self.cluster = cluster
        self.store = store
        self.leadership = leadership
        self.metrics = metrics
        self.clock = clock
        self.accepting = True
        self.ready_to_schedule = False  # set after the leader's reconcile
        # A leader that cannot know who led before waits until then before its first decision.
        self.wait_for_unknown_leader = wait_for_unknown_leader
        # The apiserver's record of the elections: whether the leader a store's history ends
        # with is the last one elected (witness.py); None: every store without history waits.
        self.witness = witness
        self.first_decision_at = 0.0
        # The epoch of this replica's election not yet marked settled in the store (``settle``).
        self._unsettled: int | None = None
        # Whether this term waits before its first decision (``settle`` then marks only after
        # the reconcile that follows the wait).
        self._waited = False
        self._gauged: dict[str, int] = {}  # the queue sizes the pending gauge shows
        preemption = preemption or Preemption()
        tuning = tuning or Tuning()
        # The loop wakes at least this often while idle or not deciding, so its timers
        # (nominations' and stale gangs' expiry) run at most this late (run.tuning).
        self.tick_s = tuning.loop_tick_seconds
        # How long ``drain`` lets the queued events be written (run.tuning).
        self.events_close_s = tuning.shutdown_events_seconds
        # How long after it was sent a Binding may still commit: the apiserver's request
        # timeout (run.tuning). A previous leader's reservation is held where it is that long
        # after the election (effects.py ``elected``).
        self.bind_commit_s = tuning.bind_commit_seconds
        self.tasks = Tasks()
        self.state = ClusterState(settings)
        self.queue = SchedulingQueue(
            clock,
            initial_backoff_s=tuning.pod_initial_backoff_seconds,
            max_backoff_s=tuning.pod_max_backoff_seconds,
            max_unschedulable_s=tuning.pod_max_unschedulable_seconds,
            completing=lambda gang: self.effects.completing(gang),
            gangs_changed=self.state.take_gangs_changed,
        )
        self.book = PodBook()
        leading = self._may_write
        self.sync = StoreSync(
            self.state,
            self.book,
            store,
            leadership,
            clock,
            self.tasks,
            leading,
            reconcile_min_s=tuning.store_reconcile_seconds,
            write_batch=tuning.store_write_batch,
            mark_delay_s=tuning.store_mark_seconds,
            inventory_flush_s=tuning.inventory_flush_seconds,
        )
        timing = leadership.timing
        if bind_timeout is None:
            bind_timeout = bind_timeout_for(timing.lease_s, timing.renew_s)
        self.binder = Binder(
            cluster,
            leadership,
            metrics,
            bind_concurrency,
            bind_timeout,
            attempts=tuning.bind_attempts,
            retry_s=tuning.bind_retry_seconds,
            resource_claims=self.state.inputs.resource_claims,
            binding_wait_s=tuning.binding_conditions_seconds,
            binding_poll_s=tuning.binding_conditions_poll_seconds,
            wall_ms=wall_ms,
            clock=clock,
            commit_s=self.bind_commit_s,
        )
        events = functools.partial(report, cluster)
        self.stale = StaleGangs(
            self.state,
            cluster,
            events,
            self.tasks.spawn,
            clock,
            leading,
            stale_gang_policy,
            stale_gang_grace,
            evictions=metrics.evictions,
        )
        self.preemptions = Preemptions(
            self.state,
            self.book,
            store,
            leadership,
            cluster,
            events,
            self.tasks.spawn,
            clock,
            wall_ms,
            self.on_fenced,
            preemption.hold_seconds,
            preemption.retry_seconds,
            dispatch=self._dispatch,
            evictions=metrics.evictions,
        )
        # scheduler-plugins PodGroups' status, written by the leader when nobody else writes it;
        # its members follow the book (effects GROUP_COUNT, GROUP_DROP).
        assumed = frozenset({Stage.ASSUMED})
        self.statuses = PodGroupStatuses(
            patch_pod_group,
            lambda: leadership.leading,
            lambda: [e.pod for e in self.book.in_stages(assumed) if e.pod is not None],
            mark_initially_scheduled,
            patches_in_flight=tuning.pod_group_patches_in_flight,
            pass_interval_s=tuning.pod_group_pass_seconds,
            idle_pass_s=tuning.pod_group_idle_seconds,
        )
        self.effects = Effects(
            self.book,
            self.queue,
            self.sync,
            self.binder,
            self.preemptions,
            self.stale,
            self.statuses,
            cluster,
            metrics,
            clock,
            self.tasks,
            tuning.check_retry_seconds,
            tuning.rebind_seconds,
            tuning.event_queue_size,
        )
        self.intake = Intake(
            scheduler_name,
            self.state,
            self.book,
            self.effects,
            self.sync.inventories.changed,
            self.queue,
            self.tasks,
            watch_needed,
        )
        self.cycle = Cycle(
            self.book,
            self.queue,
            store,
            leadership,
            metrics,
            clock,
            self.effects,
            self.intake,
            self.sync,
            self.preemptions,
            self.on_fenced,
            gang_wait_timeout,
            tuning.batch_pods,
        )

    def _dispatch(
        self, key: str, uid: str, event: Event, ctx: Ctx | None = None
    ) -> Transition | None:
        """Preemption feeds the book through the effects, which are built after it (they reach
        preemption for a nomination's store and pod copies)."""
        return self.effects.dispatch(key, uid, event, ctx)

    def _may_write(self) -> bool:
        return self.accepting and self.leadership.leading

    # ---- leadership --------------------------------------------------------------------------

    async def on_elected(self, epoch: int) -> None:
        # Not deciding until this election is prepared, whatever an earlier one, cut short by
        # a step down (on_fenced), left behind.
        self.ready_to_schedule = False
        self._unsettled = epoch
        self.metrics.leader.set(1)
        self.metrics.epoch.set(epoch)
        while not self.intake.bound_synced:
            await asyncio.sleep(0.05)
        # Every Binding a previous leader sent was sent before now; its reservations stay
        # where they are until none of those can land (podbook.py, UNSETTLED).
        self.effects.elected(self.bind_commit_s)
        # A failure of any store call here gives the lease up.
        records = await self.store.records()
        await self._read_questioned(records)
        for key, uid, holding in self.sync.unknown(records):
            self.effects.dispatch(key, uid, Event.INHERIT, Ctx(holding=holding))
        await self.sync.reserve_landed(epoch, records)
        await self.sync.reserve_own(epoch, records)
        await self.sync.reconcile(epoch, elected=True)
        for key, uid, holding in self.sync.reloadable(records):
            self.effects.dispatch(key, uid, Event.RELOAD, Ctx(holding=holding))
        pending = {
            e.uid: e.pod for e in self.book.in_stages(SCHEDULABLE_STAGES) if e.pod is not None
        }
        await self.preemptions.reload(pending)  # GPUs held for preemptors survive a failover
        self.stale.rescan()  # a gang that fell below its minimum while no one led
        history = await self.store.kept_history(self.leadership.holder, epoch)
        # The apiserver's record (witness.py): a store whose history does not end with the
        # leader recorded there waits (below; a failure to read or write the record fails the
        # election).
        new, chained = False, history.kept
        if self.witness is not None:
            new, chained = await self.witness.elected(self.leadership.holder, epoch, history)
        # A leader that was still waiting when its term ended (or never marked the end of its
        # wait) leaves its wait to this one: the Bindings it waited for may still land.
        wait = self.first_wait(chained and history.settled)
        self.first_decision_at = self.clock() + wait
        self._waited = bool(wait)
        if wait:
            if new:  # a new installation, or the witness deleted too: the log says which case
                log.info(
                    "no leader recorded: waiting until a forgotten leader's Bindings cannot land",
                    seconds=wait,
                )
            else:
                log.info("previous leader unknown: waiting before the first decision", seconds=wait)
            # Its Bindings land during the wait, after the reconcile above, and a pod it bound
            # reaches the book as seen bound (nothing for the store): reconcile again before
            # the first decision, so the store also records the pods those Bindings bound.
            self.sync.request()
        self.ready_to_schedule = True
        await self.settle()  # at once when there is nothing to wait for
        for entry in self.book.in_stages(SCHEDULABLE_STAGES):
            self.effects.dispatch(entry.key, entry.uid, Event.ELECTED)
        self.tasks.wake()

    async def settle(self) -> None:
        """Once this term's wait before its first decision is over and the store records what
        the Bindings waited for bound (the loop asks every turn, after its reconcile), mark the
        election settled in the store, once: the next election may then chain to it and skip
        its own wait (``first_wait``). Until then a successor waits in full, for the Bindings
        this leader was waiting for: chained to a leader that left during its wait (a rolling
        update's SIGTERM, a lost lease), it skipped it, and a forgotten leader's Binding landed
        after its decisions (sim seed 836). So a draining leader never marks (it decides
        nothing, and its loop runs no reconcile), nor one whose reconcile after the wait has
        not succeeded yet (``sync.needed``, or none since the wait ended): marked before, a
        successor with a lagging bound watch found no record of the pods those Bindings bound
        and skipped the wait that would have shown them. A failure to mark is logged and not
        retried: the next election then waits, which is always safe."""
        epoch = self._unsettled
        if (
            epoch is None
            or epoch != self.leadership.epoch
            or not self.ready_to_schedule
            or not self.accepting
            or not self.leadership.leading
            or self.clock() < self.first_decision_at
            or self.sync.needed
            or (self._waited and self.sync.last < self.first_decision_at)
        ):
            return
        self._unsettled = None
        try:
            await self.store.mark_settled(self.leadership.holder, epoch)
        except StoreError as exc:
            log.warning("could not mark the election settled", error=str(exc), epoch=epoch)

    def first_wait(self, chained: bool) -> float:
        """How long an elected leader waits before its first decision, for the Bindings a
        previous leader the store does not know of may still have in flight (0 when none).

        A store whose history ends with the leader last recorded (``chained``), that leader's
        wait over (its election marked settled: ``settle``), or a single replica's own store (no
        other leader exists), waits for nothing. A store that holds no
        election at all (new or flushed: Redis' FLUSHALL, a memory store restarted) lost every
        reservation a previous leader made, so a Binding of that leader's is in nobody's
        record: that leader sends until its local lease ends (at most one lease after this
        election: its renewals fail on the flushed store and against the witness), and a
        Binding it sent may commit up to bindCommitSeconds later (an etcd stall). Nothing the
        apiserver or the store holds tells a new installation from that (the witness deleted
        too, or kept), so a new installation pays this once, at its first start. Any other
        store whose history is cut (restarted from disk, a replica promoted by Sentinel, or a
        newer leader recorded in the witness than its history knows) lost the writes after its
        last snapshot or replication: the reservation of a Binding sent just before may be
        among them, so it waits the same (one rule: a history not chained to the last leader
        proves nothing about what that leader has in flight)."""
        if chained or not self.wait_for_unknown_leader:
            return 0.0
        return self.leadership.timing.lease_s + self.bind_commit_s

    async def _read_questioned(self, records: dict[str, Record]) -> None:
        """Read from the apiserver every name the book holds under another UID than a store
        record of it (storesync.py's ``questioned``), and tell the book what each read found,
        before the reconcile: the record of a pod recreated under a name this replica's watches
        have not caught up with is then the book's, and kept. A failed read fails the election
        (the lease is given up and competed for again), as a failed store call does: freeing
        the record unread could give its GPUs twice."""
        keys = self.sync.questioned(records)
        # Every read runs to its end (none is left behind in flight), then the first failure
        # fails the election.
        found = await asyncio.gather(
            *(self.cluster.get_pod(*key.split("/", 1)) for key in keys), return_exceptions=True
        )
        for key, pod in zip(keys, found, strict=True):
            if isinstance(pod, BaseException):
                raise pod
            log.info(
                "store record of another UID than the book's: the name was read",
                pod=key,
                found=pod.uid if pod is not None else None,
            )
            self.intake.read(pod)

    async def on_lost(self) -> None:
        self.metrics.leader.set(0)
        self.metrics.epoch.set(0)
        self.ready_to_schedule = False
        # A previous leader's reservations held until they settle, the pods decided afresh on
        # them, and its records of pods no watch has shown are a leader's (podbook.py,
        # DEPOSED): a standby holds none of them.
        for entry in self.book.in_stages(DEPOSED_STAGES):
            self.effects.dispatch(entry.key, entry.uid, Event.DEPOSED)

    async def on_fenced(self, epoch: int) -> None:
        """The store refused a write of term ``epoch`` (a reservation, a nomination): this
        replica steps down and competes for the lease again (leader.py's ``step_down``), so it
        decides again only after an election prepared it. Only stopping to decide would wait
        for a renewal to fail, and a store that gives the lease back (a replica promoted from
        before a FLUSHALL) lets every renewal succeed: the pods would stay pending for good."""
        await self.leadership.step_down(epoch, self.on_lost)

    def may_decide(self) -> bool:
        return (
            self.accepting
            and self.ready_to_schedule
            and self.leadership.leading
            and self.clock() >= self.first_decision_at
        )

    # ---- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            if not self.may_decide():
                self.queue.regang()  # its gangs' tiers kept as a leader's are (queue.py)
                await self.tasks.sleep(self.tick_s)
                continue
            await self.sync.if_needed()
            await self.settle()
            try:
                self.stale.tick()
                self.effects.settle_due()
                if self.preemptions.tick():
                    self.queue.on_cluster_event()  # GPUs held for an expired nomination: free
            except Exception:
                log.exception("timers crashed")
            key = self.queue.pop()
            self._update_gauges()
            if key is None:
                wake_at = self.queue.next_wakeup()
                tick = self.tick_s
                timeout = tick if wake_at is None else max(0.0, min(tick, wake_at - self.clock()))
                await self.tasks.sleep(timeout)
                continue
            try:
                await self.cycle.schedule(key, self._next_ready)
            except Exception:
                log.exception("scheduling attempt crashed", pod=key)
                self.effects.dispatch(key, "", Event.CRASHED)
            await asyncio.sleep(0)  # let watch events in between attempts

    def _next_ready(self) -> str | None:
        """The next pod of a batch (cycle.py): one ready now, while this replica may decide."""
        return self.queue.pop() if self.may_decide() else None

    def _update_gauges(self) -> None:
        counts = self.queue.counts()
        if counts == self._gauged:
            return  # once per attempt: a backlog changes only "active", by one
        for queue, n in counts.items():
            if self._gauged.get(queue) != n:
                self.metrics.pending.labels(queue=queue).set(n)
        self._gauged = counts

    def observe_cluster(self) -> None:
        """The cluster-wide gauges, as of now (the /metrics handler calls it before a scrape)."""
        self.metrics.observe_cluster(
            self.state,
            self.book.gangs_in(SCHEDULABLE_STAGES),
            self.book.pending_reasons(SCHEDULABLE_STAGES),
        )

    # ---- shutdown ----------------------------------------------------------------------------

    async def drain(self) -> None:
        """Stop taking pods and competing for the lease (one held is kept for the binds in
        flight: ``Leadership.retire``), wait for the binds in flight, send the queued events."""
        self.accepting = False
        self.leadership.retire()
        self.effects.stop()
        await self.tasks.settle()
        await self.effects.events.close(self.events_close_s)

    def sizes(self) -> dict[str, dict[str, int]]:
        """The size of every per-pod structure of this replica, by part (tests, the soak
        benchmark): after pods come and go, each is back to its size before. The cycle keeps
        nothing per pod (it is all in the book and the snapshot), intake only the pods a bound
        LIST under way has shown; store sync keeps the marks and releases queued for its next
        store call; the loop's own are its background tasks (binds, store writes, reports,
        re-reads) and the Scheduled events queued."""
        return {
            "book": self.book.sizes(),
            "intake": self.intake.sizes(),
            "queue": self.queue.sizes(),
            "state": self.state.sizes(),
            "binder": self.binder.sizes(),
            "sync": self.sync.sizes(),
            "stale": self.stale.sizes(),
            "preemptions": self.preemptions.sizes(),
            "loop": {"tasks": len(self.tasks), "events": len(self.effects.events)},
        }

    def explain(self, key: str) -> Explanation | None:
        entry = self.book.get(key)
        return None if entry is None else entry.explanation
