"""Issue 30, timelines 1 and 2 and 7's inherited record of a pending pod: once any Binding of a
pod may have been sent, its GPUs stay held until the apiserver's truth is known (bound, or
definitely not bound with no Binding left that can land). Stepped by hand through the live
scheduler's own parts on BOTH stores (the ``backend`` fixture of test_pod_lifecycle.py: the
memory store and the real Redis store), against the fake apiserver of tests/lifecycle.py with
its stalls, lost answers, failing reads and failing or stalling ResourceClaim writes.

On the code before the fixes each ended with one GPU given to two pods (or a pod's
ResourceClaims left reserved for it after its Binding was refused, or the store freeing an
inherited record while its pod waits to be decided).
"""

from __future__ import annotations

import asyncio

import msgspec
import redis.asyncio as aioredis

from scheduler.config.tuning import Tuning
from scheduler.core.model.dra import Allocation, ResourceClaim
from scheduler.core.model.objects import NodeInput, PodClaim, PodInput
from scheduler.service.podbook import Stage
from tests.builders import MakeNode, MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, store_of
from tests.lifecycle import TTL_MS, Apiserver, Replica, node, past_commit, until

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


def with_claim(r: Replica, pod: PodInput) -> PodInput:
    """``pod`` using the allocated ResourceClaim ``gc`` (its watch has listed it)."""
    r.s.state.inputs.resource_claims.put(
        ResourceClaim("default", "gc", uid="claim-uid", allocation=Allocation())
    )
    return msgspec.structs.replace(pod, resource_claims=(PodClaim("gpu", "gc"),))


def gpus_given_twice(api: Apiserver) -> list[tuple[str, int]]:
    """(node, GPU) held by two pods the apiserver shows bound."""
    seen: dict[tuple[str, int], str] = {}
    twice = []
    for pod in api.pods.values():
        devices = pod.annotations.get("topo-scheduler.io/devices", "")
        for d in filter(None, devices.split(",")):
            key = (pod.node_name, int(d))
            if key in seen:
                twice.append(key)
            seen[key] = pod.key
    return twice


async def lease_lapses(backend: Backend) -> None:
    """The leader's lease runs out unrenewed (Redis keeps its expiry by its own clock: the key
    goes as its PX would make it go)."""
    backend.clock.now += TTL_MS / 1000 + 1
    if backend.url:
        client = aioredis.Redis.from_url(backend.url)
        await client.delete("life:lease")
        await client.aclose()


# ---- 1: a re-sent Binding whose claim write fails keeps the pod's GPUs ------------------------


async def test_issue30_1a_a_resend_whose_claim_patch_times_out_keeps_the_gpus(
    backend: Backend,
) -> None:
    r = backend.live(bind_timeout=0.02)
    await r.elect([node(1)])
    r.pending(with_claim(r, MakePod().Name("a").Req(1).Obj()))
    r.api.stalled["default/a"] = None  # etcd stalls: a's Binding gets no answer
    await r.step()
    await until(lambda: r.api.stalled["default/a"] is not None)  # sent (reservedFor written)
    assert r.api.reserved == [("default/gc", r.api.pods["default/a"].uid)]
    r.api.claim_writes = "stall"  # the re-send's claim patch times out on the same stall
    # Three attempts cut at the timeout, the read-back says pending (kept); then re-sends,
    # each one's claim patch timing out.
    await until(
        lambda: r.api.claim_writes_tried >= 3 or r.s.book.stage("default/a") is not Stage.BINDING
    )
    assert r.s.book.stage("default/a") is Stage.BINDING and r.held("default/a") == ("n", [0])
    r.pending(MakePod().Name("c").Req(1).Obj())
    assert await r.step() == "default/c"
    assert r.held("default/c") is None  # GPU 0 is still a's
    r.api.claim_writes = ""
    r.api.end_stall("default/a")  # the first Binding commits
    await r.settle()  # a re-send gets 409 on a pod bound as we asked: ours
    assert r.api.binds == [("default/a", "n", "0")] and gpus_given_twice(r.api) == []
    assert r.s.book.stage("default/a") is Stage.ASSUMED
    assert r.s.book.stage("default/c") is Stage.PENDING and r.held("default/c") is None
    assert await store_of(r) == ({"default/a": "bound:(0,)"}, {0: "default/a"}, {})


