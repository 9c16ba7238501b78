"""Issue 30, found by the simulation's soak (seed 1326, once its nomination bug was fixed): a
Binding answered "gone" before an etcd restore brought its pod back, the answer told the book
after the restore. Stepped by hand through the live scheduler's own parts on BOTH stores (the
``backend`` fixture of test_pod_lifecycle.py: the memory store and the real Redis store),
against the fake apiserver of tests/lifecycle.py.

On the code before the fix the pod left the book for good: pending, with GPUs free and no
reason written.
"""

from __future__ import annotations

import asyncio

from scheduler.core.model.objects import PodInput
from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import Apiserver, node, until

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


class Reading(Apiserver):
    """The apiserver, with the pods read (a Binding's read-back) in order."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[str] = []

    async def get_pod(self, namespace: str, name: str) -> PodInput | None:
        pod = await super().get_pod(namespace, name)
        self.read.append(f"{namespace}/{name}")
        return pod


async def test_a_binding_gone_before_a_restore_leaves_the_pod_it_brought_back(
    backend: Backend,
) -> None:
    """Gang j (j-0, j-1) is pending; etcd is backed up; j-1 is deleted (the pending watch has
    not told it yet). j is decided: j-0's Binding is slow, j-1's is answered 404. Before the
    gang's binding cycle ends, etcd is restored from the backup (j-1 back, the same UID) and
    both watches re-list: a new era, whose LIST shows j-1 pending. Then j-0's Binding lands.
    j-1's "gone" is of the era before: taken as such, j-1 left the book, which had no more
    news of it to come (the LIST told it while it was binding)."""
    api = Reading()
    r = backend.replica(api, "a")
    api.version = 1000
    await r.elect([node(2)])
    j0 = r.pending(MakePod().Name("j-0").Req(1).Gang("job", 2).Obj())
    j1 = r.pending(MakePod().Name("j-1").Req(1).Gang("job", 2).Obj())
    backup = dict(api.pods), api.version
    # Another scheduler's pod bound after the backup: the book has seen a version the restore
    # takes back (else nothing tells that the versions went back).
    r.s.intake.bound_event("ADDED", api.create(MakePod().Name("o").Bound("n").Obj()))
    del api.pods[j1.key]  # deleted; the pending watch has not told it yet
    api.gates[j0.key] = asyncio.Event()  # j-0's Binding is slow
    await r.step()
    await until(lambda: j1.key in api.read)  # 404, read back: gone (j-0's answer to come)
    api.pods, api.version = dict(backup[0]), backup[1]  # the restore: j-1 back
    r.s.intake.replace_pending([api.pods[j0.key], api.pods[j1.key]], api.version)
    r.s.intake.replace_bound(*r.bound_list())
    assert r.s.book.era == 1 and not r.s.intake.between_eras
    api.gates[j0.key].set()
    await r.settle()
    assert r.s.book.stage(j1.key) is not Stage.GONE
    for _ in range(5):  # the gang decided again once the read-backs settle
        r.clock.now += 2.0
        await r.renew()
        await run(r)
    assert api.pods[j1.key].node_name == "n" and api.pods[j0.key].node_name == "n"
