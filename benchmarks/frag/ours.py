"""Our scheduler in the replay: the pure core's ``decide`` and its assume (``apply_decision``), the
same two calls ``run`` and ``simulate`` make, on a ClusterState built from the trace.

A node is a GPU node of our inventory annotation (its cards, no link matrix: openb lists none),
labelled with its model as NVIDIA's GPU feature discovery labels it (``nvidia.com/gpu.product``, one
of the pool labels a request class carries its pods' pins on), offering its cpu, memory and GPUs in
status.allocatable (and 1,000 pods: the simulator counts none). Its name carries its place in the
seeded tie-break order as the simulator's does ("0042-openb-node-0007"), so where the core breaks
ties by name it follows the same order. A pod asks for cpu and memory, and either ``nvidia.com/gpu``
(whole GPUs) or ``koordinator.sh/gpu-core`` (a share of one card: milli / 10 percent); a gpu_spec is
a required node affinity on that label. The placement the core makes is checked against the
harness's own accounting (Cluster.place refuses a placement that does not fit).
"""

from __future__ import annotations

import json

from scheduler.core.cycle import Unit, apply_decision, decide
from scheduler.core.model.decisions import Placed
from scheduler.core.model.names import CORE_RESOURCE, GPUS_ANNOTATION
from scheduler.core.model.objects import (
    Affinity,
    ContainerInput,
    NodeInput,
    NodeSelectorTerm,
    PodInput,
    Requirement,
)
from scheduler.core.snapshot.cluster import ClusterState

from .measure import Cluster
from .references import Choice
from .trace import PodSpec

MODEL_LABEL = "nvidia.com/gpu.product"
SCHEDULER = "topo-scheduler"


def node_input(name: str, model: str, cpu: int, memory: int, gpus: int) -> NodeInput:
    inventory = {
        "vendor": "nvidia",
        "devices": [{"index": i, "uuid": f"GPU-{name}-{i}"} for i in range(gpus)],
    }
    return NodeInput(
        name,
        labels={MODEL_LABEL: model},
        annotations={GPUS_ANNOTATION: json.dumps(inventory)},
        allocatable={
            "cpu": f"{cpu}m",
            "memory": f"{memory}Mi",
            "pods": "1000",
            "nvidia.com/gpu": str(gpus),
        },
    )


def pod_input(pod: PodSpec) -> PodInput:
    limits: dict[str, str] = {}
    if pod.shared:
        limits[CORE_RESOURCE] = str(-(-pod.milli // 10))
    elif pod.gpus:
        limits["nvidia.com/gpu"] = str(pod.gpus)
    affinity = None
    if pod.models:
        term = NodeSelectorTerm(match_expressions=(Requirement(MODEL_LABEL, "In", pod.models),))
        affinity = Affinity(node_required=(term,))
    return PodInput(
        "openb",
        pod.name,
        uid=pod.name,
        scheduler_name=SCHEDULER,
        containers=(
            ContainerInput(
                "main",
                limits=limits,
                requests={"cpu": f"{pod.cpu}m", "memory": f"{pod.memory}Mi"},
            ),
        ),
        affinity=affinity,
    )


class Ours:
    name = "topo-scheduler"

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.state = ClusterState()
        self.by_name = {}
        for node in cluster.nodes:
            name = f"{node.rank:04d}-{node.name}"
            self.by_name[name] = node
            self.state.set_node(
                node_input(name, node.model, node.cpu, node.memory, len(node.cards))
            )

    def choose(self, pod: PodSpec) -> Choice:
        unit = Unit(None, (pod_input(pod),))
        decision = decide(self.state, unit)
        if not isinstance(decision, Placed):
            return None
        apply_decision(self.state, decision, unit)
        (placement,) = decision.placements
        cards = placement.devices or tuple(s.index for s in placement.shares)
        return self.by_name[placement.node], cards
