"""deploy/'s ValidatingAdmissionPolicy on the real apiserver: a pod cannot name its own GPUs.

deploy/base/annotation-policy.yaml lets only the scheduler's and the agent's ServiceAccounts, and
cluster admins, set, change or remove ``topo-scheduler.io/`` annotations on pods. The tenant
here is a real ServiceAccount of a namespace of its own, with a Role to create, read, update and
patch pods there and nothing more; its token comes from the TokenRequest API, so the apiserver
authenticates it the way it does any pod's ServiceAccount. The scheduler and agent identities
are those of deploy/'s ServiceAccounts (see scheduler/testing/controlplane.py).

The policy is applied as `kubectl apply -k deploy/` renders it, and stays in force for the rest
of the session: the other e2e tests run as the admin (group system:masters, exempt) and the
scheduler binds through pods/binding, so nothing they do changes under it.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client import ApiClient, Configuration

from scheduler.agent.kube import AgentApi
from scheduler.core.model.names import (
    ALLOCATED_ANNOTATION,
    ASSIGNMENT_ANNOTATION,
    DEVICES_ANNOTATION,
)
from scheduler.testing.controlplane import ControlPlane
from tests.topologies import DGX1_V100

from .live import Scenario, devices_of

REPO = Path(__file__).resolve().parents[2]
POLICY = "topo-scheduler-annotations"
# What the policy's messageExpression says after the keys it names.
WHO_MAY = (
    "may only be set, changed or removed by topo-scheduler (ServiceAccounts "
    "topo-scheduler/topo-scheduler and topo-scheduler/topo-scheduler-agent) or a cluster admin "
    "(group system:masters), not by "
)
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Tenant:
    """A ServiceAccount allowed to create, read, update and patch pods in its own namespace."""

    plane: ControlPlane
    namespace: str
    user: str
    token: str

    def attempt(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        """(HTTP status, the answer: the object, or the apiserver's Status on a refusal)."""
        content_type = MERGE_PATCH if method == "PATCH" else "application/json"
        try:
            answer = self.plane.request(
                method, path, body, token=self.token, content_type=content_type
            )
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        return 200, answer

    def pods(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"

    def create_pod(
        self, name: str, annotations: dict[str, str], dry_run: bool = False
    ) -> tuple[int, dict[str, Any]]:
        query = "?dryRun=All" if dry_run else ""
        return self.attempt("POST", self.pods() + query, pod(name, self.namespace, annotations))

    def annotate(self, name: str, annotations: dict[str, str | None]) -> tuple[int, dict[str, Any]]:
        """A merge patch of the pod's annotations (None removes one), as `kubectl annotate`."""
        patch = {"metadata": {"annotations": annotations}}
        return self.attempt("PATCH", f"{self.pods()}/{name}", patch)


def pod(
    name: str,
    namespace: str,
    annotations: dict[str, str],
    labels: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "annotations": annotations,
        },
        "spec": spec
        or {
            # No scheduler of that name runs: these pods stay pending, nobody else writes them.
            "schedulerName": "nobody",
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


def assert_denied(answer: tuple[int, dict[str, Any]], keys: set[str], user: str) -> None:
    """Refused by the policy (not by RBAC), with a message naming exactly ``keys`` and who may
    write them. The policy names the keys in no particular order."""
    status, body = answer
    assert status == 403, answer
    assert body["reason"] == "Forbidden", body
    message = str(body["message"])
    prefix = f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: "
    assert prefix in message, message
    said = message.split(prefix, 1)[1]
    assert said.startswith("annotation(s) ") and said.endswith(f" {WHO_MAY}{user}"), said
    named = said.removeprefix("annotation(s) ").split(f" {WHO_MAY}")[0]
    assert set(named.split(", ")) == keys, said


@pytest.fixture(scope="module")
def tenant(control_plane: ControlPlane) -> Iterator[Tenant]:
    namespace = f"tenant-{uuid.uuid4().hex[:8]}"
    account = "tenant"
    plane = control_plane
    plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    meta = {"name": account, "namespace": namespace}
    plane.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    rbac = "rbac.authorization.k8s.io/v1"
    plane.apply(
        {
            "apiVersion": rbac,
            "kind": "Role",
            "metadata": {"name": "pod-writer", "namespace": namespace},
            # Pod verbs of the kind the built-in "edit" role gives a namespace's developers:
            # enough to write any annotation, were it not for the policy.
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "verbs": ["create", "get", "list", "update", "patch", "delete"],
                }
            ],
        }
    )
    plane.apply(
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": {"name": "pod-writer", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-writer",
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }
    )
    issued = plane.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    token = issued["status"]["token"]
    review = plane.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        token=token,
    )
    info = review["status"]["userInfo"]
    user = f"system:serviceaccount:{namespace}:{account}"
    assert info["username"] == user and "system:masters" not in info["groups"], info
    tenant = Tenant(plane, namespace, user, token)
    # RBAC knows the new RoleBinding once its informer has seen it: wait for that, bounded.
    deadline = time.monotonic() + 30
    while (answer := tenant.attempt("GET", tenant.pods()))[0] != 200:
        assert answer[0] == 403 and time.monotonic() < deadline, answer
        time.sleep(0.1)
    try:
        yield tenant
    finally:
        # No namespace controller runs here: delete the pods; the namespace stays (Terminating
        # would be forever), empty.
        with contextlib.suppress(urllib.error.HTTPError):
            plane.request("DELETE", f"/api/v1/namespaces/{namespace}/pods")


