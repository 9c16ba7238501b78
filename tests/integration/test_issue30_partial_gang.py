"""Issue 30, sim seed 629: a gang member whose Binding is refused for good after a sibling's
Binding committed keeps the GPUs its gang was decided with. Stepped by hand through the live
scheduler's own parts on BOTH stores (the ``backend`` fixture of test_pod_lifecycle.py: the
memory store and the real Redis store), against the fake apiserver of tests/lifecycle.py.

On the code before the fix the refused member was pending again holding nothing and every
waiting pod retried: another gang, waiting for exactly those GPUs, took them, and the first
gang stayed below its minimum with a member bound (the partial gang holding GPUs that the
gangs' all-or-nothing rule exists to prevent).
"""

from __future__ import annotations

import asyncio

from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, store_of
from tests.lifecycle import node, until

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def test_issue30_a_gang_member_refused_after_a_sibling_bound_keeps_its_gpus(
    backend: Backend,
) -> None:
    r = backend.live()
    await r.elect([node(3)])
    for i in range(2):
        r.pending(MakePod().Name(f"j-{i}").Req(1).Gang("j", 2).Obj())
    r.api.refuse["default/j-1"] = 403  # e.g. a transient authorization failure
    r.api.gates["default/j-1"] = gate = asyncio.Event()
    assert await r.step() == "default/j-0"  # the gang decided whole: j-0 on 0, j-1 on 1
    await until(lambda: len(r.api.binds) == 1)  # j-0 is bound; j-1's Binding waits
    assert r.held("default/j-1") == ("n", [1])
    # Gang k waits for two GPUs: one is free.
    for i in range(2):
        r.pending(MakePod().Name(f"k-{i}").Req(1).Gang("k", 2).Obj())
    assert await r.step() == "default/k-0"
    assert r.held("default/k-0") is None and r.held("default/k-1") is None
    gate.set()  # j-1's Binding is refused 403 on every attempt: none of its Bindings can land
    await r.settle()
    for _ in range(6):  # the refusals go on for a while: every pod's backoff passes
        r.clock.now += 10.0
        await r.renew()
        while await r.step() is not None:
            await r.settle()
    # j is below its minimum with a member bound: j-1's GPU stays held for it (the gang's), so
    # k is not bound on it.
    assert [b[0] for b in r.api.binds] == ["default/j-0"]
    assert r.held("default/k-0") is None and r.held("default/k-1") is None
    assert r.s.book.stage("default/j-1") is Stage.RELOADED
    assert r.held("default/j-1") == ("n", [1])
    # The refusal ends; j-1 is decided again at its turn, its gang's GPU free to it.
    del r.api.refuse["default/j-1"]
    for _ in range(3):  # past its backoff
        r.clock.now += 10.0
        await r.renew()
    while await r.step() is not None:
        await r.settle()
    assert sorted(b[0] for b in r.api.binds) == ["default/j-0", "default/j-1"]
    assert r.s.book.stage("default/j-1") is Stage.ASSUMED and r.held("default/j-1") == ("n", [1])
    assert r.held("default/k-0") is None and r.held("default/k-1") is None
    records, owners, _ = await store_of(r)
    assert records == {"default/j-0": "bound:(0,)", "default/j-1": "bound:(1,)"}
    assert owners == {0: "default/j-0", 1: "default/j-1"}


async def test_issue30_a_gang_refused_whole_holds_nothing(backend: Backend) -> None:
    """Every member refused (nothing of the gang bound or binding): the gang lets its GPUs go
    and another unit may take them, as before."""
    r = backend.live()
    await r.elect([node(2)])
    for i in range(2):
        r.pending(MakePod().Name(f"j-{i}").Req(1).Gang("j", 2).Obj())
        r.api.refuse[f"default/j-{i}"] = 403
    assert await r.step() == "default/j-0"
    await r.settle()
    assert r.s.book.stage("default/j-0") is Stage.PENDING
    assert r.s.book.stage("default/j-1") is Stage.PENDING
    assert r.held("default/j-0") is None and r.held("default/j-1") is None
    r.pending(MakePod().Name("c").Req(2).Obj())
    while await r.step() is not None:
        await r.settle()
    assert [b[0] for b in r.api.binds] == ["default/c"]
    assert await store_of(r) == (
        {"default/c": "bound:(0, 1)"},
        {0: "default/c", 1: "default/c"},
        {},
    )


async def test_issue30_a_gang_member_refused_while_a_siblings_binding_may_land_keeps_its_gpus(
    backend: Backend,
) -> None:
    """The sibling's Binding is unanswered (etcd stalls; it may yet commit): the refused member's
    GPU is the gang's all the same, and is not given to the gang waiting for it."""
    r = backend.live(bind_timeout=0.02)
    await r.elect([node(3)])
    for i in range(2):
        r.pending(MakePod().Name(f"j-{i}").Req(1).Gang("j", 2).Obj())
    r.api.stalled["default/j-0"] = None  # no answer; it commits when the stall ends
    r.api.refuse["default/j-1"] = 403
    for i in range(2):
        r.pending(MakePod().Name(f"k-{i}").Req(1).Gang("k", 2).Obj())
    assert await r.step() == "default/j-0"
    await until(lambda: r.s.book.stage("default/j-1") is not Stage.BINDING)
    assert await r.step() == "default/k-0"  # two GPUs wanted, one free
    assert r.held("default/k-0") is None and r.held("default/k-1") is None
    assert r.s.book.stage("default/j-0") is Stage.BINDING  # sent again until an answer says
    assert r.s.book.stage("default/j-1") is Stage.RELOADED
    assert r.held("default/j-1") == ("n", [1])
    r.api.end_stall("default/j-0")  # j-0's first Binding commits
    del r.api.refuse["default/j-1"]
    await until(lambda: r.s.book.stage("default/j-0") is Stage.ASSUMED)
    for _ in range(3):  # past j-1's backoff
        r.clock.now += 10.0
        await r.renew()
    while await r.step() is not None:
        await r.settle()
    assert sorted(b[0] for b in r.api.binds) == ["default/j-0", "default/j-1"]
    assert r.held("default/k-0") is None and r.held("default/k-1") is None
