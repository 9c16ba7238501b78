"""Found by the simulation once it checked the store across etcd restores (sim seed 1019): a
release sent before a reconcile and landing after it removed the record the reconcile had
written. Stepped by hand on BOTH stores (the ``backend`` fixture of test_pod_lifecycle.py: the
memory store and the real Redis store), against the fake apiserver of tests/lifecycle.py.

On the code before the fix a, bound, had no record in the store at the end.
"""

from __future__ import annotations

import asyncio

import pytest

from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import node, until

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


def slow_releases(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> tuple[asyncio.Event, asyncio.Event]:
    """The store's releases from now on: ``sent`` is set when one is sent, and it lands once
    ``landing`` is set (a slow store)."""
    release = backend.store.release
    sent, landing = asyncio.Event(), asyncio.Event()

    async def slow_release(*args: object, **kw: object) -> None:
        sent.set()
        await landing.wait()
        await release(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(backend.store, "release", slow_release)
    return sent, landing


async def test_a_release_in_flight_lands_before_a_reconcile_begins(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """a is bound on n/0 and recorded. Its deletion is told (the store's release of its record
    is sent and waits on a slow store), then a is told bound again (an etcd restore brought it
    back) and a reconcile begins. The reconcile waits for the release to land, then writes a's
    record: the store ends with a recorded bound. Before, the reconcile wrote it first and the
    release, landing after, removed it."""
    r = backend.live()
    api = r.api
    await r.elect([node(2)])
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    await run(r)
    r.bound_seen(a.key)
    await r.settle()
    assert (await r.records())[a.key].startswith("bound")
    sent, landing = slow_releases(backend, monkeypatch)
    r.s.intake.bound_event("DELETED", api.stamp(api.pods[a.key]))
    assert r.s.book.get(a.key) is None
    await until(sent.is_set)
    back = api.pods[a.key] = api.stamp(api.pods[a.key])
    r.s.intake.bound_event("ADDED", back)  # the restore: a bound again
    assert r.s.book.stage(a.key) is Stage.BOUND
    assert r.leadership.epoch is not None
    reconcile = asyncio.create_task(r.s.sync.reconcile(r.leadership.epoch))
    await asyncio.sleep(0.01)
    landing.set()
    await reconcile
    await r.settle()
    assert (await r.records()).get(a.key, "").startswith("bound"), await r.records()
    assert await r.owners() == {0: a.key}


async def test_a_reservation_waits_for_its_pods_release_in_flight(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """a is bound on n/0 and recorded; its deletion is told (the release of its record is sent
    and waits on a slow store), then a is told pending again under its UID (an etcd restore to
    before its Binding) and decided again. Its reservation waits for the release to land:
    the store ends with a recorded bound once its Binding lands. Before, the reservation landed
    first and the release removed it: a bound with no record (sim seed 1019)."""
    r = backend.live()
    api = r.api
    await r.elect([node(2)])
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    before = api.pods[a.key]
    await run(r)
    r.bound_seen(a.key)
    await r.settle()
    sent, landing = slow_releases(backend, monkeypatch)
    r.s.intake.bound_event("DELETED", api.stamp(api.pods[a.key]))
    await until(sent.is_set)
    api.pods[a.key] = api.stamp(before)  # pending again, its UID
    r.s.intake.pending_event("ADDED", api.pods[a.key])
    assert r.s.book.stage(a.key) is Stage.PENDING
    step = asyncio.create_task(r.step())
    await asyncio.sleep(0.01)
    assert r.s.book.stage(a.key) is Stage.RESERVING  # waiting for the release
    landing.set()
    await step
    await r.settle()
    assert api.pods[a.key].node_name == "n"
    r.bound_seen(a.key)
    await r.settle()
    assert (await r.records()).get(a.key, "").startswith("bound"), await r.records()
