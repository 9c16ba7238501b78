"""Issue 30, soak seed 380: a deposed leader lets go of the reservations only a leader holds.

Elected, a replica holds a previous leader's reservation of a pending pod where it was decided
(UNSETTLED) until its own timer re-reads the pod once no Binding of that leader can land
(SETTLE_DUE), and a pod read pending then is decided afresh at its turn (RELOADED). Both are a
leader's: deposed before either came, the replica kept the pod UNSETTLED for good, and a pod
deleted meanwhile (the pending watch's DELETED says "bound or deleted", which only that re-read
tells apart) stayed held in the standby's snapshot: seed 380's r3, leader for 0.7 s during an
etcd stall, kept gang member j1-0's GPU after j1-0 was deleted.

Soak seed 3935: a previous leader's store record of a pod no watch of the replica had shown
(INHERITED, held where the record says until a re-read or a watch says) is a leader's too. r2,
elected just after an etcd restore undid h1-1's Binding (its pending watch lagging), inherited
h1-1's bound record and re-read the pod under an etcd stall; deposed before the read answered,
it kept the entry, and the answer (pending) made it UNSETTLED in the standby, where nothing
settles it: h1-1's GPU stayed held in r2's snapshot for good. Stepped by hand on BOTH stores
(the ``backend`` fixture of test_pod_lifecycle.py), against the fake apiserver of
tests/lifecycle.py.
"""

from __future__ import annotations

import msgspec

from scheduler.config.tuning import Tuning
from scheduler.service.podbook import Stage
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_issue30_binding import lease_lapses
from tests.integration.test_pod_lifecycle import Backend, handover
from tests.lifecycle import Replica, node, reloaded

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def deposed(backend: Backend, r: Replica) -> None:
    """``r``'s lease lapses and its next renewal fails: it no longer leads (on_lost)."""
    await lease_lapses(backend)
    await r.renewal()
    assert r.leadership.epoch is None and not r.leadership.leading


async def test_issue30_a_deposed_leader_lets_go_of_an_unsettled_pod_deleted_afterwards(
    backend: Backend,
) -> None:
    r = backend.live()
    r.api.stalled["default/p"] = None  # etcd stalls: the old leader's Binding never commits
    await reloaded(r)  # p held on n/0 where the old leader decided, until it settles
    await deposed(backend, r)
    await r.settle()  # read back: pending, as a standby holds it (nothing)
    assert r.s.book.stage("default/p") is Stage.PENDING and r.held("default/p") is None
    r.s.intake.pending_event("DELETED", r.api.delete("default/p"))  # bound or deleted?
    r.clock.now += Tuning().bind_commit_seconds  # long past the old leader's Bindings
    await r.settle()
    assert r.s.book.entries == {} and r.held("default/p") is None
    assert r.s.state.nodes["n"].free_mask == 0b1


async def test_issue30_a_deposed_leader_lets_go_of_an_unsettled_pod_deleted_before(
    backend: Backend,
) -> None:
    r = backend.live()
    r.api.stalled["default/p"] = None  # etcd stalls: the old leader's Binding never commits
    await reloaded(r)
    r.s.intake.pending_event("DELETED", r.api.delete("default/p"))  # bound or deleted?
    await r.settle()
    assert r.held("default/p") == ("n", [0])  # the re-read once settled would say
    await deposed(backend, r)  # before it is due
    r.clock.now += Tuning().bind_commit_seconds
    await r.settle()  # read back at once: gone
    assert r.s.book.entries == {} and r.held("default/p") is None
    assert r.s.state.nodes["n"].free_mask == 0b1


async def test_issue30_elected_again_a_deposed_leader_reloads_the_reservation_it_let_go(
    backend: Backend,
) -> None:
    """What the deposed replica let go is the store's (the leaders since keep it): elected
    again, it holds the pod where it was decided until no Binding can land, as before."""
    r = backend.live()
    r.api.stalled["default/p"] = None  # etcd stalls: the old leader's Binding never commits
    await reloaded(r)
    await deposed(backend, r)
    await r.settle()
    assert r.held("default/p") is None
    await r.elect([node(1)])
    assert r.s.book.stage("default/p") is Stage.UNSETTLED and r.held("default/p") == ("n", [0])


async def test_issue30_a_deposed_leader_lets_go_of_an_inherited_record_read_pending_afterwards(
    backend: Backend,
) -> None:
    api, b = await handover(backend)  # a bound p on n/0; b's watches have not shown it bound
    # etcd restored from a backup taken before p's Binding: p is pending again, and b's pending
    # watch (lagging) has not shown it yet; etcd stalls, so b's re-read of p gets no answer.
    api.pods["default/p"] = api.stamp(
        msgspec.structs.replace(api.pods["default/p"], node_name="", annotations={})
    )
    api.reads_fail = True
    await b.elect([node(1)], [])
    assert b.s.book.stage("default/p") is Stage.INHERITED and b.held("default/p") == ("n", [0])
    await deposed(backend, b)
    api.reads_fail = False  # the re-read answers: pending
    await b.settle()
    assert b.s.book.stage("default/p") is Stage.GONE and b.held("default/p") is None
    assert b.s.state.nodes["n"].free_mask == 0b1
    b.s.intake.pending_event("ADDED", api.pods["default/p"])  # the pending watch catches up
    assert b.s.book.stage("default/p") is Stage.PENDING and b.held("default/p") is None
    await b.elect([node(1)])  # elected again: a's record is held until it settles, as before
    assert b.s.book.stage("default/p") is Stage.UNSETTLED and b.held("default/p") == ("n", [0])
