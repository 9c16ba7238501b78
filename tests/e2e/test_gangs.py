"""Gangs end to end on the real control plane: every gang source binds as one unit, an incomplete
gang stays pending with nothing bound, Kueue-gated pods get no attempt until their gates go, a
scheduler-plugins PodGroup's status is written (and left alone where another controller writes
it), an unusable PodGroup keeps its pods pending with its error, and a restarted gang is placed
whole again while its old members terminate.

Each scenario has a 4-GPU node and an 8-GPU node, and its gangs are two members of 4 GPUs: one
member alone would go to the smaller node (the smallest node that fits), so two members on the
8-GPU node prove they were placed together. The scheduler runs as a real process under deploy/'s
role, with both PodGroup CRDs installed before it starts; KWOK runs the bound pods.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.kube.podgroups import POD_GROUPS, VOLCANO_POD_GROUPS

from .live import Scenario, eventually

PG_PATH = f"/apis/{POD_GROUPS.api_version}/namespaces/default/podgroups"
VOLCANO_PATH = f"/apis/{VOLCANO_POD_GROUPS.api_version}/namespaces/default/podgroups"

pytestmark = pytest.mark.usefixtures("pod_group_crds")


def inventory(n: int) -> dict[str, Any]:
    return {"vendor": "nvidia", "devices": [{"index": i} for i in range(n)]}


def nodes(scenario: Scenario) -> str:
    """A 4-GPU and an 8-GPU node; returns the 8-GPU one's name."""
    scenario.node("small", inventory(4), 4)
    return scenario.node("big", inventory(8), 8)


def pod_group(scenario: Scenario, name: str, min_member: int) -> str:
    full = f"{scenario.id}-{name}"
    scenario.plane.request(
        "POST",
        PG_PATH,
        {
            "apiVersion": POD_GROUPS.api_version,
            "kind": "PodGroup",
            "metadata": {"name": full, "namespace": "default"},
            "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 300},
        },
    )
    return full


def volcano_group(scenario: Scenario, name: str, min_member: int) -> str:
    full = f"{scenario.id}-{name}"
    scenario.plane.request(
        "POST",
        VOLCANO_PATH,
        {
            "apiVersion": VOLCANO_POD_GROUPS.api_version,
            "kind": "PodGroup",
            "metadata": {"name": full, "namespace": "default"},
            "spec": {"minMember": min_member, "queue": "default"},
        },
    )
    return full


