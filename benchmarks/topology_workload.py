"""The topology workload of issue 21, shared by bench-core and bench-topology.

The cluster: 5,040 nodes = 70 blocks x 4 racks x 18 nodes of 4 NVSwitch-connected GPUs, each rack
one NVLink clique (``nvidia.com/gpu.clique = <block uuid>.<rack>``), labelled with its block and
rack (``topology.levels``: block, rack; the built-in nvlink levels from the clique label).

The stream (seeded): jobs arrive one by one and each leaves after a lifetime counted in arrivals:

- 10%: gangs of 16 pods x 4 GPUs, required in one ``nvlink`` (a clique of 18 nodes);
- 3%: gangs of 64 pods x 4 GPUs, preferred in one ``block``;
- 20%: small gangs of 2 or 4 pods x 2 or 4 GPUs, no constraint (compact by default);
- the rest single pods of 1, 2 or 4 GPUs.
"""

from __future__ import annotations

import datetime
import json
import random
import time
from collections.abc import Callable

from msgspec import Struct

from scheduler.core.cycle import Unit, apply_decision, decide
from scheduler.core.model.decisions import Placed, Placement
from scheduler.core.model.objects import ContainerInput, NodeInput, PodInput, TopologyLevel
from scheduler.core.settings import CoreSettings, TopologySettings
from scheduler.core.snapshot.cluster import ClusterState

BLOCK = "example.com/topology-block"
RACK = "example.com/topology-rack"
CLIQUE = "nvidia.com/gpu.clique"
LEVELS = (TopologyLevel(BLOCK, "block"), TopologyLevel(RACK, "rack"))
BLOCKS, RACKS, NODES_PER_RACK, GPUS = 70, 4, 18, 4
NVSWITCH4 = [["X" if i == j else "NV18" for j in range(GPUS)] for i in range(GPUS)]
REQUIRED = "topo-scheduler.io/topology-required"
PREFERRED = "topo-scheduler.io/topology-preferred"
INDEX = "batch.kubernetes.io/job-completion-index"


def settings(
    topology: bool = True, pack_domains: bool = True, yield_to_required: bool = True
) -> CoreSettings:
    """Ours (levels, the clique label, compact gangs; single pods' ties to the broken domains
    first unless ``pack_domains`` is False; gangs that need no domain leave those kept for the
    gangs waiting for one unless ``yield_to_required`` is False), or the same scheduler
    without topology."""
    if topology:
        return CoreSettings(
            topology=TopologySettings(
                levels=LEVELS, pack_domains=pack_domains, yield_to_required=yield_to_required
            )
        )
    return CoreSettings(topology=TopologySettings(accelerator_label="", compact_gangs=False))


def node_name(block: int, rack: int, i: int) -> str:
    return f"b{block:02d}-r{rack}-n{i:02d}"


def build(core: CoreSettings, blocks: int = BLOCKS) -> ClusterState:
    state = ClusterState(core)
    inv = json.dumps(
        {"vendor": "nvidia", "devices": [{"index": i} for i in range(GPUS)], "links": NVSWITCH4}
    )
    for b in range(blocks):
        for r in range(RACKS):
            for i in range(NODES_PER_RACK):
                name = node_name(b, r, i)
                state.set_node(
                    NodeInput(
                        name,
                        labels={
                            BLOCK: f"block-{b:02d}",
                            RACK: f"rack-{r}",
                            CLIQUE: f"uuid-{b:02d}.{r}",
                            "kubernetes.io/hostname": name,
                        },
                        annotations={"topo-scheduler.io/gpus": inv},
                        allocatable={
                            "cpu": "96",
                            "memory": "768Gi",
                            "pods": "110",
                            "nvidia.com/gpu": "4",
                        },
                    )
                )
    return state


