"""The device plugin against the test kubelet, over real unix sockets and the real protocol.

Each test runs one node (tests/plugin_node.py): the test kubelet, our plugin, and the pods'
annotations as the scheduler wrote them. Hangs are detected with a generous asyncio.wait_for
bound, never with timing assertions.
"""

from __future__ import annotations

import asyncio
import socket

import grpc
import grpc.aio
import pytest

from scheduler.agent.plugin import rpc
from scheduler.agent.plugin.decide import Mode
from scheduler.agent.plugin.protos import deviceplugin_pb2 as dp
from scheduler.agent.plugin.server import Injection
from scheduler.testing.kubelet import AdmissionError
from tests.plugin_node import RESOURCE, UUIDS, bounded, gpu_node, pod


async def test_registers_after_serving_and_reports_devices() -> None:
    async with gpu_node() as node:
        kubelet = node.kubelet
        assert len(kubelet.registrations) == 1
        request = kubelet.registrations[0]
        assert request.version == "v1beta1"
        assert request.resource_name == RESOURCE
        assert request.endpoint == "topo-scheduler.sock"
        assert kubelet.plugin is not None
        options = await bounded(kubelet.plugin.get_device_plugin_options(dp.Empty()))
        assert options.get_preferred_allocation_available
        assert not options.pre_start_required
        assert kubelet.devices.health == dict.fromkeys(UUIDS, "Healthy")


async def test_devices_report_no_numa_topology() -> None:
    async with gpu_node() as node:
        stream = node.kubelet.plugin.list_and_watch(dp.Empty())
        try:
            first = await bounded(stream.read())
        finally:
            stream.cancel()
        assert isinstance(first, dp.ListAndWatchResponse)
        assert [d.ID for d in first.devices] == UUIDS
        assert not any(d.HasField("topology") for d in first.devices)


async def test_health_change_reaches_the_kubelet() -> None:
    async with gpu_node() as node:
        kubelet = node.kubelet
        node.plugin.set_health(UUIDS[3], False)
        await bounded(kubelet.wait_for(lambda: kubelet.devices.health[UUIDS[3]] == "Unhealthy"))
        assert UUIDS[3] not in kubelet.free_devices()
        node.plugin.set_health(UUIDS[3], True)
        await bounded(kubelet.wait_for(lambda: kubelet.devices.health[UUIDS[3]] == "Healthy"))


async def test_registers_again_when_the_kubelet_restarts() -> None:
    async with gpu_node() as node:
        kubelet = node.kubelet
        for restarts in (1, 2):
            await kubelet.restart()  # deletes every socket in the folder, ours included
            await bounded(kubelet.wait_for(lambda n=restarts: len(kubelet.registrations) == n + 1))
            await bounded(kubelet.wait_for(lambda: len(kubelet.devices.health) == 8))
        assert node.plugin.socket_path.is_socket()
        p = pod("after-restart", ("main", 2))
        node.annotations.bind(p, {"main": [UUIDS[1], UUIDS[5]]})
        assert await bounded(kubelet.admit(p)) == {"main": (UUIDS[1], UUIDS[5])}


async def test_list_and_watch_streams_never_block_other_calls() -> None:
    # Regression test for thread starvation: several endless ListAndWatch streams are open
    # (the kubelet's and ours) while many GetPreferredAllocation and Allocate calls run at once.
    # Mode adopt: nobody is being admitted, so strict would refuse every Allocate.
    async with gpu_node(mode=Mode.ADOPT) as node:
        plugin = node.kubelet.plugin
        streams = [plugin.list_and_watch(dp.Empty()) for _ in range(20)]
        try:
            for s in streams:
                await bounded(s.read())
            request = dp.PreferredAllocationRequest(
                container_requests=[
                    dp.ContainerPreferredAllocationRequest(
                        available_deviceIDs=UUIDS, allocation_size=2
                    )
                ]
            )
            allocate = dp.AllocateRequest(
                container_requests=[dp.ContainerAllocateRequest(devices_ids=UUIDS[:2])]
            )
            calls = [plugin.get_preferred_allocation(request) for _ in range(30)]
            calls += [plugin.allocate(allocate) for _ in range(30)]
            answers = await bounded(asyncio.gather(*calls))
        finally:
            for s in streams:
                s.cancel()
        assert all(len(a.container_responses) == 1 for a in answers)


