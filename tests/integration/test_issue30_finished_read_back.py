"""Issue 30, found by the simulation's soak (seed 1992): a pod read back finished after its
Binding's 409. Stepped by hand through the live scheduler's own parts on BOTH stores (the
``backend`` fixture of test_pod_lifecycle.py: the memory store and the real Redis store),
against the fake apiserver of tests/lifecycle.py.

The two pod watches are separate streams: a pending LIST taken before a pod's Binding can
arrive after the bound watch told the pod bound and finished, when the book's entry (and the
version that made the LIST's pod "older") has left. The LIST shows the pod pending again, it
is decided again, and its Binding gets 409. On the code before the fix the read-back, bound as
we had asked, was BIND_OK: the pod was held as assumed for good (the bound watch never shows a
finished pod again), its GPU taken in the snapshot and recorded bound in the store, and the
next pod waited beside a free GPU.
"""

from __future__ import annotations

import msgspec

from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run, store_of
from tests.lifecycle import node

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def test_a_pod_a_stale_pending_list_brings_back_after_it_finished_holds_nothing(
    backend: Backend,
) -> None:
    """b is pending on a node of one GPU; the pending watch re-lists (410): the LIST is taken
    now, b pending in it. b is bound (201), the bound watch shows it bound, then finished. The
    LIST arrives: b, whose entry left, is pending again and decided again; its Binding gets 409
    and the read-back finds it bound as we asked, and finished. Then c comes: GPU 0 is free."""
    r = backend.live()
    await r.elect([node(1)])
    b = r.pending(MakePod().Name("b").Req(1).Obj())
    intake = r.s.intake
    listed, listed_at = [r.api.pods[b.key]], r.api.version  # the re-list, taken now
    intake.pending_list_begin()
    await r.step()
    await r.settle()
    assert r.s.book.stage(b.key) is Stage.ASSUMED and len(r.api.binds) == 1
    intake.bound_event("ADDED", r.api.pods[b.key])
    finished = r.api.stamp(msgspec.structs.replace(r.api.pods[b.key], phase="Succeeded"))
    r.api.pods[b.key] = finished
    intake.bound_event("MODIFIED", finished)
    assert r.s.book.stage(b.key) is Stage.GONE and r.held(b.key) is None
    intake.pending_list_page(listed)
    intake.pending_list_end(listed_at)  # b pending again: its entry's version left with it
    await run(r)  # decided again: 409, read back bound on n/0 as we asked, finished
    assert len(r.api.binds) == 1
    assert r.s.book.stage(b.key) is Stage.GONE, "a finished pod read back is held"
    assert r.held(b.key) is None
    # The pending watch goes on from the LIST: b left the pending selector when it was bound.
    intake.pending_event("DELETED", r.api.pods[b.key])
    c = r.pending(MakePod().Name("c").Req(1).Obj())
    await run(r)
    assert r.api.binds[1:] == [(c.key, "n", "0")]
    assert await store_of(r) == ({"default/c": "bound:(0,)"}, {0: "default/c"}, {})
