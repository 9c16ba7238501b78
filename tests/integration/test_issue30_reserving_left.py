"""Issue 30, found by the simulation's soak (seed 50161): a pod that left the pending watch while
its store reservation was written stayed in the book when that reservation failed, pending for
good. Stepped by hand through the live scheduler's own parts on BOTH stores (the ``backend``
fixture of test_pod_lifecycle.py: the memory store and the real Redis store), against the fake
apiserver of tests/lifecycle.py.

On the code before the fix the book held c pending after c no longer existed: queued for good,
and (the seed's gang h3, of high priority) preempting real pods for it while another pod waited
beside a GPU its nomination held.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.service.podbook import Stage
from scheduler.state.base import StoreError
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import Replica, node

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def left_while_reserving(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, leave: Callable[[Replica], None]
) -> None:
    """c is decided onto n/0; while its reservation is written, ``leave`` takes it off the
    pending watch, and the reservation fails (the store unavailable). c must leave the book;
    d, created after, gets a GPU."""
    r = backend.live()
    api = r.api
    api.version = 1000
    await r.elect([node(2)])
    c = r.pending(MakePod().Name("c").Req(1).Obj())
    reserve_each = backend.store.reserve_each

    async def left_meanwhile(*args: object, **kw: object) -> object:
        leave(r)
        assert r.s.book.stage(c.key) is not Stage.PENDING
        monkeypatch.setattr(backend.store, "reserve_each", reserve_each)
        raise StoreError("the store is unavailable")

    monkeypatch.setattr(backend.store, "reserve_each", left_meanwhile)
    await run(r)
    assert r.s.book.get(c.key) is None, r.s.book.stage(c.key)
    assert r.held(c.key) is None
    r.clock.now += 10.0  # any backoff over
    await r.renew()
    d = r.pending(MakePod().Name("d").Req(1).Obj())
    await run(r)
    assert api.pods[d.key].node_name == "n"
    assert r.s.book.get(c.key) is None and [key for key, _, _ in api.binds] == [d.key]


async def test_a_pod_deleted_while_its_reservation_is_written_leaves(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user deletes c (pending: removed at once) while its reservation is written."""

    def delete(r: Replica) -> None:
        r.s.intake.pending_event("DELETED", r.api.delete("default/c"))

    await left_while_reserving(backend, monkeypatch, delete)


async def test_a_pod_a_restore_took_back_while_its_reservation_is_written_leaves(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd is restored from a backup taken before c was created (the seed's h3): both pod
    watches re-list and the new era's pending LIST lacks c."""

    def restore(r: Replica) -> None:
        r.api.pods, r.api.version = {}, 999  # the backup's: below what the book was told
        r.s.intake.replace_pending([], r.api.version)
        r.s.intake.replace_bound(*r.bound_list())
        assert r.s.book.era == 1

    await left_while_reserving(backend, monkeypatch, restore)


async def test_a_reservation_answered_after_its_pod_left_and_came_back_is_released(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd is backed up with c pending; c is decided onto n/0, and while its reservation is
    written c is deleted (it leaves the book: that decision is let go) and etcd is restored
    from the backup (c back under its UID, pending: a new entry). The reservation then lands:
    it is of the decision let go, so what it wrote is released, and c is decided afresh and
    bound, the store holding it once, bound. Before, the answer met a stage the pod book's
    table had no cell for (logged as an error, counted, nothing done)."""
    r = backend.live()
    api = r.api
    api.version = 1000
    await r.elect([node(2)])
    c = r.pending(MakePod().Name("c").Req(1).Obj())
    backup = dict(api.pods), api.version
    # Another scheduler's pod bound after the backup: the book has seen a version the restore
    # takes back (else nothing tells that the versions went back).
    r.s.intake.bound_event("ADDED", api.create(MakePod().Name("o").Bound("n").Obj()))
    reserve_each = backend.store.reserve_each

    async def left_and_back(*args: object, **kw: object) -> object:
        monkeypatch.setattr(backend.store, "reserve_each", reserve_each)
        r.s.intake.pending_event("DELETED", api.delete(c.key))
        assert r.s.book.get(c.key) is None
        api.pods, api.version = dict(backup[0]), backup[1]  # c back, o gone
        r.s.intake.replace_pending([api.pods[c.key]], api.version)
        r.s.intake.replace_bound(*r.bound_list())
        assert r.s.book.era == 1 and not r.s.intake.between_eras
        assert r.s.book.stage(c.key) is Stage.PENDING
        return await reserve_each(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(backend.store, "reserve_each", left_and_back)
    assert await r.step() == c.key
    await r.settle()
    assert c.key not in await r.records(), "the reservation of the decision let go stayed"
    assert r.s.book.stage(c.key) is Stage.PENDING and not r.s.book.unexpected
    r.clock.now += 10.0
    await r.renew()
    await run(r)
    assert api.pods[c.key].node_name == "n"
    r.bound_seen(c.key)
    await r.settle()
    assert list(await r.records()) == [c.key] and (await r.records())[c.key].startswith("bound")
