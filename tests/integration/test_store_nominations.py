"""Nominations (scheduler/state/base.py; issue 14's preemption), run against both stores.

The GPUs freed for a preemptor are held for it while its victims terminate: fenced like every
write, one per preemptor, expiring at the caller's ``expires_ms``, untouched by a new leader's
acquire and reconcile. The stores run as in test_store_contract.py (its fixture ``h``: a
MemoryStore with a hand-stepped clock, a RedisStore on a real redis-server); the failures are
real ones too (a Redis that is not there, BUSY, OOM: tests/redis_faults.py).

``nominations(0)`` shows every nomination still stored, expired or not (every ``expires_ms`` in
these tests is above 0): that is how the tests see what a write pruned, in either store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from scheduler.core.model.dra import Allocation, DeviceResult
from scheduler.state.base import Fenced, Nomination, Unavailable
from scheduler.state.redis_store import RedisStore
from tests.integration import test_store_contract
from tests.integration.test_store_contract import TTL, Harness, claim
from tests.redis_faults import busy, out_of_memory

h = test_store_contract.h  # the contract's fixture: each test runs on MemoryStore and RedisStore

NOW = 1_800_000_000_000  # unix milliseconds
HOLD_MS = 300_000  # the default: 300 s


def nomination(
    uid: str,
    node: str = "n",
    devices: tuple[int, ...] = (0, 1),
    victims: tuple[str, ...] | None = None,
    priority: int = 1000,
    created_ms: int = NOW,
    expires_ms: int = NOW + HOLD_MS,
) -> Nomination:
    return Nomination(
        uid=uid,
        pod=f"default/{uid}",
        priority=priority,
        node=node,
        devices=devices,
        victims=(f"{uid}-victim",) if victims is None else victims,
        created_ms=created_ms,
        expires_ms=expires_ms,
    )


async def leader(h: Harness, holder: str = "a") -> int:
    epoch: int | None = await h.store.acquire(holder, TTL)
    assert epoch is not None
    return epoch


async def test_a_nomination_is_read_back_as_written(h: Harness) -> None:
    e = await leader(h)
    gang_preemptor = nomination("p", devices=(0, 1, 2, 3), victims=("v1", "v2"), priority=10_000)
    cpu_only = nomination("q", node="m", devices=(), victims=("v3",), priority=-5)
    await h.store.nominate("a", e, gang_preemptor, NOW)
    await h.store.nominate("a", e, cpu_only, NOW)
    assert await h.store.nominations(NOW) == {"p": gang_preemptor, "q": cpu_only}
    nominations = await h.store.nominations(NOW + 1)
    assert nominations["q"].devices == () and nominations["q"].priority == -5
    assert nominations["p"].victims == ("v1", "v2")


async def test_a_nominations_dra_allocations_are_read_back_as_written(h: Harness) -> None:
    """Issue 29: the DRA devices a preemptor's plan allocates are held across a failover."""
    e = await leader(h)
    result = DeviceResult("gpu", "gpu.example.com", "n", "gpu-0", consumed_capacity={"mem": "4Gi"})
    claimed = msgspec.structs.replace(
        nomination("p", devices=()), allocations=(Allocation((result,)),)
    )
    await h.store.nominate("a", e, claimed, NOW)
    assert await h.store.nominations(NOW) == {"p": claimed}


async def test_a_preemptor_has_at_most_one_nomination_the_last_written(h: Harness) -> None:
    e = await leader(h)
    await h.store.nominate("a", e, nomination("p", node="n1", devices=(0, 1)), NOW)
    await h.store.nominate("a", e, nomination("other", node="n2"), NOW)
    # Its victims changed (a victim left on its own; another node suits it better).
    moved = nomination(
        "p", node="n3", devices=(4,), victims=("w",), created_ms=NOW + 5, expires_ms=NOW + 50
    )
    await h.store.nominate("a", e, moved, NOW + 5)
    assert await h.store.nominations(NOW + 5) == {"p": moved, "other": nomination("other", "n2")}
    # The replacement's own expiry counts, not the earlier, later one.
    assert set(await h.store.nominations(NOW + 50)) == {"other"}


async def test_drop_nominations_removes_those_named(h: Harness) -> None:
    e = await leader(h)
    for uid in ("p", "q", "r"):
        await h.store.nominate("a", e, nomination(uid), NOW)
    await h.store.drop_nominations("a", e, ["p", "never-nominated"])  # p bound; unknown ignored
    assert set(await h.store.nominations(NOW)) == {"q", "r"}
    await h.store.drop_nominations("a", e, [])
    await h.store.drop_nominations("a", e, ["q", "r"])
    assert await h.store.nominations(0) == {}


