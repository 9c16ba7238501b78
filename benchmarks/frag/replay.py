"""One replay: a workload's pods submitted one at a time to one policy, each tried once (no
retries, no departures), the cluster measured after every pod.

The samples are binned as the simulator's analysis scripts bin them: the arrived GPU milli (of
every pod submitted so far, placed or not) as an integer percent of the cluster's GPUs, rounded,
and the samples of one bin averaged; an empty bin takes the samples within one percent of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

from .measure import Cluster, Meter, class_of
from .references import Policy
from .trace import NodeSpec, Workload

# The arrived percentages the table shows (the plot shows every bin).
MARKS = (50, 80, 90, 100, 130)


class Sample(NamedTuple):
    unallocated: float  # % of the cluster's GPUs
    frag_amount: float  # F as % of the cluster's GPUs
    frag_rate: float  # F as % of the idle GPUs


class Run(NamedTuple):
    policy: str
    seed: int
    bins: dict[int, Sample]  # by arrived %
    failed: dict[str, int]  # failed pods by request class
    pods: int
    seconds: float  # the replay's wall time: every decision and the harness's measure after it
    deciding: float  # of it, the time in the policy's decisions (``choose``, ours' assume too)


def class_label(pod_class: tuple[int, int, int, tuple[str, ...]]) -> str:
    _cpu, milli, gpus, models = pod_class
    if not gpus:
        what = "cpu-only"
    elif gpus == 1 and milli < 1000:
        what = f"share {milli}m"
    else:
        what = f"{gpus} GPU"
    return what + (f" [{'|'.join(models)}]" if models else "")


def replay(
    nodes: list[NodeSpec],
    work: Workload,
    meter: Meter,
    make_policy: Callable[[Cluster], Policy],
    clock: Callable[[], float],
) -> Run:
    cluster = Cluster(nodes, work.ranks, meter)
    policy = make_policy(cluster)
    start = clock()
    arrived = 0
    sums: dict[int, list[float]] = {}
    failed: Counter[str] = Counter()
    capacity = cluster.capacity
    deciding = 0.0
    for pod in work.pods:
        arrived += pod.total_milli
        before = clock()
        choice = policy.choose(pod)
        deciding += clock() - before
        if choice is None:
            failed[class_label(class_of(pod))] += 1
        else:
            cluster.place(choice[0], pod, choice[1])
        idle = cluster.idle
        row = sums.setdefault(round(100 * arrived / capacity), [0.0, 0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += round(100 * cluster.allocated / capacity, 2)
        row[2] += 100 * cluster.frag / capacity
        row[3] += 100 * cluster.frag / idle if idle else 100.0
    seconds = clock() - start
    bins = {
        b: Sample(100 - row[1] / row[0], row[2] / row[0], row[3] / row[0])
        for b, row in sums.items()
    }
    for b in range(0, max(bins) + 1):
        if b not in bins:
            near = [bins[x] for x in (b - 1, b + 1) if x in bins]
            if near:
                bins[b] = Sample(*(sum(s[i] for s in near) / len(near) for i in range(3)))
    return Run(
        policy.name,
        work.seed,
        dict(sorted(bins.items())),
        dict(failed),
        len(work.pods),
        seconds,
        deciding,
    )
