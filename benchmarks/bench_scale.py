"""bench-scale: topo-scheduler beside kube-scheduler on 5,000 KWOK nodes (a benchmark, not a test).

One local control plane (kube-apiserver, etcd, KWOK; scheduler/testing/controlplane.py) holding:

- 5,000 KWOK nodes of 8 GPUs (``nvidia.com/gpu`` allocatable, 64 cpu, 512 Gi, 110 pods) with our
  DGX-1 V100 inventory annotation, as bench_live's;
- 50,000 pods created already bound (``spec.nodeName`` set), 10 per node, all with cpu/memory
  requests: per node one 2-GPU and one 1-GPU pod of ours carrying our ``topo-scheduler.io/devices``
  annotation (so 3 of the 8 GPUs are held), and 8 pods of the default scheduler without GPUs.
  KWOK leaves their status alone (a label its ``disregardStatusWithLabelSelector`` matches): its
  pod-ready stage, one status update per pod, runs at 50-230 pods/s on this machine, 4 to 15
  minutes for 50,000; ``--kwok-runs-background`` lets it run them anyway, and waits for it. Both
  schedulers count a bound pod whatever its phase, so they stay bound and Pending;
- per contender, a backlog of 5,000 pending single-GPU pods (cpu/memory requests too) with its
  scheduler name, created before it starts and deleted after it, so the second contender sees
  the same cluster as the first.

Measured for kube-scheduler (the plane's version: v1.37 now, v1.33 when docs/benchmarks.md's
figures were taken; scheduler/testing/kubescheduler.py: its own profile, client qps/burst 5000)
and for topo-scheduler ``run`` with Redis (deploy/'s configuration):

- start-up: process start to the first bind (goal <= 10 s), and to the whole backlog bound;
- the backlog's pods/s between its first and last bind;
- peak RSS (VmHWM sampled from /proc; goal <= 300 MB), and RSS (VmRSS) once the backlog is bound;
- failover, topo-scheduler only: a second replica (standby) is started and synced, the leader is
  SIGKILLed, and 100 new pods are created: time from the kill to the standby's first bind (goal
  <= lease + 5 s = 20 s).

topo-scheduler's start-up is a restart on a Redis that a previous leader used (a short-lived
replica is elected once, on the empty nodes, before the pods exist, and leads until its own
first wait is over: ``warm_up_store``): on a Redis that lost its history (new, flushed,
restarted, promoted) the first leader waits one lease plus bindCommitSeconds (75 s) before its
first decision, by design (docs/operations.md "State and HA").

Objects are created through one pool of keep-alive connections, 48 requests in flight
(benchmarks/liveplane.py). Every wait has a limit and every process started here is stopped
in ``finally`` (the plane's own layers besides); the whole run took 4.5 to 7 minutes on 2
cores. KWOK runs with 16 stage workers (``~/.kwok/kwok.yaml`` in the home the plane gives it).
Never fails on a figure.

``--quick`` (bench-smoke) runs it all on 200 nodes, 2,000 bound pods and backlogs of 200 (about
a minute), and fails (exit status 1) when a backlog or the failover's pods are not all bound: the
run is broken, whatever its figures.

Usage: python -m benchmarks.bench_scale [--quick] [--nodes 5000] [--pods-per-node 10]
       [--backlog 5000] [--kube-verbosity 2] [--kwok-runs-background] [--no-kube]
       [--logs DIR] [--py-spy FILE [--py-spy-seconds 15]]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.liveplane import (
    DGX1_INVENTORY,
    KUBE_NAME,
    LIMITS,
    TOPO_NAME,
    RssSampler,
    Watch,
    bulk_create,
    bulk_delete_pods,
    free_port_address,
    kill,
    metric,
    node_manifest,
    peak_rss_mb,
    start_topo,
    tear_down,
    throughput,
    topo_config,
    wait_http_ok,
    wait_nodes_ready,
)
from benchmarks.profiler import Profiler, summary
from scheduler.kube.tuning import LIST_PAGE
from scheduler.kube.watch import ListMeta
from scheduler.testing.controlplane import ControlPlane, build_binaries, pod_manifest
from scheduler.testing.kubescheduler import KubeScheduler
from scheduler.testing.redisserver import RedisServer

BACKGROUND_NS = "background"
FAILOVER_PODS = 100
LEASE_S = 15.0
# KWOK plays stages (node-initialize, pod-ready: one status update each) 4 at a time by default;
# more workers, and the apiserver and etcd set the pace.
KWOK_PARALLELISM = 16
# KWOK (v0.8) fills in its options' defaults only when it reads no KwokConfiguration: the one a
# file holds is converted as written (sigs.k8s.io/kwok pkg/config), every option it leaves out is
# zero. A zero nodeLeaseParallelism stops KWOK at start ("node leases parallelism must be greater
# than 0"); a zero podsOnNodeSyncParallelism would start no pods-on-node worker. So the file
# carries KWOK's own defaults (pkg/apis/config/v1alpha1's generated ones) for every option the
# plane's command line does not set, under the options given.
KWOK_FILE_DEFAULTS: dict[str, Any] = {
    "podPlayStageParallelism": 4,
    "nodePlayStageParallelism": 4,
    "nodeLeaseParallelism": 4,
    "podsOnNodeSyncParallelism": 1,
    "enableDebuggingHandlers": True,
    "enableContentionProfiling": False,
    "enableProfilingHandler": True,
    "enablePodsOnNodeSyncListPager": True,
    "enablePodsOnNodeSyncStreamWatch": False,
}
# Bound pods with this label are left alone by KWOK (KwokConfiguration's
# disregardStatusWithLabelSelector): no status update for each of them.
KWOK_DISREGARD_LABEL = (
    "topo-bench/kwok-status",
    "disregard",
)  # configs/scheduler.yaml's run.lease.durationSeconds


@dataclass
class Result:
    label: str
    first_bind_s: float | None = None
    all_bound_s: float | None = None
    bound: int = 0
    rate: float = 0.0
    rss_mb: float = float("nan")
    rss_end_mb: float = float("nan")
    notes: list[str] = field(default_factory=list)


def background_pods(nodes: int, per_node: int, kwok_runs: bool) -> list[dict[str, Any]]:
    """``per_node`` bound pods on each node: a 2-GPU and a 1-GPU pod of ours (with our devices
    annotation; on even nodes GPUs 0,1 and 2, on odd ones 4,5 and 6), the rest without GPUs.
    Unless ``kwok_runs``, they carry the label that KWOK disregards."""
    pods = []
    extra = {} if kwok_runs else dict([KWOK_DISREGARD_LABEL])
    for i in range(nodes):
        node = f"node-{i:04d}"
        base = 0 if i % 2 == 0 else 4
        for k in range(per_node):
            name = f"bg-{i:04d}-{k:02d}"
            labels = {"app": f"svc-{(i * per_node + k) % 200:03d}", **extra}
            if k < 2:
                gpus = 2 if k == 0 else 1
                devices = f"{base},{base + 1}" if k == 0 else str(base + 2)
                limits = {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": str(gpus)}
                pods.append(
                    pod_manifest(
                        name,
                        BACKGROUND_NS,
                        TOPO_NAME,
                        {"main": limits},
                        node=node,
                        labels=labels,
                        annotations={"topo-scheduler.io/devices": devices},
                    )
                )
            else:
                limits = {"cpu": "1", "memory": "4Gi"}
                pods.append(
                    pod_manifest(
                        name,
                        BACKGROUND_NS,
                        "default-scheduler",
                        {"main": limits},
                        node=node,
                        labels=labels,
                    )
                )
    return pods


def configure_kwok(plane: ControlPlane, options: dict[str, Any]) -> None:
    """KWOK options the plane's command line leaves at their defaults, through the
    configuration file KWOK reads from its home (``~/.kwok/kwok.yaml``; the plane gives it the
    home ``kwok-home`` in its folder), over KWOK_FILE_DEFAULTS. Call before ``plane.start()``."""
    home = plane.dir / "kwok-home" / ".kwok"
    home.mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {**KWOK_FILE_DEFAULTS, **options},
    }
    (home / "kwok.yaml").write_text(json.dumps(config, indent=2))  # JSON is YAML


def ensure_namespace(plane: ControlPlane, name: str) -> None:
    plane.apply_or_replace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def wait_running(plane: ControlPlane, namespace: str, timeout: float) -> float | None:
    """Until KWOK has made every pod of the namespace Running; the seconds waited, or None at
    the timeout."""
    began = time.monotonic()
    path = f"/api/v1/namespaces/{namespace}/pods?fieldSelector=status.phase%3DPending&limit=1"
    while time.monotonic() - began < timeout:
        if not plane.request("GET", path)["items"]:
            return time.monotonic() - began
        time.sleep(2)
    return None


def warm_up_store(plane: ControlPlane, redis_url: str, config: Path, timeout: float = 90) -> str:
    """A short-lived replica takes the store's first epoch (and gives it back on SIGTERM), so
    the measured start-up is a restart, not a brand-new Redis's first lease.

    Its own election on the new store waits one lease plus bindCommitSeconds before its first
    decision, and a leader that leaves during that wait leaves it to the next one (sim seed
    836): killed as soon as it led, the measured replica waited the 75 s in full. So the warm-up
    runs with a lease of 2 s and a bindCommitSeconds of 1 s (a wait of 3 s), and is stopped
    only once its wait is over and marked (a few loop turns later)."""
    text = config.read_text()
    for line, short in WARM_UP:
        assert line in text, f"{config} has no line {line!r}"
        text = text.replace(line, short, 1)
    warm = config.with_name("warm-up-scheduler.yaml")
    warm.write_text(text)
    address = free_port_address()
    proc = start_topo(plane, warm, redis_url, plane.dir / "warmup.log", address)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if metric(f"http://{address}/metrics", "scheduler_leader") == 1.0:
                time.sleep(WARM_UP_SETTLE_S)
                return "ok"
            if proc.poll() is not None:
                return f"warm-up replica exited ({proc.returncode})"
            time.sleep(0.2)
        return "warm-up replica never led"
    finally:
        kill(proc)


# The warm-up replica's lease and bindCommitSeconds (configs/scheduler.yaml's lines), and how
# long it leads: its wait (2 + 1 s) and a few loop turns for the reconcile and the mark.
WARM_UP = (
    ("durationSeconds: 15 ", "durationSeconds: 2 "),
    ("renewSeconds: 5", "renewSeconds: 1"),
    ("bindCommitSeconds: 60.0 ", "bindCommitSeconds: 1.0 "),
)
WARM_UP_SETTLE_S = 6.0


def run_backlog(
    plane: ControlPlane,
    result: Result,
    namespace: str,
    scheduler_name: str,
    backlog: int,
    start: Callable[[], int],
    timeout: float,
) -> RssSampler:
    """Create the backlog, start the contender, wait for its binds; the sampler of its RSS."""
    ensure_namespace(plane, namespace)
    names = [f"p-{i:05d}" for i in range(backlog)]
    limits = {**LIMITS, "nvidia.com/gpu": "1"}
    began = time.monotonic()
    bulk_create(
        plane, (pod_manifest(n, namespace, scheduler_name, {"main": limits}) for n in names)
    )
    print(f"  {result.label}: backlog of {backlog} created in {time.monotonic() - began:.0f} s")
    watch = Watch(plane, namespace)
    started = time.monotonic()
    sampler = RssSampler(start())
    first = watch.first(min(timeout, 120))
    times = watch.wait(names, timeout - (time.monotonic() - started))
    sampler.sample()
    result.rss_end_mb = peak_rss_mb(sampler.pid, "VmRSS")
    if watch.error:
        result.notes.append(watch.error)
    if first is not None:
        result.first_bind_s = first - started
    result.bound = len(times)
    if len(times) == backlog:
        result.all_bound_s = times[-1] - started
    result.rate = throughput(times)
    print(
        f"  {result.label}: first bind {fmt(result.first_bind_s)} s after start, "
        f"{len(times)}/{backlog} bound, all at {fmt(result.all_bound_s)} s, "
        f"{result.rate:.0f} pods/s",
        flush=True,
    )
    return sampler


class Milestones(threading.Thread):
    """When a topo-scheduler replica's /readyz first said "ready" (its watches synced) and
    first said "leader", in seconds after ``started``: start-up split into its parts."""

    def __init__(self, address: str, started: float) -> None:
        super().__init__(daemon=True)
        self.url = f"http://{address}/readyz"
        self.started = started
        self.synced_s: float | None = None
        self.leading_s: float | None = None
        self.done = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.done.is_set() and self.leading_s is None:
            with contextlib.suppress(OSError), urllib.request.urlopen(self.url, timeout=1) as r:
                text = r.read().decode()
                now = time.monotonic() - self.started
                if self.synced_s is None:
                    self.synced_s = now
                if "leader" in text:
                    self.leading_s = now
            time.sleep(0.05)


def bare_list(plane: ControlPlane) -> str:
    """What the apiserver alone takes to answer the bound pods' paged LIST as the scheduler
    asks for it (same selector, same page size), the bodies read and not decoded: the part of
    topo-scheduler's start-up that no work of its own can shorten."""
    selector = urllib.parse.quote("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")
    token, pages, size = "", 0, 0
    began = time.monotonic()
    while True:
        path = f"/api/v1/pods?fieldSelector={selector}&limit={LIST_PAGE}"
        if token:
            path += f"&continue={urllib.parse.quote(token)}"
        body = plane.request("GET", path, raw=True)
        pages, size = pages + 1, size + len(body)
        token = msgspec.json.decode(body, type=_Page).metadata.continue_
        if not token:
            break
    return (
        f"a bare paged LIST of the bound pods ({pages} pages of {LIST_PAGE}, {size / 1e6:.0f} MB, "
        f"bodies not decoded): {time.monotonic() - began:.1f} s"
    )


