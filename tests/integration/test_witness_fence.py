"""Issue 30's epoch-witness timelines (4, and 7's "new installation" shortcut), stepped through
the live scheduler's own parts on BOTH stores: the memory store and the service's ``RedisStore``
on the session's real redis-server (two key prefixes stand for two Redis masters, the old one
and the promoted replica, as a partition leaves them). The witness is tests/lifecycle.py's
ConfigMaps, the apiserver's record of elections (scheduler/service/witness.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from scheduler.kube.watch import HttpError
from scheduler.service.witness import Witness, WitnessError
from scheduler.state.base import History, Store
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, ConfigMaps, Replica, node, until


class Stores:
    """Independent stores on one clock: MemoryStores, or RedisStores under their own prefixes
    on the session's redis-server (emptied first)."""

    def __init__(self, clock: ManualClock, url: str = "") -> None:
        self.clock, self.url = clock, url
        self.made: list[Store] = []

    def __call__(self) -> Store:
        store: Store = (
            RedisStore.from_url(self.url, prefix=f"m{len(self.made) + 1}")
            if self.url
            else MemoryStore(self.clock)
        )
        self.made.append(store)
        return store

    async def promote(self, store: Store) -> None:
        """Sentinel's failover that lost nothing: another Redis process serves the store's
        data (its ``P:server`` is another run_id), so the next election finds its history cut;
        the memory store, one process, says so once."""
        if isinstance(store, RedisStore):
            client = aioredis.Redis.from_url(self.url)
            await client.set(f"{store.prefix}:server", "another-run-id")
            await client.aclose()
            return
        kept_history = store.kept_history

        async def cut(holder: str, epoch: int) -> History:
            store.kept_history = kept_history  # type: ignore[method-assign]
            return History(False, (await kept_history(holder, epoch)).previous)

        store.kept_history = cut  # type: ignore[method-assign]

    async def flush(self) -> None:
        """FLUSHALL: the lease, the epochs and every record are gone."""
        if not self.url:
            for store in self.made:
                store.__init__(self.clock)  # type: ignore[misc]
            return
        client = aioredis.Redis.from_url(self.url)
        await client.flushall()
        await client.aclose()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0.0)


@pytest.fixture(params=["memory", "redis"])
async def stores(request: pytest.FixtureRequest, clock: ManualClock) -> AsyncIterator[Stores]:
    url = "" if request.param == "memory" else str(request.getfixturevalue("redis_server").url)
    made = Stores(clock, url)
    if url:
        await made.flush()  # no test depends on another's leftovers
    try:
        yield made
    finally:
        for store in made.made:
            if isinstance(store, RedisStore):
                await store.close()


def replica(
    api: Apiserver, store: Store, clock: ManualClock, holder: str, maps: ConfigMaps
) -> Replica:
    witness = Witness(maps, "topo-scheduler", "topo-scheduler")
    return Replica(
        api,
        store,
        clock,
        holder,
        wait_for_unknown_leader=True,
        witness=witness,
        tuning=QUICK_RETRIES,
    )


async def waited(r: Replica) -> None:
    """Time passes, the replica renewing its lease, until its first decision's wait is over."""
    while not r.s.may_decide():
        r.clock.now += 5.0
        await r.renewal()


async def q_waits_behind_p(b: Replica, binds: list[tuple[str, str, str]], gpu: int) -> None:
    """The end of the timelines where an old leader's Binding of p was in flight while b was
    elected: p seen bound, b's wait over, b's turn binds nothing more (q waits: the GPU is
    p's)."""
    b.bound_seen("default/p")
    await waited(b)
    await b.step()
    await b.settle()
    assert b.api.binds == binds
    assert b.held("default/q") is None and b.held("default/p") == ("n", [gpu])


# ---- issue 30, 4: a transient 403 on the witness in the partition it exists for ----------------


