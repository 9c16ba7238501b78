"""The Helm chart (deploy/helm/topo-scheduler/) with the Helm that tools/helm/build.sh builds.

What it renders: with default values the same objects as `kubectl kustomize deploy/with-redis/`
(but for the labels Helm adds, the config's checksum annotation and the hash kustomize puts in
the ConfigMap's name); the optional parts its values switch on. What it refuses: a wrong value,
named by its path, and the same config values the scheduler's own loader refuses. And an install
into a local control plane of its own (the session's plane holds deploy/'s objects, which Helm
would refuse to adopt): every object is stored, and the scheduler runs under the chart's
identity with the config the chart stored, like test_deploy.py runs it under deploy/'s. Its live
/metrics exports every metric the chart's Grafana dashboard queries.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from scheduler.config import ConfigError, parse_config
from scheduler.testing.controlplane import (
    SCHEDULER_TOKEN,
    SCHEDULER_USER,
    ControlPlane,
    ControlPlaneError,
    build_binaries,
)
from tests.manifests import NAMESPACE

from .live import (
    Scenario,
    SchedulerProcess,
    assert_seed004_gang_on_an_nv2_pair,
    redis_like,
    seed004_nodes,
    submit_seed004_gang,
)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "topo-scheduler"
DASHBOARD = CHART / "dashboards" / "topo-scheduler.json"
# The labels Helm's conventions add to every object's metadata (templates/_helpers.tpl).
HELM_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
)
PART_OF = {"app.kubernetes.io/part-of": "topo-scheduler"}
CONFIG_MAP = "topo-scheduler-config"
CHECKSUM = "checksum/config"


class Helm:
    """helm with its own cache, config and data folders (nothing written to the home folder)."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=REPO,
            timeout=120,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}:\n{done.stdout}{done.stderr}")
        return done

    def render(self, *args: str) -> list[dict[str, Any]]:
        out = self.run("template", "topo-scheduler", str(CHART), *args).stdout
        return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="module")
