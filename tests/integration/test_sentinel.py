"""The store through Redis Sentinel, on real processes: a master, two replicas and three
Sentinels (scheduler/testing/redisserver.py's SentinelSet, set up like deploy/redis-sentinel/
with shorter times). Each test steps one case of docs/operations.md "State and HA": the client
follows a failover and skips a Sentinel that is down; a lease renewal no replica acknowledged does
not count; a master cut off from its replicas refuses writes; a promotion that lost the last
writes (a renewal, an epoch increment, reservations and gang records) is recognised by the next
election (``kept_history``), so the service waits as after a FLUSHALL; and an old master that
resumes after a pause cannot renew a lease.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import redis.asyncio as aioredis

from scheduler.state.base import Claim, Fenced, History, StoreError, Unavailable
from scheduler.state.redis_store import RedisStore
from scheduler.testing.redisserver import SentinelSet
from tests.conftest import started_sentinels

T = TypeVar("T")
TTL_MS = 30_000


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelSet]:
    with started_sentinels(tmp_path) as group:
        yield group


@pytest.fixture
async def stores(sentinels: SentinelSet) -> AsyncIterator[Callable[[], RedisStore]]:
    made: list[RedisStore] = []

    def make() -> RedisStore:
        store = RedisStore.from_sentinels(
            sentinels.master_name, sentinels.addresses, sentinels.url, timeout_s=1.0
        )
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()


def claim(uid: str, devices: tuple[int, ...], gang: str = "") -> Claim:
    return Claim(
        uid=uid,
        pod=f"default/{uid}",
        node="n1",
        devices=devices,
        gang=gang,
        replicas=2 if gang else 0,
    )


async def eventually(call: Callable[[], Awaitable[T]], timeout_s: float = 30.0) -> T:
    """``call``'s answer once it stops failing with a store error (a failover under way)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await call()
        except StoreError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def test_the_store_follows_a_failover_to_the_new_master(
    sentinels: SentinelSet, stores: Callable[[], RedisStore]
) -> None:
    store = stores()
    epoch = await store.acquire("a", TTL_MS)  # acknowledged by a replica (WAIT 1)
    assert epoch == 1
    assert await store.reserve_each("a", 1, [[claim("p1", (0, 1))]]) == [None]
    old = sentinels.master_index()
    sentinels.signal_node(old, signal.SIGKILL)
    new = await asyncio.to_thread(sentinels.wait_failover, old)
    assert new != old
    # The same client, through the Sentinels, now talks to the promoted replica: the lease and
    # the reservation were acknowledged by a replica before the kill, so it has them.
    assert await eventually(lambda: store.renew("a", 1, TTL_MS))
    assert set(await store.records()) == {"p1"}
    # ...but it is another Redis process: the next election must not trust its history.
    assert (await store.kept_history("a", 1)).kept is False
    assert (await store.kept_history("a", 1)).kept is True  # recorded for the next one


async def test_a_sentinel_that_is_down_is_skipped(
    sentinels: SentinelSet, stores: Callable[[], RedisStore]
) -> None:
    sentinels.sentinels[0].kill()  # type: ignore[union-attr]  # the first one asked
    assert await stores().acquire("a", TTL_MS) == 1


async def test_every_problem_is_a_clear_store_error(sentinels: SentinelSet) -> None:
    wrong = RedisStore.from_sentinels("no-such-master", sentinels.addresses, sentinels.url)
    try:
        with pytest.raises(Unavailable, match="No master found for 'no-such-master'"):
            await wrong.acquire("a", TTL_MS)
    finally:
        await wrong.close()
    nobody = RedisStore.from_sentinels(sentinels.master_name, ("127.0.0.1:1",), sentinels.url)
    try:
        with pytest.raises(Unavailable, match=r"No master found .*127\.0\.0\.1,port=1"):
            await nobody.acquire("a", TTL_MS)
    finally:
        await nobody.close()
    bad_password = RedisStore.from_sentinels(
        sentinels.master_name, sentinels.addresses, "redis://:wrong@ignored/0"
    )
    try:
        with pytest.raises(Unavailable, match="No master found"):
            await bad_password.acquire("a", TTL_MS)
    finally:
        await bad_password.close()


