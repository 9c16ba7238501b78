"""The holdings part of the snapshot: which pod holds which GPUs (or shares of cards) where.

A ``Holding`` is charged to its node (``NodeState.charge``); one whose node is not known yet (a
pod event that beat its node's event) waits as an orphan and is charged when the node arrives.
``Holdings`` also keeps which pods of each gang are bound, for "k of N present" and conflicts.

A terminating member (its deletionTimestamp set) is the one exception, and this module is the one
place that makes it: it still holds its GPUs (they are not free until it is gone, as
kube-scheduler keeps a terminating pod's resources charged to its node), but it is not one of its
gang's bound members (``Holdings.join_gang``). A gang whose pods were deleted and recreated under
new names (a JobSet or Kubeflow restart) is then planned whole again, all or nothing, rather than
as "surplus" beside members that are going away; so are the missing part of a gang's minimum and
an elastic gang's surplus, whatever the gang's source. Volcano (a ``Releasing`` task is not an
allocated one) and KAI count a gang's members the same way.
"""

from __future__ import annotations

import msgspec

from ..model.decisions import ClaimAllocation, Placement, Share


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
    # The pod is being deleted (deletionTimestamp set): its GPUs stay held until it is gone, but
    # it is no bound member of its gang (module doc).
    terminating: bool = False
    # The ResourceClaims its placement allocates, while their allocation may not be in the
    # watched claims yet (assumed, or a previous leader's reservation reloaded): their devices
    # are held as the claims' would be (issue 29).
    claims: tuple[ClaimAllocation, ...] = ()
    # The bound watch (or a read) shows the pod bound there: not only assumed, or reserved for
    # a Binding that may still fail (gangs/planning.py places a gang's surplus only beside a
    # minimum of such members).
    shown: bool = False


class Holdings:
    """Holdings by pod key: on known nodes (``on_nodes``, which ``ClusterState.holdings`` is),
    waiting for their node (``orphans``), and the bound members of each gang."""

    __slots__ = ("gang_bound", "gangs_changed", "on_nodes", "orphans")

    def __init__(self) -> None:
        self.on_nodes: dict[str, Holding] = {}
        self.orphans: dict[str, Holding] = {}
        # Bound gang members: gang key -> pod keys (for "k of N present" and conflicts).
        self.gang_bound: dict[str, set[str]] = {}
        # The gangs whose bound members changed since the service last took them: its queue
        # puts a gang being completed first and reads that from the snapshot at each turn.
        self.gangs_changed: set[str] = set()

    def held(self, key: str) -> Holding | None:
        """What the pod holds: on its node, or waiting for its node to (re)appear."""
        return self.on_nodes.get(key) or self.orphans.get(key)

    def join_gang(self, holding: Holding) -> None:
        """The holding's pod counts among its gang's bound members, unless it is terminating
        (module doc): everything that reads ``gang_bound`` (the part of a minimum still needed,
        the siblings' nodes and topology domain, a gang's timeout, the stale-gang check) then
        sees the same members."""
        if holding.gang and not holding.terminating:
            self.gang_bound.setdefault(holding.gang, set()).add(holding.pod)
            self.gangs_changed.add(holding.gang)

    def leave_gang(self, holding: Holding) -> None:
        if not holding.gang:
            return
        members = self.gang_bound.get(holding.gang)
        if members is not None:
            members.discard(holding.pod)
            self.gangs_changed.add(holding.gang)
            if not members:
                del self.gang_bound[holding.gang]

    def sizes(self) -> dict[str, int]:
        return {
            "holdings": len(self.on_nodes),
            "orphans": len(self.orphans),
            "gang_bound": len(self.gang_bound),
            "gang_bound_pods": sum(len(keys) for keys in self.gang_bound.values()),
        }


def holding_of(placement: Placement, replicas: int = 0, shown: bool = False) -> Holding:
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
        claims=placement.claims,
        shown=shown,
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
