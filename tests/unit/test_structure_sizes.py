"""Memory stays bounded (issue 12, item 9): every per-pod structure of the live scheduler, on
the leader and on a standby, is back to its size before once pods have come and gone.

``Scheduler.sizes()`` gathers them all: the pod book, the queue, the snapshot's holdings, orphans,
pod records and gang members (``ClusterState.sizes()``), the binder's pods in flight, and the
loop's tasks and re-reads. The pods go through every path: single pods and gangs bound and
deleted, binds refused, answers lost, pods deleted before their turn or while their Binding is
in flight, and pods that fit nowhere.
"""

from __future__ import annotations

import asyncio

import msgspec

from scheduler.core.model.objects import PodInput
from scheduler.state.memory import MemoryStore
from tests.builders import MakeNode, MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica

PODS = 2_000
BATCH = 25
NODES = [MakeNode().Name(f"n{i}").GPUs(8).Obj() for i in range(4)]


def make(i: int, api: Apiserver) -> PodInput:
    """Pod ``i``, and what the apiserver will do to its Binding."""
    kind = i % 20
    pod = MakePod().Name(f"p{i}")
    if kind in (0, 1):
        pod = pod.Req(1).Gang(f"job-{i // 20}", 2)
    elif kind == 4:
        pod = pod.Req(16)  # fits nowhere: parked with an explanation
    else:
        pod = pod.Req(1 + i % 2)
    obj = pod.Obj()
    if kind == 2:
        api.refuse[obj.key] = 500  # refused on every attempt: back off, re-read
    elif kind == 3:
        api.lose_answer.add(obj.key)  # lands, the answer is lost: 409 and read back
    elif kind == 6:
        api.gates[obj.key] = asyncio.Event()  # deleted while its Binding is in flight
    return obj


async def test_per_pod_structures_are_back_to_their_sizes_after_2000_pods() -> None:
    clock = ManualClock(0.0)
    api = Apiserver()
    store = MemoryStore(clock)
    leader = Replica(api, store, clock, "leader", tuning=QUICK_RETRIES)
    standby = Replica(api, store, clock, "standby", tuning=QUICK_RETRIES)
    both = (leader, standby)
    standby.s.intake.replace_nodes(NODES)
    standby.s.intake.replace_bound([])
    await leader.elect(NODES)
    await leader.settle()
    before = {r.holder: r.s.sizes() for r in both}
    peak = {r.holder: 0 for r in both}
    refused = 0
    for start in range(0, PODS, BATCH):
        clock.now += 0.5  # backoffs run out, reconciles fall due
        await leader.renew()
        pods = [make(i, api) for i in range(start, start + BATCH)]
        kinds = {pod.key: i % 20 for i, pod in enumerate(pods, start)}
        for pod in pods:
            api.create(pod)
            for r in both:
                r.s.intake.pending_event("ADDED", pod)
        for pod in (p for p in pods if kinds[p.key] == 5):  # deleted before its turn
            api.delete(pod.key)
            for r in both:
                r.s.intake.pending_event("DELETED", msgspec.structs.replace(pod, deleting=True))
        while await leader.step() is not None:
            pass
        for pod in (p for p in pods if kinds[p.key] == 6):  # deleted while it binds
            if pod.key in api.pods:
                api.delete(pod.key)
            for r in both:
                r.s.intake.pending_event("MODIFIED", msgspec.structs.replace(pod, deleting=True))
            api.gates.pop(pod.key).set()
        await leader.settle()
        for pod in pods:
            current = api.pods.get(pod.key)
            if current is not None and current.node_name:
                for r in both:
                    r.bound_seen(pod.key)
        for r in both:
            peak[r.holder] = max(peak[r.holder], r.s.sizes()["book"]["entries"])
        for pod in pods:
            current = api.pods.pop(pod.key, None)
            if current is None:
                continue
            refused += api.refuse.pop(pod.key, None) is not None
            for r in both:
                if current.node_name:
                    r.s.intake.bound_event("DELETED", current)
                else:
                    r.s.intake.pending_event(
                        "DELETED", msgspec.structs.replace(current, deleting=True)
                    )
        for r in both:
            await r.settle()
    assert len(api.binds) > PODS // 2 and refused == PODS // 20
    assert min(peak.values()) >= BATCH // 2  # the sizes did grow meanwhile
    for r in both:
        assert r.s.sizes() == before[r.holder], r.holder
        assert r.s.book.unexpected_total() == 0
    assert await leader.records() == {}
    assert [await store.owners(n.name) for n in NODES] == [{}] * len(NODES)
    assert await store.gangs() == {}
    # The fake apiserver too holds nothing of them once it forgets its logs for tests to read:
    # a log it keeps and does not forget grows the soak's memory (2 MB per 10,000 pods,
    # docs/benchmarks.md, bench-soak), which would pass for the scheduler's.
    api.forget()
    kept = {k: len(v) for k, v in vars(api).items() if isinstance(v, list | dict | set) and v}
    assert kept == {}
