"""Issue 30, found by the simulation's soak (seeds 1148, 1326, 2977, 3873): after an etcd restore
the two pod watches' LISTs must end the wait between the eras (``Intake.between_eras``), or
nothing is decided again, for good: the pending pods stay pending with free GPUs and no reason
written.
Stepped by hand on BOTH stores, with tests/lifecycle.py's fake apiserver and a manual clock.
"""

from __future__ import annotations

import asyncio

from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import Replica, node, until

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def restored_after_one_write(backend: Backend) -> Replica:
    """A leader holding w (bound on n/0) that was told of o, bound after an etcd backup; then
    etcd restored from that backup (no o: the versions go back), no watch told yet."""
    r = backend.live()
    api = r.api
    api.version = 1000
    w = api.create(MakePod().Name("w").Req(1).Bound("n", "0").Obj())
    await r.elect([node(2)], [w])
    backup = dict(api.pods), api.version
    r.s.intake.bound_event("ADDED", api.create(MakePod().Name("o").Bound("n").Obj()))
    api.pods, api.version = dict(backup[0]), backup[1]  # the restore
    return r


async def test_a_binding_answered_in_a_new_era_tells_the_book_no_version_of_the_era_before(
    backend: Backend,
) -> None:
    """Sim seeds 1148 and 1326: c's Binding is under way (its answer slow) when etcd is restored
    from a backup taken before c existed; both watches list the restored history (a new era,
    counted from the backup's version). Then the Binding is answered 403. Before the fix the
    book took the version of its own copy of c (the era before's) as news: the next bound
    LIST of the new era, at a version below it, looked like another restore and began a third
    era, which waited for a pending LIST that never came. d, created meanwhile, was never
    decided: pending, with GPUs free and no reason written."""
    r = backend.live()
    api = r.api
    api.version = 1000
    await r.elect([node(2)])
    backup = dict(api.pods), api.version
    # Another scheduler's pod bound after the backup: the book has seen a version the restore
    # takes back (else nothing tells that the versions went back).
    r.s.intake.bound_event("ADDED", api.create(MakePod().Name("o").Bound("n").Obj()))
    c = r.pending(MakePod().Name("c").Req(1).Obj())
    api.gates[c.key] = asyncio.Event()  # its answer is slow ...
    api.refuse[c.key] = 403  # ... and a refusal
    await r.step()
    assert r.s.book.stage(c.key) is Stage.BINDING
    api.pods, api.version = dict(backup[0]), backup[1]  # the restore: no c, no o
    r.s.intake.replace_pending([], api.version)  # below the book's newest: a new era
    r.s.intake.replace_bound(*r.bound_list())
    assert r.s.book.era == 1 and not r.s.intake.between_eras
    api.gates[c.key].set()  # 403
    await r.settle()
    d = r.pending(MakePod().Name("d").Req(1).Obj())  # created in the new era
    r.s.intake.replace_bound(*r.bound_list())  # the bound watch re-lists (a 410)
    await run(r)
    assert not r.s.intake.between_eras and r.s.book.era == 1
    await until(lambda: api.pods[d.key].node_name == "n")


async def test_a_list_asked_for_after_the_list_that_began_the_era_ends_the_wait(
    backend: Backend,
) -> None:
    """Sim seed 2977: etcd is restored and both watches re-list; the pending watch's LIST is
    asked for again (a 410) after the bound watch's was. The bound LIST comes first and begins
    the new era. Then a is created (its version passes the newest the book had been told in
    the era before) and the pending LIST, read after it, shows a. Before the fix that LIST,
    its version not below the book's, was taken for one of the era before: the wait for the
    pending watch went on, and no other LIST came (its watch goes on from this one): a was
    never decided, pending with GPUs free and no reason written. A LIST asked for after the
    one that began the era reads the restored history: it ends the wait."""
    r = await restored_after_one_write(backend)
    api = r.api
    r.s.intake.bound_list_begin()  # both watches re-list ...
    bound_list = r.bound_list()
    r.s.intake.pending_list_begin()  # ... the pending one again, after the bound one (a 410)
    r.s.intake.bound_list_page(bound_list[0])
    r.s.intake.bound_list_end(bound_list[1])  # below the book's newest: a new era
    assert r.s.book.era == 1 and r.s.intake.between_eras
    a = api.create(MakePod().Name("a").Req(1).Obj())  # the restored history goes on
    r.s.intake.pending_list_page([a])
    r.s.intake.pending_list_end(api.version)  # not below the era before's newest
    assert not r.s.intake.between_eras and r.s.book.era == 1
    await run(r)
    await until(lambda: api.pods[a.key].node_name == "n")


async def test_a_list_that_begins_the_era_after_the_other_watch_listed_it_waits_for_nothing(
    backend: Backend,
) -> None:
    """Sim seed 3873: etcd is restored and both watches re-list; the pending watch's LIST is
    slow (its watch lags). a is created (its version passes the newest the book had been told
    in the era before), and the bound watch re-lists again (a 410): that LIST, asked for after
    the pending one, comes first; its version not below the book's, it begins nothing. Then the
    pending LIST, read at the restore, begins the new era. Before the fix the new era waited
    for a bound LIST, and none came (the bound watch goes on from the one it had): a was never
    decided, pending with GPUs free and no reason written. The bound LIST asked for after the
    one that began the era read the restored history: there is nothing to wait for."""
    r = await restored_after_one_write(backend)
    api = r.api
    r.s.intake.bound_list_begin()  # both watches re-list ...
    r.s.intake.pending_list_begin()
    pending_list = [p for p in api.pods.values() if not p.node_name], api.version
    a = api.create(MakePod().Name("a").Req(1).Obj())  # the restored history goes on
    # The bound watch re-lists again (a 410), and that LIST comes first: its version is not
    # below the era before's newest, so it begins nothing.
    r.s.intake.replace_bound(*r.bound_list())
    assert r.s.book.era == 0
    r.s.intake.pending_list_page(pending_list[0])
    r.s.intake.pending_list_end(pending_list[1])  # below the book's newest: a new era
    assert r.s.book.era == 1 and not r.s.intake.between_eras
    r.s.intake.pending_event("ADDED", a)  # the pending watch from its LIST's version
    await run(r)
    await until(lambda: api.pods[a.key].node_name == "n")
