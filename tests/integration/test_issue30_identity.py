"""Issue 30's timelines 3 and 6 and 7's skipped store writes, stepped by hand through the live
scheduler's own parts on BOTH stores (the memory store and a ``RedisStore`` on the session's
real redis-server), with tests/lifecycle.py's fake apiserver and a manual clock.

- 3: a lagging standby across a same-name recreation: its book holds the old UID under the
  name when it is elected, and the old leader's record of the new UID must not be freed;
- 6: resourceVersions that go back (an etcd restore without ``--bump-revision``): a LIST below
  what the book holds starts a new era in which the LIST is the truth;
- 7b: the store writes skipped while the local lease had lapsed are written once the same
  replica leads on.

On the code before the fixes each ended with a GPU given twice, GPUs held by a pod that no
longer exists (its replacement never scheduled), or a store that no longer matches the truth.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from scheduler.config.tuning import Tuning
from scheduler.kube.api import BindResult
from scheduler.service.podbook import Stage
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.integration.test_pod_lifecycle import Backend, run, store_of
from tests.lifecycle import QUICK_RETRIES, TTL_MS, Apiserver, Replica, node, until


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