async def test_issue30_4_a_transient_403_on_the_witness_does_not_give_two_leaders(
    stores: Stores, clock: ManualClock
) -> None:
    """A partition: a leads on the old master m1, which still takes its writes; the Sentinels
    promoted m2 and b is elected there, recorded in the witness, and waits (m2 lost every
    election: one lease plus bindCommitSeconds). a's renewal on m1 reads the witness while an
    authorization webhook times out (403). Before the fix that one 403 turned the witness off
    for good: every later renewal m1 accepted counted, a led on past b's wait, and both bound a
    pod on n/0."""
    api, maps = Apiserver(), ConfigMaps()
    a = replica(api, stores(), clock, "a", maps)
    b = replica(api, stores(), clock, "b", maps)
    assert await a.elect([node(1)]) == 1
    assert not a.s.may_decide()  # no leader recorded: one lease plus bindCommitSeconds first
    assert await b.elect([node(1)]) == 1  # the promoted replica: a's lease and epoch lost
    assert not b.s.may_decide()  # its store holds no election: one lease plus bindCommitSeconds
    clock.now += 5.0
    maps.failure = HttpError(403, "forbidden: webhook authorizer timed out")
    await a.renewal()  # m1 accepts it; the witness cannot confirm a's epoch: it does not count
    maps.failure = None  # the webhook answers again
    clock.now += 5.0
    await a.renewal()  # m1 accepts it; the witness holds b's record: a is deposed
    await b.renewal()  # m2 accepts it, and the witness holds b's record: it counts
    await waited(b)
    # Each side has a pod to place on the one GPU; whoever may decide does.
    for r, name in ((a, "p"), (b, "q")):
        r.pending(MakePod().Name(name).Req(1).Obj())
        if r.s.may_decide():
            await r.step()
        await r.settle()
    assert api.binds == [("default/q", "n", "0")]
    assert not a.leadership.leading and a.held("default/p") is None


async def test_issue30_4_a_leader_whose_witness_stays_forbidden_stops_within_its_lease(
    stores: Stores, clock: ManualClock
) -> None:
    """Without a partition: a 403 that lasts (a Role removed) leaves the leader's lease its end,
    so it stops leading when that passes, and its next election fails (it does not lead
    without a record) until the witness can be written again."""
    api, maps = Apiserver(), ConfigMaps()
    store = stores()
    a = replica(api, store, clock, "a", maps)
    assert await a.elect([node(1)]) == 1
    maps.failure = HttpError(403, "forbidden")
    for _ in range(3):
        clock.now += 5.0
        await a.renewal()  # the store accepts; the witness cannot confirm: not counted
    assert not a.leadership.leading and not a.s.may_decide()
    with pytest.raises(WitnessError):
        await a.elect([node(1)])  # the lease again, but no record: no lead
    assert not a.s.may_decide()
    maps.failure = None
    assert await a.elect([node(1)]) == 1  # recorded: it leads again
    assert a.s.witness is not None and a.s.witness.recorded == "a|1"


# ---- issue 30, 7a: the "new installation" shortcut after the witness was deleted -----------------


