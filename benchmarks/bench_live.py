"""bench-live: the live scheduler on the local control plane (a benchmark, not a test).

- Throughput and create-to-bind latency: 1,000 single-GPU pods on 200 KWOK nodes of 8 GPUs
  (DGX-1 V100 topology), one scheduler with Redis. Pods are created by 8 concurrent clients; a
  watch records when each pod first shows a node. Create-to-bind is measured from the moment the
  create call returned to the moment the watch saw the binding.
- Failover: two replicas with the default lease (15 s, renew 5 s); the leader is killed with
  SIGKILL; the figure is the time until the standby logs "became leader" and binds a new pod.

Prints figures; never fails on them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scheduler.testing.controlplane import ControlPlane, build_binaries
from scheduler.testing.redisserver import RedisServer
from tests.topologies import DGX1_V100

REPO = Path(__file__).resolve().parents[1]
NODES, PODS = 200, 1000


def start_scheduler(plane: ControlPlane, redis_url: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scheduler",
            "run",
            "--kubeconfig",
            str(plane.scheduler_kubeconfig),
            "--redis-url",
            redis_url,
            "--http-address",
            "127.0.0.1:0",
            "--log-level",
            "warning",
        ],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,
    )


def watch_binds(plane: ControlPlane, bound: dict[str, float], stop: threading.Event) -> None:
    """Record the local time each pod is first seen with a node (a raw watch, in a thread)."""
    import ssl
    import urllib.request

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    listed = plane.request("GET", "/api/v1/namespaces/bench/pods?limit=1")
    rv = listed["metadata"]["resourceVersion"]
    req = urllib.request.Request(
        f"{plane.server}/api/v1/namespaces/bench/pods?watch=1&resourceVersion={rv}"
        "&timeoutSeconds=600"
    )
    req.add_header("Authorization", "Bearer topo-admin-token")
    with urllib.request.urlopen(req, context=context, timeout=700) as resp:
        for line in resp:
            obj = json.loads(line)["object"]
            name = obj.get("metadata", {}).get("name")
            if name and obj.get("spec", {}).get("nodeName") and name not in bound:
                bound[name] = time.monotonic()
            if stop.is_set():
                return


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    plane = ControlPlane(build_binaries())
    redis = RedisServer()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        plane.start()
        redis.start()
        plane.grant_scheduler_role()
        plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
        inventory = {
            "vendor": "nvidia",
            "devices": [{"index": i} for i in range(8)],
            "links": DGX1_V100,
        }
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(lambda i: plane.create_gpu_node(f"node-{i:03d}", inventory), range(NODES))
            )
        log = plane.dir / "scheduler.log"
        bound: dict[str, float] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=watch_binds, args=(plane, bound, stop), daemon=True)
        watcher.start()
        time.sleep(0.5)
        created: dict[str, float] = {}

        def create(name: str) -> None:
            plane.create_pod(name, 1, namespace="bench")
            created[name] = time.monotonic()

        # Phase 1, backlog: 1,000 pods wait, then one scheduler starts and binds them all.
        backlog = [f"backlog-{i:04d}" for i in range(PODS)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, backlog))
        procs.append(start_scheduler(plane, redis.url, log))
        deadline = time.monotonic() + 300
        while sum(n in bound for n in backlog) < PODS and time.monotonic() < deadline:
            time.sleep(0.1)
        times = sorted(bound[n] for n in backlog if n in bound)
        print(f"bench-live: {PODS} single-GPU pods on {NODES} KWOK nodes x 8 GPUs, Redis store")
        if len(times) > 1:
            span = times[-1] - times[0]
            print(
                f"  backlog: {len(times)} pods bound, first to last bind {span:.2f} s "
                f"-> {(len(times) - 1) / span:.0f} pods/s"
            )

        # Phase 2, stream: 500 more pods created by 8 clients while the scheduler runs.
        stream = [f"stream-{i:04d}" for i in range(PODS // 2)]
        start = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, stream))
        created_all = time.monotonic()
        while sum(n in bound for n in stream) < len(stream) and time.monotonic() < deadline + 120:
            time.sleep(0.1)
        latencies = [bound[n] - created[n] for n in stream if n in bound]
        print(
            f"  stream: {len(stream)} pods created at {len(stream) / (created_all - start):.0f}/s "
            f"(the creating clients are the limit), {len(latencies)} bound"
        )
        if latencies:
            print(
                f"  create-to-bind p50 {pct(latencies, 0.5) * 1000:.0f} ms, "
                f"p99 {pct(latencies, 0.99) * 1000:.0f} ms, "
                f"mean {statistics.fmean(latencies) * 1000:.0f} ms"
            )
        stop.set()

        # Failover with the default lease.
        standby_log = plane.dir / "standby.log"
        procs.append(start_scheduler(plane, redis.url, standby_log))
        time.sleep(3)
        leader = procs[0]
        os.killpg(leader.pid, signal.SIGKILL)
        killed = time.monotonic()
        leader.wait()
        plane.create_pod("after-failover", 1, namespace="bench")
        while time.monotonic() - killed < 60:
            pod = plane.request("GET", "/api/v1/namespaces/bench/pods/after-failover")
            if pod["spec"].get("nodeName"):
                break
            time.sleep(0.1)
        took = time.monotonic() - killed
        print(
            "  failover (lease 15 s, renew 5 s): leader killed -> "
            f"standby bound a new pod in {took:.1f} s"
        )
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        redis.close()
        plane.stop()


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
