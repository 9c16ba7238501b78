"""The pod lifecycle's timelines (issue 12) and drifts (issue 20), stepped by hand through the
live scheduler's own parts on BOTH stores: the memory store and the service's ``RedisStore``
(its Lua scripts, built as app.py builds it) on the session's real redis-server. A manual clock
and a fake apiserver whose first Binding for a pod wins (later ones get 409) stand in for time
and Kubernetes (tests/lifecycle.py).

Each test is one interleaving and ends by comparing the snapshot and everything the store holds
(pod records, the owner of every GPU of the node, gang records). On the code before the fixes
each ended with a GPU held by two pods, GPUs held for good, a pod never scheduled, or a
never-bound pod recorded as bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from scheduler.config.tuning import Tuning
from scheduler.core.model import names
from scheduler.core.model.decisions import Decision
from scheduler.core.model.objects import PodGroupInput, PodInput
from scheduler.kube.podgroups import ObservedStatus, PodGroupPhase
from scheduler.service import cycle as cycle_module
from scheduler.service.podbook import Event, Stage
from scheduler.service.podgroups import Desired
from scheduler.state.base import Store, StoreError
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore
from tests.builders import MakeNode, MakePod
from tests.clock import ManualClock
from tests.lifecycle import (
    QUICK_RETRIES,
    TTL_MS,
    Apiserver,
    Replica,
    node,
    past_commit,
    reloaded,
    until,
)
from tests.redis_faults import busy


class Backend:
    """One store for the test (memory, or the session's redis-server emptied) and its clock."""

    def __init__(self, store: Store, clock: ManualClock, url: str = "") -> None:
        self.store = store
        self.clock = clock
        self.url = url

    def live(self, **kw: Any) -> Replica:
        return Replica(Apiserver(), self.store, self.clock, tuning=QUICK_RETRIES, **kw)

    def replica(self, api: Apiserver, holder: str, **kw: Any) -> Replica:
        return Replica(api, self.store, self.clock, holder, tuning=QUICK_RETRIES, **kw)

    async def flush(self) -> None:
        """FLUSHALL: the lease, the epochs and every record are gone."""
        if isinstance(self.store, MemoryStore):
            self.store.__init__(self.clock)  # type: ignore[misc]
        else:
            client = aioredis.Redis.from_url(self.url)
            await client.flushall()
            await client.aclose()

    @contextlib.asynccontextmanager
    async def failing(self) -> AsyncIterator[None]:
        """Every store write fails meanwhile (Redis: BUSY, a script that never ends)."""
        if not isinstance(self.store, MemoryStore):
            async with busy(self.url):
                yield
            return

        async def fail(*args: Any, **kw: Any) -> None:
            raise StoreError("BUSY")

        names = ("release", "mark_bound", "reserve_each", "reconcile")
        for name in names:
            setattr(self.store, name, fail)
        try:
            yield
        finally:
            for name in names:
                delattr(self.store, name)


@pytest.fixture(params=["memory", "redis"])
def redis_url(request: pytest.FixtureRequest) -> str:
    """ "" for the memory store; the session's redis-server otherwise (never skipped)."""
    if request.param == "memory":
        return ""
    return str(request.getfixturevalue("redis_server").url)


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[Backend]:
    clock = ManualClock(0.0)
    if not redis_url:
        yield Backend(MemoryStore(clock), clock)
        return
    client = aioredis.Redis.from_url(redis_url)
    await client.flushall()  # no test depends on another's leftovers
    await client.aclose()
    store = RedisStore.from_url(redis_url, prefix="life")  # as app.py builds it
    try:
        yield Backend(store, clock, redis_url)
    finally:
        await store.close()


async def store_of(r: Replica) -> tuple[dict[str, str], dict[int, str], dict[str, str]]:
    """Everything the store holds about node n: records, GPU owners, gangs."""
    return await r.records(), await r.owners("n"), await r.gangs()


async def run(r: Replica) -> None:
    while await r.step() is not None:
        pass
    await r.settle()


# ---- issue 12, 1: a re-list of bound pods that predates our Binding -----------------------


async def test_1_a_bound_relist_older_than_our_bind_keeps_the_gang(backend: Backend) -> None:
    r = backend.live()
    await r.elect([node(3)])
    for name in ("a", "b"):
        r.pending(MakePod().Name(name).Req(1).Gang("job", 2).Obj())
    assert await r.step() in ("default/a", "default/b")
    await r.settle()
    assert len(r.api.binds) == 2
    for key in ("default/a", "default/b"):
        r.s.intake.pending_event("DELETED", r.api.pods[key])  # our binds moved them off the watch
        assert r.s.book.stage(key) is Stage.ASSUMED
    # The bound watch re-lists (410 Gone); the LIST was answered before our Bindings landed.
    r.s.intake.replace_bound([], 0)
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
    assert r.s.explain("default/c").result == "unschedulable"  # type: ignore[union-attr]
    assert await store_of(r) == (
        {k: f"bound:({i},)" for k, i in gpus.items()},
        {i: k for k, i in gpus.items()},
        {"default/job": "bound:default/a,default/b"},
    )


async def test_1_a_bound_relist_frees_a_pod_that_really_left(backend: Backend) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    await r.step()
    await r.settle()
    assert await store_of(r) == ({"default/a": "bound:(0,)"}, {0: "default/a"}, {})
    r.api.delete("default/a")
    r.s.intake.replace_bound(*r.bound_list())
    await r.settle()
    assert r.s.book.get("default/a") is None and r.held("default/a") is None
    assert r.s.state.nodes["n"].free_mask == 0b1
    assert await store_of(r) == ({}, {}, {})


# ---- issue 12, 2: a bind counted as failed although the pod is bound ------------------------


async def test_2_a_409_from_a_previous_leaders_bind_keeps_where_it_is_bound(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([node(2)])
    p = r.pending(MakePod().Name("p").Req(1).Obj())
    r.api.gates["default/p"] = gate = asyncio.Event()
    assert await r.step() == "default/p"
    held = r.held("default/p")
    assert held is not None
    ours = held[1][0]
    other = 1 - ours
    # Meanwhile the previous leader's Binding lands (on the other GPU) and the watch shows it.
    r.api.land("default/p", "n", str(other))
    r.bound_seen("default/p")
    gate.set()
    await r.settle()  # our Binding gets 409: bound elsewhere
    assert r.s.book.stage("default/p") is Stage.BOUND
    assert r.held("default/p") == ("n", [other])
    r.clock.now += (
        Tuning().store_reconcile_seconds
    )  # the reconcile the 409 asked for runs at the next turn
    r.pending(MakePod().Name("q").Req(1).Obj())
    assert await r.step() == "default/q"
    await r.settle()
    assert r.held("default/q") == ("n", [ours])  # not the GPU p really holds
    assert await store_of(r) == (
        {"default/p": f"bound:({other},)", "default/q": f"bound:({ours},)"},
        {other: "default/p", ours: "default/q"},
        {},
    )
    assert p.uid == r.api.pods["default/p"].uid


async def test_2_a_pending_relist_older_than_our_bind_does_not_decide_again(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([node(2)])
    stale = r.pending(MakePod().Name("a").Req(1).Obj())
    await r.step()
    await r.settle()
    r.bound_seen("default/a")
    r.s.intake.replace_pending([stale])  # a LIST answered before our Binding
    assert await r.step() is None  # nothing to decide
    await r.settle()
    assert len(r.api.binds) == 1
    gpu = int(r.api.binds[0][2])
    assert r.s.book.stage("default/a") is Stage.BOUND and r.held("default/a") == ("n", [gpu])
    assert await store_of(r) == ({"default/a": f"bound:({gpu},)"}, {gpu: "default/a"}, {})


async def test_2_a_lost_bind_answer_with_the_read_back_failing_keeps_the_gpus(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.lose_answer.add("default/a")
    r.api.reads_fail = True
    await r.step()
    # The retry gets 409 and the pod cannot be read back: the outcome is unknown, and stays so
    # (the same Binding is sent again, 409 again) while reads fail.
    await until(lambda: r.s.metrics.bind_errors.labels(reason="409")._value.get() >= 3)
    assert r.s.book.stage("default/a") is Stage.BINDING
    assert await store_of(r) == ({"default/a": "reserved:(0,)"}, {0: "default/a"}, {})
    r.pending(MakePod().Name("c").Req(1).Obj())
    await r.step()
    assert r.s.book.stage("default/c") is Stage.PENDING and r.held("default/c") is None
    r.api.reads_fail = False
    await r.settle()  # the next 409's read-back: bound as we asked, so ours
    assert r.s.book.stage("default/a") is Stage.ASSUMED and r.held("default/a") == ("n", [0])
    assert len(r.api.binds) == 1
    assert await store_of(r) == ({"default/a": "bound:(0,)"}, {0: "default/a"}, {})


async def test_2_a_binding_the_bound_watch_shows_landed_is_marked_bound_in_the_store(
    backend: Backend,
) -> None:
    """Sim (the store check, the issue-20 auditor's store-disagrees; timeline 12.2 without its
    mutant): a's Binding lands but its answer is lost and reads fail, so its outcome stays
    unknown; the bound watch then shows a bound where it was reserved. Before the fix that
    moved a to BOUND without marking its reservation bound, expecting the binder's answer to
    (BOUND, BIND_OK); but the binder stops at a pod the book holds bound, so no answer came
    and the store kept a "reserved" record of a bound pod until the next election."""
    r = backend.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.lose_answer.add("default/a")
    r.api.reads_fail = True
    await r.step()
    await until(lambda: r.s.metrics.bind_errors.labels(reason="409")._value.get() >= 1)
    r.bound_seen("default/a")
    r.api.reads_fail = False
    await r.settle()
    assert r.s.book.stage("default/a") is Stage.BOUND and r.held("default/a") == ("n", [0])
    assert len(r.api.binds) == 1
    assert await store_of(r) == ({"default/a": "bound:(0,)"}, {0: "default/a"}, {})


# ---- issue 12, 3: the Binding is fenced by time ------------------------------------------------


async def test_3_no_binding_is_sent_when_the_lease_could_end_before_it_completes(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.clock.now = 10.5  # lease 15 s from 0, bind timeout 5 s: 4.5 s left
    assert r.s.binder.may_send() is False
    await r.step()
    await r.settle()
    assert r.api.binds == []
    assert r.s.book.stage("default/a") is Stage.PENDING and r.held("default/a") is None
    assert await store_of(r) == ({}, {}, {})


async def test_3_after_a_flushed_store_the_new_leader_waits_out_the_old_leaders_binds(
    backend: Backend,
) -> None:
    api = Apiserver()
    a = backend.replica(api, "a", wait_for_unknown_leader=True)
    b = backend.replica(api, "b", wait_for_unknown_leader=True)
    # a leads a store whose epochs started before (not its first epoch): it decides p.
    await backend.store.acquire("x", TTL_MS)
    await backend.store.kept_history("x", 1)  # x's election recorded this store's history
    await backend.store.mark_settled("x", 1)  # and x's wait, if any, over
    await backend.store.release_lease("x", 1)
    assert await a.elect([node(1)]) == 2
    assert a.s.may_decide()
    p = a.pending(MakePod().Name("p").Req(1).Obj())
    b.s.intake.pending_event("ADDED", p)
    api.gates["default/p"] = gate = asyncio.Event()
    await a.step()  # p's Binding is in flight
    assert await store_of(a) == ({"default/p": "reserved:(0,)"}, {0: "default/p"}, {})
    await backend.flush()  # the lease and the epochs are gone
    assert await b.elect([node(1)]) == 1
    assert not b.s.may_decide()  # a flushed store: one lease plus bindCommitSeconds first
    q = b.pending(MakePod().Name("q").Req(1).Obj())
    a.s.intake.pending_event("ADDED", q)
    gate.set()  # a's Binding lands within its bind timeout, inside that wait
    await a.settle()  # a's store write after the bind is fenced: b holds the lease
    b.bound_seen("default/p")
    backend.clock.now += 10.0
    await b.renew()
    assert not b.s.may_decide()
    backend.clock.now += 5.0
    assert not b.s.may_decide()  # one lease: a Binding stalled in etcd may still commit
    while backend.clock.now < 75.0:
        backend.clock.now += 5.0
        await b.renew()
    assert b.s.may_decide()
    assert await b.step() == "default/q"
    await b.settle()
    assert api.binds == [("default/p", "n", "0")]  # q waits: GPU 0 is p's
    assert b.s.book.stage("default/q") is Stage.PENDING and b.held("default/q") is None
    assert b.held("default/p") == ("n", [0])
    # p was bound by a Binding b did not send, after b's election reconcile: a reconcile of b
    # writes it to the store, at b's epoch.
    b.s.sync.request()
    backend.clock.now += Tuning().store_reconcile_seconds
    await b.s.sync.if_needed()
    assert await store_of(b) == ({"default/p": "bound:(0,)"}, {0: "default/p"}, {})
    assert [o.epoch for o in (await backend.store.owners("n")).values()] == [1]


# ---- issue 12, 4: a node deleted before its pods -----------------------------------------------


async def test_4_a_gang_deleted_after_its_node_leaves_nothing_behind(backend: Backend) -> None:
    r = backend.live()
    members = [
        r.api.create(MakePod().Name(f"g{i}").Req(1).Gang("job", 2).Bound("n", str(i)).Obj())
        for i in (0, 1)
    ]
    await r.elect([node(2)], members)
    assert await store_of(r) == (
        {"default/g0": "bound:(0,)", "default/g1": "bound:(1,)"},
        {0: "default/g0", 1: "default/g1"},
        {"default/job": "bound:default/g0,default/g1"},
    )
    r.s.intake.node_event("DELETED", node(2))
    for m in members:
        r.s.intake.bound_event("DELETED", r.api.delete(m.key))
    r.s.intake.node_event("ADDED", node(2))
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


async def test_4_a_bound_relist_removes_pods_whose_node_was_deleted(backend: Backend) -> None:
    r = backend.live()
    pod = r.api.create(MakePod().Name("g0").Req(1).Bound("n", "0").Obj())
    await r.elect([node(1)], [pod])
    r.s.intake.replace_nodes([])
    r.api.delete(pod.key)
    r.s.intake.replace_bound(*r.bound_list())
    r.s.intake.replace_nodes([node(1)])
    assert r.s.state.nodes["n"].free_mask == 0b1
    assert r.s.book.entries == {}
    await r.settle()
    assert await store_of(r) == ({}, {}, {})


# ---- issue 12, 5: a failed release after a failed bind -----------------------------------------


async def test_5_a_reservation_a_failed_release_left_is_freed_by_the_next_reconcile(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.refuse["default/a"] = 500
    r.api.gates["default/a"] = gate = asyncio.Event()
    await r.step()  # reserved; the Binding waits at the gate
    assert await store_of(r) == ({"default/a": "reserved:(0,)"}, {0: "default/a"}, {})
    async with backend.failing():  # the release fails
        gate.set()
        await r.settle()  # refused three times, then the release after the failed bind
        assert r.s.sync.needed  # the failure asked for a reconcile
    assert r.s.book.stage("default/a") is Stage.PENDING and r.held("default/a") is None
    assert await store_of(r) == ({"default/a": "reserved:(0,)"}, {0: "default/a"}, {})
    r.clock.now += Tuning().store_reconcile_seconds
    await r.s.sync.if_needed()
    # Our own epoch's reservation, but the book holds nothing for it: freed.
    assert not r.s.sync.needed
    assert await store_of(r) == ({}, {}, {})


# ---- issue 12, 6: a pod that ends while its (or a sibling's) bind is in flight -----------------


async def test_6_a_gang_member_deleted_while_a_sibling_binds_is_freed(backend: Backend) -> None:
    r = backend.live()
    await r.elect([node(2)])
    r.pending(MakePod().Name("a").Req(1).Gang("job", 2).Obj())
    r.pending(MakePod().Name("b").Req(1).Gang("job", 2).Obj())
    r.api.gates["default/b"] = gate = asyncio.Event()
    await r.step()
    await until(lambda: len(r.api.binds) == 1)  # a is bound, b's Binding waits
    assert (await r.gangs()) == {"default/job": "reserved:default/a,default/b"}
    r.bound_seen("default/a")
    r.s.intake.bound_event("DELETED", r.api.delete("default/a"))
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


async def test_6_a_pod_deleted_while_its_own_bind_is_in_flight(backend: Backend) -> None:
    r = backend.live()
    await r.elect([node(1)])
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.gates["default/a"] = gate = asyncio.Event()
    await r.step()
    r.s.intake.pending_event("MODIFIED", r.api.stamp(msgspec.structs.replace(a, deleting=True)))
    assert r.held("default/a") is None
    r.api.delete("default/a")
    gate.set()
    await r.settle()
    assert r.s.book.entries == {} and r.s.state.nodes["n"].free_mask == 0b1
    assert await store_of(r) == ({}, {}, {})


# ---- issue 12, 7: a reloaded reservation whose pod goes ----------------------------------------


async def test_7_a_reloaded_reservation_of_a_pod_deleted_before_its_turn_is_freed(
    backend: Backend,
) -> None:
    r = backend.live()
    r.api.gates["default/p"] = asyncio.Event()
    await reloaded(r)
    assert await store_of(r) == ({"default/p": "reserved:(0,)"}, {0: "default/p"}, {})
    gone = r.api.delete("default/p")
    r.s.intake.pending_event("MODIFIED", msgspec.structs.replace(gone, deleting=True))
    r.s.intake.pending_event("DELETED", msgspec.structs.replace(gone, deleting=True))
    await r.settle()
    assert r.held("default/p") is None and r.s.state.nodes["n"].free_mask == 0b1
    assert await store_of(r) == ({}, {}, {})
    r.clock.now += Tuning().store_reconcile_seconds
    r.s.sync.request()
    await r.s.sync.if_needed()
    assert await store_of(r) == ({}, {}, {})  # never recorded as bound


async def test_7_a_reloaded_pod_that_left_the_pending_watch_is_read_back(
    backend: Backend,
) -> None:
    r = backend.live()
    r.api.gates["default/p"] = asyncio.Event()
    await reloaded(r)
    r.s.intake.pending_event("DELETED", r.api.delete("default/p"))  # deleted or bound?
    await r.settle()
    assert r.held("default/p") == ("n", [0])  # the bound watch, or a read once settled, says
    await past_commit(r)  # read back: gone
    assert r.held("default/p") is None and r.s.book.entries == {}
    assert await store_of(r) == ({}, {}, {})


async def test_7_a_reloaded_pod_the_old_leader_did_bind_is_kept_as_bound(
    backend: Backend,
) -> None:
    r = backend.live()
    r.api.gates["default/p"] = asyncio.Event()
    await reloaded(r)
    # The old leader's Binding had landed after all; the pod left the pending watch.
    r.s.intake.pending_event("DELETED", r.api.land("default/p", "n", "0"))
    await past_commit(r)  # read back: bound, and the reconcile it asked for is due
    assert r.s.book.stage("default/p") is Stage.BOUND and r.held("default/p") == ("n", [0])
    r.clock.now += Tuning().store_reconcile_seconds
    await r.s.sync.if_needed()
    assert await store_of(r) == ({"default/p": "bound:(0,)"}, {0: "default/p"}, {})


# ---- a burst of deletes, and memory --------------------------------------------------------------


async def test_a_burst_of_deletes_frees_every_record_without_a_reconcile(
    backend: Backend,
) -> None:
    """A Job of 200 pods deleted at once: every release reaches the store (one call per pod
    opened a Redis connection each, and past the client's pool of 100 they failed and waited
    for a reconcile, while their GPUs stayed owned in the store)."""
    r = backend.live()
    nodes = [MakeNode().Name(f"n{i}").GPUs(8).Obj() for i in range(25)]
    await r.elect(nodes)
    pods = [r.pending(MakePod().Name(f"p{i}").Req(1).Obj()) for i in range(200)]
    await run(r)
    for pod in pods:
        r.bound_seen(pod.key)
    assert len(await r.records()) == 200
    for pod in pods:
        r.s.intake.bound_event("DELETED", r.api.delete(pod.key))
    await r.settle()
    assert r.s.book.entries == {} and r.s.state.holdings == {}
    assert not r.s.sync.needed  # nothing failed
    assert await r.records() == {}
    assert [await backend.store.owners(n.name) for n in nodes] == [{}] * len(nodes)


async def test_per_pod_structures_shrink_back_after_pods_come_and_go(backend: Backend) -> None:
    r = backend.live()
    standby = backend.replica(r.api, "standby")
    standby.s.intake.replace_nodes([node(8)])
    standby.s.intake.replace_bound([])
    await r.elect([node(8)])
    for i in range(300):
        pod = r.pending(MakePod().Name(f"p{i}").Req(1).Obj())
        standby.s.intake.pending_event("ADDED", pod)
        if i % 3 == 0:
            await r.step()
            await r.settle()
            r.bound_seen(pod.key)
            standby.bound_seen(pod.key)
            gone = r.api.delete(pod.key)
            r.s.intake.bound_event("DELETED", gone)
            standby.s.intake.bound_event("DELETED", gone)
        elif i % 3 == 1:
            gone = r.api.delete(pod.key)
            r.s.intake.pending_event("DELETED", msgspec.structs.replace(gone, deleting=True))
            standby.s.intake.pending_event("DELETED", msgspec.structs.replace(gone, deleting=True))
        else:
            # Another scheduler's pod without GPUs comes, runs and finishes beside ours.
            other = job_pod(r.api, f"j{i}")
            r.s.intake.bound_event("ADDED", other)
            standby.s.intake.bound_event("ADDED", other)
            gone = msgspec.structs.replace(r.api.delete(pod.key), deleting=True)
            r.s.intake.pending_event("DELETED", gone)
            standby.s.intake.pending_event("DELETED", gone)
            done = r.api.stamp(msgspec.structs.replace(r.api.pods[other.key], phase="Succeeded"))
            r.s.intake.bound_event("DELETED", done)
            standby.s.intake.bound_event("DELETED", done)
            r.api.delete(other.key)
    await r.settle()
    for s in (r.s, standby.s):
        assert s.book.entries == {}
        assert s.state.holdings == {} and s.state.index.records == {}
        assert all(n <= 64 for n in s.queue.sizes().values()), s.queue.sizes()
        assert s.sizes()["loop"] == {"tasks": 0, "events": 0}
    assert await r.records() == {}


# ---- issue 20, drift 1: pods the book does not schedule are uncharged when they leave ----------


def job_pod(api: Apiserver, name: str, cpu: str = "4") -> PodInput:
    """A Job's pod of default-scheduler, without GPUs, bound to node n by that scheduler."""
    pod = MakePod().Name(name).Requests(cpu=cpu).Bound("n").Obj()
    return api.create(msgspec.structs.replace(pod, scheduler_name="default-scheduler"))


def cpu_node() -> Any:
    return MakeNode().Name("n").GPUs(1).Allocatable({"nvidia.com/gpu": 1, "cpu": 4}).Obj()


async def test_drift1_pods_of_another_scheduler_are_uncharged_when_they_finish_or_go(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([cpu_node()])
    # Three 4-cpu Job pods of default-scheduler come and go one after the other: one finishes
    # (it leaves the bound watch's selector: DELETED, phase Succeeded), one is deleted, one
    # finishes while the bound watch is down (the re-list lacks it).
    for name, end in (("j1", "finished"), ("j2", "deleted"), ("j3", "relisted")):
        r.s.intake.bound_event("ADDED", job_pod(r.api, name))
        assert r.s.state.nodes["n"].requested["cpu"] == 4000
        if end == "finished":
            done = msgspec.structs.replace(r.api.pods[f"default/{name}"], phase="Succeeded")
            r.s.intake.bound_event("DELETED", r.api.stamp(done))
            r.api.delete(f"default/{name}")
        elif end == "deleted":
            r.s.intake.bound_event("DELETED", r.api.delete(f"default/{name}"))
        else:
            r.api.delete(f"default/{name}")
            r.s.intake.replace_bound(*r.bound_list())
        assert r.s.book.get(f"default/{name}") is None
        assert "cpu" not in r.s.state.nodes["n"].requested
    # Our 1-GPU pod asking 1 cpu fits (it met "1 Insufficient cpu" and preempted the deleted
    # pods, forever), with no eviction.
    r.pending(MakePod().Name("a").Req(1).Requests(cpu="1").Priority(100).Obj())
    await run(r)
    assert r.api.binds == [("default/a", "n", "0")]
    assert r.api.evictions == []
    assert await store_of(r) == ({"default/a": "bound:(0,)"}, {0: "default/a"}, {})
    # Memory: nothing of the Job pods stays; while one runs, it has its own entry.
    r.s.intake.bound_event("ADDED", job_pod(r.api, "j4", cpu="1"))
    assert r.s.book.stage("default/j4") is Stage.OTHER
    r.s.intake.bound_event("DELETED", r.api.delete("default/j4"))
    assert set(r.s.book.entries) == {"default/a"}
    assert set(r.s.state.index.records) == {"default/a"}


# ---- issue 20, drift 2: news older than what the book knows ------------------------------------


async def relist_with_a_recreated_pod(backend: Backend, bind_it: bool) -> tuple[Replica, PodInput]:
    """w (uid1) is bound on GPU 0; the bound watch re-lists, its LIST taken now; w is deleted
    and recreated (uid2), the pending watch shows it (and we bind it on GPUs 0 and 1 when
    ``bind_it``); then the LIST's page with uid1 arrives, and the LIST ends."""
    r = backend.live()
    w1 = r.api.create(MakePod().Name("w").Req(1).Bound("n", "0").Obj())
    await r.elect([node(2)], [w1])
    page, listed_at = r.bound_list()
    r.s.intake.bound_list_begin()
    r.api.delete(w1.key)
    r.pending(msgspec.structs.replace(MakePod().Name("w").Req(2).Obj(), uid="uid2"))
    await r.settle()  # uid1 is let go: another UID under its name means it was deleted
    if bind_it:
        assert await r.step() == "default/w"
        await r.settle()
        assert r.api.binds == [("default/w", "n", "0,1")]
        r.s.intake.pending_event("DELETED", r.api.pods["default/w"])  # our bind moved it off
    r.s.intake.bound_list_page(page)  # uid1, older than uid2
    entry = r.s.book.get("default/w")
    assert entry is not None and entry.uid == "uid2"
    r.s.intake.bound_list_end(listed_at)
    await r.settle()
    return r


async def test_drift2_a_stale_list_page_of_an_old_uid_does_not_replace_the_bound_new_pod(
    backend: Backend,
) -> None:
    r = await relist_with_a_recreated_pod(backend, bind_it=True)
    assert r.held("default/w") == ("n", [0, 1])
    r.clock.now += Tuning().store_reconcile_seconds
    r.pending(MakePod().Name("c").Req(1).Obj())
    await run(r)
    assert r.api.binds == [("default/w", "n", "0,1")]  # c is not bound on w's GPU 1
    assert r.s.book.stage("default/c") is Stage.PENDING
    assert await store_of(r) == (
        {"default/w": "bound:(0, 1)"},
        {0: "default/w", 1: "default/w"},
        {},
    )


async def test_drift2_a_stale_list_page_of_an_old_uid_does_not_drop_the_pending_new_pod(
    backend: Backend,
) -> None:
    r = await relist_with_a_recreated_pod(backend, bind_it=False)
    entry = r.s.book.get("default/w")
    assert entry is not None and entry.uid == "uid2" and entry.stage is Stage.PENDING
    assert r.held("default/w") is None  # uid1's GPU 0 is not charged again
    await run(r)
    assert r.api.binds == [("default/w", "n", "0,1")]  # and uid2 is scheduled
    assert await store_of(r) == (
        {"default/w": "bound:(0, 1)"},
        {0: "default/w", 1: "default/w"},
        {},
    )


async def test_drift2_a_list_older_than_a_409_read_back_does_not_free_the_pod(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("p").Req(1).Obj())
    r.api.gates["default/p"] = gate = asyncio.Event()
    await r.step()
    # The bound watch re-lists: the LIST is taken now, before anyone bound p.
    page, listed_at = r.bound_list()
    r.s.intake.bound_list_begin()
    r.api.land("default/p", "n", "0")  # a previous leader's Binding (not ours) lands first
    gate.set()
    await r.settle()  # ours gets 409; the read-back says bound elsewhere: the book knows it
    assert r.s.book.stage("default/p") is Stage.BOUND
    r.s.intake.bound_list_page(page)
    r.s.intake.bound_list_end(listed_at)  # the LIST lacks p: it predates what the book knows
    assert r.s.book.stage("default/p") is Stage.BOUND and r.held("default/p") == ("n", [0])
    r.clock.now += Tuning().store_reconcile_seconds
    r.pending(MakePod().Name("c").Req(1).Obj())
    await run(r)
    assert r.api.binds == []  # GPU 0 is not bound twice: c waits
    assert r.s.book.stage("default/c") is Stage.PENDING
    assert await store_of(r) == ({"default/p": "bound:(0,)"}, {0: "default/p"}, {})


async def test_drift2_news_of_an_old_uid_does_not_end_the_new_pods_nomination(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([node(8)])
    for name in ("low-0", "low-1"):
        r.pending(MakePod().Name(name).Req(4).Gang("low", 2).Priority(10).Obj())
    await run(r)
    for name in ("low-0", "low-1"):
        r.bound_seen(f"default/{name}")
    old = r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    r.s.intake.pending_event("DELETED", r.api.delete(old.key))  # deleted before its turn, recreated
    new = r.pending(msgspec.structs.replace(old, uid="uid2"))
    await run(r)
    assert r.api.evictions == ["default/low-0", "default/low-1"]
    assert "default/big" in r.s.state.nominations
    # News of the old UID arrive late: its DELETED event again, and a re-read's answer.
    r.s.intake.pending_event("DELETED", old)
    r.s.effects.dispatch(old.key, old.uid, Event.CHECKED_GONE)
    assert r.s.state.nominations["default/big"].pod == new.key
    entry = r.s.book.get("default/big")
    assert entry is not None and entry.uid == "uid2" and entry.nomination is not None
    assert [n.uid for n in (await backend.store.nominations(0)).values()] == ["uid2"]


# ---- issue 20, drift 3: a graceful handover keeps the old leader's last binds -------------------


async def handover(backend: Backend) -> tuple[Apiserver, Replica]:
    """Leader a binds p on GPU 0 of node n; standby b's pending watch drops p (bound), its bound
    watch has not shown it yet; a drains and hands its lease over (a graceful handover)."""
    api = Apiserver()
    a = backend.replica(api, "a")
    b = backend.replica(api, "b")
    b.s.intake.replace_nodes([node(1)])
    b.s.intake.replace_bound([], 0)
    await a.elect([node(1)])
    p = a.pending(MakePod().Name("p").Req(1).Obj())
    b.s.intake.pending_event("ADDED", p)
    await a.step()
    await a.settle()
    assert api.binds == [("default/p", "n", "0")]
    b.s.intake.pending_event("DELETED", api.pods["default/p"])
    assert b.s.book.get("default/p") is None
    await a.s.drain()
    await backend.store.release_lease("a", a.leadership.epoch or 0)
    return api, b


async def test_drift3_the_new_leader_keeps_a_pod_the_old_leader_bound_just_before_handing_over(
    backend: Backend,
) -> None:
    api, b = await handover(backend)
    c = b.pending(MakePod().Name("c").Req(1).Obj())
    await b.elect([node(1)], [])
    assert b.held("default/p") == ("n", [0])  # inherited from the store, until a read says
    assert b.s.book.stage("default/p") in (Stage.INHERITED, Stage.BOUND)
    await run(b)
    assert api.binds == [("default/p", "n", "0")]  # c is not bound on p's GPU
    assert b.s.book.stage(c.key) is Stage.PENDING
    assert b.s.book.stage("default/p") is Stage.BOUND  # the re-read said bound
    b.bound_seen("default/p")  # and the bound watch says so later
    b.clock.now += Tuning().store_reconcile_seconds
    await b.s.sync.if_needed()
    assert await store_of(b) == ({"default/p": "bound:(0,)"}, {0: "default/p"}, {})


async def test_drift3_an_inherited_record_whose_pod_is_gone_is_freed(backend: Backend) -> None:
    api, b = await handover(backend)
    api.delete("default/p")  # deleted before b's bound watch ever showed it
    await b.elect([node(1)], [])
    await b.settle()  # the re-read: gone
    assert b.s.book.entries == {} and b.held("default/p") is None
    assert await store_of(b) == ({}, {}, {})


# ---- issue 20, drift 4: an uncertain bind keeps its GPUs until its outcome is known -------------


async def test_drift4_a_binding_abandoned_at_its_timeout_that_commits_later_is_ours(
    backend: Backend,
) -> None:
    r = backend.live(bind_timeout=0.02)
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.stalled["default/a"] = None  # etcd stalls: no Binding of a is answered
    await r.step()
    # Three attempts cut at the timeout; the read-back says pending, which settles nothing.
    await until(lambda: r.s.metrics.bind_errors.labels(reason="timeout")._value.get() >= 4)
    assert r.s.book.stage("default/a") is Stage.BINDING and r.held("default/a") == ("n", [0])
    r.pending(MakePod().Name("c").Req(1).Obj())
    assert await r.step() == "default/c"
    assert r.held("default/c") is None  # GPU 0 is still a's
    r.api.end_stall("default/a")  # the first Binding commits
    await r.settle()  # the same Binding, sent again, gets 409 on a pod bound as we asked
    assert r.api.binds == [("default/a", "n", "0")]
    assert r.s.book.stage("default/a") is Stage.ASSUMED
    assert r.s.book.stage("default/c") is Stage.PENDING and r.held("default/c") is None
    assert await store_of(r) == ({"default/a": "bound:(0,)"}, {0: "default/a"}, {})


async def test_drift4_a_resent_binding_that_lands_first_is_ours(backend: Backend) -> None:
    r = backend.live(bind_timeout=0.02)
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.gates["default/a"] = gate = asyncio.Event()  # no answer, and nothing commits
    await r.step()
    await until(lambda: r.s.metrics.bind_errors.labels(reason="timeout")._value.get() >= 4)
    assert r.s.book.stage("default/a") is Stage.BINDING and r.held("default/a") == ("n", [0])
    gate.set()
    await r.settle()
    assert r.api.binds == [("default/a", "n", "0")]
    assert r.s.book.stage("default/a") is Stage.ASSUMED


# ---- issue 20, drift 6: one crashing unit does not strand its batch ----------------------------


async def test_drift6_a_unit_that_crashes_fails_alone_and_the_batch_is_reserved(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = backend.live()
    await r.elect([node(4)])
    for name in ("a", "b", "c"):
        r.pending(MakePod().Name(name).Req(1).Obj())
    decide = cycle_module.decide

    def crashing(state: Any, unit: Any) -> Decision:
        if unit.pods[0].name == "b":
            raise RuntimeError("injected")
        return decide(state, unit)

    monkeypatch.setattr(cycle_module, "decide", crashing)
    key = r.s.queue.pop()
    assert key == "default/a"
    await r.s.cycle.schedule(key, r.s._next_ready)  # a, b (crashes), c in one batch
    await r.settle()
    assert sorted(k for k, _, _ in r.api.binds) == ["default/a", "default/c"]
    assert r.s.book.in_stages(frozenset({Stage.RESERVING})) == []
    assert r.s.book.stage("default/b") is Stage.PENDING and r.held("default/b") is None
    assert r.s.queue.counts()["backoff"] == 1
    monkeypatch.setattr(cycle_module, "decide", decide)
    r.clock.now += 1.0  # its backoff
    await r.renew()
    await run(r)
    assert sorted(k for k, _, _ in r.api.binds) == ["default/a", "default/b", "default/c"]
    records, _, _ = await store_of(r)
    assert sorted(records) == ["default/a", "default/b", "default/c"]
    assert all(v.startswith("bound:") for v in records.values())


# ---- issue 20, smaller items --------------------------------------------------------------------


async def test_a_newly_bound_pod_wakes_a_pod_waiting_for_affinity_to_it(backend: Backend) -> None:
    r = backend.live()
    node_n = MakeNode().Name("n").GPUs(1).Label("kubernetes.io/hostname", "n").Obj()
    await r.elect([node_n])
    r.pending(MakePod().Name("a").Req(1).PodAffinity("kubernetes.io/hostname", app="db").Obj())
    await run(r)
    assert r.s.explain("default/a").result == "unschedulable"  # type: ignore[union-attr]
    assert r.s.queue.counts()["unschedulable"] == 1
    db = MakePod().Name("db").Label("app", "db").Requests(cpu="1").Bound("n").Obj()
    r.s.intake.bound_event(
        "ADDED", r.api.create(msgspec.structs.replace(db, scheduler_name="other"))
    )
    assert r.s.queue.counts()["unschedulable"] == 0  # woken, not left for the 5-minute cap
    r.clock.now += 1.0  # its backoff since its attempt
    await r.renew()
    await run(r)
    assert r.api.binds == [("default/a", "n", "0")]


async def test_pod_scheduled_false_is_written_only_on_the_pod_of_its_uid(backend: Backend) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("huge").Req(4).Obj())
    await r.step()
    await r.settle()
    assert r.api.unschedulable["default/huge"].startswith("0/1 nodes are available")
    r.pending(MakePod().Name("big").Req(2).Obj())
    await r.step()  # unschedulable; the report is spawned
    # Before it is sent, the pod is deleted and recreated under the same name.
    r.s.intake.pending_event("DELETED", r.api.delete("default/big"))
    new = r.pending(msgspec.structs.replace(MakePod().Name("big").Req(1).Obj(), uid="uid2"))
    await r.settle()
    assert "default/big" not in r.api.unschedulable  # the new pod is not told it failed
    await r.step()
    await r.settle()
    assert r.api.binds == [("default/big", "n", "0")] and r.api.pods[new.key].uid == "uid2"
    assert "default/big" not in r.api.unschedulable


# ---- issue 30, timeline 5: a restarted gang's terminating members are not bound members -------


async def test_issue30_5_a_restarted_gang_is_not_bound_one_at_a_time_beside_its_terminating_members(
    backend: Backend,
) -> None:
    """A JobSet or Kubeflow restart of a PodGroup gang (minMember 2): the old members are deleted
    and still terminating (their GPUs still held) when the new ones, under new names, arrive.
    The new members are the whole minimum again: placed together once there is room, never one
    at a time. Before the fix the snapshot counted the terminating members as bound: job-b0 was
    bound alone on the one free GPU and job-b1 waited "beyond its minimum", a partial gang
    holding GPUs (the cross-gang deadlock the gangs' rule 3 exists to prevent)."""
    r = backend.live()
    await r.elect([node(3)])
    group = PodGroupInput(names.POD_GROUP_API, "default", "job", min_member=2, uid="pg")
    r.s.state.inputs.pod_groups.put(group)
    r.s.statuses.group_set(group, ObservedStatus("Pending"))

    def member(name: str) -> PodInput:
        return MakePod().Name(name).Req(1).Label(names.POD_GROUP_LABEL, "job").Obj()

    for name in ("job-a0", "job-a1"):
        r.pending(member(name))
    await run(r)
    for key in ("default/job-a0", "default/job-a1"):
        r.api.pods[key] = r.api.stamp(msgspec.structs.replace(r.api.pods[key], phase="Running"))
        r.bound_seen(key)
    assert r.s.statuses.desired(group.key) == Desired(PodGroupPhase.RUNNING, 2, 2)
    # The restart: both old members are deleted; the bound watch shows them terminating.
    for key in ("default/job-a0", "default/job-a1"):
        going = r.api.stamp(msgspec.structs.replace(r.api.pods[key], deleting=True))
        r.api.pods[key] = going
        r.s.intake.bound_event("MODIFIED", going)
    assert {k: r.held(k) for k in ("default/job-a0", "default/job-a1")} == {
        "default/job-a0": ("n", [0]),
        "default/job-a1": ("n", [1]),
    }  # still held until they are gone
    for name in ("job-b0", "job-b1"):
        r.pending(member(name))
    await run(r)
    assert sorted(k for k, _, _ in r.api.binds) == ["default/job-a0", "default/job-a1"]
    # Their group has left the old members: nothing scheduled or running (as kube's controllers
    # count a pod being deleted).
    assert r.s.statuses.desired(group.key) == Desired(PodGroupPhase.PENDING, 0, 0)
    assert r.held("default/job-b0") is None and r.held("default/job-b1") is None
    for key in ("default/job-b0", "default/job-b1"):
        explanation = r.s.explain(key)
        assert explanation is not None and explanation.result == "unschedulable"
        assert "beyond its minimum" not in explanation.reason
    records, owners, _ = await store_of(r)
    assert sorted(records) == ["default/job-a0", "default/job-a1"]
    assert owners == {0: "default/job-a0", 1: "default/job-a1"}
    # The old members are gone: the new gang is placed whole.
    for key in ("default/job-a0", "default/job-a1"):
        r.s.intake.bound_event("DELETED", r.api.delete(key))
    await r.settle()
    r.clock.now += 1.0  # their backoff since their attempt
    await r.renew()
    await run(r)
    binds = {k: (n, d) for k, n, d in r.api.binds if k.startswith("default/job-b")}
    assert sorted(binds) == ["default/job-b0", "default/job-b1"]
    for key in binds:
        r.bound_seen(key)
    assert sorted(r.s.state.gang_bound["default/job"]) == ["default/job-b0", "default/job-b1"]
    records, owners, gangs = await store_of(r)
    assert sorted(records) == ["default/job-b0", "default/job-b1"]
    assert all(v.startswith("bound:") for v in records.values())
    assert sorted(owners.values()) == ["default/job-b0", "default/job-b1"]
    assert gangs == {"default/job": "bound:default/job-b0,default/job-b1"}
    assert r.s.statuses.desired(group.key) == Desired(PodGroupPhase.SCHEDULED, 2, 0)


async def test_issue30_5_a_restarted_gang_is_not_counted_from_a_bound_view_older_than_its_members(
    backend: Backend,
) -> None:
    """The same restart (sim seed 5), with the bound pods' watch behind the pending one (a
    re-list, or a lag: two streams, no order between them). The old members' deletions came
    before the new pods, but only the new pods are delivered: the bound view still shows the old
    members running. Counted, they made job-b0 and job-b1 members beyond the minimum: before the
    fix job-b0 was bound alone on the one free GPU. Bound members count only in a view at least
    as new as the pending members they are counted for: the new ones wait until the bound watch
    catches up (its events, then a bookmark), then as a whole gang for room."""
    r = backend.live()
    await r.elect([node(3)])
    group = PodGroupInput(names.POD_GROUP_API, "default", "job", min_member=2, uid="pg")
    r.s.state.inputs.pod_groups.put(group)

    def member(name: str) -> PodInput:
        return MakePod().Name(name).Req(1).Label(names.POD_GROUP_LABEL, "job").Obj()

    for name in ("job-a0", "job-a1"):
        r.pending(member(name))
    await run(r)
    for key in ("default/job-a0", "default/job-a1"):
        r.api.pods[key] = r.api.stamp(msgspec.structs.replace(r.api.pods[key], phase="Running"))
        r.bound_seen(key)
    # The restart: both old members are deleted, then the new ones created; only the new ones
    # are delivered (the bound watch re-lists, its LIST taken before the deletions).
    going = []
    for key in ("default/job-a0", "default/job-a1"):
        r.api.pods[key] = r.api.stamp(msgspec.structs.replace(r.api.pods[key], deleting=True))
        going.append(r.api.pods[key])
    for name in ("job-b0", "job-b1"):
        r.pending(member(name))
    await run(r)
    assert sorted(k for k, _, _ in r.api.binds) == ["default/job-a0", "default/job-a1"]
    assert r.held("default/job-b0") is None and r.held("default/job-b1") is None
    assert r.s.queue.counts()["backoff"] == 2  # retried once the bound view has caught up
    # The bound watch catches up: the deletions, then a bookmark. The old members are not the
    # gang's bound members: the new ones are the whole minimum, and one GPU is free.
    for pod in going:
        r.s.intake.bound_event("MODIFIED", pod)
    r.s.intake.bound_progress(r.api.version)
    r.clock.now += 1.0  # their backoff since their attempt
    await r.renew()
    await run(r)
    assert sorted(k for k, _, _ in r.api.binds) == ["default/job-a0", "default/job-a1"]
    for key in ("default/job-b0", "default/job-b1"):
        explanation = r.s.explain(key)
        assert explanation is not None and "beyond its minimum" not in explanation.reason
    # The old members are gone: the new gang is placed whole.
    for key in ("default/job-a0", "default/job-a1"):
        r.s.intake.bound_event("DELETED", r.api.delete(key))
    await r.settle()
    r.clock.now += 2.0  # their backoff since their last attempt
    await r.renew()
    await run(r)
    binds = sorted(k for k, _, _ in r.api.binds if k.startswith("default/job-b"))
    assert binds == ["default/job-b0", "default/job-b1"]
    records, owners, _ = await store_of(r)
    assert sorted(records) == ["default/job-b0", "default/job-b1"]
    assert sorted(owners.values()) == ["default/job-b0", "default/job-b1"]
