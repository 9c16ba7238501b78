"""Chaos through Redis Sentinel (issue 22): two scheduler replicas find their Redis through three
Sentinels (a master and two replicas, scheduler/testing/redisserver.py's SentinelSet) while a
stream of pods and gangs arrives, and the Redis master is SIGKILLed, or SIGSTOPped past the
Sentinels' down-after time and then SIGCONTed (it comes back believing it is master). The
auditor (scheduler/testing/audit.py) then says, over every round it read: no GPU held by two
live pods, no gang partly bound, every pod bound once capacity allows, Redis equal to the
apiserver.

Lease 3 s renewed every 1 s (live.py); down-after 2 s. The fault comes the moment the leader's
third attempt has reserved GPUs and handed them to the binder, with the stream still running.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scheduler.state.redis_store import RedisStore
from scheduler.testing.redisserver import SentinelSet
from tests.conftest import started_sentinels

from .live import Scenario, SchedulerProcess
from .test_chaos import (
    PodSpec,
    PodStream,
    assert_audited,
    dgx,
    settle,
    unexpected_book_events,
    verdict,
    wait_scheduled,
)


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelSet]:
    folder = tmp_path / "sentinels"
    folder.mkdir()
    with started_sentinels(folder, down_after_ms=2000, max_lag_s=1) as group:
        yield group


def sentinel_env(sentinels: SentinelSet) -> dict[str, str]:
    """The scheduler's environment as deploy/with-redis-sentinel/ sets it."""
    return {
        "TOPO_SCHEDULER_REDIS_URL": sentinels.url,
        "TOPO_SCHEDULER_REDIS_SENTINEL_MASTER_NAME": sentinels.master_name,
        "TOPO_SCHEDULER_REDIS_SENTINEL_ADDRESSES": ",".join(sentinels.addresses),
    }


def workload(scenario: Scenario) -> list[PodSpec]:
    """60 GPUs asked of 32: 24 pods of 1 or 2 GPUs and 6 gangs of two 2-GPU replicas,
    interleaved."""
    specs: list[PodSpec] = []
    for i in range(24):
        specs.append(PodSpec(f"p{i}", 1 + i % 2))
        if i % 4 == 3:
            job = f"g{i // 4}"
            labels = scenario.gang_labels(job, 2)
            specs += [PodSpec(f"{job}-{r}", 2, labels) for r in range(2)]
    return specs


async def failover_under_load(
    scenario: Scenario, sentinels: SentinelSet, fault: Callable[[int], None]
) -> int:
    for n in range(4):
        scenario.node(f"dgx-{n}", dgx(f"{scenario.id}-{n}"), 8)
    specs = workload(scenario)
    replicas = [scenario.start_scheduler(env=sentinel_env(sentinels)) for _ in range(2)]
    store = RedisStore.from_sentinels(
        sentinels.master_name, sentinels.addresses, sentinels.url, prefix=f"t-{scenario.id}"
    )
    try:
        stream = PodStream(scenario, specs).start()
        await wait_scheduled(replicas, 3)
        old = sentinels.master_index()
        await asyncio.to_thread(fault, old)
        await stream
        settled = await settle(scenario, store, replicas)
        await assert_audited(scenario, store, nodes=4, pods=len(specs))
    finally:
        await store.close()
    assert settled.clean, verdict(settled, replicas)
    assert sentinels.master_index() != old  # the Sentinels did promote a replica
    assert not unexpected_book_events(replicas), unexpected_book_events(replicas)
    # Whether the leader's lease outlived the promotion (lease 3 s, promotion about 3.5 s after
    # the fault: usually not) or a new election on the promoted replica waited one lease.
    print(
        f"settled in {settled.seconds:.1f} s, {settled.rounds} audits; an election waited: "
        f"{promoted_over(replicas)}"
    )
    return old


def promoted_over(schedulers: list[SchedulerProcess]) -> bool:
    """Some election after the failover saw another Redis process and waited one lease."""
    return any(
        line.get("event") == "previous leader unknown: waiting before the first decision"
        for s in schedulers
        for line in s.lines()
    )


async def test_master_sigkilled_under_pods_and_gangs(
    scenario: Scenario, sentinels: SentinelSet
) -> None:
    def kill(old: int) -> None:
        sentinels.signal_node(old, signal.SIGKILL)
        sentinels.wait_failover(old)

    await failover_under_load(scenario, sentinels, kill)


async def test_master_paused_past_down_after_then_resumed(
    scenario: Scenario, sentinels: SentinelSet
) -> None:
    def pause(old: int) -> None:
        sentinels.signal_node(old, signal.SIGSTOP)
        try:
            sentinels.wait_failover(old)  # past down-after: a replica was promoted
        finally:
            sentinels.signal_node(old, signal.SIGCONT)  # it resumes, still a master

    old = await failover_under_load(scenario, sentinels, pause)
    # The Sentinels turn the resumed master into a replica of the new one (within their
    # 10 s INFO period).
    await asyncio.to_thread(sentinels.wait_demoted, old)
