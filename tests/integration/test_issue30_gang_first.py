"""Issue 30, sim seeds 549, 909, 3118: a gang being completed goes before every other pod.

A leader decided gang j (minimum 2) whole on node n; j-0's Binding committed, j-1's was
refused, and the leader held j-1's GPU for the gang (test_issue30_partial_gang.py). A store
failover lost that hold. The new leader reloads from the apiserver: j has 1 of 2 bound, and an
older single pod a waits at the same priority for the one free GPU. Stepped by hand through
the live scheduler's own parts on BOTH stores (the ``backend`` fixture of test_pod_lifecycle.py),
against the fake apiserver of tests/lifecycle.py.

On the code before the fix the queue was plain PrioritySort (priority, then creation time): a
went first, took the GPU, and j stayed below its minimum with a member bound for good. Seed 549's
fix put the tier below priority, so a pod of a higher priority still took the GPU the same way
(seeds 909, 3118: a pod or gang of priority 1000 created after the old leader decided j).
"""

from __future__ import annotations

from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend
from tests.lifecycle import node

# The stores of test_pod_lifecycle.py: memory, and the session's real redis-server.
redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


async def test_issue30_a_gang_being_completed_goes_first(backend: Backend) -> None:
    r = backend.live()
    old = "2026-01-01T00:00:00Z"
    new = "2026-01-01T00:01:00Z"
    j0 = r.api.create(MakePod().Name("j-0").Req(1).Gang("j", 2).Created(new).Obj())
    j0 = r.api.land(j0.key, "n", "0")  # the old leader's Binding; its hold of GPU 1 is lost
    # The pending pods are queued before the bound pods' LIST arrives (the order is read at
    # each pod's turn, not when it was queued).
    r.pending(MakePod().Name("a").Req(1).Created(old).Obj())
    r.pending(MakePod().Name("j-1").Req(1).Gang("j", 2).Created(new).Obj())
    await r.elect([node(2)], bound=[j0])
    assert await r.step() == "default/j-1"  # its gang is being completed: before a
    await r.settle()
    assert r.held("default/j-1") == ("n", [1])
    assert await r.step() == "default/a"  # no GPU left for it
    await r.settle()
    assert r.held("default/a") is None
    assert sorted(b[0] for b in r.api.binds) == ["default/j-1"]


async def test_issue30_a_gang_being_completed_goes_before_a_higher_priority(
    backend: Backend,
) -> None:
    """Sim seeds 909 and 3118: the same lost hold, and a pod h of a higher priority waits with
    j-1 for the one free GPU. Were h decided first (PrioritySort), it would fit there without
    preempting anything and j would stay at 1 of 2 bound for good. j-1 goes first and takes
    the GPU its gang held; h no longer fits and wins by preemption, as it would have against
    the hold itself: a whole unit of lower priority is evicted (here j, both members)."""
    r = backend.live()
    new = "2026-01-01T00:01:00Z"
    j0 = r.api.create(MakePod().Name("j-0").Req(1).Gang("j", 2).Created(new).Obj())
    j0 = r.api.land(j0.key, "n", "0")  # the old leader's Binding; its hold of GPU 1 is lost
    r.pending(MakePod().Name("h").Req(1).Priority(10).Created(new).Obj())
    r.pending(MakePod().Name("j-1").Req(1).Gang("j", 2).Created(new).Obj())
    await r.elect([node(2)], bound=[j0])
    assert await r.step() == "default/j-1"
    await r.settle()
    assert r.held("default/j-1") == ("n", [1])
    assert await r.step() == "default/h"
    await r.settle()
    assert r.held("default/h") is None
    assert sorted(b[0] for b in r.api.binds) == ["default/j-1"]
    assert sorted(r.api.evictions) == ["default/j-0", "default/j-1"]


async def test_issue30_plain_priority_sort_for_other_gangs(backend: Backend) -> None:
    """A gang with nothing bound is not being completed: plain PrioritySort (higher priority,
    then older)."""
    r = backend.live()
    old = "2026-01-01T00:00:00Z"
    new = "2026-01-01T00:01:00Z"
    r.pending(MakePod().Name("h").Req(1).Priority(10).Created(new).Obj())
    r.pending(MakePod().Name("k-0").Req(1).Gang("k", 2).Created(new).Obj())
    r.pending(MakePod().Name("a").Req(1).Created(old).Obj())
    await r.elect([node(4)])
    assert await r.step() == "default/h"
    assert await r.step() == "default/a"
    assert await r.step() == "default/k-0"
    await r.settle()
