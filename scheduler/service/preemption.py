"""Preemption in the running scheduler (issue 14): the shell around the core's ``preempt``.

When the cycle finds a unit (a pod, or a gang's pending members) unschedulable, the leader asks
the core which lower-priority pods to evict (``core/preemption/preempt.py``: whole gangs or an
elastic gang's surplus, never one member alone; only if the unit then fits, checked with the same
core). If there are victims, in this order:

1. The nominations are written to the store (fenced, one per preemptor pod: the node, the
   GPUs and the claims' DRA allocations the plan gives it, the victims' UIDs, an expiry
   ``preemptionHoldSeconds`` ahead). A store that refuses (fenced, unavailable) means nothing is
   evicted: the unit is retried later.
2. The pod book's NOMINATED event: the preemptor's entry and the snapshot hold the same
   nominations (``ClusterState.nominate``): pods of equal or lower priority cannot take those
   GPUs and DRA devices; the preemptor itself and higher-priority pods can.
3. Off the cycle's path: each preemptor pod's ``status.nominatedNodeName`` is set; every victim's
   eviction is first asked as a dry run, and only when none is refused are they all evicted
   through the Eviction API, so a plan (a gang above all) is carried out whole or not at all;
   each evicted victim gets a ``Preempted`` event naming the preemptor.

**Refusals.** A PodDisruptionBudget that refuses an eviction (429, in the dry run or, racing it,
in the real one; or an eviction that failed) gives the preemptor a ``PreemptionBlocked`` warning
and ends its nomination at once; the victim is then never chosen again while the refusal stands
(``hold_s``, or until a PodDisruptionBudget of its namespace changes, or it leaves), and the
preemptor plans again at its next attempt: a victim elsewhere that can be evicted is chosen
instead of waiting on the refused one. The budgets themselves are watched (``replace_budgets``,
``budget_event``) and the core ranks candidates by the violations they would cause first, so a
refusal is only met when the snapshot's budgets were stale.

Preemption reads the nominations and feeds the book the events that change them (SEARCHED,
NOMINATED, NOMINATION_ENDED, NOMINATION_EXPIRED, NOMINATION_RESET); the effects of the book's
table write them (podbook.py), here only the store's copy before NOMINATED.

A preemptor with a live nomination is not preempted for again: it waits for its victims, and is
retried each time a pod leaves. Its nomination ends when it is placed (the core lets it go in
``apply``; the store's is dropped), when it leaves, when it expires, when an eviction for it is
refused, when a preemptor of higher priority plans over its GPUs (kube-scheduler clears the
lower nominations on the node it preempts on), or when a pod it waits for is seen running again
in a view later than its eviction (an etcd restore undid it: ``_undone``; it plans again); then
its nominatedNodeName is cleared, and the GPUs go back to everyone. A new leader reloads the store's
live nominations for the pods still pending, so a failover keeps the GPUs held for them, and
clears the nominatedNodeName of a pending pod that no live nomination backs (one that expired
while nobody led).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog
from prometheus_client import Counter

from scheduler.core.cycle import Unit
from scheduler.core.model.objects import DisruptionBudgetInput, PodInput
from scheduler.core.preemption.preempt import NoPreemption, Preemption, preempt
from scheduler.core.resources.accounting import pod_requests
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.nominations import Nominated
from scheduler.kube.podgroups import Eviction
from scheduler.state.base import Fenced, Nomination, Store, StoreError

from .apiserver import Cluster
from .leader import Leadership
from .podbook import SCHEDULABLE_STAGES, Ctx, Dispatch, Event, Held, PodBook

log = structlog.get_logger("scheduler")

# An event on a pod: (key, uid, reason, message, kind).
Report = Callable[[str, str, str, str, str], Coroutine[Any, Any, None]]


class NominationView(msgspec.Struct, frozen=True, kw_only=True):
    """One nomination as ``/debug/nominations`` shows it."""

    pod: str
    node: str
    devices: tuple[int, ...]
    priority: int
    expires_in_s: float


@dataclass(frozen=True)
class Refusal:
    """An eviction the apiserver refused: the victim is no candidate until ``until``."""

    pod: str  # the victim's key
    until: float  # by ``clock``


class Preemptions:
    def __init__(
        self,
        state: ClusterState,
        book: PodBook,
        store: Store,
        leadership: Leadership,
        cluster: Cluster,
        report: Report,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        clock: Callable[[], float],
        wall_ms: Callable[[], int],
        on_fenced: Callable[[int], Awaitable[None]],
        hold_s: float,
        retry_s: float,
        *,
        dispatch: Dispatch,
        evictions: Counter,
    ) -> None:
        self.state = state
        # The pods' entries: whether a pod is still pending, and each preemptor's nomination
        # and last fruitless search (Entry.nomination, Entry.searched), which leave with it.
        # Read here; written only by the book's events (``dispatch``): NOMINATED, SEARCHED,
        # NOMINATION_ENDED, NOMINATION_EXPIRED, NOMINATION_RESET (podbook.py's TABLE).
        self.book = book
        self.dispatch = dispatch
        self.store = store
        self.leadership = leadership
        self.cluster = cluster
        self.report = report
        self.spawn = spawn
        self.clock = clock
        self.wall_ms = wall_ms
        self.on_fenced = on_fenced
        # How long GPUs stay held for a preemptor that has not bound (preemption.holdSeconds).
        self.hold_s = hold_s
        # After a search found no victims, the unit is not searched for again before
        # ``retry_s`` (preemption.retrySeconds): the search weighs every pod of lower priority
        # (up to a second on 5,000 nodes), and an unschedulable unit is retried on every
        # cluster event; its reason keeps the last answer meanwhile.
        self.retry_s = retry_s
        self.evictions = evictions  # scheduler_evictions{reason, outcome}
        # Victim UID -> its refused eviction, while it stands.
        self.refused: dict[str, Refusal] = {}
        # Victim UID -> how many bound LISTs had begun (the book's ``bound_lists``) when it was
        # known to be leaving: its eviction answered, or, for a pod a plan counts on, seen
        # terminating. A bound LIST begun after that shows it terminating or not at all, unless
        # etcd went back (``_undone``). Kept while a nomination waits for it (``tick``).
        self.leaving: dict[str, int] = {}
        # A nomination let its GPUs go (effect END_NOMINATION), or a budget
        # changed: waiting pods retry at the loop's next turn (``tick``).
        self._ended = False

    async def after_unschedulable(self, unit: Unit, reason: str) -> str:
        """Preempt for ``unit`` if that lets it fit; the reason its pods report."""
        entries = [e for p in unit.pods if (e := self.book.get(p.key)) is not None]
        held = [e.nomination for e in entries if e.nomination is not None]
        waiting = self._waiting(held)
        if waiting is not None:
            return f"{reason} preemption: nominated to node {held[0].nominated.node}, {waiting}"
        epoch = self.leadership.epoch
        if epoch is None or not self.leadership.leading:
            return reason
        now = self.clock()
        quiet = [e.searched for e in entries if e.searched is not None]
        if quiet and all(until > now for until, _ in quiet):
            return f"{reason} preemption: {quiet[0][1]}"
        result = preempt(self.state, unit, self._standing())
        if isinstance(result, NoPreemption):
            if not result.weighed:
                return reason
            quiet_until = Ctx(searched=(now + self.retry_s, result.reason))
            for entry in entries:
                self.dispatch(entry.key, entry.uid, Event.SEARCHED, quiet_until)
            return f"{reason} preemption: {result.reason}"
        for entry in entries:
            self.dispatch(entry.key, entry.uid, Event.SEARCHED, Ctx(searched=None))
        if not await self._write(result, epoch):
            return f"{reason} preemption: postponed, the store did not take the nominations"
        pods = {p.key: p for p in unit.pods}
        if not all(
            self.book.stage(key, pod.uid) in SCHEDULABLE_STAGES for key, pod in pods.items()
        ):
            # A pod of the unit left (or was bound) while the store wrote: evict nobody.
            self.spawn(self._drop([n.uid for n in result.nominations]))
            return reason
        self._plan_over_lower(result)
        deadline = self.clock() + self.hold_s
        victims = {v.pod: v.uid for v in result.victims}
        for key in result.waiting_for:
            record = self.state.index.records.get(key)
            if record is not None:
                victims[key] = record.uid
                self.leaving[record.uid] = self.book.bound_lists
        for nominated in result.nominations:
            holds = Ctx(nomination=Held(nominated, deadline, dict(victims), self.book.era))
            self.dispatch(nominated.pod, nominated.uid, Event.NOMINATED, holds)
        self.spawn(self._carry_out(result))
        log.info(
            "preempting",
            pods=list(result.pods),
            victims=[v.pod for v in result.victims],
            waiting_for=list(result.waiting_for),
            summary=result.summary,
        )
        return f"{reason} preemption: {result.summary}"

    def _waiting(self, held: list[Held]) -> str | None:
        """What nominated preemptors wait for, or None when they may preempt again.

        They wait while a pod they wait for is still there (its eviction sent, or it was
        already terminating). Once every pod they waited for is gone and they still do not fit
        (room taken by a pod of higher priority), they may preempt again."""
        records = self.state.index.records
        for h in held:
            for key, uid in h.victims.items():
                record = records.get(key)
                if record is not None and record.uid == uid:
                    return "waiting for its victims to leave"
        return None

    def _undone(self, held: Held) -> str | None:
        """A pod the nomination waits for that an etcd restore brought back running, or None:
        one bound and not terminating in an era after the one the nomination was held in, or
        in a bound LIST begun after it was known to be leaving (``leaving``).

        A deletionTimestamp is never taken back: a victim seen running again after its
        eviction was brought back by an etcd restore from a backup taken before the eviction.
        Its plan waits on a pod that will not leave: kept, the preemptor waited out the whole
        hold (5 minutes) beside GPUs that its nomination kept from every pod of lower priority
        (issue 30, soak seed 1326). kube-scheduler never waits on its victims as such: a
        nominated pod waits only while a pod of lower priority on its node is terminating, and
        otherwise preempts again in its next cycle (PodEligibleToPreemptOthers). Here a victim
        may be seen running while its eviction is on its way (sent off the cycle's path, and
        answered before the watch tells of it), so only a view that must be later than the
        eviction ends the plan (``tick``: it plans again at its next attempt, which the
        nomination's end makes the loop's next turn). A new era's (PodBook.new_era) is one. A
        bound LIST begun after the eviction was answered is the other: a LIST is read at least
        as late as anything answered before it was asked for. A restore need not begin an era:
        a second one from the same backup, before the watches told the leader of any version
        the first's history reached, looks like none; it brought back the victims that the
        plans of the era the first began had evicted, and those plans waited for them for good
        (issue 30, soak seed 56736)."""
        records = self.state.index.records
        later_era = held.era != self.book.era
        for key, uid in held.victims.items():
            record = records.get(key)
            if record is None or record.uid != uid or record.terminating:
                continue
            since = self.leaving.get(uid)
            if later_era or (since is not None and self.book.bound_listed > since):
                return key
        return None

    def _standing(self) -> set[str]:
        """The UIDs of victims whose refusal stands (the expired ones, and those of pods that
        left, are forgotten here)."""
        if not self.refused:
            return set()
        now = self.clock()
        records = self.state.index.records
        for uid, refusal in list(self.refused.items()):
            record = records.get(refusal.pod)
            if now >= refusal.until or record is None or record.uid != uid:
                del self.refused[uid]
        return set(self.refused)

    def _plan_over_lower(self, result: Preemption) -> None:
        """End the nominations of lower priority whose GPUs or DRA devices ``result`` plans to
        use: the core lifted them for this plan, so they no longer hold (kube-scheduler clears
        the lower nominations on the node it preempts on)."""
        mine = set(result.pods)
        for n in result.nominations:
            for key, held in list(self._held()):
                other = held.nominated
                if key not in mine and other.priority < result.priority and n.overlaps(other):
                    log.info("nomination planned over", pod=key, by=n.pod, node=n.node)
                    self.dispatch(key, held.nominated.uid, Event.NOMINATION_ENDED)

    def _held(self) -> list[tuple[str, Held]]:
        """Every nomination held, by preemptor (their entries', through the book's index)."""
        return [(e.key, e.nomination) for e in self.book.nominations() if e.nomination]

    async def _write(self, result: Preemption, epoch: int) -> bool:
        now_ms = self.wall_ms()
        victims = tuple(v.uid for v in result.victims)
        try:
            for n in result.nominations:
                nomination = Nomination(
                    uid=n.uid,
                    pod=n.pod,
                    priority=n.priority,
                    node=n.node,
                    devices=n.devices,
                    victims=victims,
                    allocations=n.allocations,
                    created_ms=now_ms,
                    expires_ms=now_ms + int(self.hold_s * 1000),
                )
                await self.store.nominate(self.leadership.holder, epoch, nomination, now_ms)
        except Fenced:
            await self.on_fenced(epoch)
            return False
        except StoreError as exc:
            log.warning("nominations not written", pods=list(result.pods), error=str(exc))
            return False
        return True

    async def _carry_out(self, result: Preemption) -> None:
        await asyncio.gather(*(self._nominate_on_pod(n) for n in result.nominations))
        preemptor = ", ".join(result.pods)
        keys = tuple(n.pod for n in result.nominations)
        # Whole or not at all: one refusal in the dry run and nobody is evicted.
        trials = await asyncio.gather(*(self._try_evict(v.pod, v.uid) for v in result.victims))
        refused = [(v, why) for v, why in zip(result.victims, trials, strict=True) if why]
        if refused:
            for victim, why in refused:
                await self._refuse(keys, victim.pod, victim.uid, why)
            return
        await asyncio.gather(
            *(
                self._evict(v.pod, v.uid, v.node, preemptor, result.priority, keys)
                for v in result.victims
            )
        )

    async def _try_evict(self, pod: str, uid: str) -> str:
        """The dry run of one eviction: "" when it would be done (or the pod is gone already),
        else why not."""
        namespace, name = pod.split("/", 1)
        try:
            outcome = await self.cluster.evict(namespace, name, uid, dry_run=True)
        except Exception as exc:
            return f"the eviction could not be tried: {exc}"
        return outcome.message if outcome.outcome is Eviction.BLOCKED else ""

    async def _nominate_on_pod(self, n: Nominated) -> None:
        namespace, name = n.pod.split("/", 1)
        try:
            await self.cluster.set_nominated_node(namespace, name, n.node)
        except Exception as exc:
            log.warning("nominatedNodeName not set", pod=n.pod, error=str(exc))

    async def _evict(
        self, pod: str, uid: str, node: str, preemptor: str, priority: int, keys: tuple[str, ...]
    ) -> None:
        namespace, name = pod.split("/", 1)
        try:
            outcome = await self.cluster.evict(namespace, name, uid)
        except Exception as exc:
            self.evictions.labels(reason="preemption", outcome="error").inc()
            log.warning("eviction failed", pod=pod, error=str(exc))
            await self._refuse(keys, pod, uid, f"the eviction failed: {exc}")
            return
        self.evictions.labels(reason="preemption", outcome=outcome.outcome.value).inc()
        log.info("preemption victim", pod=pod, outcome=outcome.outcome.value)
        if outcome.outcome is Eviction.EVICTED:
            self.leaving[uid] = self.book.bound_lists
            message = f"Preempted by {preemptor} (priority {priority}) on node {node}"
            await self.report(pod, uid, "Preempted", message, "Normal")
        elif outcome.outcome is Eviction.BLOCKED:
            await self._refuse(keys, pod, uid, outcome.message)

    async def _refuse(self, keys: tuple[str, ...], victim: str, uid: str, why: str) -> None:
        """``victim``'s eviction was refused: it is no candidate while the refusal stands, and
        the preemptors it was chosen for give their nomination up and plan again."""
        log.info("eviction refused", pod=victim, preemptors=list(keys), reason=why)
        self.refused[uid] = Refusal(victim, self.clock() + self.hold_s)
        for key in keys:
            entry = self.book.get(key)
            held = entry.nomination if entry is not None else None
            if held is None:
                continue
            self.dispatch(key, held.nominated.uid, Event.NOMINATION_ENDED)
            message = f"eviction of {victim} refused: {why}"
            await self.report(key, held.nominated.uid, "PreemptionBlocked", message, "Warning")

    def ready(self, left: str) -> list[tuple[str, str]]:
        """The preemptors (key, UID) for which ``left`` (a pod that just left) was the last pod
        they waited for: they can bind now. O(preemptors held), a handful."""
        out = []
        records = self.state.index.records
        for key, held in self._held():
            if left not in held.victims:
                continue
            if all(
                k == left or (r := records.get(k)) is None or r.uid != uid
                for k, uid in held.victims.items()
            ):
                out.append((key, held.nominated.uid))
        return out

    # ---- PodDisruptionBudgets (the policy/v1 watch): the core's input ----------------------

    def replace_budgets(self, budgets: list[DisruptionBudgetInput]) -> None:
        self.state.inputs.budgets.replace(budgets)
        self._budgets_changed({b.namespace for b in budgets})

    def budget_event(self, kind: str, budget: DisruptionBudgetInput) -> None:
        self.state.inputs.budgets.event(kind, budget)
        self._budgets_changed({budget.namespace})

    def _budgets_changed(self, namespaces: set[str]) -> None:
        """A budget of these namespaces changed: the refusals of their pods no longer stand
        (the budgets now say what the apiserver would answer), and waiting pods may retry."""
        for uid, refusal in list(self.refused.items()):
            if refusal.pod.partition("/")[0] in namespaces:
                del self.refused[uid]
                self._ended = True

    def freed(self) -> None:
        """A nomination let its GPUs go (effect END_NOMINATION, whatever ended it): waiting pods
        retry at the loop's next turn."""
        self._ended = True
        self._forget_leaving()

    def _forget_leaving(self) -> None:
        """``leaving`` keeps only the pods a nomination still waits for."""
        if self.leaving:
            awaited = {uid for _, held in self._held() for uid in held.victims.values()}
            for uid in self.leaving.keys() - awaited:
                del self.leaving[uid]

    def tick(self) -> bool:
        """End the nominations that expired, and those a pod they wait for is back from
        (``_undone``); True when some nomination let its GPUs go since the last tick, or a
        budget changed (waiting pods may retry)."""
        self._standing()  # refusals leave with their pods
        now = self.clock()
        self._forget_leaving()
        for key, held in self._held():
            if now >= held.deadline:
                log.info("nomination expired", pod=key)
                self.dispatch(key, held.nominated.uid, Event.NOMINATION_EXPIRED)
            elif (back := self._undone(held)) is not None:
                log.warning(
                    "a victim is running again (etcd restored?): planning again",
                    pod=key,
                    victim=back,
                )
                self.dispatch(key, held.nominated.uid, Event.NOMINATION_ENDED)
        ended, self._ended = self._ended, False
        return ended

    def drop(self, uid: str) -> None:
        """The store's copy of a nomination goes (spawned; it expires there on its own if the
        store does not answer)."""
        self.spawn(self._drop([uid]))

    def clear(self, key: str) -> None:
        """The pod's nominatedNodeName is cleared (spawned)."""
        self.spawn(self._clear(key))

    async def _drop(self, uids: list[str]) -> None:
        epoch = self.leadership.epoch
        if epoch is None or not self.leadership.leading:
            return
        try:
            await self.store.drop_nominations(self.leadership.holder, epoch, uids, self.wall_ms())
        except StoreError as exc:  # it expires in the store on its own
            log.warning("nominations not dropped", uids=uids, error=str(exc))

    async def _clear(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        try:
            await self.cluster.set_nominated_node(namespace, name, None)
        except Exception as exc:
            log.warning("nominatedNodeName not cleared", pod=key, error=str(exc))

    async def reload(self, pending: dict[str, PodInput]) -> None:
        """At election: hold again what the store's live nominations hold for pods still
        pending here (``pending`` by UID), and finish their preemption: the previous leader may
        have died before its evictions went out, so victims still running are evicted again
        (a pod already terminating is left to go), and before it set the preemptor's
        nominatedNodeName, which is set where the pod lacks it. Held with no nominatedNodeName,
        the GPUs stayed kept from the pods of lower priority for the nomination's hold while
        the apiserver showed no one nominated for them, and nothing told why they were held
        (issue 30, sim seed 3163). The other nominations are dropped."""
        for key, held in self._held():
            self.dispatch(key, held.nominated.uid, Event.NOMINATION_RESET)
        now_ms = self.wall_ms()
        try:
            live = await self.store.nominations(now_ms)
        except StoreError as exc:
            log.warning("nominations not read", error=str(exc))
            return
        backed = {n.uid for n in live.values()}
        for uid, waiting in sorted(pending.items()):
            if waiting.nominated_node and uid not in backed:
                # Its nomination expired (or the store lost it) while nobody led.
                log.info("nominatedNodeName cleared", pod=waiting.key, node=waiting.nominated_node)
                self.spawn(self._clear(waiting.key))
        if not live:
            return
        by_uid = {r.uid: r for r in self.state.index.records.values() if r.uid}
        stale = []
        for uid, n in sorted(live.items()):
            pod = pending.get(uid)
            if pod is None:
                stale.append(uid)
                continue
            nominated = Nominated(
                pod=n.pod,
                uid=uid,
                priority=n.priority,
                node=n.node,
                devices=n.devices,
                requests=pod_requests(pod, self.state.gpu_names, memo=self.state.memos.requests),
                allocations=n.allocations,
            )
            entry = self.book.get(n.pod)
            if entry is None or entry.uid != uid:
                stale.append(uid)  # ``pending`` is the book's: not reached
                continue
            victims = {by_uid[v].key: v for v in n.victims if v in by_uid}
            deadline = self.clock() + (n.expires_ms - now_ms) / 1000
            held = Held(nominated, deadline, victims, self.book.era)
            self.dispatch(n.pod, uid, Event.NOMINATED, Ctx(nomination=held))
            if pod.nominated_node != n.node:
                self.spawn(self._nominate_on_pod(nominated))
            for key, victim in victims.items():
                record = by_uid[victim]
                if not record.terminating:
                    self.spawn(self._evict(key, victim, record.node, n.pod, n.priority, (n.pod,)))
        log.info("nominations reloaded", held=len(self.book.nominated), dropped=len(stale))
        if stale:
            await self._drop(stale)

    def view(self) -> list[NominationView]:
        now = self.clock()
        out = []
        for key, held in self._held():
            deadline = held.deadline
            n = held.nominated
            if n is not None:
                out.append(
                    NominationView(
                        pod=key,
                        node=n.node,
                        devices=n.devices,
                        priority=n.priority,
                        expires_in_s=round(max(0.0, deadline - now), 3),
                    )
                )
        return out

    def sizes(self) -> dict[str, int]:
        return {
            "held": len(self.book.nominated),
            "refused": len(self.refused),
            "leaving": len(self.leaving),
        }
