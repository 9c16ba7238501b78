"""Helpers shared by the benchmarks that run on the local control plane (bench_live, bench_scale).

- ``Watch``: the local time each pod of a namespace is first seen with a node (a raw watch);
- ``RssSampler`` / ``peak_rss_mb``: a process's peak RSS (VmHWM, read from /proc);
- ``start_topo`` / ``topo_config`` / ``kill``: topo-scheduler ``run`` as a process of its own;
- ``bulk_create`` / ``bulk_delete_pods``: thousands of objects created or deleted through one
  pool of keep-alive connections with a bounded number of requests in flight
  (``ControlPlane.request`` opens a new TLS connection per call: fine for a few hundred);
- ``dgx1_dra_inventory``: the DGX-1 inventory with GPU UUIDs, for DRA-only nodes;
- ``keep_logs``, ``wait_nodes_ready``, ``clear_namespace``, ``clear_claims``, ``wait_http_ok``,
  ``metric``, ``throughput``, ``pct``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp

from scheduler.testing.controlplane import ADMIN_TOKEN, RESOURCE_API, ControlPlane, free_port
from scheduler.testing.kubescheduler import KubeScheduler
from scheduler.testing.redisserver import RedisServer
from tests.topologies import DGX1_V100

REPO = Path(__file__).resolve().parents[1]
TOPO_NAME = "topo-bench"
KUBE_NAME = "kube-bench"
LIMITS = {"cpu": "100m", "memory": "128Mi"}
DGX1_INVENTORY: dict[str, Any] = {
    "vendor": "nvidia",
    "devices": [{"index": i} for i in range(8)],
    "links": DGX1_V100,
}


def dgx1_dra_inventory(node: str) -> dict[str, Any]:
    """``DGX1_INVENTORY`` with a UUID per GPU: what the test DRA driver (dradriver.py) maps its
    devices to, and topo-scheduler maps a DRA device to its place in the NVLink matrix by."""
    devices = [{"index": i, "uuid": f"GPU-{node}-{i}"} for i in range(8)]
    return {**DGX1_INVENTORY, "devices": devices}


def _insecure_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class Watch:
    """The local time each pod of a namespace is first seen with a node (a raw watch thread).

    The apiserver closes a watch whose reader falls behind a burst of events (its watch cache
    gives a new watcher a buffer of about one second of the resource's recent event rate, only
    10 events on a young cluster, and counts each closed one in
    ``apiserver_terminated_watchers_total``). The stream then simply ends, so this watch resumes
    from the last resourceVersion it saw, as a reflector does (``reconnects`` counts it); a 410
    or another failure sets ``error``, and ``wait`` returns at once instead of reading a dead
    stream as pods that never bound."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.bound: dict[str, float] = {}
        self.error: str | None = None
        self.reconnects = 0
        self._stop = threading.Event()
        listed = plane.request("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1")
        self._rv: str = listed["metadata"]["resourceVersion"]
        self._url = f"{plane.server}/api/v1/namespaces/{namespace}/pods?watch=1"
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._stream()
                if not self._stop.is_set() and self.error is None:
                    self.reconnects += 1
                if self.error is not None:
                    return
        except (OSError, ValueError) as exc:
            if not self._stop.is_set():
                self.error = f"watch failed: {exc!r}"

    def _stream(self) -> None:
        url = f"{self._url}&resourceVersion={self._rv}&allowWatchBookmarks=true&timeoutSeconds=1800"
        req = urllib.request.Request(url)
        req.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
        with urllib.request.urlopen(req, context=_insecure_context(), timeout=2000) as resp:
            for line in resp:
                now = time.monotonic()
                event = json.loads(line)
                obj = event["object"]
                if event.get("type") == "ERROR":
                    self.error = f"watch error {obj.get('code')}: {obj.get('message')}"
                    return
                meta = obj.get("metadata", {})
                self._rv = meta.get("resourceVersion") or self._rv
                name = meta.get("name")
                if name and obj.get("spec", {}).get("nodeName") and name not in self.bound:
                    self.bound[name] = now
                if self._stop.is_set():
                    return

    def wait(self, names: Iterable[str], timeout: float) -> list[float]:
        """Until every pod of ``names`` is bound or ``timeout``; their bind times, sorted."""
        wanted = list(names)
        deadline = time.monotonic() + timeout
        while (
            sum(n in self.bound for n in wanted) < len(wanted)
            and time.monotonic() < deadline
            and self.error is None
        ):
            time.sleep(0.05)
        self._stop.set()
        return sorted(self.bound[n] for n in wanted if n in self.bound)

    def first(self, timeout: float) -> float | None:
        """The time of the first bind seen, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        while not self.bound and time.monotonic() < deadline and self.error is None:
            time.sleep(0.02)
        return min(self.bound.values()) if self.bound else None


def peak_rss_mb(pid: int, field: str = "VmHWM") -> float:
    """VmHWM (the peak RSS) of a running process, or another /proc status field in kB, in MB;
    NaN once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads, reaped or not: a zombie child's stay until
    it is waited for), in seconds from /proc/<pid>/stat; NaN once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return float("nan")
    # After the command's ")": state is field 3 of stat(5), utime 14 and stime 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RssSampler:
    """The largest VmHWM of a process while it runs (it may exit by itself, like the binder),
    and its CPU time every 20 ms (``cpu_per_pod``: a contender's CPU per pod bound, the figure
    the machine's load does not swing as it swings the rates)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = float("nan")
        self.cpu: list[tuple[float, float]] = []  # (time.monotonic(), CPU seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        now, cpu = time.monotonic(), cpu_seconds(self.pid)
        if cpu == cpu:
            self.cpu.append((now, cpu))
        value = peak_rss_mb(self.pid)
        if value == value:  # not NaN: the process is still there
            self.peak = value if self.peak != self.peak else max(self.peak, value)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.sample()

    def stop(self) -> float:
        """Stop sampling (take one last sample first) and return the peak in MB."""
        self.sample()
        self._stop.set()
        self._thread.join()
        return self.peak

    def cpu_at(self, when: float) -> float:
        """The process's CPU seconds at ``when`` (monotonic), interpolated between samples."""
        before = [s for s in self.cpu if s[0] <= when]
        after = [s for s in self.cpu if s[0] >= when]
        if not before or not after:
            edge = before[-1:] or after[:1]
            return edge[0][1] if edge else float("nan")
        (t0, c0), (t1, c1) = before[-1], after[0]
        return c0 if t1 == t0 else c0 + (c1 - c0) * (when - t0) / (t1 - t0)

    def cpu_per_pod(self, times: list[float]) -> float:
        """CPU milliseconds per pod between the first and the last bind of ``times`` (sorted
        monotonic times), the window ``throughput`` measures: the start-up (imports, the
        watches' first LIST) is left out, as it is out of the rate."""
        if len(times) < 2:
            return float("nan")
        return (self.cpu_at(times[-1]) - self.cpu_at(times[0])) * 1000 / (len(times) - 1)