class _Page(msgspec.Struct):
    metadata: ListMeta


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 nodes, 2,000 pods, 200 pending")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=10)
    parser.add_argument("--backlog", type=int, default=5000)
    parser.add_argument("--kube-verbosity", type=int, default=2)
    parser.add_argument(
        "--kwok-runs-background",
        action="store_true",
        help="KWOK runs the 50,000 bound pods too (a status update each) and is waited for",
    )
    parser.add_argument("--no-kube", action="store_true", help="topo-scheduler only")
    parser.add_argument("--logs", type=Path, help="copy every process's log here at the end")
    parser.add_argument(
        "--py-spy",
        type=Path,
        help="record the leader with py-spy from its start (raw collapsed stacks) into this file",
    )
    parser.add_argument("--py-spy-seconds", type=int, default=15)
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.backlog = 200, 200
    t_begin = time.monotonic()

    plane = ControlPlane(build_binaries())
    redis = RedisServer()
    kube: KubeScheduler | None = None
    procs: list[subprocess.Popen[bytes]] = []
    results: list[Result] = []
    setup: list[str] = []
    failover: dict[str, Any] = {}
    try:
        options: dict[str, Any] = {
            "podPlayStageParallelism": KWOK_PARALLELISM,
            "nodePlayStageParallelism": KWOK_PARALLELISM,
        }
        if not args.kwok_runs_background:
            options["disregardStatusWithLabelSelector"] = "=".join(KWOK_DISREGARD_LABEL)
        configure_kwok(plane, options)
        plane.start()
        redis.start()
        plane.grant_scheduler_role()
        config = topo_config(plane.dir)

        began = time.monotonic()
        bulk_create(
            plane, (node_manifest(f"node-{i:04d}", DGX1_INVENTORY) for i in range(args.nodes))
        )
        created = time.monotonic() - began
        ready = wait_nodes_ready(plane, args.nodes, timeout=300)
        setup.append(
            f"{args.nodes} nodes created in {created:.0f} s, all Ready {ready:.0f} s later"
        )
        print(f"  {setup[-1]}", flush=True)

        state = warm_up_store(plane, redis.url, config)
        print(f"  store warm-up (a replica took epoch 1 and released it): {state}", flush=True)

        ensure_namespace(plane, BACKGROUND_NS)
        pods = background_pods(args.nodes, args.pods_per_node, args.kwok_runs_background)
        began = time.monotonic()
        bulk_create(plane, pods, progress="bound pods", every=10_000)
        created = time.monotonic() - began
        line = f"{len(pods)} bound pods created in {created:.0f} s ({len(pods) / created:.0f}/s)"
        if args.kwok_runs_background:
            running = wait_running(plane, BACKGROUND_NS, timeout=900)
            line += (
                f", all Running (KWOK) {running:.0f} s later"
                if running is not None
                else ", KWOK had not made all of them Running after 900 s"
            )
        else:
            line += ", left Pending by KWOK"
        setup.append(line)
        print(f"  {setup[-1]}", flush=True)
        del pods
        setup.append(bare_list(plane))
        print(f"  {setup[-1]}", flush=True)

        # kube-scheduler.
        kube_result = Result("kube-scheduler v1.37")

        def start_kube() -> int:
            nonlocal kube
            kube = KubeScheduler(plane, name=KUBE_NAME, verbosity=args.kube_verbosity)
            kube.start()
            assert kube.process is not None
            return kube.process.proc.pid

        if not args.no_kube:
            results.append(kube_result)
            sampler = run_backlog(
                plane, kube_result, "backlog-kube", KUBE_NAME, args.backlog, start_kube, 240
            )
            kube_result.rss_mb = sampler.stop()
            if kube is not None:
                kube.stop()
            bulk_delete_pods(plane, "backlog-kube")

        # topo-scheduler with Redis, then its failover to a second replica.
        topo_result = Result("topo-scheduler, Redis")
        results.append(topo_result)
        leader_address = free_port_address()

        leaders: list[subprocess.Popen[bytes]] = []
        profilers: list[Profiler] = []
        milestones: list[Milestones] = []

        def start_leader() -> int:
            # With --logs, its info lines too: when each watch listed, the reconcile, attempts.
            level = "info" if args.logs else "warning"
            proc = start_topo(
                plane, config, redis.url, plane.dir / "leader.log", leader_address, level
            )
            milestones.append(Milestones(leader_address, time.monotonic()))
            procs.append(proc)
            leaders.append(proc)
            if args.py_spy is not None:
                time.sleep(0.5)  # an interpreter py-spy can read
                profilers.append(Profiler(proc.pid, args.py_spy, 100, args.py_spy_seconds))
                procs.append(profilers[-1].proc)
            return proc.pid

        sampler = run_backlog(
            plane, topo_result, "backlog-topo", TOPO_NAME, args.backlog, start_leader, 240
        )
        leader = leaders[0]
        if milestones:
            topo_result.notes.append(
                f"start-up: watches synced at {fmt(milestones[0].synced_s)} s, leading at "
                f"{fmt(milestones[0].leading_s)} s (its /readyz), first bind at "
                f"{fmt(topo_result.first_bind_s)} s"
            )
            milestones[0].done.set()

        standby_address = free_port_address()
        began = time.monotonic()
        standby = start_topo(plane, config, redis.url, plane.dir / "standby.log", standby_address)
        procs.append(standby)
        standby_rss = RssSampler(standby.pid)
        if wait_http_ok(f"http://{standby_address}/readyz", 120):
            failover["standby_synced_s"] = time.monotonic() - began
            ensure_namespace(plane, "failover")
            watch = Watch(plane, "failover")
            topo_result.rss_mb = sampler.stop()
            killed = time.monotonic()
            kill(leader, signal.SIGKILL)
            names = [f"f-{i:03d}" for i in range(FAILOVER_PODS)]
            limits = {**LIMITS, "nvidia.com/gpu": "1"}
            bulk_create(
                plane, (pod_manifest(n, "failover", TOPO_NAME, {"main": limits}) for n in names)
            )
            first = watch.first(60)
            times = watch.wait(names, 30)
            if first is not None:
                failover["kill_to_first_bind_s"] = first - killed
            if len(times) == len(names):
                failover["kill_to_all_bound_s"] = times[-1] - killed
            failover["bound"] = len(times)
        else:
            failover["error"] = "the standby was not ready after 120 s"
            topo_result.rss_mb = sampler.stop()
        failover["standby_rss_mb"] = standby_rss.stop()
        kill(standby)
        print(f"  failover: {json.dumps(failover)}", flush=True)

        total = time.monotonic() - t_begin
        report(args, results, failover, setup, total)
        problems = broken(args.backlog, results, failover)
        if args.quick and problems:
            raise SystemExit("bench-scale --quick: broken: " + "; ".join(problems))
        for profiler in profilers:
            profiler.proc.wait(60)  # --duration: it ends by itself
            print("\n".join(summary(profiler.out, 25)))
    finally:
        tear_down(plane, procs, kube, redis, args.logs)


