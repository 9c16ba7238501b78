"""A leadership loop cancelled right after an election stops (found by the deterministic
simulation, tests/sim, seed 61): stepped through ``Leadership`` on BOTH stores, the memory store
and the service's ``RedisStore`` on the session's real redis-server.

``_renewing`` awaits its renewer after the election's work is done, and the renewer needs a few
turns of the loop to see that. A cancellation landing in those turns (app.py's shutdown cancels
the loops; the simulation's SIGKILL cancels a replica's tasks) was swallowed with the renewer's
own: the loop went on leading and renewing the lease for good, and no other replica could ever
be elected.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from scheduler.service.leader import Leadership, LeaseTiming
from scheduler.state.base import Store
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore
from tests.clock import ManualClock


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore(ManualClock(0.0))
        return
    url = str(request.getfixturevalue("redis_server").url)
    client = aioredis.Redis.from_url(url)
    await client.flushall()  # no test depends on another's leftovers
    await client.aclose()
    redis_store = RedisStore.from_url(url, prefix="cancel")
    try:
        yield redis_store
    finally:
        await redis_store.close()


async def _never(_seconds: float) -> None:
    """The leadership's sleep: nothing wakes it, so only a cancellation moves the loop on."""
    await asyncio.Event().wait()


async def test_a_leadership_loop_cancelled_as_its_election_ends_stops(store: Store) -> None:
    leadership = Leadership(store, "r1", LeaseTiming(), ManualClock(0.0), sleep=_never)

    async def on_lost() -> None:
        pass

    async def on_elected(_epoch: int) -> None:
        # Delivered at the loop's next wait: the renewer, which this election just ended.
        run.cancel()

    run = asyncio.create_task(leadership.run(on_elected, on_lost))
    try:
        # Real seconds only for Redis to answer the acquire: the loop's own sleeps never end.
        await asyncio.wait({run}, timeout=5.0)
        assert run.cancelled(), f"the cancelled leadership loop went on leading: {run}"
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
