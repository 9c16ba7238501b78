"""Issue 14's gang lifecycle, stepped through the live scheduler (memory store, manual clock, the
fake apiserver of tests/lifecycle.py): a gang that waits past its timeout gets one GangTimeout
event per member; a running gang that falls below its minimum is reported at once and, under
``staleGangPolicy: evict``, its remaining members are evicted after the grace period unless it
recovered; an elastic gang's surplus that fits nowhere is parked, not failed."""

from __future__ import annotations

import msgspec

from scheduler.core.model import names
from scheduler.core.model.objects import PodGroupInput
from scheduler.core.snapshot.watched import POD_GROUPS
from scheduler.service.podbook import Stage
from scheduler.state.memory import MemoryStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica, node


def live() -> Replica:
    clock = ManualClock(0.0)
    return Replica(Apiserver(), MemoryStore(clock), clock, tuning=QUICK_RETRIES)


def member(name: str, job: str = "job", n: int = 2, gpus: int = 1) -> MakePod:
    return MakePod().Name(name).Req(gpus).Gang(job, n)


def events(r: Replica, reason: str) -> list[str]:
    return sorted(pod for pod, why, _ in r.api.events if why == reason)


async def later(r: Replica, seconds: float) -> None:
    """Time passes; the leader keeps renewing its lease meanwhile."""
    while seconds > 0:
        r.clock.now += min(seconds, 5.0)
        seconds -= 5.0
        await r.renew()


async def bound_gang(r: Replica, *names_: str) -> None:
    for name in names_:
        r.pending(member(name, n=len(names_)).Obj())
    while await r.step() is not None:
        pass
    await r.settle()
    for name in names_:
        r.bound_seen(f"default/{name}")
    assert all(r.s.book.stage(f"default/{n}") is Stage.BOUND for n in names_)


async def test_a_waiting_gang_gets_one_gang_timeout_event_per_member_after_its_timeout() -> None:
    r = live()
    r.s.cycle.gang_wait_timeout = 30.0
    await r.elect([node(2)])
    r.pending(member("a", n=3).Obj())
    r.pending(member("b", n=3).Obj())
    assert await r.step() in ("default/a", "default/b")
    await r.settle()
    assert events(r, "GangTimeout") == []
    await later(r, 31)
    assert await r.step() is not None  # retried when the timeout runs out
    await r.settle()
    assert events(r, "GangTimeout") == ["default/a", "default/b"]
    explanation = r.s.explain("default/a")
    assert explanation is not None
    assert "longer than gang.waitTimeoutSeconds (30 s)" in explanation.reason
    await later(r, 100)
    r.s.queue.on_cluster_event()
    while await r.step() is not None:
        pass
    await r.settle()
    assert events(r, "GangTimeout") == ["default/a", "default/b"]  # once per member


async def test_a_pod_groups_schedule_timeout_is_used_and_named() -> None:
    r = live()
    await r.elect([node(1)])
    r.s.state.inputs.pod_groups.put(
        PodGroupInput(
            group=names.POD_GROUP_API,
            namespace="default",
            name="pg",
            min_member=2,
            schedule_timeout_seconds=5,
        )
    )
    for name in ("a", "b"):  # two members of 1 GPU on a 1-GPU node: they cannot be placed
        r.pending(MakePod().Name(name).Req(1).Label(names.POD_GROUP_LABEL, "pg").Obj())
    await r.step()
    await r.settle()
    await later(r, 6)
    r.s.queue.on_cluster_event()
    await r.step()
    await r.settle()
    assert events(r, "GangTimeout") == ["default/a", "default/b"]
    explanation = r.s.explain("default/a")
    assert explanation is not None and explanation.result == "unschedulable"
    assert "longer than its PodGroup's scheduleTimeoutSeconds (5 s)" in explanation.reason
    assert r.held("default/a") is None and r.held("default/b") is None  # nothing held


async def test_a_gang_below_its_minimum_is_reported_at_once_and_nothing_is_evicted() -> None:
    r = live()
    await r.elect([node(2)])
    await bound_gang(r, "a", "b")
    failed = msgspec.structs.replace(r.api.pods["default/a"], phase="Failed")
    r.s.intake.bound_event("MODIFIED", failed)
    await r.settle()
    assert events(r, "GangBelowMinimum") == ["default/b"]
    (message,) = [m for _, why, m in r.api.events if why == "GangBelowMinimum"]
    assert message == ("gang default/job has 1 of its minimum 2 members running: default/a failed")
    await later(r, 1000)
    r.s.stale.tick()
    await r.settle()
    assert r.api.evictions == []  # policy report


async def test_a_succeeded_member_is_not_a_gang_failure() -> None:
    r = live()
    await r.elect([node(2)])
    await bound_gang(r, "a", "b")
    done = msgspec.structs.replace(r.api.pods["default/a"], phase="Succeeded")
    r.s.intake.bound_event("MODIFIED", done)
    await r.settle()
    assert events(r, "GangBelowMinimum") == []


