"""Upstream gangs end to end (issue 25): Kubernetes v1.37's Workload API PodGroup
(``scheduling.k8s.io/v1beta1``, served by the plane's apiserver with GenericWorkload on) whose
pods name it in ``spec.schedulingGroup.podGroupName`` is the sixth gang source.

A 4-GPU and an 8-GPU node, a PodGroup with a gang policy of minCount 2, members of 4 GPUs: the
first member alone waits (told why, bound nowhere), both then bind together on the 8-GPU node (a
lone 4-GPU pod would have gone to the smaller node). A pod naming a PodGroup that does not exist
waits for it, and binds once it is created. The group's condition PodGroupInitiallyScheduled is
set True once its minimum is scheduled.
"""

from __future__ import annotations

from typing import Any

from scheduler.testing.controlplane import pod_manifest

from .live import Scenario, eventually

PG_PATH = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups"
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"


def inventory(n: int) -> dict[str, Any]:
    return {"vendor": "nvidia", "devices": [{"index": i} for i in range(n)]}


def upstream_group(scenario: Scenario, name: str, min_count: int) -> str:
    full = f"{scenario.id}-{name}"
    scenario.plane.request(
        "POST",
        PG_PATH,
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": full, "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        },
    )
    return full


def member(scenario: Scenario, name: str, group: str, gpus: int = 4) -> None:
    pod = pod_manifest(
        f"{scenario.id}-{name}",
        "default",
        scenario.name,
        {"main": {"nvidia.com/gpu": str(gpus)}},
        labels={"test": scenario.id},
        node_selector={"test": scenario.id},
    )
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    created = scenario.plane.apply(pod)
    # The apiserver keeps the field only with GenericWorkload on: the plane must have it.
    assert created["spec"].get("schedulingGroup") == {"podGroupName": group}, created["spec"]


async def test_an_upstream_pod_group_gang_binds_as_one_unit(scenario: Scenario) -> None:
    scenario.node("small", inventory(4), 4)
    big = scenario.node("big", inventory(8), 8)
    group = upstream_group(scenario, "job", 2)
    ours = scenario.start_scheduler()
    member(scenario, "w0", group)
    reason = await scenario.wait_condition("w0", "gang")
    assert "1 of 2" in reason, f"{reason}\n{ours.tail()}"
    assert not scenario.pods()["w0"]["spec"].get("nodeName")
    member(scenario, "w1", group)
    pods = await scenario.wait_bound(["w0", "w1"], tries=150)
    assert {pods[n]["spec"]["nodeName"] for n in ("w0", "w1")} == {big}

    def condition() -> dict[str, Any] | None:
        status = scenario.plane.request("GET", f"{PG_PATH}/{group}").get("status", {})
        found = [c for c in status.get("conditions", []) if c["type"] == INITIALLY_SCHEDULED]
        return found[0] if found else None

    # Written as kube-scheduler writes it for the groups of its own pods.
    written = await eventually(condition, "condition PodGroupInitiallyScheduled")
    assert (written["status"], written["reason"]) == ("True", "Scheduled"), written


async def test_a_pod_waits_for_its_upstream_pod_group_to_exist(scenario: Scenario) -> None:
    scenario.node("big", inventory(8), 8)
    scenario.start_scheduler()
    group = f"{scenario.id}-later"
    member(scenario, "solo", group, gpus=1)
    reason = await scenario.wait_condition("solo", "to exist")
    assert f"PodGroup default/{group} (scheduling.k8s.io)" in reason, reason
    upstream_group(scenario, "later", 1)
    await scenario.wait_bound(["solo"], tries=150)
