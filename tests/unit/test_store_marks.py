"""The store's marks after Bindings go together (run.tuning.storeMarkSeconds): a backlog's
Bindings are answered one by one, and each answer's flush took its one mark to the store in a
call of its own (a Lua script on Redis per pod bound). Stepped: each Binding is let through by
its gate, and the loop turns until the next one, so a flush that sends at once sends alone."""

from __future__ import annotations

import asyncio

from scheduler.config.tuning import Tuning
from scheduler.service.podbook import Stage
from scheduler.state.memory import MemoryStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import Apiserver, Replica, node, until


class CountingStore(MemoryStore):
    """The in-memory store, with the UIDs of each mark_bound and release call."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.calls: list[tuple[str, list[str]]] = []

    async def mark_bound(self, holder: str, epoch: int, uids: list[str]) -> None:
        self.calls.append(("mark", list(uids)))
        await super().mark_bound(holder, epoch, uids)

    async def release(self, holder: str, epoch: int, uids: list[str]) -> None:
        self.calls.append(("release", list(uids)))
        await super().release(holder, epoch, uids)


async def bound_one_by_one(names: list[str], tuning: Tuning) -> tuple[Replica, CountingStore]:
    """``names`` decided on one node, their Bindings answered one at a time, the loop turning
    between two answers (a flush that sends at once has sent)."""
    clock = ManualClock(0.0)
    store = CountingStore(clock)
    r = Replica(Apiserver(), store, clock, tuning=tuning)
    await r.elect([node(8)])
    for name in names:
        r.api.gates[f"default/{name}"] = asyncio.Event()
        r.pending(MakePod().Name(name).Req(1).Obj())
        await r.step()
    for name in names:
        key = f"default/{name}"
        r.api.gates[key].set()
        await until(lambda key=key: r.s.book.stage(key) is Stage.ASSUMED)  # type: ignore[misc]
        for _ in range(20):
            await asyncio.sleep(0)
    return r, store


def uid(r: Replica, name: str) -> str:
    return r.api.pods[f"default/{name}"].uid


async def test_the_marks_of_bindings_answered_one_by_one_go_in_one_store_call() -> None:
    # A full batch sends without waiting out the (long) gathering time.
    r, store = await bound_one_by_one(
        ["a", "b", "c"], Tuning(store_mark_seconds=60.0, store_write_batch=3)
    )
    await r.settle()
    assert store.calls == [("mark", [uid(r, "a"), uid(r, "b"), uid(r, "c")])]
    assert sorted(await r.records()) == ["default/a", "default/b", "default/c"]
    assert all(v.startswith("bound") for v in (await r.records()).values())


async def test_a_release_is_not_held_back_and_takes_the_gathered_marks_along() -> None:
    r, store = await bound_one_by_one(["a", "b"], Tuning(store_mark_seconds=60.0))
    a, b = uid(r, "a"), uid(r, "b")
    assert store.calls == []  # gathering
    r.bound_seen("default/a")
    r.s.intake.bound_event("DELETED", r.api.delete("default/a"))
    await r.settle()  # at once: the release ends the gathering
    assert store.calls == [("mark", [a, b]), ("release", [a])]
    assert sorted(await r.records()) == ["default/b"]


async def test_without_gathering_each_flush_sends_what_it_has() -> None:
    r, store = await bound_one_by_one(["a", "b"], Tuning(store_mark_seconds=0.0))
    await r.settle()
    assert store.calls == [("mark", [uid(r, "a")]), ("mark", [uid(r, "b")])]
