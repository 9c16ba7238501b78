"""The live scheduler: the loop, and the wiring of its parts around the pod book.

Data flows one way: watch events -> snapshot (ClusterState) and pod book -> core decision ->
store reservation -> bind -> confirmation by the bound watch (docs/architecture.md).

- intake.py: watch events into the snapshot and pod book events;
- podbook.py: one entry per pod with its stage, and the one transition table;
- cycle.py: the scheduling cycle (serial): pop, decide, reserve, assume;
- binder.py: the Bindings (concurrent), each pod's outcome reported back here;
- storesync.py: claims from holdings, the writes after binds, reconcile.

Every event goes through ``dispatch``: the book moves the pod's entry by the table and this
module runs the effects the table names (queue, snapshot, store, binder, re-reads, reports).

Leadership: only the leader schedules. On election it reconciles the store against the
apiserver's bound pods (in the same store call it writes every node's inventory), loads the
reservations a previous leader left for pods that are still pending, and only then takes the
first pod; when the store cannot say who led before, or may have lost its last writes (a
flushed or new Redis, a restart from disk, a replica promoted by Sentinel: ``kept_history``),
it first waits one lease duration, so that any Binding a previous leader still had in
flight has completed (the fencing rule in binder.py), and reconciles again before deciding, so
that the store also records the pods those Bindings bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import Callable
from typing import Any

import msgspec
import structlog

from scheduler.core.cluster import ClusterState
from scheduler.core.cycle import gang_of
from scheduler.core.decisions import Placement
from scheduler.core.objects import (
    ClaimInput,
    NamespaceInput,
    NodeInput,
    PodGroupInput,
    PodInput,
    TopologyInput,
    VolumeInput,
)
from scheduler.core.requeue import helped_by_added
from scheduler.core.settings import CoreSettings
from scheduler.state.base import Store

from .binder import BIND_ATTEMPTS, BIND_RETRY_S, Binder, Cluster, Outcome, bind_timeout_for
from .cycle import Cycle
from .events import EventLane
from .intake import Intake
from .inventories import NodeInventories
from .leader import Leadership
from .metrics import Metrics
from .podbook import (
    SCHEDULABLE_STAGES,
    Ctx,
    Effect,
    Entry,
    Event,
    PodBook,
    Stage,
    Transition,
)
from .preemption import HOLD_S, Preemptions
from .queue import SchedulingQueue
from .stalegangs import StaleGangs
from .storesync import RECONCILE_MIN_S, StoreSync
from .witness import Witness

__all__ = [
    "BIND_ATTEMPTS",
    "BIND_RETRY_S",
    "RECONCILE_MIN_S",
    "Cluster",
    "Explanation",
    "Scheduler",
]

log = structlog.get_logger("scheduler")

# A re-read of a pod (effect CHECK) that fails is tried again after this long.
CHECK_RETRY_S = 1.0
# Stages in which a preemptor's nomination has done its job (or can no longer). Not BINDING:
# a Binding may fail, and the preemptor must then find its GPUs still held for it.
_NOMINATION_ENDS = frozenset({Stage.GONE, Stage.ASSUMED, Stage.BOUND})
# Stages in which a re-read still matters.
_CHECKED_STAGES = frozenset(
    {Stage.PENDING, Stage.RELOADED, Stage.BINDING, Stage.ASSUMED, Stage.INHERITED}
)
# An uncertain Binding (effect REBIND) is sent again after this long.
REBIND_S = 1.0


class Explanation(msgspec.Struct):
    pod: str
    result: str
    reason: str = ""
    node: str = ""
    devices: tuple[int, ...] = ()
    gang: str | None = None
    attempts: int = 0


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
        preemption_hold: float = HOLD_S,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        witness: Witness | None = None,
    ) -> None:
        self.name = scheduler_name
        self.cluster = cluster
        self.store = store
        self.leadership = leadership
        self.metrics = metrics
        self.clock = clock
        self.state = ClusterState(settings)
        self.queue = SchedulingQueue(clock)
        self.book = PodBook()
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.events = EventLane(metrics.events_dropped)  # Scheduled events, off the pod's path
        self._checking: set[tuple[str, str]] = set()
        self._gauged: dict[str, int] = {}  # the queue sizes the pending gauge shows
        self.accepting = True
        self.ready_to_schedule = False  # set after the leader's reconcile
        # A leader that cannot know who led before waits until then before its first decision.
        self.wait_for_unknown_leader = wait_for_unknown_leader
        # The apiserver's record of the elections: tells a new installation from a store that
        # lost its history (witness.py); None: every store without history waits.
        self.witness = witness
        self.first_decision_at = 0.0
        self.sync = StoreSync(self.state, self.book, store, leadership, clock, self.dispatch)
        self.inventories = NodeInventories(
            store,
            leadership,
            lambda: {name: node.inventory for name, node in self.state.nodes.items()},
            lambda: self.accepting and self.leadership.leading,
            self._spawn,
            self.sync.request,
        )
        self.sync.inventories = self.inventories
        # Starts the namespace ("namespaces") or claim and volume ("volumes") watches the first
        # time a pending pod needs them and says whether they have listed; set by the app
        # (tests without those watches leave it: everything is known).
        self.watch_needed: Callable[[str], bool] = lambda kind: True
        self.intake = Intake(
            scheduler_name,
            self.state,
            self.book,
            self.dispatch,
            self.inventories.changed,
            self._cluster_event,
            lambda kind: self.watch_needed(kind),
        )
        timing = leadership.timing
        self.binder = Binder(
            cluster,
            leadership,
            metrics,
            self._spawn,
            self._on_bind_results,
            bind_concurrency,
            bind_timeout
            if bind_timeout is not None
            else bind_timeout_for(timing.lease_s, timing.renew_s),
        )
        self.cycle = Cycle(
            self.state,
            self.book,
            self.queue,
            store,
            leadership,
            metrics,
            clock,
            self.dispatch,
            self.sync,
            self.binder,
            self.on_lost,
            gang_wait_timeout,
        )
        self.cycle.watches_ready = self.intake.watches_ready
        self.stale = StaleGangs(
            self.state,
            cluster,
            self._report_by_key,
            self._spawn,
            clock,
            lambda: self.accepting and self.leadership.leading,
            stale_gang_policy,
            stale_gang_grace,
            evictions=metrics.evictions,
        )
        self.preemptions = Preemptions(
            self.state,
            store,
            leadership,
            cluster,
            self._report_by_key,
            self._spawn,
            clock,
            wall_ms,
            self.on_lost,
            preemption_hold,
            evictions=metrics.evictions,
        )
        self.cycle.preemptions = self.preemptions
        self.preemptions.still_pending = self._still_pending

    # ---- watch events (synchronous, cheap): intake.py ----------------------------------------

    def replace_pending(self, pods: list[PodInput]) -> None:
        self.intake.replace_pending(pods)

    def pending_event(self, kind: str, pod: PodInput) -> None:
        self.intake.pending_event(kind, pod)

    def replace_bound(self, pods: list[PodInput]) -> None:
        self.intake.replace_bound(pods)

    def bound_event(self, kind: str, pod: PodInput) -> None:
        self.intake.bound_event(kind, pod)

    def replace_nodes(self, nodes: list[NodeInput]) -> None:
        self.intake.replace_nodes(nodes)

    def replace_namespaces(self, namespaces: list[NamespaceInput]) -> None:
        self.intake.replace_namespaces(namespaces)

    def namespace_event(self, kind: str, ns: NamespaceInput) -> None:
        self.intake.namespace_event(kind, ns)

    def replace_pod_groups(self, api_group: str, groups: list[PodGroupInput]) -> None:
        self.intake.replace_pod_groups(api_group, groups)

    def pod_group_event(self, kind: str, group: PodGroupInput) -> None:
        self.intake.pod_group_event(kind, group)

    def replace_topologies(self, kind: str, topologies: list[TopologyInput]) -> None:
        self.intake.replace_topologies(kind, topologies)

    def topology_event(self, kind: str, topology: TopologyInput) -> None:
        self.intake.topology_event(kind, topology)

    def replace_claims(self, claims: list[ClaimInput]) -> None:
        self.intake.replace_claims(claims)

    def claim_event(self, kind: str, claim: ClaimInput) -> None:
        self.intake.claim_event(kind, claim)

    def replace_volumes(self, volumes: list[VolumeInput]) -> None:
        self.intake.replace_volumes(volumes)

    def volume_event(self, kind: str, volume: VolumeInput) -> None:
        self.intake.volume_event(kind, volume)

    def node_event(self, kind: str, node: NodeInput) -> None:
        self.intake.node_event(kind, node)

    @property
    def bound_synced(self) -> bool:
        return self.intake.bound_synced

    # ---- the pod book: every event, and the effects the table names --------------------------

    def dispatch(self, key: str, uid: str, event: Event, ctx: Ctx | None = None) -> None:
        ctx = ctx or Ctx()
        if event is Event.PENDING_SEEN and ctx.pod is not None:
            entry = self.book.get(key)
            ctx.changed = entry is None or not ctx.pod.same_as(entry.pod)
        version = ctx.pod.version if ctx.pod is not None else 0
        t = self.book.handle(key, uid, event, self.clock(), version)
        if t is None:
            self.metrics.unexpected.labels(
                stage=self.book.stage(key, uid).value, event=event.value
            ).inc()
            return
        for effect in t.effects:
            self._run(effect, t, ctx)
        # Not for news about another UID of the name (GONE to GONE): the entry did not move.
        if t.old is not Stage.GONE and self.preemptions.tracks(key):
            if t.new in _NOMINATION_ENDS:
                self.preemptions.done(key)  # bound or gone: nothing to hold for it now
            elif t.new is Stage.PENDING:
                self.preemptions.restore(key)  # its Binding failed: it holds its GPUs again
        if t.new is Stage.GONE and t.old is not Stage.GONE:
            self.queue.delete(key)  # nothing of the pod stays behind
            self._checking.discard((key, t.uid))

    def _run(self, effect: Effect, t: Transition, ctx: Ctx) -> None:
        key, entry = t.key, t.entry
        uid = t.uid or (entry.uid if entry is not None else "")
        if effect is Effect.KEEP_POD:
            assert entry is not None
            self.book.set_pod(entry, ctx.pod)
        elif effect is Effect.ENQUEUE:
            if t.event is not Event.PENDING_SEEN or ctx.changed:
                pod = ctx.pod or (entry.pod if entry is not None else None)
                self.queue.add(key, *_rank(pod))
                self._kick()
        elif effect is Effect.WAKE_GANG:
            if ctx.pod is not None and gang_of(ctx.pod) is not None:
                self.queue.on_cluster_event()  # a gang member arrived: waiting members retry
        elif effect is Effect.DEQUEUE:
            self.queue.delete(key)
        elif effect is Effect.BACKOFF:
            self.queue.backoff(key, *_rank(entry.pod if entry is not None else None))
        elif effect is Effect.PARK:
            self._park(entry, ctx)
        elif effect is Effect.HOLD:
            assert ctx.holding is not None
            self.state.hold(ctx.holding)
        elif effect is Effect.FORGET:
            if key in self.state.holdings:
                self.state.forget(key)  # its GPUs and its record (resources, labels) go
            if entry is not None:
                entry.placement = None
            if t.event is not Event.TAKEN:
                self._cluster_event()
        elif effect is Effect.FREE:
            holding = self.state.holdings.get(key)
            self.intake.free(key)
            self._release(key, uid)
            ready = self.preemptions.ready(key)
            if ready:  # its last victim left: no backoff to wait out, once the store freed it
                self._spawn(self._activate_when_released(ready))
            if t.old in (Stage.BOUND, Stage.INHERITED):  # a bound member left its gang
                phase = ctx.pod.phase if ctx.pod is not None and ctx.pod.finished else ""
                self.stale.member_left(holding, phase)
        elif effect is Effect.UNCHARGE:
            self.intake.free(key)
        elif effect is Effect.WAKE:
            self._wake_helped(ctx.pod)
        elif effect is Effect.CHARGE:
            if ctx.pod is not None:
                self.intake.charge(ctx.pod)
        elif effect is Effect.ASSUME:
            assert ctx.placement is not None and entry is not None
            pod = ctx.pod or entry.pod
            assert pod is not None
            self.state.apply(ctx.placement, pod, ctx.replicas)
            entry.placement = ctx.placement
        elif effect is Effect.BIND:
            assert ctx.pod is not None and ctx.placement is not None
            self.queue.done(key)
            self.binder.add(ctx.pod, ctx.placement)
        elif effect is Effect.MARK_BOUND:
            if uid and self.sync.mark_bound_soon(uid):
                self._spawn(self.sync.flush())
        elif effect is Effect.RELEASE_STORE:
            self._release(key, uid)
        elif effect is Effect.SCHEDULED:
            self._scheduled(entry, ctx)
        elif effect is Effect.RECONCILE:
            self.sync.request()
            self._kick()
        elif effect is Effect.CHECK and uid and (key, uid) not in self._checking:
            self._checking.add((key, uid))
            self._spawn(self._check(key, uid))
        elif effect is Effect.REBIND:
            assert ctx.pod is not None and ctx.placement is not None
            self._spawn(self._rebind(key, uid, ctx.pod, ctx.placement))

    def _release(self, key: str, uid: str) -> None:
        if uid and self.sync.release_soon(key, uid):
            self._spawn(self.sync.flush())

    def _park(self, entry: Entry | None, ctx: Ctx) -> None:
        assert entry is not None and ctx.pod is not None
        self.queue.unschedulable(entry.key, ctx.retry_by)
        entry.explanation = Explanation(
            entry.key,
            ctx.result,
            ctx.reason,
            gang=ctx.gang,
            attempts=self.queue.attempts(entry.key),
        )
        if entry.reported != ctx.reason:
            entry.reported = ctx.reason
            self._spawn(self._report_unschedulable(ctx.pod, ctx.reason))
        if ctx.timed_out and not entry.timed_out:
            entry.timed_out = True
            pod, message = ctx.pod, f"gang {ctx.gang} timed out: {ctx.reason}"
            self._spawn(self._report_by_key(pod.key, pod.uid, "GangTimeout", message, "Warning"))

    def _scheduled(self, entry: Entry | None, ctx: Ctx) -> None:
        p = ctx.placement
        assert p is not None and ctx.pod is not None
        pod = ctx.pod
        self.events.put(lambda: self._report_scheduled(pod, p))
        if entry is not None:
            self.metrics.e2e.observe(max(0.0, self.clock() - entry.first_seen))
            entry.explanation = Explanation(
                p.pod, "scheduled", node=p.node, devices=p.devices, gang=p.gang
            )

    def _wake_helped(self, added: PodInput | None) -> None:
        """A pod appeared bound: the waiting pods it may help retry (core/requeue.py)."""
        if added is None:
            return
        helped = [
            key
            for key in self.queue.waiting()
            if (e := self.book.get(key)) is not None
            and e.pod is not None
            and helped_by_added(e.pod, added)
        ]
        if helped:
            self.queue.retry(helped)
            self._kick()

    def _cluster_event(self) -> None:
        self.queue.on_cluster_event()
        self._kick()

    async def _check(self, key: str, uid: str) -> None:
        """Re-read a pod until the apiserver answers, and tell the book what it says."""
        namespace, _, name = key.partition("/")
        try:
            while self.accepting and self.book.stage(key, uid) in _CHECKED_STAGES:
                try:
                    current = await self.cluster.get_pod(namespace, name)
                except Exception as exc:
                    log.warning("could not read pod", pod=key, error=str(exc))
                    await asyncio.sleep(CHECK_RETRY_S)
                    continue
                if current is None or current.uid != uid or current.finished:
                    event = Event.CHECKED_GONE
                elif current.node_name:
                    event = Event.CHECKED_BOUND
                elif current.deleting:
                    event = Event.CHECKED_GONE
                else:
                    event = Event.CHECKED_PENDING
                self._checking.discard((key, uid))
                self.dispatch(key, uid, event, Ctx(pod=current))
                return
        finally:
            self._checking.discard((key, uid))

    async def _rebind(self, key: str, uid: str, pod: PodInput, placement: Placement) -> None:
        """Send the same Binding again (same node, same annotations) while its pod is still
        binding: the last one may yet commit, so only an answer settles it (binder.py)."""
        await asyncio.sleep(REBIND_S)
        if self.accepting and self.book.stage(key, uid) is Stage.BINDING:
            self.binder.start([(pod, placement)], uncertain=True)

    def _on_bind_results(self, outcomes: list[Outcome]) -> None:
        now = self.clock()  # the binds are done: end-to-end latency ends here
        gang = outcomes[0].placement.gang if outcomes else None
        if gang and all(o.event is Event.BIND_OK for o in outcomes):
            seen = [e.first_seen for o in outcomes if (e := self.book.get(o.pod.key)) is not None]
            self.metrics.gang_wait.observe(max(0.0, now - min(seen, default=now)))
        for o in outcomes:
            pod = o.pod if o.event is Event.BIND_OK else o.current or o.pod
            self.dispatch(o.pod.key, o.pod.uid, o.event, Ctx(pod=pod, placement=o.placement))
        self._kick()

    # ---- leadership --------------------------------------------------------------------------

    async def on_elected(self, epoch: int) -> None:
        self.metrics.leader.set(1)
        self.metrics.epoch.set(epoch)
        while not self.intake.bound_synced:
            await asyncio.sleep(0.05)
        await self.sync.reconcile(epoch, elected=True)  # a failure gives the lease up
        pending = {
            e.uid: e.pod for e in self.book.in_stages(SCHEDULABLE_STAGES) if e.pod is not None
        }
        await self.preemptions.reload(pending)  # GPUs held for preemptors survive a failover
        self.stale.rescan()  # a gang that fell below its minimum while no one led
        self.first_decision_at = 0.0
        kept = await self.store.kept_history(self.leadership.holder, epoch)
        # A store without history at its first epoch, and nobody ever recorded as leading:
        # a new installation, no predecessor to wait for (witness.py).
        witness = self.witness
        new = not kept and epoch == 1 and witness is not None and await witness.never_led()
        if witness is not None and not await witness.record(epoch):
            new = False  # unrecorded, a later flushed store could pass for new: wait
        if new:
            log.info("new installation: no leader was ever recorded; no wait", epoch=epoch)
        elif not kept and self.wait_for_unknown_leader:
            # The store may have lost its last writes: new or flushed (its epochs started
            # afresh), restarted from disk, or a replica promoted over its master. Whoever led
            # before is unknown (or its lease was lost) and may still have Bindings in flight
            # that the store does not know of. They end within one lease.
            wait = self.leadership.timing.lease_s
            self.first_decision_at = self.clock() + wait
            log.info("previous leader unknown: waiting before the first decision", seconds=wait)
            # Its Bindings land during the wait, after the reconcile above, and a pod it bound
            # reaches the book as seen bound (nothing for the store): reconcile again before
            # the first decision, so the store records them too.
            self.sync.request()
        self.ready_to_schedule = True
        for entry in self.book.in_stages(SCHEDULABLE_STAGES):
            self.queue.add(entry.key, *_rank(entry.pod))
        self._kick()

    async def on_lost(self) -> None:
        self.metrics.leader.set(0)
        self.metrics.epoch.set(0)
        self.ready_to_schedule = False

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
                await self._sleep_until_woken(1.0)
                continue
            await self.reconcile_if_needed()
            try:
                self.stale.tick()
                if self.preemptions.tick():
                    self._cluster_event()  # GPUs held for an expired nomination are free again
            except Exception:
                log.exception("timers crashed")
            key = self.queue.pop()
            self._update_gauges()
            if key is None:
                wake_at = self.queue.next_wakeup()
                timeout = 1.0 if wake_at is None else max(0.0, min(1.0, wake_at - self.clock()))
                await self._sleep_until_woken(timeout)
                continue
            try:
                await self.cycle.schedule(key, self._next_ready)
            except Exception:
                log.exception("scheduling attempt crashed", pod=key)
                if self.book.stage(key) in SCHEDULABLE_STAGES:
                    self.queue.backoff(key)
            await asyncio.sleep(0)  # let watch events in between attempts

    async def schedule_one(self, key: str) -> None:
        await self.cycle.schedule_one(key)

    def _next_ready(self) -> str | None:
        """The next pod of a batch (cycle.py): one ready now, while this replica may decide."""
        return self.queue.pop() if self.may_decide() else None

    async def reconcile_if_needed(self) -> None:
        await self.sync.if_needed()

    async def _sleep_until_woken(self, timeout: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _kick(self) -> None:
        self._wake.set()

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
        self.metrics.observe_cluster(self.state, self.book.gangs_in(SCHEDULABLE_STAGES))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- reports -----------------------------------------------------------------------------

    async def _report_scheduled(self, pod: PodInput, placement: Placement) -> None:
        gpus = ",".join(str(i) for i in placement.devices) or "shared"
        message = f"Successfully assigned {pod.key} to {placement.node} (GPUs {gpus})"
        try:
            await self.cluster.event(
                pod.namespace, pod.name, pod.uid, "Scheduled", message, "Normal", _now()
            )
        except Exception as exc:
            log.warning("event failed", pod=pod.key, error=str(exc))

    async def _activate_when_released(self, keys: list[str]) -> None:
        await self.sync.released()  # else its reservation would meet the victim's record
        for key in keys:
            self.queue.activate(key)
        self._kick()

    def _still_pending(self, key: str, uid: str) -> bool:
        entry = self.book.get(key)
        return entry is not None and entry.uid == uid and entry.stage in SCHEDULABLE_STAGES

    async def _report_by_key(
        self, key: str, uid: str, reason: str, message: str, kind: str
    ) -> None:
        namespace, name = key.split("/", 1)
        try:
            await self.cluster.event(namespace, name, uid, reason, message, kind, _now())
        except Exception as exc:
            log.warning("event failed", pod=key, reason=reason, error=str(exc))

    async def _report_unschedulable(self, pod: PodInput, reason: str) -> None:
        """PodScheduled=False on the pod of this UID only, and only while it is still pending
        here: a late report must not contradict its Binding."""
        if not self._still_pending(pod.key, pod.uid):
            return
        try:
            await self.cluster.set_unschedulable(pod.namespace, pod.name, pod.uid, reason)
            await self.cluster.event(
                pod.namespace, pod.name, pod.uid, "FailedScheduling", reason, "Warning", _now()
            )
        except Exception as exc:
            log.warning("could not report unschedulable pod", pod=pod.key, error=str(exc))

    # ---- shutdown ----------------------------------------------------------------------------

    async def drain(self) -> None:
        """Stop taking pods, wait for the binds in flight, send the queued events."""
        self.accepting = False
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.events.close()

    def sizes(self) -> dict[str, dict[str, int]]:
        """The size of every per-pod structure of this replica, by part (tests, the soak
        benchmark): after pods come and go, each is back to its size before. The cycle keeps
        nothing per pod (it is all in the book and the snapshot), intake only the pods a bound
        LIST under way has shown; store sync keeps the marks and releases queued for its next
        store call; the loop's own are its background tasks (binds, store writes, reports,
        re-reads) and the re-reads under way."""
        return {
            "book": self.book.sizes(),
            "intake": self.intake.sizes(),
            "queue": self.queue.sizes(),
            "state": self.state.sizes(),
            "binder": self.binder.sizes(),
            "sync": self.sync.sizes(),
            "stale": self.stale.sizes(),
            "preemptions": self.preemptions.sizes(),
            "loop": {
                "tasks": len(self._tasks),
                "checking": len(self._checking),
                "events": len(self.events),
            },
        }

    def explain(self, key: str) -> Explanation | None:
        entry = self.book.get(key)
        if entry is None or not isinstance(entry.explanation, Explanation):
            return None
        return entry.explanation


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rank(pod: PodInput | None) -> tuple[int, str]:
    """The queue's order for a pod: kube-scheduler's PrioritySort (priority, creation time)."""
    return (pod.priority, pod.created) if pod is not None else (0, "")
