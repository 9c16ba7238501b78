"""bench-frag: GPU fragmentation on Alibaba's openb trace, replayed the way FGD was evaluated.

The 1,213 GPU nodes of openb_node_list_gpu_node.csv; per seed (42..51) the trace's pods sorted
by name, shuffled, then copies drawn with replacement up to 130% of the cluster's GPUs, a
seeded node tie-break order, each pod tried once (benchmarks/frag/trace.py). Every policy runs
in the same harness and is measured after every pod: unallocated GPU %, fragmentation amount and
rate (the paper's F_n(M), benchmarks/frag/measure.py), failed pods per request class. The
references BestFit and FGD are the simulator's (benchmarks/frag/references.py) and are
calibrated against its published means first, on every trace it published (default, multigpuNN,
gpushareNN, gpuspecNN, cpuNNN: ``report.PUBLISHED``): off by more than 0.3 points at 100%
arrived, the harness is wrong and the bench says so (exit status 2). Ours is the pure core's
decide + apply_decision (benchmarks/frag/ours.py).

The simulator's variant traces (Alibaba's cluster-trace-gpu-v2023/csv, CC-BY, never copied into
the repo) are read from ``--trace-dir`` like the default one, e.g. ``--trace-dir
/work/data/openb-gpuspec --trace openb_pod_list_gpuspec33.csv``; a gpuspec trace's gpu_spec
column ("A|B": the GPU models a pod may run on) is read by the references and the measure as the
simulator reads it, and by ours as a required node affinity on ``nvidia.com/gpu.product``.

Writes the table (Markdown) and a plot (PNG) to --out, and prints the table. A benchmark: the
goals are printed PASS/MISS, never asserted.

``--quick`` (bench-smoke) replays a slice of the trace (every 8th node and every 8th pod) for one
seed in one process, into build/bench-frag-quick/: seconds, the same harness, report and plot.
The published means are not a slice's: the calibration is not checked. Without the
trace at hand (a clone that has no ../shared beside it), it replays a made-up stand-in of the
trace's shape instead (``trace.stand_in``) and says so.

``--scaled 5000,10000`` (issue 32: one rule at every cluster size) replays the same trace on the
node list repeated to each of those sizes (``trace.scaled``; the workload drawn for it inflated to
match, the same 130% of the larger cluster's GPUs), ours alone by default (the references rank
every node in Python), beside the trace's own cluster, and prints each size's unallocated GPU %
at 100% arrived against the trace's own figure (goal: within 0.3 points) with the mean decision
time.

``--pin 33`` (issue 32: constrained workloads) pins that percent of the trace's GPU pods to GPU
models before the workloads are drawn (``trace.pinned``, drawn with ``--pin-seed``; the models a
pod may run on are its gpu_spec, which the harness's references and its measure read as the
simulator's do, and ours reads as a required node affinity on ``nvidia.com/gpu.product``). Its
pins are not those of the simulator's gpuspecNN traces (replay them with ``--trace``): their
published means are printed beside the references' for comparison, not checked.

Usage: python -m benchmarks.bench_frag [--quick] [--trace openb_pod_list_default.csv]
       [--trace-dir DIR] [--seeds 42-51] [--policies BestFit,FGD,topo-scheduler] [--jobs 2]
       [--pin 33 [--pin-seed 1]] [--scaled 5000,10000] [--out build/bench-frag]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from benchmarks.frag import report
from benchmarks.frag.measure import Cluster, Meter, target_classes
from benchmarks.frag.ours import Ours
from benchmarks.frag.references import FGD, BestFit, Policy
from benchmarks.frag.replay import Run, replay
from benchmarks.frag.trace import (
    DEFAULT_TRACE,
    NodeSpec,
    PodSpec,
    TraceError,
    load_nodes,
    load_pods,
    pinned,
    scaled,
    stand_in,
    trace_dir,
    workload,
)

POLICIES: dict[str, Callable[[Cluster], Policy]] = {"BestFit": BestFit, "FGD": FGD, Ours.name: Ours}
RATIO = 1.3
QUICK_STRIDE = 8  # --quick: every 8th node and every 8th pod of the trace
SCALED_TOLERANCE = 0.3  # --scaled: unallocated % at 100% arrived within this of the trace's own

# Per worker process: the trace and the measure (with its memo of node shapes).
_nodes: list[NodeSpec] = []
_pods: list[PodSpec] = []
_meter: Meter | None = None


def _load(nodes: list[NodeSpec], pods: list[PodSpec]) -> None:
    global _nodes, _pods, _meter
    _nodes, _pods, _meter = nodes, pods, Meter(target_classes(pods))


J = TypeVar("J")
R = TypeVar("R")


def _map(
    run: Callable[[J], R], jobs: list[J], processes: int, nodes: list[NodeSpec], pods: list[PodSpec]
) -> list[R]:
    """Every job's replay, on ``processes`` forked workers that each load the trace once (or in
    this process when there is one)."""
    if processes > 1:
        with multiprocessing.get_context("fork").Pool(processes, _load, (nodes, pods)) as pool:
            return pool.map(run, jobs, chunksize=1)
    _load(nodes, pods)
    return [run(job) for job in jobs]


def _run(job: tuple[str, int]) -> Run:
    policy, seed = job
    assert _meter is not None
    work = workload(_nodes, _pods, seed, RATIO)
    return replay(_nodes, work, _meter, POLICIES[policy], time.perf_counter)


def _run_scaled(job: tuple[int, str, int]) -> tuple[int, Run]:
    """One replay on the node list repeated to ``count`` nodes (the trace's own: ``count`` is
    its length)."""
    count, policy, seed = job
    assert _meter is not None
    nodes = scaled(_nodes, count)
    work = workload(nodes, _pods, seed, RATIO)
    return count, replay(nodes, work, _meter, POLICIES[policy], time.perf_counter)


def _scaled_report(sizes: list[int], runs: list[tuple[int, Run]]) -> list[str]:
    """Per size and policy: unallocated % at 100% arrived (mean, per seed), its difference to
    the trace's own cluster (the first size), the pods replayed and the mean decision time."""
    own = sizes[0]
    lines = [
        "Scaled (the node list repeated, the workload inflated to match): unallocated GPU % at "
        "100% arrived",
        "",
        "| nodes | policy | pods | mean | per seed | diff to "
        f"{own:,} nodes | decision mean | replay |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by: dict[tuple[int, str], list[Run]] = {}
    for count, run in runs:
        by.setdefault((count, run.policy), []).append(run)
    checks = []
    for (count, policy), rs in by.items():
        mean = statistics.fmean(report.series(rs, 100))
        base = statistics.fmean(report.series(by[(own, policy)], 100))
        cells = ", ".join(f"{v:.2f}" for v in report.series(rs, 100))
        decision = 1000 * sum(r.deciding for r in rs) / sum(r.pods for r in rs)
        replayed = sum(r.seconds for r in rs) / len(rs)
        lines.append(
            f"| {count:,} | {policy} | {rs[0].pods:,} | {mean:.2f} | {cells} | "
            f"{mean - base:+.2f} | {decision:.3f} ms | {replayed:.0f} s |"
        )
        if count != own:
            inside = abs(mean - base) <= SCALED_TOLERANCE
            checks.append(
                f"goal {'PASS' if inside else 'MISS'}: {policy} at {count:,} nodes within "
                f"{SCALED_TOLERANCE} points of {own:,} ({mean - base:+.2f})"
            )
    return [*lines, "", *checks]


def _seeds(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def _trace(args: argparse.Namespace) -> tuple[list[NodeSpec], list[PodSpec]]:
    """The trace's GPU nodes and pods; under ``--quick`` a slice of them, or the stand-in when
    the trace is not at hand (then ``args.trace`` names the stand-in). A TraceError otherwise."""
    try:
        directory = trace_dir(args.trace_dir)
    except TraceError as exc:
        if not args.quick:
            raise
        print(f"bench-frag --quick: {exc}\nReplaying a made-up stand-in of its shape instead.")
        args.trace = "stand-in.csv"
        return stand_in()
    nodes, pods = load_nodes(directory), load_pods(directory, args.trace)
    if args.quick:
        nodes, pods = nodes[::QUICK_STRIDE], pods[::QUICK_STRIDE]
    if args.pin:
        pods = pinned(nodes, pods, args.pin, args.pin_seed)
    return nodes, pods


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a slice of the trace, one seed (bench-smoke)"
    )
    parser.add_argument("--trace", default=DEFAULT_TRACE, help="pod list CSV in the trace dir")
    parser.add_argument(
        "--trace-dir", default=None, help="default: $TOPO_OPENB_DIR, else ../shared/data/openb"
    )
    parser.add_argument("--seeds", default="42-51", type=_seeds)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument(
        "--scaled",
        default=None,
        type=lambda text: [int(n) for n in text.split(",")],
        help="node counts to repeat the node list to, beside the trace's own (ours alone "
        "unless --policies says otherwise)",
    )
    parser.add_argument(
        "--pin", type=int, default=0, help="percent of the GPU pods pinned to GPU models"
    )
    parser.add_argument("--pin-seed", type=int, default=1, help="the draw of --pin's pins")
    parser.add_argument("--out", default=None, type=Path, help="default: build/bench-frag")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.jobs = args.seeds[:1], 1
    args.out = args.out or Path("build/bench-frag-quick" if args.quick else "build/bench-frag")
    if args.scaled and "--policies" not in sys.argv:
        args.policies = Ours.name
    policies = args.policies.split(",")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        parser.error(f"--policies: unknown {', '.join(unknown)} (known: {', '.join(POLICIES)})")
    try:
        nodes, pods = _trace(args)
    except TraceError as exc:
        print(f"bench-frag: {exc}", file=sys.stderr)
        return 1
    gpus = sum(n.gpus for n in nodes)
    pins = sum(1 for p in pods if p.models)
    print(
        f"bench-frag{' --quick' if args.quick else ''}: {args.trace}, {len(pods)} pods "
        f"({pins} pinned to GPU models), "
        f"{len(nodes)} GPU nodes ({gpus} GPUs), "
        f"seeds {args.seeds[0]}..{args.seeds[-1]}, up to {RATIO:.0%} arrived, "
        f"{args.jobs} processes"
    )
    if args.scaled:
        return _scaled(args, nodes, pods, policies)
    jobs = [(p, s) for p in policies for s in args.seeds]
    start = time.perf_counter()
    runs = _map(_run, jobs, args.jobs, nodes, pods)
    wall = time.perf_counter() - start
    by_policy: dict[str, list[Run]] = {}
    for run in runs:
        by_policy.setdefault(run.policy, []).append(run)
    lines = report.table(by_policy)
    lines.append("")
    lines += [
        "Time per run (mean over seeds): the replay's wall time, and one decision's mean:",
        "",
    ]
    lines += [
        f"- {p}: replay {sum(r.seconds for r in rs) / len(rs):.1f} s, decision "
        f"{1000 * sum(r.deciding for r in rs) / sum(r.pods for r in rs):.3f} ms"
        for p, rs in by_policy.items()
    ]
    lines.append(f"wall time: {wall:.0f} s on {args.jobs} processes")
    if args.quick:  # a slice of the trace: the published means are not its means
        checks, calibrated = ["calibration: not checked on a slice of the trace (--quick)"], True
    else:
        checks, calibrated = report.calibration(args.trace, by_policy, args.pin)
    lines += ["", *checks]
    if args.trace == DEFAULT_TRACE and len(args.seeds) == 10 and not args.pin:
        lines += report.goals(by_policy, Ours.name)
    lines += report.against_fgd(by_policy, Ours.name)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = Path(args.trace).stem + (f"-pin{args.pin}-seed{args.pin_seed}" if args.pin else "")
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    report.plot(
        by_policy,
        f"{stem}: unallocated GPUs, mean of {len(args.seeds)} seeds",
        args.out / f"{stem}.png",
    )
    print("\n".join(lines))
    print(f"\nwritten: {args.out / (stem + '.md')}, {args.out / (stem + '.png')}")
    return 0 if calibrated else 2


def _scaled(
    args: argparse.Namespace, nodes: list[NodeSpec], pods: list[PodSpec], policies: list[str]
) -> int:
    sizes = [len(nodes), *args.scaled]
    # The largest first, so the two processes finish together.
    jobs = [(n, p, s) for n in sorted(sizes, reverse=True) for p in policies for s in args.seeds]
    start = time.perf_counter()
    runs = _map(_run_scaled, jobs, args.jobs, nodes, pods)
    runs.sort(key=lambda item: (sizes.index(item[0]), policies.index(item[1].policy)))
    lines = _scaled_report(sizes, runs)
    lines.append(f"wall time: {time.perf_counter() - start:.0f} s on {args.jobs} processes")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{Path(args.trace).stem}-scaled.md"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwritten: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
