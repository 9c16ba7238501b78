"""Issue 30, found by the simulation's soak (seed 3260): an etcd restore undid a Binding, and the
pending watch's news of the restored history, newer than the bound watch's LIST of it, kept the
pod bound in the book for good. Stepped by hand through the live scheduler's own parts on BOTH
stores (the ``backend`` fixture of test_pod_lifecycle.py: the memory store and the real Redis
store), against the fake apiserver of tests/lifecycle.py.

On the code before the fix the book held h bound on n/0 after h no longer existed: its GPU taken
for good in the snapshot and the store, c (2 GPUs) pending beside it.
"""

from __future__ import annotations

import msgspec

from scheduler.core.model.objects import PodInput
from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import Replica, node, until

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def restored_under_pending_news(r: Replica) -> tuple[PodInput, tuple[list[PodInput], int]]:
    """Both tests' start: h pending when etcd is backed up, then bound on n/0 by the leader; etcd
    restored from the backup (h pending again, the versions go back) and both pod watches
    re-list, the bound watch's LIST (taken at the restore, without h) answered late; the
    pending LIST comes first and begins a new era; then h is written (a label: its version
    passes the bound LIST's), told by the pending watch. Returns h and the bound LIST."""
    api = r.api
    api.version = 1000
    await r.elect([node(2)])
    h = r.pending(MakePod().Name("h").Req(1).Obj())
    backup = dict(api.pods), api.version
    await run(r)
    r.bound_seen(h.key)
    assert r.s.book.stage(h.key) is Stage.BOUND and r.held(h.key) == ("n", [0])
    api.pods, api.version = dict(backup[0]), backup[1]  # the restore: h pending again
    r.s.intake.pending_list_begin()  # both watches re-list, at the restore
    r.s.intake.bound_list_begin()
    bound_list = r.bound_list()  # no h; answered late
    r.s.intake.pending_list_page([api.pods[h.key]])
    r.s.intake.pending_list_end(api.version)  # below the book's newest: a new era
    assert r.s.book.era == 1 and r.s.intake.between_eras
    labelled = api.pods[h.key] = api.stamp(
        msgspec.structs.replace(api.pods[h.key], labels={"team": "a"})
    )
    r.s.intake.pending_event("MODIFIED", labelled)  # newer than the bound LIST
    return h, bound_list


async def test_pending_news_of_a_restored_history_does_not_keep_a_pod_bound(
    backend: Backend,
) -> None:
    """h is pending when etcd is backed up, then bound on n/0 by the leader. etcd is restored
    from the backup (h pending again, the versions go back) and both pod watches re-list; the
    bound watch's LIST (taken at the restore, without h) is slow. The pending LIST comes first
    and begins a new era; then h is written (a label: its version passes the LIST's) and
    deleted, both told by the pending watch. Then the bound LIST ends, lacking h. Before the
    fix the pending watch's news had raised h's version in the book above the LIST's, so the
    LIST's end took h for one bound after it ("the watch from the LIST's version tells"), and
    nothing ever told: h, which no longer existed, held n/0 for good."""
    r = backend.live()
    api = r.api
    h, bound_list = await restored_under_pending_news(r)
    gone = api.stamp(api.pods.pop(h.key))
    r.s.intake.pending_event("DELETED", gone)
    r.s.intake.bound_list_page(bound_list[0])
    r.s.intake.bound_list_end(bound_list[1])
    assert not r.s.intake.between_eras
    await r.settle()
    assert r.held(h.key) is None, f"h, deleted, still holds {r.held(h.key)}"
    assert r.s.book.get(h.key) is None
    c = r.pending(MakePod().Name("c").Req(2).Obj())
    await run(r)
    await until(lambda: api.pods[c.key].node_name == "n")
    assert h.key not in await r.records()


async def test_a_pod_the_restore_made_pending_again_is_decided_afresh(
    backend: Backend,
) -> None:
    """The same, h not deleted: the pending watch's last word on it (pending, in the new era,
    newer than the bound LIST) stands once the bound LIST lacks it. Before the fix h stayed
    bound in the book, holding n/0, and was never scheduled again: pending for good."""
    r = backend.live()
    api = r.api
    h, bound_list = await restored_under_pending_news(r)
    r.s.intake.bound_list_page(bound_list[0])
    r.s.intake.bound_list_end(bound_list[1])
    assert r.s.book.stage(h.key) is Stage.PENDING, r.s.book.stage(h.key)
    await run(r)
    await until(lambda: api.pods[h.key].node_name == "n")
    r.bound_seen(h.key)
    assert r.held(h.key) is not None
