"""bench-failover: how long scheduling stops when the Redis master dies (a benchmark, not a test).

Issue 22's figure: the time without binding when the Redis master dies, beside the Sentinels'
``down-after-milliseconds`` and the lease duration; goal <= down-after + lease + 5 s. Also the
start-up of a new installation (process start to the first bind on a Redis nobody led before:
the epoch witness lets it skip the one-lease wait, docs/operations.md "State and HA").

One local control plane (kube-apiserver, etcd, KWOK) with 100 KWOK nodes of 8 GPUs; per case a
fresh Redis master with two replicas and three Sentinels (SentinelSet, with deploy/'s settings:
down-after 5 s, min-replicas-max-lag 3 s) and two ``topo-scheduler run`` replicas with deploy/'s
configuration (lease 15 s, renewed every 5 s) finding Redis through the Sentinels, as
deploy/with-redis-sentinel/ sets them up. A thread creates single-GPU pods at a steady rate;
after ``--before`` seconds the fault comes, and the stream goes on for ``--after`` seconds.

Cases: ``kill`` (the master is SIGKILLed), ``pause`` (SIGSTOPped until a replica is promoted,
then SIGCONTed), ``kill-with-leader`` (the master and the leading scheduler die together, as when
their node goes: the standby must wait out the lease on the promoted replica, then one more
lease, as the new Redis process cannot say what the old one lost).

Measured per case: the kill to the Sentinels' promotion, the kill to the first bind after it, and
the longest stretch without a bind from the last bind before the fault. Every process started
here is stopped in ``finally``. Never fails on a figure.

``--quick`` (bench-smoke) runs the ``kill`` case alone, 5 s before the fault and 30 s after it
(a failover takes down-after + a lease at most), and fails (exit status 1) when a case
ends in an error or leaves a pod unbound: the run is broken, whatever its figures.

Usage: python -m benchmarks.bench_failover [--quick] [--cases kill,pause,kill-with-leader]
       [--nodes 100] [--rate 5] [--before 10] [--after 50] [--logs DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.liveplane import (
    DGX1_INVENTORY,
    LIMITS,
    Watch,
    bulk_create,
    bulk_delete_pods,
    free_port_address,
    keep_logs,
    kill,
    node_manifest,
    start_topo,
    topo_config,
    wait_http_ok,
    wait_nodes_ready,
)
from scheduler.config import load_config
from scheduler.testing.controlplane import ControlPlane, build_binaries, pod_manifest
from scheduler.testing.redisserver import SentinelSet

DOWN_AFTER_MS = 5000  # deploy/redis-sentinel/start.sh
MAX_LAG_S = 3


@dataclass
class Figures:
    case: str
    first_bind_s: float | None = None  # process start to the first bind (new installation)
    promoted_s: float | None = None  # fault to the Sentinels naming another master
    kill_to_bind_s: float | None = None  # fault to the first bind after it
    longest_gap_s: float | None = None  # the longest stretch without a bind around the fault
    bound: int = 0
    created: int = 0
    error: str = ""


class Stream:
    """Creates single-GPU pods in ``namespace`` at ``rate`` per second until stopped."""

    def __init__(self, plane: ControlPlane, namespace: str, scheduler: str, rate: float) -> None:
        self.plane, self.namespace, self.scheduler = plane, namespace, scheduler
        self.period = 1.0 / rate
        self.names: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        limits = {**LIMITS, "nvidia.com/gpu": "1"}
        next_at = time.monotonic()
        while not self._stop.is_set():
            name = f"s-{len(self.names):04d}"
            pod = pod_manifest(name, self.namespace, self.scheduler, {"main": limits})
            with contextlib.suppress(OSError):
                self.plane.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", pod)
                self.names.append(name)
            next_at += self.period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_case(
    plane: ControlPlane, work: Path, case: str, args: argparse.Namespace, figures: Figures
) -> None:
    scheduler = f"topo-failover-{case}"
    namespace = scheduler
    config = topo_config(work, scheduler)
    group = SentinelSet(work / case, down_after_ms=DOWN_AFTER_MS, max_lag_s=MAX_LAG_S)
    (work / case).mkdir()
    procs: list[subprocess.Popen[bytes]] = []
    stream: Stream | None = None
    try:
        group.start()
        os.environ.update(
            {
                "TOPO_SCHEDULER_REDIS_URL": group.url,
                "TOPO_SCHEDULER_REDIS_SENTINEL_MASTER_NAME": group.master_name,
                "TOPO_SCHEDULER_REDIS_SENTINEL_ADDRESSES": ",".join(group.addresses),
            }
        )
        plane.apply_or_replace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        watch = Watch(plane, namespace)
        limits = {**LIMITS, "nvidia.com/gpu": "1"}
        plane.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            pod_manifest("first", namespace, scheduler, {"main": limits}),
        )
        started = time.monotonic()
        leader_address = free_port_address()
        leader = start_topo(plane, config, None, work / f"{case}-a.log", leader_address, "info")
        procs.append(leader)
        first = watch.first(120)
        if first is None:
            figures.error = "the first pod was not bound within 120 s"
            return
        figures.first_bind_s = first - started
        standby_address = free_port_address()
        standby = start_topo(plane, config, None, work / f"{case}-b.log", standby_address, "info")
        procs.append(standby)
        if not wait_http_ok(f"http://{standby_address}/readyz", 120):
            figures.error = "the standby was not ready within 120 s"
            return
        stream = Stream(plane, namespace, scheduler, args.rate)
        stream.start()
        time.sleep(args.before)
        old = group.master_index()
        faulted = time.monotonic()
        if case == "pause":
            group.signal_node(old, signal.SIGSTOP)
        else:
            group.signal_node(old, signal.SIGKILL)
            if case == "kill-with-leader":
                kill(leader, signal.SIGKILL)
        group.wait_failover(old, timeout_s=120)
        figures.promoted_s = time.monotonic() - faulted
        if case == "pause":
            group.signal_node(old, signal.SIGCONT)
        time.sleep(max(0.0, args.after - (time.monotonic() - faulted)))
        stream.stop()
        times = sorted(watch.wait(["first", *stream.names], 60))
        figures.created, figures.bound = len(stream.names) + 1, len(times)
        after = [t for t in times if t > faulted]
        before = [t for t in times if t <= faulted]
        if after:
            figures.kill_to_bind_s = after[0] - faulted
            edges = before[-1:] + after
            figures.longest_gap_s = max(b - a for a, b in itertools.pairwise(edges))
    finally:
        if stream is not None:
            stream.stop()
        for proc in procs:
            kill(proc, signal.SIGKILL)
        group.close()
        bulk_delete_pods(plane, namespace)  # the next case finds every GPU free


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="the kill case alone, briefly (bench-smoke)"
    )
    parser.add_argument("--cases", default="kill,pause,kill-with-leader")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--rate", type=float, default=5.0, help="pods created per second")
    parser.add_argument("--before", type=float, default=10.0)
    parser.add_argument("--after", type=float, default=50.0)
    parser.add_argument("--logs", type=Path, default=None, help="keep every log here")
    args = parser.parse_args()
    if args.quick:
        args.cases, args.before, args.after = "kill", 5.0, 30.0
    lease = load_config(Path(__file__).resolve().parents[1] / "configs" / "scheduler.yaml")
    lease_s = lease.run.lease.duration_seconds
    results: list[Figures] = []
    work = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    plane = ControlPlane(build_binaries())
    try:
        plane.start()
        plane.grant_scheduler_role()  # deploy's roles, as the Deployment runs it
        bulk_create(
            plane, (node_manifest(f"node-{i:04d}", DGX1_INVENTORY) for i in range(args.nodes))
        )
        wait_nodes_ready(plane, args.nodes)
        for case in args.cases.split(","):
            figures = Figures(case)
            results.append(figures)
            print(f"case {case}...", flush=True)
            try:
                run_case(plane, work, case, args, figures)
            except Exception as exc:  # a figure is missing, the other cases still run
                figures.error = f"{type(exc).__name__}: {exc}"
            print(f"  {figures}", flush=True)
    finally:
        if args.logs is not None:
            keep_logs(work, args.logs)
            keep_logs(plane.dir, args.logs)
        plane.stop()
    goal = DOWN_AFTER_MS / 1000 + lease_s + 5
    print(
        f"\nRedis master failover through Sentinel: down-after {DOWN_AFTER_MS / 1000:.0f} s, "
        f"lease {lease_s:.0f} s (renewed every {lease.run.lease.renew_seconds:.0f} s), "
        f"goal <= {goal:.0f} s without binding; {args.nodes} nodes, {args.rate:g} pods/s"
    )
    print(
        f"{'case':<18}{'start->bind':>12}{'promoted':>10}{'fault->bind':>13}"
        f"{'longest gap':>13}{'bound':>10}"
    )
    for f in results:
        print(
            f"{f.case:<18}{fmt(f.first_bind_s):>12}{fmt(f.promoted_s):>10}"
            f"{fmt(f.kill_to_bind_s):>13}{fmt(f.longest_gap_s):>13}"
            f"{f'{f.bound}/{f.created}':>10}" + (f"  {f.error}" if f.error else "")
        )
    broken = [f.case for f in results if f.error or f.bound < f.created]
    if args.quick and broken:
        print(f"bench-failover --quick: broken: {', '.join(broken)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
