"""The store follows the snapshot: claims from holdings, the writes after binds, and reconcile.

The reconcile makes the store equal to the apiserver's truth: every holding of a pod the pod book
has as bound (ASSUMED or BOUND, and pods bound by others) is a bound claim; the reservations kept
are exactly those the book holds as reserved (UNSETTLED, RELOADED, RESERVING, BINDING), and right
after an election also those of every pending pod (a previous leader may have been binding them).
Anything else in the store is freed, whichever epoch wrote it: a reservation that a failed release
left behind does not outlive the next reconcile. After an election the reservations a previous
leader left for pods still pending are loaded into the snapshot (the book's RELOAD event).

A graceful handover: the previous leader released its lease right after its last Bindings completed,
so a pod it bound may be gone from this replica's pending watch and not yet in its bound watch. The
election's reconcile must not free such a pod's record: every store record of a pod the book does
not know (no entry under its name, nothing held in the snapshot) is inherited (INHERIT: held in the
snapshot, kept in the store as bound) and its pod re-read; the read or a watch then says where it is
(bound: its truth is charged; pending: the previous leader's reservation, a reservation in the store
again (``reserve_again``) and held where it is while that leader's Binding may still land; gone:
freed). Freeing needs proof that the pod left; holding a few GPUs until a read answers costs only
those GPUs for that long. The same handover's record of a pod this replica's pending watch still
shows (its Binding landed, the watch has not said so yet) is bound in the store: it becomes a
reservation again before the reconcile (``reserve_landed``) and is reloaded where it is.
And this replica's own Bindings still in flight from an earlier term whose reservations the
store lost (a FLUSHALL, a failover that lost writes) are reserved again before the reconcile
(``reserve_own``): their marks after the 201 would otherwise find nothing to mark.

Records are a pod's by UID, not by name: a lagging standby may hold another UID under a record's
name (a same-name recreation its watches have not shown yet, whose new pod the previous leader
bound). Such names (``questioned``) are read from the apiserver before the election's reconcile,
and what the read found is told to the book as the watches would tell it (intake.py's ``read``):
the book then holds the pod of the record's UID, or the read proved that UID gone.

The marks after binds and the releases of pods that left are queued and sent by one flush at a
time, so a backlog's binds or a burst of deletes are a few store calls rather than one per pod
(past the Redis client's pool of 100 connections those failed). A flush with only marks to send
first gathers those of the Bindings answered within run.tuning.storeMarkSeconds (a release or a
full batch cuts it short): a backlog's Bindings are answered one by one, and a quick store took
each flush's one mark in its own call. A release whose pod has been
reserved again meanwhile is not sent. Neither is sent while a reconcile is under way (it writes
the store from the book as it read it; a mark or release landing inside it would be undone).

Every failed store write asks for a reconcile, which the loop runs at most every
``reconcile_min_s`` (run.tuning.storeReconcileSeconds) and tries again while it fails; so does
every write skipped while the local lease had lapsed (the same replica may lead on once a late
renewal answer comes, with no election reconcile to write what it skipped).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from scheduler.core.model.decisions import Share
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.holdings import Holding, bits
from scheduler.state.base import Claim, Record, ShareClaim, Store, StoreError

from .inventories import NodeInventories
from .leader import Leadership
from .podbook import RESERVED_STAGES, PodBook, Stage
from .tasks import Tasks

log = structlog.get_logger("scheduler")

_RELEASABLE = frozenset({Stage.GONE, Stage.PENDING})


class StoreSync:
    def __init__(
        self,
        state: ClusterState,
        book: PodBook,
        store: Store,
        leadership: Leadership,
        clock: Callable[[], float],
        tasks: Tasks,
        may_write: Callable[[], bool],
        *,
        reconcile_min_s: float,
        write_batch: int,
        mark_delay_s: float,
        inventory_flush_s: float,
    ) -> None:
        self.state = state
        self.book = book
        self.store = store
        self.leadership = leadership
        self.clock = clock
        # After a reservation conflict the store is reconciled with the apiserver, at most
        # every ``reconcile_min_s``; writes queued while one is under way go together, at most
        # ``write_batch`` UIDs per store call (run.tuning).
        self.reconcile_min_s = reconcile_min_s
        self.write_batch = write_batch
        # A flush of marks alone first gathers the marks of the Bindings answered within
        # ``mark_delay_s`` (run.tuning.storeMarkSeconds), cut short by a release or a full
        # batch: a backlog's Bindings are answered one at a time, so with a quick store each
        # flush carried one mark, a store call (a Lua script on Redis) per pod bound.
        self.mark_delay_s = mark_delay_s
        self._hurry = asyncio.Event()  # set: the flush under way sends without gathering
        # The nodes' inventories in the store follow the snapshot's; a failed write of them
        # asks for a reconcile, which writes them all.
        self.inventories = NodeInventories(
            store,
            leadership,
            lambda: {name: node.inventory for name, node in state.nodes.items()},
            may_write,
            tasks.spawn,
            self.request,
            inventory_flush_s,
        )
        # Set when the store disagreed with the snapshot; the loop then reconciles (rate-limited).
        self.needed = False
        self.last = 0.0
        # Writes queued for the one flush under way: marks after binds, releases of pods that
        # left (mark_bound_soon, release_soon).
        self._marks: list[str] = []
        self._releases: dict[str, str] = {}  # uid -> pod key
        self._sending: frozenset[str] = frozenset()  # the UIDs of the release in flight
        self._flushing = False
        # Set while no reconcile is under way (``flush`` waits for it before a release).
        self._reconciled = asyncio.Event()
        self._reconciled.set()
        # Set while no release is queued or in flight (``released`` waits for it).
        self._idle = asyncio.Event()
        self._idle.set()
        # Set while no mark or release is in flight (``reconcile`` waits for it): sent before a
        # reconcile and landing after it on a slow store, a release removed the record the
        # reconcile had just written of a pod an etcd restore brought back bound (sim seed
        # 1019). With ``_reconciled``, the two never overlap.
        self._unwritten = asyncio.Event()
        self._unwritten.set()

    def request(self) -> None:
        self.needed = True

    def sizes(self) -> dict[str, int]:
        return {"marks": len(self._marks), "releases": len(self._releases)}

    # ---- writes ------------------------------------------------------------------------------

    def mark_bound_soon(self, uid: str) -> bool:
        """Queue the marking of ``uid``'s reservation as bound (its Binding succeeded). True when
        the caller must run ``flush``."""
        self._marks.append(uid)
        if len(self._marks) >= self.write_batch:
            self._hurry.set()
        return self._queued()

    def release_soon(self, key: str, uid: str) -> bool:
        """Queue the release of pod ``key``'s reservation or record (UID ``uid``). True when the
        caller must run ``flush``."""
        self._releases[uid] = key
        self._hurry.set()  # a release is not held back: a preemption may wait for it
        return self._queued()

    def _queued(self) -> bool:
        self._idle.clear()
        if self._flushing:
            return False
        self._flushing = True
        return True

    async def flush(self) -> None:
        """Send what was queued, and what is queued meanwhile: marks, then releases, at most
        ``write_batch`` UIDs per store call. One flush at a time, so a backlog's binds or a burst of
        deletes are a few store calls, not a call (and a Redis connection: the client's pool has
        100, and past it a call fails) per pod."""
        try:
            while self._marks or self._releases:
                await self._gather_marks()
                # Sent once no reconcile is under way: it judges the store against the book as
                # it read it when it began, and on Redis it is several calls, so a write landing
                # inside it is undone. A release: its truth may still hold the pod and writes the
                # record back (an election's reconcile, an inherited record whose pod's re-read
                # found it finished; sim on Redis). A mark: the pod was named pending then, and
                # the free step frees a pending pod's record once bound (sim timeline
                # e2e-unit-blocked-by-itself on Redis). After it, the mark turns the kept
                # reservation bound.
                await self._reconciled.wait()
                marks = self._marks[: self.write_batch]
                del self._marks[: self.write_batch]
                if marks:
                    await self._write(self.store.mark_bound, marks, "mark bound")
                batch = list(self._releases.items())[: self.write_batch]
                for uid, _ in batch:
                    del self._releases[uid]
                # A pod reserved again meanwhile (its bind failed; decided afresh) keeps its new
                # reservation; only pods gone or pending again lose theirs, as the book says
                # once the wait is over.
                await self._reconciled.wait()
                uids = [u for u, k in batch if self.book.stage(k, u) in _RELEASABLE]
                if uids:
                    self._sending = frozenset(uids)
                    try:
                        await self.release(uids)
                    finally:
                        self._sending = frozenset()
        finally:
            self._flushing = False
            if not self._marks and not self._releases:
                self._idle.set()

    async def _gather_marks(self) -> None:
        """Wait up to ``mark_delay_s`` for more marks while only marks are queued, fewer than
        a batch; a release or a full batch ends the wait."""
        if self._releases or len(self._marks) >= self.write_batch or self.mark_delay_s <= 0:
            return
        self._hurry.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.mark_delay_s):
                await self._hurry.wait()

    def releasing(self, uids: list[str]) -> bool:
        """Whether a release of one of ``uids`` is queued or in flight: a reservation of the
        pod sent meanwhile may land before it, and be removed by it (``Cycle._reserve_each``)."""
        return any(u in self._releases or u in self._sending for u in uids)

    async def released(self) -> None:
        """Until every release queued so far has been sent (or failed: then a reconcile
        follows)."""
        await self._idle.wait()

    async def release(self, uids: list[str]) -> None:
        await self._write(self.store.release, uids, "release")

    async def _write(
        self, call: Callable[[str, int, list[str]], Awaitable[None]], uids: list[str], what: str
    ) -> None:
        """A failure asks for a reconcile (it would otherwise keep GPUs blocked that nobody
        uses, or leave bound pods marked as reserved).

        Not leading, nothing is written: the next leader's reconcile writes the truth. While
        this replica still holds its epoch but its local lease has lapsed (a renewal's answer
        late), the write is skipped too, and this same replica may lead on once the answer
        comes, with no election and so no election reconcile: the skipped write asks for a
        reconcile, which the loop runs once it leads again (a reconcile writes what every
        skipped mark or release would have, from the book as it is then)."""
        epoch = self.leadership.epoch
        if epoch is None:
            return
        if not self.leadership.leading:
            self.needed = True
            log.info(f"store {what} skipped: the lease lapsed", uids=uids[:20], epoch=epoch)
            return
        self._unwritten.clear()  # one flush at a time: one write in flight at most
        try:
            await call(self.leadership.holder, epoch, uids)
        except StoreError as exc:
            self.needed = True
            log.warning(f"store {what} failed", uids=uids[:20], error=str(exc))
        finally:
            self._unwritten.set()

    async def reserve_again(self, holding: Holding) -> None:
        """The store's record of ``holding`` becomes a reservation again: an inherited record,
        which the election's reconcile kept as bound, of a pod read back pending (its previous
        leader's Binding may still land; the pod book's UNSETTLED). A reconcile keeps only
        reservations for pods not bound, and would free a bound record of a pending pod. A
        failure asks for a reconcile, as any failed write."""
        claim = self.claim_of(holding)
        epoch = self.leadership.epoch
        if claim is None or epoch is None or not self.leadership.leading:
            return
        try:
            (problem,) = await self.store.reserve_each(self.leadership.holder, epoch, [[claim]])
        except StoreError as exc:
            problem = str(exc)
        if problem is not None:
            self.needed = True
            log.warning(
                "store reservation of an inherited record failed", pod=claim.pod, error=problem
            )

    # ---- reconcile ---------------------------------------------------------------------------

    async def if_needed(self) -> None:
        """The loop's reconcile after the store disagreed with the snapshot (a reservation
        conflict, GPUs moved by the device plugin, a failed store write), at most every
        ``reconcile_min_s``. A failed one stays needed, so the loop tries again."""
        if not self.needed or self.clock() - self.last < self.reconcile_min_s:
            return
        epoch = self.leadership.epoch
        if epoch is None:
            return
        try:
            await self.reconcile(epoch)
        except StoreError as exc:
            log.warning("reconcile failed", error=str(exc))
        except Exception:
            log.exception("reconcile crashed")

    async def reconcile(self, epoch: int, elected: bool = False) -> None:
        """Make the store equal to the apiserver's truth (bound pods in the snapshot).

        Right after an election it also writes every node inventory; later (rate-limited)
        reconciles do only if an inventory write failed since (inventories.py). If it fails,
        a reconcile is still needed: the loop tries again."""
        self.needed = False
        self.last = self.clock()
        self._reconciled.clear()
        try:
            await self._unwritten.wait()  # a mark or release in flight lands first
            await self._write_truth(epoch, elected)
        except BaseException:
            self.needed = True
            raise
        finally:
            self._reconciled.set()

    async def _write_truth(self, epoch: int, elected: bool) -> None:
        reserved = {e.key for e in self.book.in_stages(RESERVED_STAGES)}
        truth = [
            c
            for c in (self.claim_of(h) for k, h in self.state.holdings.items() if k not in reserved)
            if c
        ]
        keep_stages = RESERVED_STAGES | {Stage.PENDING} if elected else RESERVED_STAGES
        keep = [e.uid for e in self.book.in_stages(keep_stages) if e.uid]
        async with self.inventories.reconciling(elected) as nodes:
            report = await self.store.reconcile(self.leadership.holder, epoch, truth, keep, nodes)
        log.info(
            "reconciled store",
            epoch=epoch,
            added=report.added,
            freed=report.freed,
            kept=report.kept,
            conflicts=list(report.conflicts),
        )

    def questioned(self, records: dict[str, Record]) -> list[str]:
        """The names the book knows under another UID than a record of ``records`` (a new
        leader's ``store.records()``) has, sorted. Either this replica's watches lag behind a
        same-name recreation (a StatefulSet's or a training job's worker restarted, ``kubectl
        replace``: the record is of the newer pod, which the previous leader bound), or the
        record was left by a release that failed (the book's pod is the newer). Only the
        apiserver can say which: the new leader reads these names before its reconcile, which
        would otherwise free the record of a pod that holds its GPUs."""
        return sorted(
            {
                r.claim.pod
                for r in records.values()
                if (entry := self.book.get(r.claim.pod)) is not None
                and entry.uid
                and entry.uid != r.claim.uid
            }
        )

    def unknown(self, records: dict[str, Record]) -> list[tuple[str, str, Holding]]:
        """A new leader's inheritance: the records (of ``store.records()``, read before its
        reconcile) of pods the book does not know, as (pod, UID, holding). Asked once the names
        ``questioned`` were read: a record of another UID than the book's under the same name
        is then of a pod the read proved gone, and the reconcile frees it."""
        return [
            (r.claim.pod, r.claim.uid, holding_of_claim(r.claim))
            for r in records.values()
            if self.book.get(r.claim.pod) is None and self.state.held(r.claim.pod) is None
        ]

    async def reserve_landed(self, epoch: int, records: dict[str, Record]) -> None:
        """A new leader's bound records (of ``store.records()``, read before its reconcile) of
        pods its book still has as pending, under the record's UID, become reservations again:
        the previous leader's last Bindings landed and were marked bound, and this replica's
        pending watch has not shown them yet (a graceful handover follows them within
        milliseconds). The election's reconcile keeps the reservations of pending pods and
        frees their bound records: it would give those GPUs away while their pods are bound.
        Held as any reservation a previous leader left for a pending pod (``reloadable``); the
        bound watch then charges the truth. A store error fails the election; a conflict asks
        for a reconcile, as any failed write."""
        pending = {e.uid for e in self.book.in_stages(frozenset({Stage.PENDING}))}
        claims = [
            r.claim for r in records.values() if r.state == "bound" and r.claim.uid in pending
        ]
        await self._reserve_again(epoch, claims, "a landed record")

    async def reserve_own(self, epoch: int, records: dict[str, Record]) -> None:
        """This replica's own Bindings still in flight from an earlier term (BINDING) whose
        reservation the store no longer holds (``records``, read before the election's
        reconcile) are reserved again, at the new epoch: a store that lost writes (FLUSHALL, a
        replica promoted over a master that had them) lost those reservations, the reconcile
        keeps only what exists, and the Binding's mark after its 201 then finds nothing to
        mark: the pod bound with no record (sim seed 3348) until some later reconcile. A
        conflict or error asks for a reconcile, as any failed write; the snapshot still holds
        the GPUs either way."""
        claims = [
            claim
            for e in self.book.in_stages(frozenset({Stage.BINDING}))
            if e.uid not in records
            and (holding := self.state.held(e.key)) is not None
            and holding.uid == e.uid
            and (claim := self.claim_of(holding)) is not None
        ]
        await self._reserve_again(epoch, claims, "an own Binding")

    async def _reserve_again(self, epoch: int, claims: list[Claim], what: str) -> None:
        """Reserve each claim on its own at the new epoch; a conflict or error asks for a
        reconcile, as any failed write (the snapshot holds the GPUs either way)."""
        if not claims:
            return
        problems = await self.store.reserve_each(
            self.leadership.holder, epoch, [[claim] for claim in claims]
        )
        for claim, problem in zip(claims, problems, strict=True):
            if problem is not None:
                self.needed = True
                log.warning(f"store reservation of {what} failed", pod=claim.pod, error=problem)

    def reloadable(self, records: dict[str, Record]) -> list[tuple[str, str, Holding]]:
        """A previous leader's decisions for pods still pending, as (pod, UID, holding): its
        reservations, and its bound records of pods whose Binding this replica's watches have
        not shown yet (``reserve_landed``). Their GPUs stay out of reach until those pods are
        decided again (their own new reservation replaces them) or seen bound."""
        pending = {e.uid: e for e in self.book.in_stages(frozenset({Stage.PENDING}))}
        return [
            (entry.key, entry.uid, holding_of_claim(r.claim))
            for r in records.values()
            if (entry := pending.get(r.claim.uid)) is not None
        ]

    def claim_of(self, holding: Holding) -> Claim | None:
        if not holding.uid:
            return None
        node = self.state.nodes.get(holding.node)
        shares = []
        for s in holding.shares:
            cap_mem, cap_sgpu = 0, 0
            if node is not None and node.inventory is not None:
                try:
                    cap_mem = node.inventory.device(s.index).memory_mib
                except KeyError:
                    cap_mem = 0
                cap_sgpu = node.inventory.sgpu_per_card
            shares.append(
                ShareClaim(s.index, s.core, s.memory_mib, s.sgpu, s.qos or "", cap_mem, cap_sgpu)
            )
        return Claim(
            uid=holding.uid,
            pod=holding.pod,
            node=holding.node,
            devices=tuple(bits(holding.whole)),
            shares=tuple(shares),
            gang=holding.gang or "",
            replicas=holding.replicas if holding.gang else 0,
            resources=holding.resources,
            claims=holding.claims,
        )


def holding_of_claim(claim: Claim) -> Holding:
    whole = 0
    for i in claim.devices:
        whole |= 1 << i
    shares = tuple(
        Share(s.index, "", s.core, s.memory_mib, s.sgpu, s.qos or None) for s in claim.shares
    )
    return Holding(
        claim.pod,
        claim.node,
        whole,
        shares,
        claim.gang or None,
        claim.replicas,
        claim.uid,
        claim.resources,
        claims=claim.claims,
    )
