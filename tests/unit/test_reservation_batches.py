"""A backlog decided in batches (service/cycle.py): several units decided back to back, each
assumed in the snapshot before the next is decided, their claims reserved in one store call.
Stepped by hand with the memory store behind a gate, so that a test can act while a batch's
store call is under way."""

from __future__ import annotations

import asyncio

import msgspec

from scheduler.service.podbook import Stage
from scheduler.state.base import Claim, Fenced
from scheduler.state.memory import MemoryStore
from tests.builders import MakeNode, MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica, node


class GatedStore(MemoryStore):
    """The memory store, recording each reserve_each call's pods by unit; a call waits at
    ``gate`` when one is set, and raises Fenced when ``fence`` is set."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.calls: list[list[list[str]]] = []
        self.gate: asyncio.Event | None = None
        self.fence = False

    async def reserve_each(
        self, holder: str, epoch: int, units: list[list[Claim]]
    ) -> list[str | None]:
        self.calls.append([[c.pod for c in unit] for unit in units])
        if self.gate is not None:
            await self.gate.wait()
        if self.fence:
            raise Fenced("another replica leads")
        return await super().reserve_each(holder, epoch, units)


def live(batch_pods: int = QUICK_RETRIES.batch_pods) -> tuple[Replica, GatedStore]:
    clock = ManualClock(0.0)
    store = GatedStore(clock)
    tuning = msgspec.structs.replace(QUICK_RETRIES, batch_pods=batch_pods)
    return Replica(Apiserver(), store, clock, tuning=tuning), store


async def batch(r: Replica) -> None:
    """One turn of the loop with batching: the first ready pod, then the others ready."""
    key = r.s.queue.pop()
    assert key is not None
    await r.s.cycle.schedule(key, r.s.queue.pop)


async def test_a_backlog_is_reserved_in_one_store_call_per_batch() -> None:
    r, store = live(batch_pods=2)
    await r.elect([node(4)])
    for name in ("a", "b", "c"):
        r.pending(MakePod().Name(name).Req(1).Obj())
    await batch(r)
    assert store.calls == [[["default/a"], ["default/b"]]]  # two units, one call
    await batch(r)
    assert store.calls[1:] == [[["default/c"]]]
    await r.settle()
    # Each unit was decided with the ones before it assumed: no GPU went twice.
    gpus = sorted(devices for _, _, devices in r.api.binds)
    assert gpus == sorted(set(gpus)) and len(gpus) == 3
    assert all(r.s.book.stage(k) is Stage.ASSUMED for k in r.api.pods)
    assert sorted(await r.records()) == ["default/a", "default/b", "default/c"]
    assert all(v.startswith("bound:") for v in (await r.records()).values())


async def test_a_refused_unit_is_forgotten_and_the_rest_of_its_batch_binds() -> None:
    r, store = live()
    await r.elect([node(1), MakeNode().Name("m").GPUs(1).Obj()])
    # Another replica's leftover that the snapshot does not know: GPU 0 of node n.
    epoch = r.leadership.epoch
    assert epoch is not None
    ghost = Claim(uid="ghost", pod="other/ghost", node="n", devices=(0,))
    await store.reserve(r.holder, epoch, [ghost])
    store.calls.clear()
    for name in ("a", "b"):
        r.pending(MakePod().Name(name).Req(1).Obj())
    await batch(r)
    assert len(store.calls) == 1 and len(store.calls[0]) == 2
    await r.settle()
    [(bound, node_name, _)] = r.api.binds  # one of them got node m's GPU
    assert node_name == "m"
    refused = ({"default/a", "default/b"} - {bound}).pop()
    # The refused pod's assumption is gone, so nothing holds node n for it, and it waits out
    # a backoff before it is decided again.
    assert r.held(refused) is None
    assert r.s.book.stage(refused) is Stage.PENDING
    assert r.s.queue.counts()["backoff"] == 1
    assert r.s.sync.needed  # the snapshot was behind the store: reconcile
    assert await r.records() == {bound: "bound:(0,)", "other/ghost": "reserved:(0,)"}


async def test_a_pod_that_ends_while_its_batch_is_reserved_leaves_nothing_behind() -> None:
    r, store = live()
    await r.elect([node(2)])
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    r.pending(MakePod().Name("b").Req(1).Obj())
    store.gate = asyncio.Event()
    turn = asyncio.create_task(batch(r))
    await asyncio.sleep(0)
    assert store.calls and r.held("default/a") is not None  # assumed while reserving
    assert r.s.book.stage("default/a") is Stage.RESERVING
    # a is deleted meanwhile: the pending watch shows it terminating.
    r.s.intake.pending_event("MODIFIED", msgspec.structs.replace(a, deleting=True))
    assert r.s.book.get("default/a") is None and r.held("default/a") is None
    store.gate.set()
    await turn
    await r.settle()
    # The reservation written for a was released; b bound as if nothing happened.
    assert [k for k, _, _ in r.api.binds] == ["default/b"]
    assert list(await r.records()) == ["default/b"]
    assert r.s.sizes()["book"]["entries"] == 1


async def test_a_fenced_batch_forgets_every_placement_and_requeues_its_pods() -> None:
    r, store = live()
    await r.elect([node(2)])
    for name in ("a", "b"):
        r.pending(MakePod().Name(name).Req(1).Obj())
    store.fence = True
    await batch(r)
    await r.settle()
    assert r.api.binds == []
    for key in ("default/a", "default/b"):
        assert r.held(key) is None and r.s.book.stage(key) is Stage.PENDING
    assert r.s.queue.counts()["active"] == 2
    assert not r.s.may_decide()  # the fenced call told it that it no longer leads