async def test_issue30_7a_a_deleted_witness_and_a_flushed_store_are_not_a_new_installation(
    stores: Stores, clock: ManualClock
) -> None:
    """a leads (a new installation), has bound p0 on n/0 and p's Binding to n/1 is in flight.
    The witness ConfigMap is deleted and the store flushed; b is elected at epoch 1 of a store
    without history and finds no record. Before the fix that was "a new installation": b
    decided at once, q on n/1, and then p's Binding landed there too."""
    api, maps = Apiserver(), ConfigMaps()
    store = stores()
    a = replica(api, store, clock, "a", maps)
    b = replica(api, store, clock, "b", maps)
    assert await a.elect([node(2)]) == 1
    await waited(a)  # nobody recorded: one lease plus bindCommitSeconds
    a.pending(MakePod().Name("p0").Req(1).Obj())
    await a.step()
    await a.settle()
    a.bound_seen("default/p0")
    a.pending(MakePod().Name("p").Req(1).Obj())
    api.gates["default/p"] = gate = asyncio.Event()
    await a.step()  # p's Binding is in flight
    maps.maps.clear()  # the witness ConfigMap deleted
    await stores.flush()  # and the store flushed: the lease and the epochs are gone
    q = b.pending(MakePod().Name("q").Req(1).Obj())
    assert await b.elect([node(2)], [api.pods["default/p0"]]) == 1
    a.s.intake.pending_event("ADDED", q)
    if b.s.may_decide():  # what "a new installation" allowed: q decided at once
        await b.step()
        await b.settle()
    gate.set()  # a's Binding lands within its bind timeout
    await a.settle()
    assert api.binds == [("default/p0", "n", "0"), ("default/p", "n", "1")]
    assert not b.s.may_decide()  # nobody recorded: one lease plus bindCommitSeconds first
    await q_waits_behind_p(b, [("default/p0", "n", "0"), ("default/p", "n", "1")], gpu=1)


async def test_issue30_7a_an_old_leaders_first_bindings_in_flight_hold_a_new_leader_off(
    stores: Stores, clock: ManualClock
) -> None:
    """The window the check above leaves: a leads, and its very first Binding (p to n/0) is in
    flight, stalled in etcd; no pod of this scheduler is bound yet. The witness ConfigMap is
    deleted and the store flushed; b is elected at epoch 1 of a store without history, finds
    no record and no pod of ours bound. Before the fix that was "a new installation": b
    decided at once, q on n/0, and then p's Binding landed there too. Now no record proves
    nothing: b waits until a's Bindings cannot land (one lease plus bindCommitSeconds)."""
    api, maps = Apiserver(), ConfigMaps()
    store = stores()
    a = replica(api, store, clock, "a", maps)
    b = replica(api, store, clock, "b", maps)
    assert await a.elect([node(1)]) == 1
    await waited(a)
    a.pending(MakePod().Name("p").Req(1).Obj())
    api.gates["default/p"] = gate = asyncio.Event()
    await a.step()  # p's Binding, a's first, is in flight
    maps.maps.clear()  # the witness ConfigMap deleted
    await stores.flush()  # and the store flushed: the lease and the epochs are gone
    q = b.pending(MakePod().Name("q").Req(1).Obj())
    assert await b.elect([node(1)]) == 1
    a.s.intake.pending_event("ADDED", q)
    if b.s.may_decide():  # what "a new installation" allowed: q decided at once
        await b.step()
        await b.settle()
    gate.set()  # a's Binding commits
    await a.settle()
    assert api.binds == [("default/p", "n", "0")]
    await q_waits_behind_p(b, [("default/p", "n", "0")], gpu=0)


async def test_sim3127_two_sides_of_a_partition_electing_without_a_record_do_not_both_decide(
    stores: Stores, clock: ManualClock
) -> None:
    """Soak seed 3127. A partition: m1 (the old master) and m2 (the promoted replica, a copy of
    m1 that lost nothing) each keep the history of a's election at epoch 1; the witness
    ConfigMap is deleted; a's lease ends on both. c is elected at epoch 2 on m1 and b at
    epoch 2 on m2, at once. Before the fix each read the witness apart from its write, found no
    record, and took "no record" for a chain to its store's history ("a|1"): neither waited,
    and both bound a pod on n/0. Now only the record an election's compare-and-swap replaced
    proves who led last: c replaced none, b replaced c's; both wait, and c is deposed."""
    api, maps = Apiserver(), ConfigMaps()
    m1, m2 = stores(), stores()
    for store in (m1, m2):  # m2 as a copy of m1: a elected at epoch 1 on each
        assert await replica(api, store, clock, "a", maps).elect([node(1)]) == 1
    maps.maps.clear()  # the witness ConfigMap deleted
    for store in (m1, m2):  # a is gone: its lease ends on both sides
        await store.release_lease("a", 1)
    c = replica(api, m1, clock, "c", maps)
    b = replica(api, m2, clock, "b", maps)
    assert await c.elect([node(1)]) == 2
    assert await b.elect([node(1)]) == 2
    assert not c.s.may_decide() and not b.s.may_decide()  # no record replaced: no proof
    for _ in range(40):  # time passes, both renewing, until b's wait is over
        clock.now += 5.0
        for r in (c, b):
            if r.leadership.leading:
                await r.renewal()
        if b.s.may_decide():
            break
    # Each side has a pod to place on the one GPU; whoever may decide does.
    for r, name in ((c, "p"), (b, "q")):
        r.pending(MakePod().Name(name).Req(1).Obj())
        if r.s.may_decide():
            await r.step()
        await r.settle()
    assert api.binds == [("default/q", "n", "0")]
    assert not c.leadership.leading


