"""Issue 30, the simulation's seed 33 (and the earlier seed 46): a graceful handover right after
the old leader's last Binding landed, while the new leader's pending watch still shows that pod
pending. The old leader marked the pod bound in the store and released its lease; the new
leader's election reconcile kept only reservations of pending pods and freed the bound record,
did not hold its GPUs, decided the pod afresh and gave its GPU to another pod. Stepped by hand
on BOTH stores (the ``backend`` fixture of test_pod_lifecycle.py), against the fake apiserver
of tests/lifecycle.py.
"""

from __future__ import annotations

from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_issue30_binding import gpus_given_twice
from tests.integration.test_pod_lifecycle import Backend, store_of
from tests.lifecycle import Apiserver, node

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def test_issue30_a_bound_record_of_a_pod_the_new_leaders_watch_shows_pending_is_held(
    backend: Backend,
) -> None:
    """Leader a binds p (landed, marked bound in the store) and hands over; standby b's pending
    watch has shown p and not yet its Binding. b holds p's GPU where the store's record says and
    keeps the record (a reservation again: a previous leader's decision for a pending pod), so c,
    ahead of p in b's queue, waits; the watch then shows p bound there."""
    api = Apiserver()
    a = backend.replica(api, "a")
    b = backend.replica(api, "b")
    b.s.intake.replace_nodes([node(1)])
    b.s.intake.replace_bound([], 0)
    await a.elect([node(1)])
    # c, created first, is in b's queue ahead of p (a's pending watch has not shown it yet).
    c = api.create(MakePod().Name("c").Req(1).Obj())
    b.s.intake.pending_event("ADDED", c)
    p = a.pending(MakePod().Name("p").Req(1).Obj())
    b.s.intake.pending_event("ADDED", p)
    assert await a.step() == p.key
    await a.settle()
    assert api.pods[p.key].node_name == "n"
    await a.s.drain()  # the mark-bound flush is done: the store's record of p is bound
    assert await store_of(a) == ({"default/p": "bound:(0,)"}, {0: "default/p"}, {})
    await backend.store.release_lease("a", a.leadership.epoch or 0)
    await b.elect([node(1)])
    while await b.step() is not None:
        pass
    await b.settle()
    assert gpus_given_twice(api) == []
    assert b.held(c.key) is None  # GPU 0 is p's
    assert b.held(p.key) == ("n", [0])
    assert b.s.book.stage(p.key) is Stage.UNSETTLED
    assert await store_of(b) == ({"default/p": "reserved:(0,)"}, {0: "default/p"}, {})
    b.bound_seen(p.key)
    await b.settle()
    assert b.s.book.stage(p.key) is Stage.BOUND and b.held(p.key) == ("n", [0])


async def test_issue30_a_bound_relist_that_frees_a_missing_pod_keeps_the_gpu_a_listed_pod_holds(
    backend: Backend,
) -> None:
    """The simulation's seed 2: while the bound watch was down, x (bound on n/0) ended and y was
    bound on n/0 (by another leader, or an etcd restore brought y back). The re-list charges y
    as its page comes (x still held: a double claim, warned) and frees x, missing, at its end.
    Freeing x cleared GPU 0 from the node although y holds it: c was given y's GPU (the
    node's count of free GPUs said one, right; its mask of them said two)."""
    api = Apiserver()
    r = backend.replica(api, "a")
    x = api.create(MakePod().Name("x").Req(1).Obj())
    x = api.land(x.key, "n", "0")
    await r.elect([node(2)], [x])
    assert r.held(x.key) == ("n", [0])
    del api.pods[x.key]
    y = api.create(MakePod().Name("y").Req(1).Obj())
    y = api.land(y.key, "n", "0")
    r.s.intake.replace_bound(*r.bound_list())
    assert r.held(x.key) is None and r.held(y.key) == ("n", [0])
    c = r.pending(MakePod().Name("c").Req(1).Obj())
    while await r.step() is not None:
        pass
    await r.settle()
    assert gpus_given_twice(api) == []
    assert r.held(c.key) == ("n", [1])  # GPU 0 is y's
