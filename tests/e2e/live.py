"""Helpers for end-to-end tests of the live scheduler: real processes, real apiserver, real Redis.

Each test gets a Scenario: its own scheduler name, its own node label and pod label, and its own
Redis key prefix, so tests sharing the session's control plane never see each other's pods or
nodes (pods carry a nodeSelector for the scenario's nodes). The scheduler runs as a real
subprocess (`python -m scheduler run`) under the restricted scheduler identity, so it can be
SIGTERMed, or killed with SIGKILL, like in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import yaml

from scheduler.kube.podgroups import VOLCANO_POD_GROUPS
from scheduler.service.witness import DEFAULT_NAMESPACE as WITNESS_NAMESPACE
from scheduler.service.witness import NAME as WITNESS_NAME
from scheduler.testing.controlplane import (
    REQUEST_TIMEOUT_S,
    ControlPlane,
    die_with_parent,
    free_port,
)

REPO = Path(__file__).resolve().parents[2]


class SchedulerProcess:
    def __init__(
        self,
        scenario: Scenario,
        index: int,
        redis_url: str | None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.scenario = scenario
        self.log = scenario.dir / f"scheduler-{index}.log"
        args = [
            sys.executable, "-m", "scheduler", "run",
            "--config", str(scenario.config),
            "--kubeconfig", str(scenario.plane.scheduler_kubeconfig),
            "--http-address", "127.0.0.1:0",
        ]  # fmt: skip
        if redis_url:
            args += ["--redis-url", redis_url]
        env = dict(os.environ)
        env.pop("TOPO_SCHEDULER_REDIS_URL", None)
        env.update(extra_env or {})
        self.proc = subprocess.Popen(
            args,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    async def http_port(self, tries: int = 300) -> int:
        """The port the process logged for its probe/metrics server (it was started on port 0)."""
        for _ in range(tries):
            for line in self.lines():
                if line.get("event") == "http server listening":
                    return int(line["port"])
            await asyncio.sleep(0.1)
        raise AssertionError(f"scheduler never logged its HTTP port\n{self.tail()}")

    def is_leader(self) -> bool:
        events = [e.get("event") for e in self.lines()]
        became = max((i for i, e in enumerate(events) if e == "became leader"), default=-1)
        lost = max((i for i, e in enumerate(events) if e == "lost leadership"), default=-1)
        return became > lost

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def terminate(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


MERGE_PATCH = "application/merge-patch+json"


class Scenario:
    def __init__(self, plane: ControlPlane, workdir: Path) -> None:
        self.plane = plane
        self.id = uuid.uuid4().hex[:8]
        self.name = f"topo-{self.id}"
        self.dir = workdir
        self.config = workdir / "scheduler.yaml"
        self.configure()
        self.schedulers: list[SchedulerProcess] = []

    def configure(self, lease: tuple[float, float] = (3, 1), gang_wait: int = 600) -> None:
        """Write the scheduler config: leader lease (duration, renew) and gang wait timeout.
        Schedulers started afterwards use it."""
        duration, renew = lease
        self.config.write_text(
            f"schedulerName: {self.name}\n"
            f"gang: {{waitTimeoutSeconds: {gang_wait}}}\n"
            "run:\n"
            f"  redisPrefix: t-{self.id}\n"
            "  bindConcurrency: 8\n"
            f"  lease: {{durationSeconds: {duration}, renewSeconds: {renew}, retrySeconds: 0.5}}\n"
            # The control plane's kube-apiserver gives a request up after 10 s
            # (--request-timeout, controlplane.py): a new leader holds a previous leader's
            # reservations that long, not the 60 s of kube-apiserver's default.
            f"  tuning: {{bindCommitSeconds: {REQUEST_TIMEOUT_S}}}\n"
        )

    # ---- objects -----------------------------------------------------------------------------

    def node(
        self,
        name: str,
        inventory: dict[str, Any],
        gpus: int,
        resource: str = "nvidia.com/gpu",
        extra: dict[str, str] | None = None,
    ) -> str:
        full = f"{self.id}-{name}"
        self.plane.create_gpu_node(
            full, inventory, gpus=gpus, resource=resource, labels={"test": self.id},
            extra_capacity=extra,
        )  # fmt: skip
        return full

    def pod(
        self,
        name: str,
        gpus: int = 1,
        resource: str = "nvidia.com/gpu",
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        limits: dict[str, str] | None = None,
        containers: dict[str, dict[str, str]] | None = None,
        priority_class: str | None = None,
    ) -> dict[str, Any]:
        created: dict[str, Any] = self.plane.create_pod(
            f"{self.id}-{name}",
            gpus=gpus,
            resource=resource,
            scheduler=self.name,
            labels={"test": self.id, **(labels or {})},
            annotations=annotations,
            limits=limits,
            node_selector={"test": self.id},
            containers=containers,
            priority_class=priority_class,
        )
        return created

    def gang_labels(self, job: str, replicas: int) -> dict[str, str]:
        return {"gpu-topology": f"{self.id}-{job}", "gpu-topology-replica": str(replicas)}

    def pods(self) -> dict[str, dict[str, Any]]:
        listed = self.plane.request("GET", f"/api/v1/pods?labelSelector=test%3D{self.id}")
        return {p["metadata"]["name"].removeprefix(f"{self.id}-"): p for p in listed["items"]}

    def delete_pod(self, name: str) -> None:
        self.plane.delete(f"/api/v1/namespaces/default/pods/{self.id}-{name}")

    def remove_objects(self) -> None:
        """Delete this scenario's pods (at once) and nodes. Every later scheduler sees the whole
        shared plane, and what it weighs placements by (the workload the cluster holds, core/
        snapshot/fragmentation.py) must not depend on what earlier tests left there."""
        selector = f"labelSelector=test%3D{self.id}"
        self.plane.delete(f"/api/v1/namespaces/default/pods?{selector}&gracePeriodSeconds=0")
        self.plane.delete(f"/api/v1/nodes?{selector}")

    # ---- schedulers --------------------------------------------------------------------------

    def start_scheduler(
        self, redis_url: str | None = None, env: dict[str, str] | None = None
    ) -> SchedulerProcess:
        """A scheduler process; ``env`` adds environment variables (e.g. TOPO_SCHEDULER_REDIS_URL,
        as deploy/'s Deployment sets it)."""
        process = SchedulerProcess(self, len(self.schedulers), redis_url, env)
        self.schedulers.append(process)
        return process

    def stop_all(self) -> None:
        for s in self.schedulers:
            s.kill9()

    # ---- waiting and checking ----------------------------------------------------------------

    async def wait_bound(self, names: list[str], tries: int = 300) -> dict[str, dict[str, Any]]:
        for _ in range(tries):
            pods = self.pods()
            if all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in names):
                return pods
            await asyncio.sleep(0.2)
        logs = "\n".join(s.tail() for s in self.schedulers)
        unbound = [n for n in names if not self.pods().get(n, {}).get("spec", {}).get("nodeName")]
        raise AssertionError(f"pods never bound: {unbound}\n{logs}")

    async def wait_condition(self, name: str, containing: str = "", tries: int = 300) -> str:
        """The PodScheduled=False message the scheduler wrote on the pod (one that contains
        ``containing``)."""
        seen = ""
        for _ in range(tries):
            pod = self.pods().get(name, {})
            for c in pod.get("status", {}).get("conditions", []) or []:
                if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
                    seen = str(c["message"])
                    if containing in seen:
                        return seen
            await asyncio.sleep(0.2)
        raise AssertionError(f"pod {name} never got an Unschedulable condition; last: {seen!r}")


