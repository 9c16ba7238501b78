"""Test builders in the style of kube-scheduler's MakePod().Name(...).Req(...).Obj().

A test reads as its scenario:
    MakeNode().Name("dgx-a").Links(DGX1_V100).Obj()
    MakePod().Name("worker-0").Req(2).Gang("job-a", 2).Obj()
"""

from __future__ import annotations

import json
from typing import Any

from scheduler.core.model.objects import (
    Affinity,
    ContainerInput,
    HostPort,
    LabelSelector,
    NodeInput,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodInput,
    PreferredNodeTerm,
    Requirement,
    SpreadConstraint,
    Taint,
    Toleration,
    WeightedPodAffinityTerm,
)
from scheduler.core.settings import CoreSettings


class MakeNode:
    def __init__(self) -> None:
        self._name = "node"
        self._vendor = "nvidia"
        self._n: int | None = None
        self._links: list[list[str]] | None = None
        self._scores: list[list[int]] | None = None
        self._unhealthy: set[int] = set()
        self._memory = 32768
        self._sgpu = 0
        self._labels: dict[str, str] = {}
        self._annotations: dict[str, str] = {}
        self._taints: list[Taint] = []
        self._cordoned = False
        self._raw: str | None = None
        self._gpu = True
        self._allocatable: dict[str, str] | None = None  # None: no status at all

    def Name(self, name: str) -> MakeNode:
        self._name = name
        return self

    def Vendor(self, vendor: str) -> MakeNode:
        self._vendor = vendor
        return self

    def GPUs(self, n: int) -> MakeNode:
        self._n = n
        return self

    def Links(self, links: list[list[str]]) -> MakeNode:
        self._links = links
        return self

    def Scores(self, scores: list[list[int]]) -> MakeNode:
        self._scores = scores
        return self

    def Unhealthy(self, *indices: int) -> MakeNode:
        self._unhealthy.update(indices)
        return self

    def MemoryMiB(self, mib: int) -> MakeNode:
        self._memory = mib
        return self

    def SGPU(self, per_card: int) -> MakeNode:
        self._sgpu = per_card
        return self

    def Label(self, key: str, value: str) -> MakeNode:
        self._labels[key] = value
        return self

    def Annotation(self, key: str, value: str) -> MakeNode:
        self._annotations[key] = value
        return self

    def Taint(self, key: str, effect: str = "NoSchedule", value: str = "") -> MakeNode:
        self._taints.append(Taint(key, effect, value))
        return self

    def Cordoned(self) -> MakeNode:
        self._cordoned = True
        return self

    def RawInventory(self, raw: str) -> MakeNode:
        self._raw = raw
        return self

    def NoGPUs(self) -> MakeNode:
        self._gpu = False
        return self

    def Allocatable(self, quantities: dict[str, int | str] | None = None) -> MakeNode:
        """Give the node a status.allocatable (``{}``: a status that offers no GPUs). Like every
        real node it allows 110 pods unless ``pods`` is given."""
        self._allocatable = {"pods": "110"}
        self._allocatable.update({k: str(v) for k, v in (quantities or {}).items()})
        return self

    def inventory(self) -> dict[str, Any]:
        n = self._n
        if n is None:
            matrix = self._links or self._scores
            n = len(matrix) if matrix else 8
        inv: dict[str, Any] = {
            "vendor": self._vendor,
            "devices": [
                {
                    "index": i,
                    "uuid": f"GPU-{self._name}-{i}",
                    "memoryMiB": self._memory,
                    "healthy": i not in self._unhealthy,
                }
                for i in range(n)
            ],
        }
        if self._links is not None:
            inv["links"] = self._links
        if self._scores is not None:
            inv["scores"] = self._scores
        if self._sgpu:
            inv["sgpuPerCard"] = self._sgpu
        return inv

    def Obj(self) -> NodeInput:
        annotations = dict(self._annotations)
        if self._raw is not None:
            annotations["topo-scheduler.io/gpus"] = self._raw
        elif self._gpu:
            annotations["topo-scheduler.io/gpus"] = json.dumps(self.inventory())
        return NodeInput(
            self._name,
            labels=dict(self._labels),
            annotations=annotations,
            unschedulable=self._cordoned,
            taints=tuple(self._taints),
            allocatable=None if self._allocatable is None else dict(self._allocatable),
        )