async def test_policy_evict_evicts_the_remaining_members_after_the_grace_period() -> None:
    r = live()
    r.s.stale.policy, r.s.stale.grace_s = "evict", 60.0
    await r.elect([node(3)])
    await bound_gang(r, "a", "b", "c")
    r.s.intake.bound_event("DELETED", r.api.delete("default/a"))
    await r.settle()
    assert events(r, "GangBelowMinimum") == ["default/b", "default/c"]
    await later(r, 59)
    r.s.stale.tick()
    await r.settle()
    assert r.api.evictions == []
    await later(r, 2)
    r.s.stale.tick()
    await r.settle()
    assert r.api.evictions == ["default/b", "default/c"]
    assert r.s.sizes()["stale"] == {"stale_gangs": 0}
    evicted = {"reason": "stale-gang", "outcome": "evicted"}
    assert r.s.metrics.registry.get_sample_value("scheduler_evictions_total", evicted) == 2


async def test_policy_evict_spares_a_gang_that_is_back_at_its_minimum() -> None:
    r = live()
    r.s.stale.policy, r.s.stale.grace_s = "evict", 60.0
    await r.elect([node(2)])
    await bound_gang(r, "a", "b")
    r.s.intake.bound_event("DELETED", r.api.delete("default/a"))
    await r.settle()
    # The job's controller recreates the member: it is scheduled next to its sibling.
    r.pending(member("a2").Obj())
    # A bookmark: the bound pods' view covers a2, so its bound sibling counts.
    r.s.intake.bound_progress(r.api.version)
    assert await r.step() == "default/a2"
    await r.settle()
    r.bound_seen("default/a2")
    assert r.held("default/a2") is not None
    await later(r, 61)
    r.s.stale.tick()
    await r.settle()
    assert r.api.evictions == []
    assert r.s.sizes()["stale"] == {"stale_gangs": 0}


async def test_an_elastic_gangs_surplus_that_fits_nowhere_is_parked_not_failed() -> None:
    r = live()
    r.s.cycle.gang_wait_timeout = 10.0
    await r.elect([node(2)])
    r.s.state.inputs.pod_groups.put(
        PodGroupInput(group=names.POD_GROUP_API, namespace="default", name="pg", min_member=2)
    )
    for name in ("a", "b", "c"):
        r.pending(MakePod().Name(name).Req(1).Label(names.POD_GROUP_LABEL, "pg").Obj())
    await r.step()
    await r.settle()
    assert sorted(key for key, _, _ in r.api.binds) == ["default/a", "default/b"]
    explanation = r.s.explain("default/c")
    assert explanation is not None and explanation.result == "unschedulable"
    assert "beyond its minimum of 2 wait for capacity (not a gang failure)" in explanation.reason
    r.bound_seen("default/a")
    r.bound_seen("default/b")
    await later(r, 100)
    r.s.queue.on_cluster_event()
    while await r.step() is not None:
        pass
    await r.settle()
    assert events(r, "GangTimeout") == []  # its minimum runs: surplus never times out


async def test_a_new_leader_reports_a_gang_that_fell_below_its_minimum_while_no_one_led() -> None:
    r = live()
    await r.elect([node(2)])
    await bound_gang(r, "a", "b")
    r.api.delete("default/a")  # while the leader is dead: no one sees it go
    b = Replica(r.api, r.store, r.clock, holder="b", tuning=QUICK_RETRIES)
    b.s.stale.policy, b.s.stale.grace_s = "evict", 60.0
    r.clock.now += 16
    await b.elect([node(2)], [p for p in r.api.pods.values() if p.node_name])
    await b.settle()
    assert events(b, "GangBelowMinimum") == ["default/b"]
    await later(b, 61)
    b.s.stale.tick()
    await b.settle()
    assert b.api.evictions == ["default/b"]


async def test_policy_evict_spares_a_gang_whose_pod_group_was_lowered_in_its_grace() -> None:
    """A PodGroup gang of 3 loses a member; before its grace ends the job is scaled down (the
    PodGroup's minMember lowered to 2): the two left are its minimum, and nothing is evicted
    (the minimum is the PodGroup's as it is now, ``group_minimum``; soak seed 5963)."""
    r = live()
    r.s.stale.policy, r.s.stale.grace_s = "evict", 60.0
    group = PodGroupInput(group=names.POD_GROUP_API, namespace="default", name="pg", min_member=3)
    r.s.intake.event(POD_GROUPS, "ADDED", group)
    await r.elect([node(3)])
    for name in ("a", "b", "c"):
        r.pending(MakePod().Name(name).Req(1).Label(names.POD_GROUP_LABEL, "pg").Obj())
    while await r.step() is not None:
        pass
    await r.settle()
    for name in ("a", "b", "c"):
        r.bound_seen(f"default/{name}")
    r.s.intake.bound_event("DELETED", r.api.delete("default/a"))
    await r.settle()
    assert events(r, "GangBelowMinimum") == ["default/b", "default/c"]
    r.s.intake.event(POD_GROUPS, "MODIFIED", msgspec.structs.replace(group, min_member=2))
    await later(r, 61)
    r.s.stale.tick()
    await r.settle()
    assert r.api.evictions == []
    assert r.s.sizes()["stale"] == {"stale_gangs": 0}
