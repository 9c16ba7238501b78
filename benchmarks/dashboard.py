"""docs/operations.md's dashboard picture: the chart's Grafana dashboard drawn from a real run's
metrics.

There is no Grafana (nor Prometheus) on our machines. This runs topo-scheduler on the local
control plane the way bench-live does (etcd, kube-apiserver, KWOK, a redis-server), as two
replicas, scrapes both replicas' /metrics every 2 s while a scripted load goes by, then evaluates
each panel's own queries (deploy/helm/topo-scheduler/dashboards/topo-scheduler.json) over the
scrapes (benchmarks/promql.py) and draws the panels with matplotlib, in the dashboard's layout.

The load, about 150 s: 24 DGX-1 V100 and 16 PCIe A10 KWOK nodes of 8 GPUs; single pods of 1 to
8 GPUs arriving at 3/s and leaving after 15 to 40 s; a complete 4 x 2-GPU gang every 6 s and an
incomplete one every 12 s whose last member comes 20 s later; one pod too big for any node; from
45 s low-priority 8-GPU pods filling the cluster, and at 60 s three high-priority ones that
preempt; at 80 s the leader is killed (SIGKILL) and the standby takes over after the lease (15 s).

Writes build/dashboard/scrapes.jsonl and docs/dashboard.png (override with --out).

``--quick`` (bench-smoke) runs the first 30 s of the load (before the low-priority fill, the
preemptions and the kill) and draws into build/dashboard-quick/ (docs/ is left alone).

Usage: python -m benchmarks.dashboard [--quick] [--seconds 150] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from benchmarks.liveplane import (
    LIMITS,
    REPO,
    TOPO_NAME,
    free_port_address,
    kill,
    start_topo,
    tear_down,
    topo_config,
    wait_http_ok,
    wait_nodes_ready,
)
from benchmarks.promql import Scrape, Series, parse
from scheduler.testing.controlplane import ControlPlane, build_binaries
from scheduler.testing.redisserver import RedisServer

DASHBOARD = REPO / "deploy" / "helm" / "topo-scheduler" / "dashboards" / "topo-scheduler.json"
NAMESPACE = "dash"
SCRAPE_S = 2.0


def example_inventory(file: str) -> dict[str, Any]:
    """The topo-scheduler.io/gpus inventory of the first node in configs/examples/<file>."""
    node = next(d for d in yaml.safe_load_all((REPO / "configs" / "examples" / file).read_text()))
    inventory: dict[str, Any] = json.loads(
        node["metadata"]["annotations"]["topo-scheduler.io/gpus"]
    )
    return inventory


class Scraper(threading.Thread):
    """Scrapes each live replica's /metrics every SCRAPE_S seconds."""

    def __init__(self, t0: float) -> None:
        super().__init__(daemon=True)
        self.t0 = t0
        self.targets: dict[str, str] = {}
        self.scrapes: list[tuple[float, str, str]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(SCRAPE_S):
            t = time.monotonic() - self.t0
            for replica, url in list(self.targets.items()):
                try:
                    with urllib.request.urlopen(url, timeout=2) as answer:
                        self.scrapes.append((t, replica, answer.read().decode()))
                except OSError:
                    continue  # a killed replica answers no more: it goes stale


def run_load(seconds: float, work: Path) -> list[tuple[float, str, str]]:
    plane = ControlPlane(build_binaries())
    redis = RedisServer()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        plane.start()
        redis.start()
        plane.grant_scheduler_role()
        for name, file, count in (("dgx", "dgx1-v100.yaml", 24), ("a10", "pcie-8gpu.yaml", 16)):
            inventory = example_inventory(file)
            for i in range(count):
                plane.create_gpu_node(f"{name}-{i:02d}", inventory)
        wait_nodes_ready(plane, 40)
        plane.create_priority_class("dash-low", 100)
        plane.create_priority_class("dash-high", 1000)
        plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        config = topo_config(work)
        t0 = time.monotonic()
        scraper = Scraper(t0)
        replicas = {}
        for replica in ("replica-a", "replica-b"):
            address = free_port_address()
            proc = start_topo(plane, config, redis.url, work / f"{replica}.log", address)
            procs.append(proc)
            replicas[replica] = proc
            assert wait_http_ok(f"http://{address}/readyz", 60), f"{replica} never got ready"
            scraper.targets[replica] = f"http://{address}/metrics"
        scraper.start()
        drive(plane, seconds, t0, replicas["replica-a"])
        scraper.done.set()
        scraper.join()
        return scraper.scrapes
    finally:
        tear_down(plane, procs, None, redis, None)


def drive(plane: ControlPlane, seconds: float, t0: float, leader: subprocess.Popen[bytes]) -> None:
    """The scripted load (module docstring), one tick a second."""
    rng = random.Random(24)
    expiry: list[tuple[float, str]] = []
    late: list[tuple[float, str, dict[str, str]]] = []  # incomplete gangs' last members
    serial = 0

    def pod(gpus: int, life: float, labels: dict[str, str] | None = None, **kw: Any) -> None:
        nonlocal serial
        serial += 1
        name = f"p{serial:05d}"
        limits = {**LIMITS, "nvidia.com/gpu": str(gpus)}
        plane.create_pod(
            name, namespace=NAMESPACE, scheduler=TOPO_NAME, labels=labels, limits=limits, **kw
        )
        expiry.append((now + life, name))

    killed = False
    tick = 0
    while (now := time.monotonic() - t0) < seconds:
        for _ in range(3):
            pod(rng.choice((1, 1, 1, 2, 2, 4, 8)), rng.uniform(15, 40))
        if tick % 6 == 0:
            job = f"gang{tick}"
            for _ in range(4):
                pod(2, 40, {"gpu-topology": job, "gpu-topology-replica": "4"})
        if tick % 12 == 3:
            job = f"late{tick}"
            labels = {"gpu-topology": job, "gpu-topology-replica": "4"}
            for _ in range(3):
                pod(2, 60, labels)
            late.append((now + 20, job, labels))
        for due, job, labels in [x for x in late if x[0] <= now]:
            late.remove((due, job, labels))
            pod(2, 40, labels)
        if tick == 10:
            pod(16, seconds)  # fits no node of 8 GPUs: stays unschedulable
        if 45 <= now < 60 and tick % 2 == 0:
            for _ in range(3):
                pod(8, seconds, priority_class="dash-low")
        if 60 <= now < 61:
            for _ in range(3):
                pod(8, 40, priority_class="dash-high")
        if now >= 80 and not killed:
            leader.send_signal(signal.SIGKILL)
            killed = True
        for due, name in [e for e in expiry if e[0] <= now]:
            expiry.remove((due, name))
            with contextlib.suppress(OSError):  # already gone (evicted)
                plane.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        tick += 1
        time.sleep(max(0.0, tick - (time.monotonic() - t0)))
    kill(leader, signal.SIGKILL)


def render(scrapes: list[Scrape], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dashboard = json.loads(DASHBOARD.read_text())
    series = Series(scrapes)
    end = max(s.t for s in scrapes)
    times = [t * SCRAPE_S for t in range(int(end / SCRAPE_S) + 1)]
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig = plt.figure(figsize=(16, rows * 0.5), dpi=80)
    grid = fig.add_gridspec(rows, 24, hspace=1.4, wspace=1.2, top=0.95, bottom=0.03)
    for panel in panels:
        pos = panel["gridPos"]
        rows_of = slice(pos["y"], pos["y"] + pos["h"] - 1)
        left = fig.add_subplot(grid[rows_of, pos["x"] : pos["x"] + pos["w"]])
        unit = panel["fieldConfig"]["defaults"]["unit"]
        left.set_title(f"{panel['title']} ({unit})" if unit != "short" else panel["title"])
        # Targets Grafana puts on the right axis (an override of their refId), here too.
        right_ids = {
            o["matcher"]["options"]
            for o in panel["fieldConfig"]["overrides"]
            if {"id": "custom.axisPlacement", "value": "right"} in o["properties"]
        }
        right = left.twinx() if right_ids else None
        drawn = 0
        # A stacked panel draws each series on top of the ones before (a missing value counts 0).
        stacked = panel["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
        base = [0.0] * len(times)
        for target in panel["targets"]:
            ax = left
            if right is not None and target["refId"] in right_ids:
                ax = right
            lines: dict[tuple[tuple[str, str], ...], list[float]] = {}
            for i, t in enumerate(times):
                for labels, value in series.evaluate(target["expr"], t).items():
                    lines.setdefault(labels, [float("nan")] * len(times))[i] = value
            for labels, values in sorted(lines.items()):
                legend = target["legendFormat"]
                for k, v in labels:
                    legend = legend.replace("{{" + k + "}}", v)
                if ax is right:
                    legend += " (right)"
                if stacked:
                    top = [
                        b + (0.0 if math.isnan(v) else v) for b, v in zip(base, values, strict=True)
                    ]
                    ax.fill_between(times, base, top, alpha=0.35, color=f"C{drawn % 10}")
                    values, base = top, top
                ax.plot(times, values, label=legend, linewidth=1.2, color=f"C{drawn % 10}")
                drawn += 1
        for axis in (left, right):
            if axis is not None:
                axis.set_xlim(0, end)
                axis.set_ylim(bottom=0)
                axis.tick_params(labelsize=8)
        left.grid(alpha=0.3)
        handles = [
            h for ax in (left, right) if ax is not None for h in ax.get_legend_handles_labels()[0]
        ]
        if handles:
            left.legend(handles=handles, fontsize=7, loc="upper left", ncol=2)
        else:
            left.text(
                0.5, 0.5, "no samples: none in this run", ha="center", transform=left.transAxes
            )
    fig.suptitle(
        "topo-scheduler dashboard (dashboards/topo-scheduler.json): its queries over /metrics "
        "scrapes of a real run on the local plane, drawn with matplotlib, not Grafana; x: seconds",
        fontsize=10,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 s, into build/ (bench-smoke)")
    parser.add_argument("--seconds", type=float, default=150)
    parser.add_argument("--out", type=Path, help="default: docs/dashboard.png")
    parser.add_argument("--scrapes", type=Path, help="draw from these recorded scrapes instead")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 30
    work = REPO / "build" / ("dashboard-quick" if args.quick else "dashboard")
    out = args.out or (work if args.quick else REPO / "docs") / "dashboard.png"
    work.mkdir(parents=True, exist_ok=True)
    if args.scrapes:
        recorded = [json.loads(line) for line in args.scrapes.read_text().splitlines()]
    else:
        recorded = [list(s) for s in run_load(args.seconds, work)]
        with (work / "scrapes.jsonl").open("w") as f:
            for r in recorded:
                f.write(json.dumps(r) + "\n")
    scrapes = [parse(t, replica, text) for t, replica, text in recorded]
    render(scrapes, out)
    print(f"{len(scrapes)} scrapes; dashboard drawn into {out}")


if __name__ == "__main__":
    main()
