"""The store contract (scheduler/state/base.py), run against both stores.

The same tests drive MemoryStore (with a hand-stepped clock) and RedisStore (on a real
redis-server), so the service can use either without knowing which.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from scheduler.state.base import (
    Claim,
    Conflict,
    Fenced,
    GangRecord,
    History,
    Owner,
    ShareClaim,
    StoreError,
    Unavailable,
)
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore
from tests.clock import ManualClock
from tests.redis_faults import busy, out_of_memory

TTL = 10_000


class Harness:
    """A store plus a way to make its lease lapse without waiting for wall time, and a way to
    lose everything (Redis: FLUSHALL; memory: a brand-new store)."""

    def __init__(self, store: Any, expire: Any, flush: Any) -> None:
        self.store = store
        self.expire = expire
        self.flush = flush


@pytest.fixture(params=["memory", "redis"])
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "memory":
        clock = ManualClock(1000.0)

        async def expire_memory() -> None:
            clock.now += TTL / 1000 + 1

        async def flush_memory() -> None:
            harness.store = MemoryStore(clock)

        harness = Harness(MemoryStore(clock), expire_memory, flush_memory)
        yield harness
        return
    server = request.getfixturevalue("redis_server")
    client = aioredis.Redis.from_url(server.url)
    await client.flushall()  # no test depends on another's leftovers
    store = RedisStore(client, prefix="t")

    async def expire_redis() -> None:
        await client.delete("t:lease")  # what PX expiry does, without waiting for it

    async def flush_redis() -> None:
        await client.flushall()

    try:
        yield Harness(store, expire_redis, flush_redis)
    finally:
        await store.close()


def claim(uid: str, node: str = "n", devices: tuple[int, ...] = (), **kw: Any) -> Claim:
    return Claim(uid=uid, pod=f"default/{uid}", node=node, devices=devices, **kw)


def member(uid: str, job: str = "job", replicas: int = 2, **kw: Any) -> Claim:
    return claim(uid, gang=f"default/{job}", replicas=replicas, **kw)


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


async def test_kept_history_is_fenced_and_false_until_an_election_recorded_it(
    h: Harness,
) -> None:
    s = h.store
    assert await s.acquire("a", TTL) == 1
    # A new store: nothing before to keep, no election before.
    assert await s.kept_history("a", 1) == History(False, "")
    with pytest.raises(Fenced):
        await s.kept_history("b", 1)
    await h.expire()
    assert await s.acquire("b", TTL) == 2
    # The same store served both elections; the last one was a's.
    assert await s.kept_history("b", 2) == History(True, "a|1")
    await h.flush()
    assert await h.store.acquire("c", TTL) == 1
    assert await h.store.kept_history("c", 1) == History(False, "")  # flushed: all lost


async def test_an_election_is_settled_only_once_its_leader_marked_it(h: Harness) -> None:
    """``mark_settled`` is fenced and marks the election ``kept_history`` recorded last; the
    next election reads it in ``History.settled``, and its own starts unsettled."""
    s = h.store
    assert await s.acquire("a", TTL) == 1
    await s.kept_history("a", 1)
    await h.expire()
    assert await s.acquire("b", TTL) == 2
    assert await s.kept_history("b", 2) == History(True, "a|1", settled=False)  # a never marked
    with pytest.raises(Fenced):
        await s.mark_settled("a", 1)
    await s.mark_settled("b", 2)
    await h.expire()
    assert await s.acquire("c", TTL) == 3
    assert await s.kept_history("c", 3) == History(True, "b|2", settled=True)
    await h.expire()
    assert await s.acquire("d", TTL) == 4
    assert await s.kept_history("d", 4) == History(True, "c|3", settled=False)


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


async def test_a_unit_re_reserving_may_swap_its_pods_gpus(h: Harness) -> None:
    """A gang decided afresh after a failover (its members RELOADED) may give one member the
    GPUs another member's old reservation holds: the unit's own earlier claims do not refuse it
    (the e2e chaos failure: "GPU 1 on node dgx-0 is held by pod UID <job11-r2>" for job11's
    r1 and r2 swapped, a refusal loop until the reconcile freed both and another gang took
    their GPUs, leaving job11 partly bound). A pod outside the unit still refuses it."""
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reserve("a", e, [claim("r1", "n5", (5, 6)), claim("r2", "n0", (1, 2))])
    await h.store.reserve("a", e, [claim("r1", "n0", (1, 2)), claim("r2", "n5", (5, 6))])
    records = await h.store.records()
    assert (records["r1"].claim.node, records["r1"].claim.devices) == ("n0", (1, 2))
    assert (records["r2"].claim.node, records["r2"].claim.devices) == ("n5", (5, 6))
    assert {i: o.uid for i, o in (await h.store.owners("n0")).items()} == {1: "r1", 2: "r1"}
    assert {i: o.uid for i, o in (await h.store.owners("n5")).items()} == {5: "r2", 6: "r2"}
    with pytest.raises(Conflict, match="held by pod UID r2"):
        await h.store.reserve("a", e, [claim("other", "n5", (5,))])


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
    report = await h.store.reconcile("b", e2, truth, ["still-pending", "in-flight"])
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
    again = await h.store.reconcile("b", e2, truth, ["still-pending", "in-flight"])
    assert again.added == 0  # idempotent


async def test_reconcile_reports_gpus_claimed_twice_by_the_truth(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    report = await h.store.reconcile(
        "a", e, [claim("p1", devices=(0,)), claim("p2", devices=(0,))], []
    )
    assert report.added == 2
    assert report.conflicts == ("pod default/p2: GPU 0 on node n is held by pod UID p1",)


async def test_releasing_one_of_two_claims_on_a_gpu_leaves_the_other_its_owner(h: Harness) -> None:
    """Sim timeline sim2-uncharge-clears-shared-bits: an election reconcile writes two bound
    claims on one GPU, the real y (already recorded) and a stale x its lagging book still has
    bound, which becomes the GPU's owner. x is released: the GPU must stay y's. Before the fix
    releasing x removed the GPU's owner while y's record stayed, and the store accepted c's
    reservation of y's GPU."""
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reconcile("a", e, [claim("y", devices=(1,), gang="default/j")], [])
    report = await h.store.reconcile(
        "a", e, [claim("y", devices=(1,), gang="default/j"), claim("x", devices=(1,))], []
    )
    assert report.conflicts == ("pod default/x: GPU 1 on node n is held by pod UID y",)
    await h.store.release("a", e, ["x"])
    assert set(await h.store.records()) == {"y"}
    assert await h.store.owners("n") == {1: Owner("y", "default/j", e)}, "y's GPU has no owner"
    with pytest.raises(Conflict):
        await h.store.reserve("a", e, [claim("c", devices=(1,))])
    await h.store.release("a", e, ["y"])  # the last claim on it gone: the GPU is free
    assert await h.store.owners("n") == {}
    await h.store.reserve("a", e, [claim("c", devices=(1,))])


