"""Scheduling gates (``spec.schedulingGates``): a gated pod is not scheduled until its gates are
gone, as with kube-scheduler.

While a pod has gates our scheduler makes no attempt: no bind, no ``FailedScheduling`` event, no
``PodScheduled`` condition of its own (the apiserver itself writes ``PodScheduled=False`` with
reason ``SchedulingGated`` on a gated pod; that one is allowed). Gates can only be removed; once
the last one is gone the pod binds. An ungated pod next to it proves the scheduler is running and
has seen the pods.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .live import Scenario

INVENTORY = {"vendor": "nvidia", "devices": [{"index": i} for i in range(4)]}


def gated_pod(scenario: Scenario, name: str, gates: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{scenario.id}-{name}", "labels": {"test": scenario.id}},
        "spec": {
            "schedulerName": scenario.name,
            "nodeSelector": {"test": scenario.id},
            "terminationGracePeriodSeconds": 0,
            "schedulingGates": [{"name": g} for g in gates],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def set_gates(scenario: Scenario, name: str, gates: list[str]) -> None:
    scenario.plane.request(
        "PATCH",
        f"/api/v1/namespaces/default/pods/{scenario.id}-{name}",
        {"spec": {"schedulingGates": [{"name": g} for g in gates] or None}},
        content_type="application/merge-patch+json",
    )


def events_of(scenario: Scenario, name: str) -> list[dict[str, Any]]:
    listed = scenario.plane.request(
        "GET",
        "/api/v1/namespaces/default/events"
        f"?fieldSelector=involvedObject.name%3D{scenario.id}-{name}",
    )
    return list(listed["items"])


def assert_untouched(scenario: Scenario, name: str) -> None:
    pod = scenario.pods()[name]
    assert not pod["spec"].get("nodeName"), f"a gated pod was bound: {pod['spec']['nodeName']}"
    ours = [
        c
        for c in pod.get("status", {}).get("conditions") or []
        if c["type"] == "PodScheduled" and c.get("reason") != "SchedulingGated"
    ]
    assert not ours, f"a gated pod got a PodScheduled condition: {ours}"
    events = [(e["reason"], e.get("message")) for e in events_of(scenario, name)]
    assert not events, f"events about a gated pod: {events}"


async def test_gated_pod_waits_for_its_gates_then_binds(scenario: Scenario) -> None:
    node = scenario.node("gpu", INVENTORY, 4)
    scenario.start_scheduler()
    scenario.plane.apply(gated_pod(scenario, "gated", ["example.com/quota", "example.com/data"]))
    scenario.pod("control", 1)
    await scenario.wait_bound(["control"])
    await asyncio.sleep(3)  # time for attempts, had the scheduler made any
    assert_untouched(scenario, "gated")
    gated = scenario.pods()["gated"]
    assert [g["name"] for g in gated["spec"]["schedulingGates"]] == [
        "example.com/quota",
        "example.com/data",
    ]
    set_gates(scenario, "gated", ["example.com/data"])  # one gate left: still no attempt
    await asyncio.sleep(2)
    assert_untouched(scenario, "gated")
    set_gates(scenario, "gated", [])
    pods = await scenario.wait_bound(["gated"], tries=150)
    assert pods["gated"]["spec"]["nodeName"] == node
    assert not pods["gated"]["spec"].get("schedulingGates")
