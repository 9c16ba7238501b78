"""The scheduling cycle (one task, one unit at a time): pop a pod, gather its gang's pending
members, decide with the core, reserve every claim in one fenced store call, and hand the
reserved pods to the binder. Nothing here waits on the apiserver.

Each step is a pod book event (TAKEN, PLACED or NOT_PLACED, then RESERVE_OK, RESERVE_FAILED or
RESERVE_FENCED); the table says what follows: the snapshot assumes the placement and the binder
starts only for pods the book still has as RESERVING when the store answers (a pod deleted or
bound elsewhere meanwhile is not bound, and its reservation is released or reconciled).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from scheduler.core.cluster import ClusterState, holding_of
from scheduler.core.cycle import Unit, decide, gang_minimum, gang_of, gang_timeout
from scheduler.core.decisions import Decision, Placed, Placement, Unschedulable, Waiting
from scheduler.core.objects import PodInput
from scheduler.state.base import Conflict, Fenced, Store, StoreError

from .binder import Binder
from .leader import Leadership
from .metrics import Metrics
from .podbook import SCHEDULABLE_STAGES, Ctx, Event, PodBook
from .preemption import Preemptions
from .queue import SchedulingQueue
from .storesync import StoreSync

log = structlog.get_logger("scheduler")

Dispatch = Callable[[str, str, Event, Ctx | None], None]


class Cycle:
    def __init__(
        self,
        state: ClusterState,
        book: PodBook,
        queue: SchedulingQueue,
        store: Store,
        leadership: Leadership,
        metrics: Metrics,
        clock: Callable[[], float],
        dispatch: Dispatch,
        sync: StoreSync,
        binder: Binder,
        on_fenced: Callable[[], Awaitable[None]],
        gang_wait_timeout: float = 600.0,
    ) -> None:
        self.state = state
        self.book = book
        self.queue = queue
        self.store = store
        self.leadership = leadership
        self.metrics = metrics
        self.clock = clock
        self._dispatch = dispatch
        self.sync = sync
        self.binder = binder
        self._on_fenced = on_fenced
        self.gang_wait_timeout = gang_wait_timeout  # 0: wait forever, say nothing
        # Whether the watches a pod's filters read (claims, volumes, namespaces) have listed;
        # the service sets it to Intake.watches_ready.
        self.watches_ready: Callable[[PodInput], bool] = lambda pod: True
        # Preemption for units found unschedulable (the service sets it; None: never).
        self.preemptions: Preemptions | None = None

    def _unit_for(self, pod: PodInput) -> Unit:
        gang = gang_of(pod)
        if gang is None:
            return Unit(None, (pod,))
        members = [
            e.pod
            for e in self.book.in_stages(SCHEDULABLE_STAGES)
            if e.pod is not None and gang_of(e.pod) == gang
        ]
        members.sort(key=lambda p: p.key)
        for m in members:
            if m.key != pod.key:
                self.queue.take(m.key)
        return Unit(gang, tuple(members))

    async def schedule_one(self, key: str) -> None:
        entry = self.book.get(key)
        if entry is None or entry.stage not in SCHEDULABLE_STAGES or entry.pod is None:
            return
        start = self.clock()
        unit = self._unit_for(entry.pod)
        if not all(self.watches_ready(p) for p in unit.pods):
            # Its claims or namespaces are not known yet (their watch just started): deciding
            # now would say "not found". Retry after the backoff; the LIST wakes it sooner.
            for p in unit.pods:
                self.queue.backoff(p.key)
            return
        for member in unit.pods:
            # A pod holding a previous leader's reservation is decided afresh: TAKEN lets the
            # snapshot's copy of that reservation go.
            self._dispatch(member.key, member.uid, Event.TAKEN, None)
        decision = decide(self.state, unit)
        result = await self._act(unit, decision)
        elapsed = self.clock() - start
        self.metrics.attempts.labels(result=result).inc()
        self.metrics.attempt_duration.labels(result=result).observe(elapsed)
        summary: dict[str, Any] = {
            "pod": key,
            "gang": unit.gang,
            "pods": len(unit.pods),
            "result": result,
            "duration_ms": round(elapsed * 1000, 3),
            "attempts": self.queue.attempts(key),
        }
        if isinstance(decision, Placed):
            summary["placements"] = {p.pod: [p.node, list(p.devices)] for p in decision.placements}
        else:
            summary["reason"] = decision.reason
        log.info("scheduling attempt", **summary)

    async def _act(self, unit: Unit, decision: Decision) -> str:
        if isinstance(decision, Placed):
            return await self._reserve(unit, decision)
        result = "waiting" if isinstance(decision, Waiting) else "unschedulable"
        reason, retry_by, timed_out = decision.reason, None, False
        if isinstance(decision, Unschedulable) and self.preemptions is not None:
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
            self._dispatch(pod.key, pod.uid, Event.NOT_PLACED, ctx)
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

    async def _reserve(self, unit: Unit, decision: Placed) -> str:
        epoch = self.leadership.epoch
        if epoch is None or not self.leadership.leading:
            for pod in unit.pods:
                self.queue.add(pod.key, pod.priority, pod.created)
            return "error"
        pods = {p.key: p for p in unit.pods}
        for key in decision.waiting:  # an elastic gang's surplus that fits nowhere yet
            pod = pods[key]
            ctx = Ctx(pod=pod, result="unschedulable", reason=decision.reason, gang=unit.gang)
            self._dispatch(pod.key, pod.uid, Event.NOT_PLACED, ctx)
        claims = []
        for placement in decision.placements:
            minimum = gang_minimum(self.state, pods[placement.pod])
            claim = self.sync.claim_of(holding_of(placement, minimum))
            assert claim is not None
            claims.append(claim)
            pod = pods[placement.pod]
            self._dispatch(pod.key, pod.uid, Event.PLACED, Ctx(pod=pod, placement=placement))
        event = Event.RESERVE_OK
        try:
            await self.store.reserve(self.leadership.holder, epoch, claims)
        except Conflict as exc:
            # The snapshot was behind the store (another replica's leftovers or a race with a
            # watch event): retry after a backoff, by then the watches have caught up.
            log.warning("reservation conflict", pods=[p.key for p in unit.pods], error=str(exc))
            self.sync.request()
            event = Event.RESERVE_FAILED
        except Fenced:
            log.warning("fenced: no longer leader", epoch=epoch)
            await self._on_fenced()
            event = Event.RESERVE_FENCED
        except StoreError as exc:
            log.warning("store unavailable", error=str(exc))
            event = Event.RESERVE_FAILED
        binds: list[tuple[PodInput, Placement]] = []
        for placement in decision.placements:
            pod = pods[placement.pod]
            ctx = Ctx(
                pod=pod,
                placement=placement,
                replicas=gang_minimum(self.state, pods[placement.pod]),
                binds=binds,
            )
            self._dispatch(pod.key, pod.uid, event, ctx)
        if binds:
            self.binder.start(binds, epoch)
        return "scheduled" if event is Event.RESERVE_OK else "error"
