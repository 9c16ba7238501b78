"""Issue 30's timelines 3 and 6 and 7's skipped store writes, stepped by hand through the live
scheduler's own parts on BOTH stores (the memory store and a ``RedisStore`` on the session's
real redis-server), with tests/lifecycle.py's fake apiserver and a manual clock.

- 3: a lagging standby across a same-name recreation: its book holds the old UID under the
  name when it is elected, and the old leader's record of the new UID must not be freed;
- 6: resourceVersions that go back (an etcd restore without ``--bump-revision``): a LIST below
  what the book holds starts a new era in which the LIST is the truth;
- 7b: the store writes (marks after binds, releases, node inventories) skipped while the local
  lease had lapsed are written once the same replica leads on.

On the code before the fixes each ended with a GPU given twice, GPUs held by a pod that no
longer exists (its replacement never scheduled), or a store that no longer matches the truth.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import msgspec
import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from scheduler.config.tuning import Tuning
from scheduler.core.model.objects import PodInput
from scheduler.kube.api import BindResult
from scheduler.service.podbook import Stage
from scheduler.state.base import Store
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore
from tests.builders import MakeNode, MakePod
from tests.clock import ManualClock
from tests.integration.test_pod_lifecycle import Backend, run, store_of
from tests.lifecycle import QUICK_RETRIES, TTL_MS, Apiserver, Replica, node, past_commit, until


@pytest.fixture(params=["memory", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """The memory store, or a RedisStore (as app.py builds it) on the session's redis-server,
    emptied first."""
    clock = ManualClock(0.0)
    if request.param == "memory":
        yield Backend(MemoryStore(clock), clock)
        return
    url = str(request.getfixturevalue("redis_server").url)
    client = aioredis.Redis.from_url(url)
    await client.flushall()  # no test depends on another's leftovers
    await client.aclose()
    store = RedisStore.from_url(url, prefix="identity")
    try:
        yield Backend(store, clock, url)
    finally:
        await store.close()


class Sending(Apiserver):
    """The fake apiserver, telling which Bindings were sent (answered or not)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindResult:
        self.sent.append(f"{namespace}/{name}")
        return await super().bind(namespace, name, uid, node, annotations)


