"""A PodScheduled=False condition is part of its pod: an etcd restore from a backup taken before
it was written undoes it. Stepped by hand on BOTH stores (the ``backend`` fixture of
test_pod_lifecycle.py) against the fake apiserver of tests/lifecycle.py, whose status writes
move the pod's version as the apiserver's do.

The book compares the reason each pending pod shows with the reason of its last decision, as
kube-scheduler compares with the condition the pod shows (effect SHOWN). Before, it held what it
wrote as written: after a restore the book could tell (a new era) it forgot it (the sim's seeds
1, 22, 27, 30); after one it could not tell (no version it had seen was above the backup's: its
own status write's news had not come), the pod stayed pending without a reason for good (sim
seeds 13078 and 23014).
"""

from __future__ import annotations

import msgspec
import pytest

from scheduler.core.model.objects import PodInput
from scheduler.service.podbook import Stage
from scheduler.state.base import StoreError
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import Apiserver, Replica, node

redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend

KEY = "default/huge"


def failed(api: Apiserver) -> int:
    """FailedScheduling events sent for the pod: one per write of its reason."""
    return sum(1 for key, reason, _ in api.events if key == KEY and reason == "FailedScheduling")


async def test_a_reason_a_restore_undid_is_written_again(backend: Backend) -> None:
    api = Apiserver()
    r = backend.replica(api, "a")
    api.version = 1000
    await r.elect([node(1)])
    r.pending(MakePod().Name("huge").Req(4).Obj())
    backup = dict(api.pods), api.version
    # Another scheduler's pod bound after the backup: the book has seen a version the restore
    # takes back (a new era).
    r.s.intake.bound_event("ADDED", api.create(MakePod().Name("o").Bound("n").Obj()))
    await run(r)
    assert api.pods[KEY].shown_reason == api.unschedulable[KEY]
    assert api.unschedulable[KEY].startswith("0/1 nodes are available") and failed(api) == 1
    # The restore: the pod as the backup had it, without its condition; both watches re-list.
    api.pods, api.version = dict(backup[0]), backup[1]
    r.s.intake.replace_pending([api.pods[KEY]], api.version)
    r.s.intake.replace_bound(*r.bound_list())
    assert r.s.book.era == 1
    await run(r)  # nothing decided anew: the re-list showed the pod without its reason
    assert api.pods[KEY].shown_reason == api.unschedulable[KEY] and failed(api) == 2


async def test_a_restore_the_book_cannot_tell_still_shows_the_reason_undone(
    backend: Backend,
) -> None:
    """Sim seeds 13078 and 23014: the backup was taken after every version the book saw, and
    the status write's own news never came before the restore, so the LISTs look like more of
    the same era. The pending LIST shows the pod without its condition."""
    api = Apiserver()
    r = backend.replica(api, "a")
    api.version = 1000
    await r.elect([node(1)])
    r.pending(MakePod().Name("huge").Req(4).Obj())
    await run(r)
    assert api.unschedulable[KEY].startswith("0/1 nodes are available") and failed(api) == 1
    written = api.pods[KEY]
    assert written.shown_reason == api.unschedulable[KEY]
    # The backup had the pod as the book last saw it (before the status write).
    api.pods[KEY] = restored = msgspec.structs.replace(written, shown_reason=None)
    r.s.intake.replace_pending([restored], api.version)
    r.s.intake.replace_bound(*r.bound_list())
    assert r.s.book.era == 0  # nothing told a restore
    await run(r)
    assert api.pods[KEY].shown_reason == api.unschedulable[KEY] and failed(api) == 2
    # The write's own news shows the reason: nothing more is written.
    r.s.intake.pending_event("MODIFIED", api.pods[KEY])
    await run(r)
    assert failed(api) == 2


async def test_a_reason_a_previous_leader_wrote_is_not_written_twice(backend: Backend) -> None:
    api = Apiserver()
    a = backend.replica(api, "a")
    await a.elect([node(1)])
    a.pending(MakePod().Name("huge").Req(4).Obj())
    await run(a)
    assert failed(api) == 1
    # b leads after a; its LIST shows the reason a wrote, the reason b decides too.
    await backend.flush()
    b = backend.replica(api, "b")
    b.s.intake.replace_pending([api.pods[KEY]], api.version)
    await b.elect([node(1)])
    await run(b)
    entry = b.s.book.get(KEY)
    assert entry is not None and entry.reported == api.pods[KEY].shown_reason
    assert failed(api) == 1


