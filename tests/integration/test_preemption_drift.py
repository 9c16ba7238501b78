"""Issue 20's preemption drifts, stepped through the live scheduler on both stores (the memory
store and a real redis-server, one parametrized suite; tests/lifecycle.py's fake apiserver, whose
first Binding wins and whose evictions mark a pod deleting, and a manual clock).

- drift 5: a victim whose eviction a PodDisruptionBudget refuses is never chosen again while the
  refusal stands (the preemptor takes an evictable victim on another node instead of waiting on
  the refused one forever); candidates are ranked by the budgets they would break first, as
  kube-scheduler ranks them; a gang is evicted whole or not at all;
- a preemptor that plans over a lower nomination ends it (its nominatedNodeName and its hold);
- a nomination that expired while no one led has its nominatedNodeName cleared by the next
  leader.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import msgspec
import pytest
import redis.asyncio as aioredis

from scheduler.core.model.objects import DisruptionBudgetInput, LabelSelector, NodeInput, PodInput
from scheduler.state.base import Store
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore
from scheduler.testing.redisserver import RedisServer
from tests.builders import MakeNode, MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica

Live = Callable[..., Replica]


@pytest.fixture(params=["memory", "redis"])
async def live(request: pytest.FixtureRequest) -> AsyncIterator[Live]:
    """Replicas on one store (all on one apiserver and one clock): the memory store, or a
    RedisStore on the session's redis-server, emptied first."""
    clock = ManualClock(0.0)
    api = Apiserver()
    store: Store
    client = None
    if request.param == "memory":
        store = MemoryStore(clock)
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        client = aioredis.Redis.from_url(server.url)
        await client.flushall()  # no test depends on another's leftovers
        store = RedisStore.from_url(server.url, prefix="drift")

    def make(holder: str = "a") -> Replica:
        r = Replica(api, store, clock, holder, tuning=QUICK_RETRIES)
        # Nominations expire by the store's wall clock: the manual one here.
        r.s.preemptions.wall_ms = lambda: int(clock.now * 1000)
        return r

    try:
        yield make
    finally:
        if client is not None:
            await store.close()
            await client.aclose()


def gpu_node(name: str, gpus: int = 1) -> NodeInput:
    return MakeNode().Name(name).GPUs(gpus).Obj()


async def run(r: Replica) -> None:
    while await r.step() is not None:
        pass
    await r.settle()


async def later(r: Replica, seconds: float) -> None:
    """Time passes (the lease renewed meanwhile); timers run and waiting pods retry."""
    while seconds > 0:
        r.clock.now += min(seconds, 5.0)
        seconds -= 5.0
        await r.renew()
    r.s.preemptions.tick()
    r.s.queue.on_cluster_event()
    await r.settle()


async def leaves(r: Replica, key: str) -> None:
    """An evicted pod finishes: the bound watch shows it deleted."""
    r.s.intake.bound_event("DELETED", r.api.delete(key))
    await r.settle()


def victim(name: str, node: str, created: str, **labels: str) -> PodInput:
    """A running pod of priority 0 on GPU 0 of ``node`` (another scheduler's, say)."""
    pod = MakePod().Name(name).Req(1).Bound(node, "0").Created(created)
    for key, value in labels.items():
        pod = pod.Label(key, value)
    return pod.Obj()


def budget(allowed: int, **labels: str) -> DisruptionBudgetInput:
    return DisruptionBudgetInput(
        namespace="default",
        name="pdb",
        selector=LabelSelector(match_labels=labels),
        allowed=allowed,
    )


def blocked(r: Replica) -> int:
    return len([e for e in r.api.events if e[1] == "PreemptionBlocked"])