@pytest.fixture(scope="module")
def policy(control_plane: ControlPlane, tenant: Tenant) -> str:
    """deploy/ applied as docs/install.md does, and the policy in force: a policy takes effect
    once the apiserver's informers have seen it and its binding, so wait (bounded) until the
    tenant's dry-run create of a pod naming its GPUs is refused by it. Returns that refusal's
    message."""
    applied = control_plane.kubectl("apply", "-k", "deploy/").stdout
    assert f"validatingadmissionpolicy.admissionregistration.k8s.io/{POLICY}" in applied
    assert f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{POLICY}" in applied
    stored = control_plane.request(
        "GET", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{POLICY}"
    )
    assert "namespace" not in stored["metadata"]  # cluster-scoped, as rendered
    answer: tuple[int, dict[str, Any]] = (0, {})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer = tenant.create_pod("probe", {DEVICES_ANNOTATION: "0"}, dry_run=True)
        if answer[0] == 403:
            break
        assert answer[0] == 200, answer  # admitted: the policy is not loaded yet
        time.sleep(0.1)
    assert_denied(answer, {DEVICES_ANNOTATION}, tenant.user)
    return str(answer[1]["message"])


# ---- a pod writer cannot name GPUs -----------------------------------------------------------


def test_pod_writer_cannot_create_a_pod_naming_its_gpus(tenant: Tenant, policy: str) -> None:
    assert_denied(
        tenant.create_pod("mine", {DEVICES_ANNOTATION: "0,1"}), {DEVICES_ANNOTATION}, tenant.user
    )
    # Already bound, with a complete assignment of its own choosing: the same refusal, naming
    # every key it tried.
    bound = pod(
        "prebound",
        tenant.namespace,
        {DEVICES_ANNOTATION: "0,3", ASSIGNMENT_ANNOTATION: '{"node":"dgx","devices":[]}'},
        spec={"nodeName": "dgx", "containers": [{"name": "main", "image": "busybox"}]},
    )
    assert_denied(
        tenant.attempt("POST", tenant.pods(), bound),
        {DEVICES_ANNOTATION, ASSIGNMENT_ANNOTATION},
        tenant.user,
    )
    # Any key under the prefix, not only the ones the scheduler writes today.
    assert_denied(
        tenant.create_pod("future", {"topo-scheduler.io/anything": "x", "team": "a"}),
        {"topo-scheduler.io/anything"},
        tenant.user,
    )
    # Nothing was stored.
    listed = tenant.attempt("GET", tenant.pods())[1]
    assert not {"mine", "prebound", "future"} & {p["metadata"]["name"] for p in listed["items"]}


def test_pod_writer_keeps_every_other_annotation(tenant: Tenant, policy: str) -> None:
    status, created = tenant.create_pod(
        "plain", {"example.com/team": "a", "topo-scheduler.io": "x"}
    )
    assert status == 200, created  # no "/": not under the prefix
    assert_denied(
        tenant.annotate("plain", {DEVICES_ANNOTATION: "2"}), {DEVICES_ANNOTATION}, tenant.user
    )
    assert_denied(
        tenant.annotate("plain", {ALLOCATED_ANNOTATION: "{}"}), {ALLOCATED_ANNOTATION}, tenant.user
    )
    status, patched = tenant.annotate("plain", {"example.com/team": "b", "example.com/x": "y"})
    assert status == 200, patched
    annotations = patched["metadata"]["annotations"]
    assert annotations == {"example.com/team": "b", "example.com/x": "y", "topo-scheduler.io": "x"}


