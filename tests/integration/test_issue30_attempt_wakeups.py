"""Issue 30, found by the simulation's soak (seed 1541): GPUs freed while a pod's scheduling
attempt was under way, the attempt then finding no place for it on the snapshot from before.
Stepped by hand through the live scheduler's own parts on BOTH stores (the ``backend`` fixture
of test_pod_lifecycle.py: the memory store and the real Redis store), against the fake
apiserver of tests/lifecycle.py.

On the code before the fix the pod stayed pending beside the free GPUs until its unschedulable
wait ran out (run.tuning.podMaxUnschedulableSeconds, 5 minutes).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from scheduler.service.podbook import Stage
from scheduler.state.base import Store, StoreError
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica, node, until

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


class UnreachableForNominations:
    """The store, its nominations' write held at ``gate`` (a slow store), then failing (the
    store unreachable by then)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.asked = asyncio.Event()
        self.gate = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def nominate(self, *args: Any, **kwargs: Any) -> None:
        self.asked.set()
        await self.gate.wait()
        raise StoreError("store unreachable")


async def test_gpus_freed_while_an_attempt_awaits_the_store_retry_its_pod(
    backend: Backend,
) -> None:
    """Sim seed 1541: p (2 GPUs, high priority) finds no place (x holds one of node n's two
    GPUs) and preempts x; the store is slow to take the nominations. Meanwhile x ends: n is
    free, and every waiting pod is moved, but p's attempt is still under way. The store then
    fails: "postponed, the store did not take the nominations". Before the fix p waited as
    unschedulable for an event that had come already: pending beside two free GPUs for 5
    minutes. An attempt during which such an event came backs off instead."""
    store = UnreachableForNominations(backend.store)
    r = Replica(Apiserver(), cast(Store, store), backend.clock, tuning=QUICK_RETRIES)
    x = r.api.create(MakePod().Name("x").Req(1).Bound("n", "0").Obj())
    await r.elect([node(2)], [x])
    p = r.pending(MakePod().Name("p").Req(2).Priority(1000).Obj())
    attempt = asyncio.ensure_future(r.step())
    await until(store.asked.is_set)
    r.s.intake.bound_event("DELETED", r.api.delete(x.key))  # x ends: n is free
    store.gate.set()
    assert await attempt == p.key
    await r.settle()
    assert r.s.book.stage(p.key) is Stage.PENDING and not r.api.binds
    backend.clock.now += 1.0  # its backoff
    await run(r)
    assert r.api.binds == [(p.key, "n", "0,1")]