async def test_pods_admitted_out_of_bind_order_get_their_own_gpus() -> None:
    async with gpu_node() as node:
        a = pod("a", ("main", 2))
        b = pod("b", ("main", 1))
        c = pod("c", ("main", 4))
        # Bound in order a, b, c; every assignment is in the apiserver before any admission.
        node.annotations.bind(a, {"main": [UUIDS[0], UUIDS[3]]})
        node.annotations.bind(b, {"main": [UUIDS[2]]})
        node.annotations.bind(c, {"main": [UUIDS[4], UUIDS[5], UUIDS[6], UUIDS[7]]})
        assert await bounded(node.kubelet.admit(c)) == {"main": tuple(UUIDS[4:8])}
        assert await bounded(node.kubelet.admit(a)) == {"main": (UUIDS[0], UUIDS[3])}
        assert await bounded(node.kubelet.admit(b)) == {"main": (UUIDS[2],)}
        assert all(r.matches for r in node.plugin.allocations)


async def test_two_gpu_containers_each_get_their_own_set() -> None:
    async with gpu_node() as node:
        p = pod("two", ("trainer", 2), ("sidecar", 0), ("evaluator", 1))
        node.annotations.bind(p, {"trainer": [UUIDS[6], UUIDS[7]], "evaluator": [UUIDS[1]]})
        got = await bounded(node.kubelet.admit(p))
        assert got == {"trainer": (UUIDS[6], UUIDS[7]), "evaluator": (UUIDS[1],)}


async def test_old_assignment_without_containers_goes_to_the_one_gpu_container() -> None:
    async with gpu_node() as node:
        p = pod("old", ("init-free", 0), ("main", 2))
        node.annotations.bind(p, devices=[UUIDS[2], UUIDS[3]])
        assert await bounded(node.kubelet.admit(p)) == {"main": (UUIDS[2], UUIDS[3])}


async def _stale_assignment(mode: Mode) -> tuple[object, object]:
    async with gpu_node(mode=mode) as node:
        holder = pod("holder", ("main", 2))
        node.annotations.bind(holder, {"main": [UUIDS[0], UUIDS[3]]})
        await bounded(node.kubelet.admit(holder))
        # A stale or foreign annotation names GPUs another pod already holds.
        stale = pod("stale", ("main", 2))
        node.annotations.bind(stale, {"main": [UUIDS[0], UUIDS[3]]})
        try:
            result: object = await bounded(node.kubelet.admit(stale))
        except AdmissionError as exc:
            result = exc
        return result, node.plugin.allocations[-1]


async def test_strict_refuses_a_device_set_that_differs_from_the_assignment() -> None:
    result, _ = await _stale_assignment(Mode.STRICT)
    assert isinstance(result, AdmissionError)
    message = str(result)
    assert "FAILED_PRECONDITION" in message
    assert "pod default/stale container main" in message
    assert f"the scheduler assigned {UUIDS[0]}, {UUIDS[3]}" in message
    assert "strict" in message


async def test_adopt_accepts_the_kubelets_devices_and_records_them() -> None:
    result, record = await _stale_assignment(Mode.ADOPT)
    assert isinstance(result, dict)
    got = result["main"]
    assert len(got) == 2 and not {UUIDS[0], UUIDS[3]} & set(got)
    assert record.matches is False  # type: ignore[attr-defined]
    assert record.devices == got  # type: ignore[attr-defined]
    assert record.target.describe() == "pod default/stale container main"  # type: ignore[attr-defined]


async def test_without_pod_resources_the_answer_is_a_topology_choice_not_an_error() -> None:
    async with gpu_node(mode=Mode.ADOPT) as node:
        await node.kubelet.stop_pod_resources()
        p = pod("blind", ("main", 2))
        node.annotations.bind(p, {"main": [UUIDS[1], UUIDS[6]]})
        got = await bounded(node.kubelet.admit(p))
        best = node.inventory.topology.best_set(0xFF, 2)
        assert best is not None
        assert got == {"main": tuple(UUIDS[i] for i in best.indices)}
        assert node.plugin.allocations[-1].matches is None


