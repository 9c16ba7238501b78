"""bench-core: decision time per pod on 5,000 nodes of 8 GPUs with mixed occupancy.

A benchmark, not a test: it prints figures and never fails on them. The cluster is half DGX-1 V100
(NVLink cube-mesh) and half 8-GPU PCIe servers, each offering 8 nvidia.com/gpu in its
status.allocatable (checked, as on a live cluster); each node starts with a random number of GPUs
held by running pods (seeded, so runs are comparable). Then pods asking for 1, 2, 4 or 8 GPUs (and
a share of 2- and 4-replica gangs) are decided and applied one by one, the way the live scheduler's
serial cycle runs them. The goal is p99 <= 1 ms per pod.

Usage: python -m benchmarks.bench_core [--nodes 5000] [--pods 3000] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from scheduler.core.cluster import ClusterState
from scheduler.core.cycle import Unit, apply_decision, decide
from scheduler.core.decisions import Placed
from scheduler.core.objects import ContainerInput, NodeInput, PodInput
from tests.topologies import DGX1_V100, PCIE8


def make_node(name: str, links: list[list[str]]) -> NodeInput:
    inv = {"vendor": "nvidia", "devices": [{"index": i} for i in range(8)], "links": links}
    # As on a live cluster, the device plugin's allocatable is checked too.
    return NodeInput(
        name,
        annotations={"topo-scheduler.io/gpus": json.dumps(inv)},
        allocatable={"cpu": "64", "nvidia.com/gpu": "8"},
    )


def make_pod(name: str, gpus: int, labels: dict[str, str] | None = None) -> PodInput:
    return PodInput(
        "bench",
        name,
        uid=name,
        scheduler_name="topo-scheduler",
        labels=labels or {},
        containers=(ContainerInput("c", limits={"nvidia.com/gpu": str(gpus)}),),
    )


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def report(label: str, samples_s: list[float]) -> None:
    ms = sorted(s * 1000 for s in samples_s)
    print(
        f"{label:<28} n={len(ms):>5}  p50={percentile(ms, 0.50):.3f} ms  "
        f"p90={percentile(ms, 0.90):.3f} ms  p99={percentile(ms, 0.99):.3f} ms  "
        f"max={ms[-1]:.3f} ms  mean={statistics.fmean(ms):.3f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    state = ClusterState()
    t0 = time.perf_counter()
    for i in range(args.nodes):
        state.set_node(make_node(f"node-{i:05d}", DGX1_V100 if i % 2 == 0 else PCIE8))
    # Mixed occupancy: each node has 0..7 GPUs held by one running pod on random GPUs.
    held_gpus = 0
    for i in range(args.nodes):
        k = rng.choice([0, 0, 1, 2, 3, 4, 5, 6, 7])
        if k:
            devices = ",".join(str(d) for d in sorted(rng.sample(range(8), k)))
            running = make_pod(f"running-{i}", k)
            running = PodInput(
                running.namespace,
                running.name,
                uid=running.uid,
                node_name=f"node-{i:05d}",
                phase="Running",
                annotations={"topo-scheduler.io/devices": devices},
                containers=running.containers,
            )
            state.add_bound_pod(running)
            held_gpus += k
    build_s = time.perf_counter() - t0
    print(
        f"cluster: {args.nodes} nodes x 8 GPUs, {held_gpus} GPUs held at start "
        f"({held_gpus / (8 * args.nodes):.0%}), {len(state.classes)} node classes, "
        f"built in {build_s:.2f} s"
    )

    singles: dict[int, list[float]] = {1: [], 2: [], 4: [], 8: []}
    gang_times: list[float] = []
    gang_pods = 0
    placed = unschedulable = 0
    for n in range(args.pods):
        if n % 20 == 19:  # every 20th unit is a gang
            replicas, per = rng.choice([(2, 1), (2, 4), (4, 2)])
            job = f"job-{n}"
            labels = {"gpu-topology": job, "gpu-topology-replica": str(replicas)}
            unit = Unit(
                f"bench/{job}",
                tuple(make_pod(f"{job}-{r}", per, labels) for r in range(replicas)),
            )
            start = time.perf_counter()
            decision = decide(state, unit)
            apply_decision(state, decision, unit)
            gang_times.append(time.perf_counter() - start)
            gang_pods += replicas
        else:
            k = rng.choices([1, 2, 4, 8], weights=[50, 25, 15, 10])[0]
            unit = Unit(None, (make_pod(f"pod-{n}", k),))
            start = time.perf_counter()
            decision = decide(state, unit)
            apply_decision(state, decision, unit)
            singles[k].append(time.perf_counter() - start)
        if isinstance(decision, Placed):
            placed += 1
        else:
            unschedulable += 1

    all_single = [s for values in singles.values() for s in values]
    report("single pods (all)", all_single)
    for k, values in singles.items():
        report(f"  {k}-GPU pods", values)
    report(f"gangs ({gang_pods} pods)", gang_times)
    per_gang_pod = [t * len(gang_times) / max(1, gang_pods) for t in gang_times]
    report("  per gang pod", per_gang_pod)
    p99 = percentile(sorted(all_single), 0.99) * 1000
    print(f"units placed={placed} not placed={unschedulable}; classes at end={len(state.classes)}")
    print(f"goal p99 <= 1 ms per pod: measured p99 {p99:.3f} ms -> ratio {p99 / 1.0:.2f}x of goal")


if __name__ == "__main__":
    main()
