"""The service when Redis fails for real (busy, out of memory): nothing it meant to write is lost,
a failed reconcile is tried again, a leader that cannot reconcile gives the lease up and keeps
competing, and the later reconciles send the node inventories only when they have to.

A real redis-server (tests/redis_faults.py makes it fail); the apiserver is not needed: the
tests feed the scheduler's watch events by hand and never bind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from scheduler.config.tuning import Tuning
from scheduler.core.model.dra import RequestMapping
from scheduler.core.model.objects import NodeInput, PodInput
from scheduler.core.resources.inventory import inventory_json, read_inventory
from scheduler.core.settings import CoreSettings
from scheduler.kube.api import BindResult
from scheduler.kube.claims import Answer, ClaimObject, ClaimWrite
from scheduler.kube.podgroups import EvictResult, Write
from scheduler.service.leader import Leadership, LeaseTiming
from scheduler.service.metrics import Metrics
from scheduler.service.scheduler import Scheduler
from scheduler.state.redis_store import RedisStore
from tests.builders import MakeNode, MakePod
from tests.clock import ManualClock
from tests.redis_faults import busy

TTL_S = 15.0


class NoApiserver:
    """The Cluster of these tests: nothing is ever bound or reported."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindResult:
        raise AssertionError("no pod is scheduled in these tests")

    async def get_pod(self, namespace: str, name: str) -> PodInput | None:
        raise AssertionError("no pod is scheduled in these tests")

    async def set_unschedulable(self, namespace: str, name: str, uid: str, message: str) -> Write:
        raise AssertionError("no pod is scheduled in these tests")

    async def event(self, *args: Any) -> None:
        raise AssertionError("no pod is scheduled in these tests")

    async def evict(
        self, namespace: str, name: str, uid: str, dry_run: bool = False
    ) -> EvictResult:
        raise AssertionError("no pod is evicted in these tests")

    async def set_nominated_node(self, namespace: str, name: str, node: str | None) -> Write:
        raise AssertionError("no pod is nominated in these tests")

    async def reserve_claims(
        self, namespace: str, claims: tuple[str, ...], pod: str, uid: str
    ) -> Write:
        raise AssertionError("no pod uses a ResourceClaim in these tests")

    async def unreserve_claims(
        self, namespace: str, claims: tuple[tuple[str, str], ...], uid: str
    ) -> None:
        raise AssertionError("no pod uses a ResourceClaim in these tests")

    async def read_claim(self, namespace: str, name: str) -> ClaimObject | None:
        raise AssertionError("no pod uses a ResourceClaim in these tests")

    async def replace_claim(self, obj: ClaimObject, status: bool) -> ClaimWrite:
        raise AssertionError("no pod uses a ResourceClaim in these tests")

    async def create_claim(self, obj: ClaimObject) -> ClaimWrite:
        raise AssertionError("no pod uses a ResourceClaim in these tests")

    async def delete_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> Answer:
        raise AssertionError("no pod uses a ResourceClaim in these tests")

    async def record_extended_claim(
        self, namespace: str, name: str, uid: str, claim: str, mappings: tuple[RequestMapping, ...]
    ) -> Write:
        raise AssertionError("no pod uses a ResourceClaim in these tests")


class Replica:
    def __init__(self, url: str, clock: Callable[[], float], timing: LeaseTiming) -> None:
        self.url = url
        self.redis = aioredis.Redis.from_url(url, decode_responses=True)
        # As the service builds it (app.py): with its 2 s socket timeout.
        self.store = RedisStore.from_url(url, prefix="F")
        self.leadership = Leadership(self.store, "replica-1", timing, clock)
        self.scheduler = Scheduler(
            CoreSettings(),
            "topo-scheduler",
            NoApiserver(),
            self.store,
            self.leadership,
            Metrics(),
            clock,
        )

    async def settle(self) -> None:
        """Wait for the scheduler's background tasks (the inventory flush)."""
        while self.scheduler.tasks.running:
            await asyncio.gather(*list(self.scheduler.tasks.running))

    async def stored_nodes(self) -> dict[str, str]:
        return cast(dict[str, str], await self.redis.hgetall("F:nodes"))

    async def close(self) -> None:
        await self.store.close()
        await self.redis.aclose()


@pytest.fixture
async def replica(redis_server: Any) -> AsyncIterator[Replica]:
    r = Replica(redis_server.url, ManualClock(0.0), LeaseTiming(lease_s=TTL_S))
    await r.redis.flushall()
    try:
        yield r
    finally:
        await r.close()


def node(name: str, gpus: int = 8) -> NodeInput:
    return MakeNode().Name(name).GPUs(gpus).Obj()


