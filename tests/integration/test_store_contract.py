"""The store contract (scheduler/state/base.py), run against both stores.

The same tests drive MemoryStore (with a hand-stepped clock) and RedisStore (on a real
redis-server), so the service can use either without knowing which.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from scheduler.state.base import Claim, Conflict, Fenced, ShareClaim
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore

TTL = 10_000


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Harness:
    """A store plus a way to make its lease lapse without waiting for wall time."""

    def __init__(self, store: Any, expire: Any) -> None:
        self.store = store
        self.expire = expire


@pytest.fixture(params=["memory", "redis"])
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "memory":
        clock = FakeClock()

        async def expire_memory() -> None:
            clock.now += TTL / 1000 + 1

        yield Harness(MemoryStore(clock), expire_memory)
        return
    server = request.getfixturevalue("redis_server")
    client = aioredis.Redis.from_url(server.url)
    await client.flushall()  # no test depends on another's leftovers
    store = RedisStore(client, prefix="t")

    async def expire_redis() -> None:
        await client.delete("t:lease")  # what PX expiry does, without waiting for it

    try:
        yield Harness(store, expire_redis)
    finally:
        await store.close()


def claim(uid: str, node: str = "n", devices: tuple[int, ...] = (), **kw: Any) -> Claim:
    return Claim(uid=uid, pod=f"default/{uid}", node=node, devices=devices, **kw)


def share(index: int, core: int, qos: str = "", sgpu: int = 0, mem: int = 0) -> ShareClaim:
    return ShareClaim(index, core, mem, sgpu, qos, cap_memory_mib=1024, cap_sgpu=4)


async def test_lease_epochs_increase_and_only_one_holder_at_a_time(h: Harness) -> None:
    e1 = await h.store.acquire("a", TTL)
    assert e1 is not None
    assert await h.store.acquire("b", TTL) is None
    assert await h.store.acquire("a", TTL) == e1  # re-acquire = renew, same epoch
    await h.expire()
    e2 = await h.store.acquire("b", TTL)
    assert e2 is not None and e2 > e1
    assert not await h.store.renew("a", e1, TTL)
    assert await h.store.renew("b", e2, TTL)


async def test_a_deposed_leader_cannot_write(h: Harness) -> None:
    e1 = await h.store.acquire("a", TTL)
    assert e1 is not None
    await h.store.reserve("a", e1, [claim("p1", devices=(0,))])
    await h.expire()
    with pytest.raises(Fenced):
        await h.store.reserve("a", e1, [claim("p2", devices=(1,))])  # lapsed, nobody else yet
    e2 = await h.store.acquire("b", TTL)
    assert e2 is not None
    for write in (
        h.store.reserve("a", e1, [claim("p3", devices=(2,))]),
        h.store.mark_bound("a", e1, ["p1"]),
        h.store.release("a", e1, ["p1"]),
        h.store.reconcile("a", e1, [], []),
    ):
        with pytest.raises(Fenced):
            await write
    assert set(await h.store.records()) == {"p1"}


async def test_release_lease_lets_the_next_replica_in_at_once(h: Harness) -> None:
    e1 = await h.store.acquire("a", TTL)
    assert e1 is not None
    await h.store.release_lease("a", e1)
    e2 = await h.store.acquire("b", TTL)
    assert e2 is not None and e2 > e1


async def test_reserve_is_all_or_nothing(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reserve("a", e, [claim("p1", devices=(0, 1))])
    with pytest.raises(Conflict, match="GPU 1 on node n is held by pod UID p1"):
        await h.store.reserve("a", e, [claim("g1", devices=(2, 3)), claim("g2", devices=(1,))])
    assert set(await h.store.records()) == {"p1"}  # g1 was not written either
    with pytest.raises(Conflict):  # two claims of one call colliding with each other
        await h.store.reserve("a", e, [claim("g1", devices=(4,)), claim("g2", devices=(4,))])
    await h.store.reserve("a", e, [claim("g1", devices=(2, 3)), claim("g2", devices=(4,))])
    records = await h.store.records()
    assert {u: r.state for u, r in records.items()} == {
        "p1": "reserved",
        "g1": "reserved",
        "g2": "reserved",
    }


async def test_same_gpu_on_another_node_is_another_gpu(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reserve("a", e, [claim("p1", "n1", (0,)), claim("p2", "n2", (0,))])
    assert len(await h.store.records()) == 2


async def test_re_reserving_a_pod_replaces_its_claim(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reserve("a", e, [claim("p1", devices=(0,))])
    await h.store.reserve("a", e, [claim("p1", devices=(1,))])
    await h.store.reserve("a", e, [claim("p2", devices=(0,))])  # GPU 0 was freed by the move
    records = await h.store.records()
    assert records["p1"].claim.devices == (1,) and records["p2"].claim.devices == (0,)


async def test_mark_bound_and_release(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reserve("a", e, [claim("p1", devices=(0,)), claim("p2", devices=(1,))])
    await h.store.mark_bound("a", e, ["p1", "unknown"])
    records = await h.store.records()
    assert (records["p1"].state, records["p2"].state) == ("bound", "reserved")
    await h.store.release("a", e, ["p1"])
    await h.store.reserve("a", e, [claim("p3", devices=(0,))])
    assert set(await h.store.records()) == {"p2", "p3"}


async def test_shared_cards_respect_capacity_and_qos(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reserve("a", e, [claim("s1", shares=(share(0, 60, "fixed-share", 1, 512),))])
    with pytest.raises(Conflict, match="no room"):
        await h.store.reserve("a", e, [claim("s2", shares=(share(0, 50, "fixed-share", 1),))])
    with pytest.raises(Conflict, match="serves QoS fixed-share"):
        await h.store.reserve("a", e, [claim("s2", shares=(share(0, 10, "burst-share", 1),))])
    with pytest.raises(Conflict, match="shared by other pods"):
        await h.store.reserve("a", e, [claim("w", devices=(0,))])
    with pytest.raises(Conflict, match="no room"):  # memory: 512 + 600 > 1024
        await h.store.reserve("a", e, [claim("s3", shares=(share(0, 10, "fixed-share", 1, 600),))])
    await h.store.reserve("a", e, [claim("s2", shares=(share(0, 40, "fixed-share", 1, 512),))])
    await h.store.reserve("a", e, [claim("w", devices=(1,))])
    with pytest.raises(Conflict, match="held whole"):
        await h.store.reserve("a", e, [claim("s4", shares=(share(1, 10),))])


async def test_reconcile_adds_bound_pods_and_frees_what_no_pod_backs(h: Harness) -> None:
    e1 = await h.store.acquire("a", TTL)
    assert e1 is not None
    await h.store.reserve(
        "a",
        e1,
        [
            claim("gone", devices=(0,)),
            claim("old-reservation", devices=(1,)),
            claim("still-pending", devices=(4,)),
        ],
    )
    await h.store.mark_bound("a", e1, ["gone"])
    await h.expire()
    e2 = await h.store.acquire("b", TTL)
    assert e2 is not None
    await h.store.reserve("b", e2, [claim("in-flight", devices=(2,))])
    truth = [claim("running", devices=(3,)), claim("running-2", "m", (0,))]
    report = await h.store.reconcile("b", e2, truth, ["still-pending"])
    assert (report.added, report.freed, report.kept) == (2, 2, 2)
    assert report.conflicts == ()
    records = await h.store.records()
    assert {u: r.state for u, r in records.items()} == {
        "in-flight": "reserved",
        "still-pending": "reserved",  # a previous leader may have been binding it
        "running": "bound",
        "running-2": "bound",
    }
    # GPUs 0 and 1 are free again; GPUs 3 and 4 are held.
    await h.store.reserve("b", e2, [claim("x", devices=(0, 1))])
    for gpu in (3, 4):
        with pytest.raises(Conflict):
            await h.store.reserve("b", e2, [claim("y", devices=(gpu,))])
    again = await h.store.reconcile("b", e2, truth, ["still-pending"])
    assert again.added == 0  # idempotent


async def test_reconcile_reports_gpus_claimed_twice_by_the_truth(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    report = await h.store.reconcile(
        "a", e, [claim("p1", devices=(0,)), claim("p2", devices=(0,))], []
    )
    assert report.added == 2
    assert report.conflicts == ("pod default/p2: GPU 0 on node n is held by pod UID p1",)
