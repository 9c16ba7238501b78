"""The pod records part of the snapshot: every pod bound or assumed on a node, ours or not, GPU
or not, as the Kubernetes filters and preemption read it (a ``PodRecord`` in ``PodIndex``), and
which pods are on each node (also on nodes not known yet: their records are charged to the node
when it arrives, ``NodeState.charge_record``)."""

from __future__ import annotations

from collections.abc import Iterable

from ..model.objects import PodInput
from ..resources.accounting import RequestsMemo
from ..resources.ports import host_ports
from ..resources.resize import bound_requests
from .fragmentation import reach_of
from .podindex import PodIndex, PodRecord


class Records:
    """The records by pod key (``index``) and the pod keys on each node (``on_node``)."""

    __slots__ = ("index", "on_node")

    def __init__(self) -> None:
        self.index = PodIndex()
        self.on_node: dict[str, set[str]] = {}

    def get(self, key: str) -> PodRecord | None:
        return self.index.records.get(key)

    def on(self, node: str) -> Iterable[str]:
        """The keys of the pods recorded on ``node``."""
        return self.on_node.get(node, ())

    def add(self, record: PodRecord) -> None:
        """Record a pod where there is no record of it."""
        self.index.add(record)
        self.on_node.setdefault(record.node, set()).add(record.key)

    def remove(self, record: PodRecord) -> None:
        self.index.remove(record.key)
        keys = self.on_node.get(record.node)
        if keys is not None:
            keys.discard(record.key)
            if not keys:
                del self.on_node[record.node]

    def sizes(self) -> dict[str, int]:
        return {
            "on_node": len(self.on_node),
            "on_node_pods": sum(len(keys) for keys in self.on_node.values()),
            **{f"index.{name}": n for name, n in self.index.sizes().items()},
        }


def record_of(
    pod: PodInput,
    node: str,
    gpu_names: frozenset[str],
    pool_labels: Iterable[str],
    gang: str | None = None,
    minimum: int = 0,
    memo: RequestsMemo | None = None,
) -> PodRecord:
    """What the Kubernetes filters keep of a pod on ``node``: labels, requests (GPU resources
    left out: the GPU rules charge those), host ports, required anti-affinity; and what
    preemption weighs it by: priority, uid, creation time, its gang and that gang's minimum
    (as the caller knows them: from the pod's sources, or the placement); where its request
    class can run, read on ``pool_labels`` (FragmentationSettings). ``memo``: the caller's
    requests by spec."""
    anti = pod.affinity.anti_required if pod.affinity is not None else ()
    return PodRecord(
        key=pod.key,
        namespace=pod.namespace,
        node=node,
        labels=pod.labels,
        requests=bound_requests(pod, gpu_names, memo),
        host_ports=host_ports(pod),
        anti_required=anti,
        terminating=pod.deleting,
        priority=pod.priority,
        uid=pod.uid,
        created=pod.created,
        gang=gang,
        minimum=minimum,
        reach=reach_of(pod, "", pool_labels),
    )