def stored(*nodes: NodeInput) -> dict[str, str]:
    """What P:nodes holds for these nodes."""
    out = {}
    for n in nodes:
        inv = read_inventory(n)
        assert inv is not None
        out[n.name] = inventory_json(inv)
    return out


async def elect(r: Replica) -> int:
    """What Leadership.run does on winning the lease (clock 0: the lease is fresh)."""
    epoch = await r.store.acquire(r.leadership.holder, int(TTL_S * 1000))
    assert epoch is not None
    r.leadership.epoch = epoch
    await r.scheduler.on_elected(epoch)
    return epoch


async def elected_with(r: Replica, *nodes: NodeInput) -> int:
    """The replica has synced ``nodes`` and no bound pod, and has just won the lease."""
    r.scheduler.intake.replace_nodes(list(nodes))
    r.scheduler.intake.replace_bound([])
    return await elect(r)


async def test_a_failed_reconcile_keeps_inventory_writes_pending_and_is_tried_again(
    replica: Replica,
) -> None:
    r, clock = replica, replica.scheduler.clock
    assert isinstance(clock, ManualClock)
    a, b = node("a"), node("b", 4)
    await elected_with(r, a)
    assert await r.stored_nodes() == stored(a)
    async with busy(r.url):
        r.scheduler.intake.node_event("ADDED", b)  # the flush fails: BUSY
        await r.settle()
        clock.now += Tuning().store_reconcile_seconds
        await r.scheduler.sync.if_needed()  # fails as well
    assert await r.stored_nodes() == stored(a)
    clock.now += Tuning().store_reconcile_seconds
    await r.scheduler.sync.if_needed()  # still needed, and it writes b
    assert await r.stored_nodes() == stored(a, b)


async def test_later_reconciles_send_the_inventories_only_after_a_failed_write(
    replica: Replica,
) -> None:
    r, clock = replica, replica.scheduler.clock
    assert isinstance(clock, ManualClock)
    a, b = node("a"), node("b", 4)
    await elected_with(r, a)
    # A node the inventories of this replica do not have: only a reconcile given every
    # inventory drops it, so it shows whether a reconcile sent them.
    await r.redis.hset("F:nodes", "stray", "{}")
    # The device plugin reported other GPUs than the store holds: a (rate-limited) reconcile.
    pod = MakePod().Name("p").Req(1)
    r.scheduler.intake.bound_event("ADDED", pod.Bound("a", "0").Obj())
    r.scheduler.intake.bound_event("MODIFIED", pod.Bound("a", "1").Obj())
    clock.now += Tuning().store_reconcile_seconds
    await r.scheduler.sync.if_needed()
    assert set(await r.redis.hgetall("F:pods")) == {"uid-default-p"}  # it did reconcile
    assert await r.stored_nodes() == {**stored(a), "stray": "{}"}  # without the inventories
    # A failed inventory write: the reconcile it asks for writes them all.
    async with busy(r.url):
        r.scheduler.intake.node_event("ADDED", b)
        await r.settle()
    clock.now += Tuning().store_reconcile_seconds
    await r.scheduler.sync.if_needed()
    assert await r.stored_nodes() == stored(a, b)


async def until(condition: Callable[[], bool], task: asyncio.Task[None], what: str) -> None:
    for _ in range(2000):
        if condition():
            return
        if task.done():
            raise AssertionError(f"the leadership task ended before {what}") from (task.exception())
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


async def test_a_leader_whose_first_reconcile_fails_gives_the_lease_up_and_competes_again(
    redis_server: Any,
) -> None:
    r = Replica(
        redis_server.url, time.monotonic, LeaseTiming(lease_s=TTL_S, renew_s=0.05, retry_s=0.01)
    )
    await r.redis.flushall()
    a = node("a")
    r.scheduler.intake.replace_nodes([a])
    task = asyncio.create_task(r.leadership.run(r.scheduler.on_elected, r.scheduler.on_lost))
    try:
        # The lease is won; the reconcile waits for the bound pods' watch to sync.
        await until(lambda: r.leadership.epoch is not None, task, "the lease was won")
        async with busy(r.url):
            r.scheduler.intake.replace_bound([])  # the reconcile runs now, and fails: BUSY
            await until(lambda: r.leadership.epoch is None, task, "the lease was given up")
            assert not r.scheduler.ready_to_schedule
            assert r.scheduler.metrics.registry.get_sample_value("scheduler_leader") == 0
        # Redis answers again: the replica wins the lease again and reconciles.
        await until(lambda: r.scheduler.ready_to_schedule, task, "it led again")
        assert r.leadership.leading
        assert await r.stored_nodes() == stored(a)
    finally:
        await r.leadership.release()
        await task
        await r.close()