def helm(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(helm_bin, tmp_path_factory.mktemp("helm-home"))


def key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


# ---- lint and render ----------------------------------------------------------------------


def test_chart_lints_with_default_values_and_every_optional_part(helm: Helm) -> None:
    helm.run("lint", "--strict", str(CHART))
    everything = [
        "--set=podGroupCRD.enabled=true,metrics.serviceMonitor.enabled=true,dashboard.enabled=true",
        "--set=redis.sentinel.enabled=true",
    ]
    helm.run("lint", "--strict", str(CHART), *everything)


def _comparable(doc: dict[str, Any], config_maps: dict[str, str]) -> dict[str, Any]:
    """What must be equal: the object without Helm's labels and the pod templates' config
    checksum, its ConfigMaps under their plain names (``config_maps``: kustomize's name with its
    content hash -> the plain name) and the scheduler's config as the YAML it holds."""
    doc = json.loads(json.dumps(doc))
    labels = doc["metadata"].get("labels", {})
    for label in HELM_LABELS:
        labels.pop(label, None)
    if "labels" in doc["metadata"] and not labels:
        del doc["metadata"]["labels"]
    if doc["kind"] == "ConfigMap":
        name = doc["metadata"]["name"]
        doc["metadata"]["name"] = config_maps.get(name, name)
        if "scheduler.yaml" in doc["data"]:
            doc["data"]["scheduler.yaml"] = yaml.safe_load(doc["data"]["scheduler.yaml"])
    template = doc.get("spec", {}).get("template", {})
    annotations = template.get("metadata", {}).get("annotations", {})
    annotations.pop(CHECKSUM, None)
    if "annotations" in template.get("metadata", {}) and not annotations:
        del template["metadata"]["annotations"]
    for volume in template.get("spec", {}).get("volumes", []):
        if "configMap" in volume:
            name = volume["configMap"]["name"]
            volume["configMap"]["name"] = config_maps.get(name, name)
    return doc


# Values -> the kustomization that renders the same objects.
EQUIVALENT = [
    ((), "deploy/with-redis/"),
    (("--set=redis.sentinel.enabled=true",), "deploy/with-redis-sentinel/"),
]


@pytest.mark.parametrize(("values", "target"), EQUIVALENT, ids=[t for _, t in EQUIVALENT])
def test_chart_renders_what_kustomize_renders(
    helm: Helm, values: tuple[str, ...], target: str
) -> None:
    kubectl = build_binaries() / "kubectl"
    kustomized = [
        d
        for d in yaml.safe_load_all(
            subprocess.run(
                [str(kubectl), "kustomize", target],
                capture_output=True,
                text=True,
                check=True,
                cwd=REPO,
            ).stdout
        )
        if d
    ]
    charted = helm.render(*values)
    plain = {d["metadata"]["name"] for d in charted if d["kind"] == "ConfigMap"}
    hashed = {
        d["metadata"]["name"]: d["metadata"]["name"].rsplit("-", 1)[0]
        for d in kustomized
        if d["kind"] == "ConfigMap"
    }
    assert set(hashed.values()) == plain  # the same ConfigMaps, kustomize's with a hash
    ours = {key(d): _comparable(d, {}) for d in charted}
    theirs = {key(c): c for c in (_comparable(d, hashed) for d in kustomized)}
    assert sorted(ours) == sorted(theirs)
    for k in ours:
        assert ours[k] == theirs[k], k
    # What the comparison set aside is really there: Helm's labels on every object, and on both
    # pod templates a checksum of the config that changes with it (and only with it).
    for doc in charted:
        assert set(HELM_LABELS) <= doc["metadata"]["labels"].keys(), key(doc)

    def checksums(docs: list[dict[str, Any]]) -> set[str]:
        kinds = ("Deployment", "DaemonSet")
        return {
            one(docs, k)["spec"]["template"]["metadata"]["annotations"][CHECKSUM] for k in kinds
        }

    (default,) = checksums(charted)
    (other,) = checksums(helm.render(*values, "--set-json=config.run.bindConcurrency=32"))
    assert (
        checksums(helm.render(*values, "--set-json=scheduler.replicas=3")) == {default} != {other}
    )


def test_optional_parts_follow_their_values(helm: Helm) -> None:
    docs = helm.render(
        "--set=podGroupCRD.enabled=true,metrics.serviceMonitor.enabled=true",
        "--set=dashboard.enabled=true,dashboard.namespace=monitoring",
        "--set=redis.example.enabled=false,agent.enabled=false,annotationPolicy.enabled=false",
        "--set=scheduler.podDisruptionBudget.enabled=false",
    )
    kinds = {key(d) for d in docs}
    assert ("StatefulSet", "redis") not in kinds and ("Service", "redis") not in kinds
    assert not [d for d in docs if "agent" in d["metadata"]["name"]]
    assert ("ValidatingAdmissionPolicy", "topo-scheduler-annotations") not in kinds
    assert ("PodDisruptionBudget", "topo-scheduler") not in kinds
    crd = _comparable(one(docs, "CustomResourceDefinition"), {})
    optional = yaml.safe_load((REPO / "deploy" / "optional" / "podgroup-crd.yaml").read_text())
    assert crd == {**optional, "metadata": {**optional["metadata"], "labels": PART_OF}}
    monitor = one(docs, "ServiceMonitor")["spec"]
    service = one(docs, "Service", "topo-scheduler-metrics")
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["endpoints"]] == [
        p["name"] for p in service["spec"]["ports"]
    ]
    dashboard = one(docs, "ConfigMap", "topo-scheduler-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert json.loads(dashboard["data"]["topo-scheduler.json"]) == json.loads(DASHBOARD.read_text())
    # Off by default: none of them in the default rendering.
    default = {key(d) for d in helm.render()}
    assert not {k for k in default if k[0] in ("CustomResourceDefinition", "ServiceMonitor")}
    assert ("ConfigMap", "topo-scheduler-dashboard") not in default


def test_namespace_and_image_values_reach_every_object(helm: Helm) -> None:
    docs = helm.render(
        "--set=namespace.name=gpu-sched,image.repository=registry.example.com/ts,image.tag=9.9"
    )
    for doc in docs:
        if doc["kind"] == "Namespace":
            assert doc["metadata"]["name"] == "gpu-sched"
        elif "namespace" in doc["metadata"]:
            assert doc["metadata"]["namespace"] == "gpu-sched", key(doc)
    for kind in ("Deployment", "DaemonSet"):
        (container,) = one(docs, kind)["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "registry.example.com/ts:9.9"
    # The exempt users of the annotation policy and the bindings' subjects follow it.
    policy = one(docs, "ValidatingAdmissionPolicy")["spec"]["matchConditions"]
    users = {
        u for c in policy for u in re.findall(r"'(system:serviceaccount:[^']*)'", c["expression"])
    }
    assert users == {
        "system:serviceaccount:gpu-sched:topo-scheduler",
        "system:serviceaccount:gpu-sched:topo-scheduler-agent",
    }
    for binding in (d for d in docs if d["kind"] == "ClusterRoleBinding"):
        assert [s["namespace"] for s in binding["subjects"]] == ["gpu-sched"]
    # The Sentinel set finds its pods by their names in that namespace, and so does the scheduler.
    docs = helm.render("--set=namespace.name=gpu-sched,redis.sentinel.enabled=true")
    start = one(docs, "ConfigMap", "redis-sentinel-start")["data"]["start.sh"]
    assert 'DOMAIN="$SET.gpu-sched.svc"' in start
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    addresses = env["TOPO_SCHEDULER_REDIS_SENTINEL_ADDRESSES"].split(",")
    assert addresses == [f"redis-sentinel-{i}.redis-sentinel.gpu-sched.svc:26379" for i in range(3)]


# ---- what it refuses ------------------------------------------------------------------------

# (value path, JSON value, what the error names): refused by values.schema.json (a JSON pointer
# to the value, or to its parent for a field that does not exist) or by the chart's own checks
# (the dotted path). Paths under config. are refused by the scheduler's config loader too.
WRONG: list[tuple[str, Any, str]] = [
    ("config.schedulerName", "", "'/config/schedulerName'"),
    (
        "config.resources",
        {"amd": ["amd.com/gpu"]},
        "'/config/resources': additional properties 'amd'",
    ),
    ("config.resources.metax", ["nvidia.com/gpu"], "nvidia.com/gpu is also listed under"),
    ("config.defaults.gpuPolicy", "fastest", "'/config/defaults/gpuPolicy'"),
    ("config.gang.waitTimeoutSeconds", "600", "'/config/gang/waitTimeoutSeconds'"),
    ("config.gang.staleGangPolicy", "delete", "'/config/gang/staleGangPolicy'"),
    ("config.gang.staleGangGraceSeconds", -1, "'/config/gang/staleGangGraceSeconds'"),
    ("config.preemption.holdSeconds", 0, "'/config/preemption/holdSeconds'"),
    ("config.run.httpAddress", "8080", "'/config/run/httpAddress'"),
    ("config.run.bindConcurrency", 0, "'/config/run/bindConcurrency'"),
    ("config.run.redisSentinel.masterName", "m", "'/config/run/redisSentinel/addresses'"),
    ("config.run.redisSentinel.addresses", ["s:26379"], "'/config/run/redisSentinel/addresses'"),
    (
        "config.run.redisSentinel",
        {"masterName": "m", "addresses": ["s:0"]},
        "'/config/run/redisSentinel/addresses/0'",
    ),
    (
        "config.run.lease.renewSeconds",
        20,
        "config.run.lease.renewSeconds: must be above 0 and below",
    ),
    ("config.run.leaderElection", True, "'/config/run': additional properties 'leaderElection'"),
    (
        "config.topology.levels",
        [{"nodeLabel": "kubernetes.io/hostname"}],
        "'/config/topology/levels/0/nodeLabel'",
    ),
    ("config.topology.levels", [{"alias": "block"}], "'/config/topology/levels/0'"),
    (
        "config.topology.levels",
        [{"nodeLabel": "a/block", "alias": "rack"}, {"nodeLabel": "a/rack"}, {"nodeLabel": "rack"}],
        "config.topology.levels[2]: rack names two levels",
    ),
    (
        "config.topology.levels",
        [{"nodeLabel": "a/clique", "alias": "nvlink"}],
        "config.topology.levels: nvlink is a built-in level's name",
    ),
    ("config.topology.compactGangs", "yes", "'/config/topology/compactGangs'"),
    ("config.agent.pollSeconds", 0, "'/config/agent/pollSeconds'"),
    ("config.agent.nvidia.command", [""], "'/config/agent/nvidia/command/0'"),
    ("config.agent.nvidia.queryFile", "/q.csv", "'/config/agent/nvidia/topoFile'"),  # needs it
    ("config.agent.models", [{"topologyFile": "/m.yaml"}], "'/config/agent/models/0'"),  # no name
    ("config.agent.devicePlugin.mode", "loose", "'/config/agent/devicePlugin/mode'"),
    ("config.agent.devicePlugin.resourceName", "gpu", "'/config/agent/devicePlugin/resourceName'"),
    ("config.agent.devicePlugin.cdiKind", "nvidia.com", "'/config/agent/devicePlugin/cdiKind'"),
    ("config.agent.devicePlugin.socketName", "a/b.sock", "'/config/agent/devicePlugin/socketName'"),
    (
        "config.agent.devicePlugin.identifyTimeoutSeconds",
        0,
        "'/config/agent/devicePlugin/identifyTimeoutSeconds'",
    ),
    ("scheduler.replicas", 0, "'/scheduler/replicas'"),
    (
        "scheduler.podDisruptionBudget.minAvailable",
        "half",
        "'/scheduler/podDisruptionBudget/minAvailable'",
    ),
    ("image.pullPolicy", "Sometimes", "'/image/pullPolicy'"),
    ("namespace.name", "Topo_Scheduler", "'/namespace/name'"),
    ("metrics.serviceMonitor.interval", "often", "'/metrics/serviceMonitor/interval'"),
    ("redis.example.storage", "a lot", "'/redis/example/storage'"),
    ("replicas", 2, "additional properties 'replicas'"),  # not a value of this chart
]


def _with(values: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``values`` with ``path`` (dotted) set to ``value``."""
    out: dict[str, Any] = json.loads(json.dumps(values))
    *parents, last = path.split(".")
    node = out
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return out


@pytest.mark.parametrize(("path", "value", "named"), WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_value_is_refused_with_its_path(
    helm: Helm, path: str, value: Any, named: str
) -> None:
    done = helm.run(
        "template", "topo-scheduler", str(CHART), f"--set-json={path}={json.dumps(value)}",
        check=False,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout[:500]
    assert named in done.stderr, done.stderr
    if path.startswith("config."):
        values = yaml.safe_load((CHART / "values.yaml").read_text())
        config = _with(values, path, value)["config"]
        with pytest.raises(ConfigError):
            parse_config(config, "chart values")


def test_config_defaults_are_configs_scheduler_yaml_and_changes_reach_the_configmap(
    helm: Helm,
) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    original = yaml.safe_load((REPO / "configs" / "scheduler.yaml").read_text())
    assert parse_config(values["config"]) == parse_config(original)
    docs = helm.render(
        '--set-json=config.run.lease={"durationSeconds": 3, "renewSeconds": 1}',
        "--set-json=config.resources.metax=null",  # Helm drops a key set to null
        '--set-json=config.gang.staleGangPolicy="evict"',
    )
    text = one(docs, "ConfigMap", CONFIG_MAP)["data"]["scheduler.yaml"]
    config = parse_config(yaml.safe_load(text))
    assert (config.run.lease.duration_seconds, config.run.lease.renew_seconds) == (3, 1)
    assert config.gang.stale_gang_policy == "evict"
    assert "metax" not in config.resources


# ---- installed into a local control plane ---------------------------------------------------


class Installed:
    """The chart's release on its own plane: the plane and the objects `helm get manifest` lists."""

    def __init__(self, plane: ControlPlane, manifest: list[dict[str, Any]]) -> None:
        self.plane = plane
        self.manifest = manifest


@pytest.fixture(scope="module")
def installed(
    helm: Helm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Installed, Scenario, SchedulerProcess]]:
    """A control plane of its own, the chart installed into it (release in `default`, objects in
    topo-scheduler), the Secret created as NOTES.txt says, a Redis started like the chart's
    StatefulSet, and the scheduler running under the chart's ServiceAccount identity with the
    config the chart stored in its ConfigMap (a 3 s lease, set through values)."""
    workdir = tmp_path_factory.mktemp("helm-plane")
    plane = ControlPlane(build_binaries(), workdir / "k8s")
    try:
        plane.start()
    except ControlPlaneError as exc:
        plane.stop()
        pytest.fail(f"cannot start a control plane for the chart: {exc}", pytrace=False)
    kubeconfig = f"--kubeconfig={plane.admin_kubeconfig}"
    try:
        helm.run(
            "install", "topo-scheduler", str(CHART), kubeconfig, "--namespace=default",
            '--set-json=config.run.lease={"durationSeconds": 3, "renewSeconds": 1}',
        )  # fmt: skip
        manifest = [
            d
            for d in yaml.safe_load_all(
                helm.run("get", "manifest", "topo-scheduler", kubeconfig).stdout
            )
            if d
        ]
        state = Installed(plane, manifest)
        stored = plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/{CONFIG_MAP}")
        scenario = Scenario(plane, workdir)
        scenario.config.write_text(stored["data"]["scheduler.yaml"])
        scenario.name = parse_config(yaml.safe_load(scenario.config.read_text())).scheduler_name
        statefulset = plane.request(
            "GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/redis"
        )
        with redis_like(statefulset, workdir) as (password, port):
            plane.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "topo-scheduler-redis", "namespace": NAMESPACE},
                    "stringData": {
                        "password": password,
                        "url": f"redis://:{password}@redis.{NAMESPACE}.svc:6379/0",
                    },
                }
            )
            # The Deployment's environment, but the Redis on loopback (no cluster DNS here).
            url = f"redis://:{password}@127.0.0.1:{port}/0"
            scheduler = scenario.start_scheduler(env={"TOPO_SCHEDULER_REDIS_URL": url})
            try:
                yield state, scenario, scheduler
            finally:
                scenario.stop_all()
        helm.run("uninstall", "topo-scheduler", kubeconfig, "--namespace=default")
    finally:
        plane.stop()


