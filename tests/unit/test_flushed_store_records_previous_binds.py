"""After a flushed store, the previous leader's Bindings that land after the new leader's first
reconcile must reach the store before the new leader's first decision.

Found by tests/e2e/test_chaos.py (FLUSHALL under two replicas: 3 failures in 5 runs). Timeline
of one run (lease 3 s, renew 1 s, bind timeout 1 s; times from the flush, as A's first fenced
call shows it): A leads at epoch 2 and has reserved p0, p1, p10 and p11, whose Bindings are
going out; FLUSHALL (0 ms); A's next reservation is fenced; A's mark-bound calls for the
Bindings that land are refused (+4, +22, +34, +38 ms); B takes the lease at epoch 1 (+31 ms)
and reconciles (+33 ms) from a snapshot that does not show the last of those Bindings yet, then
waits one lease; B's watches then report each of those pods leaving the pending set
(pending-left: gone) and bound (bound-seen: bound), neither of which touches the store, and
nothing asks for a reconcile: Redis never records them (no pod record, no GPU owner) while they
run (the auditor still saw them missing 40 s later). The fix: a leader that waits for an
unknown predecessor reconciles again when the wait ends (scheduler.py, on_elected).
"""

from __future__ import annotations

import asyncio

from scheduler.service.podbook import Stage
from scheduler.state.memory import MemoryStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, TTL_MS, Apiserver, Replica, node


async def test_a_previous_leaders_bind_seen_after_the_reconcile_is_recorded() -> None:
    clock = ManualClock(0.0)
    api, store = Apiserver(), MemoryStore(clock)
    a = Replica(api, store, clock, "a", wait_for_unknown_leader=True, tuning=QUICK_RETRIES)
    b = Replica(api, store, clock, "b", wait_for_unknown_leader=True, tuning=QUICK_RETRIES)
    await store.acquire("x", TTL_MS)  # epochs that started before a: x's election, settled
    await store.kept_history("x", 1)
    await store.mark_settled("x", 1)
    await store.release_lease("x", 1)
    await a.elect([node(2)])
    p = a.pending(MakePod().Name("p").Req(1).Obj())
    b.s.intake.pending_event("ADDED", p)
    api.gates["default/p"] = gate = asyncio.Event()
    await a.step()  # p's Binding is in flight
    store.__init__(clock)  # type: ignore[misc]  # FLUSHALL
    assert await b.elect([node(2)]) == 1  # b reconciles: p is pending in its snapshot
    gate.set()  # a's Binding lands after b's reconcile
    await a.settle()
    b.bound_seen("default/p")
    assert b.s.book.stage("default/p") is Stage.BOUND
    while not b.s.may_decide():  # a flushed store: one lease plus bindCommitSeconds first
        clock.now += 5.0
        await b.renew()
    await b.step()  # the loop's turn: the store follows the truth
    await b.settle()
    assert await b.records() == {"default/p": "bound:(0,)"}
    assert await b.owners() == {0: "default/p"}