def test_pod_writer_cannot_change_or_remove_what_the_scheduler_wrote(
    control_plane: ControlPlane, tenant: Tenant, policy: str
) -> None:
    # As the scheduler leaves a bound pod (the admin is exempt: this is how tests pre-bind).
    written = {DEVICES_ANNOTATION: "4,7", ASSIGNMENT_ANNOTATION: '{"node":"dgx"}'}
    control_plane.apply(pod("bound", tenant.namespace, dict(written)))
    assert_denied(
        tenant.annotate("bound", {DEVICES_ANNOTATION: "0,3"}), {DEVICES_ANNOTATION}, tenant.user
    )
    assert_denied(
        tenant.annotate("bound", {DEVICES_ANNOTATION: None, ASSIGNMENT_ANNOTATION: None}),
        {DEVICES_ANNOTATION, ASSIGNMENT_ANNOTATION},
        tenant.user,
    )
    # A PUT of the whole object (UPDATE, as `kubectl replace`) that drops them: refused too.
    status, current = tenant.attempt("GET", f"{tenant.pods()}/bound")
    assert status == 200
    current["metadata"]["annotations"] = {"example.com/team": "a"}
    assert_denied(
        tenant.attempt("PUT", f"{tenant.pods()}/bound", current),
        {DEVICES_ANNOTATION, ASSIGNMENT_ANNOTATION},
        tenant.user,
    )
    # Writes that leave them as they are go through: other annotations, labels, a PUT of the
    # object as read (what `kubectl apply` of a fetched manifest amounts to).
    status, patched = tenant.annotate("bound", {"example.com/team": "a"})
    assert status == 200, patched
    status, labelled = tenant.attempt(
        "PATCH", f"{tenant.pods()}/bound", {"metadata": {"labels": {"tier": "x"}}}
    )
    assert status == 200, labelled
    status, replaced = tenant.attempt("PUT", f"{tenant.pods()}/bound", labelled)
    assert status == 200, replaced
    stored = control_plane.request("GET", f"{tenant.pods()}/bound")["metadata"]["annotations"]
    assert stored == {**written, "example.com/team": "a"}


# ---- the exempt identities -------------------------------------------------------------------


@contextlib.asynccontextmanager
async def api_client(kubeconfig: Path) -> AsyncIterator[ApiClient]:
    configuration = Configuration()
    await k8s_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    client = ApiClient(configuration)
    try:
        yield client
    finally:
        await client.close()


async def test_agent_identity_publishes_allocated_devices(
    control_plane: ControlPlane, tenant: Tenant, policy: str
) -> None:
    # deploy/'s agent role lets it get and patch pods; the policy lets it write the report.
    control_plane.apply(pod("admitted", tenant.namespace, {DEVICES_ANNOTATION: "1"}))
    report = json.dumps({"containers": [{"name": "main", "uuids": ["GPU-1"]}]})
    # The tenant may not forge the report...
    assert_denied(
        tenant.annotate("admitted", {ALLOCATED_ANNOTATION: report}),
        {ALLOCATED_ANNOTATION},
        tenant.user,
    )
    # ...the agent publishes it with the very calls its device plugin makes.
    async with api_client(control_plane.agent_kubeconfig) as client:
        api = AgentApi(client)
        await api.publish_allocated(tenant.namespace, "admitted", report)
        annotations = await api.pod_annotations(tenant.namespace, "admitted")
    assert annotations == {DEVICES_ANNOTATION: "1", ALLOCATED_ANNOTATION: report}
    # A later report replaces it: changing is exempt too, not only setting.
    report = json.dumps({"containers": [{"name": "main", "uuids": ["GPU-2"]}]})
    async with api_client(control_plane.agent_kubeconfig) as client:
        await AgentApi(client).publish_allocated(tenant.namespace, "admitted", report)
    stored = control_plane.request("GET", f"{tenant.pods()}/admitted")["metadata"]["annotations"]
    assert stored[ALLOCATED_ANNOTATION] == report


async def test_live_scheduler_binds_a_tenants_pod_with_its_annotations(
    scenario: Scenario, tenant: Tenant, policy: str
) -> None:
    inventory = {
        "vendor": "nvidia",
        "devices": [{"index": i} for i in range(8)],
        "links": DGX1_V100,
    }
    node = scenario.node("dgx", inventory, 8)
    scheduler = scenario.start_scheduler()
    spec = {
        "schedulerName": scenario.name,
        "nodeSelector": {"test": scenario.id},
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
        ],
    }
    job = pod(f"{scenario.id}-job", tenant.namespace, {}, labels={"test": scenario.id}, spec=spec)
    status, created = tenant.attempt("POST", tenant.pods(), job)
    assert status == 200, created
    bound = (await scenario.wait_bound(["job"]))["job"]
    assert bound["spec"]["nodeName"] == node
    assert len(devices_of(bound)) == 2
    assignment = json.loads(bound["metadata"]["annotations"][ASSIGNMENT_ANNOTATION])
    assert assignment["node"] == node
    assert not [e for e in scheduler.lines() if e.get("event") == "bind refused"]
    # The tenant cannot move its bound pod to other GPUs.
    other = ",".join(str(i) for i in range(8) if i not in devices_of(bound))
    assert_denied(
        tenant.annotate(f"{scenario.id}-job", {DEVICES_ANNOTATION: other}),
        {DEVICES_ANNOTATION},
        tenant.user,
    )
