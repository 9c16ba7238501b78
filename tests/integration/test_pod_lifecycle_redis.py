"""Issue 12's timelines where the store matters, on a real redis-server.

The same stepped scripts as tests/unit/test_pod_lifecycle.py (the live scheduler's own parts, a
manual clock and a fake apiserver whose first Binding wins: tests/lifecycle.py), with the
service's ``RedisStore`` (its Lua scripts, built as app.py builds it) instead of the memory
store. Each test ends by comparing the snapshot and everything the store holds: pod records,
the owner of every GPU of the node, and gang records.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from scheduler.service.podbook import Stage
from scheduler.service.storesync import RECONCILE_MIN_S
from scheduler.state.redis_store import RedisStore
from tests.builders import MakeNode, MakePod
from tests.clock import ManualClock
from tests.lifecycle import TTL_MS, Apiserver, Replica, node, quick_retries, reloaded, until
from tests.redis_faults import busy


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    quick_retries(monkeypatch)


class Redis:
    """The session's redis-server, emptied for this test, and a store on it."""

    def __init__(self, url: str, client: aioredis.Redis) -> None:
        self.url = url
        self.client = client
        self.store = RedisStore.from_url(url, prefix="life")  # as app.py builds it

    def live(self, **kw: Any) -> Replica:
        clock = ManualClock(0.0)
        return Replica(Apiserver(), self.store, clock, **kw)


