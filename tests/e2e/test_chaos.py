"""Chaos on the local control plane (issue 12): break a part of the system while the scheduler is
busy, let it settle, and ask the auditor (scheduler/testing/audit.py) whether an invariant broke:
no GPU held by two live pods, no gang partly bound, every pod that fits bound, Redis equal to the
apiserver.

- the kube-apiserver is killed and started again while binds are in flight and more pods come,
  ours and other schedulers' (Job pods finishing, a DaemonSet-like rollout: churn.py), so every
  watch breaks and re-lists; binds fail, are refused or land unseen;
- the leader of two replicas is killed with SIGKILL while gangs are being bound;
- Redis is flushed (FLUSHALL) under two replicas while pods are being scheduled.

The pods are there before the schedulers start, so the leader is busy at once; the break comes
the moment its third attempt has reserved GPUs and handed them to the binder (read from its log
as it grows: polling the apiserver would only see binds that are over). Each scenario asks for
more GPUs than its nodes have, so that a GPU held for nobody shows as a pending pod that fits.
Waiting is polling with a deadline; the auditor's verdict is the assertion, and a last view
checks that the auditor saw the scenario's nodes, pods and records (an audit of nothing passes).
Lease 3 s, renewed every 1 s (live.py): a bind times out after 1 s, a standby takes over within
3 s.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis.asyncio as aioredis

from scheduler.state.redis_store import RedisStore
from scheduler.testing.audit import Settled, View, collect, until_settled
from scheduler.testing.redisserver import RedisServer
from tests.conftest import started_redis
from tests.topologies import DGX1_V100

from .churn import OtherSchedulers, through_outage
from .live import Scenario, SchedulerProcess, begin_history, tail_logs

# Every scenario settles in a few seconds; this is the bound beyond which it never did.
SETTLE_S = 40.0


def dgx(prefix: str) -> dict[str, object]:
    return {
        "vendor": "nvidia",
        "model": "Tesla-V100-SXM2-32GB",
        "devices": [{"index": i, "uuid": f"GPU-{prefix}-{i}"} for i in range(8)],
        "links": DGX1_V100,
    }


@dataclass(frozen=True)
class PodSpec:
    name: str
    gpus: int
    labels: dict[str, str] = field(default_factory=dict)


async def create_all(scenario: Scenario, specs: list[PodSpec]) -> None:
    """Create the pods from 8 threads at once."""

    def create(spec: PodSpec) -> None:
        scenario.pod(spec.name, spec.gpus, labels=spec.labels)

    def run() -> None:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, specs))

    await asyncio.to_thread(run)


class PodStream:
    """Creates pods one after the other in a thread, each retried through an apiserver outage
    (a create whose answer was lost but which landed comes back as 409: created)."""

    def __init__(self, scenario: Scenario, specs: list[PodSpec]) -> None:
        self.scenario = scenario
        self.specs = specs
        self.retries = 0

    def run(self) -> None:
        for spec in self.specs:
            create = functools.partial(self.scenario.pod, spec.name, spec.gpus, labels=spec.labels)
            self.retries += through_outage(create, 409)

    def start(self) -> asyncio.Task[None]:
        return asyncio.create_task(asyncio.to_thread(self.run), name="pod-stream")


@pytest.fixture
async def own_redis(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RedisServer]:
    """A redis-server of the test's own: FLUSHALL must not touch the session's."""
    with started_redis(tmp_path_factory.mktemp("redis-flush")) as server:
        yield server


def bound(scenario: Scenario) -> int:
    return sum(1 for p in scenario.pods().values() if p["spec"].get("nodeName"))


async def wait_until(what: str, check: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.05)


async def wait_leader(schedulers: list[SchedulerProcess]) -> SchedulerProcess:
    """The replica that leads and has reconciled the store (it decides from now on)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for s in schedulers:
            events = [e.get("event") for e in s.lines()]
            became = max((i for i, e in enumerate(events) if e == "became leader"), default=-1)
            if s.is_leader() and "reconciled store" in events[became:]:
                return s
        await asyncio.sleep(0.1)
    raise AssertionError("no replica became leader\n" + "\n".join(s.tail() for s in schedulers))


async def wait_scheduled(schedulers: list[SchedulerProcess], attempts: int) -> SchedulerProcess:
    """Return the moment ``attempts`` attempts have reserved GPUs and handed their pods to the
    binder (the log line follows the reservation): the replica whose binds are in flight.
    The logs are read as they grow, every few milliseconds: polling the apiserver for bound pods
    would see the binds only once they are done."""
    seen = dict.fromkeys(schedulers, 0)

    def enough(s: SchedulerProcess, lines: list[dict[str, Any]]) -> bool:
        seen[s] += sum(1 for line in lines if line.get("result") == "scheduled")
        return seen[s] >= attempts

    found = await tail_logs(schedulers, b'"scheduling attempt"', enough, 30, 0.002)
    if found is not None:
        return found
    raise AssertionError("nothing was scheduled\n" + "\n".join(s.tail() for s in schedulers))


