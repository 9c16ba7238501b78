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

A pod asking ``nvidia.com/gpu`` (any whole-GPU resource) that a DeviceClass backs (v1.37's
DRAExtendedResource) is placed by the GPU rules on the nodes whose device plugin offers it, and
only when none fits, here, on the nodes that leave it to DRA (allocatable 0): its special claim
(filters/dra.py, dra/extended.py) then carries the GPUs, allocated together with its other
claims, so that one choice by interconnect covers them all.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..filters.chain import PodFilters
from ..model.decisions import Placement
from ..model.objects import PodInput
from ..snapshot.cluster import ClusterState
from ..snapshot.nodes import NodeState
from .nodes import place_without_gpus


def place_claims(
    state: ClusterState, pod: PodInput, filters: PodFilters, spread: bool, gpus: bool = False
) -> Placement | None:
    """The node for the pod's claims; with ``gpus``, the pod's whole GPUs are DRA-backed and go
    to the special claim: only nodes that leave them to DRA (allocatable 0) are candidates,
    the others being the device-plugin path's (placement/nodes.py)."""
    dra = filters.dra
    if filters.problem is not None or dra is None:
        return None
    variant = dra.dra_variant if gpus else dra.variant(frozenset())
    lead = None
    for class_name, count in variant.needs.items():
        index = state.devices.class_index(class_name, state.nodes)
        if index is None or index.everywhere:
            lead = None
            break
        if lead is None or count > lead[1]:
            lead = (index, count)
    if lead is None or filters.has_preferences:
        if gpus:
            # The GPU rules left the pod no node: any node that leaves its GPUs to DRA.
            nodes = [state.nodes[n] for n in sorted(state.nodes)]
            return _first_passing(pod, filters, nodes, dra.gpu_backed)
        return place_without_gpus(state, pod, filters)
    index, count = lead
    buckets = list(index.nodes_with(count))
    if spread:
        buckets.reverse()
    for _, bucket in buckets:
        first = state.nodes[bucket.first()]
        found = _first_passing(pod, filters, [first], dra.gpu_backed if gpus else ())
        if found is not None:
            return found
        rest = [state.nodes[n] for n in bucket.in_order() if n != first.name]
        found = _first_passing(pod, filters, rest, dra.gpu_backed if gpus else ())
        if found is not None:
            return found
    return None


def _first_passing(
    pod: PodInput, filters: PodFilters, nodes: list[NodeState], dra_gpus: Sequence[str]
) -> Placement | None:
    dra = filters.dra
    assert dra is not None
    for node in nodes:
        if dra_gpus and not dra.dra_side(node).issuperset(dra_gpus):
            continue
        if not filters.check(node):
            return Placement(pod.key, pod.uid, node.name, (), (), ())
    return None
