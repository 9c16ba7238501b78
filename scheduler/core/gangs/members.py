"""A gang member as planning sees it, and how one node's part of a gang shares its GPUs."""

from __future__ import annotations

import msgspec
from msgspec import Struct

from ..filters.dra import claims_for
from ..model.decisions import Placement
from ..model.objects import PodInput
from ..placement.nodes import whole_placement
from ..resources.requests import PodRequest
from ..snapshot.cluster import ClusterState
from ..snapshot.nodes import NodeState


class Member(Struct, frozen=True):
    pod: PodInput
    request: PodRequest


def with_claims(state: ClusterState, member: Member, placement: Placement) -> Placement | None:
    """The placement with the member's DRA claims allocated on its node (filters/dra.py), as
    the devices in use stand now; None when they cannot be."""
    if not member.pod.resource_claims and not state.dra_extended:
        return placement
    found = claims_for(state, member.pod, state.nodes[placement.node])
    if isinstance(found, str):
        return None
    return msgspec.structs.replace(placement, claims=found) if found else placement


def split_joint(
    state: ClusterState,
    gang: str,
    node: NodeState,
    joint: int,
    group: list[Member],
    minimum: int,
) -> list[Placement] | None:
    """Give each member (in the given order) the best subset of the joint set that is left, and
    its DRA claims allocated on the node after those of the members before it (none when the
    group's filters allowed the node: they allocate in this order), and apply it to the open
    tentative scope; None when a member's claims do not fit after all."""
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
        placement = with_claims(
            state, member, whole_placement(member.pod, member.request, node, indices, gang)
        )
        if placement is None:
            return None
        state.apply(placement, member.pod, minimum)
        out.append(placement)
    return out
