"""Issue 30, soak seed 380: a deposed leader lets go of the reservations only a leader holds.

Elected, a replica holds a previous leader's reservation of a pending pod where it was decided
(UNSETTLED) until its own timer re-reads the pod once no Binding of that leader can land
(SETTLE_DUE), and a pod read pending then is decided afresh at its turn (RELOADED). Both are a
leader's: deposed before either came, the replica kept the pod UNSETTLED for good, and a pod
deleted meanwhile (the pending watch's DELETED says "bound or deleted", which only that re-read
tells apart) stayed held in the standby's snapshot: seed 380's r3, leader for 0.7 s during an
etcd stall, kept gang member j1-0's GPU after j1-0 was deleted. Stepped by hand on BOTH stores
(the ``backend`` fixture of test_pod_lifecycle.py), against the fake apiserver of
tests/lifecycle.py.
"""

from __future__ import annotations

from scheduler.config.tuning import Tuning
from scheduler.service.podbook import Stage
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_issue30_binding import lease_lapses
from tests.integration.test_pod_lifecycle import Backend
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
