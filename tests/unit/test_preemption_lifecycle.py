"""Issue 14's preemption, stepped through the live scheduler (memory store, manual clock, the
fake apiserver of tests/lifecycle.py, whose evictions mark a pod deleting): victims evicted
whole with a Preempted event naming the preemptor, the preemptor's nominatedNodeName and its
nomination in the store and the snapshot, the GPUs kept from lower-priority pods while the
victims leave, a leader failover that keeps them held, expiry, and a PodDisruptionBudget."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from scheduler.service import preemption as preemption_module
from scheduler.service.podbook import Stage
from scheduler.state.memory import MemoryStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica, node


def live() -> Replica:
    clock = ManualClock(0.0)
    return Replica(Apiserver(), MemoryStore(clock), clock, tuning=QUICK_RETRIES)


async def later(r: Replica, seconds: float) -> None:
    while seconds > 0:
        r.clock.now += min(seconds, 5.0)
        seconds -= 5.0
        await r.renew()


def low_gang(name: str) -> MakePod:
    return (
        MakePod()
        .Name(name)
        .Req(4)
        .Gang("low", 2)
        .Priority(10)
        .Created(f"2026-01-01T00:00:0{name[-1]}Z")
    )


async def run(r: Replica) -> None:
    while await r.step() is not None:
        pass
    await r.settle()


async def with_low_gang_bound(r: Replica) -> None:
    await r.elect([node(8)])
    for name in ("low-0", "low-1"):
        r.pending(low_gang(name).Obj())
    await run(r)
    for name in ("low-0", "low-1"):
        r.bound_seen(f"default/{name}")


async def leaves(r: Replica, key: str) -> None:
    """The kubelet (KWOK) finishes an evicted pod: it is deleted (and the store lets it go)."""
    r.s.intake.bound_event("DELETED", r.api.delete(key))
    await r.settle()


async def test_a_high_priority_pod_evicts_the_whole_low_gang_and_binds_once_it_is_gone() -> None:
    r = live()
    await with_low_gang_bound(r)
    r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    await run(r)
    assert r.api.evictions == ["default/low-0", "default/low-1"]  # both, never one
    metrics = r.s.metrics.registry
    evicted = {"reason": "preemption", "outcome": "evicted"}
    assert metrics.get_sample_value("scheduler_evictions_total", evicted) == 2
    assert metrics.get_sample_value("scheduler_preemption_attempts_total") == 1
    preempted = [(pod, m) for pod, why, m in r.api.events if why == "Preempted"]
    assert preempted == [
        ("default/low-0", "Preempted by default/big (priority 1000) on node n"),
        ("default/low-1", "Preempted by default/big (priority 1000) on node n"),
    ]
    assert r.api.nominated == {"default/big": "n"}
    (nomination,) = (await r.store.nominations(0)).values()
    assert (nomination.pod, nomination.node, nomination.devices) == (
        "default/big",
        "n",
        (0, 1, 2, 3, 4, 5, 6, 7),
    )
    explanation = r.s.explain("default/big")
    assert explanation is not None
    assert explanation.reason.startswith(
        "0/1 nodes are available: 1 has fewer than 8 free GPUs. preemption: default/big "
        "(priority 1000) preempts 2 pod(s) (1 gang(s))"
    )
    # The victims terminate (the eviction marked them deleting), then leave one by one.
    for name in ("low-0", "low-1"):
        r.s.intake.bound_event("MODIFIED", r.api.pods[f"default/{name}"])
    await leaves(r, "default/low-0")
    await later(r, 11)  # past the preemptor's backoff: it is attempted again
    # A low-priority pod that arrives meanwhile cannot take the freed GPUs.
    r.pending(MakePod().Name("sneak").Req(4).Priority(10).Obj())
    await run(r)
    assert r.held("default/sneak") is None
    assert r.s.book.stage("default/big") is Stage.PENDING
    explanation = r.s.explain("default/big")
    assert explanation is not None and explanation.attempts == 2
    assert explanation.reason.endswith(
        "preemption: nominated to node n, waiting for its victims to leave"
    )
    assert r.api.evictions == ["default/low-0", "default/low-1"]  # not preempting again
    await leaves(r, "default/low-1")
    # Its last victim gone, the preemptor is tried at once, backoff or not.
    assert r.s.queue.counts()["active"] == 1
    await run(r)
    assert r.held("default/big") == ("n", [0, 1, 2, 3, 4, 5, 6, 7])
    assert r.held("default/sneak") is None
    assert await r.store.nominations(0) == {}
    assert r.s.state.nominations == {}
    # sneak (priority 10) never weighed preemption: no pod had a lower priority.
    assert r.s.sizes()["preemptions"] == {"held": 0, "refused": 0, "leaving": 0}


async def test_a_new_leader_keeps_the_gpus_held_for_the_preemptor() -> None:
    r = live()
    await with_low_gang_bound(r)
    r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    await run(r)
    assert r.api.evictions == ["default/low-0", "default/low-1"]
    for name in ("low-0", "low-1"):
        await leaves(r, f"default/{name}")
    # The leader dies before the preemptor binds; a second replica takes the lease over.
    b = Replica(r.api, r.store, r.clock, holder="b", tuning=QUICK_RETRIES)
    r.clock.now += 16  # a's lease lapses
    pending = [p for p in r.api.pods.values() if not p.node_name]
    for pod in pending:
        b.s.intake.pending_event("ADDED", pod)
    await b.elect([node(8)], [p for p in r.api.pods.values() if p.node_name])
    assert b.s.state.nominations["default/big"].devices == (0, 1, 2, 3, 4, 5, 6, 7)
    # A low-priority pod first in the queue does not get the held GPUs.
    b.pending(MakePod().Name("sneak").Req(1).Priority(0).Created("2020-01-01T00:00:00Z").Obj())
    b.s.queue.delete("default/big")
    assert await b.step() == "default/sneak"
    await b.settle()
    assert b.held("default/sneak") is None
    b.s.queue.add("default/big", 1000, "")
    await run(b)
    assert b.held("default/big") == ("n", [0, 1, 2, 3, 4, 5, 6, 7])
    assert await b.store.nominations(0) == {}


async def test_a_nomination_expires_when_the_preemptor_cannot_bind() -> None:
    r = live()
    await with_low_gang_bound(r)
    r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    await run(r)
    assert r.api.evictions == ["default/low-0", "default/low-1"]
    await leaves(r, "default/low-1")  # low-0 never finishes terminating
    await later(r, 299)
    r.s.preemptions.tick()
    assert r.s.state.nominations != {}
    await later(r, 2)
    assert r.s.preemptions.tick()
    await r.settle()
    assert r.s.state.nominations == {}
    assert r.api.nominated == {}  # nominatedNodeName cleared
    assert await r.store.nominations(int(r.clock.now * 1000)) == {}
    # The freed half goes back to everyone (once the preemptor is gone: else its next attempt
    # would nominate it again).
    r.s.intake.pending_event("DELETED", r.api.delete("default/big"))
    r.pending(MakePod().Name("small").Req(4).Priority(10).Obj())
    await run(r)
    assert r.held("default/small") is not None


async def test_a_search_that_found_nothing_is_not_repeated_for_a_while() -> None:
    r = live()
    await with_low_gang_bound(r)
    r.pending(MakePod().Name("huge").Req(16).Priority(1000).Obj())  # fits nowhere, ever
    calls = []
    real = preemption_module.preempt

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    preemption_module.preempt = counted  # type: ignore[assignment]
    try:
        await run(r)
        for _ in range(3):
            await later(r, 11)
            r.s.queue.on_cluster_event()
            await run(r)
        assert len(calls) == 2  # at 0 s and once 30 s had passed, not on every retry
    finally:
        preemption_module.preempt = real
    explanation = r.s.explain("default/huge")
    assert explanation is not None
    assert explanation.reason.endswith(
        "preemption: no node where evicting pods of lower priority than 1000 makes room"
    )
    assert r.api.evictions == []
    entry = r.s.book.get("default/huge")
    assert entry is not None and entry.searched is not None  # kept in the pod's entry
    r.s.intake.pending_event("DELETED", r.api.delete("default/huge"))
    assert r.s.book.get("default/huge") is None  # it went with the pod
    assert r.s.sizes()["preemptions"] == {"held": 0, "refused": 0, "leaving": 0}


async def test_equal_priority_evicts_nothing() -> None:
    r = live()
    await with_low_gang_bound(r)
    r.pending(MakePod().Name("peer").Req(8).Priority(10).Obj())
    await run(r)
    assert r.api.evictions == []
    assert r.s.state.nominations == {}
    explanation = r.s.explain("default/peer")
    assert explanation is not None and explanation.result == "unschedulable"


async def test_a_deleted_preemptor_lets_its_nomination_go() -> None:
    r = live()
    await with_low_gang_bound(r)
    big = r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    await run(r)
    assert r.s.state.nominations
    r.api.delete("default/big")
    r.s.intake.pending_event("DELETED", msgspec.structs.replace(big, deleting=True))
    await r.settle()
    assert r.s.state.nominations == {}
    assert await r.store.nominations(0) == {}


async def test_a_new_leader_evicts_again_when_the_old_one_died_before_evicting() -> None:
    r = live()
    await with_low_gang_bound(r)
    r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    assert await r.step() == "default/big"
    for task in list(r.s.tasks.running):  # the leader dies before its evictions go out
        task.cancel()
    await asyncio.gather(*r.s.tasks.running, return_exceptions=True)
    assert r.api.evictions == []
    assert await r.store.nominations(0)  # the nomination was written first
    b = Replica(r.api, r.store, r.clock, holder="b", tuning=QUICK_RETRIES)
    r.clock.now += 16
    b.s.intake.pending_event("ADDED", r.api.pods["default/big"])
    await b.elect([node(8)], [p for p in r.api.pods.values() if p.node_name])
    assert "default/big" in b.s.state.nominations
    await run(b)  # nothing is terminating on the node: it preempts again
    assert r.api.evictions == ["default/low-0", "default/low-1"]
    for name in ("low-0", "low-1"):
        b.s.intake.bound_event("DELETED", r.api.delete(f"default/{name}"))
    await b.settle()
    await later(b, 11)
    await run(b)
    assert b.held("default/big") == ("n", [0, 1, 2, 3, 4, 5, 6, 7])


# ---- the review's timelines -------------------------------------------------------------------


async def test_a_retry_before_the_watch_shows_the_victims_terminating_does_not_preempt_again() -> (
    None
):
    r = live()
    await with_low_gang_bound(r)
    r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    await run(r)
    assert r.api.evictions == ["default/low-0", "default/low-1"]
    # A cluster event retries the preemptor before the watch delivers the victims' deletion.
    await later(r, 11)
    r.s.queue.on_cluster_event()
    await run(r)
    assert r.api.evictions == ["default/low-0", "default/low-1"]
    assert len([e for e in r.api.events if e[1] == "Preempted"]) == 2
    explanation = r.s.explain("default/big")
    assert explanation is not None
    assert explanation.reason.endswith("waiting for its victims to leave")


async def test_a_refused_eviction_evicts_no_member_and_stands_without_a_storm() -> None:
    r = live()
    await with_low_gang_bound(r)
    r.api.blocked = {"default/low-0"}
    r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    await run(r)
    assert r.api.evictions == []  # the dry run was refused: no member goes alone
    assert r.s.state.nominations == {} and r.api.nominated == {}
    for _ in range(20):  # 220 s of retries: the gang is no candidate while the refusal stands
        await later(r, 11)
        r.s.preemptions.tick()
        r.s.queue.on_cluster_event()
        await run(r)
    assert r.api.evictions == []
    assert len([e for e in r.api.events if e[1] == "PreemptionBlocked"]) == 1
    explanation = r.s.explain("default/big")
    assert explanation is not None
    assert explanation.reason.endswith(
        "(kept by a PodDisruptionBudget or a refused eviction: default/low-0, default/low-1)"
    )
    await later(r, 90)  # past the 300 s: the refusal no longer stands, the search tries again
    r.s.preemptions.tick()
    r.s.queue.on_cluster_event()
    await run(r)
    assert len([e for e in r.api.events if e[1] == "PreemptionBlocked"]) == 2


async def test_a_failed_bind_keeps_the_gpus_held_for_the_preemptor() -> None:
    r = live()
    await with_low_gang_bound(r)
    r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    await run(r)
    for name in ("low-0", "low-1"):
        await leaves(r, f"default/{name}")
    r.api.refuse["default/big"] = 500  # its Binding fails
    await later(r, 11)
    await run(r)
    assert r.held("default/big") is None
    assert "default/big" in r.s.state.nominations  # held again
    r.pending(MakePod().Name("sneak").Req(4).Priority(10).Obj())
    await run(r)
    assert r.held("default/sneak") is None
    del r.api.refuse["default/big"]
    await later(r, 11)
    await run(r)
    assert r.held("default/big") == ("n", [0, 1, 2, 3, 4, 5, 6, 7])
    assert r.s.state.nominations == {} and await r.store.nominations(0) == {}


class SlowNominations(MemoryStore):
    """A store whose nominate waits for a gate: the preemptor can leave meanwhile."""

    gate: asyncio.Event

    async def nominate(self, *args: Any) -> None:
        await self.gate.wait()
        await super().nominate(*args)


async def test_a_preemptor_that_leaves_while_its_nomination_is_written_evicts_nobody() -> None:
    clock = ManualClock(0.0)
    store = SlowNominations(clock)
    store.gate = asyncio.Event()
    r = Replica(Apiserver(), store, clock, tuning=QUICK_RETRIES)
    await with_low_gang_bound(r)
    big = r.pending(MakePod().Name("big").Req(8).Priority(1000).Obj())
    step = asyncio.create_task(r.step())
    await asyncio.sleep(0)
    r.s.intake.pending_event(
        "DELETED", msgspec.structs.replace(r.api.delete("default/big"), deleting=True)
    )
    store.gate.set()
    await step
    await r.settle()
    assert big.key not in r.s.state.nominations
    assert r.api.evictions == []
    assert await store.nominations(0) == {}