def devices_of(pod: dict[str, Any]) -> list[int]:
    raw = pod["metadata"].get("annotations", {}).get("topo-scheduler.io/devices", "")
    return [int(x) for x in raw.split(",") if x.strip()]


def assert_no_gpu_twice(pods: dict[str, dict[str, Any]]) -> dict[str, dict[int, str]]:
    """Every whole GPU is held by at most one live pod; returns node -> gpu -> pod."""
    owners: dict[str, dict[int, str]] = defaultdict(dict)
    for name, pod in pods.items():
        node = pod["spec"].get("nodeName")
        if not node or pod["metadata"].get("deletionTimestamp"):
            continue
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        assignment = json.loads(pod["metadata"]["annotations"]["topo-scheduler.io/assignment"])
        assert assignment["node"] == node, (name, assignment)
        assert [d["index"] for d in assignment["devices"]] == devices_of(pod), name
        for gpu in devices_of(pod):
            assert gpu not in owners[node], f"GPU {gpu} on {node}: {owners[node][gpu]} and {name}"
            owners[node][gpu] = name
    return owners


# A minimal stand-in for Volcano's CRD (the real one is Volcano's to ship): enough for the
# apiserver to serve scheduling.volcano.sh/v1beta1 PodGroups with a spec.minMember.
VOLCANO_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": VOLCANO_POD_GROUPS.name},
    "spec": {
        "group": VOLCANO_POD_GROUPS.group,
        "scope": "Namespaced",
        "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups"},
        "versions": [
            {
                "name": VOLCANO_POD_GROUPS.version,
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "minMember": {"type": "integer", "format": "int32"},
                                    "queue": {"type": "string"},
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


async def tail_logs(
    replicas: list[SchedulerProcess],
    marker: bytes,
    enough: Callable[[SchedulerProcess, list[dict[str, Any]]], bool],
    timeout_s: float,
    poll_s: float,
) -> SchedulerProcess | None:
    """Read the replicas' logs as they grow, every ``poll_s``, and return the first replica for
    which ``enough`` is true of its new complete lines containing ``marker`` (parsed as JSON;
    ``enough`` keeps its own count across calls, and is called after every read, new lines or
    none); None after ``timeout_s``. Reading only what was appended since the last read is what
    lets a test act within milliseconds of a log line (polling the apiserver would see a bind
    only once it is done)."""
    offsets = dict.fromkeys(replicas, 0)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for s in replicas:
            with s.log.open("rb") as f:
                f.seek(offsets[s])
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            offsets[s] += end
            lines = [json.loads(raw) for raw in chunk[:end].splitlines() if marker in raw]
            if enough(s, lines):
                return s
        await asyncio.sleep(poll_s)
    return None


async def eventually(check: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    """Poll ``check`` until it returns something true (that is returned), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def begin_history(url: str, scenario: Scenario) -> None:
    """A Redis that kept its history: its epochs have started, the last election was on this
    Redis process and its leader's wait was over (settled). On a fresh one (or one whose process
    changed, or whose last election was not settled) the first leader would wait one lease for
    a predecessor it cannot know (docs/operations.md, "State and HA") before its first
    decision. The epoch witness (scheduler/service/witness.py) names the same election, as a
    leader before this test would have recorded it."""
    previous = "before-this-test|1"
    client = aioredis.Redis.from_url(url)
    prefix = f"t-{scenario.id}"
    try:
        run_id = (await client.info("server"))["run_id"]
        await client.set(f"{prefix}:epoch", 1)
        await client.set(f"{prefix}:server", run_id)
        await client.set(f"{prefix}:leader", previous)
        await client.set(f"{prefix}:settled", previous)
    finally:
        await client.aclose()
    path = f"/api/v1/namespaces/{WITNESS_NAMESPACE}/configmaps/{WITNESS_NAME}"
    try:
        scenario.plane.request(
            "PATCH", path, {"data": {scenario.name: previous}}, content_type=MERGE_PATCH
        )
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
        scenario.plane.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": WITNESS_NAME, "namespace": WITNESS_NAMESPACE},
                "data": {scenario.name: previous},
            }
        )


@contextlib.contextmanager
def redis_like(statefulset: dict[str, Any], workdir: Path) -> Iterator[tuple[str, int]]:
    """A redis-server started with a Redis StatefulSet's own command and arguments (deploy/'s
    component, the chart's example Redis) and a password, as the Secret gives it, on a free
    loopback port; ready by the container's own readiness probe, and refusing clients without
    the password. Yields (password, port)."""
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    password = secrets.token_hex(16)
    args = [a.replace("$(REDISCLI_AUTH)", password) for a in container["args"]]
    args[args.index("--dir") + 1] = str(workdir)
    port = free_port()
    log = (workdir / "redis.log").open("wb")
    proc = subprocess.Popen(
        [*container["command"], *args, "--port", str(port), "--bind", "127.0.0.1"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    try:
        cli, *command = container["readinessProbe"]["exec"]["command"]
        probe = [cli, "-p", str(port), *command]
        for _ in range(100):
            answer = subprocess.run(
                probe, capture_output=True, text=True, env={"REDISCLI_AUTH": password}
            )
            if answer.stdout.strip() == "PONG":
                break
            assert proc.poll() is None, (workdir / "redis.log").read_text()
            time.sleep(0.05)
        else:
            raise AssertionError(f"redis never answered its readiness probe: {answer}")
        no_auth = subprocess.run(probe, capture_output=True, text=True, env={})
        assert "NOAUTH" in no_auth.stdout + no_auth.stderr  # the password is required
        yield password, port
    finally:
        proc.kill()
        proc.wait(timeout=10)
        log.close()


EXAMPLES = REPO / "configs" / "examples"


def seed004_nodes(scenario: Scenario) -> dict[str, dict[str, Any]]:
    """configs/examples/dgx1-v100.yaml's DGX-1 nodes as the scenario's own (aliyun.com/gpu
    allocatable); their inventories by the example's node name."""
    inventories = {
        n["metadata"]["name"]: json.loads(n["metadata"]["annotations"]["topo-scheduler.io/gpus"])
        for n in yaml.safe_load_all((EXAMPLES / "dgx1-v100.yaml").read_text())
        if n
    }
    for node, inventory in inventories.items():
        scenario.node(node, inventory, 8, "aliyun.com/gpu")
    return inventories


def submit_seed004_gang(scenario: Scenario) -> list[str]:
    """Seed 004's 2-replica PyTorch gang from configs/examples/workload-gang.yaml, renamed into
    the scenario (its scheduler name, nodes and gang labels); the pods' names in the example."""
    gang = [
        p
        for p in yaml.safe_load_all((EXAMPLES / "workload-gang.yaml").read_text())
        if p and p["metadata"]["labels"]["gpu-topology"] == "pytorch-dist-nccl"
    ]
    assert len(gang) == 2
    names = []
    for pod in gang:
        short = pod["metadata"]["name"]
        names.append(short)
        pod["metadata"]["name"] = f"{scenario.id}-{short}"
        labels = pod["metadata"]["labels"]
        labels.update(
            scenario.gang_labels("pytorch-dist-nccl", int(labels["gpu-topology-replica"]))
        )
        labels["test"] = scenario.id
        pod["spec"]["schedulerName"] = scenario.name
        pod["spec"]["nodeSelector"] = {"test": scenario.id}
        scenario.plane.apply(pod)
    return names


async def assert_seed004_gang_on_an_nv2_pair(
    scenario: Scenario, names: list[str], inventories: dict[str, dict[str, Any]]
) -> None:
    """Both members bound to one node, on GPUs linked by NV2 (the DGX-1's best pair)."""
    pods = await scenario.wait_bound(names)
    first, second = (pods[n] for n in names)
    node = first["spec"]["nodeName"]
    assert second["spec"]["nodeName"] == node
    a, b = devices_of(first) + devices_of(second)
    links = inventories[node.removeprefix(f"{scenario.id}-")]["links"]
    assert links[a][b] == "NV2"