async def settle(
    scenario: Scenario, store: RedisStore, replicas: list[SchedulerProcess]
) -> Settled:
    """Audit until settled: the apiserver, the store, and the snapshot of every replica still
    running (``snapshot-drift``: each one's sums per node against a fresh LIST)."""
    ports = {s.log.stem: await s.http_port() for s in replicas if s.proc.poll() is None}

    async def read() -> View:
        return await collect(scenario.plane, scenario.name, {"test": scenario.id}, store, ports)

    settled = await until_settled(read, timeout_s=SETTLE_S)
    for v in settled.seen:
        print(f"  seen while settling: {v}")
    # The snapshots were compared (a clean audit of no snapshot would pass): every replica's,
    # each holding GPUs for some pods.
    view = await read()
    holders = {r: sum(len(n.gpus) for n in sums.values()) for r, sums in view.snapshots.items()}
    assert ports and set(holders) == set(ports) and all(holders.values()), holders
    return settled


async def assert_audited(scenario: Scenario, store: RedisStore, nodes: int, pods: int) -> None:
    """The auditor's view covers the scenario: its nodes, its pods, and the store's records of
    exactly its bound pods (so a clean audit was not an audit of nothing)."""
    view = await collect(scenario.plane, scenario.name, {"test": scenario.id}, store)
    ours = [p for p in view.pods if p["spec"].get("schedulerName") == scenario.name]
    bound_uids = {p["metadata"]["uid"] for p in ours if p["spec"].get("nodeName")}
    uids = {p["metadata"]["uid"] for p in ours}
    recorded = {u for u, r in (view.records or {}).items() if u in uids and r.state == "bound"}
    assert (len(view.nodes), len(ours)) == (nodes, pods)
    assert bound_uids and recorded == bound_uids
    assert sum(len(o) for o in view.owners.values()) >= len(bound_uids)


def waited(schedulers: list[SchedulerProcess]) -> bool:
    return any(
        line.get("event") == "previous leader unknown: waiting before the first decision"
        for s in schedulers
        for line in s.lines()
    )


def unexpected_book_events(schedulers: list[SchedulerProcess]) -> list[dict[str, Any]]:
    return [
        line
        for s in schedulers
        for line in s.lines()
        if line.get("event") == "pod book: unexpected event"
    ]


def verdict(settled: Settled, schedulers: list[SchedulerProcess]) -> str:
    logs = "\n".join(f"--- scheduler {s.log.name}\n{s.tail()}" for s in schedulers)
    return f"{settled.report()}\n{logs}"


async def test_apiserver_restart_while_binds_are_in_flight(
    scenario: Scenario, redis_server: RedisServer
) -> None:
    """4 nodes of 8 GPUs (32). 12 pods asking for 1 or 2 GPUs are there when the scheduler
    starts; as its first binds go out the kube-apiserver is killed and started again on the same
    port and etcd, while 28 more pods (1-3 GPUs; 74 GPUs asked in all) keep coming, created
    through the outage. The binds in flight fail or land unseen; every watch breaks and re-lists
    while new pods are decided and bound. Then 4 bound pods are deleted: the pending pods that
    fit in their GPUs must get them. Meanwhile other schedulers' pods churn on the same nodes (12
    Job pods that finish and are deleted, a DaemonSet-like rollout of 3 versions): in the end
    every replica's snapshot equals a fresh LIST, node by node (issue 20's drift 1)."""
    nodes = [scenario.node(f"dgx-{n}", dgx(f"{scenario.id}-{n}"), 8) for n in range(4)]
    await create_all(scenario, [PodSpec(f"a{i}", 1 + i % 2) for i in range(12)])
    stream = PodStream(scenario, [PodSpec(f"b{i}", 1 + i % 3) for i in range(28)])
    others = OtherSchedulers(scenario.plane, scenario.id, nodes)

    def churn() -> None:
        jobs = others.jobs(12)
        others.rollout(3)
        for name in jobs:
            others.delete(name)

    await begin_history(redis_server.url, scenario)
    scheduler = scenario.start_scheduler(redis_server.url)
    store = RedisStore.from_url(redis_server.url, prefix=f"t-{scenario.id}")
    task: asyncio.Task[None] | None = None
    try:
        await wait_scheduled([scheduler], 3)
        task = stream.start()
        churning = asyncio.create_task(asyncio.to_thread(churn), name="other-schedulers")
        await asyncio.sleep(0)  # the threads start creating
        down_s = scenario.plane.restart_apiserver(kill=True)  # blocks: nothing here needs the loop
        await task
        await churning
        first = await settle(scenario, store, [scheduler])
        assert first.clean, verdict(first, [scheduler])
        pods = scenario.pods()
        freed = sorted(n for n, p in pods.items() if p["spec"].get("nodeName"))[:4]
        for name in freed:
            scenario.delete_pod(name)
        # Until they are gone their GPUs are theirs (KWOK finishes the deletion).
        await wait_until("the deleted pods are gone", lambda: not set(freed) & set(scenario.pods()))
        second = await settle(scenario, store, [scheduler])
        await assert_audited(scenario, store, nodes=4, pods=36)
    finally:
        if task is not None and not task.done():
            await asyncio.gather(task, return_exceptions=True)
        await store.close()
    assert second.clean, verdict(second, [scheduler])
    assert not unexpected_book_events([scheduler]), unexpected_book_events([scheduler])
    # The break did happen: the watches failed and re-listed.
    events = [line.get("event") for line in scheduler.lines()]
    assert "watch failed" in events, scheduler.tail()
    print(
        f"apiserver down {down_s:.1f} s, {events.count('bind failed')} bind attempts failed, "
        f"{stream.retries} creates retried; settled in {first.seconds:.1f} s; after deleting 4: "
        f"{second.seconds:.1f} s; {bound(scenario)} of the 36 left bound; other schedulers' "
        f"pods: {others.created} created, {others.deleted} deleted, {others.retries} retries"
    )


