"""Running gangs that fall below their minimum (issue 14's stale-gang policy).

A gang runs because at least its minimum was placed together. When one of its running members
fails or is deleted and fewer than the minimum are left running, the rest usually cannot make
progress (a collective waits for a peer that is gone) while they keep their GPUs. What happens
then is the operator's choice, ``gang.staleGangPolicy``:

- ``report`` (the default): a ``GangBelowMinimum`` warning event on every remaining member, at
  once; nothing else. The job's own controller decides (it may recreate the member, which is then
  scheduled as the missing part of the minimum, next to its siblings).
- ``evict``: the same event, and after ``gang.staleGangGraceSeconds`` (default 60 s) the remaining
  members are evicted through the Eviction API (PodDisruptionBudgets honoured), unless by then the
  gang is back at its minimum (a replacement member was bound) or gone.

A member that succeeded is not a failure (a finishing job's members end one by one), and neither
is a member whose siblings are all being deleted. Only the leader reports and evicts. The
per-gang deadline is dropped when it fires or when the gang recovers or empties, so the
structure shrinks with the gangs.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import Counter

from scheduler.core.model.gangsources import group_minimum
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.holdings import Holding

from .apiserver import Evictor

log = structlog.get_logger("scheduler")


# An event on a pod: (key, uid, reason, message, kind).
Report = Callable[[str, str, str, str, str], Coroutine[Any, Any, None]]


@dataclass
class _Stale:
    deadline: float
    minimum: int


class StaleGangs:
    def __init__(
        self,
        state: ClusterState,
        evictor: Evictor,
        report: Report,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        clock: Callable[[], float],
        leading: Callable[[], bool],
        policy: str = "report",
        grace_s: float = 60.0,
        *,
        evictions: Counter,
    ) -> None:
        self.state = state
        self.evictor = evictor
        self.report = report
        self.spawn = spawn
        self.clock = clock
        self.leading = leading
        self.policy = policy
        self.grace_s = grace_s
        self.evictions = evictions  # scheduler_evictions{reason, outcome}
        self.pending: dict[str, _Stale] = {}  # gang -> its eviction deadline (policy evict)

    def member_left(self, holding: Holding | None, phase: str) -> None:
        """A bound pod is leaving (the snapshot frees it next); ``holding`` is what it holds,
        ``phase`` its last phase ("" when it was deleted). Its gang's members left running are
        counted without it."""
        if holding is None or not holding.gang:
            return
        gang = holding.gang
        minimum = group_minimum(gang, self.state.inputs.pod_groups) or holding.replicas
        if not minimum or phase == "Succeeded":
            return
        left = [h for h in self._running(gang) if h.pod != holding.pod]
        if not left or len(left) >= minimum or not self.leading():
            return
        how = "failed" if phase == "Failed" else "was deleted"
        message = (
            f"gang {gang} has {len(left)} of its minimum {minimum} members running: "
            f"{holding.pod} {how}"
        )
        if self.policy == "evict":
            message += f"; its remaining members are evicted in {self.grace_s:g} s unless it "
            message += "is back at its minimum by then"
            self.pending.setdefault(gang, _Stale(self.clock() + self.grace_s, minimum))
        log.warning("gang below its minimum", gang=gang, running=len(left), minimum=minimum)
        for h in left:
            self.spawn(self.report(h.pod, h.uid, "GangBelowMinimum", message, "Warning"))

    def rescan(self) -> None:
        """At election: the running gangs below their minimum, which a previous leader may have
        reported and been counting down for (or no one, if it fell while no one led): reported
        again, and under ``evict`` a new grace period starts. O(gangs)."""
        for gang in sorted(self.state.gang_bound):
            members = self._running(gang)
            minimum = group_minimum(gang, self.state.inputs.pod_groups) or max(
                (h.replicas for h in members), default=0
            )
            if not members or not minimum or len(members) >= minimum:
                continue
            message = (
                f"gang {gang} has {len(members)} of its minimum {minimum} members running "
                "(seen by a new leader)"
            )
            if self.policy == "evict":
                message += f"; its remaining members are evicted in {self.grace_s:g} s unless "
                message += "it is back at its minimum by then"
                self.pending.setdefault(gang, _Stale(self.clock() + self.grace_s, minimum))
            for h in members:
                self.spawn(self.report(h.pod, h.uid, "GangBelowMinimum", message, "Warning"))

    def tick(self) -> None:
        """Evict the members of the gangs whose grace period is over and that are still below
        their minimum; forget those that recovered or emptied."""
        if not self.pending:
            return
        now = self.clock()
        for gang, stale in list(self.pending.items()):
            left = self._running(gang)
            # A PodGroup lowered meanwhile (a job scaled down) may have ended the shortfall.
            minimum = group_minimum(gang, self.state.inputs.pod_groups) or stale.minimum
            if not left or len(left) >= minimum:
                del self.pending[gang]
                continue
            if now < stale.deadline:
                continue
            del self.pending[gang]
            if not self.leading():
                continue
            for h in left:
                self.spawn(self._evict(gang, h))

    def _running(self, gang: str) -> list[Holding]:
        """The gang's members on a node, by pod key (the snapshot's bound members of a gang
        leave out those being deleted: snapshot/holdings.py)."""
        holdings = self.state.holdings
        return [holdings[k] for k in sorted(self.state.gang_bound.get(gang, ())) if k in holdings]

    async def _evict(self, gang: str, holding: Holding) -> None:
        namespace, name = holding.pod.split("/", 1)
        try:
            result = await self.evictor.evict(namespace, name, holding.uid)
        except Exception as exc:
            self.evictions.labels(reason="stale-gang", outcome="error").inc()
            log.warning("eviction failed", pod=holding.pod, gang=gang, error=str(exc))
            return
        self.evictions.labels(reason="stale-gang", outcome=result.outcome.value).inc()
        log.info("stale gang member evicted", pod=holding.pod, gang=gang, outcome=result.outcome)
        if result.message:
            await self.report(
                holding.pod,
                holding.uid,
                "GangBelowMinimum",
                f"eviction of {holding.pod} ({gang}): {result.outcome.value}: {result.message}",
                "Warning",
            )

    def sizes(self) -> dict[str, int]:
        return {"stale_gangs": len(self.pending)}
