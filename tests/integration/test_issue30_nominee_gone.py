"""Issue 30, found by the simulation's soak (seed 4450): a preemptor deleted while its
nomination held GPUs. Stepped by hand through the live scheduler's own parts on BOTH stores
(the ``backend`` fixture of test_pod_lifecycle.py: the memory store and the real Redis store),
against the fake apiserver of tests/lifecycle.py.

On the code before the fix the pods that waited beside the nominated GPUs stayed pending until
their unschedulable wait ran out (run.tuning.podMaxUnschedulableSeconds, 5 minutes).
"""

from __future__ import annotations

from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import node

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def test_a_preemptor_deleted_while_nominated_moves_the_pods_waiting_for_its_gpus(
    backend: Backend,
) -> None:
    """Sim seed 4450: x holds one of n's two GPUs; p (2 GPUs, high priority) finds no place
    and preempts x, its nomination holding both GPUs of n while x terminates. a (1 GPU) then
    finds none free beside the nomination and waits as unschedulable. p is deleted: its
    nomination ends, and n's second GPU is free for a. Before the fix nothing moved a (kube-
    scheduler moves the waiting pods when a pod with a nominated node is deleted): pending
    beside a free GPU for 5 minutes."""
    r = backend.live()
    x = r.api.create(MakePod().Name("x").Req(1).Bound("n", "0").Obj())
    await r.elect([node(2)], [x])
    p = r.pending(MakePod().Name("p").Req(2).Priority(1000).Obj())
    assert await r.step() == p.key
    await r.settle()
    assert p.key in r.s.state.nominations
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    assert await r.step() == a.key
    await r.settle()
    assert r.s.book.stage(a.key) is Stage.PENDING and not r.api.binds
    r.s.intake.pending_event("DELETED", r.api.delete(p.key))  # p is deleted, still pending
    await r.settle()
    assert p.key not in r.s.state.nominations
    # The loop's next turn (``Scheduler.run``): its timers, then, a's backoff run out (2 s,
    # the lease renewed), every pod ready.
    if r.s.preemptions.tick():
        r.s.queue.on_cluster_event()
    r.clock.now += 2.0
    await r.renew()
    await run(r)
    assert r.api.binds == [(a.key, "n", "1")]