async def test_a_renewal_no_replica_acknowledged_does_not_count_and_a_lone_master_refuses_writes(
    sentinels: SentinelSet, stores: Callable[[], RedisStore]
) -> None:
    store = stores()
    assert await store.acquire("a", TTL_MS) == 1
    for i in (1, 2):
        sentinels.signal_node(i, signal.SIGSTOP)
    try:
        # Within min-replicas-max-lag the master still takes the write, but no replica has it:
        # a promotion could lose it, so the leader does not count it (its lease keeps the end
        # it had).
        with pytest.raises(Unavailable, match=r"reached 0 replicas .*does not count"):
            await store.renew("a", 1, TTL_MS)
        # Past min-replicas-max-lag the master refuses every write (NOREPLICAS): a master cut
        # off from its replicas cannot extend a lease or record a reservation.
        await asyncio.sleep(sentinels.max_lag_s + 1.5)
        with pytest.raises(Unavailable, match="NOREPLICAS"):
            await store.reserve_each("a", 1, [[claim("p1", (0,))]])
    finally:
        for i in (1, 2):
            sentinels.signal_node(i, signal.SIGCONT)
    assert await eventually(lambda: store.renew("a", 1, TTL_MS))


async def test_a_promotion_that_lost_the_last_writes_is_recognised(
    sentinels: SentinelSet, stores: Callable[[], RedisStore]
) -> None:
    """Leader a's epoch increment, its reservations and its gang record reach only the master;
    the master dies and a replica without them is promoted. Leader b then gets a's epoch
    number again: b's writes are b's (the fence compares holder and epoch), a's are refused
    there, and b's election says the history was not kept, so b waits one lease before its
    first decision (docs/operations.md "State and HA")."""
    store = stores()
    assert await store.acquire("first", TTL_MS) == 1
    assert (await store.kept_history("first", 1)).kept is False  # a new store: no history
    await store.release_lease("first", 1)
    old = sentinels.master_index()
    replicas = [i for i in range(3) if i != old]
    for i in replicas:
        sentinels.signal_node(i, signal.SIGSTOP)
    # The replicas' links drop and the master takes the next writes alone. Only a master
    # without min-replicas-to-write does (deploy/'s refuse them: the test above), but with it
    # the same happens to the writes of the last moments before a link drops.
    with sentinels.node_client(old) as master:
        master.config_set("min-replicas-to-write", 0)
        master.client_kill_filter(_type="replica")
    with pytest.raises(Unavailable, match="does not count"):
        await store.acquire("a", TTL_MS)  # INCR to epoch 2 and a's lease, on the master only
    gang = [claim("g0", (0, 1), "default/job"), claim("g1", (2, 3), "default/job")]
    assert await store.reserve_each("a", 2, [gang]) == [None]
    assert set(await store.gangs()) == {"default/job"}
    sentinels.signal_node(old, signal.SIGKILL)
    for i in replicas:
        sentinels.signal_node(i, signal.SIGCONT)
    await asyncio.to_thread(sentinels.wait_failover, old)
    assert await eventually(lambda: store.acquire("b", TTL_MS)) == 2  # a's number, again
    assert await store.records() == {}  # a's reservations were lost...
    assert await store.gangs() == {}  # ...and its gang record
    with pytest.raises(Fenced):  # a still believes it leads at epoch 2: refused
        await store.reserve_each("a", 2, [[claim("x", (4,))]])
    assert await store.kept_history("b", 2) == History(False, "first|1")


async def test_an_old_master_that_resumes_after_a_pause_cannot_renew(
    sentinels: SentinelSet, stores: Callable[[], RedisStore]
) -> None:
    store = stores()
    assert await store.acquire("a", TTL_MS) == 1
    old = sentinels.master_index()
    # A connection a's client opened to the old master before the pause, used after it.
    stale = RedisStore(
        aioredis.Redis(
            host="127.0.0.1",
            port=sentinels.ports[old],
            password=sentinels.password,
            socket_timeout=1.0,
        ),
        replicas_to_ack=1,
    )
    try:
        assert await stale.renew("a", 1, TTL_MS)
        sentinels.signal_node(old, signal.SIGSTOP)
        await asyncio.to_thread(sentinels.wait_failover, old)
        sentinels.signal_node(old, signal.SIGCONT)
        # The old master still has a's lease and may still believe it is master: the renewal
        # is refused (NOREPLICAS: its replicas' acknowledgements are older than
        # min-replicas-max-lag; or READONLY once the Sentinels made it a replica) or, if it
        # ran, reached no replica (they follow the new master): it never counts.
        with pytest.raises(Unavailable):
            await stale.renew("a", 1, TTL_MS)
    finally:
        await stale.close()
    # Through the Sentinels, the new master: a's lease is there (replicated before the pause).
    assert await eventually(lambda: store.renew("a", 1, TTL_MS))