# ---- a flushed store with the witness kept; a failover that lost a write ------------------------


@pytest.mark.parametrize("lost", ["flush", "promotion"])
async def test_a_store_that_lost_the_reservation_waits_out_the_old_leaders_bindings(
    stores: Stores, clock: ManualClock, lost: str
) -> None:
    """a leads (past its first wait) and its Binding of p (n/0) stalls in etcd: it commits up
    to bindCommitSeconds after it was sent. Then the store loses p's reservation: flushed (the
    witness kept: a's record is there; the lease, the epochs and every record gone), or
    Sentinel promotes a replica that holds a's election but not p's reservation (written to
    the old master, never replicated: its history is cut). b, elected there, has nothing that
    holds p's GPU. Before the fixes b waited one lease (15 s), decided q onto n/0, and then a's
    Binding of p committed there too: first wait after a flush, then after a promotion. Every
    cut history waits one lease plus bindCommitSeconds."""
    api, maps = Apiserver(), ConfigMaps()
    store = stores()
    a = replica(api, store, clock, "a", maps)
    b = replica(api, store, clock, "b", maps)
    assert await a.elect([node(1)]) == 1
    await waited(a)
    api.stalled["default/p"] = None  # etcd stalls: p's Binding gets no answer
    a.pending(MakePod().Name("p").Req(1).Obj())
    await a.step()
    await until(lambda: api.stalled["default/p"] is not None)  # sent, no answer
    # kill -9: nothing of a runs any more; its Binding stays in etcd.
    a.s.accepting = False
    for t in list(a.s.tasks.running):
        t.cancel()
    await asyncio.gather(*list(a.s.tasks.running), return_exceptions=True)
    if lost == "flush":
        await stores.flush()
    else:
        await stores.promote(store)  # another process serves the data: the history is cut
        await store.release("a", 1, ["uid-default-p"])  # p's reservation was the write it lost
        await store.release_lease("a", 1)  # a's lease ran out meanwhile
    b.pending(MakePod().Name("q").Req(1).Obj())
    elected = clock.now
    assert await b.elect([node(1)]) == (1 if lost == "flush" else 2)
    assert not b.s.may_decide()
    for _ in range(3):  # one lease passes: a's own lease is over, its Binding still stalled
        clock.now += 5.0
        await b.renewal()
    if b.s.may_decide():  # what one lease allowed: q decided onto the GPU p's Binding takes
        await b.step()
        await until(lambda: api.binds)
    api.end_stall("default/p")  # p's Binding commits, within bindCommitSeconds of its sending
    assert api.binds == [("default/p", "n", "0")], "n/0 given twice: b decided after one lease"
    b.bound_seen("default/p")
    await waited(b)
    assert clock.now == elected + 15.0 + b.s.bind_commit_s  # one lease plus bindCommitSeconds
    await b.step()
    await b.settle()
    assert api.binds == [("default/p", "n", "0")]  # q waits: the one GPU is p's
    assert b.held("default/q") is None and b.held("default/p") == ("n", [0])


