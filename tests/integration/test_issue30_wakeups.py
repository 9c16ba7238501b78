"""Issue 30, timelines the deterministic simulation found (tests/sim, seeds 17 and 23 with the
open-bug rules left out): GPUs a pod let go without the pods waiting for them being told.
Stepped by hand through the live scheduler's own parts on BOTH stores (the ``backend`` fixture
of test_pod_lifecycle.py: the memory store and the real Redis store), against the fake
apiserver of tests/lifecycle.py.

On the code before the fix the waiting pod stayed pending beside the free GPUs until its
unschedulable wait ran out (run.tuning.podMaxUnschedulableSeconds, 5 minutes).
"""

from __future__ import annotations

import asyncio

import msgspec

from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_issue30_binding import lease_lapses
from tests.integration.test_pod_lifecycle import Backend
from tests.lifecycle import Apiserver, node, past_commit, until

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def test_issue30_a_reloaded_pod_decided_afresh_and_not_placed_wakes_the_waiting_pods(
    backend: Backend,
) -> None:
    """Seeds 17 and 23: leader a decides gang job = {g0, g1} onto node n's two GPUs; g1's
    Binding lands, g0's stalls, and a is killed (in the simulation: g0's Binding refused 403,
    a killed before its retry). g1 runs and succeeds. Standby b is elected and holds g0 where
    a decided (unsettled); c, asking for both GPUs, waits for the one g0 holds. Once no Binding
    of a can land, g0 is read back pending and decided afresh: its gang cannot be placed (one
    of its two replicas is left), so TAKEN's forget freed its GPU for good. Before the fix that
    forget was quiet: c was not retried and stayed pending beside two free GPUs."""
    api = Apiserver()
    a = backend.replica(api, "a", bind_timeout=0.02)
    b = backend.replica(api, "b", bind_timeout=0.02)
    b.s.intake.replace_nodes([node(2)])
    b.s.intake.replace_bound([], 0)
    await a.elect([node(2)])
    api.stalled["default/g0"] = None
    for name in ("g0", "g1"):
        b.s.intake.pending_event(
            "ADDED", a.pending(MakePod().Name(name).Req(1).Gang("job", 2).Obj())
        )
    while await a.step() is not None:
        pass
    await until(lambda: api.stalled["default/g0"] is not None)  # sent, no answer
    await until(lambda: api.pods["default/g1"].node_name == "n")
    held_by_g0 = a.held("default/g0")
    # kill -9 while g0's Binding stalls; it never commits (etcd gave up).
    a.s.accepting = False
    for t in list(a.s.tasks.running):
        t.cancel()
    await asyncio.gather(*list(a.s.tasks.running), return_exceptions=True)
    await lease_lapses(backend)
    api.stalled = {}
    b.s.intake.pending_event("DELETED", api.pods["default/g1"])  # bound: off the pending watch
    api.pods["default/g1"] = api.stamp(
        msgspec.structs.replace(api.pods["default/g1"], phase="Succeeded")
    )
    await b.elect([node(2)], [])  # g1 succeeded: not in the bound LIST
    await b.settle()  # g1's inherited record: read back finished, gone
    assert b.s.book.stage("default/g0") is Stage.UNSETTLED and b.held("default/g0") == held_by_g0
    c = b.pending(MakePod().Name("c").Req(2).Obj())
    assert await b.step() == c.key
    await b.settle()
    assert b.held(c.key) is None  # one GPU is g0's while a's Binding of it may land
    assert c.key in api.unschedulable
    await past_commit(b)  # g0 read back pending: decided afresh
    assert b.s.book.stage("default/g0") is Stage.RELOADED
    assert await b.step() == "default/g0"
    await b.settle()
    assert b.s.book.stage("default/g0") is Stage.PENDING and b.held("default/g0") is None
    assert "1 of 2" in api.unschedulable["default/g0"]
    assert await b.step() == c.key  # GPUs were let go: the waiting pod retries
    await b.settle()
    assert [(k, d) for k, _, d in api.binds[1:]] == [("default/c", "0,1")]
