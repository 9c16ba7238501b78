"""deploy/ against the real apiserver: what `kubectl kustomize` renders, that every object is
accepted, that the pod templates pass their Pod Security Standard ("restricted"), and that the
identities of deploy/'s ServiceAccounts, bound only through deploy/'s own ClusterRoles and
ClusterRoleBindings, can do their job and nothing more.

There is no controller-manager on the local control plane: the Deployment, DaemonSet and
StatefulSet are stored but create no pods. The scheduler runs as a local process under the
scheduler ServiceAccount's identity instead, configured the way the Deployment configures it
(the Redis URL in TOPO_SCHEDULER_REDIS_URL, a Redis started with the Redis component's own
arguments and password). The objects this module applies are deploy/'s, identical in every
run; the fixture's role bindings are the same files, so applying them changes nothing.
"""

from __future__ import annotations

import json
import secrets
import tomllib
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from scheduler.config import load_config
from scheduler.testing.controlplane import (
    AGENT_TOKEN,
    AGENT_USER,
    SCHEDULER_TOKEN,
    SCHEDULER_USER,
    ControlPlane,
)
from tests.manifests import CLUSTER_SCOPED, NAMESPACE

from .live import (
    Scenario,
    assert_seed004_gang_on_an_nv2_pair,
    redis_like,
    seed004_nodes,
    submit_seed004_gang,
)

REPO = Path(__file__).resolve().parents[2]
TARGETS = ("deploy/", "deploy/with-redis/", "deploy/with-redis-sentinel/")
SECRET = "topo-scheduler-redis"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def rendered(control_plane: ControlPlane) -> dict[str, list[dict[str, Any]]]:
    return {
        target: [d for d in yaml.safe_load_all(control_plane.kubectl("kustomize", target).stdout)]
        for target in TARGETS
    }


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    return doc


def status_of(plane: ControlPlane, method: str, path: str, token: str, body: Any = None) -> int:
    """The HTTP status of a request made with an identity's token."""
    content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
    try:
        plane.request(method, path, body, token=token, content_type=content_type)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def applied_objects(output: str) -> dict[tuple[str, str], str]:
    """`kubectl apply` output lines (``deployment.apps/name created``) as (kind, name) -> what
    happened."""
    out = {}
    for line in output.splitlines():
        resource, _, action = line.partition(" ")
        kind_group, _, name = resource.partition("/")
        out[(kind_group.split(".")[0], name)] = action
    return out


def assert_hardened(pod: dict[str, Any]) -> None:
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"] == {"drop": ["ALL"]}
        user = ctx.get("runAsUser", security.get("runAsUser"))
        assert isinstance(user, int) and user > 0
        resources = container["resources"]
        assert resources["requests"]["cpu"] and resources["requests"]["memory"]
        assert resources["limits"]["memory"]


