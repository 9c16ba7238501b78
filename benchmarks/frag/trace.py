"""The openb trace (Alibaba cluster-trace-gpu-v2023) and the workloads the FGD simulator draws
from it (hkust-adsl/kubernetes-scheduler-simulator, the "workload inflation" method).

Read, never copied into the repo: the directory is ``--trace-dir``, else ``$TOPO_OPENB_DIR``,
else ``../shared/data/openb`` beside the repository (beside the main checkout, for a worktree).

A workload, per seed: the trace's pods sorted by name and shuffled; then copies drawn uniformly
with replacement from the trace until the next copy's GPU request would take the total past
``ratio`` x the cluster's GPUs (the simulator's stop test adds the copy's per-GPU milli, not its
total: kept), or, for a trace already above it, random pods dropped until it is not. The node
tie-break order is a seeded permutation: the simulator prefixes every node name with its place
in ``rand.Perm`` and breaks score ties by the smallest name. Our seeds drive Python's generator,
not Go's: the draws are the same in law, not pod for pod.
"""

from __future__ import annotations

import csv
import os
import random
from pathlib import Path
from typing import NamedTuple

DIR_ENV = "TOPO_OPENB_DIR"
NODES_FILE = "openb_node_list_gpu_node.csv"
DEFAULT_TRACE = "openb_pod_list_default.csv"
MILLI = 1000


class TraceError(Exception):
    pass


class NodeSpec(NamedTuple):
    name: str
    cpu: int  # milli
    memory: int  # MiB
    gpus: int
    model: str


class PodSpec(NamedTuple):
    name: str
    cpu: int  # milli
    memory: int  # MiB
    gpus: int  # GPUs asked (0: a CPU-only pod)
    milli: int  # per GPU, 1..1000 (below 1000: a share of one card); 0 without GPUs
    models: tuple[str, ...]  # gpu_spec: the node models allowed; () = any

    @property
    def total_milli(self) -> int:
        return self.gpus * self.milli

    @property
    def shared(self) -> bool:
        return self.gpus == 1 and self.milli < MILLI


class Workload(NamedTuple):
    seed: int
    pods: list[PodSpec]  # in arrival order
    ranks: list[int]  # per node (in file order), its place in the tie-break order


def trace_dir(flag: str | None) -> Path:
    """Where the trace is; a TraceError saying how to point at it when it is not there."""
    if flag:
        where, how = Path(flag), "--trace-dir"
    elif os.environ.get(DIR_ENV):
        where, how = Path(os.environ[DIR_ENV]), f"${DIR_ENV}"
    else:
        where, how = _default_dir(), "the default"
    if not (where / NODES_FILE).is_file():
        raise TraceError(
            f"the openb trace is not at {where} ({how}): expected {NODES_FILE} there. "
            f"Point --trace-dir or ${DIR_ENV} at a directory holding the CSVs of Alibaba's "
            "cluster-trace-gpu-v2023 (openb_node_list_gpu_node.csv, openb_pod_list_*.csv)."
        )
    return where


def _default_dir() -> Path:
    """../shared/data/openb beside the repository; in a git worktree, beside its main checkout
    (whose .git the worktree's .git file names)."""
    repo = Path(__file__).resolve().parents[2]
    where = repo.parent / "shared" / "data" / "openb"
    dot_git = repo / ".git"
    if not where.is_dir() and dot_git.is_file():
        text = dot_git.read_text().strip()
        if text.startswith("gitdir:"):
            main = Path(text.removeprefix("gitdir:").strip()).resolve().parents[2]
            where = main.parent / "shared" / "data" / "openb"
    return where


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _int(path: Path, row: dict[str, str], column: str) -> int:
    try:
        return int(row[column])
    except (KeyError, TypeError, ValueError):
        raise TraceError(
            f"{path.name}: row {row.get('name') or row.get('sn')}: column {column!r} "
            f"is {row.get(column)!r}, not a whole number"
        ) from None


def load_nodes(directory: Path) -> list[NodeSpec]:
    """The GPU nodes, in file order (the list has no CPU-only nodes; any is skipped)."""
    path = directory / NODES_FILE
    nodes = []
    for row in _rows(path):
        gpus = _int(path, row, "gpu")
        if gpus > 0:
            nodes.append(
                NodeSpec(
                    row["sn"],
                    _int(path, row, "cpu_milli"),
                    _int(path, row, "memory_mib"),
                    gpus,
                    row["model"],
                )
            )
    return nodes


def load_pods(directory: Path, trace: str) -> list[PodSpec]:
    path = directory / trace
    pods = []
    for row in _rows(path):
        gpus = _int(path, row, "num_gpu")
        milli = min(_int(path, row, "gpu_milli"), MILLI) if gpus else 0
        spec = (row.get("gpu_spec") or "").strip()
        models = tuple(m for m in spec.split("|") if m) if spec else ()
        pods.append(
            PodSpec(
                row["name"],
                _int(path, row, "cpu_milli"),
                _int(path, row, "memory_mib"),
                gpus,
                milli,
                models,
            )
        )
    return pods