def topo_config(work: Path, scheduler_name: str = TOPO_NAME) -> Path:
    """configs/scheduler.yaml (deploy/'s configuration) with the benchmark's scheduler name."""
    text = (REPO / "configs" / "scheduler.yaml").read_text()
    text = text.replace("schedulerName: topo-scheduler", f"schedulerName: {scheduler_name}", 1)
    path = work / "bench-scheduler.yaml"
    path.write_text(text)
    return path


def start_topo(
    plane: ControlPlane,
    config: Path,
    redis_url: str | None,
    log: Path,
    http_address: str = "127.0.0.1:0",
    log_level: str = "warning",
) -> subprocess.Popen[bytes]:
    """``topo-scheduler run`` in a session of its own, logging (warnings) to ``log``."""
    args = [
        sys.executable,
        "-m",
        "scheduler",
        "run",
        "--config",
        str(config),
        "--kubeconfig",
        str(plane.scheduler_kubeconfig),
        "--http-address",
        http_address,
        "--log-level",
        log_level,
    ]
    if redis_url:
        args += ["--redis-url", redis_url]
    with log.open("ab") as out:
        return subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
        )


def kill(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
    """Signal a process's whole group and wait for it (SIGKILL after 20 s)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def free_port_address() -> str:
    """A free loopback ``host:port`` (for ``--http-address``)."""
    return f"127.0.0.1:{free_port()}"


def wait_http_ok(url: str, timeout: float) -> bool:
    """Poll ``url`` (plain HTTP) until it answers 200; False at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(url, timeout=2) as resp,
        ):
            if resp.status == 200:
                return True
        time.sleep(0.2)
    return False


