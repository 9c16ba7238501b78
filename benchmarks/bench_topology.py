"""bench-topology: cross-node topology choices compared on one seeded stream (issue 21).

The cluster and the stream of ``topology_workload.py`` (5,040 nodes = 70 blocks x 4 racks x 18
nodes of 4 GPUs, each rack one NVLink clique; gangs of 16 x 4 required in one nvlink, 64 x 4
preferred in one block, small gangs and single pods), jobs arriving and leaving until the first
refusal, replayed through the core under:

  (a) ours: the joint choice of domain, nodes and GPUs (topology levels configured);
  (b) the same scheduler with topology off (no levels, no constraints, no compact gangs);
  (c) Kueue's BestFit order of domains followed by our in-node choice (kueue_reference.py).

Printed side by side: GPUs allocated at the first refusal; gangs with a level (16 x 4 nvlink,
64 x 4 block) placed within it; the mean number of racks (= NVLink cliques) and blocks per gang
(every gang of several pods). A benchmark, not a test: it never fails on its figures.

``--quick`` (bench-smoke) replays at most 400 jobs on 8 blocks (576 nodes): seconds, to check that
it runs; its figures mean nothing.

Usage: python -m benchmarks.bench_topology [--quick] [--seed 7] [--jobs 20000] [--seeds 1]
       [--blocks 70]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

from msgspec import Struct

from scheduler.service import heap

from . import topology_workload as tw
from .kueue_reference import kueue_then_ours


class Column(Struct):
    name: str
    at: int  # the arrival refused first
    refused: str  # its kind
    gpus: int  # allocated then
    total: int
    within: float  # of the gangs with a level, placed within it
    levelled: int
    racks: float  # mean per gang of several pods
    blocks: float
    cpu_ms: float  # mean CPU time per decision


def measure(
    name: str, topology: bool, place: tw.PlaceFn, jobs: list[tw.Job], cluster_blocks: int
) -> Column:
    heap.pause()
    state = tw.build(tw.settings(topology), cluster_blocks)
    heap.settle()
    out = tw.replay(state, jobs, place, stop_at_refusal=True)
    racks, blocks, within, levelled = [], [], 0, 0
    for job_name, job in out.placed.items():
        labels = [state.nodes[n].node.labels for n in out.nodes_of[job_name]]
        rack_set = {(lb[tw.BLOCK], lb[tw.RACK]) for lb in labels}
        block_set = {lb[tw.BLOCK] for lb in labels}
        if job.pods > 1:
            racks.append(len(rack_set))
            blocks.append(len(block_set))
        if job.level:
            levelled += 1
            within += len(rack_set if job.level == "nvlink" else block_set) == 1
    at = out.refused_at if out.refused_at is not None else len(jobs)
    decisions = [t for times in out.cpu.values() for t in times]
    return Column(
        name=name,
        at=at,
        refused=jobs[at].kind if at < len(jobs) else "-",
        gpus=out.gpus_at_refusal,
        total=len(state.nodes) * tw.GPUS,
        within=within / levelled if levelled else 0.0,
        levelled=levelled,
        racks=statistics.fmean(racks) if racks else 0.0,
        blocks=statistics.fmean(blocks) if blocks else 0.0,
        cpu_ms=1000 * statistics.fmean(decisions) if decisions else 0.0,
    )


ROWS: list[tuple[str, Callable[[Column], str]]] = [
    ("first refusal at arrival", lambda c: f"{c.at} ({c.refused})"),
    ("GPUs allocated then", lambda c: f"{c.gpus} ({c.gpus / c.total:.1%})"),
    ("gangs within their level", lambda c: f"{c.within:.1%} of {c.levelled}"),
    ("mean racks per gang", lambda c: f"{c.racks:.2f}"),
    ("mean blocks per gang", lambda c: f"{c.blocks:.2f}"),
    ("mean CPU per decision", lambda c: f"{c.cpu_ms:.2f} ms"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, to check that it runs (bench-smoke)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=1, help="seeds seed..seed+n-1, each printed")
    parser.add_argument("--jobs", type=int, default=20000, help="at most this many arrivals")
    parser.add_argument("--blocks", type=int, default=tw.BLOCKS, help="of 72 nodes each")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.blocks = 400, 8
    for seed in range(args.seed, args.seed + args.seeds):
        jobs = tw.stream(seed, args.jobs, (200, 2000))
        columns = [
            measure("(a) ours", True, tw.ours(True), jobs, args.blocks),
            measure("(b) topology off", False, tw.ours(False), jobs, args.blocks),
            measure("(c) Kueue BestFit + ours in-node", True, kueue_then_ours, jobs, args.blocks),
        ]
        print(f"seed {seed}: at most {len(jobs)} jobs, each leaving 200-2000 arrivals later")
        print(f"  {'':<26}" + "".join(f"{c.name:>34}" for c in columns))
        for label, cell in ROWS:
            print(f"  {label:<26}" + "".join(f"{cell(c):>34}" for c in columns))


if __name__ == "__main__":
    main()
