"""Operating the live scheduler: probes, metrics, the debug endpoint, events and SIGTERM.

These are what an operator sees of the scheduler, so they are checked on the real process: its
HTTP server (port 0, read back from its log), the Events and conditions it writes through the
restricted scheduler identity, and its exit on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from scheduler.testing.redisserver import RedisServer

from .live import Scenario, begin_history, devices_of

FOUR_PCIE = {
    "vendor": "nvidia",
    "devices": [{"index": i} for i in range(4)],
    "links": [["X" if i == j else "PHB" for j in range(4)] for i in range(4)],
}


async def get(port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as resp,
    ):
        return resp.status, await resp.text()


async def until_ok(port: int, path: str, tries: int = 300) -> str:
    for _ in range(tries):
        status, body = await get(port, path)
        if status == 200:
            return body
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} never answered 200; last: {status} {body}")


def events_of(scenario: Scenario, pod: str) -> list[dict[str, Any]]:
    name = f"{scenario.id}-{pod}"
    listed = scenario.plane.request(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name}"
    )
    return list(listed["items"])


async def wait_event(scenario: Scenario, pod: str, reason: str) -> dict[str, Any]:
    for _ in range(300):
        for event in events_of(scenario, pod):
            if event["reason"] == reason:
                return event
        await asyncio.sleep(0.2)
    raise AssertionError(f"no {reason} event for {pod}: {events_of(scenario, pod)}")


async def test_probes_metrics_debug_and_events(
    scenario: Scenario, redis_server: RedisServer
) -> None:
    node = scenario.node("four", FOUR_PCIE, 4)
    scheduler = scenario.start_scheduler(redis_server.url)
    port = await scheduler.http_port()
    assert await get(port, "/healthz") == (200, "ok\n")
    await until_ok(port, "/readyz")  # watches synced, leader or standby

    scenario.pod("fits", 1)
    scenario.pod("too-big", 8)
    pods = await scenario.wait_bound(["fits"])
    assert pods["fits"]["spec"]["nodeName"] == node
    # Other tests' nodes share the session's cluster; this scenario's pods only select its own.
    reason = await scenario.wait_condition("too-big", containing="1 has fewer than 8 GPUs in total")
    assert reason.startswith("0/")

    # Events, as `kubectl describe pod` shows them.
    scheduled = await wait_event(scenario, "fits", "Scheduled")
    assert scheduled["type"] == "Normal"
    assert node in scheduled["message"]
    failed = await wait_event(scenario, "too-big", "FailedScheduling")
    assert failed["type"] == "Warning"
    assert failed["message"] == reason
    condition = next(
        c for c in scenario.pods()["too-big"]["status"]["conditions"] if c["type"] == "PodScheduled"
    )
    assert condition["reason"] == "Unschedulable"

    # The debug endpoint explains each pod's last decision.
    status, body = await get(port, f"/debug/pods/default/{scenario.id}-fits")
    assert status == 200
    fits = json.loads(body)
    assert (fits["result"], fits["node"]) == ("scheduled", node)
    assert list(fits["devices"]) == devices_of(pods["fits"])
    status, body = await get(port, f"/debug/pods/default/{scenario.id}-too-big")
    assert status == 200
    assert json.loads(body)["reason"] == reason
    status, _ = await get(port, "/debug/pods/default/no-such-pod")
    assert status == 404

    # One JSON summary line per scheduling attempt.
    attempts = [e for e in scheduler.lines() if e.get("event") == "scheduling attempt"]
    by_pod = {e["pod"]: e for e in attempts}
    assert by_pod[f"default/{scenario.id}-fits"]["result"] == "scheduled"
    assert by_pod[f"default/{scenario.id}-fits"]["placements"] == {
        f"default/{scenario.id}-fits": [node, devices_of(pods["fits"])]
    }
    assert by_pod[f"default/{scenario.id}-too-big"]["reason"] == reason
    assert all("duration_ms" in e and "attempts" in e for e in attempts)

    # Metrics under kube-scheduler's names.
    status, text = await get(port, "/metrics")
    assert status == 200
    samples = {
        line.split(" ")[0]: line.split(" ")[1] for line in text.splitlines() if line[:1] != "#"
    }
    assert float(samples['scheduler_schedule_attempts_total{result="scheduled"}']) >= 1
    assert float(samples['scheduler_schedule_attempts_total{result="unschedulable"}']) >= 1
    assert float(samples["scheduler_e2e_scheduling_duration_seconds_count"]) >= 1
    assert float(samples['scheduler_pending_pods{queue="unschedulable"}']) == 1
    assert float(samples["scheduler_leader"]) == 1
    assert any(k.startswith("scheduler_store_request_duration_seconds_count") for k in samples)
    for family in ("scheduler_bind_errors", "scheduler_gang_wait_duration_seconds"):
        assert f"# TYPE {family}" in text


async def test_sigterm_releases_the_lease_and_exits_zero(
    scenario: Scenario, redis_server: RedisServer
) -> None:
    # A lease far longer than the test waits: the standby can only take over in time if the
    # leader hands the lease back on SIGTERM instead of letting it expire.
    scenario.configure(lease=(600, 5))
    # A Redis that kept its history: a fresh one would make the first leader wait one lease
    # (600 s) for a previous leader it cannot know about (docs/operations.md, "State and HA").
    await begin_history(redis_server.url, scenario)
    scenario.node("four", FOUR_PCIE, 4)
    first = scenario.start_scheduler(redis_server.url)
    scenario.pod("before", 1)
    await scenario.wait_bound(["before"])
    assert first.is_leader()
    second = scenario.start_scheduler(redis_server.url)
    await until_ok(await second.http_port(), "/readyz")  # a warm standby
    assert not second.is_leader()

    assert first.terminate() == 0
    events = [line.get("event") for line in first.lines()]
    assert "shutting down: readiness off, finishing binds in flight" in events
    assert events[-1] == "stopped"

    scenario.pod("after", 1)
    pods = await scenario.wait_bound(["after"])
    assert second.is_leader()
    assert set(devices_of(pods["after"])).isdisjoint(devices_of(pods["before"]))


async def test_a_gang_missing_members_says_what_it_waits_for_then_that_it_timed_out(
    scenario: Scenario,
) -> None:
    scenario.configure(gang_wait=2)
    scenario.node("four", FOUR_PCIE, 4)
    scenario.start_scheduler()
    labels = scenario.gang_labels("job-a", 2)
    scenario.pod("m0", 1, labels=labels)
    gang = f"gang default/{scenario.id}-job-a"
    waiting = await scenario.wait_condition("m0", containing=gang)
    assert waiting.startswith(f"{gang}: 1 of 2 replicas present")
    # No other event happens: the scheduler retries by itself when the timeout runs out.
    timed_out = await scenario.wait_condition("m0", containing="gang.waitTimeoutSeconds")
    assert timed_out.startswith(f"{gang}: 1 of 2 replicas present; waited ")
    assert timed_out.endswith("longer than gang.waitTimeoutSeconds (2 s)")
    # The gang still completes when its member arrives.
    scenario.pod("m1", 1, labels=labels)
    pods = await scenario.wait_bound(["m0", "m1"])
    assert set(devices_of(pods["m0"])).isdisjoint(devices_of(pods["m1"]))