def test_install_stores_every_object_the_chart_renders(
    installed: tuple[Installed, Scenario, SchedulerProcess],
) -> None:
    state, _, _ = installed
    plane = state.plane
    expected = {key(d) for d in state.manifest}
    assert ("Deployment", "topo-scheduler") in expected and ("StatefulSet", "redis") in expected
    for doc in state.manifest:
        kind, name = key(doc)
        where = doc["metadata"].get("namespace")
        namespaced = [f"--namespace={where}"] if where else []
        resource = plane.kubectl("get", kind.lower(), name, "-o", "json", *namespaced)
        obj = json.loads(resource.stdout)
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm", (kind, name)
    # The chart's scheduler identity is the plane's scheduler user, bound by the chart's binding.
    binding = plane.request(
        "GET", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/topo-scheduler"
    )
    namespace, account = SCHEDULER_USER.removeprefix("system:serviceaccount:").split(":")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    ]
    review = plane.request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "resource": "pods",
                    "subresource": "binding",
                    "verb": "create",
                }
            },
        },
        token=SCHEDULER_TOKEN,
    )
    assert review["status"]["allowed"] is True


async def test_scheduler_under_the_charts_identity_schedules_the_seed004_gang(
    installed: tuple[Installed, Scenario, SchedulerProcess],
) -> None:
    _, scenario, scheduler = installed
    inventories = seed004_nodes(scenario)
    names = submit_seed004_gang(scenario)  # with the chart's default scheduler name
    await assert_seed004_gang_on_an_nv2_pair(scenario, names, inventories)
    assert any(
        line.get("event") == "store" and line.get("kind") == "redis" for line in scheduler.lines()
    )
    # Its leader recorded its epoch in the witness ConfigMap, which only the chart's Role allows.
    witness = f"/api/v1/namespaces/{NAMESPACE}/configmaps/topo-scheduler-epochs"
    assert scenario.plane.request("GET", witness)["data"]


def _queried_metrics(dashboard: dict[str, Any]) -> set[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs and all(exprs)
    return {m for e in exprs for m in re.findall(r"\b(scheduler_[a-z_]+)\b", e)}


async def test_every_metric_the_dashboard_queries_is_exported(
    installed: tuple[Installed, Scenario, SchedulerProcess],
) -> None:
    _, _, scheduler = installed
    port = await scheduler.http_port()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    # Every series name the exposition has or, for a family without samples yet (a labelled
    # counter nobody incremented), would have.
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    exported = set()
    for family in text_string_to_metric_families(text):
        exported |= {s.name for s in family.samples}
        exported |= {family.name + s for s in suffixes.get(family.type, ())}
    queried = _queried_metrics(json.loads(DASHBOARD.read_text()))
    assert len(queried) >= 12
    assert queried <= exported, sorted(queried - exported)