class MakePod:
    def __init__(self) -> None:
        self._name = "pod"
        self._ns = "default"
        self._containers: list[ContainerInput] = []
        self._init: list[ContainerInput] = []
        self._labels: dict[str, str] = {}
        self._annotations: dict[str, str] = {}
        self._node = ""
        self._phase = "Pending"
        self._selector: dict[str, str] = {}
        self._tolerations: list[Toleration] = []
        self._scheduler = "topo-scheduler"
        self._node_required: list[NodeSelectorTerm] | None = None
        self._node_preferred: list[PreferredNodeTerm] = []
        self._pod_required: list[PodAffinityTerm] = []
        self._pod_preferred: list[WeightedPodAffinityTerm] = []
        self._anti_required: list[PodAffinityTerm] = []
        self._anti_preferred: list[WeightedPodAffinityTerm] = []
        self._spread: list[SpreadConstraint] = []
        self._claims: list[str] = []
        self._gates: list[str] = []
        self._priority = 0
        self._overhead: dict[str, str] = {}
        self._deleting = False
        self._created = ""

    def Name(self, name: str) -> MakePod:
        self._name = name
        return self

    def Namespace(self, ns: str) -> MakePod:
        self._ns = ns
        return self

    def Req(self, gpus: int | str, resource: str = "nvidia.com/gpu") -> MakePod:
        return self.Container(f"c{len(self._containers)}", {resource: str(gpus)})

    def Container(self, name: str, limits: dict[str, str]) -> MakePod:
        self._containers.append(ContainerInput(name, limits=dict(limits)))
        return self

    def InitContainer(self, name: str, limits: dict[str, str], sidecar: bool = False) -> MakePod:
        policy = "Always" if sidecar else ""
        self._init.append(ContainerInput(name, limits=dict(limits), restart_policy=policy))
        return self

    def Shared(
        self,
        core: int | None = None,
        memory: str | None = None,
        ratio: int | None = None,
        sgpu: int | None = None,
        cards: int = 1,
        qos: str | None = None,
    ) -> MakePod:
        limits = {"koordinator.sh/gpu.shared": str(cards)}
        if core is not None:
            limits["koordinator.sh/gpu-core"] = str(core)
        if memory is not None:
            limits["koordinator.sh/gpu-memory"] = memory
        if ratio is not None:
            limits["koordinator.sh/gpu-memory-ratio"] = str(ratio)
        if sgpu is not None:
            limits["metax-tech.com/sgpu"] = str(sgpu)
        if qos is not None:
            self._annotations["metax-tech.com/sgpu-qos-policy"] = qos
        return self.Container(f"c{len(self._containers)}", limits)

    def Gang(self, job: str, replicas: int | str) -> MakePod:
        self._labels["gpu-topology"] = job
        self._labels["gpu-topology-replica"] = str(replicas)
        return self

    def Label(self, key: str, value: str) -> MakePod:
        self._labels[key] = value
        return self

    def Annotation(self, key: str, value: str) -> MakePod:
        self._annotations[key] = value
        return self

    def GPUPolicy(self, policy: str) -> MakePod:
        return self.Annotation("hami.io/gpu-scheduler-policy", policy)

    def NodePolicy(self, policy: str) -> MakePod:
        return self.Annotation("hami.io/node-scheduler-policy", policy)

    def Bound(self, node: str, devices: str | None = None) -> MakePod:
        self._node = node
        self._phase = "Running"
        if devices is not None:
            self._annotations["topo-scheduler.io/devices"] = devices
        return self

    def Phase(self, phase: str) -> MakePod:
        self._phase = phase
        return self

    def NodeSelector(self, key: str, value: str) -> MakePod:
        self._selector[key] = value
        return self

    def Tolerate(self, key: str, operator: str = "Exists", value: str = "") -> MakePod:
        self._tolerations.append(Toleration(key=key, operator=operator, value=value))
        return self

    def Requests(self, **amounts: str) -> MakePod:
        """A container requesting these (``cpu="2", memory="4Gi"``; ``_`` for ``-`` in names)."""
        requests = {k.replace("_", "-"): v for k, v in amounts.items()}
        self._containers.append(ContainerInput(f"c{len(self._containers)}", requests=requests))
        return self

    def ContainerWith(
        self,
        name: str,
        requests: dict[str, str] | None = None,
        limits: dict[str, str] | None = None,
        ports: tuple[HostPort, ...] = (),
    ) -> MakePod:
        self._containers.append(
            ContainerInput(name, dict(limits or {}), dict(requests or {}), host_ports=ports)
        )
        return self

    def Init(self, name: str, requests: dict[str, str], sidecar: bool = False) -> MakePod:
        policy = "Always" if sidecar else ""
        self._init.append(ContainerInput(name, requests=dict(requests), restart_policy=policy))
        return self

    def HostPort(self, port: int, protocol: str = "TCP", ip: str = "0.0.0.0") -> MakePod:
        return self.ContainerWith(
            f"p{len(self._containers)}", ports=(HostPort(port, protocol, ip),)
        )

    def Overhead(self, **amounts: str) -> MakePod:
        self._overhead.update(amounts)
        return self

    def NodeAffinityIn(self, key: str, *values: str, op: str = "In") -> MakePod:
        """A required node-affinity term of one requirement (each call adds a term: ORed)."""
        term = NodeSelectorTerm(match_expressions=(Requirement(key, op, values),))
        self._node_required = [*(self._node_required or []), term]
        return self

    def NodeAffinityTerm(self, term: NodeSelectorTerm) -> MakePod:
        self._node_required = [*(self._node_required or []), term]
        return self

    def PreferNode(self, weight: int, key: str, *values: str) -> MakePod:
        term = NodeSelectorTerm(match_expressions=(Requirement(key, "In", values),))
        self._node_preferred.append(PreferredNodeTerm(weight, term))
        return self

    def PodAffinity(self, topology_key: str, **labels: str) -> MakePod:
        self._pod_required.append(_pod_term(topology_key, labels))
        return self

    def PodAntiAffinity(self, topology_key: str, **labels: str) -> MakePod:
        self._anti_required.append(_pod_term(topology_key, labels))
        return self

    def PreferAntiAffinity(self, weight: int, topology_key: str, **labels: str) -> MakePod:
        self._anti_preferred.append(
            WeightedPodAffinityTerm(weight, _pod_term(topology_key, labels))
        )
        return self

    def Spread(
        self,
        max_skew: int,
        topology_key: str,
        when: str = "DoNotSchedule",
        min_domains: int | None = None,
        **labels: str,
    ) -> MakePod:
        self._spread.append(
            SpreadConstraint(
                max_skew=max_skew,
                topology_key=topology_key,
                when_unsatisfiable=when,
                label_selector=LabelSelector(match_labels=dict(labels)),
                min_domains=min_domains,
            )
        )
        return self

    def Claim(self, name: str) -> MakePod:
        self._claims.append(name)
        return self

    def Gate(self, name: str) -> MakePod:
        self._gates.append(name)
        return self

    def Priority(self, priority: int) -> MakePod:
        self._priority = priority
        return self

    def Deleting(self) -> MakePod:
        self._deleting = True
        return self

    def Created(self, timestamp: str) -> MakePod:
        self._created = timestamp
        return self

    def Obj(self) -> PodInput:
        affinity = None
        if (
            self._node_required is not None
            or self._node_preferred
            or self._pod_required
            or self._pod_preferred
            or self._anti_required
            or self._anti_preferred
        ):
            affinity = Affinity(
                node_required=None if self._node_required is None else tuple(self._node_required),
                node_preferred=tuple(self._node_preferred),
                pod_required=tuple(self._pod_required),
                pod_preferred=tuple(self._pod_preferred),
                anti_required=tuple(self._anti_required),
                anti_preferred=tuple(self._anti_preferred),
            )
        return PodInput(
            self._ns,
            self._name,
            uid=f"uid-{self._ns}-{self._name}",
            scheduler_name=self._scheduler,
            node_name=self._node,
            phase=self._phase,
            labels=dict(self._labels),
            annotations=dict(self._annotations),
            containers=tuple(self._containers),
            init_containers=tuple(self._init),
            node_selector=dict(self._selector),
            tolerations=tuple(self._tolerations),
            deleting=self._deleting,
            created=self._created,
            overhead=dict(self._overhead),
            affinity=affinity,
            spread=tuple(self._spread),
            claims=tuple(self._claims),
            scheduling_gates=tuple(self._gates),
            priority=self._priority,
        )


def _pod_term(topology_key: str, labels: dict[str, str]) -> PodAffinityTerm:
    return PodAffinityTerm(
        topology_key=topology_key, label_selector=LabelSelector(match_labels=dict(labels))
    )


def cluster(
    *nodes: NodeInput | MakeNode,
    running: tuple[PodInput | MakePod, ...] = (),
    settings: CoreSettings | None = None,
) -> Any:
    """A ClusterState with these nodes and running pods (and ``settings``, None: the defaults);
    fails the test on any warning."""
    from scheduler.core.snapshot.cluster import ClusterState

    state = ClusterState(settings)
    for node in nodes:
        warning = state.set_node(node.Obj() if isinstance(node, MakeNode) else node)
        assert warning is None, warning
    for pod in running:
        warning = state.add_bound_pod(pod.Obj() if isinstance(pod, MakePod) else pod)
        assert warning is None, warning
    return state


def schedule(state: Any, *pods: PodInput | MakePod) -> list[Any]:
    """Decide these pending pods in order (gangs once complete), applying each placement."""
    from scheduler.core.cycle import schedule_in_order

    objs = [p.Obj() if isinstance(p, MakePod) else p for p in pods]
    return schedule_in_order(state, objs)