# ---- sim seed 836: a chain to a leader that left during its wait ---------------------------------


async def test_sim836_an_election_chained_to_a_leader_that_left_during_its_wait_waits_too(
    stores: Stores, clock: ManualClock
) -> None:
    """Soak seed 836. x leads (past its first wait) and its Binding of p (n/0) is in flight
    (a slow apiserver). The store is flushed: x's lease, the epochs and p's reservation are
    gone, and x, its local lease running, does not know yet. a is elected at epoch 1: its
    history is cut, so it waits one lease plus bindCommitSeconds, for Bindings like x's.
    Before that is over a rolling update sends it SIGTERM: it drains and hands the lease over.
    b is elected at epoch 2, its history chained to a's record in the witness. Before the
    fix a chain skipped the wait whatever the leader chained to had waited for: b decided q
    onto n/0 at once, and then x's Binding of p landed there too. An election is now chained
    only to one whose wait was over (marked settled in the store): b waits in full."""
    api, maps = Apiserver(), ConfigMaps()
    store = stores()
    x = replica(api, store, clock, "x", maps)
    a = replica(api, store, clock, "a", maps)
    b = replica(api, store, clock, "b", maps)
    assert await x.elect([node(1)]) == 1
    await waited(x)
    x.pending(MakePod().Name("p").Req(1).Obj())
    api.gates["default/p"] = gate = asyncio.Event()
    await x.step()  # p's Binding is in flight
    await stores.flush()  # the lease, the epochs and p's reservation are gone
    assert await a.elect([node(1)]) == 1
    assert not a.s.may_decide()  # a cut history: one lease plus bindCommitSeconds first
    clock.now += 1.0
    await a.s.drain()  # SIGTERM (app.py's shut_down): drained, the lease handed over
    await a.leadership.release()
    q = b.pending(MakePod().Name("q").Req(1).Obj())
    assert await b.elect([node(1)]) == 2
    x.s.intake.pending_event("ADDED", q)
    if b.s.may_decide():  # what the chain to a allowed: q decided at once
        await b.step()
        await b.settle()
    gate.set()  # x's Binding commits, within its bind timeout
    await x.settle()
    assert api.binds == [("default/p", "n", "0")], "n/0 given twice: b skipped a's wait"
    await q_waits_behind_p(b, [("default/p", "n", "0")], gpu=0)


async def test_sim836_review_a_wait_is_settled_only_by_a_leader_that_reconciled_after_it(
    stores: Stores, clock: ManualClock
) -> None:
    """Review of seed 836's fix. a is elected on a flushed store and waits one lease plus
    bindCommitSeconds; a forgotten leader's Bindings may land during that wait, and only the
    reconcile after it writes the pods they bound into the store. Two ways a marked a's
    election settled before that reconcile: its loop marked at the top of a turn, before the
    reconcile of the same turn (a's turn here, asked at that moment); and a SIGTERM right
    after the wait ended, whose drain runs no reconcile at all. Marked, b's election chained
    to a skipped its wait, though the store had no record of those pods (a lagging bound
    watch then shows b their GPUs free). Now a marks only after that reconcile, and never
    while draining: b waits in full."""
    api, maps = Apiserver(), ConfigMaps()
    store = stores()
    a = replica(api, store, clock, "a", maps)
    b = replica(api, store, clock, "b", maps)
    assert await a.elect([node(1)]) == 1  # a new store: a waits
    assert not a.s.may_decide()
    await waited(a)  # the wait is over; the loop's reconcile after it has not run yet
    assert a.s.sync.needed
    await a.s.settle()  # the loop's turn as it was: the mark before the reconcile
    await a.s.drain()  # SIGTERM: no turn of the loop runs again
    await a.s.settle()
    await a.leadership.release()
    assert await b.elect([node(1)]) == 2
    assert not b.s.may_decide(), "b chained to an election settled before its reconcile"