def metric(url: str, name: str) -> float | None:
    """One unlabelled sample of a Prometheus text page; None when absent or unreachable."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def node_manifest(name: str, inventory: dict[str, Any], gpus: int = 8) -> dict[str, Any]:
    """A KWOK node (``ControlPlane.create_gpu_node``'s shape) with our inventory annotation."""
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                "kwok.x-k8s.io/node": "fake",
                "topo-scheduler.io/gpus": json.dumps(inventory),
            },
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _collection(obj: dict[str, Any]) -> str:
    if obj["kind"] == "Node":
        return "/api/v1/nodes"
    if obj["kind"] == "Pod":
        return f"/api/v1/namespaces/{obj['metadata']['namespace']}/pods"
    if obj["kind"] == "ResourceClaim":
        return f"{RESOURCE_API}/namespaces/{obj['metadata']['namespace']}/resourceclaims"
    if obj["kind"] == "ResourceSlice":
        return f"{RESOURCE_API}/resourceslices"
    raise ValueError(f"bulk_create: unsupported kind {obj['kind']}")


def bulk_create(
    plane: ControlPlane,
    objects: Iterable[dict[str, Any]],
    in_flight: int = 48,
    progress: str = "",
    every: int = 10_000,
) -> int:
    """Create Nodes, Pods, ResourceClaims and ResourceSlices as the admin over one pool of
    keep-alive connections, at most ``in_flight`` requests at a time; 429/5xx and broken
    connections are retried (an object that already exists counts as created). Returns how many
    objects were created."""
    requests = [("POST", _collection(obj), obj) for obj in objects]
    return asyncio.run(_bulk(plane.server, requests, in_flight, progress, every))


def bulk_delete_pods(plane: ControlPlane, namespace: str, in_flight: int = 48) -> int:
    """Delete every pod of a namespace at once (grace period 0), ``in_flight`` requests at a
    time (a DeleteCollection of thousands of pods outlasts a client timeout: the apiserver
    deletes them one by one), then wait until the namespace lists none. Returns how many."""
    names = [
        p["metadata"]["name"]
        for p in plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    ]
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    path = f"/api/v1/namespaces/{namespace}/pods"
    requests = [("DELETE", f"{path}/{name}", body) for name in names]
    done = asyncio.run(_bulk(plane.server, requests, in_flight, "", 0))
    clear_namespace(plane, namespace)
    return done


async def _bulk(
    server: str,
    requests: list[tuple[str, str, dict[str, Any]]],
    in_flight: int,
    progress: str,
    every: int,
) -> int:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(ssl=_insecure_context(), limit=in_flight)
    timeout = aiohttp.ClientTimeout(total=60)
    done = 0
    began = time.monotonic()
    async with aiohttp.ClientSession(
        server, headers=headers, connector=connector, timeout=timeout
    ) as http:
        queue: asyncio.Queue[tuple[str, str, dict[str, Any]]] = asyncio.Queue()
        for request in requests:
            queue.put_nowait(request)
        # Already there (a retried POST) or already gone (a retried DELETE) is done.
        fine = {"POST": 409, "DELETE": 404}

        async def worker() -> None:
            nonlocal done
            while True:
                try:
                    method, path, obj = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                body = json.dumps(obj)
                for attempt in range(20):
                    try:
                        async with http.request(method, path, data=body) as resp:
                            await resp.read()
                            if resp.status < 300 or resp.status == fine.get(method):
                                break
                            if resp.status != 429 and resp.status < 500:
                                raise RuntimeError(f"{method} {path}: HTTP {resp.status}")
                    except (TimeoutError, aiohttp.ClientError):
                        pass
                    await asyncio.sleep(min(2.0, 0.05 * 2**attempt))
                else:
                    raise RuntimeError(f"{method} {path}: gave up after 20 attempts")
                done += 1
                if progress and done % every == 0:
                    rate = done / (time.monotonic() - began)
                    print(f"  {progress}: {done}/{len(requests)} ({rate:.0f}/s)", flush=True)

        await asyncio.gather(*(worker() for _ in range(in_flight)))
    return done


