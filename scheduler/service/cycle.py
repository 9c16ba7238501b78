"""The scheduling cycle (one task, serial): pop a pod, gather its gang's pending members, decide
with the core, assume the placement in the snapshot, and reserve the claims in the store; then
hand the reserved pods to the binder. Nothing here waits on the apiserver.

Several units are decided back to back while the queue has pods ready (at most ``batch_pods``, the
setting run.tuning.batchPods),
each assumed before the next is decided, and their claims go to the store in one fenced call
(``Store.reserve_each``: each unit all or nothing on its own). A backlog thus costs one store
round trip per batch instead of one per pod: the round trip was a wait in the serial cycle, and
the Redis client's work per call was a tenth of the scheduler's CPU (bench-live's profile).

Each step is a pod book event (TAKEN, PLACED or NOT_PLACED, then RESERVE_OK, RESERVE_FAILED or
RESERVE_FENCED); the table says what follows: PLACED assumes the placement in the snapshot (so
the next unit of the batch sees it), a refused or fenced reservation forgets it, and the binder
starts only for pods the book still has as RESERVING when the store answers (a pod deleted or
bound elsewhere meanwhile is not bound, and its reservation is released or reconciled): the
pods whose RESERVE_OK names the effect BIND are handed to the binder, a unit's together.

A gang is decided whole or not at all, and so is not decided while a member is UNSETTLED (held
where a previous leader decided, its Binding maybe still landing: the pod book): its other
members are parked (GANG_UNSETTLED) until that member settles, and decided with it then.

A unit whose attempt crashes (a bug, bad input the core did not foresee) fails alone: what it
placed is answered RESERVE_FAILED (forgotten, backed off), its other pods back off, and the
batch goes on; the batch's store call is made whatever happened, and a crash of that call is a
failed reservation for all of it. No pod is left RESERVING with nobody to answer it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from scheduler.core.cycle import Unit, decide, gang_minimum, gang_timeout
from scheduler.core.model.decisions import Decision, Placed, Placement, Unschedulable, Waiting
from scheduler.core.model.objects import PodInput
from scheduler.state.base import Claim, Fenced, Store, StoreError

from .effects import Effects
from .intake import Intake
from .leader import Leadership
from .metrics import Metrics
from .podbook import SCHEDULABLE_STAGES, Ctx, Effect, Entry, Event, PodBook, Stage
from .preemption import Preemptions
from .queue import SchedulingQueue
from .storesync import StoreSync

log = structlog.get_logger("scheduler")

_UNSETTLED = frozenset({Stage.UNSETTLED})


class Cycle:
    def __init__(
        self,
        book: PodBook,
        queue: SchedulingQueue,
        store: Store,
        leadership: Leadership,
        metrics: Metrics,
        clock: Callable[[], float],
        effects: Effects,
        intake: Intake,
        sync: StoreSync,
        preemptions: Preemptions,
        on_fenced: Callable[[int], Awaitable[None]],
        gang_wait_timeout: float,
        batch_pods: int,
    ) -> None:
        self.state = sync.state
        self.book = book
        self.queue = queue
        self.store = store
        self.leadership = leadership
        self.metrics = metrics
        self.clock = clock
        self.effects = effects
        self.intake = intake  # whether the watches a pod's filters read have listed
        self.sync = sync
        self.preemptions = preemptions  # for units found unschedulable
        # The most pods decided in one batch (whose claims go to the store in one call): enough
        # that a backlog's store calls are few, few enough that watch events wait for a batch's
        # decisions (about 0.2 ms a pod) only a few milliseconds.
        self.batch_pods = batch_pods
        self._on_fenced = on_fenced
        self.gang_wait_timeout = gang_wait_timeout  # 0: wait forever, say nothing
        self._metric_children: dict[str, tuple[Any, Any]] = {}

    def _by_result(self, result: str) -> tuple[Any, Any]:
        """The attempt counter and duration histogram of ``result`` (labels() costs a lookup
        under a lock; there are four results)."""
        pair = self._metric_children.get(result)
        if pair is None:
            pair = (
                self.metrics.attempts.labels(result=result),
                self.metrics.attempt_duration.labels(result=result),
            )
            self._metric_children[result] = pair
        return pair

    def _unit_for(self, entry: Entry, pod: PodInput) -> Unit:
        """The pod's unit: itself, or its gang's pending members (TAKEN takes each out of the
        queue: they are decided with it)."""
        gang = entry.gang  # resolved once, when the book kept the pod
        if gang is None:
            return Unit(None, (pod,))
        members = [
            e.pod for e in self.book.gang_members(gang, SCHEDULABLE_STAGES) if e.pod is not None
        ]
        return Unit(gang, tuple(members))

    async def schedule(self, key: str, more: Callable[[], str | None] = lambda: None) -> None:
        """Decide ``key``'s unit, then the units of the keys ``more`` pops while it has some and
        the batch is under ``batch_pods`` pods; reserve every placed unit in one store call."""
        batch: list[_Attempt] = []
        pods = 0
        next_key: str | None = key
        try:
            while next_key is not None:
                pods += await self._attempt(next_key, batch)
                next_key = more() if pods < self.batch_pods else None
        finally:
            if batch:
                await self._reserve(batch)

    async def _attempt(self, key: str, batch: list[_Attempt]) -> int:
        """Decide ``key``'s unit: placed ones join ``batch``. Returns its number of pods."""
        attempt: _Attempt | None = None
        try:
            attempt = self._decide(key)
            if attempt is None:
                return 0
            if isinstance(attempt.decision, Placed) and attempt.decision.placements:
                self._place(attempt, attempt.decision)
                batch.append(attempt)
            else:
                result = await self._not_placed(attempt.unit, attempt.decision)
                self._summarize(attempt, result)
            return len(attempt.unit.pods)
        except Exception:
            log.exception("scheduling attempt crashed", pod=key)
            self._crashed(key, attempt)
            return 1 if attempt is None else len(attempt.unit.pods)

    def _crashed(self, key: str, attempt: _Attempt | None) -> None:
        """The unit's own failure: what it placed is forgotten, every pod of it backs off."""
        if attempt is not None:
            for pod, placement in attempt.placed:
                ctx = Ctx(pod=pod, placement=placement)
                self.effects.dispatch(pod.key, pod.uid, Event.RESERVE_FAILED, ctx)
        entry = self.book.get(key)
        unit = [entry] if entry is not None else []
        if entry is not None and entry.gang is not None:
            unit = self.book.gang_members(entry.gang, SCHEDULABLE_STAGES)
        for member in unit:
            self.effects.dispatch(member.key, member.uid, Event.CRASHED)

    def _decide(self, key: str) -> _Attempt | None:
        entry = self.book.get(key)
        if entry is None or entry.stage not in SCHEDULABLE_STAGES or entry.pod is None:
            return None
        start = self.clock()
        unit = self._unit_for(entry, entry.pod)
        waiting = self._not_ready(unit)
        if waiting is not None:
            # Retry after the backoff (a LIST or the bound watch's next event wakes it sooner).
            if waiting:
                log.info(waiting, pod=key)
            for p in unit.pods:
                self.effects.dispatch(p.key, p.uid, Event.NOT_READY)
            return None
        if unit.gang is not None and (held := self.book.gang_members(unit.gang, _UNSETTLED)):
            # A member is held where a previous leader decided, its Binding maybe still
            # landing: deciding the others now, without it, could split the gang (it lands
            # where the old decision put it, they where this one puts them). They wait, parked,
            # until it settles (the book's UNSETTLED exits wake its gang).
            reason = (
                f"waiting for gang member {held[0].key}: a previous leader's Binding of it may"
                " still land"
            )
            for p in unit.pods:
                ctx = Ctx(pod=p, result="waiting", reason=reason, gang=unit.gang)
                self.effects.dispatch(p.key, p.uid, Event.GANG_UNSETTLED, ctx)
            return None
        for member in unit.pods:
            # Out of the queue; a pod holding a previous leader's reservation is decided
            # afresh: TAKEN lets the snapshot's copy of that reservation go.
            self.effects.dispatch(member.key, member.uid, Event.TAKEN, None)
        return _Attempt(key, unit, decide(self.state, unit), start)

    def _rereading(self, unit: Unit) -> str | None:
        """A member of the gang being read back (its Binding failed after the pending watch
        said it left, or a watch lost sight of it), which may be gone. Decided with the others,
        it takes a place in the plan, its Binding finds it gone, and they are bound below their
        minimum (soak seed 35133: a restarted gang's old members, refused, decided with the new
        ones). The unit waits for the answer (after the backoff)."""
        if unit.gang is None:
            return None
        members = self.book.gang_members(unit.gang, SCHEDULABLE_STAGES)
        return next((e.key for e in members if e.checking), None)

    def _not_ready(self, unit: Unit) -> str | None:
        """Why ``unit`` cannot be decided yet (a line for the log; "" says nothing), or None
        when it can."""
        if not all(self.intake.watches_ready(p) for p in unit.pods):
            # Its claims or namespaces are not known yet (their watch just started): deciding
            # now would say "not found"; their LIST wakes it.
            return ""
        if self.intake.between_eras:
            # One pod watch has listed after an etcd restore, the other not yet: the snapshot
            # mixes two eras (intake.between_eras).
            return "one pod watch still in the era before a restore: waiting"
        if (
            unit.gang is not None
            and self.state.gang_bound.get(unit.gang)
            and not self.intake.bound_view_covers(unit.pods)
        ):
            # Its gang's bound members are counted from a view older than these members: they
            # may be gone already (a restart's deletions not delivered yet), and counted they
            # would make these members surplus, bound one at a time (intake.bound_view_covers).
            return "gang's bound members not confirmed yet: bound watch behind"
        if (member := self._rereading(unit)) is not None:
            return f"waiting for gang member {member}'s read-back"
        return None

    def _summarize(self, attempt: _Attempt, result: str) -> None:
        """The attempt's metrics and its one log line."""
        elapsed = self.clock() - attempt.start
        count, duration = self._by_result(result)
        count.inc()
        duration.observe(elapsed)
        decision = attempt.decision
        summary: dict[str, Any] = {
            "pod": attempt.key,
            "gang": attempt.unit.gang,
            "pods": len(attempt.unit.pods),
            "result": result,
            "duration_ms": round(elapsed * 1000, 3),
            "attempts": self.queue.attempts(attempt.key),
        }
        if isinstance(decision, Placed):
            summary["placements"] = {p.pod: [p.node, list(p.devices)] for p in decision.placements}
        else:
            summary["reason"] = decision.reason
        log.info("scheduling attempt", **summary)

    async def _not_placed(self, unit: Unit, decision: Decision) -> str:
        result = "waiting" if isinstance(decision, Waiting) else "unschedulable"
        reason, retry_by, timed_out = decision.reason, None, False
        if isinstance(decision, Unschedulable):
            self.metrics.preemption_attempts.inc()
            reason = await self.preemptions.after_unschedulable(unit, reason)
        timeout, what = self._gang_timeout(unit)
        if timeout > 0:
            # The gang holds nothing while it waits, so a timeout changes what its pods say and
            # sends each a GangTimeout event; they are retried when it runs out so that both
            # appear on time, and go on being retried with backoff after it.
            now = self.clock()
            seen = [e.first_seen for p in unit.pods if (e := self.book.get(p.key)) is not None]
            since = min(seen, default=now)
            retry_by = since + timeout
            if now >= retry_by:
                reason += f"; waited {now - since:.0f} s, longer than {what} ({timeout:g} s)"
                retry_by, timed_out = None, True
        for pod in unit.pods:
            ctx = Ctx(
                pod=pod,
                result=result,
                reason=reason,
                retry_by=retry_by,
                gang=unit.gang,
                timed_out=timed_out,
            )
            self.effects.dispatch(pod.key, pod.uid, Event.NOT_PLACED, ctx)
        return result

    def _gang_timeout(self, unit: Unit) -> tuple[float, str]:
        """How long the unit's gang may wait before it times out (0: no timeout), and whose
        setting that is. A gang whose minimum is bound has only surplus members pending: they
        wait for capacity, which is no failure of the gang."""
        if unit.gang is None:
            return 0.0, ""
        minimum = max((gang_minimum(self.state, p) for p in unit.pods), default=0)
        if minimum and len(self.state.gang_bound.get(unit.gang, ())) >= minimum:
            return 0.0, ""
        own = gang_timeout(self.state, unit)
        if own is not None:
            return float(own), "its PodGroup's scheduleTimeoutSeconds"
        return self.gang_wait_timeout, "gang.waitTimeoutSeconds"

    def _place(self, attempt: _Attempt, decision: Placed) -> None:
        """PLACED for every placement (the snapshot assumes it) and the claims to reserve;
        NOT_PLACED for an elastic gang's surplus that fits nowhere yet."""
        pods = {p.key: p for p in attempt.unit.pods}
        for key in decision.waiting:
            pod = pods[key]
            ctx = Ctx(
                pod=pod, result="unschedulable", reason=decision.reason, gang=attempt.unit.gang
            )
            self.effects.dispatch(pod.key, pod.uid, Event.NOT_PLACED, ctx)
        for placement in decision.placements:
            pod = pods[placement.pod]
            attempt.placed.append((pod, placement))
            ctx = Ctx(pod=pod, placement=placement)
            self.effects.dispatch(pod.key, pod.uid, Event.PLACED, ctx)
            # The store claims what the core's assume holds (the gang's minimum included, as
            # the plan resolved it): nothing is rebuilt here.
            claim = self.sync.claim_of(self.state.holdings[pod.key])
            assert claim is not None
            attempt.claims.append(claim)

    async def _reserve(self, batch: list[_Attempt]) -> None:
        """One store call for the batch's claims, then each pod's answer: RESERVE_OK (the
        binder takes it), RESERVE_FAILED (conflict or store error) or RESERVE_FENCED."""
        epoch = self.leadership.epoch
        events = [Event.RESERVE_FENCED] * len(batch)
        if epoch is not None and self.leadership.leading:
            events = await self._reserve_each(epoch, batch)
        for attempt, event in zip(batch, events, strict=True):
            binding: list[tuple[PodInput, Placement]] = []  # the pods the answer moved to bind
            try:
                for pod, placement in attempt.placed:
                    ctx = Ctx(pod=pod, placement=placement)
                    t = self.effects.dispatch(pod.key, pod.uid, event, ctx)
                    if t is not None and Effect.BIND in t.effects:
                        binding.append((pod, placement))
                self._summarize(attempt, "scheduled" if event is Event.RESERVE_OK else "error")
            except Exception:
                log.exception("reservation answer crashed", pod=attempt.key)
            finally:
                self.effects.bind(binding)  # the unit's binding cycle: its Bindings together

    async def _reserve_each(self, epoch: int, batch: list[_Attempt]) -> list[Event]:
        # A pod decided again right after its reservation's release was queued (an etcd
        # restore undid its Binding, read back pending) is reserved once that release landed:
        # on a slow store the release, sent just before, landed after the new reservation and
        # removed it, and the pod was bound with no record (sim seed 1019).
        if self.sync.releasing([c.uid for a in batch for c in a.claims]):
            await self.sync.released()
        try:
            answers = await self.store.reserve_each(
                self.leadership.holder, epoch, [a.claims for a in batch]
            )
        except Fenced:
            log.warning("fenced: no longer leader", epoch=epoch)
            await self._on_fenced(epoch)
            return [Event.RESERVE_FENCED] * len(batch)
        except StoreError as exc:
            log.warning("store unavailable", error=str(exc))
            return [Event.RESERVE_FAILED] * len(batch)
        except Exception:
            log.exception("reservation crashed")
            self.sync.request()  # whatever it wrote, the reconcile makes right
            return [Event.RESERVE_FAILED] * len(batch)
        events = []
        for attempt, conflict in zip(batch, answers, strict=True):
            if conflict is None:
                events.append(Event.RESERVE_OK)
                continue
            # The snapshot was behind the store (another replica's leftovers or a race with a
            # watch event): retry after a backoff, by then the watches have caught up.
            pods = [p.key for p in attempt.unit.pods]
            log.warning("reservation conflict", pods=pods, error=conflict)
            self.sync.request()
            events.append(Event.RESERVE_FAILED)
        return events


@dataclass
class _Attempt:
    """One unit decided in a batch, and what it placed (until the store answers)."""

    key: str  # the pod popped
    unit: Unit
    decision: Decision
    start: float
    claims: list[Claim] = field(default_factory=list)
    placed: list[tuple[PodInput, Placement]] = field(default_factory=list)