async def test_another_reason_shown_is_not_overwritten_on_news(backend: Backend) -> None:
    """Two replicas that both think they lead (a handover's overlap) must not overwrite each
    other's reasons on every news of the pod: a reason shown is replaced at the pod's next
    decision only, as kube-scheduler does."""
    api = Apiserver()
    r = backend.replica(api, "a")
    await r.elect([node(1)])
    r.pending(MakePod().Name("huge").Req(4).Obj())
    await run(r)
    assert failed(api) == 1
    other = msgspec.structs.replace(api.pods[KEY], shown_reason="another scheduler's reason")
    api.pods[KEY] = api.stamp(other)
    r.s.intake.pending_event("MODIFIED", api.pods[KEY])
    await run(r)
    assert failed(api) == 1 and api.pods[KEY].shown_reason == "another scheduler's reason"
    # Its next decision (a node that changed: another GPU, still too few) writes its own.
    r.clock.now += 10.0
    await r.renew()
    r.s.intake.node_event("MODIFIED", node(2))
    await run(r)
    assert failed(api) == 2 and api.pods[KEY].shown_reason == api.unschedulable[KEY]


async def b_waits_behind_a(
    backend: Backend,
) -> tuple[Apiserver, Replica, PodInput, tuple[dict[str, PodInput], int]]:
    """a holds the one GPU, b waits with its reason written; the backup (the pods and the
    version) was taken before b was decided."""
    api = Apiserver()
    r = backend.replica(api, "a")
    api.version = 1000
    await r.elect([node(1)])
    r.s.intake.bound_event("ADDED", api.create(MakePod().Name("a").Req(1).Bound("n", "0").Obj()))
    b = r.pending(MakePod().Name("b").Req(1).Obj())
    backup = dict(api.pods), api.version
    await run(r)
    return api, r, b, backup


async def test_a_binding_a_restore_undid_leaves_the_pod_showing_no_reason(
    backend: Backend,
) -> None:
    """Sim seed 25470: b waited with a reason, was bound (our Binding answered 201), and an
    etcd restore from a backup taken before its reason was written put it back to pending. The
    re-read (the bound LIST lacks it) shows it without a reason; held as written since before
    the Binding, the same reason decided again was never written."""
    api, r, b, backup = await b_waits_behind_a(backend)
    refused = api.unschedulable[b.key]
    assert api.pods[b.key].shown_reason == refused
    r.clock.now += 10.0  # its backoff
    await r.renew()
    r.s.intake.bound_event("DELETED", api.delete("default/a"))
    await run(r)
    assert api.pods[b.key].node_name == "n" and api.pods[b.key].shown_reason is None
    # The restore: a bound again, b pending as the backup had it (no condition).
    api.pods, api.version = dict(backup[0]), backup[1]
    r.s.intake.replace_pending([api.pods[b.key]], api.version)
    r.s.intake.replace_bound(*r.bound_list())
    await run(r)
    assert api.unschedulable[b.key] == refused and api.pods[b.key].shown_reason == refused


async def test_a_restore_while_the_reservation_is_written_leaves_the_pod_showing_no_reason(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sim seed 30598: b waited with a reason; a left and b was decided onto its GPU. While
    b's reservation was written, an etcd restore from a backup taken before b's reason was
    written put a back and b pending without a reason, and the reservation failed. The news
    came while b was reserving (still pending in the apiserver) and was not read for what it
    shows: back to pending holding the reason as written, the same reason decided again was
    never written."""
    api, r, b, backup = await b_waits_behind_a(backend)
    refused = api.unschedulable[b.key]
    assert api.pods[b.key].shown_reason == refused and r.s.book.get(b.key) is not None
    r.clock.now += 10.0  # its backoff
    await r.renew()
    reserve_each = backend.store.reserve_each

    async def restored_meanwhile(*args: object, **kw: object) -> object:
        """The restore lands while the reservation is written, which then fails."""
        api.pods, api.version = dict(backup[0]), backup[1]
        r.s.intake.replace_pending([api.pods[b.key]], api.version)
        r.s.intake.replace_bound(*r.bound_list())
        assert r.s.book.stage(b.key) is Stage.RESERVING
        monkeypatch.setattr(backend.store, "reserve_each", reserve_each)
        raise StoreError("the store is unavailable")

    monkeypatch.setattr(backend.store, "reserve_each", restored_meanwhile)
    r.s.intake.bound_event("DELETED", api.delete("default/a"))
    await run(r)
    assert r.s.book.stage(b.key) is Stage.PENDING and not api.pods[b.key].node_name
    r.clock.now += 10.0  # its backoff: decided again, a on the GPU again
    await r.renew()
    await run(r)
    assert not api.pods[b.key].node_name
    assert api.unschedulable[b.key] == refused and api.pods[b.key].shown_reason == refused
