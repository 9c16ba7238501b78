"""The differential e2e of issue 29: topo-scheduler against kube-scheduler v1.37.2, claim by claim.

Every claim shape of dra_shapes.py runs twice on the same plane, each time on nodes of its own: once
with kube-scheduler (the reference for what a claim means) and once with topo-scheduler, started
as a real process as the other e2e tests start it. Both must reach the recorded verdict: the
probe pod on the same kind of node, or refused by both (a shape's nodes are built so that at most
one of them can take its probe, so the node agrees exactly when the node set does).

Where both allocate, ours must pick whole GPUs at least as well connected as kube-scheduler's
first fit: ``nvlinked_pairs`` counts the pairs of the pod's GPUs joined by NVLink in the node's
topology matrix (the inventory the KWOK node carries). The probes of ``TELLING`` are built so that
first fit takes a pair over PCIe/SYS where an NVLink pair is free (GPU 0 taken, so first fit takes
GPUs 1 and 2; or a node whose NVLink pairs are four apart, ``KINDS["x"]``): there ours must be
strictly better.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scheduler.testing.controlplane import ControlPlane
from scheduler.testing.dradriver import GPU_DRIVER, NvidiaDraDriver
from scheduler.testing.kubescheduler import KubeScheduler

from .dra import KINDS, DraScene, Shape, Verdict, inventory, run_shape
from .dra_shapes import ATTR, SHAPES, gpus, pod
from .live import Scenario

GPU_0 = pod(gpus(1, f"{ATTR}.uuid.endsWith('-a-0')"))  # takes GPU 0 of the node of kind "a"

# Probes where kube-scheduler's first fit is worse connected than what is free.
TELLING: tuple[Shape, ...] = (
    Shape("nvlink-pair-after-gpu-0", "a", pod(gpus(2)), "a", before=(GPU_0,)),
    Shape("nvlink-pairs-4-after-gpu-0", "a", pod(gpus(4)), "a", before=(GPU_0,)),
    Shape("extended-2-after-gpu-0", "a", pod(nvidia_com_gpu="2"), "a", before=(GPU_0,)),
    Shape("strided-pair", "x", pod(gpus(2)), "x"),
    Shape("strided-4", "x", pod(gpus(4)), "x"),
    Shape("strided-extended-2", "x", pod(nvidia_com_gpu="2"), "x"),
    Shape("strided-claim-and-extended", "x", pod(gpus(1), nvidia_com_gpu="1"), "x"),
    Shape("strided-two-claims", "x", pod(gpus(1), gpus(1)), "x"),
)
GPU_DEVICE = re.compile(r"gpu-(\d+)")


@pytest.fixture(scope="module")
def oracle(control_plane: ControlPlane) -> Iterator[KubeScheduler]:
    with KubeScheduler(control_plane, "kube-dra-diff") as scheduler:
        yield scheduler


@pytest.fixture(scope="module")
def topo(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    """One topo-scheduler process (memory store) for the module's shapes."""
    scenario = Scenario(control_plane, Path(tmp_path_factory.mktemp("topo-dra")))
    scenario.start_scheduler()
    try:
        yield scenario
    finally:
        scenario.stop_all()


def nvlinked_pairs(scene: DraScene, shape: Shape, verdict: Verdict) -> int:
    """How many pairs of the probe's whole GPUs (over all its claims) NVLink joins, by the
    topology matrix of the node it went to."""
    kind = verdict.node.removeprefix(scene.full(""))
    links = inventory(verdict.node, KINDS[kind].gpus, KINDS[kind].stride)["links"]
    chosen = sorted(
        int(m.group(1))
        for results in verdict.devices.values()
        for _, driver, _, device in results
        if driver == GPU_DRIVER and (m := GPU_DEVICE.fullmatch(device))
    )
    return sum(links[i][j].startswith("NV") for n, i in enumerate(chosen) for j in chosen[n + 1 :])


def differential(
    control_plane: ControlPlane,
    driver: NvidiaDraDriver,
    oracle: KubeScheduler,
    topo: Scenario,
    shape: Shape,
) -> tuple[int, int]:
    """Run ``shape`` with both schedulers at once, on nodes of their own; check both reach its
    verdict; return (kube-scheduler's, ours) NVLinked pairs of the probe (0, 0 when refused)."""
    theirs, ours = DraScene(control_plane, driver), DraScene(control_plane, driver)
    try:
        with ThreadPoolExecutor(2) as pool:
            a = pool.submit(run_shape, theirs, oracle.name, shape)
            b = pool.submit(run_shape, ours, topo.name, shape)
            their_verdict, our_verdict = a.result(), b.result()
        their_kind = their_verdict.node.removeprefix(theirs.full(""))
        our_kind = our_verdict.node.removeprefix(ours.full(""))
        assert their_kind == shape.expect, f"kube-scheduler: {their_verdict}"
        assert our_kind == their_kind, (
            f"{shape.name}: kube-scheduler {their_verdict}, topo-scheduler {our_verdict}\n"
            + topo.schedulers[0].tail()
        )
        if not our_verdict.feasible:
            return 0, 0
        return nvlinked_pairs(theirs, shape, their_verdict), nvlinked_pairs(
            ours, shape, our_verdict
        )
    finally:
        theirs.remove_objects()
        ours.remove_objects()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_topo_scheduler_agrees_with_kube_scheduler_and_connects_at_least_as_well(
    control_plane: ControlPlane,
    driver: NvidiaDraDriver,
    oracle: KubeScheduler,
    topo: Scenario,
    shape: Shape,
) -> None:
    theirs, ours = differential(control_plane, driver, oracle, topo, shape)
    assert ours >= theirs, f"{shape.name}: NVLinked pairs {ours} < kube-scheduler's {theirs}"


@pytest.mark.parametrize("shape", TELLING, ids=lambda s: s.name)
def test_where_first_fit_takes_a_pcie_pair_topo_scheduler_takes_nvlink(
    control_plane: ControlPlane,
    driver: NvidiaDraDriver,
    oracle: KubeScheduler,
    topo: Scenario,
    shape: Shape,
) -> None:
    theirs, ours = differential(control_plane, driver, oracle, topo, shape)
    assert ours > theirs, f"{shape.name}: NVLinked pairs {ours}, kube-scheduler's {theirs}"