async def test_issue30_1b_a_resend_whose_claim_write_fails_after_a_lost_answer_keeps_the_gpus(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.pending(with_claim(r, MakePod().Name("a").Req(1).Obj()))
    r.api.lose_answer.add("default/a")

    def restarting(key: str) -> None:
        """The apiserver restarts right after a's Binding committed: reads and claim writes
        fail until it is back."""
        r.api.reads_fail = True
        r.api.claim_writes = "fail"

    r.api.bound = restarting  # type: ignore[method-assign]
    await r.step()
    # The retry's 409 cannot be read back (unknown); the re-send's claim write fails.
    await until(
        lambda: r.api.claim_writes_tried >= 3 or r.s.book.stage("default/a") is not Stage.BINDING
    )
    assert r.s.book.stage("default/a") is Stage.BINDING and r.held("default/a") == ("n", [0])
    r.pending(MakePod().Name("c").Req(1).Obj())
    assert await r.step() == "default/c"
    assert r.held("default/c") is None  # GPU 0 is a's: it is bound there
    r.api.reads_fail = False
    r.api.claim_writes = ""  # the apiserver is back
    await r.settle()  # the next re-send's 409 reads a back: bound as we asked
    assert r.api.binds == [("default/a", "n", "0")] and gpus_given_twice(r.api) == []
    assert r.s.book.stage("default/a") is Stage.ASSUMED and r.held("default/a") == ("n", [0])
    assert await store_of(r) == ({"default/a": "bound:(0,)"}, {0: "default/a"}, {})


async def test_issue30_1b_a_check_that_reads_the_pod_bound_charges_it(backend: Backend) -> None:
    """A Binding refused with 500 three times: failed, re-read (reads fail meanwhile). The first
    500 had committed all the same (etcd's answer was lost); the re-read finds a bound on GPU 0:
    its GPU is charged at once, not when the bound watch re-lists."""
    r = backend.live()
    await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.refuse["default/a"] = 500
    r.api.reads_fail = True
    await r.step()
    await until(lambda: r.s.book.stage("default/a") is Stage.PENDING)
    assert r.held("default/a") is None
    r.api.land("default/a", "n", "0")  # it had committed
    r.api.reads_fail = False
    entry = r.s.book.get("default/a")
    assert entry is not None
    await until(lambda: not entry.checking)  # the re-read answered: bound on GPU 0
    r.pending(MakePod().Name("c").Req(1).Obj())  # before the bound watch re-lists
    while await r.step() is not None:
        pass
    await r.settle()
    assert gpus_given_twice(r.api) == [] and r.held("default/c") is None
    assert r.s.book.stage("default/a") is Stage.BOUND and r.held("default/a") == ("n", [0])
    r.clock.now += Tuning().store_reconcile_seconds  # the reconcile the re-read asked for
    await r.s.sync.if_needed()
    assert await store_of(r) == ({"default/a": "bound:(0,)"}, {0: "default/a"}, {})


async def test_issue30_1_unreserve_a_refused_binding_removes_the_pod_from_reserved_for(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    a = r.pending(with_claim(r, MakePod().Name("a").Req(1).Obj()))
    r.api.refuse["default/a"] = 403  # e.g. an admission webhook refuses the Binding
    await r.step()
    await r.settle()
    assert r.s.book.stage("default/a") is Stage.PENDING and r.held("default/a") is None
    # kube-scheduler's Unreserve: the claim is no longer reserved for a (its allocation stays).
    assert r.api.reserved == []
    assert r.api.unreserved == [("default/gc", "claim-uid", a.uid)]
    assert await store_of(r) == ({}, {}, {})


async def test_issue30_1_unreserve_not_while_a_binding_may_land(backend: Backend) -> None:
    """An unanswered Binding (stalled) keeps the claim reserved: it may yet commit."""
    r = backend.live(bind_timeout=0.02)
    await r.elect([node(1)])
    a = r.pending(with_claim(r, MakePod().Name("a").Req(1).Obj()))
    r.api.stalled["default/a"] = None
    await r.step()
    await until(lambda: r.s.metrics.bind_errors.labels(reason="timeout")._value.get() >= 4)
    assert r.s.book.stage("default/a") is Stage.BINDING
    assert r.api.reserved == [("default/gc", a.uid)] and r.api.unreserved == []
    r.api.end_stall("default/a")
    await r.settle()
    assert r.s.book.stage("default/a") is Stage.ASSUMED
    assert r.api.reserved == [("default/gc", a.uid)]


async def test_issue30_1_unreserve_a_reservation_no_replica_will_unreserve(
    backend: Backend,
) -> None:
    """Sim seeds 25 and 1016: a previous leader reserved a's claim, then lost its term before
    its Binding's outcome (deposed, killed, fenced), so no Unreserve of it was ever sent. The
    new leader holds a nowhere and finds no place for it (b has the GPU): it Unreserves the
    claim, which the watch shows reserved for a. c's claim, not reserved for it, is left
    alone."""
    r = backend.live()
    b = r.api.create(MakePod().Name("b").Req(1).Bound("n", "0").Obj())
    await r.elect([node(1)], [b])
    a = r.pending(with_claim(r, MakePod().Name("a").Req(1).Obj()))
    r.api.reserved.append(("default/gc", a.uid))  # the previous leader's PreBind
    r.s.state.inputs.resource_claims.put(
        ResourceClaim(
            "default", "gc", uid="claim-uid", allocation=Allocation(), reserved_for=(a.uid,)
        )
    )
    r.s.state.inputs.resource_claims.put(
        ResourceClaim("default", "gc2", uid="claim2-uid", allocation=Allocation())
    )
    c = MakePod().Name("c").Req(1).Obj()
    r.pending(msgspec.structs.replace(c, resource_claims=(PodClaim("gpu", "gc2"),)))
    while await r.step() is not None:
        pass
    await r.settle()
    assert r.s.book.stage("default/a") is Stage.PENDING and r.held("default/a") is None
    assert r.api.unreserved == [("default/gc", "claim-uid", a.uid)]
    assert r.api.reserved == []


async def test_issue30_1_a_reservation_waits_for_the_unreserve_before_it(
    backend: Backend,
) -> None:
    """The Unreserve of a stale reservation (its answer slow: the apiserver stalls) and the
    pod's next reservation, once b has left: the reservation is sent only after the Unreserve
    was answered, so the older write cannot land last and leave the pod bound with its claim
    not reserved for it."""
    r = backend.live(bind_timeout=1.0)
    b = r.api.create(MakePod().Name("b").Req(1).Bound("n", "0").Obj())
    await r.elect([node(1)], [b])
    a = r.pending(with_claim(r, MakePod().Name("a").Req(1).Obj()))
    r.api.reserved.append(("default/gc", a.uid))
    r.s.state.inputs.resource_claims.put(
        ResourceClaim(
            "default", "gc", uid="claim-uid", allocation=Allocation(), reserved_for=(a.uid,)
        )
    )
    r.api.claim_writes = "stall"
    await r.step()  # a: no place; its Unreserve is sent and gets no answer yet
    await until(lambda: r.api.claim_writes_tried == 1)
    r.api.claim_writes = ""
    r.clock.now += 2  # past a's first backoff
    await r.renew()
    r.api.delete("default/b")
    r.s.intake.bound_event("DELETED", b)
    while (await store_of(r))[0]:  # b's record released (the Unreserve still unanswered)
        await asyncio.sleep(0.01)
    assert await r.step() == "default/a"  # placed: its reservation waits for the Unreserve
    await asyncio.sleep(0.1)
    assert r.api.claim_writes_tried == 1 and r.s.book.stage("default/a") is Stage.BINDING
    await r.settle()  # the Unreserve given up at the bind timeout, then the reservation
    assert r.api.claim_writes_tried == 2 and r.api.reserved == [("default/gc", a.uid)]
    assert r.s.book.stage("default/a") is Stage.ASSUMED


# ---- 2: a handover or a failover keeps a Binding in flight where it is -------------------------


def nodes(pool: str) -> list[NodeInput]:
    """n1 and n2, 2 GPUs each; the node named ``pool`` carries the label pool=x."""
    return [
        (
            MakeNode().Name(name).GPUs(2).Label("pool", "x")
            if name == pool
            else MakeNode().Name(name).GPUs(2)
        ).Obj()
        for name in ("n1", "n2")
    ]


async def decided_and_stalled(backend: Backend) -> tuple[Apiserver, Replica, Replica]:
    """Leader a decides pod a onto n1/0 (its node selector pool=x: n1) and sends its Binding,
    which stalls (etcd); standby b's watches have a pending."""
    api = Apiserver()
    a = backend.replica(api, "a", bind_timeout=0.02)
    b = backend.replica(api, "b", bind_timeout=0.02)
    b.s.intake.replace_nodes(nodes("n1"))
    b.s.intake.replace_bound([], 0)
    await a.elect(nodes("n1"))
    api.stalled["default/a"] = None
    pod = a.pending(MakePod().Name("a").Req(1).NodeSelector("pool", "x").Obj())
    b.s.intake.pending_event("ADDED", pod)
    assert await a.step() == "default/a"
    assert a.held("default/a") == ("n1", [0])
    await until(lambda: api.stalled["default/a"] is not None)  # sent, no answer
    return api, a, b


async def after_the_stall(api: Apiserver, b: Replica) -> None:
    """b decides what is queued (the cluster changed: pool=x is n2 now; c asks for 2 GPUs), then
    the stall ends and the old leader's first Binding commits."""
    b.pending(MakePod().Name("c").Req(2).Obj())
    while await b.step() is not None:
        pass
    await until(lambda: any(key == "default/c" for key, _, _ in api.binds))
    api.end_stall("default/a")  # a's first Binding commits: on n1/0
    assert api.pods["default/a"].node_name == "n1"
    assert gpus_given_twice(api) == []
    assert [(k, n) for k, n, _ in api.binds] == [("default/c", "n2"), ("default/a", "n1")]
    assert b.held("default/a") == ("n1", [0])  # the old leader's decision, held all along
    assert b.s.book.stage("default/a") is Stage.UNSETTLED
    b.bound_seen("default/a")
    b.bound_seen("default/c")
    await b.settle()
    assert b.s.book.stage("default/a") is Stage.BOUND and b.held("default/a") == ("n1", [0])
    b.clock.now += Tuning().store_reconcile_seconds
    await b.s.sync.if_needed()
    assert await b.records() == {"default/a": "bound:(0,)", "default/c": "bound:(0, 1)"}


async def test_issue30_2_handover_keeps_a_stalled_binding_where_the_old_leader_decided(
    backend: Backend,
) -> None:
    api, a, b = await decided_and_stalled(backend)
    await a.s.drain()  # a rolling update: the re-sends stop, a is still binding
    assert a.s.book.stage("default/a") is Stage.BINDING
    await backend.store.release_lease("a", a.leadership.epoch or 0)
    await b.elect(nodes("n2"))  # the cluster changed meanwhile
    assert b.held("default/a") == ("n1", [0])
    await after_the_stall(api, b)


async def test_issue30_2_kill_during_an_etcd_stall_longer_than_the_lease(
    backend: Backend,
) -> None:
    api, a, b = await decided_and_stalled(backend)
    # kill -9: nothing of a runs any more; its lease lapses while etcd still stalls.
    a.s.accepting = False
    for t in list(a.s.tasks.running):
        t.cancel()
    await asyncio.gather(*list(a.s.tasks.running), return_exceptions=True)
    await lease_lapses(backend)
    await b.elect(nodes("n2"))
    assert b.held("default/a") == ("n1", [0])
    await after_the_stall(api, b)


async def test_issue30_2_a_reservation_whose_binding_never_landed_is_decided_afresh_once_settled(
    backend: Backend,
) -> None:
    """The stalled Binding failed after all (etcd gave up): once no Binding of the old leader can
    land, the pod is read back pending and decided afresh."""
    api, a, b = await decided_and_stalled(backend)
    await a.s.drain()
    await backend.store.release_lease("a", a.leadership.epoch or 0)
    api.stalled["default/a"] = None  # nothing of the old leader's will commit
    await b.elect(nodes("n2"))
    assert await b.step() is None  # not queued: held where it is
    assert b.held("default/a") == ("n1", [0])
    await past_commit(b)  # read back: pending
    assert b.s.book.stage("default/a") is Stage.RELOADED
    del api.stalled["default/a"]
    assert await b.step() == "default/a"
    await b.settle()
    assert [(k, n) for k, n, _ in api.binds] == [("default/a", "n2")]
    assert b.s.book.stage("default/a") is Stage.ASSUMED and b.held("default/a") == ("n2", [0])


def pools(x: str, y: str) -> list[NodeInput]:
    """n1, n2 and n3, 1 GPU each: n1 in pool ``x``, n2 in pool ``y``, n3 in pool z."""
    return [
        MakeNode().Name(name).GPUs(1).Label("pool", pool).Obj()
        for name, pool in (("n1", x), ("n2", y), ("n3", "z"))
    ]


async def test_issue30_2_a_gang_partly_bound_at_a_kill_is_bound_whole_once_settled(
    backend: Backend,
) -> None:
    """The e2e chaos failure (test_leader_sigkilled_during_gang_binds): leader a decides gang
    job = {g0: n3, g1: n1, g2: n2} and is killed while binding: g0's Binding lands, g1's and
    g2's never do. Standby b holds g1 and g2 where a decided (unsettled), reads them back
    pending once no Binding of a can land (reloaded), and decides the two afresh as one unit
    (g0 bound is counted): the cluster changed meanwhile, so they swap nodes (g1: n2, g2: n1).
    Each new claim names GPUs the other member's old reservation holds: the store refused the
    unit ("GPU 0 on node n2 is held by pod UID <g2's>") at every retry, until a reconcile freed
    both old reservations and another gang took the GPUs, leaving job partly bound for good.
    Here pod c, queued after them, took n2's GPU. The unit's own earlier claims are replaced
    by its new ones: it binds whole at once."""
    api = Apiserver()
    a = backend.replica(api, "a", bind_timeout=0.02)
    b = backend.replica(api, "b", bind_timeout=0.02)
    b.s.intake.replace_nodes(pools("y", "x"))
    b.s.intake.replace_bound([], 0)
    await a.elect(pools("x", "y"))
    api.stalled["default/g1"] = None
    api.stalled["default/g2"] = None
    for name, pool in (("g0", "z"), ("g1", "x"), ("g2", "y")):
        pod = a.pending(MakePod().Name(name).Req(1).Gang("job", 3).NodeSelector("pool", pool).Obj())
        b.s.intake.pending_event("ADDED", pod)
    while await a.step() is not None:
        pass
    await until(lambda: None not in (api.stalled["default/g1"], api.stalled["default/g2"]))
    await until(lambda: api.pods["default/g0"].node_name == "n3")
    # kill -9 while g1's and g2's Bindings stall; they never commit (etcd gave up).
    a.s.accepting = False
    for t in list(a.s.tasks.running):
        t.cancel()
    await asyncio.gather(*list(a.s.tasks.running), return_exceptions=True)
    await lease_lapses(backend)
    api.stalled = {}
    b.s.intake.pending_event("DELETED", api.pods["default/g0"])
    await b.elect(pools("y", "x"), [api.pods["default/g0"]])
    assert b.s.book.stage("default/g0") is Stage.BOUND
    assert b.held("default/g1") == ("n1", [0]) and b.held("default/g2") == ("n2", [0])
    assert b.s.book.stage("default/g1") is Stage.UNSETTLED
    await past_commit(b)  # both read back pending: decided afresh, together
    assert b.s.book.stage("default/g1") is b.s.book.stage("default/g2") is Stage.RELOADED
    b.pending(MakePod().Name("c").Req(1).NodeSelector("pool", "x").Obj())  # queued after job
    while await b.step() is not None:
        pass
    await b.settle()
    assert sorted((k, n) for k, n, _ in api.binds) == [
        ("default/g0", "n3"),
        ("default/g1", "n2"),
        ("default/g2", "n1"),
    ]
    assert gpus_given_twice(api) == [] and b.s.book.stage("default/c") is Stage.PENDING
    b.bound_seen("default/g1")
    b.bound_seen("default/g2")
    await b.settle()
    b.clock.now += Tuning().store_reconcile_seconds
    await b.s.sync.if_needed()
    assert await b.records() == {
        "default/g0": "bound:(0,)",
        "default/g1": "bound:(0,)",
        "default/g2": "bound:(0,)",
    }
    assert [await b.owners(n) for n in ("n1", "n2", "n3")] == [
        {0: "default/g2"},
        {0: "default/g1"},
        {0: "default/g0"},
    ]
    assert await b.gangs() == {"default/job": "bound:default/g0,default/g1,default/g2"}


# ---- 7: an inherited record of a pod read back pending is a reservation again -------------------


async def inherited(backend: Backend) -> tuple[Apiserver, Replica, PodInput]:
    """Leader a reserves p (its Binding stalls) and hands over; standby b's pending watch lags:
    it has never shown p, so b inherits the record (kept as bound by the election's
    reconcile) and re-reads p."""
    api = Apiserver()
    a = backend.replica(api, "a", bind_timeout=0.02)
    b = backend.replica(api, "b", bind_timeout=0.02)
    b.s.intake.replace_nodes([node(1)])
    b.s.intake.replace_bound([], 0)
    await a.elect([node(1)])
    api.stalled["default/p"] = None
    p = a.pending(MakePod().Name("p").Req(1).Obj())
    await a.step()
    await until(lambda: api.stalled["default/p"] is not None)
    await a.s.drain()
    await backend.store.release_lease("a", a.leadership.epoch or 0)
    return api, b, p


async def test_issue30_7c_an_inherited_record_of_a_pending_pod_stays_reserved(
    backend: Backend,
) -> None:
    """The re-read says pending: the record is a reservation again, which the next reconcile
    keeps (it freed a bound record of a pending pod: the next failover's new leader would not
    reload it and would give its GPU away while the Binding lands)."""
    api, b, _ = await inherited(backend)
    await b.elect([node(1)], [])
    await b.settle()  # the inherited record's re-read: pending
    assert b.held("default/p") == ("n", [0])
    assert await store_of(b) == ({"default/p": "reserved:(0,)"}, {0: "default/p"}, {})
    assert b.s.book.stage("default/p") is Stage.UNSETTLED
    b.s.sync.request()
    b.clock.now += Tuning().store_reconcile_seconds
    await b.s.sync.if_needed()  # a later reconcile keeps it
    assert await store_of(b) == ({"default/p": "reserved:(0,)"}, {0: "default/p"}, {})
    c = b.pending(MakePod().Name("c").Req(1).Obj())
    assert await b.step() == c.key
    assert b.held(c.key) is None  # GPU 0 is p's while its Binding may land
    api.end_stall("default/p")
    assert gpus_given_twice(api) == []
    b.bound_seen("default/p")
    await b.settle()
    assert b.s.book.stage("default/p") is Stage.BOUND and b.held("default/p") == ("n", [0])


async def test_issue30_7c_an_inherited_record_the_pending_watch_shows_stays_reserved(
    backend: Backend,
) -> None:
    """The pending watch shows p while its re-read fails: the same (a reservation again, held
    where it is); the re-read that then answers pending, made while the old leader's Binding
    may still land, is no answer; the one made once it cannot land is."""
    api, b, p = await inherited(backend)
    api.reads_fail = True
    await b.elect([node(1)], [])
    b.s.intake.pending_event("ADDED", p)
    reserved = ({"default/p": "reserved:(0,)"}, {0: "default/p"}, {})
    for _ in range(200):  # the record's reservation is written again (the re-read still fails)
        if await store_of(b) == reserved:
            break
        await asyncio.sleep(0.005)
    assert b.held("default/p") == ("n", [0])
    assert await store_of(b) == reserved
    api.reads_fail = False
    entry = b.s.book.get("default/p")
    assert entry is not None
    await until(lambda: not entry.checking)  # read: pending, too early to say
    assert b.s.book.stage("default/p") is Stage.UNSETTLED and b.held("default/p") == ("n", [0])
    api.stalled["default/p"] = None  # the old leader's Binding never commits
    await past_commit(b)  # read once it cannot land: pending, so decided afresh
    assert b.s.book.stage("default/p") is Stage.RELOADED
    del api.stalled["default/p"]
    assert await b.step() == "default/p"
    await b.settle()
    assert api.binds == [("default/p", "n", "0")]
    assert b.s.book.stage("default/p") is Stage.ASSUMED
    assert await store_of(b) == ({"default/p": "bound:(0,)"}, {0: "default/p"}, {})


async def test_issue30_2_a_gang_is_not_decided_while_a_member_is_unsettled(
    backend: Backend,
) -> None:
    """Members that settle at different times: leader a decides gang job = {g0: n1, g1: n2} and
    is killed while both Bindings stall in etcd. Standby b holds both where a decided
    (unsettled). Once no Binding of a can land, g1 is read back pending (reloaded) while g0's
    re-read gets no answer (the apiserver is unreachable for it): g0 stays unsettled, and may
    yet turn out bound on n1. Before the fix g1 was decided afresh without it (g0's holding
    counted as the gang's), moved to n3 by the changed cluster and bound there: the gang split
    across two leaders' decisions (and left partly bound, should g0 not fit again). Now the
    gang waits, parked with its reason, until g0 settles; then the two are decided together."""
    api = Apiserver()
    a = backend.replica(api, "a", bind_timeout=0.02)
    b = backend.replica(api, "b", bind_timeout=0.02)
    moved = [  # the cluster changed: n2 left pool y, n3 joined it
        MakeNode().Name(name).GPUs(1).Label("pool", pool).Obj()
        for name, pool in (("n1", "x"), ("n2", "q"), ("n3", "y"))
    ]
    b.s.intake.replace_nodes(moved)
    b.s.intake.replace_bound([], 0)
    await a.elect(pools("x", "y"))
    api.stalled["default/g0"] = None
    api.stalled["default/g1"] = None
    for name, pool in (("g0", "x"), ("g1", "y")):
        pod = MakePod().Name(name).Req(1).Gang("job", 2).NodeSelector("pool", pool).Obj()
        b.s.intake.pending_event("ADDED", a.pending(pod))
    while await a.step() is not None:
        pass
    await until(lambda: None not in (api.stalled["default/g0"], api.stalled["default/g1"]))
    # kill -9 while both Bindings stall; they never commit (etcd gave up).
    a.s.accepting = False
    for t in list(a.s.tasks.running):
        t.cancel()
    await asyncio.gather(*list(a.s.tasks.running), return_exceptions=True)
    await lease_lapses(backend)
    api.stalled = {}
    await b.elect(moved)
    assert b.held("default/g0") == ("n1", [0]) and b.held("default/g1") == ("n2", [0])
    # The apiserver answers no read of g0 (its re-read is retried); g1's read says pending.
    get_pod = api.get_pod

    async def g0_unreadable(namespace: str, name: str) -> PodInput | None:
        if name == "g0":
            raise ConnectionError("apiserver unavailable")
        return await get_pod(namespace, name)

    api.get_pod = g0_unreadable  # type: ignore[method-assign]
    while b.clock.now < b.s.effects.settled_at:  # past_commit, but g0's re-read never ends
        b.clock.now += 5.0
        await b.renew()
    b.s.effects.settle_due()
    await until(lambda: b.s.book.stage("default/g1") is Stage.RELOADED)
    assert b.s.book.stage("default/g0") is Stage.UNSETTLED
    while await b.step() is not None:
        pass
    for _ in range(20):  # whatever was handed to the binder has run
        await asyncio.sleep(0.001)
    assert api.binds == []  # nothing of job is decided while g0 may yet land on n1
    assert b.s.book.stage("default/g1") is Stage.RELOADED and b.held("default/g1") == ("n2", [0])
    assert "default/g0" in api.unschedulable["default/g1"]  # it says what it waits for
    api.get_pod = get_pod  # type: ignore[method-assign]
    await until(lambda: b.s.book.stage("default/g0") is Stage.RELOADED)  # read: pending
    while await b.step() is not None:
        pass
    await b.settle()
    assert sorted((k, n) for k, n, _ in api.binds) == [("default/g0", "n1"), ("default/g1", "n3")]
    assert gpus_given_twice(api) == []
