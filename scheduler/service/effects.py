"""The pod book's effects: what each transition of the table does, and nothing else.

``Effects.dispatch`` is the one entry for every pod event (intake's watch events, the cycle's
steps, the binder's outcomes, re-reads, a new leader's reloads): the book moves the pod's entry
by ``TABLE`` (podbook.py) and the effects the cell names run here, in order, each doing exactly
what its name says (docs/architecture.md explains each). No condition outside the table decides
what happens to a pod: where two cases differ, they are two events or two effects.

The effects reach the queue, the snapshot, the store (storesync.py), the binder, preemption's
nominations, stale gangs, and the apiserver (re-reads, Bindings sent again, reports); the
background work they start runs on the loop's ``Tasks``.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable

import structlog

from scheduler.core.cycle import assume
from scheduler.core.filters.requeue import helped_by_added
from scheduler.core.model.decisions import Placement
from scheduler.core.model.objects import PodInput

from .apiserver import Cluster
from .binder import Binder, Outcome
from .events import EventLane
from .intake import charge
from .metrics import Metrics
from .podbook import Ctx, Effect, Entry, Event, Explanation, PodBook, Stage, Transition
from .preemption import Preemptions
from .queue import SchedulingQueue
from .stalegangs import StaleGangs
from .storesync import StoreSync
from .tasks import Tasks

log = structlog.get_logger("scheduler")

# Stages in which a re-read still matters.
_CHECKED_STAGES = frozenset(
    {Stage.PENDING, Stage.RELOADED, Stage.BINDING, Stage.ASSUMED, Stage.INHERITED}
)


class Effects:
    def __init__(
        self,
        book: PodBook,
        queue: SchedulingQueue,
        sync: StoreSync,
        binder: Binder,
        preemptions: Preemptions,
        stale: StaleGangs,
        cluster: Cluster,
        metrics: Metrics,
        clock: Callable[[], float],
        tasks: Tasks,
        check_retry_s: float,
        rebind_s: float,
    ) -> None:
        self.book = book
        self.state = sync.state
        self.queue = queue
        self.sync = sync
        self.binder = binder
        self.preemptions = preemptions
        self.stale = stale
        self.cluster = cluster
        self.metrics = metrics
        self.clock = clock
        self.tasks = tasks
        # A re-read of a pod (effect CHECK) that fails is tried again after ``check_retry_s``;
        # an uncertain Binding (effect REBIND) is sent again after ``rebind_s`` (run.tuning).
        self.check_retry_s = check_retry_s
        self.rebind_s = rebind_s
        self.events = EventLane(metrics.events_dropped)  # Scheduled events, off the pod's path
        self.accepting = True  # False once the service drains: no new background work
        self._unit: list[tuple[PodInput, Placement]] = []  # BIND effects of the unit answered

    def stop(self) -> None:
        """The service drains: no new re-reads, no Binding sent again."""
        self.accepting = False

    def dispatch(self, key: str, uid: str, event: Event, ctx: Ctx | None = None) -> None:
        ctx = ctx or Ctx()
        version = ctx.pod.version if ctx.pod is not None else 0
        t = self.book.handle(key, uid, event, self.clock(), version)
        if t is None:
            self.metrics.unexpected.labels(
                stage=self.book.stage(key, uid).value, event=event.value
            ).inc()
            return
        for effect in t.effects:
            self._run(effect, t, ctx)

    def _run(self, effect: Effect, t: Transition, ctx: Ctx) -> None:
        key, entry = t.key, t.entry
        uid = t.uid or (entry.uid if entry is not None else "")
        if effect is Effect.KEEP_POD:
            assert entry is not None
            self.book.set_pod(entry, ctx.pod)
        elif effect is Effect.ENQUEUE:
            self.queue.add(key, *rank(ctx.pod or (entry.pod if entry is not None else None)))
            self.tasks.wake()
        elif effect is Effect.WAKE_GANG:
            gang = entry.gang if entry is not None else None
            members = self.book.gang_members(gang, frozenset(Stage)) if gang is not None else []
            self._retry([m.key for m in members])
        elif effect is Effect.WAKE:
            self._wake_helped(ctx.pod)
        elif effect is Effect.RETRY:
            self.queue.on_cluster_event()
            self.tasks.wake()
        elif effect is Effect.DEQUEUE:
            self.queue.delete(key)
        elif effect is Effect.LEAVE:
            self.queue.delete(key)  # nothing of the pod stays behind
        elif effect is Effect.BACKOFF:
            self.queue.backoff(key, *rank(entry.pod if entry is not None else None))
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
        elif effect is Effect.MEMBER_LEFT:
            phase = ctx.pod.phase if ctx.pod is not None and ctx.pod.finished else ""
            self.stale.member_left(self.state.held(key), phase)
        elif effect is Effect.FREE:
            self.state.remove_pod(key)  # orphaned holdings and gang membership included
        elif effect is Effect.VICTIM_LEFT:
            ready = self.preemptions.ready(key)
            if ready:  # its last victim left: no backoff to wait out, once the store freed it
                self.tasks.spawn(self._activate_when_released(ready))
        elif effect is Effect.END_NOMINATION:
            self.preemptions.done(entry)  # bound or gone: nothing to hold for it now
        elif effect is Effect.RESTORE_NOMINATION:
            self.preemptions.restore(entry)  # pending again: it holds its GPUs again
        elif effect is Effect.CHARGE:
            assert ctx.pod is not None
            charge(self.state, ctx.pod)
        elif effect is Effect.ASSUME:
            assert ctx.placement is not None and entry is not None and ctx.pod is not None
            assume(self.state, ctx.placement, ctx.pod)
            entry.placement = ctx.placement
        elif effect is Effect.BIND:
            assert ctx.pod is not None and ctx.placement is not None
            self.queue.done(key)
            self._unit.append((ctx.pod, ctx.placement))
        elif effect is Effect.MARK_BOUND:
            if uid and self.sync.mark_bound_soon(uid):
                self.tasks.spawn(self.sync.flush())
        elif effect is Effect.RELEASE_STORE:
            if uid and self.sync.release_soon(key, uid):
                self.tasks.spawn(self.sync.flush())
        elif effect is Effect.SCHEDULED:
            self._scheduled(entry, ctx)
        elif effect is Effect.RECONCILE:
            self.sync.request()
            self.tasks.wake()
        elif effect is Effect.CHECK:
            assert entry is not None
            if not entry.checking:
                entry.checking = True
                self.tasks.spawn(self._check(key, uid))
        elif effect is Effect.REBIND:
            assert ctx.pod is not None and ctx.placement is not None
            self.tasks.spawn(self._rebind(key, uid, ctx.pod, ctx.placement))

    # ---- waking waiting pods -----------------------------------------------------------------

    def _retry(self, keys: list[str]) -> None:
        if keys:
            self.queue.retry(keys)
            self.tasks.wake()

    def _wake_helped(self, added: PodInput | None) -> None:
        """A pod appeared bound: the waiting pods it may help retry (core/filters/requeue.py)."""
        if added is None:
            return
        self._retry(
            [
                key
                for key in self.queue.waiting()
                if (e := self.book.get(key)) is not None
                and e.pod is not None
                and helped_by_added(e.pod, added)
            ]
        )

    async def _activate_when_released(self, keys: list[str]) -> None:
        await self.sync.released()  # else its reservation would meet the victim's record
        for key in keys:
            self.queue.activate(key)
        self.tasks.wake()

    # ---- Bindings ----------------------------------------------------------------------------

    def send_unit(self) -> None:
        """The unit's reservation is answered: bind the pods its BIND effects collected,
        together (their outcomes come back together)."""
        if self._unit:
            pods, self._unit = self._unit, []
            self.tasks.spawn(self._bind(pods, uncertain=False))

    async def _bind(self, pods: list[tuple[PodInput, Placement]], uncertain: bool) -> None:
        outcomes = await self.binder.bind_all(pods, uncertain)
        now = self.clock()  # the binds are done: end-to-end latency ends here
        gang = outcomes[0].placement.gang if outcomes else None
        if gang and not uncertain and all(o.event is Event.BIND_OK for o in outcomes):
            seen = [e.first_seen for o in outcomes if (e := self.book.get(o.pod.key)) is not None]
            self.metrics.gang_wait.observe(max(0.0, now - min(seen, default=now)))
        for o in outcomes:
            self._outcome(o)
        self.tasks.wake()

    def _outcome(self, o: Outcome) -> None:
        pod = o.pod if o.event is Event.BIND_OK else o.current or o.pod
        self.dispatch(o.pod.key, o.pod.uid, o.event, Ctx(pod=pod, placement=o.placement))

    async def _rebind(self, key: str, uid: str, pod: PodInput, placement: Placement) -> None:
        """Send the same Binding again (same node, same annotations) while its pod is still
        binding: the last one may yet commit, so only an answer settles it (binder.py)."""
        await asyncio.sleep(self.rebind_s)
        if self.accepting and self.book.stage(key, uid) is Stage.BINDING:
            await self._bind([(pod, placement)], uncertain=True)

    # ---- re-reads ----------------------------------------------------------------------------

    async def _check(self, key: str, uid: str) -> None:
        """Re-read a pod until the apiserver answers, and tell the book what it says."""
        namespace, _, name = key.partition("/")
        current: PodInput | None = None
        event: Event | None = None
        while event is None and self.accepting and self.book.stage(key, uid) in _CHECKED_STAGES:
            try:
                current = await self.cluster.get_pod(namespace, name)
            except Exception as exc:
                log.warning("could not read pod", pod=key, error=str(exc))
                await asyncio.sleep(self.check_retry_s)
                continue
            if current is None or current.uid != uid or current.finished:
                event = Event.CHECKED_GONE
            elif current.node_name:
                event = Event.CHECKED_BOUND
            elif current.deleting:
                event = Event.CHECKED_GONE
            else:
                event = Event.CHECKED_PENDING
        entry = self.book.get(key)
        if entry is not None and entry.uid == uid:
            entry.checking = False  # before the answer: it may ask for another re-read
        if event is not None:
            self.dispatch(key, uid, event, Ctx(pod=current))

    # ---- reports -----------------------------------------------------------------------------

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
            self.tasks.spawn(self._report_unschedulable(ctx.pod, ctx.reason))
        if ctx.timed_out and not entry.timed_out:
            entry.timed_out = True
            pod, message = ctx.pod, f"gang {ctx.gang} timed out: {ctx.reason}"
            self.tasks.spawn(report(self.cluster, pod.key, pod.uid, "GangTimeout", message))

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

    async def _report_scheduled(self, pod: PodInput, placement: Placement) -> None:
        gpus = ",".join(str(i) for i in placement.devices) or "shared"
        message = f"Successfully assigned {pod.key} to {placement.node} (GPUs {gpus})"
        await report(self.cluster, pod.key, pod.uid, "Scheduled", message, "Normal")

    def still_pending(self, key: str, uid: str) -> bool:
        return self.book.stage(key, uid) in (Stage.PENDING, Stage.RELOADED)

    async def _report_unschedulable(self, pod: PodInput, reason: str) -> None:
        """PodScheduled=False on the pod of this UID only, and only while it is still pending
        here: a late report must not contradict its Binding."""
        if not self.still_pending(pod.key, pod.uid):
            return
        try:
            await self.cluster.set_unschedulable(pod.namespace, pod.name, pod.uid, reason)
            await self.cluster.event(
                pod.namespace, pod.name, pod.uid, "FailedScheduling", reason, "Warning", now()
            )
        except Exception as exc:
            log.warning("could not report unschedulable pod", pod=pod.key, error=str(exc))


async def report(
    cluster: Cluster, key: str, uid: str, reason: str, message: str, kind: str = "Warning"
) -> None:
    """An event on the pod (a failure to send one is logged, never raised)."""
    namespace, name = key.split("/", 1)
    try:
        await cluster.event(namespace, name, uid, reason, message, kind, now())
    except Exception as exc:
        log.warning("event failed", pod=key, reason=reason, error=str(exc))


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rank(pod: PodInput | None) -> tuple[int, str]:
    """The queue's order for a pod: kube-scheduler's PrioritySort (priority, creation time)."""
    return (pod.priority, pod.created) if pod is not None else (0, "")
