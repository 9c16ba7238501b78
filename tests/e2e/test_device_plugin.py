"""The scheduler's choice made real on the node: live scheduler, real apiserver, our device plugin.

The live scheduler binds pods on a KWOK node; then the test kubelet (the kubelet's side of the
device plugin protocol, scheduler/testing/kubelet.py) admits them through our plugin, which reads
each pod's assignment from the real apiserver. No kubelet runs here, so admission order is ours
to choose: it is deliberately not the bind order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio.client import ApiClient

from scheduler.kube.api import KubeApi
from scheduler.testing.kubelet import Container, Pod
from tests.plugin_node import RESOURCE, UUIDS, bounded, gpu_node
from tests.topologies import DGX1_V100

from .live import Scenario

NV2 = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}


def assigned(pod: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Container name -> the UUIDs the scheduler assigned it (the bind's annotation)."""
    record = json.loads(pod["metadata"]["annotations"]["topo-scheduler.io/assignment"])
    return {c["name"]: tuple(c["uuids"]) for c in record["containers"]}


def kubelet_pod(pod: dict[str, Any]) -> Pod:
    containers = tuple(
        Container(c["name"], int(c["resources"]["limits"].get(RESOURCE, "0")))
        for c in pod["spec"]["containers"]
    )
    return Pod(pod["metadata"]["namespace"], pod["metadata"]["name"], containers)


async def test_pods_admitted_out_of_bind_order_get_exactly_their_assigned_gpus(
    scenario: Scenario, admin_api: ApiClient
) -> None:
    inventory = {
        "vendor": "nvidia",
        "devices": [{"index": i, "uuid": u} for i, u in enumerate(UUIDS)],
        "links": DGX1_V100,
    }
    scenario.node("dgx", inventory, 8, RESOURCE)
    scenario.start_scheduler()
    gang = scenario.gang_labels("ddp", 2)
    scenario.pod("single", 1, RESOURCE)
    scenario.pod("pair", 2, RESOURCE)
    scenario.pod("two-containers", containers={"a": {RESOURCE: "1"}, "b": {RESOURCE: "2"}})
    scenario.pod("replica-0", 1, RESOURCE, labels=gang)
    scenario.pod("replica-1", 1, RESOURCE, labels=gang)
    names = ["single", "pair", "two-containers", "replica-0", "replica-1"]
    pods = await scenario.wait_bound(names)

    api = KubeApi(admin_api)

    async def get_pod(namespace: str, name: str) -> Mapping[str, str] | None:
        pod = await api.get_pod(namespace, name)
        return None if pod is None else pod.annotations

    got: dict[str, dict[str, tuple[str, ...]]] = {}
    async with gpu_node(get_pod=get_pod) as node:
        for name in reversed(names):  # the kubelet admits in its own order, not bind order
            got[name] = await bounded(node.kubelet.admit(kubelet_pod(pods[name])))

    for name in names:
        assert got[name] == assigned(pods[name]), name
    every = [u for devices in got.values() for uuids in devices.values() for u in uuids]
    assert len(every) == len(set(every)) == 8  # every GPU, none to two containers
    joint = sorted(UUIDS.index(got[r]["main"][0]) for r in ("replica-0", "replica-1"))
    assert tuple(joint) in NV2  # the gang's replicas talk over NVLink
    (pair,) = got["pair"].values()
    assert tuple(sorted(UUIDS.index(u) for u in pair)) in NV2
    assert set(got["two-containers"]) == {"a", "b"}
