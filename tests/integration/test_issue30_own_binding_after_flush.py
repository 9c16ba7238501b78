"""Issue 30, soak seed 3348, stepped by hand through the live scheduler's own parts on BOTH stores
(the memory store and a ``RedisStore`` on the session's real redis-server), with
tests/lifecycle.py's fake apiserver and a manual clock.

The leader's Binding of p is in flight when the store is flushed; the same replica wins the
lease again. Its election's reconcile keeps the reservations of pods in flight, but the store no
longer holds p's, and once p's Binding is answered the mark finds nothing to mark: p is bound on
GPU 0 and the store holds no record of it (until some later reconcile).
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


async def test_an_own_binding_across_a_flush_keeps_its_record(backend: Backend) -> None:
    r = backend.live()
    assert await r.elect([node(1)]) == 1
    r.pending(MakePod().Name("p").Req(1).Obj())
    r.api.gates["default/p"] = bind = asyncio.Event()
    assert await r.step() == "default/p"
    await until(lambda: r.s.book.stage("default/p") is Stage.BINDING)
    assert await store_of(r) == ({"default/p": "reserved:(0,)"}, {0: "default/p"}, {})
    await backend.flush()  # the lease, the epochs and p's reservation are gone
    await r.s.on_lost()
    assert await r.elect([node(1)]) == 1  # the same replica leads again
    assert r.s.book.stage("default/p") is Stage.BINDING
    bind.set()  # p's Binding is answered: the mark is sent at the new term
    await r.settle()
    assert await store_of(r) == ({"default/p": "bound:(0,)"}, {0: "default/p"}, {})