class GatedReconcile:
    """The store, with each reconcile call held at ``gate`` before it is sent (a reconcile
    slower than a release sent after it: real I/O)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.gate = asyncio.Event()
        self.gate.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def reconcile(self, *args: Any) -> Any:
        await self.gate.wait()
        return await self.store.reconcile(*args)


async def test_a_release_waits_for_a_reconcile_under_way(
    backend: Backend,
) -> None:
    """Sim on Redis: a new leader's election reconcile writes an inherited record bound (its
    truth taken then); the pod's re-read finds it finished and its release lands before the
    reconcile, which writes the record back. Before the fix the release did not wait for the
    reconcile: the store kept a bound record of a finished pod until the next election."""
    store = GatedReconcile(backend.store)
    r = Replica(Apiserver(), cast(Store, store), backend.clock, tuning=QUICK_RETRIES)
    w = r.api.create(MakePod().Name("w").Req(1).Bound("n", "0").Obj())
    epoch = await r.elect([node(1)], [w])
    store.gate.clear()
    reconcile = asyncio.create_task(r.s.sync.reconcile(epoch))  # its truth: w bound
    await asyncio.sleep(0)
    r.s.intake.bound_event("DELETED", r.api.delete(w.key))  # w's release is queued
    for _ in range(10):
        await asyncio.sleep(0)  # before the fix it landed here, before the reconcile
    store.gate.set()
    await reconcile
    await r.settle()
    r.clock.now += Tuning().store_reconcile_seconds
    await r.renew()
    await run(r)
    assert await store_of(r) == ({}, {}, {})


# ---- 7b: store writes skipped while the local lease had lapsed ----------------------------------


async def test_issue30_7b_writes_skipped_while_the_lease_lapsed_are_written_when_it_leads_on(
    backend: Backend,
) -> None:
    api = Sending()
    r = Replica(api, backend.store, backend.clock, tuning=QUICK_RETRIES)
    epoch = await r.elect([node(2)])
    r.pending(MakePod().Name("b").Req(1).Obj())
    await run(r)
    r.bound_seen("default/b")
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.gates["default/a"] = gate = asyncio.Event()
    assert await r.step() == "default/a"
    await until(lambda: "default/a" in api.sent)  # its Binding is sent, no answer yet
    # t=10: a renewal reaches the store (its lease now runs to t=25), but its answer is late:
    # the local lease still counts from t=0 and lapses at t=15.
    r.clock.now = 10.0
    assert await backend.store.renew("a", epoch, TTL_MS)
    r.clock.now = 15.5
    assert not r.leadership.leading and r.leadership.epoch == epoch
    # Meanwhile b is deleted (its release is skipped) and a's Binding is answered 201 (its
    # mark as bound is skipped).
    r.s.intake.bound_event("DELETED", r.api.delete("default/b"))
    gate.set()
    await r.settle()
    assert r.s.book.stage("default/a") is Stage.ASSUMED
    # t=16: the renewal's answer arrives: the same replica leads on, at the same epoch, with no
    # election (and so no election reconcile).
    r.clock.now = 16.0
    r.leadership._renewed_at = 10.0
    assert r.leadership.leading
    r.clock.now += Tuning().store_reconcile_seconds
    await r.step()  # a turn of the loop
    held = r.held("default/a")
    assert held is not None
    (gpu,) = held[1]
    # What the skipped writes would have written: a is bound, b's record is gone.
    assert await store_of(r) == ({"default/a": f"bound:({gpu},)"}, {gpu: "default/a"}, {})


async def test_issue30_7b_a_node_change_skipped_while_the_lease_lapsed_is_written_when_it_leads_on(
    backend: Backend,
) -> None:
    """The same for the node inventories StoreSync keeps in the store (inventories.py)."""
    r = backend.live()
    epoch = await r.elect([node(2)])
    before = await backend.store.nodes()
    assert before == r.s.sync.inventories.all()
    r.clock.now = 10.0
    assert await backend.store.renew("a", epoch, TTL_MS)  # its answer is late
    r.clock.now = 15.5
    r.s.intake.node_event("MODIFIED", node(3))  # a GPU more: its write is skipped
    await r.settle()
    assert await backend.store.nodes() == before
    r.clock.now = 16.0
    r.leadership._renewed_at = 10.0  # the renewal's answer: it leads on
    r.clock.now += Tuning().store_reconcile_seconds
    await r.step()
    assert await backend.store.nodes() == r.s.sync.inventories.all() != before


# ---- 3: a lagging standby across a same-name recreation -----------------------------------------


async def take_lease(r: Replica) -> None:
    """``r`` wins the lease and takes up leadership with its watches as they are (lagging)."""
    epoch = await r.store.acquire(r.holder, TTL_MS)
    assert epoch is not None
    r.leadership.epoch = epoch
    r.leadership._renewed_at = r.clock.now
    await r.s.on_elected(epoch)


async def recreated_behind_a_lagging_standby(
    backend: Backend,
) -> tuple[Apiserver, Replica, PodInput, PodInput]:
    """w (uid1) is bound on GPU 0 of node n (2 GPUs), and both replicas know it; w is deleted
    and recreated (uid2: a StatefulSet's or a training job's worker restarted) and leader a binds
    it on GPUs 0 and 1; standby b's watches lag: its book still holds uid1 under the name. Then
    a rolling update: a drains and hands its lease over. Returns uid1 as its deletion shows it
    and uid2 as its creation does (what b's lagging watches have not delivered yet)."""
    api = Apiserver()
    a = backend.replica(api, "a")
    b = backend.replica(api, "b")
    w1 = api.create(MakePod().Name("w").Req(1).Bound("n", "0").Obj())
    b.s.intake.replace_nodes([node(2)])
    b.s.intake.replace_bound([w1], api.version)
    await a.elect([node(2)], [w1])
    deleted = api.delete(w1.key)
    a.s.intake.bound_event("DELETED", deleted)
    await a.settle()  # uid1's record is released
    w2 = a.pending(msgspec.structs.replace(MakePod().Name("w").Req(2).Obj(), uid="uid2"))
    await run(a)
    assert api.binds == [("default/w", "n", "0,1")]
    assert await store_of(a) == (
        {"default/w": "bound:(0, 1)"},
        {0: "default/w", 1: "default/w"},
        {},
    )
    entry = b.s.book.get("default/w")
    assert entry is not None and entry.uid == w1.uid and b.held("default/w") == ("n", [0])
    await a.s.drain()
    await backend.store.release_lease("a", a.leadership.epoch or 0)
    return api, b, deleted, w2


async def test_issue30_3_a_lagging_standby_keeps_the_old_leaders_record_of_a_recreated_pod(
    backend: Backend,
) -> None:
    api, b, deleted, created = await recreated_behind_a_lagging_standby(backend)
    c = b.pending(MakePod().Name("c").Req(1).Obj())
    await take_lease(b)
    await run(b)
    assert api.binds == [("default/w", "n", "0,1")]  # c is not bound on w's GPU 1
    assert b.s.book.stage(c.key) is Stage.PENDING
    # The name was read before the store was reconciled: uid2 is the pod, bound on GPUs 0, 1.
    entry = b.s.book.get("default/w")
    assert entry is not None and entry.uid == "uid2" and entry.stage is Stage.BOUND
    assert b.held("default/w") == ("n", [0, 1])
    # The lagging watches catch up: uid1's deletion and uid2's pending sighting are older than
    # what the read told; uid2 bound is what the book holds already.
    b.s.intake.bound_event("DELETED", deleted)
    b.s.intake.pending_event("ADDED", created)
    b.bound_seen("default/w")
    await b.settle()
    assert b.s.book.stage("default/w", "uid2") is Stage.BOUND
    assert b.held("default/w") == ("n", [0, 1])
    b.clock.now += Tuning().store_reconcile_seconds
    await run(b)
    assert api.binds == [("default/w", "n", "0,1")]
    assert await store_of(b) == (
        {"default/w": "bound:(0, 1)"},
        {0: "default/w", 1: "default/w"},
        {},
    )


async def test_issue30_3_an_unanswered_read_fails_the_election_and_frees_nothing(
    backend: Backend,
) -> None:
    api, b, _, _ = await recreated_behind_a_lagging_standby(backend)
    api.reads_fail = True
    with pytest.raises(ConnectionError):
        await take_lease(b)  # Leadership.run then gives the lease up and competes again
    assert not b.s.ready_to_schedule
    assert await store_of(b) == (
        {"default/w": "bound:(0, 1)"},
        {0: "default/w", 1: "default/w"},
        {},
    )


async def test_issue30_3_a_record_of_an_older_uid_than_the_books_is_freed_after_the_read(
    backend: Backend,
) -> None:
    """The other way round: the store's record is of a UID older than the book's (a release
    lost, and no reconcile since); the read says the book's pod is the one: the record goes."""
    api = Apiserver()
    b = backend.replica(api, "b")
    old = backend.replica(api, "old")
    await old.elect([node(2)])
    w1 = old.pending(MakePod().Name("w").Req(2).Obj())
    await run(old)  # bound on GPUs 0, 1
    await old.s.drain()
    await backend.store.release_lease("old", old.leadership.epoch or 0)
    api.delete(w1.key)  # after old led: its record stays, as after a release that failed
    w2 = api.create(
        msgspec.structs.replace(MakePod().Name("w").Req(1).Bound("n", "1").Obj(), uid="uid2")
    )
    b.s.intake.replace_nodes([node(2)])
    b.s.intake.replace_bound([w2], api.version)
    c = b.pending(MakePod().Name("c").Req(1).Obj())
    await take_lease(b)
    await run(b)
    assert b.held("default/w") == ("n", [1])
    assert api.binds[1:] == [("default/c", "n", "0")]  # GPU 0 was free: c has it
    assert b.s.book.stage(c.key) is Stage.ASSUMED
    assert await store_of(b) == (
        {"default/w": "bound:(1,)", "default/c": "bound:(0,)"},
        {0: "default/c", 1: "default/w"},
        {},
    )


# ---- 6: resourceVersions that go back -----------------------------------------------------------


async def restored(backend: Backend) -> tuple[Replica, PodInput]:
    """w (uid1) is bound on node n's one GPU at resourceVersion 1001; etcd is restored from a
    backup taken at 500, before w existed, without ``--bump-revision``: versions count from 500
    again. w's controller recreates it (uid2, pending, 501). The watches break; each re-lists."""
    r = backend.live()
    r.api.version = 1000
    w1 = r.api.create(MakePod().Name("w").Req(1).Bound("n", "0").Obj())
    await r.elect([node(1)], [w1])
    assert await store_of(r) == ({"default/w": "bound:(0,)"}, {0: "default/w"}, {})
    r.api.pods, r.api.version = {}, 500
    w2 = r.api.create(msgspec.structs.replace(MakePod().Name("w").Req(1).Obj(), uid="uid2"))
    return r, w2


async def scheduled_after_the_restore(r: Replica) -> None:
    """The pod of the new era, w (uid2), is scheduled on the GPU its gone namesake held."""
    await run(r)
    assert r.api.binds == [("default/w", "n", "0")]
    entry = r.s.book.get("default/w")
    assert entry is not None and entry.uid == "uid2" and r.held("default/w") == ("n", [0])
    assert await store_of(r) == ({"default/w": "bound:(0,)"}, {0: "default/w"}, {})
    assert [rec.claim.uid for rec in (await r.store.records()).values()] == ["uid2"]


async def test_issue30_6_a_bound_list_below_the_books_versions_is_the_truth_of_a_new_era(
    backend: Backend,
) -> None:
    r, w2 = await restored(backend)
    with capture_logs() as logs:
        r.s.intake.replace_bound(*r.bound_list())  # at 501, without w
    await r.settle()
    assert r.s.book.get("default/w") is None and r.held("default/w") is None
    (warning,) = [e for e in logs if e["log_level"] == "warning"]
    assert (warning["list_version"], warning["book_version"]) == (501, 1001)
    r.s.intake.replace_pending([w2])
    await scheduled_after_the_restore(r)


async def test_issue30_6_a_pending_list_below_the_books_versions_is_the_truth_of_a_new_era(
    backend: Backend,
) -> None:
    r, w2 = await restored(backend)
    r.s.intake.replace_pending([w2], r.api.version)  # at 501: uid2 replaces uid1
    await r.settle()  # uid1's record is released
    entry = r.s.book.get("default/w")
    assert entry is not None and entry.uid == "uid2" and entry.stage is Stage.PENDING
    assert r.held("default/w") is None
    r.s.intake.replace_bound(*r.bound_list())  # 501 again: the era the book is in now
    await scheduled_after_the_restore(r)


async def test_issue30_6_news_of_the_new_era_is_taken_once_it_began(backend: Backend) -> None:
    """After the new era began, its watch events are news again: w (uid2) bound by someone
    else at 502 is charged, not dropped as older than uid1's 1001."""
    r, w2 = await restored(backend)
    r.s.intake.replace_bound(*r.bound_list())
    r.s.intake.bound_event("ADDED", r.api.land(w2.key, "n", "0"))
    await r.settle()
    entry = r.s.book.get("default/w")
    assert entry is not None and entry.uid == "uid2" and entry.stage is Stage.BOUND
    assert r.held("default/w") == ("n", [0])


async def test_issue30_6_a_pod_a_restore_brings_back_bound_is_recorded_in_the_store(
    backend: Backend,
) -> None:
    """Sim seed 10 (its store check, the issue-20 auditor's store-missing): w is bound on node
    n's one GPU, etcd is backed up, w is deleted (its record released), and etcd is restored
    from the backup: w is bound again. The bound LIST begins a new era and the book takes w in
    as bound (charged in the snapshot), which writes nothing to the store. Before the fix
    nothing else did either: the store had no record of w, and no owner of its GPU, until the
    next election."""
    r = backend.live()
    r.api.version = 1000
    w = r.api.create(MakePod().Name("w").Req(1).Bound("n", "0").Obj())
    await r.elect([node(1)], [w])
    backup = dict(r.api.pods), r.api.version
    r.s.intake.bound_event("DELETED", r.api.delete(w.key))
    await r.settle()
    assert await store_of(r) == ({}, {}, {})
    r.api.pods, r.api.version = backup  # w bound again, at the backup's versions
    r.s.intake.replace_bound(*r.bound_list())  # below the book's newest: a new era
    r.s.intake.replace_pending([], r.api.version)  # every watch re-lists after a restore
    await r.settle()
    assert r.s.book.stage(w.key) is Stage.BOUND and r.held(w.key) == ("n", [0])
    r.clock.now += Tuning().store_reconcile_seconds
    await r.renew()
    await run(r)
    assert await store_of(r) == ({"default/w": "bound:(0,)"}, {0: "default/w"}, {})


@pytest.mark.parametrize("between", ["reconcile", "election"])
async def test_issue30_6_the_store_follows_the_new_era_once_both_pod_watches_listed_in_it(
    backend: Backend, between: str
) -> None:
    """Sim seed 603: w is bound on node n's one GPU, etcd is backed up, w is deleted (its record
    released), and etcd is restored from the backup: w is bound again. The pending LIST comes
    first and begins the new era; the bound LIST lags. Meanwhile the store is reconciled, from
    the bound view of the era before (without w): the loop's rate-limited reconcile, or (the
    seed) an election's, standby b taking over from a drained leader a. Then the bound LIST
    brings w back, which writes nothing. Before the fix the reconcile was asked for when the
    era began, and the one between the eras was it: the store had no record of w, and no owner
    of its GPU, for good. It is asked for when both watches have listed in the new era."""
    api = Apiserver()
    api.version = 1000
    a = backend.replica(api, "a")
    b = backend.replica(api, "b") if between == "election" else a
    w = api.create(MakePod().Name("w").Req(1).Bound("n", "0").Obj())
    if b is not a:
        b.s.intake.replace_nodes([node(1)])
        b.s.intake.replace_bound([w], api.version)
    await a.elect([node(1)], [w])
    backup = dict(api.pods), api.version
    deleted = api.delete(w.key)
    for r in {a, b}:
        r.s.intake.bound_event("DELETED", deleted)
    await a.settle()
    assert await store_of(a) == ({}, {}, {})
    api.pods, api.version = backup  # w bound again, at the backup's versions
    b.s.intake.replace_pending([], api.version)  # below the book's newest: a new era
    b.clock.now += Tuning().store_reconcile_seconds
    if b is a:
        await a.renew()
        await a.s.sync.if_needed()
    else:
        await a.s.drain()
        await backend.store.release_lease("a", a.leadership.epoch or 0)
        await take_lease(b)
    b.s.intake.replace_bound(*b.bound_list())  # the bound LIST of the new era: w
    await b.settle()
    assert b.s.book.stage(w.key) is Stage.BOUND and b.held(w.key) == ("n", [0])
    b.clock.now += Tuning().store_reconcile_seconds
    await b.renew()
    await run(b)
    assert await store_of(b) == ({"default/w": "bound:(0,)"}, {0: "default/w"}, {})


# ---- 6, found by the simulation: a restore that undoes our own Binding -------------------------


async def undone(backend: Backend, seen: bool) -> tuple[Replica, PodInput]:
    """w is created (pending) and etcd backed up at that moment; w is bound by our Binding on
    node n's one GPU (``seen``: and the bound watch showed it); etcd is restored from the backup
    without ``--bump-revision``: w is pending again, unbound, at the backup's versions. The
    watches break; each re-lists."""
    r = backend.live()
    r.api.version = 1000
    await r.elect([node(1)])
    w = r.pending(MakePod().Name("w").Req(1).Obj())
    backup = dict(r.api.pods), r.api.version
    await run(r)
    assert r.api.binds == [("default/w", "n", "0")]
    if seen:
        r.bound_seen(w.key)
    r.api.pods, r.api.version = dict(backup[0]), backup[1]
    return r, w


async def scheduled_again(r: Replica, w: PodInput) -> None:
    """w, pending again, is scheduled again on the GPU its undone Binding had."""
    await run(r)
    assert r.api.binds == [("default/w", "n", "0")] * 2
    assert r.api.pods[w.key].node_name == "n"
    assert r.held("default/w") == ("n", [0])
    assert await store_of(r) == ({"default/w": "bound:(0,)"}, {0: "default/w"}, {})


async def test_issue30_6_a_binding_undone_by_a_restore_before_the_bound_watch_showed_it(
    backend: Backend,
) -> None:
    """Sim seed 73: the restore comes before the bound watch showed w (ASSUMED). The bound
    LIST lacks it: the book re-reads w, which is pending. Before the fix that read was ignored
    (a read older than the Binding, it was taken to be): w stayed ASSUMED, its GPU held by a
    pod not on it, and w was never scheduled again."""
    r, w = await undone(backend, seen=False)
    assert r.s.book.stage(w.key) is Stage.ASSUMED
    r.s.intake.replace_pending([r.api.pods[w.key]], r.api.version)  # w pending, new era
    r.s.intake.replace_bound(*r.bound_list())  # without w: it is re-read
    await r.settle()
    assert r.s.book.stage(w.key) is Stage.PENDING and r.held(w.key) is None
    await scheduled_again(r, w)


async def test_issue30_6_a_binding_undone_by_a_restore_after_the_bound_watch_showed_it(
    backend: Backend,
) -> None:
    """Sim seed 5: w is BOUND (the bound watch showed it). After the restore the pending LIST
    comes first (the bound watch lags): w pending, which the book sets aside (a node name is
    never unset: older than the Binding, in one era); then the bound LIST lacks w and its entry
    leaves. Before the fix nothing told the book of w again: w stayed pending, unscheduled and
    with no reason written, for good."""
    r, w = await undone(backend, seen=True)
    assert r.s.book.stage(w.key) is Stage.BOUND
    r.s.intake.replace_pending([r.api.pods[w.key]], r.api.version)  # w pending, new era
    assert r.s.book.stage(w.key) is Stage.BOUND
    r.s.intake.replace_bound(*r.bound_list())  # without w
    await r.settle()
    assert r.s.book.stage(w.key) is Stage.PENDING and r.held(w.key) is None
    await scheduled_again(r, w)


async def test_issue30_6_nothing_is_decided_until_both_pod_watches_listed_in_the_new_era(
    backend: Backend,
) -> None:
    """Sim seed 179: etcd is backed up while j holds node n's one GPU and a (uid1) waits; then j
    ends, a is recreated (uid2) and we bind it on that GPU. etcd is restored from the backup:
    j holds the GPU again and a (uid1) is pending. The pending LIST comes first (the bound
    watch lags): a new era, uid1 replaces uid2, whose charge goes. Before the fix a was decided
    at once, from a bound view of the era before (j gone, the GPU free), and bound on top of
    j. Now nothing is decided until the bound watch has listed in the new era too."""
    r = backend.live()
    r.api.version = 1000
    j = r.api.create(MakePod().Name("j").Req(1).Bound("n", "0").Obj())
    await r.elect([node(1)], [j])
    a1 = r.pending(MakePod().Name("a").Req(1).Obj())
    backup = dict(r.api.pods), r.api.version
    r.s.intake.bound_event("DELETED", r.api.delete(j.key))
    r.s.intake.pending_event("DELETED", r.api.delete(a1.key))
    a2 = r.pending(msgspec.structs.replace(MakePod().Name("a").Req(1).Obj(), uid="uid2"))
    await r.settle()  # j's record is released
    await run(r)
    r.bound_seen(a2.key)
    assert r.api.binds == [("default/a", "n", "0")] and r.held(a2.key) == ("n", [0])
    r.api.pods, r.api.version = dict(backup[0]), backup[1]  # the restore
    r.s.intake.replace_pending([r.api.pods[a1.key]], r.api.version)  # a (uid1) pending
    await r.settle()
    await run(r)
    assert r.api.binds == [("default/a", "n", "0")]  # nothing decided between the eras
    r.s.intake.replace_bound(*r.bound_list())  # j on the GPU
    await r.settle()
    assert r.held(j.key) == ("n", [0])
    await run(r)
    assert r.api.binds == [("default/a", "n", "0")]  # a waits: j holds the one GPU
    assert r.api.pods[a1.key].node_name == ""


async def test_issue30_6_a_read_begun_before_our_binding_was_answered_says_nothing_of_it(
    backend: Backend,
) -> None:
    """The guard of seed 73's fix: a re-read that began before our Binding was answered and
    answers "pending" after it (the read back of a refused Binding, slow, while the next one
    binds the pod) is read again, not taken for the Binding undone."""
    r = backend.live()
    await r.elect([node(1)])
    w = r.pending(MakePod().Name("w").Req(1).Obj())
    gate = asyncio.Event()
    reads: list[str] = []
    read = r.api.get_pod

    async def slow_first_read(namespace: str, name: str) -> PodInput | None:
        pod = await read(namespace, name)
        reads.append(pod.node_name if pod is not None else "gone")
        if len(reads) == 1:
            await gate.wait()  # its answer, "pending", comes after the next Binding's
        return pod

    r.api.get_pod = slow_first_read  # type: ignore[method-assign]
    r.api.refuse[w.key] = 500
    await r.step()  # refused: pending again, and re-read (the read hangs)
    await until(lambda: reads)
    del r.api.refuse[w.key]
    r.clock.now += 10.0  # its backoff
    await r.renew()
    await r.step()  # bound
    await until(lambda: r.s.book.stage(w.key) is Stage.ASSUMED)
    gate.set()
    await r.settle()
    assert reads == ["", "n"]  # read again: bound
    assert r.s.book.stage(w.key) is Stage.BOUND and r.held(w.key) == ("n", [0])
    assert r.api.binds == [("default/w", "n", "0")]


async def test_issue30_6_a_list_asked_for_before_the_other_watch_began_the_era_is_of_that_era(
    backend: Backend,
) -> None:
    """Sim seed 1132: w (uid1) is bound on node n's one GPU; etcd is backed up, then restored.
    Both watches re-list at once, but the bound LIST is slow to arrive. The pending LIST comes
    first and begins the new era; in it w's controller recreates w (uid2, pending), which the
    pending watch tells. Then the bound LIST arrives, taken before uid2 existed, showing uid1
    bound. Before the fix it began a second new era: its uid1, older than uid2 in this era,
    was taken in as news and replaced uid2, whose entry left; the bound watch's deletion of
    uid1 then emptied the book of w, and uid2 stayed pending for good with no reason written.
    A LIST asked for after the restore and before the era the other watch began is of that
    era: its versions compare with the book's, and its uid1 is older news than uid2."""
    r = backend.live()
    r.api.version = 1000
    w1 = r.api.create(MakePod().Name("w").Req(1).Bound("n", "0").Obj())
    await r.elect([node(1)], [w1])
    backup = dict(r.api.pods), r.api.version
    # Another scheduler's pod bound after the backup: the book has seen a version the restore
    # takes back.
    r.s.intake.bound_event("ADDED", r.api.create(MakePod().Name("o").Bound("n").Obj()))
    r.api.pods, r.api.version = dict(backup[0]), backup[1]  # the restore
    r.s.intake.bound_list_begin()  # both watches re-list; the bound LIST is slow
    bound_list = r.bound_list()
    r.s.intake.pending_list_begin()
    r.s.intake.pending_list_page([])
    r.s.intake.pending_list_end(r.api.version)  # the new era
    gone = r.api.delete(w1.key)
    w2 = r.pending(msgspec.structs.replace(MakePod().Name("w").Req(1).Obj(), uid="uid2"))
    await r.settle()
    r.s.intake.bound_list_page(bound_list[0])  # uid1 bound, taken before uid2 existed
    r.s.intake.bound_list_end(bound_list[1])
    r.s.intake.bound_event("DELETED", gone)  # the bound watch from the LIST's version
    await r.settle()
    entry = r.s.book.get(w2.key)
    assert entry is not None and (entry.uid, entry.stage) == ("uid2", Stage.PENDING)
    assert r.held(w2.key) is None
    await run(r)
    assert r.api.binds == [("default/w", "n", "0")] and r.held(w2.key) == ("n", [0])


class SlowAnswer(Apiserver):
    """Bindings commit at once; their answers wait at ``answer`` (slow on the way back)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindResult:
        result = await super().bind(namespace, name, uid, node, annotations)
        await self.answer.wait()
        return result


@pytest.mark.parametrize("existed", [False, True], ids=["created-after", "pending-at"])
async def test_issue30_6_a_binding_answered_after_the_restore_began_a_new_era_is_re_read(
    backend: Backend, existed: bool
) -> None:
    """Sim seeds 726, 1101 (``created-after``) and 1318 (``pending-at``): our Binding of w
    commits, etcd is restored from a backup taken before w existed (or while it was pending),
    both watches re-list in the new era while the Binding's answer is on its way (w BINDING:
    a LIST says nothing of a pod binding), then the answer comes, 201. Before the fix the 201
    made w ASSUMED for good: the bound watch of the new era never shows it, so its GPU stayed
    held by a pod that does not exist (or is pending, unscheduled, with no reason written),
    and its store record stayed bound. A 201 for a Binding sent before the era began is
    re-read (BIND_OK_STALE): gone, w leaves; pending, it is scheduled afresh."""
    r = Replica(SlowAnswer(), backend.store, backend.clock, tuning=QUICK_RETRIES)
    api = cast(SlowAnswer, r.api)
    api.version = 1000
    await r.elect([node(1)])
    backup = dict(api.pods), api.version
    w = r.pending(MakePod().Name("w").Req(1).Obj())
    if existed:
        backup = dict(api.pods), api.version
    # Another scheduler's pod bound after the backup: the book has seen a version the restore
    # takes back (else nothing tells that the versions went back).
    r.s.intake.bound_event("ADDED", api.create(MakePod().Name("o").Bound("n").Obj()))
    await r.step()
    await until(lambda: api.binds)
    assert r.s.book.stage(w.key) is Stage.BINDING
    api.pods, api.version = dict(backup[0]), backup[1]  # the restore
    r.s.intake.replace_pending([p for p in api.pods.values() if not p.node_name], api.version)
    r.s.intake.replace_bound(*r.bound_list())
    assert r.s.book.stage(w.key) is Stage.BINDING
    api.answer.set()  # 201
    await r.settle()
    assert r.s.book.get("default/o") is None  # gone with the restore
    if not existed:
        assert r.s.book.get(w.key) is None and r.held(w.key) is None
        assert await store_of(r) == ({}, {}, {})
        return
    assert r.s.book.stage(w.key) is Stage.PENDING and r.held(w.key) is None
    await run(r)
    assert api.binds == [("default/w", "n", "0")] * 2 and api.pods[w.key].node_name == "n"
    assert r.held(w.key) == ("n", [0])
    assert await store_of(r) == ({"default/w": "bound:(0,)"}, {0: "default/w"}, {})


async def test_issue30_sim870_a_binding_answered_after_a_bound_list_that_lacked_it_is_re_read(
    backend: Backend,
) -> None:
    """Sim seed 870: as above, but etcd was backed up at the newest version the book had been
    told (w's creation; the events of w's Binding not delivered before the restore): the LISTs
    of the restored history are at that version, so no new era begins, and the bound LIST ends
    while w is binding (saying nothing of it). Then the 201 comes. Before the fix it made w
    ASSUMED for good: its GPU held by a pod the apiserver shows pending, which was never
    scheduled again. A 201 for a Binding during which a bound LIST began is re-read."""
    r = Replica(SlowAnswer(), backend.store, backend.clock, tuning=QUICK_RETRIES)
    api = cast(SlowAnswer, r.api)
    api.version = 1000
    await r.elect([node(1)])
    w = r.pending(MakePod().Name("w").Req(1).Obj())
    backup = dict(api.pods), api.version
    await r.step()
    await until(lambda: api.binds)
    assert r.s.book.stage(w.key) is Stage.BINDING
    api.pods, api.version = dict(backup[0]), backup[1]  # the restore, at the book's newest
    r.s.intake.replace_pending([p for p in api.pods.values() if not p.node_name], api.version)
    r.s.intake.replace_bound(*r.bound_list())
    assert r.s.book.era == 0 and r.s.book.stage(w.key) is Stage.BINDING  # no new era
    api.answer.set()  # 201
    await r.settle()
    assert r.s.book.stage(w.key) is Stage.PENDING and r.held(w.key) is None
    await run(r)
    assert api.binds == [("default/w", "n", "0")] * 2 and api.pods[w.key].node_name == "n"
    assert r.held(w.key) == ("n", [0])
    assert await store_of(r) == ({"default/w": "bound:(0,)"}, {0: "default/w"}, {})


async def backed_up_then_freed(
    backend: Backend,
) -> tuple[Replica, PodInput, PodInput, tuple[dict[str, PodInput], int]]:
    """Node n's one GPU held by j, w waiting; etcd backed up (the backup); j deleted, the GPU
    free (the two restore timelines below, soak seeds 3090 and 5205)."""
    r = backend.live(bind_timeout=0.02)
    r.api.version = 1000
    j = r.api.create(MakePod().Name("j").Req(1).Bound("n", "0").Obj())
    await r.elect([node(1)], [j])
    w = r.pending(MakePod().Name("w").Req(1).Obj())
    await run(r)  # w waits: j holds the one GPU
    backup = dict(r.api.pods), r.api.version
    r.s.intake.bound_event("DELETED", r.api.delete(j.key))
    await r.settle()
    return r, j, w, backup


async def test_issue30_sim3090_a_binding_decided_before_a_restore_is_not_sent_after_it(
    backend: Backend,
) -> None:
    """Soak seed 3090: j holds node n's one GPU and w waits; etcd is backed up; j is deleted,
    w decided onto the GPU j gave back, and its Binding waits in an etcd stall, unanswered (w
    BINDING, re-sent until an answer says). etcd is restored from the backup: j is bound on the
    GPU again and w pending; the write waiting in the stall never commits, and both watches
    re-list in the new era. Before the fix the next re-send of w's Binding, decided in the era
    before, landed w on the GPU beside j. A Binding decided in an era before the book's is not
    sent again: w is read back, held until none of its Bindings can land any more
    (bindCommitSeconds after the last was sent), then decided afresh in the new era."""
    r, j, w, backup = await backed_up_then_freed(backend)
    r.api.stalled[w.key] = None  # etcd stalls: w's Binding gets no answer
    r.clock.now += 10.0  # w's backoff
    await r.renew()
    assert await r.step() == w.key
    await until(lambda: r.api.stalled[w.key] is not None)  # sent
    assert r.s.book.stage(w.key) is Stage.BINDING and r.held(w.key) == ("n", [0])
    r.api.pods, r.api.version = dict(backup[0]), backup[1]  # the restore: j bound, w pending
    del r.api.stalled[w.key]  # the write waiting in the stall never commits; etcd answers
    r.s.intake.replace_pending([r.api.pods[w.key]], r.api.version)
    r.s.intake.replace_bound(*r.bound_list())
    assert r.s.book.era == 1 and r.held(j.key) == ("n", [0])
    reads = 0
    read = r.api.get_pod

    async def counted(namespace: str, name: str) -> PodInput | None:
        nonlocal reads
        reads += 1
        return await read(namespace, name)

    r.api.get_pod = counted  # type: ignore[method-assign]
    await until(lambda: reads >= 3 or r.api.binds)  # the re-sends' time
    assert r.api.binds == []  # nothing decided in the era before is sent in this one
    assert r.s.book.stage(w.key) is Stage.BINDING  # its Bindings may still land: held
    while r.s.book.stage(w.key) is Stage.BINDING:  # until none of them can
        r.clock.now += 5.0
        await r.renew()
        await asyncio.sleep(0.01)
    await r.settle()
    assert r.s.book.stage(w.key) is Stage.PENDING and r.held(w.key) is None
    await run(r)  # decided afresh: j holds the one GPU
    assert r.api.binds == [] and r.api.pods[w.key].node_name == ""
    assert r.held(j.key) == ("n", [0]) and r.held(w.key) is None
    assert await store_of(r) == ({"default/j": "bound:(0,)"}, {0: "default/j"}, {})


# ---- found by the simulation (seed 44): a reservation let go when its pod is decided afresh -----


async def test_issue30_sim44_a_reloaded_pod_decided_elsewhere_wakes_the_waiting_pods(
    backend: Backend,
) -> None:
    """A previous leader reserved p on n2 and died before binding; the new leader holds p
    there until no Binding of the old one can land. Meanwhile q (2 GPUs) finds no node with 2
    free and waits. Then p is decided afresh, onto n1 (fuller, freed meanwhile): n2 is free.
    Before the fix nothing woke q: it waited beside 2 free GPUs until the unschedulable pods'
    flush (podMaxUnschedulableSeconds, 5 minutes)."""
    api = Apiserver()
    nodes = [MakeNode().Name(n).GPUs(2).Obj() for n in ("n1", "n2")]
    x = api.create(MakePod().Name("x").Req(1).Bound("n1", "0").Obj())
    y = api.create(MakePod().Name("y").Req(1).Bound("n1", "1").Obj())
    p = api.create(MakePod().Name("p").Req(1).Obj())
    api.gates[p.key] = asyncio.Event()  # its Binding never goes out: "old" dies first
    old = backend.replica(api, "old")
    await old.elect(nodes, [x, y])
    old.s.intake.pending_event("ADDED", p)
    await old.step()  # reserved on n2 (n1 is full)
    assert old.held(p.key) is not None and old.held(p.key)[0] == "n2"  # type: ignore[index]
    await backend.store.release_lease("old", old.leadership.epoch or 0)
    old.s.accepting = False
    for t in list(old.s.tasks.running):
        t.cancel()
    await asyncio.gather(*list(old.s.tasks.running), return_exceptions=True)
    api.gates.clear()
    r = backend.replica(api, "r")
    r.s.intake.pending_event("ADDED", p)
    await r.elect(nodes, [x, y])
    assert r.s.book.stage(p.key) is Stage.UNSETTLED
    r.s.intake.bound_event("DELETED", api.delete(y.key))  # n1/1 free
    q = r.pending(MakePod().Name("q").Req(2).Obj())
    await run(r)
    assert r.s.book.stage(q.key) is Stage.PENDING and not api.binds  # no node has 2 free
    await past_commit(r)  # p read back pending: decided afresh
    await run(r)
    assert r.held(p.key) == ("n1", [1])
    assert api.binds == [(p.key, "n1", "1"), (q.key, "n2", "0,1")]


# ---- found by the soak (seed 5205): a Binding sent while a restore's LISTs were under way ------


async def test_issue30_sim5205_no_binding_is_sent_while_both_pod_watches_list(
    backend: Backend,
) -> None:
    """Soak seed 5205: j holds node n's one GPU and w waits; etcd is backed up; j is deleted
    (recreated elsewhere, in the seed) and the GPU is free. etcd is restored from the backup:
    j is bound on the GPU again and w pending, and both watches break and ask for a LIST. The
    leader decides w onto the GPU before those LISTs are in (its view still the era before).
    Before the fix w's Binding went out at once and landed beside j, which the restore brought
    back. A Binding waits while both pod watches re-list: the LISTs begin a new era, and w,
    decided in the era before, is never sent; it is decided afresh, and waits."""
    r, j, w, backup = await backed_up_then_freed(backend)
    r.api.pods, r.api.version = dict(backup[0]), backup[1]  # the restore: j bound, w pending
    r.s.intake.pending_list_begin()  # every watch broke: each asks for a LIST
    r.s.intake.bound_list_begin()
    r.clock.now += 10.0  # w's backoff
    await r.renew()
    assert await r.step() == w.key  # decided onto the GPU the era before gave back
    assert r.s.book.stage(w.key) is Stage.BINDING and r.held(w.key) == ("n", [0])
    await asyncio.sleep(0.05)  # the binder's turn: it waits for the LISTs
    assert r.api.binds == []
    r.s.intake.pending_list_page([r.api.pods[w.key]])
    r.s.intake.pending_list_end(r.api.version)
    pods, version = r.bound_list()
    r.s.intake.bound_list_page(pods)
    r.s.intake.bound_list_end(version)
    assert r.s.book.era == 1 and r.held(j.key) == ("n", [0])
    await r.settle()
    assert r.api.binds == []  # decided in the era before: never sent
    assert r.s.book.stage(w.key) is Stage.PENDING and r.held(w.key) is None
    await run(r)  # decided afresh: j holds the one GPU
    assert r.api.binds == [] and r.api.pods[w.key].node_name == ""
    assert r.held(j.key) == ("n", [0]) and r.held(w.key) is None
    assert await store_of(r) == ({"default/j": "bound:(0,)"}, {0: "default/j"}, {})
