"""Issue 30, sim timeline e2e-unit-blocked-by-itself on the Redis store, stepped by hand through
the live scheduler's own parts on BOTH stores (the memory store and a ``RedisStore`` on the
session's real redis-server), with tests/lifecycle.py's fake apiserver and a manual clock.

A reconcile reads the book (a pod whose Binding is in flight is named pending, and is not in the
truth), then writes the store. On Redis that write is several calls, so the leader's own mark of
the pod as bound, flushed meanwhile, can land inside it: the free step then found a bound record
of a UID named pending, which it keeps only while reserved, and freed it; nothing wrote it again.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from scheduler.service.podbook import Stage
from scheduler.state.base import Store
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, store_of
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica, node, until

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


class GatedReconcile:
    """The store, with each reconcile held at ``gate`` once the caller has read its book: the
    window in which, on Redis, the reconcile's own calls follow one another."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.gate = asyncio.Event()
        self.gate.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def reconcile(self, *args: Any) -> Any:
        await self.gate.wait()
        return await self.store.reconcile(*args)


async def test_a_mark_bound_does_not_land_inside_a_reconcile(backend: Backend) -> None:
    """Before the fix the flush sent a's mark while the reconcile was under way: the store
    marked a bound, then the reconcile (a named pending, not in its truth) freed the record,
    and the store held nothing for a pod bound on GPU 0."""
    store = GatedReconcile(backend.store)
    r = Replica(Apiserver(), cast(Store, store), backend.clock, tuning=QUICK_RETRIES)
    epoch = await r.elect([node(1)])
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.gates["default/a"] = bind = asyncio.Event()
    assert await r.step() == "default/a"
    await until(lambda: r.s.book.stage("default/a") is Stage.BINDING)
    store.gate.clear()
    reconcile = asyncio.create_task(r.s.sync.reconcile(epoch))  # a named pending
    await asyncio.sleep(0)
    bind.set()  # a's Binding is answered: its mark is queued and flushed
    await until(lambda: r.s.book.stage("default/a") is Stage.ASSUMED)
    for _ in range(10):
        await asyncio.sleep(0)  # before the fix the mark landed here, inside the reconcile
    store.gate.set()
    await reconcile
    await r.settle()
    assert await store_of(r) == ({"default/a": "bound:(0,)"}, {0: "default/a"}, {})