async def test_nominations_are_fenced(h: Harness) -> None:
    e1 = await leader(h)
    await h.store.nominate("a", e1, nomination("p"), NOW)
    await h.expire()
    # The lease lapsed, nobody else holds it yet: a is refused already.
    with pytest.raises(Fenced):
        await h.store.nominate("a", e1, nomination("q"), NOW)
    with pytest.raises(Fenced):
        await h.store.drop_nominations("a", e1, ["p"])
    e2 = await leader(h, "b")
    for write in (
        h.store.nominate("a", e1, nomination("q"), NOW),
        h.store.nominate("a", e1, nomination("p", devices=(7,)), NOW),
        h.store.drop_nominations("a", e1, ["p"]),
        h.store.drop_nominations("a", e1, [], NOW + 2 * HOLD_MS),  # nor prunes
        h.store.nominate("b", e1, nomination("q"), NOW),  # the right holder, a stale epoch
    ):
        with pytest.raises(Fenced):
            await write
    assert await h.store.nominations(0) == {"p": nomination("p")}
    await h.store.nominate("b", e2, nomination("q"), NOW)
    assert set(await h.store.nominations(NOW)) == {"p", "q"}


async def test_expired_nominations_are_never_returned_and_go_with_the_next_write(
    h: Harness,
) -> None:
    e = await leader(h)
    await h.store.nominate("a", e, nomination("soon", expires_ms=NOW + 10), NOW)
    await h.store.nominate("a", e, nomination("later", expires_ms=NOW + 20), NOW)
    await h.store.nominate("a", e, nomination("long"), NOW)
    assert set(await h.store.nominations(NOW + 9)) == {"soon", "later", "long"}
    # Live while now_ms < expires_ms.
    assert set(await h.store.nominations(NOW + 10)) == {"later", "long"}
    assert set(await h.store.nominations(NOW + 25)) == {"long"}
    assert set(await h.store.nominations(0)) == {"soon", "later", "long"}  # reads delete nothing
    # The next write deletes every nomination expired at its now_ms, whoever it is for.
    await h.store.nominate("a", e, nomination("new", expires_ms=NOW + 100), NOW + 15)
    assert set(await h.store.nominations(0)) == {"later", "long", "new"}
    # A drop given now_ms prunes too; one without now_ms deletes only what it names.
    await h.store.drop_nominations("a", e, ["long"])
    assert set(await h.store.nominations(0)) == {"later", "new"}
    await h.store.drop_nominations("a", e, [], NOW + 20)
    assert set(await h.store.nominations(0)) == {"new"}
    # A nomination already expired when written is not kept, and ends the earlier one.
    await h.store.nominate("a", e, nomination("new", expires_ms=NOW + 30), NOW + 30)
    await h.store.nominate("a", e, nomination("stale", expires_ms=NOW + 29), NOW + 30)
    assert await h.store.nominations(0) == {}


async def test_nominations_survive_a_new_leader_and_its_reconcile(h: Harness) -> None:
    e1 = await leader(h)
    await h.store.reserve("a", e1, [claim("victim", devices=(0,)), claim("bystander", "m", (0,))])
    await h.store.mark_bound("a", e1, ["victim", "bystander"])
    await h.store.update_nodes("a", e1, {"n": "{}"}, [])
    held = nomination("p", devices=(0, 1), victims=("victim",))
    cpu_only = nomination("q", node="m", devices=())
    await h.store.nominate("a", e1, held, NOW)
    await h.store.nominate("a", e1, cpu_only, NOW)
    await h.expire()  # the leader died after the evictions, before the preemptor bound
    e2 = await leader(h, "b")
    assert await h.store.nominations(NOW + 1000) == {"p": held, "q": cpu_only}
    # The takeover's reconcile: the victim is gone, another pod is pending, nodes replaced.
    report = await h.store.reconcile(
        "b", e2, [claim("bystander", "m", (0,))], ["p", "q"], {"n": "{}", "m": "{}"}
    )
    assert report.freed == 1
    assert await h.store.nominations(NOW + 1000) == {"p": held, "q": cpu_only}
    await h.store.reconcile("b", e2, [], [])  # a later one, freeing everything: the same
    assert await h.store.nominations(NOW + 1000) == {"p": held, "q": cpu_only}
    # The new leader goes on with them: the preemptor binds, its nomination is dropped.
    await h.store.reserve("b", e2, [claim("p", devices=(0, 1))])
    await h.store.mark_bound("b", e2, ["p"])
    await h.store.drop_nominations("b", e2, ["p"], NOW + 2000)
    assert await h.store.nominations(NOW + 2000) == {"q": cpu_only}


async def test_a_nomination_never_refuses_a_reservation(h: Harness) -> None:
    """The store remembers nominations; who may take the GPUs held is the core's decision."""
    e = await leader(h)
    await h.store.nominate("a", e, nomination("p", devices=(0, 1)), NOW)
    await h.store.reserve("a", e, [claim("higher", devices=(0,)), claim("p", devices=(1,))])
    await h.store.release("a", e, ["higher", "p"])
    # Nor do the pod writes touch the nominations (the preemptor's own included).
    assert await h.store.nominations(NOW) == {"p": nomination("p", devices=(0, 1))}


