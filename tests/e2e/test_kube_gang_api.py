"""The Kubernetes side of gangs on the real apiserver, as the scheduler's identity (deploy/'s
ClusterRole, nothing more): the optional PodGroup CRD, PodGroups decoded through LIST and WATCH
(scheduler-plugins' and Volcano's), the Eviction API with and without a PodDisruptionBudget,
status.nominatedNodeName, and a PodGroup's status subresource.

The plane has no controller-manager: the disruption controller's part (a budget's status) is
written here by the admin, as that controller would write it, so that the eviction is refused for
the budget's own reason. KWOK runs the pods bound to this module's node and finishes their
deletion.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.error
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.core.model.objects import PodGroupInput
from scheduler.kube.api import KubeApi
from scheduler.kube.client import api_client
from scheduler.kube.podgroups import (
    MAX_MEMBERS,
    POD_GROUPS,
    VOLCANO_POD_GROUPS,
    Eviction,
    PodGroup,
    PodGroupError,
    PodGroupPhase,
    Write,
    decode_pod_group,
    decode_pod_group_list,
    pod_group_or_error,
)
from scheduler.kube.watch import HttpError, Reflector
from scheduler.testing.controlplane import SCHEDULER_TOKEN, ControlPlane

from .live import VOLCANO_CRD, eventually

PG_PATH = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"
VOLCANO_PATH = "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups"
PDB_PATH = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane) -> list[str]:
    return control_plane.apply_crds()


@pytest.fixture
async def api(control_plane: ControlPlane, crds: list[str]) -> AsyncIterator[KubeApi]:
    client = await api_client(str(control_plane.scheduler_kubeconfig))
    try:
        yield KubeApi(client)
    finally:
        await client.close()


def pod_group(name: str, min_member: int, timeout: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member, "minResources": {"nvidia.com/gpu": "8"}}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    return {
        "apiVersion": POD_GROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def status_of(plane: ControlPlane, method: str, path: str, body: Any = None) -> int:
    """The HTTP status of a request made with the scheduler's token."""
    content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
    try:
        plane.request(method, path, body, token=SCHEDULER_TOKEN, content_type=content_type)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def delete_quietly(plane: ControlPlane, path: str) -> None:
    with contextlib.suppress(urllib.error.HTTPError):
        plane.delete(path)


# ---- the CRDs ------------------------------------------------------------------------------


async def test_crd_established_follows_the_crds(
    control_plane: ControlPlane, api: KubeApi, crds: list[str], tmp_path: Path, name: str
) -> None:
    assert crds == [POD_GROUPS.name]
    assert await api.crd_established(POD_GROUPS.name) is True
    # Volcano is not installed: False (a 404), not an error.
    assert await api.crd_established(VOLCANO_POD_GROUPS.name) is False
    # The role reads these two CRDs only.
    with pytest.raises(HttpError) as refused:
        await api.crd_established("leases.example.com")
    assert refused.value.status == 403
    # Applying the file again changes nothing and waits for nothing.
    assert control_plane.apply_crds() == [POD_GROUPS.name]

    crd_file = tmp_path / "volcano-crd.yaml"
    crd_file.write_text(yaml.safe_dump(VOLCANO_CRD))
    assert control_plane.apply_crds((crd_file,)) == [VOLCANO_POD_GROUPS.name]
    assert await api.crd_established(VOLCANO_POD_GROUPS.name) is True
    control_plane.request(
        "POST",
        VOLCANO_PATH,
        {
            "apiVersion": VOLCANO_POD_GROUPS.api_version,
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minMember": 3, "queue": "default"},
        },
    )
    try:
        listed = decode_pod_group_list(await api.list_kind(VOLCANO_POD_GROUPS.name))
        (group,) = [g for g in listed.groups if g.name == name]
        assert group.group == "scheduling.volcano.sh" and group.min_member == 3
        assert group.schedule_timeout_seconds is None and group.uid
    finally:
        delete_quietly(control_plane, f"{VOLCANO_PATH}/{name}")


# ---- PodGroups through LIST and WATCH --------------------------------------------------------


