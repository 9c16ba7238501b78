"""The holdings part of the snapshot: which pod holds which GPUs (or shares of cards) where.

A ``Holding`` is charged to its node (``NodeState.charge``); one whose node is not known yet (a
pod event that beat its node's event) waits as an orphan and is charged when the node arrives.
``Holdings`` also keeps which pods of each gang are bound, for "k of N present" and conflicts.
"""

from __future__ import annotations

import msgspec

from ..model.decisions import Placement, Share


class Holding(msgspec.Struct, frozen=True):
    """What one pod holds on one node."""

    pod: str
    node: str
    whole: int  # mask of whole GPUs
    shares: tuple[Share, ...] = ()
    gang: str | None = None
    replicas: int = 0
    uid: str = ""
    # Whole GPUs per resource name that the kubelet admits the pod against (its effective
    # request, requests.kubelet_request): charged to the node's allocatable, whether or not a
    # mask of GPUs could be chosen for it.
    resources: tuple[tuple[str, int], ...] = ()
    # The mask is our guess (a pod bound by another scheduler, without our annotations): its
    # count is what matters, so it is chosen again (rule 1 over the free GPUs) whenever it no
    # longer fits the node, e.g. when the node or its inventory arrives after the pod.
    guessed: bool = False


class Holdings:
    """Holdings by pod key: on known nodes (``on_nodes``, which ``ClusterState.holdings`` is),
    waiting for their node (``orphans``), and the bound members of each gang."""

    __slots__ = ("gang_bound", "on_nodes", "orphans")

    def __init__(self) -> None:
        self.on_nodes: dict[str, Holding] = {}
        self.orphans: dict[str, Holding] = {}
        # Bound gang members: gang key -> pod keys (for "k of N present" and conflicts).
        self.gang_bound: dict[str, set[str]] = {}

    def held(self, key: str) -> Holding | None:
        """What the pod holds: on its node, or waiting for its node to (re)appear."""
        return self.on_nodes.get(key) or self.orphans.get(key)

    def join_gang(self, gang: str, key: str) -> None:
        self.gang_bound.setdefault(gang, set()).add(key)

    def leave_gang(self, gang: str, key: str) -> None:
        members = self.gang_bound.get(gang)
        if members is not None:
            members.discard(key)
            if not members:
                del self.gang_bound[gang]

    def sizes(self) -> dict[str, int]:
        return {
            "holdings": len(self.on_nodes),
            "orphans": len(self.orphans),
            "gang_bound": len(self.gang_bound),
            "gang_bound_pods": sum(len(keys) for keys in self.gang_bound.values()),
        }


def holding_of(placement: Placement, replicas: int = 0) -> Holding:
    """What a placement holds once assumed: its whole GPUs as a mask, and its shares."""
    whole = 0
    for i in placement.devices:
        whole |= 1 << i
    return Holding(
        placement.pod,
        placement.node,
        whole,
        placement.shares,
        placement.gang,
        replicas,
        placement.uid,
        placement.resources,
    )


def bits(mask: int) -> list[int]:
    """The indices set in ``mask``, ascending."""
    out = []
    i = 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return out


def share_mask(holding: Holding) -> int:
    """The cards the holding has a share of, as a mask."""
    mask = 0
    for s in holding.shares:
        mask |= 1 << s.index
    return mask
