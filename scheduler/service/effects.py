"""The pod book's effects: what each transition of the table does, and nothing else.

``Effects.dispatch`` is the one entry for every pod event (intake's watch events, the cycle's
steps, the binder's outcomes, re-reads, a new leader's reloads): the book moves the pod's entry
by ``TABLE`` (podbook.py) and the effects the cell names run here, in order, each doing exactly
what its name says (docs/architecture.md explains each). No condition outside the table decides
what happens to a pod: where two cases differ, they are two events or two effects.

The effects reach the queue, the snapshot, the store (storesync.py), the binder, preemption's
nominations, stale gangs, the PodGroup statuses' members, and the apiserver (re-reads, Bindings
sent again, reports); the background work they start runs on the loop's ``Tasks``.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable

import structlog

from scheduler.core.cycle import assume, gang_minimum, gang_of
from scheduler.core.filters.requeue import helped_by_added
from scheduler.core.model.decisions import Placement
from scheduler.core.model.objects import PodInput
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.kube.podgroups import Write

from .apiserver import Cluster
from .binder import Binder, Era, Outcome, replaced_or_finished
from .events import EventLane
from .metrics import Metrics
from .podbook import NEWS, Ctx, Effect, Entry, Event, Explanation, PodBook, Stage, Transition
from .podgroups import PodGroupStatuses
from .preemption import Preemptions
from .queue import SchedulingQueue
from .stalegangs import StaleGangs
from .storesync import StoreSync
from .tasks import Tasks

log = structlog.get_logger("scheduler")

# Stages in which a re-read still matters.
_CHECKED_STAGES = frozenset(
    {
        Stage.PENDING,
        Stage.UNSETTLED,
        Stage.RELOADED,
        Stage.BINDING,
        Stage.ASSUMED,
        Stage.INHERITED,
    }
)


class Effects:
    """The one way a pod's entry moves (``dispatch``), and the effects a transition names, each
    a method of its own (``_handlers``: effect -> method, one per effect of ``Effect``)."""

    def __init__(
        self,
        book: PodBook,
        queue: SchedulingQueue,
        sync: StoreSync,
        binder: Binder,
        preemptions: Preemptions,
        stale: StaleGangs,
        statuses: PodGroupStatuses,
        cluster: Cluster,
        metrics: Metrics,
        clock: Callable[[], float],
        tasks: Tasks,
        check_retry_s: float,
        rebind_s: float,
        event_queue_size: int,
    ) -> None:
        self.book = book
        self.state = sync.state
        self.queue = queue
        self.sync = sync
        self.binder = binder
        self.preemptions = preemptions
        self.stale = stale
        self.statuses = statuses
        self.cluster = cluster
        self.metrics = metrics
        self.clock = clock
        self.tasks = tasks
        # A re-read of a pod (effect CHECK) that fails is tried again after ``check_retry_s``;
        # an uncertain Binding (effect REBIND) is sent again after ``rebind_s`` (run.tuning).
        self.check_retry_s = check_retry_s
        self.rebind_s = rebind_s
        self.events = EventLane(
            metrics.events_dropped, event_queue_size
        )  # Scheduled events, off the pod's path
        self.accepting = True  # False once the service drains: no new background work
        # A previous leader's reservations whose Bindings may still land (effect SETTLE), key ->
        # UID, and when none of those Bindings can land any more: the election's time plus
        # the apiserver's request timeout (``elected``; ``settle_due`` tells the book then).
        self.unsettled: dict[str, str] = {}
        self.settled_at = 0.0
        self._handlers: dict[Effect, Callable[[Transition, Ctx], None]] = {
            Effect.KEEP_POD: self._keep_pod,
            Effect.SHOWN: self._shown,
            Effect.ENQUEUE: self._enqueue,
            Effect.DEQUEUE: self._dequeue,
            Effect.TAKE: self._take,
            Effect.BACKOFF: self._backoff,
            Effect.ACTIVATE: self._activate,
            Effect.PARK: self._park,
            Effect.LEAVE: self._leave,
            Effect.WAKE_GANG: self._wake_gang,
            Effect.WAKE: self._wake,
            Effect.RETRY: self._retry_all,
            Effect.HOLD: self._hold,
            Effect.SETTLE: self._settle,
            Effect.ASSUME: self._assume,
            Effect.FORGET: self._forget,
            Effect.CHARGE: self._charge,
            Effect.FREE: self._free,
            Effect.MARK_BOUND: self._mark_bound,
            Effect.RELEASE_STORE: self._release_store,
            Effect.RESERVE_STORE: self._reserve_store,
            Effect.RECONCILE: self._reconcile,
            Effect.BIND: self._bind_effect,
            Effect.REBIND: self._rebind_effect,
            Effect.CHECK: self._check_effect,
            Effect.SCHEDULED: self._scheduled,
            Effect.UNRESERVE: self._unreserve,
            Effect.NOTE_SEARCH: self._note_search,
            Effect.NOMINATE: self._nominate,
            Effect.END_NOMINATION: self._end_nomination,
            Effect.FORGET_NOMINATION: self._forget_nomination,
            Effect.RESTORE_NOMINATION: self._restore_nomination,
            Effect.CLEAR_NOMINATED_NODE: self._clear_nominated_node,
            Effect.VICTIM_LEFT: self._victim_left,
            Effect.MEMBER_LEFT: self._member_left,
            Effect.GROUP_COUNT: self._group_count,
            Effect.GROUP_DROP: self._group_drop,
        }
        assert set(self._handlers) == set(Effect), "every effect has its handler"

    def stop(self) -> None:
        """The service drains: no new re-reads, no Binding sent again."""
        self.accepting = False

    def dispatch(
        self, key: str, uid: str, event: Event, ctx: Ctx | None = None
    ) -> Transition | None:
        """Move ``key``'s entry by ``event`` and run the effects its cell names, in order; the
        transition (None for a pair the table lacks: counted, nothing done)."""
        ctx = ctx or Ctx()
        version = ctx.pod.version if ctx.pod is not None and event in NEWS else 0
        t = self.book.handle(key, uid, event, self.clock(), version)
        if t is None:
            self.metrics.unexpected.labels(
                stage=self.book.stage(key, uid).value, event=event.value
            ).inc()
            return None
        for effect in t.effects:
            self._handlers[effect](t, ctx)
        return t

    # ---- the entry and the queue -------------------------------------------------------------

    def _keep_pod(self, t: Transition, ctx: Ctx) -> None:
        assert t.entry is not None
        self.book.set_pod(t.entry, ctx.pod)
        if ctx.pod is not None:  # the snapshot's pending gangs (core/gangs/waiting.py)
            self.state.set_pending(ctx.pod)

    def _enqueue(self, t: Transition, ctx: Ctx) -> None:
        self.queue.add(t.key, *rank(ctx.pod or (t.entry.pod if t.entry is not None else None)))
        self.tasks.wake()

    def _dequeue(self, t: Transition, ctx: Ctx) -> None:
        self.queue.delete(t.key)

    def _take(self, t: Transition, ctx: Ctx) -> None:
        self.queue.take(t.key)

    def _backoff(self, t: Transition, ctx: Ctx) -> None:
        self.queue.backoff(t.key, *rank(t.entry.pod if t.entry is not None else None))

    def _activate(self, t: Transition, ctx: Ctx) -> None:
        self.queue.activate(t.key)
        self.tasks.wake()

    def _leave(self, t: Transition, ctx: Ctx) -> None:
        self.queue.delete(t.key)  # nothing of the pod stays behind
        self.state.drop_pending(t.key)

    # ---- the snapshot ------------------------------------------------------------------------

    def _hold(self, t: Transition, ctx: Ctx) -> None:
        assert ctx.holding is not None
        self.state.hold_reloaded(ctx.holding)

    def _settle(self, t: Transition, ctx: Ctx) -> None:
        self.unsettled[t.key] = _uid(t)

    def _assume(self, t: Transition, ctx: Ctx) -> None:
        assert ctx.placement is not None and t.entry is not None and ctx.pod is not None
        assume(self.state, ctx.placement, ctx.pod)
        t.entry.placement = ctx.placement
        self.book.decide(t.entry)  # decided now (PLACED follows the decision at once)

    def _forget(self, t: Transition, ctx: Ctx) -> None:
        if t.key in self.state.holdings:
            self.state.forget(t.key)  # its GPUs and its record (resources, labels) go
        if t.entry is not None:
            t.entry.placement = None

    def _charge(self, t: Transition, ctx: Ctx) -> None:
        assert ctx.pod is not None
        charge(self.state, ctx.pod)

    def _free(self, t: Transition, ctx: Ctx) -> None:
        self.state.remove_pod(t.key)  # orphaned holdings and gang membership included

    # ---- the store ---------------------------------------------------------------------------

    def _mark_bound(self, t: Transition, ctx: Ctx) -> None:
        if _uid(t) and self.sync.mark_bound_soon(_uid(t)):
            self.tasks.spawn(self.sync.flush())

    def _release_store(self, t: Transition, ctx: Ctx) -> None:
        if _uid(t) and self.sync.release_soon(t.key, _uid(t)):
            self.tasks.spawn(self.sync.flush())

    def _reserve_store(self, t: Transition, ctx: Ctx) -> None:
        holding = self.state.held(t.key)
        if holding is not None:
            self.tasks.spawn(self.sync.reserve_again(holding))

    def _reconcile(self, t: Transition, ctx: Ctx) -> None:
        self.sync.request()
        self.tasks.wake()

    # ---- the apiserver -----------------------------------------------------------------------

    def _bind_effect(self, t: Transition, ctx: Ctx) -> None:
        """Done with the queue. The cycle hands the Bindings of the pods its reservation moved
        here to the binder, a unit's together (``bind``)."""
        self.queue.done(t.key)

    def _rebind_effect(self, t: Transition, ctx: Ctx) -> None:
        assert ctx.pod is not None and ctx.placement is not None and t.entry is not None
        self.tasks.spawn(self._rebind(t.key, _uid(t), ctx.pod, ctx.placement, t.entry))

    def _check_effect(self, t: Transition, ctx: Ctx) -> None:
        assert t.entry is not None
        if not t.entry.checking:
            t.entry.checking = True
            self.tasks.spawn(self._check(t.key, _uid(t)))

    # ---- a preemptor's nomination ------------------------------------------------------------

    def _note_search(self, t: Transition, ctx: Ctx) -> None:
        assert t.entry is not None
        t.entry.searched = ctx.searched

    def _nominate(self, t: Transition, ctx: Ctx) -> None:
        assert t.entry is not None and ctx.nomination is not None
        self.book.nominate(t.entry, ctx.nomination)
        self.state.nominate(ctx.nomination.nominated)

    def _end_nomination(self, t: Transition, ctx: Ctx) -> None:
        """Bound, gone, refused, planned over or expired: preemption holds nothing for it now
        (``t.entry`` is the one the transition moved, in the book or just out of it). The GPUs
        it held go back to the waiting pods at the loop's next turn, as kube-scheduler moves
        them when a pod with a nominated node is deleted: a preemptor deleted while pending
        left them parked beside the GPUs it held until their unschedulable wait ran out
        (issue 30, sim seed 4450)."""
        held = self.book.unnominate(t.entry) if t.entry is not None else None
        if held is not None:
            self.state.unnominate(t.key)
            self.preemptions.drop(held.nominated.uid)
            self.preemptions.freed()

    def _forget_nomination(self, t: Transition, ctx: Ctx) -> None:
        """This replica's copy goes; the store's is read again (a new term's reload)."""
        if t.entry is not None and self.book.unnominate(t.entry) is not None:
            self.state.unnominate(t.key)

    def _restore_nomination(self, t: Transition, ctx: Ctx) -> None:
        """Pending again (its Binding failed after the snapshot used its nomination up): it
        holds its GPUs again until it binds or its nomination expires."""
        held = t.entry.nomination if t.entry is not None else None
        if held is not None and held.nominated.pod not in self.state.nominations:
            self.state.nominate(held.nominated)

    def _clear_nominated_node(self, t: Transition, ctx: Ctx) -> None:
        self.preemptions.clear(t.key)

    def _victim_left(self, t: Transition, ctx: Ctx) -> None:
        ready = self.preemptions.ready(t.key)
        if ready:  # its last victim left: no backoff to wait out, once the store freed it
            self.tasks.spawn(self._victims_gone(ready))

    def _member_left(self, t: Transition, ctx: Ctx) -> None:
        phase = ctx.pod.phase if ctx.pod is not None and ctx.pod.finished else ""
        self.stale.member_left(self.state.held(t.key), phase)

    def _group_count(self, t: Transition, ctx: Ctx) -> None:
        assert ctx.pod is not None
        self.statuses.member_seen(ctx.pod)

    def _group_drop(self, t: Transition, ctx: Ctx) -> None:
        """Deleted or finished (the bound watch's last object), or missing from a re-list."""
        if ctx.pod is not None:
            self.statuses.member_ended(ctx.pod)
        else:
            self.statuses.member_missing(t.key)

    # ---- waking waiting pods -----------------------------------------------------------------

    def _retry(self, keys: list[str]) -> None:
        if keys:
            self.queue.retry(keys)
            self.tasks.wake()

    def _retry_all(self, t: Transition, ctx: Ctx) -> None:
        self.queue.on_cluster_event()
        self.tasks.wake()

    def _wake_gang(self, t: Transition, ctx: Ctx) -> None:
        gang = t.entry.gang if t.entry is not None else None
        members = self.book.gang_members(gang, frozenset(Stage)) if gang is not None else []
        self._retry([m.key for m in members])

    def _wake(self, t: Transition, ctx: Ctx) -> None:
        """A pod appeared bound: the waiting pods it may help retry (core/filters/requeue.py)."""
        added = ctx.pod
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

    async def _victims_gone(self, preemptors: list[tuple[str, str]]) -> None:
        await self.sync.released()  # else its reservation would meet the victim's record
        for key, uid in preemptors:
            self.dispatch(key, uid, Event.VICTIMS_GONE)

    # ---- Bindings ----------------------------------------------------------------------------

    def bind(self, pods: list[tuple[PodInput, Placement]]) -> None:
        """The binding cycle of one unit whose reservation is answered: the pods its answer
        moved to binding (effect BIND) are bound together, off the scheduling cycle, and their
        outcomes come back together (kube-scheduler's binding cycle, one per unit)."""
        if pods:
            entries = [self.book.entries[pod.key] for pod, _ in pods]
            self.tasks.spawn(
                self._bind(
                    pods,
                    uncertain=False,
                    decided=entries[0].era,  # a unit is decided at once
                    decisions=[e.decision for e in entries],
                )
            )

    async def _bind(
        self,
        pods: list[tuple[PodInput, Placement]],
        uncertain: bool,
        decided: int,
        decisions: list[int],
    ) -> None:
        """Bind ``pods``, decided in the book's era ``decided`` (each its decision of
        ``decisions``): the binder sends their Bindings in that era only. Decided before an
        etcd restore, a re-send after it (``uncertain``: the last one's answer was lost, or it
        waited in an etcd stall the restore failed) landed on GPUs the restore gave back to
        the pods bound there before it, beside them (issue 30, soak seed 3090). Such a pod is
        read back instead, held while a Binding of it may land, and decided afresh in the new
        era (binder.py's ``Era``)."""
        sent_in = self.book.era, self.book.bound_lists
        outcomes = await self.binder.bind_all(
            pods, uncertain, era=Era(lambda: self.book.era == decided, self.book.watching)
        )
        now = self.clock()  # the binds are done: end-to-end latency ends here
        gang = outcomes[0].placement.gang if outcomes else None
        if gang and not uncertain and all(o.event is Event.BIND_OK for o in outcomes):
            seen = [e.first_seen for o in outcomes if (e := self.book.get(o.pod.key)) is not None]
            self.metrics.gang_wait.observe(max(0.0, now - min(seen, default=now)))
        # The pod may have been decided again while its Binding was under way (an etcd restore
        # made it pending in between, and the Binding, answered 500 while it committed, was
        # still being retried): that outcome is not the new decision's. Told to it, an old
        # Binding's refusal forgot the GPU the new one was landing on, and another pod was
        # bound there (soak seed 51148). The watches tell whatever the old Binding did.
        current = []
        for o, decision in zip(outcomes, decisions, strict=True):
            if self.book.decided_since(o.pod.key, o.pod.uid, decision):
                log.info("outcome of an earlier decision", pod=o.pod.key, outcome=o.event.value)
            else:
                current.append(o)
        refused = {o.pod.key for o in current if o.event is Event.BIND_FAILED}
        stale = sent_in != (self.book.era, self.book.bound_lists)
        for o in current:
            self._outcome(o, refused, stale)
        self.tasks.wake()

    def _outcome(self, o: Outcome, refused: set[str], stale: bool) -> None:
        """Tell the book a Binding's outcome; ``stale``: an etcd restore began a new era while
        it was under way, or a bound LIST began (a 201 then is BIND_OK_STALE, re-read: the
        restore may have undone it). The era alone misses a restore from a backup taken at the
        newest version the book had been told, the Binding's own events not delivered yet: the
        LISTs of the restored history are at that version, no new era begins, and the bound
        LIST, ended while the pod was binding, says nothing of it; held as assumed on the 201,
        its GPU stayed taken by a pod the apiserver shows pending (issue 30, sim seed 870). A
        bound LIST in the same era costs one GET, which reads the pod bound.

        A BIND_GONE (a 404, or a read that found no such pod) is stale too: the restore may
        have brought the pod back, and the book, told so while the pod was binding, ignored
        it. Taken as gone, the pod left the book for good and stayed pending with no reason
        written (issue 30, soak seed 1326: its gang's other Binding, unanswered through a stall,
        held the outcome until after two restores). It is a refusal instead: the pod is
        decided again, and leaves at its next Binding's 404 (or the pending watch's word) if it
        is gone in this era too."""
        pod = o.pod if o.event is Event.BIND_OK else o.current or o.pod
        event = o.event
        if event is Event.BIND_GONE and stale:
            event = Event.BIND_FAILED
        if event is Event.BIND_FAILED and self._gang_committed(o, refused):
            event = Event.GANG_BIND_FAILED
        elif event is Event.BIND_OK and stale:
            event = Event.BIND_OK_STALE
        self.dispatch(o.pod.key, o.pod.uid, event, Ctx(pod=pod, placement=o.placement))

    def completing(self, gang: str) -> bool:
        """Whether ``gang`` is being completed: some of its members bound or assumed, fewer
        than its minimum (its pending members go first in the queue, queue.py)."""
        bound = self.state.gang_bound.get(gang)
        if not bound:
            return False
        pods = (e.pod for e in self.book.gang_members(gang, frozenset(Stage)) if e.pod is not None)
        pod = next(pods, None)
        return pod is not None and len(bound) < gang_minimum(self.state, pod)

    def _gang_committed(self, o: Outcome, refused: set[str]) -> bool:
        """Whether the refused pod's gang is below its minimum with other members bound or
        binding (sim seed 629): its GPUs are then the gang's, held for it (GANG_BIND_FAILED),
        not let go to whoever waits. The gang's members in the snapshot (``gang_bound``: bound,
        assumed, or held for a previous leader's Binding) count, but not those refused in the
        same binding cycle nor those pending again (RELOADED): a gang refused whole holds
        nothing. Only while this replica leads: a Binding not sent because it no longer does
        is the next leader's to decide (it reloads the store's reservation)."""
        gang = o.placement.gang
        if gang is None or not self.binder.leadership.leading:
            return False
        committed = [
            key
            for key in self.state.gang_bound.get(gang, ())
            if key not in refused and self.book.stage(key) is not Stage.RELOADED
        ]
        return 0 < len(committed) < gang_minimum(self.state, o.pod)

    async def _rebind(
        self, key: str, uid: str, pod: PodInput, placement: Placement, entry: Entry
    ) -> None:
        """Send the same Binding again (same node, same annotations) while its pod is still
        binding in the same decision: the last one may yet commit, so only an answer settles
        it (binder.py). Only in the era it was decided in (``_bind``)."""
        decided, decision = entry.era, entry.decision
        await asyncio.sleep(self.rebind_s)
        if (
            self.accepting
            and self.book.stage(key, uid) is Stage.BINDING
            and not self.book.decided_since(key, uid, decision)
        ):
            await self._bind(
                [(pod, placement)], uncertain=True, decided=decided, decisions=[decision]
            )

    # ---- a previous leader's Bindings --------------------------------------------------------

    def elected(self, commit_s: float) -> None:
        """This replica leads from now on. Every Binding a previous leader sent was sent before
        now (the fencing rule, binder.py: its lease ended or was handed over first) and lands,
        if at all, within the apiserver's request timeout ``commit_s`` of being sent: from
        ``now + commit_s`` on, a pod read pending has no Binding of theirs left to land."""
        self.settled_at = self.clock() + commit_s

    def settle_due(self) -> None:
        """Once no Binding of a previous leader can land, the pods still holding one of their
        reservations (unsettled) are re-read (SETTLE_DUE): the loop's timer."""
        if not self.unsettled or self.clock() < self.settled_at:
            return
        due, self.unsettled = self.unsettled, {}
        for key, uid in due.items():
            if self.book.stage(key, uid) is Stage.UNSETTLED:
                self.dispatch(key, uid, Event.SETTLE_DUE)

    # ---- re-reads ----------------------------------------------------------------------------

    async def _check(self, key: str, uid: str) -> None:
        """Re-read a pod until the apiserver answers, and tell the book what it says. An unsettled
        pod (a previous leader's Binding may still land) read pending by a read that started
        before ``settled_at`` is no answer: the read SETTLE_DUE asks for answers (this one,
        read again, when that time has come meanwhile). A pod our Binding bound (ASSUMED) read
        pending by a read that started before that Binding was answered is no answer either
        (it is read again); read pending by a later read (a quorum GET after the 201), the
        Binding was undone: etcd was restored from a backup taken before it (issue 30, sim
        seed 73), and the pod is pending again (``(ASSUMED, CHECKED_PENDING)``)."""
        namespace, _, name = key.partition("/")
        current: PodInput | None = None
        event: Event | None = None
        while event is None and self.accepting and self.book.stage(key, uid) in _CHECKED_STAGES:
            started, began_in = self.clock(), self.book.stage(key, uid)
            try:
                current = await self.cluster.get_pod(namespace, name)
            except Exception as exc:
                log.warning("could not read pod", pod=key, error=str(exc))
                await asyncio.sleep(self.check_retry_s)
                continue
            if current is None or replaced_or_finished(current, uid):
                event = Event.CHECKED_GONE
            elif current.node_name:
                event = Event.CHECKED_BOUND
            elif current.deleting:
                event = Event.CHECKED_GONE
            elif self.book.stage(key, uid) is Stage.UNSETTLED and started < self.settled_at:
                if self.clock() < self.settled_at:
                    break  # SETTLE_DUE asks again
            elif self.book.stage(key, uid) is Stage.ASSUMED and began_in is not Stage.ASSUMED:
                continue  # read before our Binding was answered: it says nothing of it
            else:
                event = Event.CHECKED_PENDING
        entry = self.book.get(key)
        if entry is not None and entry.uid == uid:
            entry.checking = False  # before the answer: it may ask for another re-read
        if event is Event.CHECKED_PENDING and self.book.stage(key, uid) is Stage.ASSUMED:
            log.warning(
                "a pod our Binding bound is pending again (etcd restored from a backup?): "
                "its GPUs go back and it is scheduled afresh",
                pod=key,
                uid=uid,
            )
        if event is not None:
            self.dispatch(key, uid, event, Ctx(pod=current))

    # ---- reports -----------------------------------------------------------------------------

    def _park(self, t: Transition, ctx: Ctx) -> None:
        entry = t.entry
        assert entry is not None and ctx.pod is not None
        self.queue.unschedulable(entry.key, ctx.retry_by)
        entry.explanation = Explanation(
            entry.key,
            ctx.result,
            ctx.reason,
            gang=ctx.gang,
            attempts=self.queue.attempts(entry.key),
        )
        entry.reported = ctx.reason
        self._report(entry, ctx.pod)
        if ctx.timed_out and not entry.timed_out:
            entry.timed_out = True
            pod, message = ctx.pod, f"gang {ctx.gang} timed out: {ctx.reason}"
            self.tasks.spawn(report(self.cluster, pod.key, pod.uid, "GangTimeout", message))

    def _shown(self, t: Transition, ctx: Ctx) -> None:
        """What the pod shows is the truth of what was written, whoever wrote it; the pod's
        next decision writes its reason only if it differs, as kube-scheduler compares with
        the condition the pod shows (so a new leader does not write again the reason the
        previous one wrote). A pod that shows no reason, though its last decision here had
        one, is written at once: an etcd restore undid the condition (sim seeds 13078 and
        23014: a restore the book could not tell from its LISTs, so no new era began; the
        next decision may be 5 minutes away). Only then: writing on news whenever another
        reason shows would make two replicas that both think they lead (a handover's
        overlap) overwrite each other's reasons for as long as it lasts, each write the
        other's news. A write that lands moves the pod's version, and its news shows it (a
        lagging event older than it costs one write more)."""
        entry = t.entry
        assert entry is not None and ctx.pod is not None
        entry.written = ctx.pod.shown_reason
        if entry.written is None and self.binder.leadership.leading:
            self._report(entry, ctx.pod)

    def _report(self, entry: Entry, pod: PodInput) -> None:
        if entry.reported is not None and entry.reported != entry.written and not entry.reporting:
            entry.reporting = True
            self.tasks.spawn(self._report_unschedulable(entry, pod))

    def _unreserve(self, t: Transition, ctx: Ctx) -> None:
        pod = ctx.pod
        assert pod is not None
        if pod.resource_claims:
            self.tasks.spawn(self.binder.unreserve_stale(pod))

    def _scheduled(self, t: Transition, ctx: Ctx) -> None:
        entry = t.entry
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

    async def _report_unschedulable(self, entry: Entry, pod: PodInput) -> None:
        """PodScheduled=False with the reason of the pod's last decision (``entry.reported``),
        on the pod of this UID only, and only while it is still pending here: a late report
        must not contradict its Binding.

        One write per pod at a time, the newest reason written last: two writes in flight may
        land in either order, and the older landing last would stay on the pod for good (the
        book does not write a reason it holds as written again; a template claim's probe
        showed "waiting for the ResourceClaim of template" long after it was decided afresh).
        So a reason decided while a write is under way is written after it. A refused write
        is not retried at once: the next decision, or the pod's next news (``_shown``), writes
        its reason again (``entry.written`` is unchanged), as kube-scheduler, which compares
        with the condition the pod shows, does; so does one that found no pod (GONE: if an
        etcd restore brings the pod back, its news shows no reason, sim seed 11867)."""
        while (
            self.book.get(entry.key) is entry
            and self.still_pending(pod.key, pod.uid)
            and entry.reported is not None
            and entry.reported != entry.written
        ):
            reason = entry.reported
            try:
                wrote = await self.cluster.set_unschedulable(
                    pod.namespace, pod.name, pod.uid, reason
                )
                if wrote is not Write.DONE:  # GONE (404): written to no pod
                    break
                await self.cluster.event(
                    pod.namespace, pod.name, pod.uid, "FailedScheduling", reason, "Warning", now()
                )
            except Exception as exc:
                log.warning("could not report unschedulable pod", pod=pod.key, error=str(exc))
                break
            entry.written = reason
        entry.reporting = False


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


def _uid(t: Transition) -> str:
    """The UID the transition is about: the event's, else its entry's."""
    return t.uid or (t.entry.uid if t.entry is not None else "")


def charge(state: ClusterState, pod: PodInput) -> None:
    """The snapshot holds what a bound pod's annotations say it holds."""
    warning = state.add_bound_pod(pod)
    if warning:
        log.warning("bound pod", pod=pod.key, warning=warning)


def rank(pod: PodInput | None) -> tuple[int, str, str | None]:
    """The queue's order for a pod: kube-scheduler's PrioritySort (priority, creation time),
    and its gang, whose members go before every other pod while it is being completed
    (queue.py)."""
    return (pod.priority, pod.created, gang_of(pod)) if pod is not None else (0, "", None)