def workload(nodes: list[NodeSpec], pods: list[PodSpec], seed: int, ratio: float) -> Workload:
    rng = random.Random(seed)
    order = sorted(pods, key=lambda p: p.name)
    rng.shuffle(order)
    target = ratio * MILLI * sum(n.gpus for n in nodes)
    total = sum(p.total_milli for p in pods)
    if total > target:
        while total > target:
            total -= order.pop(rng.randrange(len(order))).total_milli
    else:
        copies = 0
        while True:
            pick = pods[rng.randrange(len(pods))]
            if total + pick.milli > target:
                break
            total += pick.total_milli
            order.append(pick._replace(name=f"{pick.name}-tuned-{copies}"))
            copies += 1
    ranks = list(range(len(nodes)))
    rng.shuffle(ranks)
    return Workload(seed, order, ranks)


# The GPU models a pinned pod of ``pinned`` asks for, with their odds: single models and the
# families of openb's own gpu_spec column where it has one (the V100s, the older cards, any but
# the newest), so a pinned class may run on one pool or on several.
PIN_SPECS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("T4",), 30),
    (("V100M16", "V100M32"), 20),
    (("G2",), 15),
    (("P100",), 10),
    (("G3",), 5),
    (("P100", "V100M16", "V100M32"), 8),
    (("P100", "T4", "V100M16", "V100M32"), 6),
    (("G2", "P100", "T4", "V100M16", "V100M32"), 6),
)


def pinned(nodes: list[NodeSpec], pods: list[PodSpec], percent: int, seed: int) -> list[PodSpec]:
    """The trace with ``percent`` of its GPU pods (those without a gpu_spec; drawn with
    ``seed``) pinned to GPU models, as openb's gpuspec variants pin them (the simulator's
    gpuspecNN traces: NN% of the GPU pods carry a model constraint). A pod is pinned only to
    models of which some node could hold it alone (its GPUs and cpu), so that no pin makes a pod
    no policy can place. Applied to the trace before a workload is drawn from it: the target
    workload's classes carry the pins, as FGD's typical pods do."""
    rng = random.Random(seed)
    out = []
    for pod in pods:
        if pod.gpus and not pod.models and rng.random() * 100 < percent:
            fits = [
                (models, odds)
                for models, odds in PIN_SPECS
                if any(n.model in models and n.gpus >= pod.gpus and n.cpu >= pod.cpu for n in nodes)
            ]
            if fits:
                models = rng.choices([m for m, _ in fits], [o for _, o in fits])[0]
                pod = pod._replace(models=models)
        out.append(pod)
    return out


def scaled(nodes: list[NodeSpec], count: int) -> list[NodeSpec]:
    """The node list repeated up to ``count`` nodes (the last copy cut short), each copy's names
    suffixed with its number: the same cluster, larger. The workload drawn for it (``workload``)
    is inflated to match, since its copies fill the same share of the larger cluster's GPUs."""
    out = list(nodes)
    copy = 1
    while len(out) < count:
        out += [n._replace(name=f"{n.name}-x{copy}") for n in nodes[: count - len(out)]]
        copy += 1
    return out[:count]


def stand_in() -> tuple[list[NodeSpec], list[PodSpec]]:
    """A made-up trace of openb's shape, for ``bench-frag --quick`` where the trace is not at
    hand: 96 nodes of 2, 4 and 8 GPUs (three models) and 800 pods, a third of them GPU shares
    (100m to 900m), the rest whole 1, 2, 4 and 8-GPU pods and CPU-only pods, some bound to one
    model. Seeded: every run replays the same."""
    rng = random.Random(0)
    models = ("T4", "P100", "V100M32")
    nodes = [
        NodeSpec(f"stand-in-node-{i:03d}", 96_000, 393_216, (8, 4, 2)[i % 3], models[i % 3])
        for i in range(96)
    ]
    pods = []
    for i in range(800):
        kind = rng.random()
        if kind < 0.35:
            gpus, milli = 1, rng.choice((100, 250, 460, 500, 900))
        elif kind < 0.9:
            gpus, milli = rng.choice((1, 1, 1, 2, 4, 8)), MILLI
        else:
            gpus, milli = 0, 0
        spec = (rng.choice(models),) if gpus and rng.random() < 0.1 else ()
        pods.append(
            PodSpec(
                f"stand-in-pod-{i:04d}", rng.choice((2000, 6000, 12000)), 16384, gpus, milli, spec
            )
        )
    return nodes, pods
