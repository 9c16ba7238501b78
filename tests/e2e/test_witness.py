"""The epoch witness (scheduler/service/witness.py) on the real apiserver, under deploy/'s Role:
it tells no leader ever recorded (a new installation, or a deleted witness) from a Redis that
lost its history; both wait one lease plus bindCommitSeconds when the Redis lost every election
(a FLUSHALL, a restart without persistence), since the reservations of a leader whose Bindings
may still land went with them (docs/operations.md "State and HA")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient

from scheduler.kube.api import KubeApi
from scheduler.service.witness import NAME, NEVER, Witness, WitnessError
from scheduler.state.base import History
from scheduler.testing.controlplane import REQUEST_TIMEOUT_S, ControlPlane
from scheduler.testing.redisserver import RedisServer
from tests.conftest import started_redis
from tests.manifests import NAMESPACE

from .live import Scenario


@pytest.fixture
async def fresh_redis(tmp_path: Path) -> AsyncIterator[RedisServer]:
    folder = tmp_path / "redis"
    folder.mkdir()
    with started_redis(folder) as server:
        yield server


async def test_the_witness_records_elections_per_scheduler_under_deploys_role(
    scheduler_api: ApiClient, control_plane: ControlPlane, name: str
) -> None:
    api = KubeApi(scheduler_api)
    mine, other = Witness(api, f"{name}-a"), Witness(api, f"{name}-b")
    assert await mine.elected("h1", 1, History(False, "")) == (True, False)
    assert await other.read() == NEVER  # one key per scheduler name
    assert await other.elected("h9", 1, History(False, "")) == (True, False)
    assert await mine.elected("h2", 2, History(True, "h1|1")) == (False, True)
    stored = control_plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/{NAME}")
    assert stored["data"][f"{name}-a"] == "h2|2" and stored["data"][f"{name}-b"] == "h9|1"
    # A newer leader recorded: the older one's renewals stop counting.
    newer = Witness(api, f"{name}-a")
    assert not await mine.superseded("h2", 2)
    assert await newer.elected("h3", 2, History(False, "")) == (False, False)
    assert await mine.superseded("h2", 2)
    # Outside its namespace the Role grants nothing: a 403, and a witness that cannot record
    # an election fails it (no lead); a 403 never turns the witness off (issue 30, 4).
    elsewhere = Witness(api, f"{name}-c", namespace="default")
    with pytest.raises(WitnessError, match="403"):
        await elsewhere.elected("h1", 1, History(False, ""))


async def test_a_new_installation_and_a_flushed_redis_are_told_apart_and_both_wait(
    scenario: Scenario, fresh_redis: RedisServer
) -> None:
    scenario.configure(lease=(3, 1))
    scenario.node("n", {"vendor": "nvidia", "devices": [{"index": i} for i in range(8)]}, 8)
    scenario.pod("first", 1)
    first = scenario.start_scheduler(fresh_redis.url)
    await scenario.wait_bound(["first"])
    events = [line.get("event") for line in first.lines()]
    # No record is no proof (issue 30, 7a): one lease plus bindCommitSeconds first.
    assert "no leader recorded: waiting until a forgotten leader's Bindings cannot land" in events
    assert "previous leader unknown: waiting before the first decision" not in events
    assert first.terminate() == 0
    # The same scheduler after its Redis lost everything: it led before (the witness names it),
    # so the next leader cannot rule out Bindings in flight, none of them held by a reservation
    # any more: it waits one lease plus bindCommitSeconds too.
    fresh_redis.stop()
    fresh_redis.start()
    scenario.pod("second", 1)
    second = scenario.start_scheduler(fresh_redis.url)
    await scenario.wait_bound(["second"])
    events = [line.get("event") for line in second.lines()]
    assert "previous leader unknown: waiting before the first decision" in events
    waits = [
        line.get("seconds")
        for line in second.lines()
        if line.get("event") == "previous leader unknown: waiting before the first decision"
    ]
    assert 3 + REQUEST_TIMEOUT_S in waits  # the lease (3 s) plus bindCommitSeconds
    assert (
        "no leader recorded: waiting until a forgotten leader's Bindings cannot land" not in events
    )
    assert second.terminate() == 0