def secret_ref(container: dict[str, Any], variable: str) -> tuple[str, str]:
    (env,) = [e for e in container["env"] if e["name"] == variable]
    ref = env["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


# ---- what kustomize renders ---------------------------------------------------------------


def test_kustomize_renders_every_component(rendered: dict[str, list[dict[str, Any]]]) -> None:
    base = {(d["kind"], d["metadata"]["name"].split("-config-")[0]) for d in rendered["deploy/"]}
    assert base == {
        ("Namespace", NAMESPACE),
        ("ServiceAccount", "topo-scheduler"),
        ("ServiceAccount", "topo-scheduler-agent"),
        ("ClusterRole", "topo-scheduler"),
        ("ClusterRole", "topo-scheduler-agent"),
        ("ClusterRoleBinding", "topo-scheduler"),
        ("ClusterRoleBinding", "topo-scheduler-agent"),
        ("Role", "topo-scheduler"),
        ("RoleBinding", "topo-scheduler"),
        ("ConfigMap", "topo-scheduler"),
        ("Deployment", "topo-scheduler"),
        ("PodDisruptionBudget", "topo-scheduler"),
        ("Service", "topo-scheduler-metrics"),
        ("DaemonSet", "topo-scheduler-agent"),
        ("ValidatingAdmissionPolicy", "topo-scheduler-annotations"),
        ("ValidatingAdmissionPolicyBinding", "topo-scheduler-annotations"),
    }
    with_redis = {(d["kind"], d["metadata"]["name"]) for d in rendered["deploy/with-redis/"]}
    plain = {(d["kind"], d["metadata"]["name"]) for d in rendered["deploy/"]}
    assert with_redis - plain == {("StatefulSet", "redis"), ("Service", "redis")}
    with_sentinels = {
        (d["kind"], d["metadata"]["name"].split("-start-")[0])
        for d in rendered["deploy/with-redis-sentinel/"]
    }
    assert with_sentinels - plain == {
        ("StatefulSet", "redis-sentinel"),
        ("Service", "redis-sentinel"),
        ("PodDisruptionBudget", "redis-sentinel"),
        ("ConfigMap", "redis-sentinel"),
    }
    for target in ("deploy/with-redis/", "deploy/with-redis-sentinel/"):
        for doc in rendered[target]:
            if doc["kind"] in CLUSTER_SCOPED:
                assert "namespace" not in doc["metadata"], doc["metadata"]
            else:
                assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]


