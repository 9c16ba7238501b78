"""The local control plane for end-to-end tests: one per test session; and Helm.

The fixture builds what is missing (tools/k8s/build.sh; a cold build takes many minutes), starts
etcd, kube-apiserver and KWOK, and stops them at the end of the session whatever happens. A failed
build or start fails the tests with its message; it never turns into skipped tests. The same goes
for Helm (tools/helm/build.sh).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client import ApiClient, Configuration

from scheduler.kube.podgroups import POD_GROUPS, VOLCANO_POD_GROUPS
from scheduler.testing.controlplane import (
    ControlPlane,
    ControlPlaneError,
    build_binaries,
)
from scheduler.testing.dradriver import NvidiaDraDriver

from .dra import DraScene
from .live import VOLCANO_CRD, Scenario

HELM_BUILD = Path(__file__).resolve().parents[2] / "tools" / "helm" / "build.sh"


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """The helm binary tools/helm/build.sh builds (only when it is not cached)."""
    proc = subprocess.run(["bash", str(HELM_BUILD)], stdout=subprocess.PIPE, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    for line in lines[:-1]:
        print(line, file=sys.stderr)
    if proc.returncode != 0 or not lines:
        pytest.fail(f"cannot build Helm: tools/helm/build.sh failed (exit {proc.returncode})")
    return Path(lines[-1]) / "helm"


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    try:
        bin_dir = build_binaries()
    except ControlPlaneError as exc:
        pytest.fail(f"cannot build the local control plane: {exc}", pytrace=False)
    plane = ControlPlane(bin_dir, tmp_path_factory.mktemp("k8s"))
    try:
        plane.start()
    except ControlPlaneError as exc:
        plane.stop()
        pytest.fail(f"cannot start the local control plane: {exc}", pytrace=False)
    # The scheduler and agent identities get exactly deploy/'s ClusterRoles, through deploy/'s
    # own ClusterRoleBindings (applied unmodified).
    plane.grant_scheduler_role()
    plane.grant_agent_role()
    try:
        yield plane
    finally:
        plane.stop()


async def _client(kubeconfig: Path) -> ApiClient:
    configuration = Configuration()
    await k8s_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    return ApiClient(configuration)


@pytest.fixture
async def admin_api(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    client = await _client(control_plane.admin_kubeconfig)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def scheduler_api(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    client = await _client(control_plane.scheduler_kubeconfig)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def name() -> str:
    """A unique name per test: no test depends on another's leftovers."""
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def scenario(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Scenario]:
    """A test's own scheduler name, nodes, pods and Redis prefix; its schedulers die with it,
    and its pods and nodes leave the plane."""
    s = Scenario(control_plane, tmp_path)
    try:
        yield s
    finally:
        s.stop_all()
        s.remove_objects()


@pytest.fixture(scope="module")
def pod_group_crds(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    """Both PodGroup CRDs, Established: deploy/optional's scheduler-plugins one (left installed,
    as other tests expect it) and the Volcano stand-in, deleted again at the module's end (other
    tests expect a plane without Volcano)."""
    volcano = tmp_path_factory.mktemp("crds") / "volcano-crd.yaml"
    volcano.write_text(yaml.safe_dump(VOLCANO_CRD))
    names = control_plane.apply_crds() + control_plane.apply_crds((volcano,))
    assert names == [POD_GROUPS.name, VOLCANO_POD_GROUPS.name]
    try:
        yield names
    finally:
        control_plane.delete_crd(VOLCANO_POD_GROUPS.name)


@pytest.fixture(scope="module")
def driver(control_plane: ControlPlane) -> Iterator[NvidiaDraDriver]:
    """The test DRA driver, its DeviceClasses installed for the module that asks for it and
    removed after it (``gpu.nvidia.com`` backs ``nvidia.com/gpu``: other tests expect a plane
    without it)."""
    dra = NvidiaDraDriver(control_plane)
    dra.install_classes()
    try:
        yield dra
    finally:
        dra.remove_classes()


@pytest.fixture
def scene(control_plane: ControlPlane, driver: NvidiaDraDriver) -> Iterator[DraScene]:
    """A DRA scene (nodes, slices, claims) for one test, its objects removed after it."""
    s = DraScene(control_plane, driver)
    try:
        yield s
    finally:
        s.remove_objects()