async def test_leader_sigkilled_during_gang_binds(
    scenario: Scenario, redis_server: RedisServer
) -> None:
    """6 nodes of 8 GPUs (48) and 16 gangs of 2 or 3 members of 1 or 2 GPUs (64 GPUs), all there
    when two replicas start on one Redis: the leader is killed with SIGKILL once it has reserved
    5 gangs, while their members' binds go out (some land, some not); the standby takes over
    after the lease (3 s), reloads the dead leader's reservations and binds the rest."""
    for n in range(6):
        scenario.node(f"dgx-{n}", dgx(f"{scenario.id}-{n}"), 8)
    specs = []
    for g in range(16):
        replicas, gpus = 2 + g % 2, 1 + (g // 2) % 2
        labels = scenario.gang_labels(f"job{g}", replicas)
        specs += [PodSpec(f"job{g}-r{r}", gpus, labels) for r in range(replicas)]
    await create_all(scenario, specs)
    await begin_history(redis_server.url, scenario)
    replicas = [scenario.start_scheduler(redis_server.url) for _ in range(2)]
    store = RedisStore.from_url(redis_server.url, prefix=f"t-{scenario.id}")
    try:
        leader = await wait_scheduled(replicas, 5)
        leader.kill9()
        at_kill = bound(scenario)
        standby = next(s for s in replicas if s is not leader)
        await wait_leader([standby])
        settled = await settle(scenario, store, replicas)
        await assert_audited(scenario, store, nodes=6, pods=len(specs))
    finally:
        await store.close()
    assert settled.clean, verdict(settled, replicas)
    assert not unexpected_book_events([standby]), unexpected_book_events([standby])
    assert standby.is_leader(), standby.tail()
    finally_bound = bound(scenario)
    assert finally_bound > at_kill, "the standby bound nothing after the kill"
    reloaded = [
        line.get("loaded_reservations")
        for line in standby.lines()
        if line.get("event") == "reconciled store"
    ]
    print(
        f"{at_kill} pods bound at the kill, {finally_bound} of {len(specs)} in the end; "
        f"reservations the standby reloaded: {reloaded}; settled in {settled.seconds:.1f} s, "
        f"{settled.rounds} audits"
    )


async def test_redis_flushall_under_two_replicas_while_scheduling(
    scenario: Scenario, own_redis: RedisServer
) -> None:
    """4 nodes of 8 GPUs (32) and 40 pods asking for 1 or 2 GPUs (60), all there when two
    replicas start on one Redis: FLUSHALL as the first binds land. The lease and every record
    go; a replica leads again at epoch 1, reconciles from the apiserver and waits one lease plus
    bindCommitSeconds for the Bindings of a leader it cannot know before it decides."""
    # The standby tries for the lease every 50 ms (not 0.5 s): it takes over while the flushed
    # leader's last Bindings are still landing, the race this test is after.
    config = scenario.config.read_text()
    assert "retrySeconds: 0.5" in config
    scenario.config.write_text(config.replace("retrySeconds: 0.5", "retrySeconds: 0.05"))
    for n in range(4):
        scenario.node(f"dgx-{n}", dgx(f"{scenario.id}-{n}"), 8)
    specs = [PodSpec(f"p{i}", 1 + i % 2) for i in range(40)]
    await create_all(scenario, specs)
    await begin_history(own_redis.url, scenario)
    replicas = [scenario.start_scheduler(own_redis.url) for _ in range(2)]
    store = RedisStore.from_url(own_redis.url, prefix=f"t-{scenario.id}")
    client = aioredis.Redis.from_url(own_redis.url)
    try:
        await wait_scheduled(replicas, 3)
        assert await client.flushall()
        at_flush = bound(scenario)
        await wait_until("a leader waits for an unknown predecessor", lambda: waited(replicas))
        settled = await settle(scenario, store, replicas)
        await assert_audited(scenario, store, nodes=4, pods=len(specs))
    finally:
        await client.aclose()
        await store.close()
    assert settled.clean, verdict(settled, replicas)
    assert not unexpected_book_events(replicas), unexpected_book_events(replicas)
    print(
        f"{at_flush} pods bound just after the flush, {bound(scenario)} of {len(specs)} in the "
        f"end; settled in {settled.seconds:.1f} s, {settled.rounds} audits"
    )