def test_scheduler_deployment(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["deploy/"]
    deployment = one(docs, "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 2
    assert pod["serviceAccountName"] == "topo-scheduler"
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    (container,) = pod["containers"]
    assert container["image"] == f"topo-scheduler:{VERSION}"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert secret_ref(container, "TOPO_SCHEDULER_REDIS_URL") == (SECRET, "url")
    assert_hardened(pod)
    # The generated ConfigMap (name with its content hash) is the one mounted, and holds
    # configs/scheduler.yaml.
    configmap = one(docs, "ConfigMap")
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    text = (REPO / "configs" / "scheduler.yaml").read_text()
    assert configmap["data"] == {"scheduler.yaml": text}
    assert load_config(REPO / "configs" / "scheduler.yaml").run.http_address.endswith(":8080")
    # The PDB and the metrics Service select these pods; the Service targets the HTTP port.
    pdb = one(docs, "PodDisruptionBudget")["spec"]
    assert pdb["minAvailable"] == 1 and pdb["selector"]["matchLabels"].items() <= labels.items()
    service = one(docs, "Service", "topo-scheduler-metrics")["spec"]
    assert service["selector"].items() <= labels.items()
    (port,) = service["ports"]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}


def test_agent_daemonset(rendered: dict[str, list[dict[str, Any]]]) -> None:
    daemonset = one(rendered["deploy/"], "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "topo-scheduler-agent"
    (container,) = pod["containers"]
    assert container["image"] == f"topo-scheduler:{VERSION}"
    assert container["args"][:3] == ["agent", "--node", "$(NODE_NAME)"]
    (node_name,) = [e for e in container["env"] if e["name"] == "NODE_NAME"]
    assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys and "topo-scheduler.io/agent" in keys
    # The device plugin needs the kubelet's folders (root's) and host paths: user 0, but
    # without any capability, privilege escalation or writable root filesystem.
    assert "--device-plugin" in container["args"]
    assert pod["securityContext"]["runAsUser"] == 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = container["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]} and not ctx.get("privileged")
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {
        "/var/lib/kubelet/device-plugins",
        "/var/lib/kubelet/pod-resources",
        "/etc/cdi",
        "/var/run/cdi",
    }


def test_redis_component(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["deploy/with-redis/"]
    statefulset = one(docs, "StatefulSet", "redis")["spec"]
    pod = statefulset["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--requirepass") + 1] == "$(REDISCLI_AUTH)"
    assert secret_ref(container, "REDISCLI_AUTH") == (SECRET, "password")
    (claim,) = statefulset["volumeClaimTemplates"]
    (mount,) = container["volumeMounts"]
    assert (
        mount["name"] == claim["metadata"]["name"]
        and args[args.index("--dir") + 1] == (mount["mountPath"])
    )
    assert statefulset["serviceName"] == "redis"
    assert one(docs, "Service", "redis")["spec"]["clusterIP"] == "None"
    assert_hardened(pod)


def test_redis_sentinel_component(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["deploy/with-redis-sentinel/"]
    statefulset = one(docs, "StatefulSet", "redis-sentinel")["spec"]
    pod = statefulset["template"]["spec"]
    labels = statefulset["template"]["metadata"]["labels"]
    assert statefulset["replicas"] == 3 and statefulset["serviceName"] == "redis-sentinel"
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    redis_c, sentinel_c = pod["containers"]
    assert redis_c["command"][-1] == "redis" and sentinel_c["command"][-1] == "sentinel"
    for container in (redis_c, sentinel_c):
        assert secret_ref(container, "REDISCLI_AUTH") == (SECRET, "password")
    (claim,) = statefulset["volumeClaimTemplates"]
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in redis_c["volumeMounts"]
    # The script the containers run is the generated ConfigMap's, with the settings the
    # safety argument needs (docs/operations.md "State and HA").
    (start,) = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("redis-sentinel-start-")
    ]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "start"]
    assert volume["configMap"]["name"] == start["metadata"]["name"]
    script = start["data"]["start.sh"]
    for setting in (
        "--appendonly yes",
        "--min-replicas-to-write 1 --min-replicas-max-lag 3",
        "sentinel down-after-milliseconds $MASTER_NAME 5000",
        "sentinel monitor $MASTER_NAME $master 6379 2",
        'requirepass "$REDISCLI_AUTH"',
    ):
        assert setting in script, setting
    service = one(docs, "Service", "redis-sentinel")["spec"]
    assert service["clusterIP"] == "None" and service["publishNotReadyAddresses"] is True
    assert {p["port"] for p in service["ports"]} == {6379, 26379}
    pdb = one(docs, "PodDisruptionBudget", "redis-sentinel")["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"].items() <= labels.items()
    assert_hardened(pod)
    # The scheduler is pointed at the three Sentinels by name, and that configuration parses.
    (scheduler,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in scheduler["env"]}
    assert secret_ref(scheduler, "TOPO_SCHEDULER_REDIS_URL") == (SECRET, "url")
    addresses = env["TOPO_SCHEDULER_REDIS_SENTINEL_ADDRESSES"].split(",")
    assert addresses == [
        f"redis-sentinel-{i}.redis-sentinel.{NAMESPACE}.svc:26379" for i in range(3)
    ]
    assert env["TOPO_SCHEDULER_REDIS_SENTINEL_MASTER_NAME"] == "topo-scheduler"
    assert "MASTER_NAME=topo-scheduler" in script


# ---- the real apiserver -------------------------------------------------------------------


def test_every_manifest_is_accepted_by_the_apiserver(
    control_plane: ControlPlane, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    # One target after the other: the overlays configure the same Deployment differently (the
    # Sentinel one adds its environment), so each is checked before the next is applied.
    for target in TARGETS:
        applied = applied_objects(control_plane.kubectl("apply", "-k", target).stdout)
        assert set(applied) == {
            (d["kind"].lower(), d["metadata"]["name"]) for d in rendered[target]
        }
        # The Secret docs/install.md has users create (for the Redis component: password and URL).
        password = secrets.token_hex(16)
        control_plane.apply_or_replace(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": SECRET, "namespace": NAMESPACE},
                "stringData": {
                    "password": password,
                    "url": f"redis://:{password}@redis.{NAMESPACE}.svc:6379/0",
                },
            }
        )
        stored = stored_versions(control_plane, target)
        assert set(stored) == {(d["kind"], d["metadata"]["name"]) for d in rendered[target]}
        # Applying again stores nothing new: the objects are what kustomize renders. (kubectl
        # says "configured" for the PDB every time, as its selector is patched with "replace";
        # the apiserver sees no change.)
        control_plane.kubectl("apply", "-k", target)
        assert stored_versions(control_plane, target) == stored


def stored_versions(plane: ControlPlane, target: str) -> dict[tuple[str, str], str]:
    listed = json.loads(plane.kubectl("get", "-k", target, "-o", "json").stdout)
    return {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
        for o in listed["items"]
    }


# The Pod Security Standard each workload's pods must pass. The agent's device plugin needs
# host paths (the kubelet's sockets, CDI specs): "privileged", which deploy/'s namespace says.
POD_SECURITY = {"Deployment": "restricted", "DaemonSet": "privileged", "StatefulSet": "restricted"}


def test_pod_templates_pass_their_pod_security_standard(
    control_plane: ControlPlane, rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    # Namespaces of this test's own that enforce each level; pods are created with dryRun=All,
    # so validation and PodSecurity admission run but nothing is stored.
    for level in set(POD_SECURITY.values()):
        labels = {
            "pod-security.kubernetes.io/enforce": level,
            "pod-security.kubernetes.io/enforce-version": "latest",
        }
        control_plane.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": f"{name}-{level}", "labels": labels},
            }
        )
    workloads = [
        (one(rendered["deploy/with-redis/"], kind), level) for kind, level in POD_SECURITY.items()
    ]
    workloads.append((one(rendered["deploy/with-redis-sentinel/"], "StatefulSet"), "restricted"))
    for workload, level in workloads:
        kind = workload["kind"]
        spec = dict(workload["spec"]["template"]["spec"])
        for claim in workload["spec"].get("volumeClaimTemplates", []):
            # What the StatefulSet controller adds for each claim template.
            volume_name = claim["metadata"]["name"]
            spec["volumes"] = [
                *spec.get("volumes", []),
                {
                    "name": volume_name,
                    "persistentVolumeClaim": {
                        "claimName": f"{volume_name}-{workload['metadata']['name']}-0"
                    },
                },
            ]
        namespace = f"{name}-{level}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": workload["metadata"]["name"], "namespace": namespace},
            "spec": spec,
        }
        try:
            control_plane.request("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode()
            raise AssertionError(f"{kind}'s pod template refused ({level}): {detail}") from exc


def test_service_account_identities_are_deploys(control_plane: ControlPlane) -> None:
    for token, user in ((SCHEDULER_TOKEN, SCHEDULER_USER), (AGENT_TOKEN, AGENT_USER)):
        review = control_plane.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            token=token,
        )
        assert review["status"]["userInfo"]["username"] == user
        namespace, account = user.removeprefix("system:serviceaccount:").split(":")
        binding = control_plane.request(
            "GET", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{account}"
        )
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": namespace}
        ]