class Job(Struct, frozen=True):
    name: str
    kind: str  # "nvlink16", "block64", "small", "single"
    pods: int
    gpus: int  # per pod
    lifetime: int  # arrivals until it leaves
    level: str = ""  # the constraint's level: nvlink (required) or block (preferred)
    arrival: int = 0  # its pods' creationTimestamp: one arrival a minute

    def unit(self, constraints: bool = True) -> Unit:
        """Its pods (a gang unless single), with its constraint's annotation or without."""
        annotations: dict[str, str] = {}
        if constraints and self.kind == "nvlink16":
            annotations[REQUIRED] = "nvlink"
        elif constraints and self.kind == "block64":
            annotations[PREFERRED] = "block"
        pods = []
        for r in range(self.pods):
            labels = {INDEX: str(r)}
            if self.pods > 1:
                labels |= {"gpu-topology": self.name, "gpu-topology-replica": str(self.pods)}
            pods.append(
                PodInput(
                    "bench",
                    f"{self.name}-{r}" if self.pods > 1 else self.name,
                    uid=f"{self.name}-{r}",
                    created=created(self.arrival),
                    scheduler_name="topo-scheduler",
                    labels=labels,
                    annotations=annotations,
                    containers=(
                        ContainerInput(
                            "c",
                            limits={"nvidia.com/gpu": str(self.gpus)},
                            requests={"cpu": "2", "memory": "16Gi"},
                        ),
                    ),
                )
            )
        gang = f"bench/{self.name}" if self.pods > 1 else None
        return Unit(gang, tuple(pods))


def created(arrival: int) -> str:
    """The creationTimestamp of the pods of the job that arrives ``arrival``-th (RFC 3339)."""
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return (start + datetime.timedelta(minutes=arrival)).strftime("%Y-%m-%dT%H:%M:%SZ")


def stream(seed: int, count: int, lifetimes: tuple[int, int]) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for n in range(count):
        roll = rng.random()
        life = rng.randint(*lifetimes)
        if roll < 0.10:
            jobs.append(Job(f"nv-{n}", "nvlink16", 16, 4, life, "nvlink", n))
        elif roll < 0.13:
            jobs.append(Job(f"blk-{n}", "block64", 64, 4, life, "block", n))
        elif roll < 0.33:
            pods, gpus = rng.choice([(2, 2), (2, 4), (4, 2), (4, 4)])
            jobs.append(Job(f"small-{n}", "small", pods, gpus, life, arrival=n))
        else:
            jobs.append(Job(f"pod-{n}", "single", 1, rng.choice([1, 1, 2, 4]), life, arrival=n))
    return jobs


class Outcome(Struct):
    """What a stream did to the cluster: per job kind, the decision times (wall and CPU, s);
    the jobs placed (their placements) and the first refusal."""

    wall: dict[str, list[float]]
    cpu: dict[str, list[float]]
    placed: dict[str, Job]
    nodes_of: dict[str, list[str]]
    refused_at: int | None = None
    gpus_at_refusal: int = 0
    gpus_at_start: int = 0  # when the measured jobs start


PlaceFn = Callable[[ClusterState, "Job"], "list[Placement] | None"]


def replay(
    state: ClusterState,
    jobs: list[Job],
    place: PlaceFn,
    stop_at_refusal: bool,
    measure_from: int = 0,
) -> Outcome:
    """Each job arrives (after those whose lifetime ended left) and is placed by ``place``,
    which applies what it placed to ``state``; timed per job from ``measure_from`` on (the
    jobs before fill the cluster)."""
    out = Outcome({}, {}, {}, {})
    live: dict[str, tuple[int, list[str]]] = {}
    for n, job in enumerate(jobs):
        for name in [k for k, (end, _) in live.items() if end <= n]:
            for key in live.pop(name)[1]:
                state.remove_pod(key)
        wall, cpu = time.perf_counter(), time.thread_time()
        placements = place(state, job)
        if n >= measure_from:
            out.cpu.setdefault(job.kind, []).append(time.thread_time() - cpu)
            out.wall.setdefault(job.kind, []).append(time.perf_counter() - wall)
        if n == measure_from:
            out.gpus_at_start = sum(s.whole.bit_count() for s in state.nodes.values())
        if placements is None:
            if stop_at_refusal:
                out.refused_at = n
                out.gpus_at_refusal = sum(s.whole.bit_count() for s in state.nodes.values())
                return out
            continue
        live[job.name] = (n + job.lifetime, [p.pod for p in placements])
        if n >= measure_from:
            out.placed[job.name] = job
        out.nodes_of[job.name] = [p.node for p in placements]
    return out


def ours(constraints: bool) -> PlaceFn:
    """The core's own decide and apply (with or without the jobs' constraints)."""

    def place(state: ClusterState, job: Job) -> list[Placement] | None:
        unit = job.unit(constraints)
        decision = decide(state, unit)
        apply_decision(state, decision, unit)
        if isinstance(decision, Placed) and not decision.waiting:
            return list(decision.placements)
        return None

    return place


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]