async def test_pod_groups_list_and_watch(
    control_plane: ControlPlane, api: KubeApi, name: str
) -> None:
    first, second, huge = f"{name}-a", f"{name}-b", f"{name}-huge"
    created = control_plane.request("POST", PG_PATH, pod_group(first, 2, timeout=30))
    replaced: list[list[PodGroupInput | PodGroupError]] = []
    events: list[tuple[str, PodGroupInput | PodGroupError]] = []
    kind = POD_GROUPS.name
    # Exactly the reflector the service runs for PodGroups.
    reflector: Reflector[PodGroup] = Reflector(
        kind,
        PodGroup,
        lambda: api.list_kind(kind),
        lambda version, timeout: api.watch_kind(kind, version, timeout),
        lambda items: replaced.append([pod_group_or_error(i) for i in items]),
        lambda change, item: events.append((change, pod_group_or_error(item))),
        lambda item: item.metadata.resource_version,
    )
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(reflector.synced.wait(), 20)
        (listed,) = [g for g in replaced[0] if g.name == first]
        assert listed == PodGroupInput(
            "scheduling.x-k8s.io", "default", first, 2, 30, created["metadata"]["uid"]
        )

        control_plane.request("POST", PG_PATH, pod_group(second, 3))
        control_plane.request(
            "PATCH",
            f"{PG_PATH}/{first}",
            {"spec": {"minMember": 4}},
            content_type="application/merge-patch+json",
        )
        # Valid for the CRD (an int32), beyond what the scheduler plans: an error, and the
        # watch goes on.
        control_plane.request("POST", PG_PATH, pod_group(huge, MAX_MEMBERS + 1))
        control_plane.delete(f"{PG_PATH}/{second}")

        def seen() -> list[tuple[str, str, int | str]]:
            out: list[tuple[str, str, int | str]] = []
            for change, group in events:
                if isinstance(group, PodGroupError):
                    out.append((change, group.name, group.field))
                elif group.name.startswith(name):
                    out.append((change, group.name, group.min_member))
            return out

        expected = [
            ("ADDED", second, 3),
            ("MODIFIED", first, 4),
            ("ADDED", huge, "spec.minMember"),
            ("DELETED", second, 3),
        ]
        await eventually(lambda: len(seen()) >= len(expected), "the watch events")
        assert seen() == expected
        (error,) = [g for _, g in events if isinstance(g, PodGroupError)]
        assert str(error).startswith(f"PodGroup scheduling.x-k8s.io/default/{huge}: ")
        assert reflector.relists == 1  # the unusable PodGroup did not break the watch

        # A LIST as a whole, and one object as read.
        listed_now = decode_pod_group_list(await api.list_kind(kind))
        mine = {g.name: g.min_member for g in listed_now.groups if g.name.startswith(name)}
        assert mine == {first: 4}
        assert [e.name for e in listed_now.errors if e.name.startswith(name)] == [huge]
        raw = control_plane.request("GET", f"{PG_PATH}/{first}", raw=True)
        assert decode_pod_group(raw).min_member == 4
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for group_name in (first, second, huge):
            delete_quietly(control_plane, f"{PG_PATH}/{group_name}")


# ---- writes ----------------------------------------------------------------------------------


async def test_patch_pod_group_status(control_plane: ControlPlane, api: KubeApi, name: str) -> None:
    control_plane.request("POST", PG_PATH, pod_group(name, 2, timeout=60))
    try:
        # What a workload controller may have written is kept: a merge patch changes only ours.
        control_plane.request(
            "PATCH",
            f"{PG_PATH}/{name}/status",
            {"status": {"occupiedBy": "job-uid", "phase": "Pending"}},
            content_type="application/merge-patch+json",
        )
        written = await api.patch_pod_group_status("default", name, PodGroupPhase.SCHEDULED, 2, 1)
        assert written is Write.DONE
        stored = control_plane.request("GET", f"{PG_PATH}/{name}")
        assert stored["status"] == {
            "phase": "Scheduled",
            "scheduled": 2,
            "running": 1,
            "occupiedBy": "job-uid",
        }
        assert stored["spec"]["minMember"] == 2
        running = await api.patch_pod_group_status("default", name, PodGroupPhase.RUNNING, 2, 2)
        assert running is Write.DONE
        assert control_plane.request("GET", f"{PG_PATH}/{name}")["status"]["phase"] == "Running"
        missing = await api.patch_pod_group_status(
            "default", f"{name}-missing", PodGroupPhase.RUNNING, 0, 0
        )
        assert missing is Write.GONE
    finally:
        delete_quietly(control_plane, f"{PG_PATH}/{name}")


async def test_nominated_node_is_set_and_cleared(
    control_plane: ControlPlane, api: KubeApi, name: str
) -> None:
    # A pending pod of a scheduler nobody runs: nothing else touches it.
    control_plane.create_pod(name, gpus=8, scheduler=f"nobody-{name}")
    path = f"{PODS}/{name}"
    try:

        def nominated() -> str | None:
            value = control_plane.request("GET", path)["status"].get("nominatedNodeName")
            return None if value is None else str(value)

        assert nominated() is None
        assert await api.set_nominated_node("default", name, "gpu-node-7") is Write.DONE
        assert nominated() == "gpu-node-7"
        assert await api.set_nominated_node("default", name, None) is Write.DONE
        assert nominated() is None
        assert await api.set_nominated_node("default", name, "gpu-node-8") is Write.DONE
        assert await api.set_nominated_node("default", name, "") is Write.DONE
        assert nominated() is None
        assert await api.set_nominated_node("default", f"{name}-x", "n") is Write.GONE
    finally:
        delete_quietly(control_plane, path)


def quiet_node(name: str) -> dict[str, Any]:
    """A KWOK node no scheduler places pods on (cordoned and tainted); this test binds its
    pods itself."""
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
        },
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "topo-scheduler.io/test", "effect": "NoSchedule"}],
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def running_pod(name: str, node: str, app: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"key": "topo-scheduler.io/test", "operator": "Exists"}],
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


