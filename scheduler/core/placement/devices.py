"""Where a pod whose ResourceClaims we allocate goes, when it asks for no whole or shared GPU
through the device plugin (issue 29).

The snapshot's class index (snapshot/devices.py) buckets the nodes by how many devices of a
DeviceClass they have free. The pod's leading class (the one its ExactCount requests ask the
most devices of) orders the candidates: binpack takes the nodes with the fewest free devices
that can still cover the request first (the smallest fitting node, as rule 2 does for
``nvidia.com/gpu``), spread the most; by name within a count. The filter chain, whose
DynamicResources filter allocates the claims on the node (filters/dra.py, the choice of devices
by interconnect inside it), is asked in that order until one node passes, so a decision costs
the buckets' walk and usually one allocation, whatever the cluster's size.

Without a usable index (no ExactCount request, a network-attached device matching the class, or
node preferences to weigh) the pod is placed as any pod without GPUs (placement/nodes.py), the
chain asked about every node.
"""

from __future__ import annotations

from ..filters.chain import PodFilters
from ..model.decisions import Placement
from ..model.objects import PodInput
from ..snapshot.cluster import ClusterState
from .nodes import place_without_gpus


def place_claims(
    state: ClusterState, pod: PodInput, filters: PodFilters, spread: bool
) -> Placement | None:
    dra = filters.dra
    if filters.problem is not None or dra is None:
        return None
    lead = None
    for class_name, count in dra.needs.items():
        index = state.devices.class_index(class_name, state.nodes)
        if index is None or index.everywhere:
            lead = None
            break
        if lead is None or count > lead[1]:
            lead = (index, count)
    if lead is None or filters.has_preferences:
        return place_without_gpus(state, pod, filters)
    index, count = lead
    buckets = list(index.nodes_with(count))
    if spread:
        buckets.reverse()
    nodes = state.nodes
    for _, bucket in buckets:
        first = bucket.first()
        if not filters.check(nodes[first]):
            return Placement(pod.key, pod.uid, first, (), (), ())
        for name in bucket.in_order():
            if name != first and not filters.check(nodes[name]):
                return Placement(pod.key, pod.uid, name, (), (), ())
    return None
