"""The service's side of the store: every call timed (TimedStore), node inventories mirrored
into the store on node events in batches, off the per-pod path (NodeInventories)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any

import pytest

from scheduler.config.tuning import Tuning
from scheduler.core.model.names import GPUS_ANNOTATION
from scheduler.core.model.objects import NodeInput
from scheduler.core.resources.gpusets import Topologies
from scheduler.core.resources.inventory import Inventory, inventory_json, read_inventory
from scheduler.service.inventories import NodeInventories
from scheduler.service.leader import Leadership, LeaseTiming
from scheduler.service.metrics import Metrics, TimedStore
from scheduler.state.base import Claim, Fenced
from scheduler.state.memory import MemoryStore

TTL = 15_000


def clock() -> float:
    return 0.0


def count(metrics: Metrics, operation: str) -> float:
    value = metrics.registry.get_sample_value(
        "scheduler_store_request_duration_seconds_count", {"operation": operation}
    )
    return value or 0.0


# The tests' inventories are read as one snapshot reads them: the same matrix, one Topology.
TOPOLOGIES = Topologies()


def inventory(name: str, gpus: int, unhealthy: tuple[int, ...] = ()) -> Inventory:
    annotation = {
        "vendor": "nvidia",
        "model": "Tesla-V100-SXM2-32GB",
        "devices": [
            {"index": i, "memoryMiB": 32768, "numa": i // 4, "healthy": i not in unhealthy}
            for i in range(gpus)
        ],
        "scores": [
            [0 if i == j else 100 - 10 * abs(i - j) for j in range(gpus)] for i in range(gpus)
        ],
    }
    annotated = NodeInput(name, annotations={GPUS_ANNOTATION: json.dumps(annotation)})
    found = read_inventory(annotated, TOPOLOGIES)
    assert found is not None
    return found


async def test_every_store_call_is_timed_by_operation_failures_included() -> None:
    metrics = Metrics()
    store = TimedStore(MemoryStore(clock), metrics.store_latency, metrics.store_errors)
    epoch = await store.acquire("a", TTL)
    assert epoch is not None
    await store.renew("a", epoch, TTL)
    await store.reserve("a", epoch, [Claim("u1", "default/p", "n", (0,))])
    await store.mark_bound("a", epoch, ["u1"])
    await store.update_nodes("a", epoch, {"n": "{}"}, [])
    await store.reconcile("a", epoch, [], ["u1"], {"n": "{}"})
    await store.release("a", epoch, ["u1"])
    await store.records()
    await store.gangs()
    await store.owners("n")
    await store.nodes()
    await store.release_lease("a", epoch)
    with pytest.raises(Fenced):
        await store.reserve("a", epoch, [Claim("u2", "default/q", "n", (1,))])
    await store.close()
    operations = [
        "acquire",
        "renew",
        "reserve",
        "mark_bound",
        "update_nodes",
        "reconcile",
        "release",
        "records",
        "gangs",
        "owners",
        "nodes",
        "release_lease",
    ]
    assert {op: count(metrics, op) for op in operations} == {
        op: 2.0 if op == "reserve" else 1.0 for op in operations
    }
    # The fenced reserve is the one failure, counted under its operation and error.
    errors = {
        (s.labels["operation"], s.labels["error"]): s.value
        for m in metrics.store_errors.collect()
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert errors == {("reserve", "Fenced"): 1.0}


def test_the_stored_inventory_is_a_valid_gpus_annotation() -> None:
    inv = inventory("n", 4, unhealthy=(2,))
    stored = inventory_json(inv)
    assert json.loads(stored) == {
        "vendor": "nvidia",
        "model": "Tesla-V100-SXM2-32GB",
        "devices": [
            {"index": i, "uuid": f"n-gpu-{i}", "memoryMiB": 32768, "numa": 0, "healthy": i != 2}
            for i in range(4)
        ],
        "scores": [list(row) for row in inv.topology.scores],
        "sgpuPerCard": 0,
        "source": GPUS_ANNOTATION,
    }
    again = read_inventory(NodeInput("n", annotations={GPUS_ANNOTATION: stored}), TOPOLOGIES)
    assert again == inv


class Harness:
    def __init__(self) -> None:
        self.metrics = Metrics()
        self.store = TimedStore(
            MemoryStore(clock), self.metrics.store_latency, self.metrics.store_errors
        )
        self.leadership = Leadership(self.store, "a", LeaseTiming(), clock)
        self.snapshot: dict[str, Inventory | None] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.failures = 0
        self.writing = True
        self.broken = False  # reading the snapshot raises (an error that is not a StoreError)
        self.inventories = NodeInventories(
            self.store,
            self.leadership,
            self.read,
            lambda: self.writing and self.leadership.leading,
            self.spawn,
            self.failed,
            Tuning().inventory_flush_seconds,
        )

    def read(self) -> dict[str, Inventory | None]:
        if self.broken:
            raise RuntimeError("not a StoreError")
        return self.snapshot

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self.tasks.add(asyncio.get_running_loop().create_task(coro))

    def failed(self) -> None:
        self.failures += 1

    async def settle(self) -> None:
        while self.tasks:
            done, self.tasks = self.tasks, set()
            await asyncio.gather(*done)

    async def elect(self) -> int:
        epoch = await self.store.acquire("a", TTL)
        assert epoch is not None
        self.leadership.epoch = epoch
        await self.reconcile(epoch, elected=True)
        return epoch

    async def reconcile(self, epoch: int, elected: bool) -> None:
        async with self.inventories.reconciling(elected) as nodes:  # as Scheduler._reconcile
            await self.store.reconcile("a", epoch, [], [], nodes)


async def test_node_events_reach_the_store_in_batches_and_deleted_nodes_leave_it() -> None:
    h = Harness()
    h.snapshot = {"a": inventory("a", 8), "cpu": None}
    await h.store.update_nodes("a", await h.store.acquire("a", TTL) or 0, {"gone": "{}"}, [])
    await h.elect()
    assert await h.store.nodes() == {"a": inventory_json(inventory("a", 8))}  # "gone" dropped
    before = count(h.metrics, "update_nodes")
    # A burst of events: one store call with every change.
    h.snapshot["b"] = inventory("b", 4)
    h.snapshot["a"] = inventory("a", 8, unhealthy=(3,))
    for name in ("b", "a", "cpu", "b"):
        h.inventories.changed(name)
    await h.settle()
    assert count(h.metrics, "update_nodes") == before + 1
    assert await h.store.nodes() == {
        "a": inventory_json(inventory("a", 8, unhealthy=(3,))),
        "b": inventory_json(inventory("b", 4)),
    }
    # A deleted node is dropped; an event that changed nothing stored writes nothing.
    del h.snapshot["a"]
    h.inventories.changed("a")
    await h.settle()
    h.inventories.changed("b")
    await h.settle()
    assert count(h.metrics, "update_nodes") == before + 2
    assert set(await h.store.nodes()) == {"b"}


async def test_only_the_leader_writes_inventories_and_a_fenced_write_asks_for_a_reconcile() -> None:
    h = Harness()
    h.snapshot = {"a": inventory("a", 8)}
    h.inventories.changed("a")  # a standby: nothing is written, the next leader reconciles
    assert not h.tasks
    epoch = await h.elect()
    assert await h.store.nodes() == {"a": inventory_json(inventory("a", 8))}
    h.writing = False  # shutting down: no new writes
    h.snapshot["b"] = inventory("b", 2)
    h.inventories.changed("b")
    assert not h.tasks
    h.writing = True
    await h.store.release_lease("a", epoch)
    assert await h.store.acquire("other", TTL) is not None  # another replica leads now
    h.inventories.changed("b")
    await h.settle()
    assert h.failures == 1
    assert set(await h.store.nodes()) == {"a"}


async def test_a_failed_reconcile_leaves_the_changes_it_covered_pending() -> None:
    h = Harness()
    h.snapshot = {"a": inventory("a", 8)}
    epoch = await h.elect()
    h.snapshot["b"] = inventory("b", 4)
    h.inventories.changed("b")  # its flush waits for the reconcile below
    with pytest.raises(Fenced):
        await h.reconcile(epoch + 1, elected=True)  # not the lease's epoch: refused
    await h.settle()  # the flush writes b after all
    assert set(await h.store.nodes()) == {"a", "b"}


async def test_any_flush_failure_asks_for_a_reconcile_that_writes_every_inventory() -> None:
    h = Harness()
    h.snapshot = {"a": inventory("a", 8)}
    epoch = await h.elect()
    async with h.inventories.reconciling(elected=False) as nodes:
        assert nodes is None  # nothing failed: a later reconcile leaves the inventories alone
    h.broken = True
    h.snapshot["b"] = inventory("b", 4)
    h.inventories.changed("b")
    await h.settle()  # the flush task does not end with the error
    assert h.failures == 1
    h.broken = False
    await h.reconcile(epoch, elected=False)
    assert set(await h.store.nodes()) == {"a", "b"}
    async with h.inventories.reconciling(elected=False) as nodes:
        assert nodes is None  # written: the next one leaves them alone again
