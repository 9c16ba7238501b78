"""bench-takeover: time from election to ready with 100,000 bound pods in Redis (issue 12, item 10).

A benchmark, not a test: it prints figures and never fails on them. A local redis-server (no
persistence, a unix socket) is loaded, by a previous leader, with the owners of 100,000 bound
one-GPU pods on 12,500 nodes of 8 GPUs (a quarter of them in 4-replica gangs) and the nodes'
inventories. Then a new replica, whose watches hold the same pods (1% of them replaced by new
pods while no one led), runs the live scheduler's own election: Leadership.run wins the lease,
Scheduler.on_elected reconciles the store against its snapshot and reloads the reservations;
the figure is the time from the lease being won to ``ready_to_schedule``, next to the lease
(a standby takes over at most a lease after the leader dies, then needs this long).

``--quick`` (bench-smoke) takes over 4,000 pods: seconds, to check that it runs.

Usage: python -m benchmarks.bench_takeover [--quick] [--pods 100000] [--chunk 2000] [--lease 15]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import time
from typing import Any

import structlog

from scheduler.core.model.dra import RequestMapping
from scheduler.core.model.objects import ContainerInput, NodeInput, PodInput
from scheduler.core.settings import CoreSettings
from scheduler.kube.api import BindResult
from scheduler.kube.claims import Answer, ClaimObject, ClaimWrite
from scheduler.kube.podgroups import EvictResult, Write
from scheduler.service.leader import Leadership, LeaseTiming
from scheduler.service.metrics import Metrics
from scheduler.service.scheduler import Scheduler
from scheduler.state.redis_store import RECONCILE_CHUNK, RedisStore
from scheduler.testing.redisserver import RedisServer

GPUS = 8


class NoApiserver:
    """Nothing is bound during the takeover: the benchmark stops at ready."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindResult:
        raise AssertionError("no pod is scheduled in this benchmark")

    async def get_pod(self, namespace: str, name: str) -> PodInput | None:
        return None

    async def set_unschedulable(self, namespace: str, name: str, uid: str, message: str) -> Write:
        return Write.DONE

    async def event(self, *args: Any) -> None:
        return None

    async def evict(
        self, namespace: str, name: str, uid: str, dry_run: bool = False
    ) -> EvictResult:
        raise AssertionError("no pod is evicted in this benchmark")

    async def set_nominated_node(self, namespace: str, name: str, node: str | None) -> Write:
        raise AssertionError("no pod is nominated in this benchmark")

    async def reserve_claims(
        self, namespace: str, claims: tuple[str, ...], pod: str, uid: str
    ) -> Write:
        raise AssertionError("no pod uses a ResourceClaim in this benchmark")

    async def unreserve_claims(
        self, namespace: str, claims: tuple[tuple[str, str], ...], uid: str
    ) -> None:
        raise AssertionError("no pod uses a ResourceClaim in this benchmark")

    async def read_claim(self, namespace: str, name: str) -> ClaimObject | None:
        raise AssertionError("no pod uses a ResourceClaim in this benchmark")

    async def replace_claim(self, obj: ClaimObject, status: bool) -> ClaimWrite:
        raise AssertionError("no pod uses a ResourceClaim in this benchmark")

    async def create_claim(self, obj: ClaimObject) -> ClaimWrite:
        raise AssertionError("no pod uses a ResourceClaim in this benchmark")

    async def delete_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> Answer:
        raise AssertionError("no pod uses a ResourceClaim in this benchmark")

    async def record_extended_claim(
        self, namespace: str, name: str, uid: str, claim: str, mappings: tuple[RequestMapping, ...]
    ) -> Write:
        raise AssertionError("no pod uses a ResourceClaim in this benchmark")


def make_node(name: str) -> NodeInput:
    inventory = {
        "vendor": "nvidia",
        "devices": [{"index": i, "uuid": f"{name}-GPU-{i}"} for i in range(GPUS)],
        "links": [["X" if i == j else "NV2" for j in range(GPUS)] for i in range(GPUS)],
    }
    return NodeInput(
        name,
        annotations={"topo-scheduler.io/gpus": json.dumps(inventory)},
        allocatable={"nvidia.com/gpu": str(GPUS)},
    )