def broken(backlog: int, results: list[Result], failover: dict[str, Any]) -> list[str]:
    """What breaks a run whatever its figures: a backlog not wholly bound, a failover that
    failed or left a new pod unbound."""
    problems = [f"{r.label} bound {r.bound}/{backlog}" for r in results if r.bound < backlog]
    if "error" in failover:
        problems.append(f"failover: {failover['error']}")
    elif failover.get("bound") != FAILOVER_PODS:
        problems.append(f"failover bound {failover.get('bound')}/{FAILOVER_PODS}")
    return problems


def report(
    args: argparse.Namespace,
    results: list[Result],
    failover: dict[str, Any],
    setup: list[str],
    total: float,
) -> None:
    print()
    print(
        f"bench-scale: {args.nodes} KWOK nodes x 8 GPUs, {args.nodes * args.pods_per_node} bound "
        f"pods ({args.nodes * 2} holding 3 GPUs per node), backlog of {args.backlog} single-GPU "
        "pods per contender (cpu/memory requests on every pod)"
    )
    for line in setup:
        print(f"  setup: {line}")
    header = (
        f"{'contender':<24} {'start->1st bind':>15} {'start->all bound':>16} "
        f"{'backlog pods/s':>14} {'peak RSS':>9} {'RSS at end':>10}"
    )
    print(header)
    for r in results:
        bound = fmt(r.all_bound_s) if r.all_bound_s is not None else f"{r.bound} bound"
        print(
            f"{r.label:<24} {fmt(r.first_bind_s) + ' s':>15} {bound + ' s':>16} "
            f"{r.rate:>14.0f} {fmt(r.rss_mb, 0) + ' MB':>9} {fmt(r.rss_end_mb, 0) + ' MB':>10}"
        )
        for note in r.notes:
            print(f"  note: {note}")
    print(
        "(goals: start->1st bind <= 10 s, peak RSS <= 300 MB; peak RSS is VmHWM, RSS at end is "
        "VmRSS once the backlog is bound)"
    )
    if "error" in failover:
        print(f"failover: {failover['error']}")
    else:
        print(
            f"failover, topo-scheduler with Redis, 2 replicas (lease {LEASE_S:.0f} s, renew 5 s): "
            "SIGKILL of the leader -> standby's first bind "
            f"{fmt(failover.get('kill_to_first_bind_s'))} s "
            f"(goal <= {LEASE_S + 5:.0f} s), all {failover.get('bound')}/{FAILOVER_PODS} new pods "
            f"bound at {fmt(failover.get('kill_to_all_bound_s'))} s; standby synced "
            f"{fmt(failover.get('standby_synced_s'))} s after its start, its peak RSS "
            f"{fmt(failover.get('standby_rss_mb'), 0)} MB"
        )
    print(f"whole run: {total:.0f} s")


if __name__ == "__main__":
    main()