def source(scenario: Scenario, kind: str) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations that make a pod a member of a 2-member gang ``job`` of this
    source (creating the PodGroup object the source needs)."""
    job = f"{scenario.id}-job"
    if kind == "native":
        return scenario.gang_labels("job", 2), {}
    if kind == "podgroup":
        pod_group(scenario, "job", 2)
        return {"scheduling.x-k8s.io/pod-group": job}, {}
    if kind == "kueue":
        return (
            {"kueue.x-k8s.io/pod-group-name": job},
            {"kueue.x-k8s.io/pod-group-total-count": "2"},
        )
    if kind == "volcano":
        volcano_group(scenario, "job", 2)
        return {}, {"scheduling.k8s.io/group-name": job}
    assert kind == "koordinator"
    return {}, {
        "gang.scheduling.koordinator.sh/name": job,
        "gang.scheduling.koordinator.sh/min-available": "2",
        "gang.scheduling.koordinator.sh/total-number": "2",
    }


def bound_nowhere(scenario: Scenario, *names: str) -> bool:
    pods = scenario.pods()
    return not any(pods.get(n, {}).get("spec", {}).get("nodeName") for n in names)


@pytest.mark.parametrize("kind", ["native", "podgroup", "kueue", "volcano", "koordinator"])
async def test_each_gang_source_binds_as_one_unit(scenario: Scenario, kind: str) -> None:
    big = nodes(scenario)
    labels, annotations = source(scenario, kind)
    scenario.start_scheduler()
    scenario.pod("w0", 4, labels=labels, annotations=annotations)
    # Alone, the member is an incomplete gang: it is attempted, told why it waits, and stays
    # unbound (a lone 4-GPU pod would have gone to the 4-GPU node at once).
    reason = await scenario.wait_condition("w0", "gang")
    assert "1 of 2" in reason or "1 member" in reason or "present" in reason, reason
    assert bound_nowhere(scenario, "w0")
    scenario.pod("w1", 4, labels=labels, annotations=annotations)
    pods = await scenario.wait_bound(["w0", "w1"], tries=150)
    assert {pods[n]["spec"]["nodeName"] for n in ("w0", "w1")} == {big}


async def test_kueue_gated_pods_get_no_attempt_until_their_gates_go(scenario: Scenario) -> None:
    big = nodes(scenario)
    labels, annotations = source(scenario, "kueue")
    gate = "kueue.x-k8s.io/admission"
    for name in ("w0", "w1"):
        scenario.plane.apply(gated(scenario, name, labels, annotations, gate))
    # A pod created after them binds: by then the scheduler has seen the gated ones (the watch
    # delivers events in order) and, had it attempted them, would have said so first.
    scenario.start_scheduler()
    scenario.pod("control", 1)
    await scenario.wait_bound(["control"])
    for name in ("w0", "w1"):
        assert_untouched(scenario, name)
    for name in ("w0", "w1"):
        scenario.plane.request(
            "PATCH",
            f"/api/v1/namespaces/default/pods/{scenario.id}-{name}",
            {"spec": {"schedulingGates": None}},
            content_type="application/merge-patch+json",
        )
    pods = await scenario.wait_bound(["w0", "w1"], tries=150)
    assert {pods[n]["spec"]["nodeName"] for n in ("w0", "w1")} == {big}


async def test_pod_group_status_is_written_unless_foreign_and_an_unusable_group_waits(
    scenario: Scenario,
) -> None:
    big = nodes(scenario)
    job = pod_group(scenario, "job", 2)
    # Valid for the CRD (an int32), beyond what the scheduler plans.
    bad = pod_group(scenario, "bad", 100_001)
    # A group whose status scheduler-plugins' controller writes (its phase Scheduling, and
    # occupiedBy): topo-scheduler places its pods and leaves its status alone.
    theirs = pod_group(scenario, "theirs", 2)
    theirs_status = {"phase": "Scheduling", "occupiedBy": "default/trainer"}
    scenario.plane.request(
        "PATCH",
        f"{PG_PATH}/{theirs}/status",
        {"status": theirs_status},
        content_type="application/merge-patch+json",
    )
    scenario.start_scheduler()

    def status() -> dict[str, Any]:
        got: dict[str, Any] = scenario.plane.request("GET", f"{PG_PATH}/{job}").get("status", {})
        return got

    # No member yet: Pending, written by topo-scheduler (nobody else writes it here).
    await eventually(lambda: status().get("phase") == "Pending", "phase Pending")
    for name in ("w0", "w1"):
        scenario.pod(name, 4, labels={"scheduling.x-k8s.io/pod-group": job})
    scenario.pod("lost", 4, labels={"scheduling.x-k8s.io/pod-group": bad})
    for name in ("t0", "t1"):
        scenario.pod(name, 1, labels={"scheduling.x-k8s.io/pod-group": theirs})
    pods = await scenario.wait_bound(["w0", "w1", "t0", "t1"], tries=150)
    assert {pods[n]["spec"]["nodeName"] for n in ("w0", "w1")} == {big}

    def running(*names: str) -> bool:
        pods = scenario.pods()
        return all(pods[n].get("status", {}).get("phase") == "Running" for n in names)

    await eventually(lambda: running("t0", "t1"), "t0 and t1 running (KWOK)")
    # KWOK runs them: Running, both counted (Scheduled may come first).
    await eventually(
        lambda: status() == {"phase": "Running", "scheduled": 2, "running": 2},
        f"phase Running with 2 scheduled and running (last: {status()})",
    )
    # Its members changed as job's did (bound, then running): its status is as its writer left it.
    assert scenario.plane.request("GET", f"{PG_PATH}/{theirs}")["status"] == theirs_status
    reason = await scenario.wait_condition("lost", "spec.minMember")
    assert f"PodGroup default/{bad}: spec.minMember 100001 must be between 1 and 100000" in reason
    assert bound_nowhere(scenario, "lost")


HOLD = "topo-scheduler.io/e2e-hold"  # a finalizer: keeps a deleted pod terminating


def hold(scenario: Scenario, name: str, held: bool) -> None:
    """Add (or remove) the test's finalizer: a deleted pod stays terminating until it goes."""
    scenario.plane.request(
        "PATCH",
        f"/api/v1/namespaces/default/pods/{scenario.id}-{name}",
        {"metadata": {"finalizers": [HOLD] if held else None}},
        content_type="application/merge-patch+json",
    )


