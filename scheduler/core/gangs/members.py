"""A gang member as planning sees it, and how one node's part of a gang shares its GPUs."""

from __future__ import annotations

from msgspec import Struct

from ..model.decisions import Placement
from ..model.objects import PodInput
from ..placement.nodes import whole_placement
from ..resources.requests import PodRequest
from ..snapshot.cluster import ClusterState
from ..snapshot.nodes import NodeState


class Member(Struct, frozen=True):
    pod: PodInput
    request: PodRequest


def split_joint(
    state: ClusterState,
    gang: str,
    node: NodeState,
    joint: int,
    group: list[Member],
    minimum: int,
) -> list[Placement]:
    """Give each member (in the given order) the best subset of the joint set that is left, and
    apply it to the open tentative scope."""
    assert node.inventory is not None
    topology = node.inventory.topology
    out = []
    left = joint
    for member in group:
        k = member.request.gpus
        if k == 0:
            indices: tuple[int, ...] = ()
        else:
            choice = topology.best_set(left, k)
            assert choice is not None
            indices = choice.indices
            left &= ~choice.mask
        placement = whole_placement(member.pod, member.request, node, indices, gang)
        state.apply(placement, member.pod, minimum)
        out.append(placement)
    return out
