"""Mutants: each puts one fixed bug of issues 12, 20 and 30 (and of the simulation's own finds)
back into the live scheduler for a run, so that the simulation can show it finds it (a
simulation that finds none tests nothing).

A mutant is a list of patches applied to the fixed code and undone after the run: a pod book
TABLE cell set back to what it was before the fix, or a function replaced by the old body.
Production code knows nothing of them. ``applied(name)`` is the context manager soak.py uses
(``--mutant NAME`` or ``--mutant all``). One stands for no fixed bug: ``shares-not-read-back``
breaks the placement of shares on purpose, to show ``invariants.shared_gpus`` finds a card
over-committed.

Each mutant is found either by its hand-written timeline (``Mutant.timeline``: a schedule in
the rules' vocabulary, timelines.py, that must fail with the mutant and hold without it) or by
the search from a known seed (``Mutant.seed``: the seed whose search fails with it and passes
without it; a change that moves it makes ``make sim`` hunt on from the next seeds). Timelines
stand in where a search finds the bug only after minutes: most need three or four faults lined
up within a few seconds (a Binding slow, its retries timing out, a claim write failing, the
bound watch lagging) on a cluster full but for one GPU.

30.7b (a store write skipped while the local lease lapsed asks for no reconcile) damages the
store alone: a record left reserved instead of bound, or left behind by a skipped release.
Every reader of a stale record errs towards holding, so only the store check (the issue-20
auditor's store rules, invariants.store_records) sees it.

Bugs no mutant stands for, because the world does not model what triggers them: 12.4 (node
deletion), 12.5 (store errors beyond the store unreachable or late, FLUSHALL and failover: BUSY),
12.8-12.12 (sizes, memory, device plugin, debug endpoint), 20.5 (PodDisruptionBudgets), 20.6 (a
crashing unit), 30.7's fragmentation target (a function of the pods held: it weighs nodes, so a
target rebuilt late makes run and simulate prefer other nodes but gives no GPU twice and breaks
no invariant here; tests/unit compares run and simulate), and the review of seed 836's fix
(f5b8a2a: an election marked settled before the reconcile after its wait, or while draining;
tests/integration/test_witness_fence.py steps it on both stores). Its mark is reached
(sim836-chained-to-a-leader-in-its-wait's steps up to the FLUSHALL, then r2's wait, the store
answering 3 s late just before it ends and a rolling update: r2 marks, its drain runs no
reconcile, r4 chained to it skips its wait), but the next leader always knows the pods the
forgotten leader's Bindings bound, so its election reconcile records them: for it not to, its
bound watch must lag from the Binding's landing to its first decision. That Binding lands by
election + 45 s (sent within the forgotten leader's local lease, one lease, and committed
within 30 s: a slow apiserver 20 s, an etcd stall 30 s at most), the successor decides after
election + 75 s (the wait: one lease plus bindCommitSeconds), and the world's longest bound-watch
lag is 20 s (lags do not add up). A longer lag moves every seed's draws; a later round that
adds one can make it a mutant.

The SIGKILL gang swap (the store checking a unit against its own pods' records) delays a
gang by one turn: the refused reservation asks for a reconcile, which frees the unit's old
reservations, and the next attempt succeeds. In a real cluster a pod or gang waiting for
GPUs can take them in that gap (the e2e failure: job11 left partly bound); the simulation
does not split that turn, so ``invariants.own_refusals`` checks the refusal itself, and its
timeline reaches the swap.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from scheduler.core.cycle import Unit
from scheduler.core.formats.assignment import assignment_annotations
from scheduler.core.gangs import planning as planning_module
from scheduler.core.model.decisions import Placement
from scheduler.core.model.names import ASSIGNMENT_ANNOTATION
from scheduler.core.model.objects import PodInput
from scheduler.core.snapshot import bound as bound_module
from scheduler.core.snapshot import cluster as cluster_module
from scheduler.core.snapshot.holdings import Holding, Holdings
from scheduler.core.snapshot.nodes import NodeState
from scheduler.core.snapshot.nominations import Nominated
from scheduler.kube.api import ConfigMapData
from scheduler.kube.watch import HttpError
from scheduler.service import binder as binder_module
from scheduler.service import effects as effects_module
from scheduler.service import podbook as podbook_module
from scheduler.service.binder import Binder, Era, Outcome
from scheduler.service.cycle import Cycle
from scheduler.service.effects import Effects
from scheduler.service.intake import Intake
from scheduler.service.podbook import TABLE, Ctx, Effect, Event, Held, PodBook, Stage, Transition
from scheduler.service.preemption import Preemptions
from scheduler.service.queue import SchedulingQueue
from scheduler.service.scheduler import Scheduler
from scheduler.service.storesync import StoreSync
from scheduler.service.witness import NAME as WITNESS_NAME
from scheduler.service.witness import NEVER, Witness, WitnessError
from scheduler.state.base import History, Record
from scheduler.state.memory import MemoryStore

from .machine import NEW_RULES

S, E, F = Stage, Event, Effect

# One patch: (an object and an attribute name) or (a dict and a key), and the value to put.
Patch = tuple[Any, Any, Any]


# Rules and faults a mutant hunt leaves out unless the mutant needs them: they find bugs still
# open on main within seconds (seed 24: a restarted gang; seed 5: an etcd restore while a bound
# watch lags; seed 7 with store faults: pods left pending with no reason; seed 2 with a store
# failover: a reservation fenced by a FLUSHALL, then a failover to a replica that still holds the
# lease, and the leader never decides again), and every seed would fail with and without the
# mutant.
MAIN_BUGS = frozenset({"restart_gang", "etcd_restore", "store_fault", "failover"})


# Rule groups a hunt leaves out to look where its bug is (a narrower world reaches it sooner).
GANGS = frozenset({"create_gang", "restart_gang"})
CHURN = frozenset({"create_other", "finish_pod", "recreate_pod"})
LEADERS = frozenset({"handover", "kill", "flush_store"})
REFUSALS = frozenset({"403", "404", "409", "500"})


@dataclass(frozen=True)
class Mutant:
    bug: str
    patches: Callable[[], list[Patch]]
    needs: frozenset[str] = frozenset()  # of MAIN_BUGS, what reaches the bug
    without: frozenset[str] = frozenset()  # further rules left out (they hide it)
    # The seed from which ``make sim`` hunts it: the one that found it last (a hunt from seed 1
    # takes longer than make test's budget allows for some; a change in the scheduler or the
    # world may move it: the hunt then searches on from there, and the new seed goes here).
    # None: the search has not found it within a 45 s hunt; make sim reports it missed.
    seed: int | None = None
    # A hand-written schedule (timelines.py) that reaches the bug: make sim replays it with the
    # mutant (it must fail) when the search missed it.
    timeline: str = ""

    def disabled(self) -> frozenset[str]:
        # Round four's rules left out too: the seeds below were found without them.
        return (MAIN_BUGS - self.needs) | self.without | NEW_RULES


def _witness_off_after_403() -> list[Patch]:
    """30.4: one 403 (or a 404 on the compare-and-swap) turns the witness off for good: no
    record, no fence, every renewal the store accepts counts."""

    async def current(self: Witness) -> ConfigMapData | None:
        if getattr(self, "off", False):
            return None
        try:
            return await self.api.read_config_map(self.namespace, WITNESS_NAME)
        except HttpError as exc:
            if exc.status != 403:
                raise WitnessError(f"epoch witness unreadable: {exc}") from exc
            self.off = True  # type: ignore[attr-defined]
            return None
        except Exception as exc:
            raise WitnessError(f"epoch witness unreadable: {exc}") from exc

    async def elected(
        self: Witness, holder: str, epoch: int, history: History
    ) -> tuple[bool, bool]:
        self.recorded = ""
        seen = await self.read()
        if getattr(self, "off", False):
            return False, history.kept
        new = not history.kept and epoch == 1 and seen == NEVER
        chained = history.kept and seen in (NEVER, history.previous)
        await self._record(f"{holder}|{epoch}")
        return new, chained

    async def record(self: Witness, value: str) -> None:
        for _ in range(3):
            current = await self._current()
            if getattr(self, "off", False):
                return
            version = None if current is None else current.metadata.resource_version
            try:
                written = await self.api.write_config_map(
                    self.namespace, WITNESS_NAME, {self.key: value}, version
                )
            except HttpError as exc:
                if exc.status not in (403, 404):
                    raise WitnessError(f"epoch witness not written: {exc}") from exc
                self.off = True  # type: ignore[attr-defined]
                return
            except Exception as exc:
                raise WitnessError(f"epoch witness not written: {exc}") from exc
            if written:
                self.recorded = value
                return
        raise WitnessError("epoch witness not written: it kept changing")

    async def superseded(self: Witness, holder: str, epoch: int) -> bool:
        if getattr(self, "off", False) or self.recorded != f"{holder}|{epoch}":
            return False
        seen = await self.read()
        return not getattr(self, "off", False) and seen not in (NEVER, self.recorded)

    return [
        (Witness, "_current", current),
        (Witness, "elected", elected),
        (Witness, "_record", record),
        (Witness, "superseded", superseded),
    ]


def _relist_frees_assumed() -> list[Patch]:
    """12.1: the end of a bound re-list frees a pod we bound while the LIST was in transit."""
    return [(TABLE, (S.ASSUMED, E.BOUND_MISSING), TABLE[S.BOUND, E.BOUND_MISSING])]


def _conflict_is_failure() -> list[Patch]:
    """12.2: a 409 (or 404) counts as a failed bind, without reading where the pod is bound."""
    original = Binder._read_back

    async def read_back(
        self: Binder, pod: PodInput, placement: Placement, uncertain: bool
    ) -> tuple[Event, PodInput | None]:
        if not uncertain:
            return Event.BIND_FAILED, None
        return await original(self, pod, placement, uncertain)

    return [(Binder, "_read_back", read_back)]


def _unfenced_binding() -> list[Patch]:
    """12.3: a Binding is sent whenever the replica leads, however little lease is left."""

    def may_send(self: Binder) -> bool:
        return self.leadership.leading

    return [(Binder, "may_send", may_send)]


def _no_wait_after_flush() -> list[Patch]:
    """12.3: a leader that cannot know who led before (a flushed store) decides at once."""

    def may_decide(self: Scheduler) -> bool:
        return self.accepting and self.ready_to_schedule and self.leadership.leading

    return [(Scheduler, "may_decide", may_decide)]


def _flush_waits_one_lease() -> list[Patch]:
    """Sim: a store whose history is cut (flushed with the witness kept, or a failover that
    lost writes) waits one lease only, not the Bindings' commit time after it. (Main once
    waited longer only when the witness had no record either; this mutant shortens a new
    installation's wait too, which the timeline's first wait outlasts anyway.)"""

    def first_wait(self: Scheduler, chained: bool) -> float:
        if chained or not self.wait_for_unknown_leader:
            return 0.0
        return self.leadership.timing.lease_s

    return [(Scheduler, "first_wait", first_wait)]


def _deleted_while_binding_held() -> list[Patch]:
    """12.6: a pod deleted while its Binding is in flight stays held (and recorded bound)."""
    return [
        (TABLE, (S.BINDING, E.PENDING_ENDED), (S.BINDING, ())),
        (TABLE, (S.BINDING, E.BIND_GONE), (S.ASSUMED, (F.MARK_BOUND,))),
    ]


def _reloaded_deleted_held() -> list[Patch]:
    """12.7: a reloaded reservation of a pod deleted before its turn stays held. Only a replica
    that takes no turn holds it for good (a leader's turn forgets it), and since seed 380's fix
    a deposed replica holds no unsettled or reloaded pod at all (DEPOSED): the mutant puts that
    holding back too (``_deposed_unsettled_held``), or its timeline could not reach the bug."""
    return [
        (TABLE, (S.RELOADED, E.PENDING_ENDED), (S.RELOADED, ())),
        (TABLE, (S.RELOADED, E.CHECKED_GONE), (S.RELOADED, ())),
        *_deposed_unsettled_held(),
    ]


def _others_never_uncharged() -> list[Patch]:
    """20.1: another scheduler's pod is charged when it appears bound, never uncharged."""
    return [
        (TABLE, (S.OTHER, E.BOUND_ENDED), (S.GONE, ())),
        (TABLE, (S.OTHER, E.BOUND_MISSING), (S.GONE, ())),
        (TABLE, (S.OTHER, E.REPLACED), (S.GONE, ())),
    ]


def _stale_news_trusted() -> list[Patch]:
    """20.2: an event older than what the book knows (an old UID's LIST page) is taken in."""

    def older(self: Intake, pod: PodInput) -> bool:
        return False

    return [(Intake, "older", older)]


def _nothing_inherited() -> list[Patch]:
    """20.3: a new leader inherits no store record of a pod it has not seen yet."""

    def unknown(self: StoreSync, records: Any) -> list[Any]:
        return []

    return [(StoreSync, "unknown", unknown)]


def _one_read_settles() -> list[Patch]:
    """20.4: an uncertain Binding is settled by one read: still pending = failed."""
    original = binder_module.settle

    def settle(
        pod: PodInput, placement: Placement, current: PodInput | None, uncertain: bool = False
    ) -> tuple[Event, PodInput | None]:
        return original(pod, placement, current, False)

    return [(binder_module, "settle", settle)]


def _claim_fail_forgets() -> list[Patch]:
    """30.1a: a re-send whose ResourceClaim write fails is BIND_FAILED (the GPUs forgotten),
    though an earlier Binding may still land."""
    original = Binder._send

    async def send(
        self: Binder, pod: PodInput, placement: Placement, uncertain: bool
    ) -> tuple[Event, PodInput | None]:
        if self._others(pod, placement) and not await self._reserve(pod, placement):
            return Event.BIND_FAILED, None
        unclaimed = msgspec.structs.replace(pod, resource_claims=())
        return await original(self, unclaimed, placement, uncertain)

    return [(Binder, "_send", send)]


def _checked_bound_ignored() -> list[Patch]:
    """30.1b: a re-read finding a pending pod bound (our lost answer landed) is ignored until
    the bound watch says so."""
    return [(TABLE, (S.PENDING, E.CHECKED_BOUND), (S.PENDING, ()))]


def _checked_pending_forgets() -> list[Patch]:
    """30.1: a re-read of a pod whose Binding is in flight that finds it still pending forgets
    its GPUs (the Binding may yet land)."""
    return [
        (
            TABLE,
            (S.BINDING, E.CHECKED_PENDING),
            (S.PENDING, (F.FORGET, F.RELEASE_STORE, F.RETRY, F.BACKOFF, F.RESTORE_NOMINATION)),
        )
    ]


def _no_unreserve() -> list[Patch]:
    """30.1: a refused or abandoned Binding leaves the pod in its claims' ``reservedFor``
    (neither the binder's Unreserve nor the leader's of a pod it found no place for)."""

    async def unreserve(self: Binder, pod: PodInput, placement: Placement) -> None:
        return None

    async def unreserve_stale(self: Binder, pod: PodInput) -> None:
        return None

    return [(Binder, "_unreserve", unreserve), (Binder, "unreserve_stale", unreserve_stale)]


def _reload_decided_at_once() -> list[Patch]:
    """30.2: a previous leader's reservation (its Binding maybe in flight) is decided afresh
    at its turn, not held until that Binding can no longer land."""
    return [(TABLE, (S.PENDING, E.RELOAD), (S.RELOADED, (F.HOLD,)))]


def _deposed_binding_held() -> list[Patch]:
    """Sim seed 691: an unanswered Binding may land for as long as it is unsettled, so a
    deposed leader (it sends no more) reads the pod back pending and holds its GPUs for good."""

    def may_land(self: Binder, uid: str) -> bool:
        return uid in self._sent

    return [(Binder, "_may_land", may_land)]


def _deposed_unsettled_held() -> list[Patch]:
    """Sim seed 380: a deposed leader keeps a previous leader's reservations it held (unsettled,
    reloaded): the re-read that settles one and the turn that decides one afresh are a
    leader's, so a pod deleted while unsettled stays held in the standby's snapshot for good."""
    return [
        (TABLE, (S.UNSETTLED, E.DEPOSED), (S.UNSETTLED, ())),
        (TABLE, (S.RELOADED, E.DEPOSED), (S.RELOADED, ())),
    ]


def _deposed_inherited_held() -> list[Patch]:
    """Sim seed 3935: a deposed leader keeps the records it inherited (a previous leader's, of
    pods no watch of its own has shown): the election's re-read of one, answered after the
    deposition, makes it unsettled in the standby, held there for good."""
    return [(TABLE, (S.INHERITED, E.DEPOSED), (S.INHERITED, ()))]


def _inherited_pending_reloaded() -> list[Patch]:
    """30.7c: an inherited record read pending is decided afresh at once, its store record
    left "bound" (the next reconcile frees it)."""
    old = (S.RELOADED, (F.KEEP_POD, F.ENQUEUE))
    return [
        (TABLE, (S.INHERITED, E.PENDING_SEEN), old),
        (TABLE, (S.INHERITED, E.PENDING_SAME), old),
        (TABLE, (S.INHERITED, E.CHECKED_PENDING), old),
    ]


def _questioned_not_read() -> list[Patch]:
    """30.3: election inheritance by name: a name the book holds under another UID than a
    store record is not read, and the record is freed."""

    def questioned(self: StoreSync, records: Any) -> list[str]:
        return []

    return [(StoreSync, "questioned", questioned)]


def _terminating_members_count() -> list[Patch]:
    """30.5: a terminating gang member counts among its gang's bound members."""

    def join_gang(self: Holdings, holding: Holding) -> None:
        if holding.gang:
            self.gang_bound.setdefault(holding.gang, set()).add(holding.pod)

    return [(Holdings, "join_gang", join_gang)]


def _bound_view_trusted() -> list[Patch]:
    """Sim seed 5: a gang's bound members count in a bound view older than its pending
    members."""

    def covers(self: Intake, pods: Iterable[PodInput]) -> bool:
        return True

    return [(Intake, "bound_view_covers", covers)]


def _versions_trusted_forever() -> list[Patch]:
    """30.6: a LIST below the book's newest resourceVersion begins no new era."""

    def new_era(self: Intake, watch: str, version: int, since: int, era: int, asked: int) -> bool:
        return False

    return [(Intake, "_new_era", new_era)]


def _list_of_the_era_begins_another() -> list[Patch]:
    """Sim seed 1132: a LIST whose version went back, asked for before the other watch's LIST
    began the era, begins another era (its stale pods taken in as the truth)."""
    fixed = Intake._new_era

    def new_era(self: Intake, watch: str, version: int, since: int, era: int, asked: int) -> bool:
        if not (0 < version < since and era != self._eras):
            return fixed(self, watch, version, since, era, asked)
        awaited = watch == self._unlisted
        began = fixed(self, watch, version, since, self._eras, asked)
        if awaited:
            self._unlisted = ""
        return began

    return [(Intake, "_new_era", new_era)]


def _list_after_era_list_judged_by_version() -> list[Patch]:
    """Sim seed 2977: a LIST asked for before the current era began ends the wait for its watch
    only if its version went back, though it was asked for after the LIST that began the era
    (whose version went back) and so reads the restored history too."""
    fixed = Intake._new_era

    def new_era(self: Intake, watch: str, version: int, since: int, era: int, asked: int) -> bool:
        if era != self._eras:
            asked = self._era_asked  # when it was asked for, aside
        return fixed(self, watch, version, since, era, asked)

    return [(Intake, "_new_era", new_era)]


def _era_waits_for_listed_watch() -> list[Patch]:
    """Sim seed 3873: a LIST that begins an era waits for the other watch's LIST even when that
    watch's last LIST, already ended, was asked for after it (and so read the restored
    history too)."""
    fixed = Intake._new_era

    def new_era(self: Intake, watch: str, version: int, since: int, era: int, asked: int) -> bool:
        began = fixed(self, watch, version, since, era, asked)
        if began:
            self._unlisted = "bound-pods" if watch == "pending-pods" else "pending-pods"
        return began

    return [(Intake, "_new_era", new_era)]


def _list_version_untold() -> list[Patch]:
    """Soak seed 2557: a LIST that begins no era tells the book nothing of its version (only
    the events of its pods do)."""
    fixed = Intake._new_era

    def new_era(self: Intake, watch: str, version: int, since: int, era: int, asked: int) -> bool:
        newest = self.book.newest
        began = fixed(self, watch, version, since, era, asked)
        if not began:
            self.book.newest = newest
        return began

    return [(Intake, "_new_era", new_era)]


def _own_copy_told() -> list[Patch]:
    """Sim seeds 1148 and 1326: every event's pod tells the book its version, the book's own
    copy included (a Binding's pod, a decided one): after an etcd restore, one of the era
    before."""
    return [(effects_module, "NEWS", frozenset(Event))]


def _shown_ignored() -> list[Patch]:
    """The condition a pending pod shows is not compared with the reason of its last decision:
    the book holds what it wrote as written, though an etcd restore put back the backup's
    conditions (sim seeds 13078, 23014: a restore the book could not tell from its LISTs)."""
    return [(effects_module.Effects, "_shown", lambda self, t, ctx: None)]


def _shown_dropped(*keys: tuple[podbook_module.Stage, podbook_module.Event]) -> list[Patch]:
    """The pod book's table without effect SHOWN in the cells ``keys``."""
    table = dict(podbook_module.TABLE)
    for key in keys:
        stage, effects = table[key]
        table[key] = (stage, tuple(e for e in effects if e is not podbook_module.Effect.SHOWN))
    return [(podbook_module, "TABLE", table)]


def _restored_binding_shown_skipped() -> list[Patch]:
    """Sim seed 25470: an assumed pod read back pending (an etcd restore undid its Binding) is
    not told what it shows: the reason written before its Binding is held as written, so the
    same reason decided again is never written."""
    return _shown_dropped((podbook_module.Stage.ASSUMED, podbook_module.Event.CHECKED_PENDING))


def _reserving_news_not_shown() -> list[Patch]:
    """Sim seed 30598: news of a pod being reserved (still pending in the apiserver) does not
    tell the book what it shows, so a restore then, and a failed reservation, leave the reason
    written before held as written."""
    reserving = podbook_module.Stage.RESERVING
    return _shown_dropped(
        (reserving, podbook_module.Event.PENDING_SEEN),
        (reserving, podbook_module.Event.PENDING_SAME),
    )


def _surplus_beside_bindings() -> list[Patch]:
    """Sim seed 11505: a gang's minimum is met by its members bound or assumed alike, so a
    restarted gang's new member is surplus beside the old incarnation's Bindings in flight."""

    def minimum_part(size: planning_module.Size, pending: int) -> int:
        return max(0, size.minimum - size.bound)

    return [(planning_module, "minimum_part", minimum_part)]


def _attempt_moved_aside() -> list[Patch]:
    """Sim seed 1541: a pod whose attempt was under way when a cluster event moved every waiting
    pod is parked unschedulable all the same (it waits for the next event, or 5 minutes)."""
    fixed = SchedulingQueue.unschedulable

    def unschedulable(self: SchedulingQueue, key: str, retry_by: float | None = None) -> None:
        self._taken_in.pop(key, None)  # the event during its attempt, aside
        fixed(self, key, retry_by)

    return [(SchedulingQueue, "unschedulable", unschedulable)]


def _reloaded_nomination_unset() -> list[Patch]:
    """Sim seed 3163: a nomination reloaded at election is held, its victims evicted, but its
    preemptor's nominatedNodeName is not set where the previous leader never set it."""
    fixed = Preemptions.reload

    async def reload(self: Preemptions, pending: dict[str, PodInput]) -> None:
        async def unset(n: Nominated) -> None:
            return None

        self._nominate_on_pod = unset  # type: ignore[method-assign]
        try:
            await fixed(self, pending)
        finally:
            del self._nominate_on_pod

    return [(Preemptions, "reload", reload)]


def _store_asked_at_era_begin() -> list[Patch]:
    """Sim seed 603: the store's reconcile is asked for when a new era begins, not when both pod
    watches have listed in it (a reconcile between the eras leaves none needed)."""
    fixed = Intake._new_era

    def new_era(self: Intake, watch: str, version: int, since: int, era: int, asked: int) -> bool:
        needed = self.effects.sync.needed
        began = fixed(self, watch, version, since, era, asked)
        if began:
            self.effects.sync.request()
        else:
            self.effects.sync.needed = needed
        return began

    return [(Intake, "_new_era", new_era)]


def _lapsed_write_forgotten() -> list[Patch]:
    """30.7b: a store write skipped while the local lease lapsed asks for no reconcile."""
    original = StoreSync._write

    async def write(self: StoreSync, call: Any, uids: list[str], what: str) -> None:
        if self.leadership.epoch is not None and not self.leadership.leading:
            return
        await original(self, call, uids, what)

    return [(StoreSync, "_write", write)]


def _landed_records_freed() -> list[Patch]:
    """Sim seed 33: a new leader's bound records of pods its pending watch still shows are freed
    by the election's reconcile (no ``reserve_landed``)."""

    async def reserve_landed(self: StoreSync, epoch: int, records: Any) -> None:
        return None

    return [(StoreSync, "reserve_landed", reserve_landed)]


def _uncharge_clears_shared_bits() -> list[Patch]:
    """Sim seed 2: uncharging a pod clears its GPUs' bits even where another pod holds them."""
    original = NodeState.charge

    def charge(self: NodeState, holding: Holding, resource_index: Any, sign: int) -> None:
        original(self, holding, resource_index, sign)
        if sign < 0:
            self.whole &= ~holding.whole

    return [(NodeState, "charge", charge)]


def _shares_not_read_back() -> list[Patch]:
    """A bound pod's shares of cards are not read back from its assignment annotation (the
    snapshot charges a bound share pod with nothing): the cards look free to the next share
    and to whole-GPU pods. Not a bug that was fixed: it shows ``invariants.shared_gpus`` finds
    a card over-committed, and one held whole and shared, once such a placement reaches the
    apiserver (the store's refusal does not stop it: the reconcile it asks for frees the
    records the snapshot no longer holds)."""
    original = bound_module.annotated_holding

    def annotated_holding(pod: PodInput, *args: Any) -> Holding | None:
        kept = {k: v for k, v in pod.annotations.items() if k != ASSIGNMENT_ANNOTATION}
        return original(msgspec.structs.replace(pod, annotations=kept), *args)

    return [(cluster_module, "annotated_holding", annotated_holding)]


def _unit_blocked_by_itself() -> list[Patch]:
    """E2e SIGKILL gang swap: the store checks a unit's claims against the unit's own pods'
    earlier records (a gang decided afresh cannot swap its members' GPUs; the next pod takes
    the ones it let go)."""

    def foreign_owner(self: MemoryStore, key: tuple[str, int], mine: set[str]) -> str | None:
        return self._owner_uid(key)

    return [(MemoryStore, "_foreign_owner", foreign_owner)]


def _unbound_news_counted() -> list[Patch]:
    """Sim seed 3260: the pending watch's news of a pod the book holds bound raises the entry's
    version: after an etcd restore undid the Binding, a bound LIST older than that news and
    lacking the pod took it for one bound after the LIST, and the pod stayed bound for good."""
    return [(podbook_module, "UNBOUND_NEWS", frozenset())]


def _rereading_member_decided() -> list[Patch]:
    """Soak seed 35133: a gang is decided while a member is being read back (its Binding
    refused after the pending watch said it left): the plan places the ghost, and the others
    are bound below their minimum."""

    def rereading(self: Cycle, unit: Unit) -> str | None:
        return None

    return [(Cycle, "_rereading", rereading)]


def _earlier_decision_told() -> list[Patch]:
    """Soak seed 51148: a Binding's outcome is told to its pod's entry though the pod was
    decided again meanwhile (an etcd restore made it pending while the binder retried)."""

    def decided_since(self: PodBook, key: str, uid: str, decision: int) -> bool:
        return False

    return [(PodBook, "decided_since", decided_since)]


def _reserving_left_held() -> list[Patch]:
    """Soak seed 50161: a pod that left the pending watch while its reservation was written is
    held for the Binding's 404, and a failed reservation makes it pending again for good."""
    return [(TABLE, (S.RESERVING, E.PENDING_LEFT), (S.RESERVING, ()))]


def _release_over_reconcile() -> list[Patch]:
    """Sim seed 1019: a reconcile begins while a release is in flight on a slow store, and the
    release lands after it, removing the record the reconcile wrote of a pod an etcd restore
    brought back bound."""

    async def reconcile(self: StoreSync, epoch: int, elected: bool = False) -> None:
        self.needed = False
        self.last = self.clock()
        self._reconciled.clear()
        try:
            await self._write_truth(epoch, elected)
        except BaseException:
            self.needed = True
            raise
        finally:
            self._reconciled.set()

    return [(StoreSync, "reconcile", reconcile)]


def _reserved_under_release() -> list[Patch]:
    """Sim seed 1019 (unshrunk): a pod decided again while the release of its last
    reservation is in flight is reserved at once, and the release lands after it."""

    def releasing(self: StoreSync, uids: list[str]) -> bool:
        return False

    return [(StoreSync, "releasing", releasing)]


def _gang_member_refused_freed() -> list[Patch]:
    """Sim seed 629: a gang member refused while its gang is below its minimum with members
    bound lets its GPUs go (as any refused pod does)."""
    return [(TABLE, (S.BINDING, E.GANG_BIND_FAILED), TABLE[(S.BINDING, E.BIND_FAILED)])]


def _plain_priority_sort() -> list[Patch]:
    """Sim seed 549: the queue is plain PrioritySort; a gang being completed (members bound,
    fewer than its minimum) waits behind older pods of its priority."""

    def tier(self: SchedulingQueue, key: str) -> int:
        return 1

    return [(SchedulingQueue, "_tier", tier)]


def _tier_below_priority() -> list[Patch]:
    """Sim seeds 909, 3118: a gang being completed goes before the other pods of its priority
    only; a pod of a higher priority goes first and takes its GPU without preempting."""

    def push(self: SchedulingQueue, key: str) -> None:
        self._seq += 1
        self._in_active[key] = self._seq
        priority, created = self._rank.get(key, (0, ""))
        tier = self._tier(key)
        if tier == 0:
            self._first.add(key)
        else:
            self._first.discard(key)
        heapq.heappush(self._active, (priority, tier, created, self._seq, key))

    return [(SchedulingQueue, "_push", push)]


def _stale_bind_ok_trusted() -> list[Patch]:
    """Sim seed 726: a 201 for a Binding sent before an etcd restore began a new era is taken
    as any 201 (assumed, not re-read)."""
    return [(TABLE, (S.BINDING, E.BIND_OK_STALE), TABLE[(S.BINDING, E.BIND_OK)])]


def _bound_list_not_counted() -> list[Patch]:
    """Sim seed 870: a 201 for a Binding during which a bound LIST began (no new era: the
    restore's LIST at the book's newest version) is taken as any 201 (assumed, not re-read)."""
    fixed = Intake.bound_list_begin

    def bound_list_begin(self: Intake) -> None:
        lists = self.book.bound_lists
        fixed(self)
        self.book.bound_lists = lists

    return [(Intake, "bound_list_begin", bound_list_begin)]


def _stale_decision_resent() -> list[Patch]:
    """Soak seed 3090: a Binding is sent, and re-sent, whatever view its pod was decided in
    (after an etcd restore too)."""
    fixed = Binder.bind_all

    async def bind_all(self: Binder, pods: Any, uncertain: bool = False, *, era: Era) -> Any:
        return await fixed(self, pods, uncertain, era=Era(lambda: True, era.watching))

    return [(Binder, "bind_all", bind_all)]


def _sent_while_listing() -> list[Patch]:
    """Soak seed 5205: a Binding is sent while both pod watches re-list (an apiserver restart,
    an etcd restore's), before a LIST can say whether the restore began a new era."""
    fixed = Binder.bind_all

    async def bind_all(self: Binder, pods: Any, uncertain: bool = False, *, era: Era) -> Any:
        watching = asyncio.Event()
        watching.set()
        return await fixed(self, pods, uncertain, era=Era(era.fresh, watching))

    return [(Binder, "bind_all", bind_all)]


def _bound_members_minimum_kept() -> list[Patch]:
    """Soak seed 5963: a gang's bound members keep the minimum they were charged with after
    the PodGroup that holds it was lowered (a job scaled down)."""
    return [(planning_module, "group_minimum", lambda gang, pod_groups: 0)]


def _no_record_chained() -> list[Patch]:
    """Soak seed 3127: an election reads the witness apart from its compare-and-swap, and no
    record counts as chained to the store's history: two sides of a partition, electing at
    once after the ConfigMap was deleted, both skip the wait."""

    async def elected(
        self: Witness, holder: str, epoch: int, history: History
    ) -> tuple[bool, bool]:
        self.recorded = ""
        seen = await self.read()
        new = not history.kept and epoch == 1 and seen == NEVER
        chained = history.kept and seen in (NEVER, history.previous)
        await self._record(f"{holder}|{epoch}")
        return new, chained

    # The timeline's two elections chain to r1's, made during r1's first wait: since sim seed
    # 836 such a chain waits anyway, so the mutant puts it back too (no shorter timeline
    # found yet in which a settled leader's record is missing on both sides of a partition).
    return [(Witness, "elected", elected), *_chained_to_unsettled()]


def _chained_to_unsettled() -> list[Patch]:
    """Sim seed 836: an election chains to the last one recorded whether or not its leader's
    wait for a forgotten leader's Bindings was over (every election reads as settled)."""
    fixed = MemoryStore.kept_history

    async def kept_history(self: MemoryStore, holder: str, epoch: int) -> History:
        return msgspec.structs.replace(await fixed(self, holder, epoch), settled=True)

    return [(MemoryStore, "kept_history", kept_history)]


def _victim_back_awaited() -> list[Patch]:
    """Soak seed 1326: a nomination waits on a victim an etcd restore brought back running."""
    return [(Preemptions, "_undone", lambda self, held: None)]


def _second_restore_awaited() -> list[Patch]:
    """Soak seed 56736: only a later era tells a nomination that a restore brought its victims
    back running; a second restore from the same backup begins none."""

    def _undone(self: Preemptions, held: Held) -> str | None:
        if held.era == self.book.era:
            return None
        for key, uid in held.victims.items():
            record = self.state.index.records.get(key)
            if record is not None and record.uid == uid and not record.terminating:
                return key
        return None

    return [(Preemptions, "_undone", _undone)]


def _gone_before_restore_trusted() -> list[Patch]:
    """Soak seed 1326: a Binding's "gone" told after an etcd restore began a new era takes the
    pod out of the book, though the new era's LIST showed it pending."""

    def _outcome(self: Effects, o: Outcome, refused: set[str], stale: bool) -> None:
        pod = o.pod if o.event is E.BIND_OK else o.current or o.pod
        event = o.event
        if event is E.BIND_FAILED and self._gang_committed(o, refused):
            event = E.GANG_BIND_FAILED
        elif event is E.BIND_OK and stale:
            event = E.BIND_OK_STALE
        self.dispatch(o.pod.key, o.pod.uid, event, Ctx(pod=pod, placement=o.placement))

    return [(Effects, "_outcome", _outcome)]


def _nominee_gone_unmoved() -> list[Patch]:
    """Sim seed 4450: a nomination that ends moves no waiting pod: a preemptor deleted while
    pending leaves the pods parked beside the GPUs it held."""

    def _end_nomination(self: Effects, t: Transition, ctx: Ctx) -> None:
        held = self.book.unnominate(t.entry) if t.entry is not None else None
        if held is not None:
            self.state.unnominate(t.key)
            self.preemptions.drop(held.nominated.uid)

    return [(Effects, "_end_nomination", _end_nomination)]


def _own_binding_unrecorded() -> list[Patch]:
    """Sim seed 3348: an election does not reserve again this replica's own Bindings in flight
    whose reservations the store lost; their marks find nothing, the pods are bound unrecorded.
    Only an election that does not wait reaches it (one that waits reconciles again before
    its first decision), and on a flushed store that is one chained to a leader elected there
    since, whose own wait was cut short: sim seed 836's fix makes that one wait too, so the
    mutant puts that chain back as well (``_chained_to_unsettled``)."""

    async def reserve_own(self: StoreSync, epoch: int, records: dict[str, Record]) -> None:
        return None

    return [(StoreSync, "reserve_own", reserve_own), *_chained_to_unsettled()]


def _finished_read_back_bound() -> list[Patch]:
    """Soak seed 1992: a pod read back finished after its Binding's 409 or a lost answer is
    taken as bound (ours, or elsewhere) and held as assumed or bound for good: the bound watch
    never shows a finished pod again."""

    def settle(
        pod: PodInput, placement: Placement, current: PodInput | None, uncertain: bool = False
    ) -> tuple[Event, PodInput | None]:
        if current is None or current.uid != pod.uid:
            return E.BIND_GONE, None
        ours = assignment_annotations(placement)
        if current.node_name == placement.node and all(
            current.annotations.get(k) == v for k, v in ours.items()
        ):
            return E.BIND_OK, None
        if current.node_name:
            return E.BIND_ELSEWHERE, current
        return (E.BIND_UNKNOWN if uncertain else E.BIND_FAILED), None

    return [(binder_module, "settle", settle)]


MUTANTS: dict[str, Mutant] = {
    "12.1-relist-frees-in-flight-bind": Mutant(
        "a bound re-list older than our bind frees it",
        _relist_frees_assumed,
        timeline="12.1-relist-frees-in-flight-bind",
    ),
    "12.2-409-counted-as-failed": Mutant(
        "a 409 counts as a failed bind although the pod is bound",
        _conflict_is_failure,
        timeline="12.2-409-counted-as-failed",
    ),
    "12.3-binding-not-fenced": Mutant(
        "a Binding is sent with less lease left than its timeout",
        _unfenced_binding,
        needs=frozenset({"flush_store", "store_fault"}),
        timeline="12.3-binding-not-fenced",
    ),
    "12.3-no-wait-after-flush": Mutant(
        "after a FLUSHALL the new leader decides before the old one's Bindings ended",
        _no_wait_after_flush,
        needs=frozenset({"flush_store"}),
        timeline="12.3-no-wait-after-flush",
    ),
    "sim-flush-waits-one-lease": Mutant(
        "after a FLUSHALL with the witness kept, the new leader waits one lease only",
        _flush_waits_one_lease,
        needs=frozenset({"flush_store"}),
        timeline="sim-flush-waits-one-lease",
    ),
    "12.6-deleted-while-binding-held": Mutant(
        "a pod deleted while its Binding is in flight stays held",
        _deleted_while_binding_held,
        timeline="12.6-deleted-while-binding-held",
    ),
    "12.7-reloaded-deleted-held": Mutant(
        "a reloaded reservation of a pod deleted before its turn stays held",
        _reloaded_deleted_held,
        timeline="12.7-reloaded-deleted-held",
    ),
    "20.1-others-never-uncharged": Mutant(
        "pods of other schedulers are never uncharged",
        _others_never_uncharged,
        seed=1,
    ),
    "20.2-stale-news-trusted": Mutant(
        "news older than the book's (an old UID's LIST page) is taken in",
        _stale_news_trusted,
        seed=138,
    ),
    "20.3-nothing-inherited": Mutant(
        "the new leader frees the old leader's last binds",
        _nothing_inherited,
        timeline="20.3-nothing-inherited",
    ),
    "20.4-one-read-settles": Mutant(
        "an uncertain bind is settled by one read-back",
        _one_read_settles,
        needs=frozenset({"slow"}),
        without=frozenset({"kill", "handover"}),
        timeline="20.4-one-read-settles",
    ),
    "30.1a-claim-write-fail-forgets": Mutant(
        "a re-send's failed claim write forgets the GPUs of a Binding that may land",
        _claim_fail_forgets,
        without=GANGS | CHURN | LEADERS | REFUSALS | {"relist"},
        needs=frozenset({"claims", "slow"}),
        timeline="30.1a-claim-write-fail-forgets",
    ),
    "30.1b-checked-bound-ignored": Mutant(
        "a re-read finding the pod bound is ignored until the bound watch says so",
        _checked_bound_ignored,
        needs=frozenset({"claims", "slow"}),
        without=GANGS | CHURN | LEADERS | REFUSALS | {"relist"},
        timeline="30.1b-checked-bound-ignored",
    ),
    "30.1-checked-pending-forgets": Mutant(
        "a re-read finding a binding pod pending forgets the Binding in flight",
        _checked_pending_forgets,
        without=GANGS | CHURN | LEADERS | {"claims", "relist"},
        needs=frozenset({"slow"}),
        timeline="30.1-checked-pending-forgets",
    ),
    "30.1-no-unreserve": Mutant(
        "a refused Binding leaves the pod in its claims' reservedFor",
        _no_unreserve,
        without=GANGS | CHURN | LEADERS | {"relist", "lag", "stall", "404", "409"},
        needs=frozenset({"claims"}),
        timeline="30.1-no-unreserve",
    ),
    "30.2-reload-decided-at-once": Mutant(
        "a handed-over reservation whose Binding may land is decided afresh",
        _reload_decided_at_once,
        without=GANGS | CHURN | REFUSALS | {"claims", "flush_store", "relist"},
        needs=frozenset({"slow"}),
        timeline="30.2-reload-decided-at-once",
    ),
    "sim691-deposed-binding-held": Mutant(
        "a deposed leader holds its unanswered Binding's GPUs for good",
        _deposed_binding_held,
        needs=frozenset({"failover"}),
        timeline="sim691-deposed-binding-held",
    ),
    "sim380-deposed-unsettled-held": Mutant(
        "a deposed leader holds a previous leader's reservations for good",
        _deposed_unsettled_held,
        timeline="sim380-deposed-unsettled-held",
    ),
    "sim3935-deposed-inherited-held": Mutant(
        "a deposed leader holds a record it inherited, read pending after its deposition",
        _deposed_inherited_held,
        timeline="sim3935-deposed-inherited-held",
    ),
    "30.3-inheritance-by-name": Mutant(
        "the election frees a record whose name the book holds under an older UID",
        _questioned_not_read,
        timeline="30.3-inheritance-by-name",
        without=GANGS
        | REFUSALS
        | {"create_other", "finish_pod", "claims", "kill", "flush_store", "stall", "reads_fail"},
    ),
    "30.4-witness-off-after-403": Mutant(
        "one 403 turns the epoch witness off, and an off witness fences nothing",
        _witness_off_after_403,
        needs=frozenset({"failover"}),
        without=GANGS | CHURN | REFUSALS | {"claims", "flush_store", "delete_witness", "relist"},
        timeline="30.4-witness-off-after-403",
    ),
    "30.5-terminating-members-count": Mutant(
        "a restarted gang counts its terminating members as bound",
        _terminating_members_count,
        timeline="30.5-terminating-members-count",
        without=CHURN | LEADERS | REFUSALS | {"claims", "stall", "lag", "relist"},
        needs=frozenset({"restart_gang"}),
    ),
    "sim5-bound-view-trusted": Mutant(
        "a restarted gang counted from a bound view older than its new members",
        _bound_view_trusted,
        timeline="sim5-bound-view-behind",
        without=CHURN | LEADERS | REFUSALS | {"claims", "stall", "lag"},
        needs=frozenset({"restart_gang", "relist"}),
    ),
    "30.6-versions-trusted-forever": Mutant(
        "after an etcd restore, the old era's resourceVersions order everything",
        _versions_trusted_forever,
        seed=2,
        without=GANGS | LEADERS | REFUSALS | {"claims", "lag", "stall"},
        needs=frozenset({"etcd_restore"}),
    ),
    "30.7b-lapsed-write-forgotten": Mutant(
        "a store write skipped in a lapse of the lease is never written",
        _lapsed_write_forgotten,
        needs=frozenset({"store_fault"}),
        without=GANGS | CHURN | REFUSALS | {"claims"},
        timeline="30.7b-lapsed-write-forgotten",
    ),
    "30.7c-inherited-pending-reloaded": Mutant(
        "an inherited record read pending is decided afresh, its record left bound",
        _inherited_pending_reloaded,
        without=GANGS | CHURN | REFUSALS | {"claims", "flush_store"},
        needs=frozenset({"slow"}),
        timeline="30.7c-inherited-pending-reloaded",
    ),
    "sim33-landed-records-freed": Mutant(
        "the election's reconcile frees a landed record the pending watch still shows",
        _landed_records_freed,
        without=GANGS | CHURN | REFUSALS | {"claims", "flush_store"},
        timeline="sim33-landed-records-freed",
    ),
    "sim2-uncharge-clears-shared-bits": Mutant(
        "releasing a pod clears GPUs another pod still holds",
        _uncharge_clears_shared_bits,
        without=GANGS | LEADERS | REFUSALS | {"claims", "stall"},
        timeline="sim2-uncharge-clears-shared-bits",
    ),
    "sim629-gang-member-refused-freed": Mutant(
        "a gang member refused beside a bound sibling lets the gang's GPUs go",
        _gang_member_refused_freed,
        timeline="sim629-gang-member-refused",
    ),
    "sim549-plain-priority-sort": Mutant(
        "a gang being completed waits behind older pods of its priority",
        _plain_priority_sort,
        timeline="sim549-gang-hold-lost-in-failover",
    ),
    "sim909-tier-below-priority": Mutant(
        "a gang being completed waits behind pods of a higher priority",
        _tier_below_priority,
        timeline="sim909-gang-hold-taken-by-higher-priority",
    ),
    "sim726-stale-bind-ok-trusted": Mutant(
        "a Binding answered after an etcd restore began a new era is assumed, not re-read",
        _stale_bind_ok_trusted,
        timeline="sim726-restore-after-binding-answered-late",
    ),
    "sim1132-list-of-the-era-begins-another": Mutant(
        "a LIST asked for before the other watch began the era begins another era",
        _list_of_the_era_begins_another,
        timeline="sim1132-list-of-the-era-begun-meanwhile",
    ),
    "sim870-bound-list-not-counted": Mutant(
        "a Binding answered after a bound LIST that lacked it (no new era) is assumed, not re-read",
        _bound_list_not_counted,
        timeline="sim870-restore-undoes-gang-bind",
    ),
    "sim3127-no-record-chained": Mutant(
        "an election finding no witness record counts as chained to its store's history",
        _no_record_chained,
        timeline="sim3127-partition-electing-without-record",
    ),
    "sim3090-stale-decision-resent": Mutant(
        "a Binding decided before an etcd restore is re-sent after it",
        _stale_decision_resent,
        timeline="sim3090-restore-under-a-stalled-binding",
    ),
    "sim5205-sent-while-listing": Mutant(
        "a Binding is sent while both pod watches re-list (an etcd restore broke them)",
        _sent_while_listing,
        timeline="sim5205-restore-before-the-binding",
    ),
    "sim5963-bound-members-minimum-kept": Mutant(
        "a gang's bound members keep their charged minimum after its PodGroup was lowered",
        _bound_members_minimum_kept,
        timeline="sim5963-pod-group-lowered-under-a-partial-gang",
    ),
    "sim2977-list-after-era-list-judged-by-version": Mutant(
        "a LIST asked for after the one that began the era ends no wait if its version is not back",
        _list_after_era_list_judged_by_version,
        timeline="sim2977-list-asked-after-era-list",
    ),
    "sim4450-nominee-gone-unmoved": Mutant(
        "a preemptor deleted while nominated moves none of the pods waiting beside its GPUs",
        _nominee_gone_unmoved,
        timeline="sim4450-nominee-gone",
    ),
    "sim3873-era-waits-for-listed-watch": Mutant(
        "a LIST that begins an era waits for the other watch though it listed after it was asked",
        _era_waits_for_listed_watch,
        timeline="sim3873-era-begun-after-other-listed",
    ),
    "sim2557-list-version-untold": Mutant(
        "a LIST that begins no era tells the book nothing of its version",
        _list_version_untold,
        timeline="sim2557-relist-version-untold",
    ),
    "sim1326-own-copy-told": Mutant(
        "a Binding's answer tells the book the version of its own copy of the pod",
        _own_copy_told,
        timeline="sim1326-binding-failed-in-new-era",
    ),
    "shown-ignored": Mutant(
        "the reason a pending pod shows is not compared with its last decision's",
        _shown_ignored,
        needs=frozenset({"etcd_restore"}),
        seed=47,
    ),
    "sim25470-restored-binding-shown-skipped": Mutant(
        "an assumed pod read back pending is not told the reason it shows",
        _restored_binding_shown_skipped,
        timeline="sim25470-restored-binding-shows-no-reason",
    ),
    "sim30598-reserving-news-not-shown": Mutant(
        "news of a pod being reserved is not told the reason it shows",
        _reserving_news_not_shown,
        timeline="sim30598-restore-while-reserving",
    ),
    "sim11505-surplus-beside-bindings": Mutant(
        "a gang's surplus is placed beside members whose Bindings are in flight",
        _surplus_beside_bindings,
        timeline="sim11505-surplus-beside-bindings-in-flight",
    ),
    "sim1541-attempt-moved-aside": Mutant(
        "a pod whose attempt missed a cluster event waits for the next one, or 5 minutes",
        _attempt_moved_aside,
        timeline="sim1541-gpus-freed-during-attempt",
    ),
    "sim3163-reloaded-nomination-unset": Mutant(
        "a nomination reloaded at election is not set on its preemptor",
        _reloaded_nomination_unset,
        timeline="sim3163-reloaded-nomination-unset",
    ),
    "sim603-store-asked-at-era-begin": Mutant(
        "the store's reconcile after an etcd restore is asked for when the new era begins",
        _store_asked_at_era_begin,
        timeline="sim603-store-between-eras",
    ),
    "sim3348-own-binding-unrecorded": Mutant(
        "a leader re-elected on a flushed store does not reserve its in-flight Bindings again",
        _own_binding_unrecorded,
        timeline="sim3348-own-binding-after-flush",
    ),
    "sim836-chained-to-unsettled": Mutant(
        "an election chains to one whose leader left during its wait, and skips the wait",
        _chained_to_unsettled,
        needs=frozenset({"flush_store"}),
        timeline="sim836-chained-to-a-leader-in-its-wait",
    ),
    "sim1326-victim-back-awaited": Mutant(
        "a nomination waits for a victim an etcd restore brought back running",
        _victim_back_awaited,
        timeline="sim1326-victim-back-after-restore",
    ),
    "sim1326-gone-before-restore-trusted": Mutant(
        'a Binding\'s "gone" told after an etcd restore began a new era drops the pod',
        _gone_before_restore_trusted,
        timeline="sim1326-gone-before-restore",
    ),
    "sim1992-finished-read-back-bound": Mutant(
        "a pod read back finished after its Binding's 409 is held as bound for good",
        _finished_read_back_bound,
        timeline="sim1992-finished-pod-read-back",
    ),
    "shares-not-read-back": Mutant(
        "a bound pod's shares of cards are not read back from its annotation",
        _shares_not_read_back,
        timeline="shares-over-committed",
    ),
    "e2e-unit-blocked-by-itself": Mutant(
        "a gang re-decided after a failover is refused its own members' GPUs",
        _unit_blocked_by_itself,
        timeline="e2e-unit-blocked-by-itself",
    ),
    "sim3260-unbound-news-counted": Mutant(
        "the pending watch's news of a pod held bound counts as news newer than a bound LIST",
        _unbound_news_counted,
        timeline="sim3260-restore-unbinds-under-pending-news",
    ),
    "sim35133-rereading-member-decided": Mutant(
        "a gang is decided while a member that may be gone is being read back",
        _rereading_member_decided,
        timeline="sim35133-gang-member-gone-while-refused",
    ),
    "sim51148-earlier-decision-told": Mutant(
        "a Binding's outcome is told to a pod decided again while it was retried",
        _earlier_decision_told,
        timeline="sim51148-outcome-of-an-earlier-decision",
    ),
    "sim50161-reserving-left-held": Mutant(
        "a pod that left while its reservation was written is pending again if it fails",
        _reserving_left_held,
        timeline="sim50161-reserving-pod-left",
    ),
    "sim1019-release-over-reconcile": Mutant(
        "a release in flight on a slow store lands after a reconcile and undoes it",
        _release_over_reconcile,
        timeline="sim1019-release-over-reconcile",
    ),
    "sim1019-reserved-under-release": Mutant(
        "a pod decided again is reserved while its last reservation's release is in flight",
        _reserved_under_release,
        timeline="sim1019-reserved-under-release",
    ),
    "sim56736-second-restore-awaited": Mutant(
        "a nomination waits for victims a second restore from one backup brought back running",
        _second_restore_awaited,
        timeline="sim56736-restored-twice-from-one-backup",
    ),
}


@contextlib.contextmanager
def applied(name: str) -> Iterator[None]:
    """The mutant ``name`` in place for the block, and the fixed code back after it."""
    patches = MUTANTS[name].patches()
    saved = [(owner, key, _get(owner, key)) for owner, key, _ in patches]
    for owner, key, value in patches:
        _set(owner, key, value)
    try:
        yield
    finally:
        for owner, key, value in reversed(saved):
            _set(owner, key, value)


def _get(owner: Any, key: Any) -> Any:
    return owner[key] if isinstance(owner, dict) else getattr(owner, key)


def _set(owner: Any, key: Any, value: Any) -> None:
    if isinstance(owner, dict):
        owner[key] = value
    else:
        setattr(owner, key, value)
