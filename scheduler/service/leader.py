"""Leader election over the store's lease, with a fencing epoch.

One replica leads at a time. Standbys keep their watches warm and try to acquire the lease every
``retry_s``; the leader renews it every ``renew_s``. Two guards stop a leader that lost its lease:
- the store refuses every write that does not carry the current (holder, epoch) (see base.py), so a
  deposed leader cannot commit even if it has not noticed yet;
- locally, ``leading`` turns false as soon as the last successful renewal is older than the lease
  time, before the store is even asked, so the loop stops taking pods at once.

The epoch is handed to ``on_elected`` so the service can reconcile the store against the apiserver
before its first decision. That can take a while (100,000 bound pods are tens of store calls),
so the lease is renewed every ``renew_s`` while it runs, as afterwards. If it fails (Redis busy
or unreachable, say), the replica gives the lease up at once (``on_lost`` is called) and goes
back to trying to acquire it: whoever wins next, this replica or another, prepares afresh. A
replica never keeps a lease it cannot lead with, and never stops competing for it. Time comes
from the injected clock; sleeping from the injected sleep.

A leader whose write the store fences (``step_down``: a reservation or nomination refused
FENCED) does the same. Its term is over as far as that store is concerned, and the store it
talks to next may give the lease back: a flushed master replaced by a replica promoted from
before the FLUSHALL still holds this (holder, epoch), so its renewals would count again. Only
an election prepares a leader (reconcile, the wait for a leader the store may not know), so
the fenced leader does not wait for its renewals to fail, which they may never do: it gives the
lease up and competes for it again, and whoever wins next prepares afresh.

With ``superseded`` (the epoch witness in the apiserver, witness.py), a renewal Redis accepted
counts only if the witness, read after the renewal was sent, holds no newer leader's record: a
Redis that still takes this replica's renewals (an old master after a failover) cannot outvote
the apiserver's record of a newer leader. The replica then stops leading, as when Redis refuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from scheduler.state.base import Store, StoreError

log = structlog.get_logger("leader")


@dataclass(frozen=True)
class LeaseTiming:
    lease_s: float = 15.0
    renew_s: float = 5.0
    retry_s: float = 2.0


class Leadership:
    def __init__(
        self,
        store: Store,
        holder: str,
        timing: LeaseTiming,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        superseded: Callable[[str, int], Awaitable[bool]] | None = None,
    ) -> None:
        self.store = store
        self._superseded = superseded
        self.holder = holder
        self.timing = timing
        self._clock = clock
        self._sleep = sleep
        self.epoch: int | None = None
        self._renewed_at = 0.0
        self._stopping = False
        self._retired = False  # shutting down: a lease held is kept, none is asked for (``retire``)

    @property
    def leading(self) -> bool:
        return self.epoch is not None and self._clock() - self._renewed_at < self.timing.lease_s

    def remaining(self) -> float:
        """How long the local lease has left (0 when not leading)."""
        if self.epoch is None:
            return 0.0
        return max(0.0, self._renewed_at + self.timing.lease_s - self._clock())

    async def run(
        self,
        on_elected: Callable[[int], Awaitable[None]],
        on_lost: Callable[[], Awaitable[None]],
    ) -> None:
        ttl_ms = int(self.timing.lease_s * 1000)
        while not self._stopping:
            if self.epoch is None and self._retired:
                await self._sleep(self.timing.retry_s)
                continue
            if self.epoch is None:
                sent = self._clock()
                try:
                    epoch = await self.store.acquire(self.holder, ttl_ms)
                except StoreError as exc:
                    log.warning("lease acquire failed", error=str(exc))
                    epoch = None
                if epoch is not None:
                    self.epoch, self._renewed_at = epoch, sent
                    log.info("became leader", holder=self.holder, epoch=epoch)
                    try:
                        await self._renewing(on_elected(epoch), epoch, ttl_ms)
                    except Exception as exc:
                        log.warning(
                            "could not take up leadership: giving the lease up",
                            error=str(exc),
                            epoch=epoch,
                            exc_info=not isinstance(exc, StoreError),
                        )
                        await self._give_up(on_lost)
                        await self._sleep(self.timing.retry_s)
                    continue
                await self._sleep(self.timing.retry_s)
                continue
            await self._sleep(self.timing.renew_s)
            if self._stopping:
                break
            if self.epoch is None:  # stepped down meanwhile (step_down): compete again
                continue
            await self.renew(on_lost)

    async def renew(self, on_lost: Callable[[], Awaitable[None]]) -> None:
        """One renewal of the lease this replica leads with (``run`` calls it every
        ``renew_s``): it counts when Redis accepts it and the epoch witness still holds this
        leader's record; a failure of either (Redis or the witness unanswered) leaves the lease
        its end, and once that end has passed the replica stops leading."""
        epoch = self.epoch
        assert epoch is not None
        ttl_ms = int(self.timing.lease_s * 1000)
        # Measured before the request: Redis starts the new TTL later than this, so the
        # local lease always ends first and a deposed leader stops before a new one starts.
        sent = self._clock()
        try:
            ok = await self.store.renew(self.holder, epoch, ttl_ms)
            ok = ok and await self._still_ours(epoch)
        except StoreError as exc:
            log.warning("lease renew failed", error=str(exc), epoch=epoch)
            ok = self.leading  # keep trying while the lease may still be ours
            if ok:
                return
        if self.epoch != epoch:
            return  # stepped down while it was asked (step_down): that term is over
        if ok:
            self._renewed_at = sent
        else:
            log.warning("lost leadership", holder=self.holder, epoch=self.epoch)
            self.epoch = None
            await on_lost()

    async def _renewing(self, work: Awaitable[None], epoch: int, ttl_ms: int) -> None:
        """Await ``work`` while renewing the lease every ``renew_s``. A renewal refused or failing
        only stops renewing: the store fences the work's next write, which fails it."""

        # The renewer is stopped between requests, never during one: a Redis call cancelled in
        # flight can leave its connection with an unread reply, and the next call on it then
        # times out instead of failing fast (seen as a give-up taking over 10 s under BUSY).
        done = asyncio.Event()

        async def pause() -> bool:
            """Sleep one renew period; True when the work finished meanwhile."""
            sleeper = asyncio.ensure_future(self._sleep(self.timing.renew_s))
            waiter = asyncio.ensure_future(done.wait())
            await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
            for f in (sleeper, waiter):
                f.cancel()
            return done.is_set()

        async def renew() -> None:
            while True:
                if await pause():
                    return
                sent = self._clock()
                try:
                    ok = await self.store.renew(self.holder, epoch, ttl_ms)
                    ok = ok and await self._still_ours(epoch)
                except StoreError as exc:
                    log.warning("lease renew failed", error=str(exc), epoch=epoch)
                    continue
                if not ok:
                    log.warning("lease lost while taking up leadership", epoch=epoch)
                    return
                if self.epoch == epoch:
                    self._renewed_at = sent

        renewer = asyncio.create_task(renew(), name="lease-renew-while-elected")
        try:
            await work
        finally:
            done.set()
            # Shielded, not suppressed: the renewer is never cancelled, so a CancelledError
            # here is this loop's own (a shutdown, or the replica's tasks cancelled in the
            # turns the renewer takes to see ``done``) and must end the loop; swallowing it
            # left a cancelled loop leading and renewing for good (sim seed 61). The renewer
            # still ends on its own, between requests.
            await asyncio.shield(renewer)

    async def _still_ours(self, epoch: int) -> bool:
        """After a renewal Redis accepted: False when the epoch witness holds a newer leader."""
        if self._superseded is None or not await self._superseded(self.holder, epoch):
            return True
        log.warning("a newer leader is recorded in the apiserver: the renewal does not count")
        return False

    async def _give_up(self, on_lost: Callable[[], Awaitable[None]]) -> None:
        # The scheduler stops leading before the lease is handed back, never after: no moment
        # in which another replica leads while this one still believes it does.
        epoch, self.epoch = self.epoch, None
        await on_lost()
        if epoch is not None:
            try:
                await self.store.release_lease(self.holder, epoch)
            except StoreError as exc:  # then it lapses after its TTL
                log.warning("lease release failed", error=str(exc))

    async def step_down(self, epoch: int, on_lost: Callable[[], Awaitable[None]]) -> None:
        """The store fenced a write of term ``epoch``: stop leading and give the lease up, so
        that ``run`` competes for it again and the next leader, this replica included, is
        prepared by an election (the module's docstring says why renewals cannot be waited
        for). The answer of a write sent in an earlier term changes nothing: this replica was
        elected again since, and that election was prepared."""
        if self.epoch != epoch:
            return
        log.warning("a write was fenced: stepping down to be elected afresh", epoch=epoch)
        await self._give_up(on_lost)

    def retire(self) -> None:
        """Shutdown begins (the drain): the lease held, if any, is kept and renewed while the
        binds in flight finish (they need it: binder.py's fencing rule), then ``release`` gives
        it up; a lease lost meanwhile is never asked for again (an acquire already sent may
        still win: that election decides nothing and, never settled, leaves its wait to the
        next). A draining replica decides nothing, so a lease it took would only keep the
        standby from leading until the drain ended, and its election, prepared but never
        deciding, would stand between the leaders before and after it (sim seed 836:
        re-elected while draining on a flushed store, it was the record the next election
        chained to)."""
        self._retired = True

    async def release(self) -> None:
        """Shutdown: give the lease up so a standby takes over at once, not after the TTL."""
        self._stopping = True
        epoch, self.epoch = self.epoch, None
        if epoch is not None:
            try:
                await self.store.release_lease(self.holder, epoch)
            except StoreError as exc:
                log.warning("lease release failed", error=str(exc))
