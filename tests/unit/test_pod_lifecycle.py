"""Issue 12's timelines, stepped by hand through the live scheduler's own parts: the memory
store, a manual clock and a fake apiserver whose first Binding for a pod wins (later ones get
409). Each test is one timeline; on the code before the pod book each ended with a GPU held by
two pods, GPUs held for good, or a never-bound pod recorded as bound."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from scheduler.service.podbook import TABLE, Event, PodBook, Stage
from scheduler.service.storesync import RECONCILE_MIN_S
from scheduler.state.base import StoreError
from scheduler.state.memory import MemoryStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import TTL_MS, Apiserver, Replica, node, quick_retries, reloaded, until


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    quick_retries(monkeypatch)


def live(**kw: Any) -> Replica:
    clock = ManualClock(0.0)
    return Replica(Apiserver(), MemoryStore(clock), clock, **kw)


# ---- 1. a re-list of bound pods that predates our Binding ----------------------------------


async def test_1_a_bound_relist_older_than_our_bind_does_not_free_its_gpus() -> None:
    r = live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    assert await r.step() == "default/a"
    await r.settle()
    assert r.api.binds == [("default/a", "n", "0")]
    r.s.pending_event("DELETED", r.api.pods["default/a"])  # our bind moved it off the watch
    assert r.s.book.stage("default/a") is Stage.ASSUMED
    # The bound watch re-lists (410 Gone); the LIST was answered before our Binding landed.
    r.s.replace_bound([])
    await r.settle()  # the pod is read back instead of freed
    assert r.s.book.stage("default/a") is Stage.BOUND
    assert r.held("default/a") == ("n", [0])
    r.pending(MakePod().Name("c").Req(1).Obj())
    assert await r.step() == "default/c"
    await r.settle()
    assert r.api.binds == [("default/a", "n", "0")]  # c waits: GPU 0 is a's
    assert r.s.explain("default/c").result == "unschedulable"  # type: ignore[union-attr]
    assert await r.records() == {"default/a": "bound:(0,)"}


async def test_1_a_bound_relist_frees_a_pod_that_really_left() -> None:
    r = live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    await r.step()
    await r.settle()
    r.api.delete("default/a")
    r.s.replace_bound([])
    await r.settle()
    assert r.s.book.get("default/a") is None and r.held("default/a") is None
    assert await r.records() == {}


# ---- 2. a bind counted as failed although the pod is bound ---------------------------------


async def test_2_a_409_from_a_previous_leaders_bind_keeps_where_it_is_bound() -> None:
    r = live()
    await r.elect([node(2)])
    p = r.pending(MakePod().Name("p").Req(1).Obj())
    r.api.gates["default/p"] = gate = asyncio.Event()
    assert await r.step() == "default/p"
    held = r.held("default/p")
    assert held is not None
    devices = held[1]
    other = "1" if devices == [0] else "0"
    # Meanwhile the previous leader's Binding lands (on the other GPU) and the watch shows it.
    r.api.pods["default/p"] = MakePod().Name("p").Req(1).Bound("n", other).Obj()
    r.bound_seen("default/p")
    gate.set()
    await r.settle()  # our Binding gets 409: bound elsewhere
    assert r.s.book.stage("default/p") is Stage.BOUND
    assert r.held("default/p") == ("n", [int(other)])
    r.clock.now += RECONCILE_MIN_S
    r.pending(MakePod().Name("q").Req(1).Obj())
    assert await r.step() == "default/q"
    await r.settle()
    assert r.held("default/q") == ("n", devices)  # not the GPU p really holds
    assert await r.records() == {
        "default/p": f"bound:({other},)",
        "default/q": f"bound:{tuple(devices)}",
    }
    assert p.uid == r.api.pods["default/p"].uid


async def test_2_a_pending_relist_older_than_our_bind_does_not_decide_the_pod_again() -> None:
    r = live()
    await r.elect([node(2)])
    stale = r.pending(MakePod().Name("a").Req(1).Obj())
    await r.step()
    await r.settle()
    r.bound_seen("default/a")
    r.s.replace_pending([stale])  # a LIST answered before our Binding
    assert await r.step() is None  # nothing to decide
    assert r.api.binds == [("default/a", "n", "1")] or len(r.api.binds) == 1
    assert r.s.book.stage("default/a") is Stage.BOUND and r.held("default/a") is not None


async def test_2_a_lost_bind_answer_with_the_read_back_failing_keeps_the_gpus() -> None:
    r = live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.lose_answer.add("default/a")
    r.api.reads_fail = True
    await r.step()
    # The retry gets 409 and the pod cannot be read back: the outcome is unknown.
    await until(lambda: not r.s.binder._slots.locked() and r.s._checking)
    assert r.s.book.stage("default/a") is Stage.BINDING
    assert r.held("default/a") == ("n", [0])
    r.pending(MakePod().Name("c").Req(1).Obj())
    await r.step()
    assert r.s.book.stage("default/c") is Stage.PENDING and r.held("default/c") is None
    r.api.reads_fail = False
    await r.settle()
    assert r.s.book.stage("default/a") is Stage.BOUND and r.held("default/a") == ("n", [0])
    assert len(r.api.binds) == 1


# ---- 3. the Binding is fenced by time --------------------------------------------------------


async def test_3_no_binding_is_sent_when_the_lease_could_end_before_it_completes() -> None:
    r = live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.clock.now = 10.5  # lease 15 s from 0, bind timeout 5 s: 4.5 s left
    assert r.s.binder.may_send() is False
    await r.step()
    await r.settle()
    assert r.api.binds == []
    assert r.s.book.stage("default/a") is Stage.PENDING and r.held("default/a") is None
    assert await r.records() == {}


async def test_3_a_binding_is_abandoned_at_the_bind_timeout() -> None:
    r = live(bind_timeout=0.02)
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.gates["default/a"] = asyncio.Event()  # never answers
    await r.step()
    await r.settle()  # three attempts, each cut at 0.02 s, then the pod is read back: pending
    assert r.api.binds == []
    assert r.s.book.stage("default/a") is Stage.PENDING


async def test_3_a_leader_after_a_flushed_store_waits_out_the_previous_leaders_binds() -> None:
    clock = ManualClock(0.0)
    api, store = Apiserver(), MemoryStore(clock)
    a = Replica(api, store, clock, "a", wait_for_unknown_leader=True)
    b = Replica(api, store, clock, "b", wait_for_unknown_leader=True)
    # a leads a store whose epochs started before (not its first epoch): it decides p.
    await store.acquire("x", TTL_MS)
    await store.release_lease("x", 1)
    await a.elect([node(1)])
    assert a.s.may_decide()
    p = a.pending(MakePod().Name("p").Req(1).Obj())
    b.s.pending_event("ADDED", p)
    api.gates["default/p"] = gate = asyncio.Event()
    await a.step()  # p's Binding is in flight
    # FLUSHALL: the lease and the epochs are gone; b takes the lease at epoch 1.
    store.__init__(clock)  # type: ignore[misc]
    assert await b.elect([node(1)]) == 1
    assert not b.s.may_decide()  # whoever led before is unknown: wait one lease
    q = b.pending(MakePod().Name("q").Req(1).Obj())
    a.s.pending_event("ADDED", q)
    gate.set()  # a's Binding lands within its bind timeout, inside that wait
    await a.settle()
    b.bound_seen("default/p")
    clock.now += 10.0
    await b.renew()
    assert not b.s.may_decide()
    clock.now += 5.0
    assert b.s.may_decide()
    assert await b.step() == "default/q"
    await b.settle()
    assert api.binds == [("default/p", "n", "0")]  # q waits: GPU 0 is p's
    assert b.s.book.stage("default/q") is Stage.PENDING


# ---- 4. a node deleted before its pods -------------------------------------------------------


async def test_4_pods_deleted_after_their_node_leave_nothing_behind() -> None:
    r = live()
    members = [
        MakePod().Name(f"g{i}").Req(1).Gang("job", 2).Bound("n", str(i)).Obj() for i in (0, 1)
    ]
    await r.elect([node(2)], members)
    r.s.node_event("DELETED", node(2))
    for m in members:
        r.s.bound_event("DELETED", m)
    r.s.node_event("ADDED", node(2))
    assert r.s.state.nodes["n"].free_mask == 0b11
    assert r.s.state.gang_bound == {}
    for i in (0, 1):
        r.pending(MakePod().Name(f"h{i}").Req(1).Gang("job", 2).Obj())
    await r.settle()  # the store lets g0 and g1 go
    assert await r.records() == {}
    await r.step()
    await r.settle()
    assert sorted(k for k, _, _ in r.api.binds) == ["default/h0", "default/h1"]


async def test_4_a_bound_relist_removes_pods_whose_node_was_deleted() -> None:
    r = live()
    pod = MakePod().Name("g0").Req(1).Bound("n", "0").Obj()
    await r.elect([node(1)], [pod])
    r.s.replace_nodes([])
    r.s.replace_bound([])
    r.s.replace_nodes([node(1)])
    assert r.s.state.nodes["n"].free_mask == 0b1
    assert r.s.book.entries == {}
    await r.settle()
    assert await r.records() == {}


# ---- 5. a failed release after a failed bind ---------------------------------------------------


class FlakyStore(MemoryStore):
    fail_release = False

    async def release(self, holder: str, epoch: int, uids: list[str]) -> None:
        if self.fail_release:
            raise StoreError("OOM command not allowed")
        await super().release(holder, epoch, uids)


async def test_5_a_reservation_a_failed_release_left_is_freed_by_the_next_reconcile() -> None:
    clock = ManualClock(0.0)
    store = FlakyStore(clock)
    r = Replica(Apiserver(), store, clock)
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.refuse["default/a"] = 500
    store.fail_release = True
    await r.step()
    await r.settle()
    assert await r.records() == {"default/a": "reserved:(0,)"}
    assert r.s.sync.needed  # the failure asked for a reconcile
    store.fail_release = False
    clock.now += RECONCILE_MIN_S
    await r.s.reconcile_if_needed()
    assert await r.records() == {}  # our own epoch's reservation, but nobody holds it


# ---- 6. a pod that ends while its (or a sibling's) bind is in flight ------------------------


async def test_6_a_gang_member_deleted_while_a_sibling_binds_is_freed_and_not_recorded() -> None:
    r = live()
    await r.elect([node(2)])
    a = r.pending(MakePod().Name("a").Req(1).Gang("job", 2).Obj())
    r.pending(MakePod().Name("b").Req(1).Gang("job", 2).Obj())
    r.api.gates["default/b"] = gate = asyncio.Event()
    await r.step()
    await until(lambda: len(r.api.binds) == 1)  # a is bound, b's Binding waits
    r.bound_seen("default/a")
    r.api.delete("default/a")
    r.s.bound_event("DELETED", a)
    assert r.held("default/a") is None
    gate.set()
    await r.settle()
    assert r.held("default/a") is None and r.s.book.get("default/a") is None
    assert await r.records() == {"default/b": f"bound:{tuple(r.held('default/b')[1])}"}  # type: ignore[index]


async def test_6_a_pod_deleted_while_its_own_bind_is_in_flight() -> None:
    r = live()
    await r.elect([node(1)])
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.gates["default/a"] = gate = asyncio.Event()
    await r.step()
    r.s.pending_event("MODIFIED", msgspec.structs.replace(a, deleting=True))
    assert r.held("default/a") is None
    r.api.delete("default/a")
    gate.set()
    await r.settle()
    assert r.s.book.entries == {} and await r.records() == {}


# ---- 7. a reloaded reservation whose pod goes ------------------------------------------------


async def test_7_a_reloaded_reservation_of_a_pod_deleted_before_its_turn_is_freed() -> None:
    r = live()
    r.api.gates["default/p"] = asyncio.Event()
    p = await reloaded(r)
    r.api.delete("default/p")
    r.s.pending_event("MODIFIED", msgspec.structs.replace(p, deleting=True))
    r.s.pending_event("DELETED", msgspec.structs.replace(p, deleting=True))
    await r.settle()
    assert r.held("default/p") is None and await r.records() == {}
    r.clock.now += RECONCILE_MIN_S
    r.s.sync.request()
    await r.s.reconcile_if_needed()
    assert await r.records() == {}  # never recorded as bound


async def test_7_a_reloaded_pod_that_left_the_pending_watch_is_read_back() -> None:
    r = live()
    r.api.gates["default/p"] = asyncio.Event()
    p = await reloaded(r)
    r.api.delete("default/p")
    r.s.pending_event("DELETED", p)  # deleted or bound? read it back
    await r.settle()
    assert r.held("default/p") is None and r.s.book.entries == {}
    assert await r.records() == {}


# ---- the table itself, and memory --------------------------------------------------------------


async def test_an_event_the_table_does_not_have_is_an_error_logged_and_counted() -> None:
    book = PodBook()
    assert (Stage.GONE, Event.TAKEN) not in TABLE
    assert book.handle("default/p", "u", Event.TAKEN, 0.0) is None
    assert book.unexpected[(Stage.GONE, Event.TAKEN)] == 1
    r = live()
    r.s.dispatch("default/p", "u", Event.BIND_OK)  # GONE: the table says release the store
    assert r.s.metrics.registry.get_sample_value(
        "scheduler_pod_book_unexpected_events_total", {"stage": "gone", "event": "bind-ok"}
    ) in (None, 0.0)
    r.s.dispatch("default/p", "u", Event.PLACED)
    assert (
        r.s.metrics.registry.get_sample_value(
            "scheduler_pod_book_unexpected_events_total", {"stage": "gone", "event": "placed"}
        )
        == 1.0
    )
    assert r.s.book.entries == {}
    await r.settle()


def test_every_stage_answers_every_watch_event() -> None:
    watch = [Event.PENDING_SEEN, Event.PENDING_LEFT, Event.PENDING_ENDED, Event.BOUND_ENDED]
    for stage in Stage:
        for event in watch:
            assert (stage, event) in TABLE, (stage, event)


async def test_per_pod_structures_shrink_back_after_pods_come_and_go() -> None:
    r = live()
    standby = Replica(r.api, r.store, r.clock, "standby")
    standby.s.replace_nodes([node(8)])
    standby.s.replace_bound([])
    await r.elect([node(8)])
    for i in range(300):
        pod = r.pending(MakePod().Name(f"p{i}").Req(1).Obj())
        standby.s.pending_event("ADDED", pod)
        if i % 2:
            await r.step()
            await r.settle()
            r.bound_seen(pod.key)
            standby.bound_seen(pod.key)
            r.s.bound_event("DELETED", r.api.pods[pod.key])
            standby.s.bound_event("DELETED", r.api.pods[pod.key])
        else:
            r.s.pending_event("DELETED", msgspec.structs.replace(pod, deleting=True))
            standby.s.pending_event("DELETED", msgspec.structs.replace(pod, deleting=True))
        r.api.delete(pod.key)
    await r.settle()
    for s in (r.s, standby.s):
        assert s.book.entries == {}
        assert s.state.holdings == {}
        assert all(n <= 64 for n in s.queue.sizes().values()), s.queue.sizes()
        assert s._checking == set()
    assert await r.records() == {}