# ---- several units in one call (reserve_each) ----------------------------------------------


async def test_reserve_each_writes_independent_units_in_one_call(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    out = await h.store.reserve_each(
        "a",
        e,
        [
            [claim("p1", devices=(0,))],
            [claim("p2", "m", (0, 1)), claim("p3", devices=(1,))],
            [claim("s1", shares=(share(2, 60),))],
        ],
    )
    assert out == [None, None, None]
    records = await h.store.records()
    assert {u: (r.state, r.epoch) for u, r in records.items()} == {
        u: ("reserved", e) for u in ("p1", "p2", "p3", "s1")
    }
    assert await h.store.owners("n") == {0: Owner("p1", "", e), 1: Owner("p3", "", e)}
    assert await h.store.owners("m") == {0: Owner("p2", "", e), 1: Owner("p2", "", e)}
    # A later unit sees what the earlier ones wrote, its own pod's earlier claim included: p1
    # moves to GPU 4 and the next unit takes the GPU 0 the move freed.
    out = await h.store.reserve_each(
        "a", e, [[claim("p1", devices=(4,))], [claim("q", devices=(0,))]]
    )
    assert out == [None, None]
    owners = await h.store.owners("n")
    assert (owners[0].uid, owners[4].uid) == ("q", "p1")
    assert await h.store.reserve_each("a", e, []) == []


async def test_reserve_each_judges_a_unit_against_the_units_before_it(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    out = await h.store.reserve_each(
        "a", e, [[claim("a1", devices=(0, 1))], [claim("b1", devices=(1, 2))]]
    )
    assert out == [None, "GPU 1 on node n is held by pod UID a1"]
    assert set(await h.store.records()) == {"a1"}
    assert await h.store.owners("n") == {0: Owner("a1", "", e), 1: Owner("a1", "", e)}
    # The same for shared cards: the second share finds no room left by the first.
    out = await h.store.reserve_each(
        "a",
        e,
        [
            [claim("s1", shares=(share(3, 60, "fixed-share", 1),))],
            [claim("s2", shares=(share(3, 50, "fixed-share", 1),))],
            [claim("w", devices=(3,))],
        ],
    )
    assert out == [
        None,
        "GPU 3 on node n has no room for the share",
        "GPU 3 on node n is shared by other pods",
    ]
    assert set(await h.store.records()) == {"a1", "s1"}
    # The reason is the one reserve puts in Conflict.
    with pytest.raises(Conflict) as refused:
        await h.store.reserve("a", e, [claim("b1", devices=(1, 2))])
    assert str(refused.value) == "GPU 1 on node n is held by pod UID a1"


async def test_reserve_each_refuses_a_gang_unit_whole_and_writes_the_others(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reserve("a", e, [claim("p0", devices=(3,))])
    out = await h.store.reserve_each(
        "a",
        e,
        [
            [claim("x", devices=(5,))],
            [member("g1", devices=(0,)), member("g2", devices=(3,))],  # GPU 3 is p0's
            [claim("solo", devices=(0,))],  # GPU 0 is free: g1 was not written
        ],
    )
    assert out == [None, "GPU 3 on node n is held by pod UID p0", None]
    assert set(await h.store.records()) == {"p0", "x", "solo"}
    assert await h.store.owners("n") == {
        0: Owner("solo", "", e),
        3: Owner("p0", "", e),
        5: Owner("x", "", e),
    }
    assert await h.store.gangs() == {}  # no record for the refused gang


async def test_reserve_each_of_a_fenced_holder_writes_nothing(h: Harness) -> None:
    e1 = await h.store.acquire("a", TTL)
    assert e1 is not None
    await h.store.reserve("a", e1, [claim("p1", devices=(0,))])
    units = [[claim("x", devices=(1,))], [member("g1", devices=(2,)), member("g2", devices=(3,))]]
    await h.expire()
    with pytest.raises(Fenced):  # lapsed, nobody else yet
        await h.store.reserve_each("a", e1, units)
    e2 = await h.store.acquire("b", TTL)
    assert e2 is not None
    for holder, epoch in (("a", e1), ("b", e1), ("a", e2)):
        with pytest.raises(Fenced):
            await h.store.reserve_each(holder, epoch, units)
    with pytest.raises(Fenced):
        await h.store.reserve_each("a", e1, [])
    assert set(await h.store.records()) == {"p1"}
    assert await h.store.owners("n") == {0: Owner("p1", "", e1)}
    assert await h.store.gangs() == {}


async def test_reserve_each_settles_the_gang_records_of_its_units(h: Harness) -> None:
    e1 = await h.store.acquire("a", TTL)
    assert e1 is not None
    await h.store.reserve("a", e1, [member("g1", devices=(0,)), member("g2", devices=(1,))])
    await h.store.mark_bound("a", e1, ["g1", "g2"])
    await h.store.release("a", e1, ["g2"])  # g2's pod was deleted: the gang is partial
    assert (await h.store.gangs())["default/job"].state == "partial"
    await h.expire()
    e2 = await h.store.acquire("b", TTL)
    assert e2 is not None
    out = await h.store.reserve_each(
        "b",
        e2,
        [
            [member("g3", devices=(1,))],  # job's missing member re-planned
            [member("k1", "other", 3, devices=(2,)), member("k2", "other", 3, devices=(3,))],
            [member("r1", "refused", 2, devices=(4,)), member("r2", "refused", 2, devices=(0,))],
            [member("k3", "other", 3, devices=(5,))],  # other's last member, a unit of its own
        ],
    )
    assert out == [None, None, "GPU 0 on node n is held by pod UID g1", None]
    assert await h.store.gangs() == {
        "default/job": GangRecord("reserved", e2, ("g1", "g3"), 2),
        "default/other": GangRecord("reserved", e2, ("k1", "k2", "k3"), 3),
    }
    await h.store.mark_bound("b", e2, ["g3", "k1", "k2", "k3"])
    gangs = await h.store.gangs()
    assert (gangs["default/job"].state, gangs["default/other"].state) == ("bound", "bound")


async def test_one_units_shares_of_a_card_are_each_counted_once(h: Harness) -> None:
    # A card holding 40% for s0; a gang of three members taking 20% each fits (100%).
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reserve("a", e, [claim("s0", shares=(share(0, 40, mem=100),))])
    gang = [member(f"m{i}", replicas=3, shares=(share(0, 20, mem=100),)) for i in (1, 2, 3)]
    assert await h.store.reserve_each("a", e, [gang]) == [None]
    assert set(await h.store.records()) == {"s0", "m1", "m2", "m3"}
    with pytest.raises(Conflict, match="no room"):
        await h.store.reserve("a", e, [claim("s3", shares=(share(0, 1),))])


# ---- per-GPU owners ------------------------------------------------------------------------


async def test_each_whole_gpu_names_its_pod_gang_and_epoch(h: Harness) -> None:
    e1 = await h.store.acquire("a", TTL)
    assert e1 is not None
    await h.store.reserve("a", e1, [member("g1", devices=(0, 1)), claim("p1", devices=(2,))])
    await h.store.reserve("a", e1, [claim("s", shares=(share(3, 10),))])  # shares own no GPU
    assert await h.store.owners("n") == {
        0: Owner("g1", "default/job", e1),
        1: Owner("g1", "default/job", e1),
        2: Owner("p1", "", e1),
    }
    assert await h.store.owners("elsewhere") == {}
    await h.expire()
    e2 = await h.store.acquire("b", TTL)
    assert e2 is not None
    # The new leader re-charges GPU 2 to the truth's pod: the ownership carries its epoch.
    report = await h.store.reconcile("b", e2, [claim("p2", devices=(2,))], ["g1"])
    assert report.freed == 2 and report.kept == 1  # p1 and s freed; g1 still pending
    owners = await h.store.owners("n")
    assert owners[2] == Owner("p2", "", e2) and owners[0] == Owner("g1", "default/job", e1)
    await h.store.release("b", e2, ["g1"])
    assert await h.store.owners("n") == {2: Owner("p2", "", e2)}
    # The owner's gang and epoch do not confuse the conflict check.
    with pytest.raises(Conflict, match=r"GPU 2 on node n is held by pod UID p2$"):
        await h.store.reserve("b", e2, [member("x", devices=(2,))])


# ---- gang records --------------------------------------------------------------------------


async def test_a_gang_is_reserved_all_or_nothing_with_its_record(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reserve("a", e, [claim("p1", devices=(1,))])
    with pytest.raises(Conflict):
        await h.store.reserve("a", e, [member("g1", devices=(0,)), member("g2", devices=(1,))])
    assert await h.store.gangs() == {}  # no record for a reservation that did not happen
    assert set(await h.store.records()) == {"p1"}
    await h.store.reserve("a", e, [member("g2", devices=(2,)), member("g1", devices=(0,))])
    assert await h.store.gangs() == {
        "default/job": GangRecord("reserved", e, ("g1", "g2"), replicas=2)
    }
    records = await h.store.records()
    assert records["g1"].claim.gang == "default/job" and records["g1"].claim.replicas == 2


async def test_a_gang_turns_bound_when_its_last_member_is_bound(h: Harness) -> None:
    e1 = await h.store.acquire("a", TTL)
    assert e1 is not None
    await h.store.reserve("a", e1, [member("g1", devices=(0,)), member("g2", devices=(1,))])
    await h.store.mark_bound("a", e1, ["g1"])
    assert (await h.store.gangs())["default/job"].state == "reserved"
    await h.expire()
    e2 = await h.store.acquire("b", TTL)
    assert e2 is not None
    await h.store.mark_bound("b", e2, ["g2", "p-without-gang"])
    assert await h.store.gangs() == {"default/job": GangRecord("bound", e2, ("g1", "g2"), 2)}


async def test_a_gang_record_goes_with_the_release_of_its_last_member(h: Harness) -> None:
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reserve("a", e, [member("g1", devices=(0,)), member("g2", devices=(1,))])
    await h.store.reserve("a", e, [member("h1", "other", 1, devices=(2,))])
    await h.store.mark_bound("a", e, ["g1"])
    # g2's bind failed: it is released; the gang is incomplete, not bound.
    await h.store.release("a", e, ["g2"])
    gangs = await h.store.gangs()
    assert gangs["default/job"] == GangRecord("partial", e, ("g1",), 2)
    assert gangs["default/other"] == GangRecord("reserved", e, ("h1",), 1)
    # The missing member is re-planned, reserved and bound: the gang is complete.
    await h.store.reserve("a", e, [member("g3", devices=(1,))])
    assert (await h.store.gangs())["default/job"] == GangRecord("reserved", e, ("g1", "g3"), 2)
    await h.store.mark_bound("a", e, ["g3"])
    assert (await h.store.gangs())["default/job"].state == "bound"
    await h.store.release("a", e, ["g1"])
    assert (await h.store.gangs())["default/job"].members == ("g3",)
    await h.store.release("a", e, ["g3", "h1"])
    assert await h.store.gangs() == {}
    assert await h.store.records() == {}


async def test_reconcile_rebuilds_gang_records_after_a_flushall(h: Harness) -> None:
    e1 = await h.store.acquire("a", TTL)
    assert e1 is not None
    await h.store.reserve("a", e1, [member("g1", devices=(0,)), member("g2", devices=(1,))])
    await h.store.mark_bound("a", e1, ["g1", "g2"])
    await h.store.reserve("a", e1, [member("old", "stale", 1, devices=(5,))])
    await h.flush()
    assert await h.store.gangs() == {} and await h.store.records() == {}
    e2 = await h.store.acquire("b", TTL)
    assert e2 is not None
    # The apiserver's bound pods, with their gangs from their labels; job3 lost a member.
    truth = [
        member("g1", devices=(0,)),
        member("g2", devices=(1,)),
        member("k1", "job3", 3, devices=(2,)),
        member("k2", "job3", 3, devices=(3,)),
    ]
    report = await h.store.reconcile("b", e2, truth, [])
    assert report.added == 4
    assert await h.store.gangs() == {
        "default/job": GangRecord("bound", e2, ("g1", "g2"), 2),
        "default/job3": GangRecord("partial", e2, ("k1", "k2"), 3),
    }
    owners = await h.store.owners("n")
    assert owners[0] == Owner("g1", "default/job", e2)
    # A member being bound (the caller keeps its reservation) is kept, and its gang says so.
    await h.store.reserve("b", e2, [member("k3", "job3", 3, devices=(4,))])
    await h.store.reconcile("b", e2, truth, ["k3"])
    assert (await h.store.gangs())["default/job3"] == GangRecord(
        "reserved", e2, ("k1", "k2", "k3"), 3
    )


async def test_reconcile_drops_the_records_of_gangs_no_pod_backs(h: Harness) -> None:
    e1 = await h.store.acquire("a", TTL)
    assert e1 is not None
    await h.store.reserve("a", e1, [member("g1", devices=(0,)), member("g2", devices=(1,))])
    await h.store.reserve("a", e1, [member("w1", "waiting", 1, devices=(2,))])
    await h.expire()
    e2 = await h.store.acquire("b", TTL)
    assert e2 is not None
    await h.store.reconcile("b", e2, [], ["w1"])  # the gang's pods are gone; w1 still pending
    assert await h.store.gangs() == {"default/waiting": GangRecord("reserved", e2, ("w1",), 1)}


# ---- node inventories ----------------------------------------------------------------------


async def test_node_inventories_are_written_fenced_and_dropped(h: Harness) -> None:
    e1 = await h.store.acquire("a", TTL)
    assert e1 is not None
    await h.store.update_nodes("a", e1, {"n1": '{"vendor":"nvidia"}', "n2": "{}"}, [])
    await h.store.update_nodes("a", e1, {"n2": '{"vendor":"metax"}'}, ["n1", "never-seen"])
    assert await h.store.nodes() == {"n2": '{"vendor":"metax"}'}
    await h.expire()
    e2 = await h.store.acquire("b", TTL)
    assert e2 is not None
    with pytest.raises(Fenced):
        await h.store.update_nodes("a", e1, {"n3": "{}"}, ["n2"])
    with pytest.raises(Fenced):
        await h.store.reconcile("a", e1, [], [], {"n3": "{}"})
    assert await h.store.nodes() == {"n2": '{"vendor":"metax"}'}
    await h.store.reconcile("b", e2, [], [])  # without nodes: inventories left alone
    assert await h.store.nodes() == {"n2": '{"vendor":"metax"}'}
    # On taking leadership: every current node's inventory, and nodes that are gone dropped.
    await h.store.reconcile("b", e2, [], [], {"n3": "{}", "n4": '{"vendor":"nvidia"}'})
    assert await h.store.nodes() == {"n3": "{}", "n4": '{"vendor":"nvidia"}'}
    await h.flush()
    e3 = await h.store.acquire("c", TTL)
    assert e3 is not None
    await h.store.reconcile("c", e3, [], [], {"n3": "{}"})
    assert await h.store.nodes() == {"n3": "{}"}


async def test_a_claims_resources_come_back_as_written(h: Harness) -> None:
    # The next leader charges a reloaded reservation to the node's allocatable from these.
    e = await h.store.acquire("a", TTL)
    assert e is not None
    gpus = (("aliyun.com/gpu", 1), ("nvidia.com/gpu", 2))
    await h.store.reserve("a", e, [claim("p1", devices=(0, 1, 2), resources=gpus)])
    await h.store.reserve("a", e, [claim("p2", devices=(3,))])
    records = await h.store.records()
    assert records["p1"].claim.resources == gpus
    assert records["p2"].claim.resources == ()
    # Reconcile keeps the truth's resources too.
    truth = [claim("p3", devices=(4,), resources=(("nvidia.com/gpu", 1),))]
    await h.store.reconcile("a", e, truth, ["p1"])
    records = await h.store.records()
    assert records["p1"].claim.resources == gpus
    assert records["p3"].claim.resources == (("nvidia.com/gpu", 1),)


async def test_a_claim_stored_before_resources_existed_is_read_back(redis_server: Any) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    store = RedisStore(client, prefix="O")
    try:
        old = '{"uid":"u1","pod":"default/p","node":"n","devices":[0],"shares":[],"gang":""}'
        await client.hset("O:pods", "u1", old)
        await client.hset("O:pstate", "u1", "reserved|1")
        records = await store.records()
        assert records["u1"].claim == Claim("u1", "default/p", "n", (0,))
        assert records["u1"].claim.resources == ()
    finally:
        await store.close()


# ---- the Redis key layout (redis_store.py's docstring) -------------------------------------


async def test_redis_key_layout(redis_server: Any) -> None:
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    await client.flushall()
    store = RedisStore(aioredis.Redis.from_url(redis_server.url), prefix="L")
    try:
        e = await store.acquire("a", TTL)
        assert e is not None
        await store.reserve("a", e, [member("g1", devices=(0,)), member("g2", devices=(1,))])
        await store.reserve("a", e, [claim("p1", "m", (3,))])
        await store.mark_bound("a", e, ["g1", "g2"])
        await store.update_nodes("a", e, {"n": '{"vendor":"nvidia"}'}, [])
        assert await client.hgetall("L:gpu:n") == {
            "0": f"g1|default/job|{e}",
            "1": f"g2|default/job|{e}",
        }
        assert await client.hgetall("L:gpu:m") == {"3": f"p1||{e}"}
        assert await client.hgetall("L:gang:default/job") == {
            "state": "bound",
            "epoch": str(e),
            "replicas": "2",
            "members": "g1,g2",
        }
        assert await client.smembers("L:gangs") == {"default/job"}
        assert await client.hgetall("L:nodes") == {"n": '{"vendor":"nvidia"}'}
        assert await client.hgetall("L:pstate") == {
            "g1": f"bound|{e}",
            "g2": f"bound|{e}",
            "p1": f"reserved|{e}",
        }
        await store.release("a", e, ["g1", "g2", "p1"])
        left = set(await client.keys("L:*"))
        assert left == {"L:lease", "L:epoch", "L:nodes"}
    finally:
        await store.close()
        await client.aclose()


async def test_redis_errors_reach_callers_as_store_errors(redis_server: Any) -> None:
    """Redis's own errors (BUSY, OOM, WRONGTYPE...) are StoreErrors like a lost connection: the
    service's `except StoreError` sees every store failure, none ends a task unhandled."""
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    store = RedisStore(aioredis.Redis.from_url(redis_server.url), prefix="E")
    try:
        e = await store.acquire("a", TTL)
        assert e is not None
        async with out_of_memory(redis_server.url):
            with pytest.raises(Unavailable, match="maxmemory"):
                await store.update_nodes("a", e, {"n": "{}"}, [])
            with pytest.raises(Unavailable, match="maxmemory"):
                await store.reserve("a", e, [claim("p1", devices=(0,))])
        async with busy(redis_server.url):
            calls = [
                store.acquire("b", TTL),
                store.renew("a", e, TTL),
                store.reserve("a", e, [claim("p1", devices=(0,))]),
                store.mark_bound("a", e, ["p1"]),
                store.release("a", e, ["p1"]),
                store.reconcile("a", e, [], [], {}),
                store.update_nodes("a", e, {}, ["n"]),
                store.records(),
                store.gangs(),
                store.owners("n"),
                store.nodes(),
                store.release_lease("a", e),
            ]
            for call in calls:
                with pytest.raises(Unavailable, match="BUSY"):
                    await call
        await client.set("E:nodes", "not a hash")
        for call in [store.nodes(), store.update_nodes("a", e, {"n": "{}"}, [])]:
            with pytest.raises(StoreError, match="WRONGTYPE"):
                await call
        await client.delete("E:nodes")
        await store.update_nodes("a", e, {"n": "{}"}, [])  # and all is well again
        assert await store.nodes() == {"n": "{}"}
    finally:
        await store.close()
        await client.aclose()


async def test_reconciling_a_store_written_before_gang_records_leaves_no_empty_gang(
    redis_server: Any,
) -> None:
    """A store written before gang records existed (bare-UID owners, no P:gang:*, no P:gangs):
    the reconcile frees a gang member whose pod is gone, keeps a pending one, adds a bound one;
    every gang record left has members, and the GPU owners of the old format still read."""
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    await client.flushall()
    store = RedisStore(aioredis.Redis.from_url(redis_server.url), prefix="G")
    try:
        e = await store.acquire("a", TTL)
        assert e is not None

        def old_claim(uid: str, gang: str, device: int) -> str:  # no `replicas` back then
            return (
                f'{{"uid":"{uid}","pod":"default/{uid}","node":"n","devices":[{device}],'
                f'"shares":[],"gang":"{gang}"}}'
            )

        await client.hset(
            "G:pods",
            mapping={
                "gone1": old_claim("gone1", "default/gone", 0),
                "gone2": old_claim("gone2", "default/gone", 1),
                "wait1": old_claim("wait1", "default/waiting", 2),
                "solo": old_claim("solo", "", 3),
            },
        )
        await client.hset(
            "G:pstate",
            mapping={
                "gone1": "bound|1",
                "gone2": "bound|1",
                "wait1": "reserved|1",
                "solo": "bound|1",
            },
        )
        await client.hset(
            "G:gpu:n", mapping={"0": "gone1", "1": "gone2", "2": "wait1", "3": "solo"}
        )
        truth = [member("b1", "bound", 1, devices=(4,)), claim("solo", devices=(3,))]
        report = await store.reconcile("a", e, truth, ["wait1"])
        assert (report.added, report.freed, report.kept) == (2, 2, 1)
        gang_keys = {k async for k in client.scan_iter("G:gang:*")}
        assert gang_keys == {"G:gang:default/bound", "G:gang:default/waiting"}
        for key in gang_keys:
            assert await client.hget(key, "members")
        assert await client.smembers("G:gangs") == {"default/bound", "default/waiting"}
        assert await store.gangs() == {
            "default/bound": GangRecord("bound", e, ("b1",), 1),
            "default/waiting": GangRecord("reserved", e, ("wait1",), 0),
        }
        owners = await store.owners("n")
        assert owners == {
            2: Owner("wait1", "", 0),  # kept as written before: a bare UID still reads
            3: Owner("solo", "", e),
            4: Owner("b1", "default/bound", e),
        }
    finally:
        await store.close()
        await client.aclose()


async def test_reconcile_frees_a_reservation_of_its_own_epoch_that_the_caller_does_not_keep(
    h: Harness,
) -> None:
    # A release that failed after a failed bind left "left" reserved (issue 12, timeline 5):
    # the leader's next reconcile keeps only the reservations it names (binds in flight).
    e = await h.store.acquire("a", TTL)
    assert e is not None
    await h.store.reserve("a", e, [claim("left", devices=(0,)), claim("binding", devices=(1,))])
    report = await h.store.reconcile("a", e, [], ["binding"])
    assert (report.freed, report.kept) == (1, 1)
    assert set(await h.store.records()) == {"binding"}
    await h.store.reserve("a", e, [claim("next", devices=(0,))])
