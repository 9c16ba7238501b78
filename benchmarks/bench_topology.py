"""bench-topology: cross-node topology choices compared on one seeded stream (issues 21, 32).

The cluster and the stream of ``topology_workload.py`` (5,040 nodes = 70 blocks x 4 racks x 18
nodes of 4 GPUs, each rack one NVLink clique; gangs of 16 x 4 required in one nvlink, 64 x 4
preferred in one block, small gangs and single pods), replayed through the core under:

  (a) ours: the joint choice of domain, nodes and GPUs (topology levels configured);
  (a') (queued replay only) ours with ``topology.packDomains`` off: single pods' ties by name;
  (b) the same scheduler with topology off (no levels, no constraints, no compact gangs);
  (c) Kueue's BestFit order of domains followed by our in-node choice (kueue_reference.py);
      its single pods are not TAS podsets and go through our decide without packDomains.

Two replays:

- first refusal (issue 21): jobs arrive and leave until the first refusal; printed: GPUs
  allocated then; gangs with a level (16 x 4 nvlink, 64 x 4 block) placed within it; the mean
  number of racks (= NVLink cliques) and blocks per gang (every gang of several pods).
- queued (issue 32 item 7, domain fragmentation): a job that does not fit waits and is retried
  in arrival order whenever something left (Kueue's BestEffortFIFO); it leaves its lifetime
  after it was placed. Means over the second half of the arrivals (one arrival = one minute):
  the racks a 16 x 4 gang still fits in and the blocks a 64 x 4 gang fits in (whole domains
  left for the gang classes, Kueue's count: free GPUs // 4 per node, summed); the wait of each
  gang class, in arrivals (gangs still waiting at the end count until then); GPU-hours stranded:
  free GPUs that no waiting gang could use (not on a node where one of its pods fits, or, for a
  gang that requires a clique, not in a rack that fits it whole), summed while some gang waits.
  The replay is the watch: an arriving job's pods are pending in the snapshot
  (``ClusterState.set_pending``) until placed (then bound: ``drop_pending``), so that (a) and
  (a') keep a domain for the gang that waits longest for a required one
  (``topology.yieldToRequired``, gangs/waiting.py, as ``run`` and ``simulate`` do); (c) runs
  with it off.
  The stranded figure is the workload's: topology off never keeps a gang waiting for a clique
  (it splits it), so it strands little and places almost no gang within its level.

A benchmark, not a test: it never fails on its figures.

``--quick`` (bench-smoke) replays at most 400 jobs (600 queued) on 8 blocks (576 nodes): seconds,
to check that it runs; its figures mean nothing.

Usage: python -m benchmarks.bench_topology [--quick] [--seed 7] [--jobs 20000] [--seeds 1]
       [--blocks 70] [--arrivals 4000] [--only refusal|queued]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from msgspec import Struct

from scheduler.core.settings import CoreSettings
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.service import heap

from . import topology_workload as tw
from .kueue_reference import kueue_then_ours

# (c)'s single pods are not TAS podsets: they go through our decide as before issue 32 item 7,
# without the broken-domains-first rule, so (c) stays Kueue's order and not ours.
# (a') is ours with packDomains off (yieldToRequired as ours); (c) has neither.
OURS, OFF = tw.settings(True), tw.settings(False)
NOPACK = tw.settings(True, pack_domains=False)
KUEUE = tw.settings(True, pack_domains=False, yield_to_required=False)


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
    name: str, core: CoreSettings, place: tw.PlaceFn, jobs: list[tw.Job], cluster_blocks: int
) -> Column:
    heap.pause()
    state = tw.build(core, cluster_blocks)
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


class Sample(Struct):
    """Per policy, over the steps from the warm-up on (one step = one arrival)."""

    name: str
    racks_open: float  # mean racks a 16 x 4 gang fits in whole
    blocks_open: float  # mean blocks a 64 x 4 gang fits in whole
    wait: dict[str, float]  # gang kind -> mean wait in arrivals (still waiting: until the end)
    waited: dict[str, int]  # gang kind -> gangs counted
    stranded: float  # GPU x arrivals free outside every domain a waiting gang could use
    within: float  # gangs with a level placed within it
    utilised: float  # mean share of GPUs allocated
    cpu_ms: float


def _fits(state: ClusterState, k: int) -> tuple[dict[str, int], dict[tuple[str, str], int], int]:
    """Pods of k whole GPUs that fit per block, per rack, and in all (as Kueue counts: free // k
    per node)."""
    blocks: dict[str, int] = {}
    racks: dict[tuple[str, str], int] = {}
    total = 0
    for node in state.nodes.values():
        fit = node.free_mask.bit_count() // k
        if fit:
            labels = node.node.labels
            block = labels[tw.BLOCK]
            blocks[block] = blocks.get(block, 0) + fit
            rack = (block, labels[tw.RACK])
            racks[rack] = racks.get(rack, 0) + fit
            total += fit
    return blocks, racks, total


def _stranded(state: ClusterState, waiting: list[tw.Job], racks: dict[tuple[str, str], int]) -> int:
    """Free GPUs that no waiting gang could use: a GPU is usable by a gang when a pod of the
    gang fits on its node and, for a gang that requires a clique (16 x 4), the node's rack fits
    the whole gang (``racks``: pods of 4 GPUs that fit per rack). The same for every column:
    what the workload needs, whether the policy honours it or not."""
    sizes = {job.gpus for job in waiting if job.pods > 1 and job.kind != "nvlink16"}
    required = any(job.kind == "nvlink16" for job in waiting)
    if not sizes and not required:
        return 0
    out = 0
    for node in state.nodes.values():
        free = node.free_mask.bit_count()
        if not free:
            continue
        usable = max((free // k * k for k in sizes), default=0)
        if required:
            labels = node.node.labels
            if racks.get((labels[tw.BLOCK], labels[tw.RACK]), 0) >= 16:
                usable = max(usable, free // 4 * 4)
        out += free - usable
    return out


def _may_fit(
    job: tw.Job,
    domains: bool,
    blocks: dict[str, int],
    racks: dict[tuple[str, str], int],
    total: int,
) -> bool:
    """A cheap necessary condition (skips hopeless retries): enough pods of its size fit, in
    one rack when it requires one (and the policy honours it)."""
    if domains and job.kind == "nvlink16":
        return any(fit >= job.pods for fit in racks.values())
    return total >= job.pods


def queued(
    name: str, core: CoreSettings, place: tw.PlaceFn, jobs: list[tw.Job], blocks_n: int, warm: int
) -> Sample:
    heap.pause()
    state = tw.build(core, blocks_n)
    topology = bool(core.topology.levels)
    heap.settle()
    live: dict[str, tuple[int, list[str]]] = {}
    waiting: list[tuple[int, tw.Job]] = []
    waits: dict[str, list[int]] = {}
    levelled = within = 0
    racks_open = blocks_open = stranded = used = 0.0
    cpu: list[float] = []
    total_gpus = len(state.nodes) * tw.GPUS
    for n, arriving in enumerate(jobs):
        left = [k for k, (end, _) in live.items() if end <= n]
        for job_name in left:
            for key in live.pop(job_name)[1]:
                state.remove_pod(key)
        waiting.append((n, arriving))
        for pod in arriving.unit(topology).pods:
            state.set_pending(pod)
        # Kueue's BestEffortFIFO: every waiting job in arrival order, each placed if it fits
        # (retried only when something left or it just came: otherwise nothing freed).
        still: list[tuple[int, tw.Job]] = []
        cache: dict[int, tuple[dict[str, int], dict[tuple[str, str], int], int]] = {}
        for came, job in waiting:
            if not left and came != n:
                still.append((came, job))
                continue
            if job.gpus not in cache:
                cache[job.gpus] = _fits(state, job.gpus)
            if not _may_fit(job, topology, *cache[job.gpus]):
                still.append((came, job))
                continue
            t = time.thread_time()
            placements = place(state, job)
            cpu.append(time.thread_time() - t)
            if placements is None:
                still.append((came, job))
                continue
            for p in placements:
                state.drop_pending(p.pod)  # bound
            cache.clear()
            live[job.name] = (n + job.lifetime, [p.pod for p in placements])
            if came >= warm and job.pods > 1:
                waits.setdefault(job.kind, []).append(n - came)
            if came >= warm and job.level:
                levelled += 1
                labels = [state.nodes[p.node].node.labels for p in placements]
                key = tw.RACK if job.level == "nvlink" else tw.BLOCK
                within += len({(lb[tw.BLOCK], lb[key]) for lb in labels}) == 1
        waiting = still
        if n >= warm:
            blocks, racks, _ = _fits(state, 4)
            racks_open += sum(fit >= 16 for fit in racks.values())
            blocks_open += sum(fit >= 64 for fit in blocks.values())
            stranded += _stranded(state, [j for _, j in waiting], racks)
            used += sum(s.whole.bit_count() for s in state.nodes.values()) / total_gpus
    for came, job in waiting:  # still waiting at the end: counted until then
        if came >= warm and job.pods > 1:
            waits.setdefault(job.kind, []).append(len(jobs) - came)
    steps = max(1, len(jobs) - warm)
    return Sample(
        name=name,
        racks_open=racks_open / steps,
        blocks_open=blocks_open / steps,
        wait={kind: statistics.fmean(w) for kind, w in sorted(waits.items())},
        waited={kind: len(w) for kind, w in sorted(waits.items())},
        stranded=stranded,
        within=within / levelled if levelled else 0.0,
        utilised=used / steps,
        cpu_ms=1000 * statistics.fmean(cpu) if cpu else 0.0,
    )


QUEUED_ROWS: list[tuple[str, Callable[[Sample], str]]] = [
    ("racks a 16x4 gang fits in", lambda s: f"{s.racks_open:.1f}"),
    ("blocks a 64x4 gang fits in", lambda s: f"{s.blocks_open:.1f}"),
    (
        "wait of 16x4 gangs",
        lambda s: f"{s.wait.get('nvlink16', 0):.0f} ({s.waited.get('nvlink16', 0)})",
    ),
    (
        "wait of 64x4 gangs",
        lambda s: f"{s.wait.get('block64', 0):.0f} ({s.waited.get('block64', 0)})",
    ),
    ("wait of small gangs", lambda s: f"{s.wait.get('small', 0):.0f} ({s.waited.get('small', 0)})"),
    ("GPU-hours stranded", lambda s: f"{s.stranded / 60:.0f}"),
    ("gangs within their level", lambda s: f"{s.within:.1%}"),
    ("GPUs allocated (mean)", lambda s: f"{s.utilised:.1%}"),
    ("mean CPU per decision", lambda s: f"{s.cpu_ms:.2f} ms"),
]


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
    parser.add_argument(
        "--arrivals", type=int, default=4000, help="of the queued replay (the first half warms up)"
    )
    parser.add_argument("--only", choices=("refusal", "queued"), help="one of the two replays")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.blocks, args.arrivals = 400, 8, 600
    for seed in range(args.seed, args.seed + args.seeds):
        if args.only != "queued":
            first_refusal(seed, args.jobs, args.blocks)
        if args.only != "refusal":
            queued_replay(seed, args.arrivals, args.blocks)


def first_refusal(seed: int, count: int, blocks: int) -> None:
    jobs = tw.stream(seed, count, (200, 2000))
    columns = [
        measure("(a) ours", OURS, tw.ours(True), jobs, blocks),
        measure("(b) topology off", OFF, tw.ours(False), jobs, blocks),
        measure("(c) Kueue BestFit + ours in-node", KUEUE, kueue_then_ours, jobs, blocks),
    ]
    print(f"seed {seed}: at most {len(jobs)} jobs, each leaving 200-2000 arrivals later")
    print(f"  {'':<26}" + "".join(f"{c.name:>34}" for c in columns))
    for label, cell in ROWS:
        print(f"  {label:<26}" + "".join(f"{cell(c):>34}" for c in columns))


def queued_replay(seed: int, count: int, blocks: int) -> None:
    """Jobs that do not fit wait and are retried (Kueue's BestEffortFIFO); the lifetimes scale
    with the cluster (200-2,000 arrivals at 70 blocks), so it runs about as full at any size."""
    lifetimes = (200 * blocks // tw.BLOCKS, 2000 * blocks // tw.BLOCKS)
    jobs = tw.stream(seed, count, lifetimes)
    warm = count // 2
    samples = [
        queued("(a) ours", OURS, tw.ours(True), jobs, blocks, warm),
        queued("(a') ours, packDomains off", NOPACK, tw.ours(True), jobs, blocks, warm),
        queued("(b) topology off", OFF, tw.ours(False), jobs, blocks, warm),
        queued("(c) Kueue BestFit + ours in-node", KUEUE, kueue_then_ours, jobs, blocks, warm),
    ]
    print(
        f"seed {seed}, queued: {count} arrivals, each leaving {lifetimes[0]}-{lifetimes[1]}"
        f" arrivals after it is placed; means over arrivals {warm}-{count}; waits in arrivals"
        " (gangs counted); one arrival a minute"
    )
    print(f"  {'':<26}" + "".join(f"{s.name:>34}" for s in samples))
    for label, cell in QUEUED_ROWS:
        print(f"  {label:<26}" + "".join(f"{cell(s):>34}" for s in samples))


if __name__ == "__main__":
    main()