async def test_a_restarted_gang_is_placed_whole_not_beside_its_terminating_members(
    scenario: Scenario,
) -> None:
    """Issue 30, timeline 5: a JobSet or Kubeflow restart deletes a PodGroup gang's pods and
    creates new ones under new names. While the old members terminate (their GPUs still held on
    the 8-GPU node) the new ones are the whole minimum again: the 4 GPUs free on the small node
    do not take one of them alone (a partial gang holding GPUs); once the old ones are gone the
    new gang binds together on the 8-GPU node."""
    big = nodes(scenario)
    job = pod_group(scenario, "job", 2)
    labels = {"scheduling.x-k8s.io/pod-group": job}
    scenario.start_scheduler()
    old = ("a0", "a1")
    for name in old:
        scenario.pod(name, 4, labels=labels)
    pods = await scenario.wait_bound(list(old), tries=150)
    assert {pods[n]["spec"]["nodeName"] for n in old} == {big}
    try:
        for name in old:
            hold(scenario, name, True)
            scenario.delete_pod(name)
        await eventually(
            lambda: all(scenario.pods()[n]["metadata"].get("deletionTimestamp") for n in old),
            "a0 and a1 terminating",
        )
        for name in ("b0", "b1"):
            scenario.pod(name, 4, labels=labels)
        reason = await scenario.wait_condition("b1", "cannot all be placed")
        assert "beyond its minimum" not in reason, reason
        assert bound_nowhere(scenario, "b0", "b1")
    finally:
        for name in old:
            hold(scenario, name, False)
    await eventually(lambda: not set(old) & set(scenario.pods()), "a0 and a1 gone")
    pods = await scenario.wait_bound(["b0", "b1"], tries=150)
    assert {pods[n]["spec"]["nodeName"] for n in ("b0", "b1")} == {big}


def gated(
    scenario: Scenario,
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    gate: str,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{scenario.id}-{name}",
            "labels": {"test": scenario.id, **labels},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": scenario.name,
            "nodeSelector": {"test": scenario.id},
            "terminationGracePeriodSeconds": 0,
            "schedulingGates": [{"name": gate}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "4"}},
                }
            ],
        },
    }


def assert_untouched(scenario: Scenario, name: str) -> None:
    """No bind, no PodScheduled condition of ours (the apiserver's SchedulingGated one is
    allowed), no event."""
    pod = scenario.pods()[name]
    assert not pod["spec"].get("nodeName"), f"a gated pod was bound: {pod['spec']['nodeName']}"
    ours = [
        c
        for c in pod.get("status", {}).get("conditions") or []
        if c["type"] == "PodScheduled" and c.get("reason") != "SchedulingGated"
    ]
    assert not ours, f"a gated pod got a PodScheduled condition: {ours}"
    listed = scenario.plane.request(
        "GET",
        "/api/v1/namespaces/default/events"
        f"?fieldSelector=involvedObject.name%3D{scenario.id}-{name}",
    )
    events = [(e["reason"], e.get("message")) for e in listed["items"]]
    assert not events, f"events about a gated pod: {events}"
