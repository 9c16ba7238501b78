"""The live scheduler end to end: real apiserver, real Redis, real processes, restricted identity.

Every scheduler here runs as `python -m scheduler run` with the scheduler identity bound only to
deploy/base/scheduler-clusterrole.yaml, so these tests also prove that role is enough.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis.asyncio as aioredis

from scheduler.testing.redisserver import RedisServer
from tests.topologies import DGX1_V100, METAX8, SEED003

from .live import Scenario, assert_no_gpu_twice, devices_of

NV2 = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}


def text(raw: dict[Any, Any]) -> dict[str, str]:
    """A Redis hash read as bytes, as text."""
    return {k.decode(): v.decode() for k, v in raw.items()}


def dgx(uuid_prefix: str) -> dict[str, object]:
    return {
        "vendor": "nvidia",
        "model": "Tesla-V100-SXM2-32GB",
        "devices": [{"index": i, "uuid": f"GPU-{uuid_prefix}-{i}"} for i in range(8)],
        "links": DGX1_V100,
    }


async def test_seed004_gang_lands_on_one_node_on_an_nvlink_pair(
    scenario: Scenario, redis_server: RedisServer
) -> None:
    scenario.node("dgx-a", dgx("a"), 8, "aliyun.com/gpu")
    scenario.node("dgx-b", dgx("b"), 8, "aliyun.com/gpu")
    scenario.start_scheduler(redis_server.url)
    labels = scenario.gang_labels("pytorch-dist-nccl", 2)
    scenario.pod("master-0", 1, "aliyun.com/gpu", labels=labels)
    await asyncio.sleep(1)  # the gang waits for its second replica
    assert not scenario.pods()["master-0"]["spec"].get("nodeName")
    scenario.pod("worker-0", 1, "aliyun.com/gpu", labels=labels)
    pods = await scenario.wait_bound(["master-0", "worker-0"])
    master, worker = pods["master-0"], pods["worker-0"]
    assert master["spec"]["nodeName"] == worker["spec"]["nodeName"]
    pair = tuple(sorted(devices_of(master) + devices_of(worker)))
    assert pair in NV2
    assignment = json.loads(master["metadata"]["annotations"]["topo-scheduler.io/assignment"])
    gang = f"default/{scenario.id}-pytorch-dist-nccl"
    assert assignment["gang"] == gang
    assert assignment["devices"][0]["uuid"].startswith("GPU-")
    # Redis holds the gang's record, bound, and the inventories of the scenario's nodes.
    prefix = f"t-{scenario.id}"
    uids = sorted(p["metadata"]["uid"] for p in (master, worker))
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        record: dict[str, str] = {}
        for _ in range(100):  # the gang is marked bound once both binds have returned
            record = text(await client.hgetall(f"{prefix}:gang:{gang}"))
            if record.get("state") == "bound":
                break
            await asyncio.sleep(0.1)
        assert record.get("state") == "bound", record
        assert record["members"] == ",".join(uids) and record["replicas"] == "2"
        assert await client.sismember(f"{prefix}:gangs", gang)
        owners = text(await client.hgetall(f"{prefix}:gpu:{master['spec']['nodeName']}"))
        assert {v.rpartition("|")[0] for v in owners.values()} == {f"{u}|{gang}" for u in uids}
        nodes = text(await client.hgetall(f"{prefix}:nodes"))
    finally:
        await client.aclose()
    # Every GPU node of the shared control plane is stored; this scenario's two among them.
    assert {f"{scenario.id}-dgx-a", f"{scenario.id}-dgx-b"} <= set(nodes)
    stored = json.loads(nodes[f"{scenario.id}-dgx-a"])
    assert stored["vendor"] == "nvidia" and stored["model"] == "Tesla-V100-SXM2-32GB"
    assert [d["uuid"] for d in stored["devices"]] == [f"GPU-a-{i}" for i in range(8)]
    assert stored["scores"][0][3] == 200  # NV2 between GPUs 0 and 3 (DGX-1 V100)


async def test_seed003_smaller_node_and_worst_connected_gpu(scenario: Scenario) -> None:
    four = {"vendor": "nvidia", "devices": [{"index": i} for i in range(4)], "scores": SEED003}
    six = {
        "vendor": "nvidia",
        "devices": [{"index": i} for i in range(6)],
        "scores": [[0 if i == j else 100 for j in range(6)] for i in range(6)],
    }
    node1 = scenario.node("node1", four, 4)
    scenario.node("node2", six, 6)
    scenario.start_scheduler()  # embedded in-memory store
    scenario.pod("two", 2)
    pods = await scenario.wait_bound(["two"])
    assert pods["two"]["spec"]["nodeName"] == node1
    assert devices_of(pods["two"]) == [0, 3]  # a 200-pair leaving the other 200-pair free
    scenario.pod("one", 1)
    pods = await scenario.wait_bound(["one"])
    assert pods["one"]["spec"]["nodeName"] == node1 and devices_of(pods["one"]) == [1]


async def test_metax_whole_card_and_shared_sgpu_pods(scenario: Scenario) -> None:
    inventory = {
        "vendor": "metax",
        "devices": [{"index": i, "memoryMiB": 65536} for i in range(8)],
        "links": METAX8,
        "sgpuPerCard": 16,
    }
    node = scenario.node("mx", inventory, 8, "metax-tech.com/gpu")
    scenario.start_scheduler()
    scenario.pod(
        "card", 2, "metax-tech.com/gpu", annotations={"hami.io/node-scheduler-policy": "spread"}
    )
    scenario.pod(
        "sgpu",
        annotations={"metax-tech.com/sgpu-qos-policy": "fixed-share"},
        limits={
            "koordinator.sh/gpu.shared": "1",
            "koordinator.sh/gpu-core": "10",
            "koordinator.sh/gpu-memory": "1Gi",
            "metax-tech.com/sgpu": "1",
        },
    )
    pods = await scenario.wait_bound(["card", "sgpu"])
    card = devices_of(pods["card"])
    assert len(card) == 2 and {i // 4 for i in card} == {card[0] // 4}  # one MetaXLink group
    shared = json.loads(pods["sgpu"]["metadata"]["annotations"]["topo-scheduler.io/assignment"])
    assert shared["node"] == node and shared["devices"] == []
    (share,) = shared["shares"]
    assert (share["core"], share["memoryMiB"], share["sgpu"], share["qos"]) == (
        10,
        1024,
        1,
        "fixed-share",
    )
    assert share["index"] not in card


async def test_gang_that_cannot_fit_stays_pending_then_binds_when_a_node_arrives(
    scenario: Scenario, redis_server: RedisServer
) -> None:
    scenario.node("dgx-a", dgx("a"), 8)
    scenario.start_scheduler(redis_server.url)
    labels = scenario.gang_labels("big", 2)
    scenario.pod("w0", 8, labels=labels)
    scenario.pod("w1", 8, labels=labels)
    message = await scenario.wait_condition("w0")
    assert message.startswith(f"gang default/{scenario.id}-big: 2 pending replicas need 16 GPUs")
    pods = scenario.pods()
    assert not pods["w0"]["spec"].get("nodeName") and not pods["w1"]["spec"].get("nodeName")
    scenario.node("dgx-b", dgx("b"), 8)
    pods = await scenario.wait_bound(["w0", "w1"])
    assert {pods["w0"]["spec"]["nodeName"], pods["w1"]["spec"]["nodeName"]} == {
        f"{scenario.id}-dgx-a",
        f"{scenario.id}-dgx-b",
    }


async def test_deleting_a_running_pod_frees_its_gpus(scenario: Scenario) -> None:
    scenario.node("dgx-a", dgx("a"), 8)
    scenario.start_scheduler()
    scenario.pod("first", 8)
    await scenario.wait_bound(["first"])
    scenario.pod("second", 8)
    message = await scenario.wait_condition("second")
    assert "fewer than 8 free GPUs" in message
    scenario.delete_pod("first")
    pods = await scenario.wait_bound(["second"])
    assert devices_of(pods["second"]) == list(range(8))


async def test_the_device_plugins_allocated_report_is_the_truth_for_scheduler_and_redis(
    scenario: Scenario, redis_server: RedisServer
) -> None:
    two = {
        "vendor": "nvidia",
        "devices": [{"index": 0}, {"index": 1}],
        "links": [["X", "PHB"], ["PHB", "X"]],
    }
    node = scenario.node("two", two, 2)
    scheduler = scenario.start_scheduler(redis_server.url)
    scenario.pod("a", 1)
    pods = await scenario.wait_bound(["a"])
    (chosen,) = devices_of(pods["a"])
    other = 1 - chosen
    # The kubelet gave the pod the other GPU and the device plugin (mode adopt) reported it.
    report = {"containers": [{"name": "main", "uuids": [f"{node}-gpu-{other}"]}]}
    scenario.plane.request(
        "PATCH",
        f"/api/v1/namespaces/default/pods/{scenario.id}-a",
        {"metadata": {"annotations": {"topo-scheduler.io/allocated": json.dumps(report)}}},
        content_type="application/merge-patch+json",
    )
    # Separate watches may deliver b's arrival before a's update: let the update land first.
    for _ in range(300):
        if any(e.get("event") == "bound pod moved GPUs" for e in scheduler.lines()):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"the scheduler never took the report\n{scheduler.tail()}")
    scenario.pod("b", 1)
    pods = await scenario.wait_bound(["b"])
    assert devices_of(pods["b"]) == [chosen]  # the GPU the scheduler had reserved for a
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        owners = await client.hgetall(f"t-{scenario.id}:gpu:{node}")
    finally:
        await client.aclose()
    # Each GPU's owner is `<uid>|<gang>|<epoch>` (no gang here).
    assert {k: v.split("|")[:2] for k, v in text(owners).items()} == {
        str(other): [pods["a"]["metadata"]["uid"], ""],
        str(chosen): [pods["b"]["metadata"]["uid"], ""],
    }


async def test_redis_flushed_and_restart_on_empty_redis_never_give_a_gpu_twice(
    scenario: Scenario, redis_server: RedisServer
) -> None:
    scenario.node("dgx-a", dgx("a"), 8)
    scenario.node("dgx-b", dgx("b"), 8)
    first = scenario.start_scheduler(redis_server.url)
    for i in range(3):
        scenario.pod(f"a{i}", 2)
    await scenario.wait_bound([f"a{i}" for i in range(3)])
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        for key in await client.keys(f"t-{scenario.id}:*"):
            await client.delete(key)  # "flushed while running", for this test's keys only
        for i in range(3):
            scenario.pod(f"b{i}", 2)
        await scenario.wait_bound([f"b{i}" for i in range(3)])
        assert_no_gpu_twice(scenario.pods())
        assert first.terminate() == 0
        for key in await client.keys(f"t-{scenario.id}:*"):
            await client.delete(key)
        scenario.start_scheduler(redis_server.url)  # a brand-new, empty Redis
        scenario.pod("c0", 2)
        scenario.pod("c1", 8)  # cannot fit: 14 of 16 GPUs are held once c0 is bound
        await scenario.wait_bound(["c0"])
        message = await scenario.wait_condition("c1")
        assert "fewer than 8 free GPUs" in message
    finally:
        await client.aclose()
    owners = assert_no_gpu_twice(scenario.pods())
    assert sum(len(gpus) for gpus in owners.values()) == 14


async def test_leader_killed_mid_stream_standby_takes_over_without_double_allocation(
    scenario: Scenario, redis_server: RedisServer
) -> None:
    for n in range(6):
        scenario.node(f"dgx-{n}", dgx(str(n)), 8)
    a = scenario.start_scheduler(redis_server.url)
    b = scenario.start_scheduler(redis_server.url)
    for _ in range(100):
        if a.is_leader() or b.is_leader():
            break
        await asyncio.sleep(0.1)
    leader, standby = (a, b) if a.is_leader() else (b, a)
    assert leader.is_leader() and not standby.is_leader()
    names: list[str] = []
    gangs: dict[str, list[str]] = {}
    for i in range(8):  # a stream of single pods and 2-replica gangs (40 GPUs of 48)
        scenario.pod(f"s{i}", 1 + i % 2)
        names.append(f"s{i}")
        job = f"job{i}"
        gangs[job] = [f"{job}-r0", f"{job}-r1"]
        for r in gangs[job]:
            scenario.pod(r, 2, labels=scenario.gang_labels(job, 2))
            names.append(r)
        if i == 3:
            leader.kill9()  # in the middle of binding
    pods = await scenario.wait_bound(names, tries=400)
    assert standby.is_leader()
    assert_no_gpu_twice(pods)
    for job, members in gangs.items():
        assert all(pods[m]["spec"].get("nodeName") for m in members), job
    assert standby.terminate() == 0
    events = [e.get("event") for e in standby.lines()]
    assert "reconciled store" in events and "stopped" in events


async def test_a_resource_the_nodes_allocatable_lacks_waits_until_offered(
    scenario: Scenario,
) -> None:
    """The node's device plugin registers topo-scheduler.io/gpu only: a pod asking nvidia.com/gpu
    would be refused by the kubelet, so it stays Pending with the reason until the node's
    allocatable offers it; a pod asking aliyun.com/gpu waits until a node offering it appears."""
    node = scenario.node("plugin", dgx("p"), 8, "topo-scheduler.io/gpu")
    scenario.start_scheduler()
    scenario.pod("nv", 2)
    scenario.pod("ali", 1, "aliyun.com/gpu")
    message = await scenario.wait_condition("nv", "1 has too little allocatable nvidia.com/gpu")
    # Every other node of the shared control plane fails a Kubernetes filter first (the
    # scenario's node selector, or another test's taint or cordon): only this node is counted
    # by the GPU rules, and it for its allocatable.
    parts = message.removesuffix(".").split(": ", 1)[1].split(", ")
    counted_by_gpu_rules = [p for p in parts if "allocatable" in p or "free GPU" in p]
    assert message.startswith("0/") and counted_by_gpu_rules == [
        "1 has too little allocatable nvidia.com/gpu"
    ], message
    await scenario.wait_condition("ali", "1 has too little allocatable aliyun.com/gpu")
    pods = scenario.pods()
    assert not pods["nv"]["spec"].get("nodeName") and not pods["ali"]["spec"].get("nodeName")
    # The device plugin now registers nvidia.com/gpu too (as the admin: the kubelet's write).
    scenario.plane.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        {"status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}},
        content_type="application/merge-patch+json",
    )
    pods = await scenario.wait_bound(["nv"])
    assert pods["nv"]["spec"]["nodeName"] == node and len(devices_of(pods["nv"])) == 2
    assert not pods["ali"]["spec"].get("nodeName")
    other = scenario.node("aliyun", dgx("q"), 8, "aliyun.com/gpu")
    pods = await scenario.wait_bound(["ali"])
    assert pods["ali"]["spec"]["nodeName"] == other