async def two_nodes_each_with_a_victim(live: Live) -> Replica:
    """Nodes a and b, one GPU each, each held by a pod of priority 0; the one on a is younger,
    so a is the better candidate when budgets are not weighed."""
    r = live()
    on_a = r.api.create(victim("va", "a", "2026-01-02T00:00:00Z", app="guarded"))
    on_b = r.api.create(victim("vb", "b", "2026-01-01T00:00:00Z"))
    await r.elect([gpu_node("a"), gpu_node("b")], [on_a, on_b])
    return r


# ---- drift 5: a refused victim is not chosen again; budgets rank candidates -----------------


async def test_a_refused_victim_on_a_is_passed_over_for_an_evictable_one_on_b(live: Live) -> None:
    r = await two_nodes_each_with_a_victim(live)
    r.api.blocked = {"default/va"}  # a budget the snapshot does not know yet refuses va
    r.pending(MakePod().Name("p").Req(1).Priority(100).Obj())
    await run(r)
    # The plan chose va (younger), the dry run was refused: nothing evicted, nomination ended.
    assert r.api.evictions == [] and blocked(r) == 1
    assert r.s.state.nominations == {} and r.api.nominated == {}
    assert await r.store.nominations(0) == {}
    await later(r, 11)  # its next attempt plans again, without va
    await run(r)
    assert r.api.evictions == ["default/vb"]
    assert r.api.nominated == {"default/p": "b"}
    await leaves(r, "default/vb")
    await run(r)
    assert r.api.binds == [("default/p", "b", "0")]
    assert blocked(r) == 1  # va was never tried again
    assert r.s.sizes()["preemptions"] == {"held": 0, "refused": 1, "leaving": 0}
    await leaves(r, "default/va")
    r.s.preemptions.tick()
    assert r.s.sizes()["preemptions"]["refused"] == 0  # the refusal left with its pod


async def test_candidates_are_ranked_by_the_budgets_they_would_break_first(live: Live) -> None:
    r = await two_nodes_each_with_a_victim(live)
    r.s.preemptions.budget_event("ADDED", budget(0, app="guarded"))  # va may not be disrupted
    r.pending(MakePod().Name("p").Req(1).Priority(100).Obj())
    await run(r)
    assert r.api.evictions == ["default/vb"] and blocked(r) == 0
    assert r.api.nominated == {"default/p": "b"}
    (nomination,) = (await r.store.nominations(0)).values()
    assert (nomination.node, nomination.victims) == ("b", ("uid-default-vb",))
    await leaves(r, "default/vb")
    await run(r)
    assert r.api.binds == [("default/p", "b", "0")]


async def test_a_victim_that_breaks_a_budget_is_still_chosen_when_nothing_else_fits(
    live: Live,
) -> None:
    """kube-scheduler's order, not a ban: with a budget on every candidate, the fewest
    violations win; the apiserver then refuses, and the refusal stands."""
    r = live()
    on_a = r.api.create(victim("va", "a", "2026-01-02T00:00:00Z", app="guarded"))
    await r.elect([gpu_node("a")], [on_a])
    r.s.preemptions.budget_event("ADDED", budget(0, app="guarded"))
    r.api.blocked = {"default/va"}
    r.pending(MakePod().Name("p").Req(1).Priority(100).Obj())
    await run(r)
    assert r.api.evictions == [] and blocked(r) == 1
    for _ in range(5):
        await later(r, 11)
        await run(r)
    assert blocked(r) == 1  # the refusal stands: no dry run after every hold
    explanation = r.s.explain("default/p")
    assert explanation is not None
    assert explanation.reason.endswith(
        "(kept by a PodDisruptionBudget or a refused eviction: default/va)"
    )
    # The budget now allows a disruption: the refusal no longer stands.
    r.api.blocked = set()
    r.s.preemptions.budget_event("MODIFIED", budget(1, app="guarded"))
    await later(r, 31)
    await run(r)
    assert r.api.evictions == ["default/va"]