async def test_a_flushed_store_has_no_nominations(h: Harness) -> None:
    """Accepted loss (base.py): the service derives them again."""
    e1 = await leader(h)
    await h.store.nominate("a", e1, nomination("p"), NOW)
    await h.flush()
    assert await h.store.nominations(0) == {}
    e2 = await leader(h, "b")
    await h.store.nominate("b", e2, nomination("p"), NOW)
    assert set(await h.store.nominations(NOW)) == {"p"}


# ---- Redis only ------------------------------------------------------------------------------


async def test_redis_nomination_keys(redis_server: Any) -> None:
    """The layout of redis_store.py's docstring: P:nominations and P:nomexpiry hold the same
    UIDs, and both keys go with the last nomination."""
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    await client.flushall()
    store = RedisStore(aioredis.Redis.from_url(redis_server.url), prefix="N")
    try:
        e = await store.acquire("a", TTL)
        assert e is not None
        await store.nominate("a", e, nomination("p", devices=(2, 3), victims=("v1", "v2")), NOW)
        await store.nominate("a", e, nomination("q", devices=(), expires_ms=NOW + 7), NOW)
        assert await client.hgetall("N:nominations") == {
            "p": (
                '{"uid":"p","pod":"default/p","priority":1000,"node":"n","devices":[2,3],'
                '"victims":["v1","v2"],"allocations":[],'
                f'"created_ms":{NOW},"expires_ms":{NOW + HOLD_MS}}}'
            ),
            "q": (
                '{"uid":"q","pod":"default/q","priority":1000,"node":"n","devices":[],'
                '"victims":["q-victim"],"allocations":[],'
                f'"created_ms":{NOW},"expires_ms":{NOW + 7}}}'
            ),
        }
        assert await client.zrange("N:nomexpiry", 0, -1, withscores=True) == [
            ("q", NOW + 7),
            ("p", NOW + HOLD_MS),
        ]
        await store.drop_nominations("a", e, ["p"], NOW + 7)  # drops p, prunes q
        assert set(await client.keys("N:*")) == {"N:lease", "N:epoch"}
    finally:
        await store.close()
        await client.aclose()


async def test_redis_prunes_at_most_a_chunk_of_expired_nominations_per_call(
    redis_server: Any,
) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    store = RedisStore(aioredis.Redis.from_url(redis_server.url), prefix="C", chunk=2)
    try:
        e = await store.acquire("a", TTL)
        assert e is not None
        for i in range(5):
            await store.nominate("a", e, nomination(f"x{i}", expires_ms=NOW + 10 + i), NOW)
        later = NOW + 100
        await store.nominate("a", e, nomination("live", expires_ms=later + HOLD_MS), later)
        # The two that expired first went; three expired ones remain, none of them returned.
        assert set(await store.nominations(0)) == {"x2", "x3", "x4", "live"}
        assert set(await store.nominations(later)) == {"live"}
        await store.drop_nominations("a", e, [], later)
        await store.drop_nominations("a", e, [], later)
        assert set(await store.nominations(0)) == {"live"}
        assert await client.zcard("C:nomexpiry") == await client.hlen("C:nominations") == 1
    finally:
        await store.close()
        await client.aclose()


async def test_redis_nomination_calls_fail_as_unavailable(
    redis_server: Any, tmp_path: Path
) -> None:
    """A Redis that is not there (nothing listens on the socket), BUSY and OOM all reach the
    caller as Unavailable, for writes and reads alike; Redis answers again: all is well."""
    gone = RedisStore.from_url(f"unix://{tmp_path / 'no-redis.sock'}", prefix="U", timeout_s=0.5)
    try:
        for call in (
            gone.nominate("a", 1, nomination("p"), NOW),
            gone.drop_nominations("a", 1, ["p"], NOW),
            gone.nominations(NOW),
        ):
            with pytest.raises(Unavailable):
                await call
    finally:
        await gone.close()
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    store = RedisStore(aioredis.Redis.from_url(redis_server.url), prefix="U")
    try:
        e = await store.acquire("a", TTL)
        assert e is not None
        await store.nominate("a", e, nomination("p"), NOW)
        async with out_of_memory(redis_server.url):
            with pytest.raises(Unavailable, match="maxmemory"):
                await store.nominate("a", e, nomination("q"), NOW)
        async with busy(redis_server.url):
            for call in (
                store.nominate("a", e, nomination("q"), NOW),
                store.drop_nominations("a", e, ["p"]),
                store.nominations(NOW),
            ):
                with pytest.raises(Unavailable, match="BUSY"):
                    await call
        assert await store.nominations(NOW) == {"p": nomination("p")}  # nothing was written
        await store.nominate("a", e, nomination("q"), NOW)
        assert set(await store.nominations(NOW)) == {"p", "q"}
    finally:
        await store.close()
        await client.aclose()