def clear_namespace(plane: ControlPlane, namespace: str, timeout: float = 180) -> None:
    """Delete every pod of the namespace (grace period 0) and wait until they are gone.

    The plane's kube-apiserver gives a request up after REQUEST_TIMEOUT_S (10 s): a collection
    of thousands of pods takes longer to delete, so a 504 only means "still deleting", and the
    DELETE is sent again while pods are left; so is a connection closed without an answer (seen
    with pods using ResourceClaims on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            plane.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")
        except urllib.error.HTTPError as exc:
            if exc.code != 504:
                raise
        except OSError:
            pass  # the connection closed unanswered (a loaded apiserver): the same, ask again
        left = plane.request("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1")
        if not left["items"]:
            return
        time.sleep(0.5)


def clear_claims(plane: ControlPlane, namespace: str, timeout: float = 180) -> None:
    """Delete every pod of the namespace, then every ResourceClaim, and wait until they are gone.

    A claim a scheduler allocated carries the delete-protection finalizer: the resourceclaim
    controller takes it off (and the allocation with it) once no pod is left in ``reservedFor``,
    so the claims go only after their pods, and their devices are free again only then."""
    clear_namespace(plane, namespace, timeout)
    path = f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            plane.request("DELETE", path)
        except urllib.error.HTTPError as exc:
            if exc.code != 504:  # still deleting (clear_namespace says why)
                raise
        except OSError:
            pass  # closed unanswered: as a 504
        if not plane.request("GET", f"{path}?limit=1")["items"]:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the ResourceClaims of {namespace} were not gone in {timeout:.0f} s")


def wait_nodes_ready(
    plane: ControlPlane, count: int, timeout: float = 300, label: str = ""
) -> float:
    """Every node Ready (KWOK) with its allocatable GPUs, so no contender starts on a half-made
    cluster; with ``label`` (``key=value``), every node carrying it Ready, whatever its
    allocatable (a DRA-only node has no GPUs there: its ResourceSlices announce them). Returns
    the seconds waited."""
    began = time.monotonic()
    deadline = began + timeout
    path = "/api/v1/nodes" + (f"?labelSelector={urllib.parse.quote(label)}" if label else "")
    while time.monotonic() < deadline:
        nodes = plane.request("GET", path)["items"]
        ready = [
            n
            for n in nodes
            if (label or n.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu"))
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        ]
        if len(ready) >= count:
            return time.monotonic() - began
        time.sleep(1 if count <= 1000 else 3)  # a list of 5,000 nodes is some 20 MB of JSON
    raise RuntimeError(f"only some of {count} nodes became Ready in {timeout:.0f} s")


def keep_logs(source: Path, target: Path) -> None:
    """Copy every ``*.log`` under the plane's folder (its processes', the schedulers') to
    ``target``, keeping their relative paths."""
    for log in source.rglob("*.log"):
        dest = target / log.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(log, dest)


def tear_down(
    plane: ControlPlane,
    procs: list[subprocess.Popen[bytes]],
    kube: KubeScheduler | None,
    redis: RedisServer,
    logs: Path | None,
) -> None:
    """Stop everything a benchmark started, on success or failure: the schedulers, kube-scheduler,
    redis-server, then the plane (its logs kept first, when asked)."""
    for p in procs:
        kill(p, signal.SIGKILL)
    if kube is not None:
        kube.stop()
    redis.close()
    if logs is not None:
        keep_logs(plane.dir, logs)
    plane.stop()


def throughput(times: list[float]) -> float:
    """Pods per second between the first and the last bind."""
    if len(times) < 2 or times[-1] == times[0]:
        return 0.0
    return (len(times) - 1) / (times[-1] - times[0])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0