@pytest.fixture
async def redis(redis_server: Any) -> AsyncIterator[Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()  # no test depends on another's leftovers
    r = Redis(redis_server.url, client)
    try:
        yield r
    finally:
        await r.store.close()
        await client.aclose()


async def store_of(r: Replica) -> tuple[dict[str, str], dict[int, str], dict[str, str]]:
    """Everything the store holds about node n: records, GPU owners, gangs."""
    return await r.records(), await r.owners("n"), await r.gangs()


# ---- 1. a re-list of bound pods that predates our Binding ----------------------------------


async def test_1_a_bound_relist_older_than_our_bind_keeps_the_gang_in_redis(redis: Redis) -> None:
    r = redis.live()
    await r.elect([node(3)])
    for name in ("a", "b"):
        r.pending(MakePod().Name(name).Req(1).Gang("job", 2).Obj())
    assert await r.step() in ("default/a", "default/b")
    await r.settle()
    assert len(r.api.binds) == 2
    for key in ("default/a", "default/b"):
        r.s.pending_event("DELETED", r.api.pods[key])  # our binds moved them off the watch
        assert r.s.book.stage(key) is Stage.ASSUMED
    # The bound watch re-lists (410 Gone); the LIST was answered before our Bindings landed.
    r.s.replace_bound([])
    await r.settle()  # read back instead of freed
    held = {k: r.held(k) for k in ("default/a", "default/b")}
    assert all(h is not None and h[0] == "n" for h in held.values())
    gpus = {k: h[1][0] for k, h in held.items() if h is not None}
    assert len(set(gpus.values())) == 2
    r.pending(MakePod().Name("c").Req(2).Obj())
    assert await r.step() == "default/c"
    await r.settle()
    assert len(r.api.binds) == 2  # c waits: one GPU is free, it asks for two
    assert r.s.book.stage("default/c") is Stage.PENDING and r.held("default/c") is None
    assert await store_of(r) == (
        {k: f"bound:({i},)" for k, i in gpus.items()},
        {i: k for k, i in gpus.items()},
        {"default/job": "bound:default/a,default/b"},
    )


async def test_1_a_bound_relist_frees_a_pod_that_really_left(redis: Redis) -> None:
    r = redis.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    await r.step()
    await r.settle()
    assert await store_of(r) == ({"default/a": "bound:(0,)"}, {0: "default/a"}, {})
    r.api.delete("default/a")
    r.s.replace_bound([])
    await r.settle()
    assert r.s.book.get("default/a") is None and r.held("default/a") is None
    assert r.s.state.nodes["n"].free_mask == 0b1
    assert await store_of(r) == ({}, {}, {})


# ---- 2. a bind counted as failed although the pod is bound ---------------------------------


async def test_2_a_409_from_a_previous_leaders_bind_keeps_where_it_is_bound(redis: Redis) -> None:
    r = redis.live()
    await r.elect([node(2)])
    r.pending(MakePod().Name("p").Req(1).Obj())
    r.api.gates["default/p"] = gate = asyncio.Event()
    assert await r.step() == "default/p"
    held = r.held("default/p")
    assert held is not None
    ours = held[1][0]
    other = 1 - ours
    # Meanwhile the previous leader's Binding lands (on the other GPU) and the watch shows it.
    r.api.pods["default/p"] = MakePod().Name("p").Req(1).Bound("n", str(other)).Obj()
    r.bound_seen("default/p")
    gate.set()
    await r.settle()  # our Binding gets 409: bound elsewhere
    assert r.s.book.stage("default/p") is Stage.BOUND
    assert r.held("default/p") == ("n", [other])
    r.clock.now += RECONCILE_MIN_S  # the reconcile the 409 asked for runs at the next turn
    r.pending(MakePod().Name("q").Req(1).Obj())
    assert await r.step() == "default/q"
    await r.settle()
    assert r.held("default/q") == ("n", [ours])  # not the GPU p really holds
    assert await store_of(r) == (
        {"default/p": f"bound:({other},)", "default/q": f"bound:({ours},)"},
        {other: "default/p", ours: "default/q"},
        {},
    )


async def test_2_a_pending_relist_older_than_our_bind_does_not_decide_again(redis: Redis) -> None:
    r = redis.live()
    await r.elect([node(2)])
    stale = r.pending(MakePod().Name("a").Req(1).Obj())
    await r.step()
    await r.settle()
    r.bound_seen("default/a")
    r.s.replace_pending([stale])  # a LIST answered before our Binding
    assert await r.step() is None  # nothing to decide
    await r.settle()
    assert len(r.api.binds) == 1
    gpu = int(r.api.binds[0][2])
    assert r.s.book.stage("default/a") is Stage.BOUND and r.held("default/a") == ("n", [gpu])
    assert await store_of(r) == ({"default/a": f"bound:({gpu},)"}, {gpu: "default/a"}, {})


async def test_2_a_lost_bind_answer_with_the_read_back_failing_keeps_the_gpus(
    redis: Redis,
) -> None:
    r = redis.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.lose_answer.add("default/a")
    r.api.reads_fail = True
    await r.step()
    # The retry gets 409 and the pod cannot be read back: the outcome is unknown.
    await until(lambda: not r.s.binder._slots.locked() and r.s._checking)
    assert r.s.book.stage("default/a") is Stage.BINDING
    assert await store_of(r) == ({"default/a": "reserved:(0,)"}, {0: "default/a"}, {})
    r.pending(MakePod().Name("c").Req(1).Obj())
    await r.step()
    assert r.s.book.stage("default/c") is Stage.PENDING and r.held("default/c") is None
    r.api.reads_fail = False
    await r.settle()
    assert r.s.book.stage("default/a") is Stage.BOUND and r.held("default/a") == ("n", [0])
    assert len(r.api.binds) == 1
    # The re-read's BIND_UNKNOWN -> CHECKED_BOUND asks for a reconcile; it writes the truth.
    r.clock.now += RECONCILE_MIN_S
    await r.s.reconcile_if_needed()
    assert await store_of(r) == ({"default/a": "bound:(0,)"}, {0: "default/a"}, {})


# ---- 3. the Binding is fenced by time --------------------------------------------------------


async def test_3_no_binding_is_sent_when_the_lease_could_end_before_it_completes(
    redis: Redis,
) -> None:
    r = redis.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.clock.now = 10.5  # lease 15 s from 0, bind timeout 5 s: 4.5 s left
    assert r.s.binder.may_send() is False
    await r.step()
    await r.settle()
    assert r.api.binds == []
    assert r.s.book.stage("default/a") is Stage.PENDING and r.held("default/a") is None
    assert await store_of(r) == ({}, {}, {})


async def test_3_a_binding_is_abandoned_at_the_bind_timeout(redis: Redis) -> None:
    r = redis.live(bind_timeout=0.02)
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.gates["default/a"] = asyncio.Event()  # never answers
    await r.step()
    await r.settle()  # three attempts, each cut at 0.02 s, then the pod is read back: pending
    assert r.api.binds == []
    assert r.s.book.stage("default/a") is Stage.PENDING and r.held("default/a") is None
    assert await store_of(r) == ({}, {}, {})


async def test_3_after_flushall_the_new_leader_waits_out_the_old_leaders_binds(
    redis: Redis,
) -> None:
    clock = ManualClock(0.0)
    api = Apiserver()
    a = Replica(api, redis.store, clock, "a", wait_for_unknown_leader=True)
    b = Replica(api, redis.store, clock, "b", wait_for_unknown_leader=True)
    # a leads a store whose epochs started before (not its first epoch): it decides p.
    await redis.store.acquire("x", TTL_MS)
    await redis.store.kept_history("x", 1)  # x's election recorded this Redis process
    await redis.store.release_lease("x", 1)
    assert await a.elect([node(1)]) == 2
    assert a.s.may_decide()
    p = a.pending(MakePod().Name("p").Req(1).Obj())
    b.s.pending_event("ADDED", p)
    api.gates["default/p"] = gate = asyncio.Event()
    await a.step()  # p's Binding is in flight
    assert await store_of(a) == ({"default/p": "reserved:(0,)"}, {0: "default/p"}, {})
    await redis.client.flushall()  # the lease and the epochs are gone
    assert await b.elect([node(1)]) == 1
    assert not b.s.may_decide()  # whoever led before is unknown: wait one lease
    q = b.pending(MakePod().Name("q").Req(1).Obj())
    a.s.pending_event("ADDED", q)
    gate.set()  # a's Binding lands within its bind timeout, inside that wait
    await a.settle()  # a's store write after the bind is fenced: b holds the lease
    assert a.s.sync.needed
    b.bound_seen("default/p")
    clock.now += 10.0
    await b.renew()
    assert not b.s.may_decide()
    clock.now += 5.0
    assert b.s.may_decide()
    assert await b.step() == "default/q"
    await b.settle()
    assert api.binds == [("default/p", "n", "0")]  # q waits: GPU 0 is p's
    assert b.s.book.stage("default/q") is Stage.PENDING and b.held("default/q") is None
    assert b.held("default/p") == ("n", [0])
    # p was bound by a Binding b did not send, after b's election reconcile: a reconcile of b
    # writes it to the store, at b's epoch.
    b.s.sync.request()
    clock.now += RECONCILE_MIN_S
    await b.s.reconcile_if_needed()
    assert await store_of(b) == ({"default/p": "bound:(0,)"}, {0: "default/p"}, {})
    assert [o.epoch for o in (await redis.store.owners("n")).values()] == [1]


# ---- 4. a node deleted before its pods -------------------------------------------------------


async def test_4_a_gang_deleted_after_its_node_leaves_nothing_in_redis(redis: Redis) -> None:
    r = redis.live()
    members = [
        MakePod().Name(f"g{i}").Req(1).Gang("job", 2).Bound("n", str(i)).Obj() for i in (0, 1)
    ]
    await r.elect([node(2)], members)
    assert await store_of(r) == (
        {"default/g0": "bound:(0,)", "default/g1": "bound:(1,)"},
        {0: "default/g0", 1: "default/g1"},
        {"default/job": "bound:default/g0,default/g1"},
    )
    r.s.node_event("DELETED", node(2))
    for m in members:
        r.s.bound_event("DELETED", m)
    r.s.node_event("ADDED", node(2))
    assert r.s.state.nodes["n"].free_mask == 0b11 and r.s.state.gang_bound == {}
    await r.settle()  # the store lets g0 and g1 go
    assert await store_of(r) == ({}, {}, {})
    for i in (0, 1):
        r.pending(MakePod().Name(f"h{i}").Req(1).Gang("job", 2).Obj())
    await r.step()
    await r.settle()
    assert sorted(k for k, _, _ in r.api.binds) == ["default/h0", "default/h1"]
    gpus = {k: int(d) for k, _, d in r.api.binds}
    assert {k: r.held(k) for k in gpus} == {k: ("n", [i]) for k, i in gpus.items()}
    assert await store_of(r) == (
        {k: f"bound:({i},)" for k, i in gpus.items()},
        {i: k for k, i in gpus.items()},
        {"default/job": "bound:default/h0,default/h1"},
    )


# ---- 5. a failed release after a failed bind ---------------------------------------------------


async def test_5_a_reservation_a_failed_release_left_is_freed_by_the_next_reconcile(
    redis: Redis,
) -> None:
    r = redis.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.refuse["default/a"] = 500
    r.api.gates["default/a"] = gate = asyncio.Event()
    await r.step()  # reserved; the Binding waits at the gate
    assert await store_of(r) == ({"default/a": "reserved:(0,)"}, {0: "default/a"}, {})
    async with busy(redis.url):  # Redis answers BUSY to everyone: the release fails
        gate.set()
        await r.settle()  # refused three times, then the release after the failed bind
        assert r.s.sync.needed  # the failure asked for a reconcile
    assert r.s.book.stage("default/a") is Stage.PENDING and r.held("default/a") is None
    assert await store_of(r) == ({"default/a": "reserved:(0,)"}, {0: "default/a"}, {})
    r.clock.now += RECONCILE_MIN_S
    await r.s.reconcile_if_needed()
    # Our own epoch's reservation, but the book holds nothing for it: freed.
    assert not r.s.sync.needed
    assert await store_of(r) == ({}, {}, {})


# ---- 6. a pod that ends while its (or a sibling's) bind is in flight ------------------------


async def test_6_a_gang_member_deleted_while_a_sibling_binds_is_freed_in_redis(
    redis: Redis,
) -> None:
    r = redis.live()
    await r.elect([node(2)])
    a = r.pending(MakePod().Name("a").Req(1).Gang("job", 2).Obj())
    r.pending(MakePod().Name("b").Req(1).Gang("job", 2).Obj())
    r.api.gates["default/b"] = gate = asyncio.Event()
    await r.step()
    await until(lambda: len(r.api.binds) == 1)  # a is bound, b's Binding waits
    assert (await r.gangs()) == {"default/job": "reserved:default/a,default/b"}
    r.bound_seen("default/a")
    r.api.delete("default/a")
    r.s.bound_event("DELETED", a)
    assert r.held("default/a") is None
    gate.set()
    await r.settle()
    assert r.held("default/a") is None and r.s.book.get("default/a") is None
    held = r.held("default/b")
    assert held is not None and r.s.state.gang_bound == {"default/job": {"default/b"}}
    gpu = held[1][0]
    # b is bound, a is gone: the gang has one of its two members (partial), not a's GPU.
    assert await store_of(r) == (
        {"default/b": f"bound:({gpu},)"},
        {gpu: "default/b"},
        {"default/job": "partial:default/b"},
    )


async def test_6_a_pod_deleted_while_its_own_bind_is_in_flight(redis: Redis) -> None:
    r = redis.live()
    await r.elect([node(1)])
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.gates["default/a"] = gate = asyncio.Event()
    await r.step()
    r.s.pending_event("MODIFIED", msgspec.structs.replace(a, deleting=True))
    assert r.held("default/a") is None
    r.api.delete("default/a")
    gate.set()
    await r.settle()
    assert r.s.book.entries == {} and r.s.state.nodes["n"].free_mask == 0b1
    assert await store_of(r) == ({}, {}, {})


# ---- 7. a reloaded reservation whose pod goes ------------------------------------------------


async def test_7_a_reloaded_reservation_of_a_pod_deleted_before_its_turn_is_freed(
    redis: Redis,
) -> None:
    r = redis.live()
    r.api.gates["default/p"] = asyncio.Event()
    p = await reloaded(r)
    assert await store_of(r) == ({"default/p": "reserved:(0,)"}, {0: "default/p"}, {})
    r.api.delete("default/p")
    r.s.pending_event("MODIFIED", msgspec.structs.replace(p, deleting=True))
    r.s.pending_event("DELETED", msgspec.structs.replace(p, deleting=True))
    await r.settle()
    assert r.held("default/p") is None and r.s.state.nodes["n"].free_mask == 0b1
    assert await store_of(r) == ({}, {}, {})
    r.clock.now += RECONCILE_MIN_S
    r.s.sync.request()
    await r.s.reconcile_if_needed()
    assert await store_of(r) == ({}, {}, {})  # never recorded as bound


async def test_7_a_reloaded_pod_that_left_the_pending_watch_is_read_back(redis: Redis) -> None:
    r = redis.live()
    r.api.gates["default/p"] = asyncio.Event()
    p = await reloaded(r)
    r.api.delete("default/p")
    r.s.pending_event("DELETED", p)  # deleted or bound? read it back
    await r.settle()
    assert r.held("default/p") is None and r.s.book.entries == {}
    assert await store_of(r) == ({}, {}, {})


async def test_7_a_reloaded_pod_the_old_leader_did_bind_is_kept_as_bound(redis: Redis) -> None:
    r = redis.live()
    r.api.gates["default/p"] = asyncio.Event()
    await reloaded(r)
    # The old leader's Binding had landed after all; the pod left the pending watch.
    r.api.pods["default/p"] = msgspec.structs.replace(
        r.api.pods["default/p"],
        node_name="n",
        annotations={"topo-scheduler.io/devices": "0"},
    )
    r.s.pending_event("DELETED", r.api.pods["default/p"])
    await r.settle()  # read back: bound, and the reconcile it asked for is due
    assert r.s.book.stage("default/p") is Stage.BOUND and r.held("default/p") == ("n", [0])
    r.clock.now += RECONCILE_MIN_S
    await r.s.reconcile_if_needed()
    assert await store_of(r) == ({"default/p": "bound:(0,)"}, {0: "default/p"}, {})


# ---- a burst of deletes ----------------------------------------------------------------------


async def test_a_burst_of_deletes_frees_every_record_without_a_reconcile(redis: Redis) -> None:
    """A Job of 200 pods deleted at once: every release reaches Redis (one call per pod opened
    a connection each, and past the client's pool of 100 they failed and waited for a
    reconcile, while their GPUs stayed owned in the store)."""
    r = redis.live()
    nodes = [MakeNode().Name(f"n{i}").GPUs(8).Obj() for i in range(25)]
    await r.elect(nodes)
    pods = [r.pending(MakePod().Name(f"p{i}").Req(1).Obj()) for i in range(200)]
    while await r.step() is not None:
        pass
    await r.settle()
    for pod in pods:
        r.bound_seen(pod.key)
    assert len(await r.records()) == 200
    for pod in pods:
        r.s.bound_event("DELETED", r.api.delete(pod.key))
    await r.settle()
    assert r.s.book.entries == {} and r.s.state.holdings == {}
    assert not r.s.sync.needed  # nothing failed
    assert await r.records() == {}
    assert [await redis.store.owners(n.name) for n in nodes] == [{}] * len(nodes)