async def test_a_gang_is_never_evicted_one_member_alone(live: Live) -> None:
    """A budget allowing one disruption covers a gang of two: the gang is no victim at all
    (the Eviction API would take one member and refuse the other)."""
    r = live()
    await r.elect([gpu_node("n", 8)])
    for name in ("low-0", "low-1"):
        r.pending(MakePod().Name(name).Req(4).Gang("low", 2).Label("app", "low").Obj())
    await run(r)
    for name in ("low-0", "low-1"):
        r.bound_seen(f"default/{name}")
    r.s.preemptions.budget_event("ADDED", budget(1, app="low"))
    r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    await run(r)
    assert r.api.evictions == [] and r.s.state.nominations == {}
    explanation = r.s.explain("default/big")
    assert explanation is not None
    assert explanation.reason.endswith(
        "(kept by a PodDisruptionBudget or a refused eviction: default/low-0, default/low-1)"
    )
    # Two disruptions allowed: the gang goes whole.
    r.s.preemptions.budget_event("MODIFIED", budget(2, app="low"))
    await later(r, 31)
    await run(r)
    assert r.api.evictions == ["default/low-0", "default/low-1"]


async def test_a_gang_whose_dry_run_is_refused_loses_no_member(live: Live) -> None:
    """The budgets unknown (the watch lags): the dry run finds the refusal before any member
    is evicted."""
    r = live()
    await r.elect([gpu_node("n", 8)])
    for name in ("low-0", "low-1"):
        r.pending(MakePod().Name(name).Req(4).Gang("low", 2).Obj())
    await run(r)
    for name in ("low-0", "low-1"):
        r.bound_seen(f"default/{name}")
    r.api.blocked = {"default/low-1"}
    r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    await run(r)
    assert r.api.evictions == [] and blocked(r) == 1
    assert r.held("default/low-0") is not None and r.held("default/low-1") is not None


# ---- smaller items: nominations that end ------------------------------------------------------


async def test_a_preemptor_planning_over_a_lower_nomination_ends_it(live: Live) -> None:
    r = live()
    v = r.api.create(victim("v", "n", "2026-01-01T00:00:00Z"))
    await r.elect([gpu_node("n")], [v])
    r.pending(MakePod().Name("mid").Req(1).Priority(500).Obj())
    await run(r)
    assert r.api.evictions == ["default/v"] and r.api.nominated == {"default/mid": "n"}
    r.s.intake.bound_event("MODIFIED", r.api.pods["default/v"])  # v terminates (slowly)
    r.pending(MakePod().Name("high").Req(1).Priority(1000).Obj())
    await run(r)
    # high waits for the same terminating pod, on the same GPU: mid's nomination is over.
    assert r.api.nominated == {"default/high": "n"}
    assert set(r.s.state.nominations) == {"default/high"}
    assert [n.pod for n in (await r.store.nominations(0)).values()] == ["default/high"]
    await leaves(r, "default/v")
    await run(r)
    assert r.api.binds == [("default/high", "n", "0")]
    assert r.held("default/mid") is None


async def test_a_nomination_that_expired_while_no_one_led_is_cleared_by_the_next_leader(
    live: Live,
) -> None:
    a = live("a")
    v = a.api.create(victim("v", "n", "2026-01-01T00:00:00Z"))
    await a.elect([gpu_node("n")], [v])
    p = a.pending(MakePod().Name("p").Req(1).Priority(100).Obj())
    await run(a)
    assert a.api.nominated == {"default/p": "n"}
    # The leader dies; the victim never finishes terminating; nobody leads for 301 s.
    await a.store.release_lease("a", a.leadership.epoch or 0)
    a.s.accepting = False
    a.clock.now += 301
    b = live("b")
    b.s.intake.pending_event("ADDED", msgspec.structs.replace(p, nominated_node="n"))
    await b.elect([gpu_node("n")], [b.api.pods["default/v"]])
    await b.settle()
    assert b.api.nominated == {}
    assert b.s.state.nominations == {}
