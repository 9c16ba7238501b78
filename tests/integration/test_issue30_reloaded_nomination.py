"""Issue 30, found by the simulation's soak (seed 3163): a nomination a new leader reloads from
the store whose preemptor's nominatedNodeName the previous leader never set. Stepped by hand
through the live scheduler's own parts on BOTH stores (the ``backend`` fixture of
test_pod_lifecycle.py: the memory store and the real Redis store), against the fake apiserver
of tests/lifecycle.py.
"""

from __future__ import annotations

import asyncio

from scheduler.kube.api import Write
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend
from tests.lifecycle import Apiserver, node

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


class Dying(Apiserver):
    """The apiserver, a nominatedNodeName write hanging while ``hang`` (its sender dies first)."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = True

    async def set_nominated_node(self, namespace: str, name: str, node: str | None) -> Write:
        if self.hang:
            await asyncio.Event().wait()
        return await super().set_nominated_node(namespace, name, node)


async def test_a_reloaded_nomination_is_set_on_its_preemptor(backend: Backend) -> None:
    """p (high priority) preempts v: the old leader writes the nomination to the store and
    dies before its nominatedNodeName and eviction go out. The new leader reloads the
    nomination: it holds v's GPU for p and evicts v. Before the fix it did not set p's
    nominatedNodeName: the GPU was kept from every pod of lower priority for the nomination's
    hold (5 minutes) while the apiserver showed no one nominated for it."""
    api = Dying()
    v = api.create(MakePod().Name("v").Req(1).Bound("n", "0").Obj())
    old = backend.replica(api, "old")
    await old.elect([node(1)], [v])
    p = old.pending(MakePod().Name("p").Req(1).Priority(1000).Obj())
    assert await old.step() == p.key
    assert set(old.s.state.nominations) == {p.key}
    await backend.store.release_lease("old", old.leadership.epoch or 0)
    old.s.accepting = False
    for t in list(old.s.tasks.running):
        t.cancel()
    await asyncio.gather(*list(old.s.tasks.running), return_exceptions=True)
    assert api.nominated == {} and api.evictions == []
    api.hang = False
    new = backend.replica(api, "new")
    new.s.intake.pending_event("ADDED", p)
    await new.elect([node(1)], [v])
    await new.settle()
    assert set(new.s.state.nominations) == {p.key}
    assert api.evictions == [v.key] and api.nominated == {p.key: "n"}
