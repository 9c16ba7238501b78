"""Releases of pods that left go to the store in batches, one call at a time (storesync.py): a
burst of deletes is a few store calls rather than one per pod (each a Redis connection from a
pool of 100; past it they failed). A release still queued when its pod has been reserved again
is not sent: the pod keeps its new reservation."""

from __future__ import annotations

import asyncio

import msgspec

from scheduler.service.podbook import Stage
from scheduler.state.memory import MemoryStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import Apiserver, Replica, node


class RecordingStore(MemoryStore):
    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.releases: list[list[str]] = []

    async def release(self, holder: str, epoch: int, uids: list[str]) -> None:
        self.releases.append(list(uids))
        await super().release(holder, epoch, uids)


def replica() -> tuple[Replica, RecordingStore]:
    clock = ManualClock(0.0)
    store = RecordingStore(clock)
    return Replica(Apiserver(), store, clock), store


async def test_a_burst_of_deletes_is_one_release_call() -> None:
    r, store = replica()
    await r.elect([node(8)])
    pods = [r.pending(MakePod().Name(f"p{i}").Req(1).Obj()) for i in range(8)]
    while await r.step() is not None:
        pass
    await r.settle()
    for pod in pods:
        r.bound_seen(pod.key)
    for pod in pods:
        r.s.intake.bound_event("DELETED", r.api.delete(pod.key))
    assert r.s.sizes()["sync"] == {
        "marks": 0,
        "releases": 8,
    }  # queued for the flush the first one started
    await r.settle()
    assert store.releases == [[p.uid for p in pods]]
    assert await r.records() == {} and r.s.sizes()["sync"] == {"marks": 0, "releases": 0}


async def test_a_queued_release_of_a_pod_reserved_again_is_not_sent() -> None:
    r, store = replica()
    await r.elect([node(2)])
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    b = r.pending(MakePod().Name("b").Req(1).Obj())
    sync = r.s.sync
    assert sync.release_soon("default/x", "uid-x")  # the caller starts the flush
    assert not sync.release_soon(a.key, a.uid)  # a flush is under way: queued for it
    assert not sync.release_soon(b.key, b.uid)
    # Meanwhile a is decided again (its earlier bind had failed, say); its reservation waits
    # for the release queued (sent after it, the release would remove it: sim seed 1019).
    step = asyncio.create_task(r.step())
    while r.s.book.stage(a.key) is not Stage.RESERVING:
        await asyncio.sleep(0)
    await sync.flush()
    assert await step == a.key
    assert r.s.book.stage(a.key) is Stage.BINDING
    assert store.releases == [["uid-x", b.uid]]  # b is pending: its release goes
    await r.settle()
    assert (await r.records())[a.key] == "bound:(0,)"


async def test_a_release_of_another_pod_under_the_same_name_is_sent() -> None:
    r, store = replica()
    await r.elect([node(1)])
    old = MakePod().Name("a").Req(1).Obj()
    r.pending(msgspec.structs.replace(old, uid="uid-new"))  # a new pod under the old name
    assert r.s.sync.release_soon(old.key, old.uid)
    await r.s.sync.flush()
    assert store.releases == [[old.uid]]  # the book's entry is the other pod's