# ---- the scheduler under deploy/'s role, configured like the Deployment ----------------------


@pytest.fixture
def component_redis(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> Iterator[tuple[str, int]]:
    """A redis-server started with the Redis component's own arguments and a password (as the
    Secret gives it). Yields (password, port)."""
    with redis_like(one(rendered["deploy/with-redis/"], "StatefulSet", "redis"), tmp_path) as got:
        yield got


async def test_scheduler_with_deploys_role_schedules_the_seed004_gang(
    control_plane: ControlPlane, scenario: Scenario, component_redis: tuple[str, int]
) -> None:
    control_plane.kubectl("apply", "-k", "deploy/")  # the role and binding, as rendered
    inventories = seed004_nodes(scenario)
    password, port = component_redis
    url = f"redis://:{password}@127.0.0.1:{port}/0"  # docs/install.md's URL form
    scheduler = scenario.start_scheduler(env={"TOPO_SCHEDULER_REDIS_URL": url})
    names = submit_seed004_gang(scenario)
    await assert_seed004_gang_on_an_nv2_pair(scenario, names, inventories)
    # It kept its state in the password-protected Redis it was given through the environment.
    assert any(
        line.get("event") == "store" and line.get("kind") == "redis" for line in scheduler.lines()
    )
    client = redis.Redis.from_url(url)
    try:
        assert client.keys(f"t-{scenario.id}:*")
    finally:
        client.close()
    assert scheduler.terminate() == 0


def test_scheduler_identity_is_refused_outside_its_role(control_plane: ControlPlane) -> None:
    allowed = [("GET", "/api/v1/pods?limit=1"), ("GET", "/api/v1/nodes?limit=1")]
    witness = f"/api/v1/namespaces/{NAMESPACE}/configmaps/topo-scheduler-epochs"
    assert status_of(control_plane, "GET", witness, SCHEDULER_TOKEN) in {200, 404}
    refused = [
        ("DELETE", "/api/v1/namespaces/default/pods/any"),
        ("POST", "/api/v1/namespaces/default/pods"),
        ("GET", "/api/v1/namespaces/default/secrets"),
        ("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}"),
        ("GET", "/api/v1/namespaces/default/configmaps"),
        # Its own namespace: the epoch witness only (scheduler-role.yaml).
        ("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps"),
        ("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/other"),
        ("DELETE", f"/api/v1/namespaces/{NAMESPACE}/configmaps/topo-scheduler-epochs"),
        ("PATCH", "/api/v1/nodes/any"),
        ("GET", "/api/v1/nodes/any"),  # nodes are listed and watched, never read one by one
        ("PUT", "/api/v1/namespaces/default/pods/any/status"),  # status is patched only
        ("PATCH", "/api/v1/namespaces/default/pods/any"),  # annotations come with the bind
        ("PATCH", "/api/v1/namespaces/default/events/any"),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases"),
    ]
    for method, path in allowed:
        assert status_of(control_plane, method, path, SCHEDULER_TOKEN) == 200, path
    for method, path in refused:
        status = status_of(control_plane, method, path, SCHEDULER_TOKEN, body={})
        assert status == 403, (method, path, status)


def test_agent_identity_can_annotate_a_node_and_a_pod_and_nothing_more(
    control_plane: ControlPlane, name: str
) -> None:
    control_plane.create_gpu_node(name, None, gpus=8)
    try:
        node = f"/api/v1/nodes/{name}"
        assert status_of(control_plane, "GET", node, AGENT_TOKEN) == 200
        inventory = json.dumps({"vendor": "nvidia", "devices": [{"index": 0}]})
        patch = {"metadata": {"annotations": {"topo-scheduler.io/gpus": inventory}}}
        assert status_of(control_plane, "PATCH", node, AGENT_TOKEN, patch) == 200
        stored = control_plane.request("GET", node)
        assert stored["metadata"]["annotations"]["topo-scheduler.io/gpus"] == inventory
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.probe", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": name, "apiVersion": "v1"},
            "reason": "GPUProbeFailed",
            "message": "nvidia-smi: exit status 9",
            "type": "Warning",
            "source": {"component": "topo-scheduler-agent", "host": name},
        }
        path = "/api/v1/namespaces/default/events"
        assert status_of(control_plane, "POST", path, AGENT_TOKEN, event) == 200
        # The device plugin reads one pod and patches its allocated annotation: allowed (the
        # pod does not exist, so 404 rather than 403).
        pod = "/api/v1/namespaces/default/pods/any"
        assert status_of(control_plane, "GET", pod, AGENT_TOKEN) == 404
        assert status_of(control_plane, "PATCH", pod, AGENT_TOKEN, body={}) == 404
        refused = [
            ("GET", "/api/v1/nodes"),  # get its node, not list all nodes
            ("GET", "/api/v1/pods"),  # get a pod, not list them
            ("GET", "/api/v1/namespaces/default/pods"),
            ("GET", "/api/v1/namespaces/default/secrets"),
            ("DELETE", node),
            ("PUT", node),
            ("DELETE", pod),
            ("PUT", pod),
            ("PATCH", f"{pod}/status"),
            ("POST", f"{pod}/binding"),
            ("PATCH", f"{path}/{name}.probe"),
        ]
        for method, target in refused:
            status = status_of(control_plane, method, target, AGENT_TOKEN, body={})
            assert status == 403, (method, target, status)
    finally:
        control_plane.delete(f"/api/v1/nodes/{name}")
