"""A fenced leader is elected afresh (found by the deterministic simulation, tests/sim): stepped
through the live scheduler's own parts on BOTH stores, the memory store and the service's
``RedisStore`` on the session's real redis-server.

A FLUSHALL takes the leader's lease; its next reservation is fenced. Sentinel then promotes a
replica that copied the master before the FLUSHALL: the lease (holder, epoch) is back, and
every renewal counts again. Before the fix the fenced leader only stopped deciding and waited
for a renewal to fail, which never came: it led on without deciding, no other replica could
be elected, and the pod stayed pending with no reason, for good.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from copy import deepcopy

import pytest
import redis.asyncio as aioredis

from scheduler.state.base import Store
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica, node

Restore = Callable[[], Awaitable[None]]


class Backend:
    """One store on one clock, and its failover to a copy taken before a FLUSHALL."""

    def __init__(self, store: Store, clock: ManualClock, url: str = "") -> None:
        self.store, self.clock, self.url = store, clock, url

    async def copy_then_flush(self) -> Restore:
        """A replica copies the master, then the master is flushed (the lease, the epochs and
        every record gone). Returns the failover: the copy promoted in the flushed master's
        place (its TTLs as they were)."""
        if not self.url:
            assert isinstance(self.store, MemoryStore)
            copy = deepcopy(self.store, {id(self.clock): self.clock})
            self.store.__init__(self.clock)  # type: ignore[misc]

            async def promote_memory() -> None:
                vars(self.store).update(vars(copy))

            return promote_memory
        client = aioredis.Redis.from_url(self.url)
        keys = await client.keys("*")
        saved = [(k, await client.dump(k), await client.pttl(k)) for k in keys]
        await client.flushall()
        await client.aclose()

        async def promote_redis() -> None:
            promoted = aioredis.Redis.from_url(self.url)
            for key, value, ttl in saved:
                assert value is not None
                await promoted.restore(key, max(ttl, 0), value, replace=True)
            await promoted.aclose()

        return promote_redis


@pytest.fixture(params=["memory", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    clock = ManualClock(0.0)
    if request.param == "memory":
        yield Backend(MemoryStore(clock), clock)
        return
    url = str(request.getfixturevalue("redis_server").url)
    client = aioredis.Redis.from_url(url)
    await client.flushall()  # no test depends on another's leftovers
    await client.aclose()
    store = RedisStore.from_url(url, prefix="fence")
    try:
        yield Backend(store, clock, url)
    finally:
        await store.close()


async def lead_on(r: Replica, seconds: float) -> None:
    """``seconds`` pass as ``Leadership.run`` spends them: a renewal every renew period while
    leading, an acquisition (and the election it prepares) while not."""
    end = r.clock.now + seconds
    while r.clock.now < end and not r.s.may_decide():
        r.clock.now += 5.0
        if r.leadership.epoch is None:
            await r.elect([node(1)])
        else:
            await r.renewal()


async def test_a_leader_fenced_then_given_its_lease_back_is_elected_afresh(
    backend: Backend,
) -> None:
    api, clock = Apiserver(), backend.clock
    a = Replica(api, backend.store, clock, "a", tuning=QUICK_RETRIES)
    assert await a.elect([node(1)]) == 1
    assert a.s.may_decide()
    failover = await backend.copy_then_flush()  # FLUSHALL: a's lease is gone
    a.pending(MakePod().Name("p").Req(1).Obj())
    await a.step()  # its reservation is fenced
    await a.settle()
    assert api.binds == [] and a.held("default/p") is None
    await failover()  # the replica from before the FLUSHALL: a's lease and epoch are back
    await lead_on(a, 60.0)  # four lease durations: time enough for any wait an election sets
    assert a.s.may_decide(), (
        "a leads on a lease given back but never decides again: p stays pending for good"
    )
    await a.step()
    await a.settle()
    assert api.binds == [("default/p", "n", "0")]
