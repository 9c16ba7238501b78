"""Issue 30, found by the simulation's soak (seed 2557): a bound re-list (410 Gone) dropped the
event of a pod's deletion, so the book was never told the version the cluster had reached; a
restore to a backup at or above every version the book had been told then began no new era,
and a Binding decided before the restore was sent again onto the GPU the restore gave back.
Stepped by hand on BOTH stores (the ``backend`` fixture of test_pod_lifecycle.py: the memory
store and the real Redis store), with tests/lifecycle.py's fake apiserver and a manual clock.
"""

from __future__ import annotations

import asyncio

from scheduler.kube.api import BindResult
from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import Apiserver, node

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


class Restoring(Apiserver):
    """The apiserver, where a pod's Binding in ``cut`` waits for its gate and then fails as a
    request under way when etcd is restored fails (the apiservers restart for a restore)."""

    def __init__(self) -> None:
        super().__init__()
        self.cut: dict[str, asyncio.Event] = {}

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindResult:
        gate = self.cut.pop(f"{namespace}/{name}", None)
        if gate is not None:
            await gate.wait()
            raise ConnectionError("etcd was restored from a backup")
        return await super().bind(namespace, name, uid, node, annotations)


async def test_a_relist_tells_its_version_so_a_restore_to_below_it_begins_an_era(
    backend: Backend,
) -> None:
    """p is bound on n/0 (one GPU) and a waits; etcd is backed up. p is deleted, and the bound
    watch re-lists (410 Gone) before it told that: its LIST, at the version of the deletion,
    lacks p, which leaves. a is decided onto n/0; its Binding is under way when etcd is
    restored from the backup (p back, bound on n/0; a pending), and fails; both watches list
    the restored history, at the backup's version. That version is below the LIST's that
    showed p gone: the versions went back, a new era. Before the fix the book had been told
    no version above the backup's (the LIST's own was not news), no era began, and the
    Binding decided before the restore was sent again: a bound on n/0 beside p."""
    api = Restoring()
    r = backend.replica(api, "a")
    api.version = 1000
    await r.elect([node(1)])
    p = r.pending(MakePod().Name("p").Req(1).Obj())
    await run(r)
    r.bound_seen(p.key)
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    await run(r)  # no GPU free: a waits
    assert r.s.book.stage(a.key) is Stage.PENDING
    backup = dict(api.pods), api.version
    api.delete(p.key)  # the bound watch breaks (410) before it tells the deletion
    r.s.intake.replace_bound(*r.bound_list())
    await r.settle()
    assert r.held(p.key) is None
    gate = api.cut[a.key] = asyncio.Event()
    for _ in range(10):  # a's backoff, then a decided onto n/0
        r.clock.now += 1.0
        await r.renew()
        await r.step()
        if r.s.book.stage(a.key) is Stage.BINDING:
            break
    assert r.held(a.key) == ("n", [0])
    api.pods, api.version = dict(backup[0]), backup[1]  # the restore: p back, a pending
    r.s.intake.replace_bound(*r.bound_list())
    r.s.intake.replace_pending([api.pods[a.key]], api.version)
    gate.set()  # the Binding under way fails: a request cut by the restore
    await r.settle()
    assert api.binds == [(p.key, "n", "0")]  # a not sent again onto p's GPU
    assert r.s.book.era == 1 and r.held(p.key) == ("n", [0])
