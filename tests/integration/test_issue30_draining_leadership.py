"""Sim seed 836: a replica draining after its SIGTERM never takes the lease again. Stepped
through ``Leadership`` on BOTH stores, the memory store and the service's ``RedisStore`` on the
session's real redis-server (test_cancelled_leadership.py's fixture).

app.py's shutdown drains (binds in flight finish) and only then releases the lease; the
leadership loop runs on meanwhile, as the binds in flight need the lease it holds renewed. But
it also went on competing: a lease lost during the drain (a FLUSHALL, a renewal Redis did not
answer) was taken again by a replica that decides nothing, which kept the standby from leading
until the drain ended, and stood in the witness's chain of elections between the leaders before
and after it.
"""

from __future__ import annotations

import asyncio

from scheduler.service.leader import Leadership, LeaseTiming
from scheduler.state.base import Store
from tests.clock import ManualClock
from tests.integration import test_cancelled_leadership
from tests.lifecycle import TTL_MS, until

store = test_cancelled_leadership.store
# Polls (1 ms each) until the leadership loop got there: real time only bounds a hang.
HANG = 30_000


async def test_a_draining_replica_keeps_its_lease_but_never_takes_one_again(store: Store) -> None:
    clock = ManualClock(0.0)

    async def sleep(seconds: float) -> None:
        clock.now += seconds
        await asyncio.sleep(0.01)  # real time only for Redis to answer

    elected: list[int] = []

    async def on_elected(epoch: int) -> None:
        elected.append(epoch)

    async def on_lost() -> None:
        pass

    leadership = Leadership(store, "r1", LeaseTiming(), clock, sleep=sleep)
    run = asyncio.create_task(leadership.run(on_elected, on_lost))
    timing = LeaseTiming()
    try:
        await until(lambda: elected)
        leadership.retire()  # SIGTERM: the drain begins
        # Counted in the leadership loop's own sleeps (the manual clock), not in real time: a
        # loaded machine's slow Redis answers make the steps slower, never fewer.
        start = clock.now
        await until(lambda: clock.now >= start + timing.lease_s + timing.renew_s, tries=HANG)
        assert leadership.epoch == 1 and leadership.remaining() > 0, "not renewed while draining"
        await store.release_lease("r1", 1)  # the lease is lost (its TTL, a FLUSHALL)
        # Its renewal fails (or, before the fix, it is elected again).
        await until(lambda: leadership.epoch is None or len(elected) > 1, tries=HANG)
        lost = clock.now
        await until(lambda: clock.now >= lost + 10 * timing.retry_s, tries=HANG)  # ten retries
        assert elected == [1], f"the draining replica took the lease again: {elected}"
        assert await store.acquire("r2", TTL_MS) == 2  # the standby leads at once
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