async def test_slow_pod_resources_and_apiserver_still_answer_in_time() -> None:
    async with gpu_node(mode=Mode.ADOPT, identify_timeout=0.2) as node:
        node.kubelet.pod_resources_delay = 5.0
        p = pod("slow", ("main", 1))
        node.annotations.bind(p, {"main": [UUIDS[0]]})
        got = await asyncio.wait_for(node.kubelet.admit(p), 3.0)
        assert len(got["main"]) == 1
        node.kubelet.pod_resources_delay = 0.0
        node.annotations.delay = 5.0
        q = pod("slow-api", ("main", 1))
        node.annotations.bind(q, {"main": [UUIDS[7]]})
        got = await asyncio.wait_for(node.kubelet.admit(q), 3.0)
        assert len(got["main"]) == 1


async def test_apiserver_errors_end_in_a_topology_choice_not_an_error() -> None:
    async with gpu_node(mode=Mode.ADOPT) as node:
        node.annotations.error = RuntimeError("apiserver says 500")
        p = pod("unreadable", ("main", 1))
        node.annotations.bind(p, {"main": [UUIDS[2]]})
        got = await bounded(node.kubelet.admit(p))
        assert len(got["main"]) == 1
        assert node.plugin.allocations[-1].matches is None


async def test_pods_are_read_about_once_per_admission() -> None:
    async with gpu_node() as node:
        bystanders = [pod(f"cpu-{i}", ("main", 0)) for i in range(10)]
        for b in bystanders:
            node.annotations.pods[(b.namespace, b.name)] = {}  # not ours: no assignment
            await bounded(node.kubelet.admit(b))
        for i in range(4):
            p = pod(f"gpu-{i}", ("main", 2))
            node.annotations.bind(p, {"main": UUIDS[2 * i : 2 * i + 2]})
            await bounded(node.kubelet.admit(p))
        # Each bystander is read once (then known not to be ours); each GPU pod once in
        # GetPreferredAllocation and once in Allocate, and never again once it has its GPUs.
        assert node.annotations.reads == 10 + 4 * 2


@pytest.mark.parametrize("injection", [Injection.CDI, Injection.ENV])
async def test_allocate_injects_cdi_devices_or_the_env(injection: Injection) -> None:
    async with gpu_node(mode=Mode.ADOPT, injection=injection) as node:
        answer = await bounded(
            node.kubelet.plugin.allocate(
                dp.AllocateRequest(
                    container_requests=[dp.ContainerAllocateRequest(devices_ids=UUIDS[2:4])]
                )
            )
        )
        response = answer.container_responses[0]
        if injection is Injection.CDI:
            assert [d.name for d in response.cdi_devices] == [
                f"nvidia.com/gpu={UUIDS[2]}",
                f"nvidia.com/gpu={UUIDS[3]}",
            ]
            assert not response.envs
        else:
            assert dict(response.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{UUIDS[2]},{UUIDS[3]}"}
            assert not response.cdi_devices


async def test_registration_is_retried_until_the_kubelet_serves() -> None:
    async with gpu_node() as node:
        kubelet = node.kubelet
        await kubelet.stop()
        # A stale kubelet.sock that nobody serves: registering fails, and is retried.
        path = kubelet.plugin_dir / "kubelet.sock"
        path.unlink(missing_ok=True)
        with socket.socket(socket.AF_UNIX) as stale:
            stale.bind(str(path))
        await asyncio.sleep(0.3)
        assert len(kubelet.registrations) == 1
        path.unlink()
        await kubelet.start()
        await bounded(kubelet.wait_for(lambda: len(kubelet.registrations) == 2))


async def test_pre_start_container_answers() -> None:
    async with gpu_node() as node:
        channel = grpc.aio.insecure_channel(rpc.unix_target(str(node.plugin.socket_path)))
        async with channel:
            client = rpc.DevicePluginClient(channel)
            answer = await bounded(
                client.pre_start_container(dp.PreStartContainerRequest(devices_ids=UUIDS[:1]))
            )
        assert isinstance(answer, dp.PreStartContainerResponse)