async def test_evict_honours_disruption_budgets(
    control_plane: ControlPlane, api: KubeApi, name: str
) -> None:
    plane = control_plane
    plane.apply(quiet_node(name))
    victim, other = f"{name}-victim", f"{name}-other"
    try:
        uids = {}
        for pod in (victim, other):
            uids[pod] = plane.apply(running_pod(pod, name, app=name))["metadata"]["uid"]

        def ready(pod: str) -> bool:
            status = plane.request("GET", f"{PODS}/{pod}")["status"]
            conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
            return status.get("phase") == "Running" and conditions.get("Ready") == "True"

        for pod in (victim, other):
            await eventually(lambda pod=pod: ready(pod), f"{pod} running and ready (KWOK)")

        # A budget that allows no disruption, with the status its controller would write.
        pdb = plane.request(
            "POST",
            PDB_PATH,
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": name}}},
            },
        )
        plane.request(
            "PATCH",
            f"{PDB_PATH}/{name}/status",
            {
                "status": {
                    "observedGeneration": pdb["metadata"]["generation"],
                    "disruptionsAllowed": 0,
                    "currentHealthy": 2,
                    "desiredHealthy": 2,
                    "expectedPods": 2,
                }
            },
            content_type="application/merge-patch+json",
        )
        # A dry run gets the same answer (preemption asks one before evicting anything).
        dry = await api.evict("default", victim, uids[victim], dry_run=True)
        assert (dry.outcome, dry.status) == (Eviction.BLOCKED, 429)
        blocked = await api.evict("default", victim, uids[victim])
        assert (blocked.outcome, blocked.status) == (Eviction.BLOCKED, 429)
        assert (
            blocked.message == "Cannot evict pod as it would violate the pod's disruption budget."
        )
        # The apiserver checks the budget before the UID: while it allows nothing, a stale UID is
        # blocked too (GONE comes once the budget allows, below).
        stale = await api.evict("default", victim, "00000000-0000-0000-0000-000000000000")
        assert stale.outcome is Eviction.BLOCKED
        assert ready(victim) and "deletionTimestamp" not in plane.request(
            "GET", f"{PODS}/{victim}"
        ).get("metadata", {})

        plane.delete(f"{PDB_PATH}/{name}")
        # The name with another UID (a pod recreated under the same name): nothing evicted.
        stale = await api.evict("default", victim, "00000000-0000-0000-0000-000000000000")
        assert (stale.outcome, stale.status) == (Eviction.GONE, 409), stale
        assert ready(victim)

        dry = await api.evict("default", victim, uids[victim], dry_run=True)
        assert dry.outcome is Eviction.EVICTED, dry
        assert ready(victim) and "deletionTimestamp" not in plane.request(
            "GET", f"{PODS}/{victim}"
        ).get("metadata", {})  # a dry run deletes nothing
        evicted = await api.evict("default", victim, uids[victim])
        assert (evicted.outcome, evicted.status) == (Eviction.EVICTED, 201), evicted

        def gone(pod: str) -> bool:
            try:
                plane.request("GET", f"{PODS}/{pod}")
            except urllib.error.HTTPError as exc:
                return exc.code == 404
            return False

        await eventually(lambda: gone(victim), "the evicted pod to be deleted (KWOK)")
        assert not gone(other)  # exactly the one pod
        again = await api.evict("default", victim, uids[victim])
        assert (again.outcome, again.status) == (Eviction.GONE, 404)
    finally:
        delete_quietly(plane, f"{PDB_PATH}/{name}")
        for pod in (victim, other):
            delete_quietly(plane, f"{PODS}/{pod}?gracePeriodSeconds=0")
        delete_quietly(plane, f"/api/v1/nodes/{name}")


# ---- the role ------------------------------------------------------------------------------


def test_scheduler_identity_gets_the_gang_rules_and_nothing_more(
    control_plane: ControlPlane, crds: list[str]
) -> None:
    crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    allowed = [
        ("GET", f"{crd}/{POD_GROUPS.name}"),
        ("GET", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups"),
    ]
    for method, path in allowed:
        assert status_of(control_plane, method, path) == 200, path
    refused = [
        ("GET", crd),  # named CRDs only, no list
        ("GET", f"{crd}/clusterroles.rbac.authorization.k8s.io"),
        ("POST", PG_PATH),  # PodGroups are the workload's, never created ...
        ("PATCH", f"{PG_PATH}/any"),  # ... nor their spec changed
        ("DELETE", f"{PG_PATH}/any"),
        ("PUT", f"{PG_PATH}/any/status"),  # the status is patched, never updated
        ("PATCH", f"{VOLCANO_PATH}/any/status"),  # Volcano's controller owns that status
        ("POST", PDB_PATH),  # the budgets are only read (preemption ranks by them)
        ("DELETE", f"{PODS}/any"),  # pods go through the Eviction API only
    ]
    for method, path in refused:
        assert status_of(control_plane, method, path, body={}) == 403, (method, path)
