"""The local control plane behaves as the scheduler needs: real watches, real Binding, real RBAC.

Each test uses its own object names; none depends on another's leftovers. Waits poll the real
apiserver until a condition holds (bounded), they never assert on durations.
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from scheduler.kube.api import KubeApi
from scheduler.kube.codec import Pod, decode_pod, pod_from_obj
from scheduler.kube.watch import RawEvent, Reflector, Status
from scheduler.testing.controlplane import ControlPlane

T = TypeVar("T")
INVENTORY = {"vendor": "nvidia", "devices": [{"index": i} for i in range(4)]}


async def eventually(check: Callable[[], Awaitable[T | None]], what: str, tries: int = 150) -> T:
    for _ in range(tries):
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"never happened: {what}")


async def test_gpu_node_becomes_ready_under_kwok(
    control_plane: ControlPlane, admin_api: ApiClient, name: str
) -> None:
    control_plane.create_gpu_node(name, INVENTORY, gpus=4)
    core = k8s.CoreV1Api(admin_api)

    async def ready() -> k8s.V1Node | None:
        node = await core.read_node(name)
        conditions = {c.type: c.status for c in node.status.conditions or []}
        return node if conditions.get("Ready") == "True" else None

    node = await eventually(ready, f"node {name} Ready")
    assert node.status.allocatable["nvidia.com/gpu"] == "4"
    assert json.loads(node.metadata.annotations["topo-scheduler.io/gpus"]) == INVENTORY


async def test_pending_pod_is_seen_by_the_schedulers_field_selector(
    control_plane: ControlPlane, admin_api: ApiClient, name: str
) -> None:
    core = k8s.CoreV1Api(admin_api)
    selector = "spec.schedulerName=topo-scheduler,spec.nodeName="
    listed = await core.list_pod_for_all_namespaces(field_selector=selector)
    control_plane.create_pod(name, gpus=1)
    control_plane.create_pod(f"{name}-other", gpus=1, scheduler="default-scheduler")
    seen: list[str] = []
    response = await core.list_pod_for_all_namespaces(
        field_selector=selector,
        watch=True,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
        _preload_content=False,
    )
    async for line in response.content:
        event = json.loads(line)
        seen.append(event["object"]["metadata"]["name"])
        if name in seen:
            break
    response.release()
    assert name in seen and f"{name}-other" not in seen
    pod = await core.read_namespaced_pod(name, "default")
    assert pod.status.phase == "Pending" and not pod.spec.node_name  # no scheduler yet


async def test_bind_with_annotations_then_a_second_bind_conflicts(
    control_plane: ControlPlane, admin_api: ApiClient, name: str
) -> None:
    control_plane.create_gpu_node(f"{name}-node", INVENTORY, gpus=4)
    created = control_plane.create_pod(name, gpus=2)
    api = KubeApi(admin_api)
    annotations = {"topo-scheduler.io/devices": "1,2", "topo-scheduler.io/assignment": "{}"}
    first = await api.bind("default", name, created["metadata"]["uid"], f"{name}-node", annotations)
    assert first.ok, first  # 201 with a Status body: the client's decoding bug is side-stepped
    second = await api.bind("default", name, created["metadata"]["uid"], f"{name}-node", {})
    assert second.status == 409
    wrong_uid = await api.bind("default", f"{name}", "not-the-uid", f"{name}-node", {})
    assert wrong_uid.status == 409  # precondition on the UID: a recreated pod is never bound

    async def running() -> Any:
        raw = await api.read_pod("default", name)
        pod = msgspec.json.decode(raw or b"{}", type=dict[str, Any])
        return pod if pod["status"].get("phase") == "Running" else None

    pod = await eventually(running, f"pod {name} Running under KWOK")
    assert pod["spec"]["nodeName"] == f"{name}-node"
    assert pod["metadata"]["annotations"]["topo-scheduler.io/devices"] == "1,2"


async def test_a_paged_list_of_pods_sees_every_pod_with_the_field_selector(
    control_plane: ControlPlane,
    admin_api: ApiClient,
    name: str,
) -> None:
    for i in range(5):
        control_plane.create_pod(f"{name}-p{i}", gpus=1, scheduler=name)
    api = KubeApi(admin_api, list_page=2)  # 5 pods: three pages at least
    selector = f"spec.schedulerName={name},spec.nodeName="
    asked: list[str] = []

    async def page(token: str) -> bytes:
        asked.append(token)
        return await api.list_pods_page(selector, token)

    listed: list[str] = []
    reflector = Reflector(
        "pods",
        Pod,
        api.list_pods,
        api.watch_pods,
        lambda pods: listed.extend(p.metadata.name for p in pods),
        lambda kind, pod: None,
        lambda p: p.metadata.resource_version,
        page_call=page,
    )
    await reflector._list()
    assert sorted(listed) == [f"{name}-p{i}" for i in range(5)]
    assert len(asked) >= 3 and asked[0] == "" and all(asked[1:])
    assert reflector.resource_version


async def test_watch_from_a_compacted_version_is_gone_and_relisting_recovers(
    control_plane: ControlPlane, admin_api: ApiClient, name: str
) -> None:
    api = KubeApi(admin_api)
    control_plane.create_pod(f"{name}-a", gpus=1)
    _compact_etcd(control_plane)
    # Version 1 must be older than both etcd's compaction and the apiserver's pods watch cache.
    # The cache answers a watch from its own ring: while no event has left the ring since its
    # LIST, it serves any version from that LIST's on. On a fresh plane the pods cache listed at
    # etcd revision 2 on v1.33 ("too old resource version: 1 (2)") but at 1 on v1.37, which then
    # streams pod -a for version 1 (correctly: it holds every pods change since), unless other
    # tests' pod churn pushed events out of the ring first. A restarted apiserver lists
    # afresh at a revision above the compaction, so version 1 is too old for either. (Killed:
    # etcd keeps the state, and a graceful stop would wait on open connections.)
    control_plane.restart_apiserver(kill=True)
    first: RawEvent | None = None
    async for line in await api.watch_pods("1", 5):
        first = msgspec.json.decode(line, type=RawEvent)
        break
    assert first is not None and first.type == "ERROR"
    status = msgspec.json.decode(first.object, type=Status)
    assert (status.code, status.reason) == (410, "Expired")

    # The reflector's own path: its first watch resumes from a stale version, gets 410, re-lists.
    seen: dict[str, str] = {}
    stale = {"left": 1}

    async def watch(version: str, timeout: int) -> Any:
        if stale["left"]:
            stale["left"] -= 1
            version = "1"
        return await api.watch_pods(version, timeout)

    def replace(pods: list[Pod]) -> None:
        for p in pods:
            seen[p.metadata.name] = "listed"

    def apply(kind: str, pod: Pod) -> None:
        seen[pod.metadata.name] = kind

    reflector = Reflector(
        "pods", Pod, api.list_pods, watch, replace, apply, lambda p: p.metadata.resource_version
    )
    task = asyncio.create_task(reflector.run())
    try:
        await eventually(_true_when(lambda: reflector.relists >= 2), "a re-list after 410")
        control_plane.create_pod(f"{name}-b", gpus=1)
        await eventually(_true_when(lambda: f"{name}-b" in seen), "the watch after re-listing")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert seen[f"{name}-a"] == "listed"


def _true_when(predicate: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return predicate()

    return check


def _compact_etcd(plane: ControlPlane) -> None:
    """Compact etcd at its current revision through its v3 JSON gateway."""

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            plane.etcd_url + path, data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            result: dict[str, Any] = json.load(resp)
            return result

    key = base64.b64encode(b"/registry").decode()
    revision = int(post("/v3/kv/range", {"key": key, "limit": 1})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": revision, "physical": True})


async def test_scheduler_identity_has_exactly_the_cluster_role(
    control_plane: ControlPlane, scheduler_api: ApiClient, name: str
) -> None:
    core = k8s.CoreV1Api(scheduler_api)
    pods = await core.list_pod_for_all_namespaces(limit=1)
    nodes = await core.list_node(limit=1)
    assert pods.kind is None or pods.items is not None
    assert nodes.items is not None
    created = control_plane.create_pod(name, gpus=0, limits={"cpu": "1"})
    control_plane.create_gpu_node(f"{name}-node", INVENTORY, gpus=4)
    bound = await KubeApi(scheduler_api).bind(
        "default", name, created["metadata"]["uid"], f"{name}-node", {}
    )
    assert bound.ok  # pods/binding: create is granted
    for forbidden in (
        core.list_secret_for_all_namespaces(),
        core.delete_node(f"{name}-node"),
        core.delete_namespaced_pod(name, "default"),
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name))),
    ):
        with pytest.raises(ApiException) as exc:
            await forbidden
        assert exc.value.status == 403


async def test_raw_pod_json_decodes_with_the_codec(
    control_plane: ControlPlane, admin_api: ApiClient, name: str
) -> None:
    created = control_plane.create_pod(
        name, gpus=2, labels={"gpu-topology": "job", "gpu-topology-replica": "2"}
    )
    raw = await KubeApi(admin_api).read_pod("default", name)
    assert raw is not None
    pod = decode_pod(raw)
    assert pod.uid == created["metadata"]["uid"]
    assert pod.containers[0].limits == {"nvidia.com/gpu": "2"}
    assert pod.labels["gpu-topology-replica"] == "2"
    assert pod_from_obj(msgspec.json.decode(raw, type=Pod)) == pod


async def test_a_watch_that_keeps_failing_backs_off_doubling_to_the_cap(
    control_plane: ControlPlane, admin_api: ApiClient
) -> None:
    """LIST works, every WATCH is refused by the apiserver (an unknown field selector: 400):
    the reflector re-lists after 0.5, 1, 2, 4, 8, 10, 10 s (named constants), never at 0.5 s
    forever. Its sleep is injected, so nothing waits for real."""
    api = KubeApi(admin_api)
    slept: list[float] = []

    async def refused_watch(version: str, timeout: int) -> Any:
        return await api.watch_pods(version, timeout, field_selector="no.such.field=x")

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 7:
            raise asyncio.CancelledError

    reflector = Reflector(
        "pods",
        Pod,
        api.list_pods,
        refused_watch,
        lambda pods: None,
        lambda kind, pod: None,
        lambda p: p.metadata.resource_version,
        sleep=sleep,
    )
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(reflector.run(), 60)
    assert slept == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert reflector.relists == 7  # each failure went back to LIST