def make_pod(i: int, generation: str) -> PodInput:
    labels = {}
    if (i // 4) % 4 == 0:  # a quarter of the pods: 4-replica gangs
        labels = {"gpu-topology": f"job-{i // 4}", "gpu-topology-replica": "4"}
    node = f"node-{i // GPUS:05d}"
    return PodInput(
        "bench",
        f"p{i}",
        uid=f"uid-{i}{generation}",
        scheduler_name="topo-scheduler",
        node_name=node,
        phase="Running",
        labels=labels,
        annotations={"topo-scheduler.io/devices": str(i % GPUS)},
        containers=(ContainerInput("c", limits={"nvidia.com/gpu": "1"}),),
    )


def replica(url: str, holder: str, chunk: int, lease_s: float) -> tuple[Scheduler, Leadership]:
    store = RedisStore.from_url(url, prefix="bench")
    store.chunk = chunk
    leadership = Leadership(
        store, holder, LeaseTiming(lease_s=lease_s, renew_s=lease_s / 3), time.monotonic
    )
    scheduler = Scheduler(
        CoreSettings(gpu_resources={"nvidia.com/gpu": "nvidia"}),
        "topo-scheduler",
        NoApiserver(),
        store,
        leadership,
        Metrics(),
        time.monotonic,
    )
    return scheduler, leadership


async def elect(scheduler: Scheduler, leadership: Leadership) -> float:
    """Run the election; the seconds from the lease being won to ready."""
    won: list[float] = []
    ready = asyncio.Event()

    async def on_elected(epoch: int) -> None:
        won.append(time.perf_counter())
        await scheduler.on_elected(epoch)
        ready.set()

    async def on_lost() -> None:
        await scheduler.on_lost()

    task = asyncio.create_task(leadership.run(on_elected, on_lost))
    await asyncio.wait_for(ready.wait(), 600)
    seconds = time.perf_counter() - won[0]
    await leadership.release()
    task.cancel()  # it sleeps until its next renewal otherwise
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return seconds


async def run(args: argparse.Namespace) -> None:
    server = RedisServer().start()
    try:
        nodes = [make_node(f"node-{n:05d}") for n in range((args.pods + GPUS - 1) // GPUS)]
        pods = [make_pod(i, "") for i in range(args.pods)]

        # The previous leader: its snapshot holds every pod; its reconcile writes the store.
        old, old_lead = replica(server.url, "old-leader", args.chunk, args.lease)
        t0 = time.perf_counter()
        old.intake.replace_nodes(nodes)
        old.intake.replace_bound(pods)
        snapshot_s = time.perf_counter() - t0
        load_s = await elect(old, old_lead)
        records = await old.store.records()
        print(
            f"loaded {len(records):,} bound pods on {len(nodes):,} nodes into redis "
            f"(snapshot {snapshot_s:.2f} s, reconcile into an empty store {load_s:.2f} s)"
        )
        await old.store.close()

        # The new leader: 1% of the pods were replaced while no one led.
        replaced = args.pods // 100
        fresh = [make_pod(i, "-new") if i % 100 == 0 else p for i, p in enumerate(pods)]
        new, new_lead = replica(server.url, "new-leader", args.chunk, args.lease)
        new.intake.replace_nodes(nodes)
        new.intake.replace_bound(fresh)
        store = new.store
        assert isinstance(store, RedisStore)
        seconds = await elect(new, new_lead)
        print(
            f"takeover: {args.pods:,} bound pods ({replaced:,} replaced), chunk {args.chunk}: "
            f"election to ready {seconds:.2f} s in {store.reconcile_calls} fenced reconcile "
            f"calls (lease {args.lease:.0f} s; goal: first bind <= lease + 10 s after the "
            f"leader dies)"
        )
        await store.close()
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4,000 pods (bench-smoke)")
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=RECONCILE_CHUNK)
    parser.add_argument("--lease", type=float, default=15.0)
    args = parser.parse_args()
    if args.quick:
        args.pods = 4000
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
