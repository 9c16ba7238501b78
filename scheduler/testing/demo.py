"""`make demo`: the scheduler live on the local control plane, next to its offline prediction.

1. Simulates the example cluster and workload with `topo-scheduler simulate` (the pure core).
2. Starts etcd, kube-apiserver and KWOK, and a redis-server; creates the example nodes as KWOK
   nodes; runs `topo-scheduler run` under the restricted scheduler identity; submits the example
   pods; waits until every schedulable pod is bound.
3. Prints where every pod went (node and GPUs) and whether that matches the simulation, then
   stops every process it started.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from .controlplane import REPO, ControlPlane, build_binaries
from .redisserver import RedisServer

EXAMPLES = REPO / "configs" / "examples"
CLUSTER = EXAMPLES / "dgx1-v100.yaml"
WORKLOAD = EXAMPLES / "workload-mixed.yaml"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def main() -> int:
    print(f"== simulate {CLUSTER.name} {WORKLOAD.name} (offline, same core)")
    sim = subprocess.run(
        [sys.executable, "-m", "scheduler", "simulate", "-o", "json", str(CLUSTER), str(WORKLOAD)],
        capture_output=True,
        text=True,
        check=True,
    )
    predicted = {p["pod"]: (p["node"], p["devices"]) for p in json.loads(sim.stdout)["placements"]}
    subprocess.run([sys.executable, "-m", "scheduler", "simulate", str(CLUSTER), str(WORKLOAD)])

    print("== live: starting the local control plane and redis-server")
    plane = ControlPlane(build_binaries())
    redis = RedisServer()
    scheduler: subprocess.Popen[bytes] | None = None
    try:
        plane.start()
        redis.start()
        plane.grant_scheduler_role()
        for node in _docs(CLUSTER):
            node["metadata"].setdefault("annotations", {})["kwok.x-k8s.io/node"] = "fake"
            plane.apply(node)
        log = plane.dir / "scheduler.log"
        scheduler = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scheduler",
                "run",
                "--kubeconfig",
                str(plane.scheduler_kubeconfig),
                "--redis-url",
                redis.url,
                "--http-address",
                "127.0.0.1:0",
            ],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
        deadline = time.monotonic() + 60
        while b"reconciled store" not in log.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.2)  # submit once the scheduler leads, as a user would
        pods = _docs(WORKLOAD)
        for pod in pods:
            running_on = pod["spec"].get("nodeName")
            plane.apply(pod)
            if running_on:
                print(f"   {pod['metadata']['name']} already runs on {running_on}")
        expected = set(predicted)
        deadline = time.monotonic() + 60
        live: dict[str, Any] = {}
        while time.monotonic() < deadline:
            listed = plane.request("GET", "/api/v1/namespaces/default/pods")["items"]
            live = {f"default/{p['metadata']['name']}": p for p in listed}
            if all(live.get(k, {}).get("spec", {}).get("nodeName") for k in expected):
                break
            time.sleep(0.3)
        print("== where every pod went (live), against the simulation")
        mismatches = 0
        for key in sorted(live):
            pod = live[key]
            node = pod["spec"].get("nodeName")
            annotations = pod["metadata"].get("annotations") or {}
            if key not in expected and node:
                continue  # the pod that was already running
            if not node:
                reason = next(
                    (
                        c.get("message", "")
                        for c in pod["status"].get("conditions") or []
                        if c["type"] == "PodScheduled"
                    ),
                    "",
                )
                print(f"   {key:<40} Pending: {reason}")
                continue
            devices = [
                int(x) for x in annotations.get("topo-scheduler.io/devices", "").split(",") if x
            ]
            same = predicted.get(key) == (node, devices)
            mismatches += not same
            mark = "same as simulated" if same else f"simulated {predicted.get(key)}"
            print(f"   {key:<40} {node} GPUs {devices}  ({mark})")
        print(f"== {len(expected)} pods bound, {mismatches} differ from the simulation")
        return 0
    finally:
        if scheduler is not None:
            scheduler.terminate()
            scheduler.wait(timeout=30)
        redis.close()
        plane.stop()
        print("== stopped every process the demo started")


if __name__ == "__main__":
    raise SystemExit(main())
