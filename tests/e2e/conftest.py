"""The local control plane for end-to-end tests: one per test session.

The fixture builds what is missing (tools/k8s/build.sh; a cold build takes many minutes), starts
etcd, kube-apiserver and KWOK, and stops them at the end of the session whatever happens. A failed
build or start fails the tests with its message; it never turns into skipped tests.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client import ApiClient, Configuration

from scheduler.testing.controlplane import ControlPlane, ControlPlaneError, build_binaries

from .live import Scenario


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
    """A test's own scheduler name, nodes, pods and Redis prefix; its schedulers die with it."""
    s = Scenario(control_plane, tmp_path)
    try:
        yield s
    finally:
        s.stop_all()
