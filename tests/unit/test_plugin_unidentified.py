"""The device plugin when it cannot tell which pod is being admitted (issue 12, item 11).

Before: it picked GPUs by topology, mode strict accepted them, and nothing was reported, so the
scheduler gave those GPUs to the next pod. Now strict refuses what it cannot match to an
assignment, and adopt accepts and reports it in ``topo-scheduler.io/allocated``. A finished pod
the kubelet still lists in PodResources (kubernetes issue 119423) does not make identification
ambiguous.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from scheduler.agent.kube import AgentApi
from scheduler.agent.plugin.decide import Mode
from scheduler.core.model.objects import PodInput
from scheduler.testing.kubelet import AdmissionError
from tests.plugin_node import UUIDS, bounded, gpu_node, pod


class Published:
    """The plugin's ``publish``: what it wrote to each pod's allocated annotation."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], str] = {}
        self.changed = asyncio.Event()

    async def __call__(self, namespace: str, name: str, value: str) -> None:
        self.values[(namespace, name)] = value
        self.changed.set()

    async def wait_for(self, key: tuple[str, str]) -> dict[str, Any]:
        while key not in self.values:
            self.changed.clear()
            await self.changed.wait()
        found: dict[str, Any] = json.loads(self.values[key])
        return found


async def test_strict_refuses_gpus_for_a_pod_it_cannot_identify() -> None:
    async with gpu_node(mode=Mode.STRICT) as node:
        await node.kubelet.stop_pod_resources()  # identification fails
        p = pod("blind", ("main", 2))
        node.annotations.bind(p, {"main": [UUIDS[1], UUIDS[6]]})
        try:
            result: object = await bounded(node.kubelet.admit(p))
        except AdmissionError as exc:
            result = exc
        assert isinstance(result, AdmissionError)
        message = str(result)
        assert "FAILED_PRECONDITION" in message
        assert "no pod identified" in message
        assert "strict refuses GPUs it cannot match to an assignment" in message
        # Nothing was handed out: the GPUs are free for the pod's next attempt.
        assert set(node.kubelet.free_devices()) == set(UUIDS)


async def test_strict_refuses_a_pod_without_an_assignment() -> None:
    async with gpu_node(mode=Mode.STRICT) as node:
        p = pod("foreign", ("main", 1))
        node.annotations.pods[(p.namespace, p.name)] = {}  # bound by another scheduler
        try:
            result: object = await bounded(node.kubelet.admit(p))
        except AdmissionError as exc:
            result = exc
        assert isinstance(result, AdmissionError)
        assert "no pod with an assigned container still waiting" in str(result)


async def test_adopt_accepts_and_reports_gpus_for_a_pod_it_cannot_identify() -> None:
    published = Published()
    async with gpu_node(mode=Mode.ADOPT, publish=published) as node:
        node.annotations.error = RuntimeError("apiserver says 500")  # identification fails
        p = pod("blind", ("main", 2), ("aux", 0))
        node.annotations.bind(p, {"main": [UUIDS[1], UUIDS[6]]})
        got = await bounded(node.kubelet.admit(p))
        assert node.plugin.allocations[-1].target is None
        # Reported on the pod the kubelet lists with exactly those GPUs, as the truth.
        report = await bounded(published.wait_for(("default", "blind")))
        assert report == {"containers": [{"name": "main", "uuids": list(got["main"])}]}


async def test_a_finished_pod_still_listed_does_not_make_identification_ambiguous() -> None:
    async with gpu_node(mode=Mode.STRICT) as node:
        done = pod("done", ("main", 2))
        node.annotations.bind(done, {"main": [UUIDS[0], UUIDS[1]]})
        await bounded(node.kubelet.admit(done))
        # It finished; the kubelet frees its GPUs but still lists it, with no devices: its
        # assignment looks pending, with two free GPUs of the right count.
        node.kubelet.finish(done)
        node.annotations.finished.add(("default", "done"))
        new = pod("new", ("main", 2))
        node.annotations.bind(new, {"main": [UUIDS[4], UUIDS[5]]})
        got = await bounded(node.kubelet.admit(new))
        assert got == {"main": (UUIDS[4], UUIDS[5])}
        assert node.plugin.allocations[-1].matches is True


async def test_a_finished_pod_listed_without_the_fix_was_ambiguous() -> None:
    """The same timeline with the finished pod read as live: refused as ambiguous (the case the
    apiserver reader's phase check removes)."""
    async with gpu_node(mode=Mode.STRICT) as node:
        done = pod("done", ("main", 2))
        node.annotations.bind(done, {"main": [UUIDS[0], UUIDS[1]]})
        await bounded(node.kubelet.admit(done))
        node.kubelet.finish(done)
        new = pod("new", ("main", 2))
        node.annotations.bind(new, {"main": [UUIDS[4], UUIDS[5]]})
        try:
            result: object = await bounded(node.kubelet.admit(new))
        except AdmissionError as exc:
            result = exc
        assert isinstance(result, AdmissionError)
        assert "ambiguous: 2 pods wait for GPUs" in str(result)


async def test_the_apiserver_reader_reads_a_finished_pod_as_none() -> None:
    api = AgentApi.__new__(AgentApi)  # no client: get_pod is replaced below
    pods = {
        "running": PodInput("ns", "running", phase="Running", annotations={"a": "1"}),
        "succeeded": PodInput("ns", "succeeded", phase="Succeeded", annotations={"a": "1"}),
        "failed": PodInput("ns", "failed", phase="Failed", annotations={"a": "1"}),
    }

    async def get_pod(namespace: str, name: str) -> PodInput | None:
        return pods.get(name)

    api.get_pod = get_pod  # type: ignore[method-assign]
    assert await api.pod_annotations("ns", "running") == {"a": "1"}
    assert await api.pod_annotations("ns", "succeeded") is None
    assert await api.pod_annotations("ns", "failed") is None
    assert await api.pod_annotations("ns", "gone") is None
