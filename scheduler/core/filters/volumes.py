"""Volumes: the part of kube-scheduler's VolumeBinding a scheduler that binds no volumes needs.

A pod's PersistentVolumeClaims (its ``persistentVolumeClaim`` volumes, and the claims of its
generic ephemeral volumes, ``<pod>-<volume>``) restrict its nodes when they are bound to a
PersistentVolume with ``spec.nodeAffinity`` (local volumes, zonal disks): the node must match the
volume's required terms, as kube-scheduler checks them.

topo-scheduler does not bind volumes (no provisioning, no WaitForFirstConsumer binding), so a pod
with an unbound claim, a claim that does not exist (yet) or one being deleted is never bound
blindly: it waits, with a reason naming the claim, and is tried again when claims change. These
are pod-level problems (kube-scheduler's PreFilter statuses), the same for every node.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..model.labels import terms_match
from ..model.objects import ClaimInput, NodeInput, NodeSelectorTerm, PodInput, VolumeInput

VOLUME_NODE_AFFINITY = "node(s) didn't match PersistentVolume's node affinity"
MISSING_VOLUME = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


class VolumeCheck:
    """The volumes' node restrictions for one pod (PreFilter once, then ``check`` per node)."""

    __slots__ = ("missing_volume", "terms")

    def __init__(self, terms: list[tuple[NodeSelectorTerm, ...]], missing_volume: bool) -> None:
        self.terms = terms
        self.missing_volume = missing_volume

    def check(self, node: NodeInput) -> str | None:
        if self.missing_volume:
            return MISSING_VOLUME
        for terms in self.terms:
            if not terms_match(terms, node.name, node.labels):
                return VOLUME_NODE_AFFINITY
        return None


def prefilter_volumes(
    pod: PodInput,
    claims: Mapping[str, ClaimInput],
    volumes: Mapping[str, VolumeInput],
) -> VolumeCheck | str | None:
    """None when the pod uses no claim; a reason (str) when it cannot be placed on any node;
    otherwise the per-node check."""
    if not pod.claims:
        return None
    terms: list[tuple[NodeSelectorTerm, ...]] = []
    missing_volume = False
    for name in pod.claims:
        key = f"{pod.namespace}/{name}"
        claim = claims.get(key)
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if claim.deleting:
            return f'persistentvolumeclaim "{name}" is being deleted'
        if not claim.volume_name:
            return (
                f"unbound PersistentVolumeClaim {key} is not supported by topo-scheduler "
                "(it binds no volumes: bind the claim first, or use a StorageClass with "
                "volumeBindingMode Immediate)"
            )
        volume = volumes.get(claim.volume_name)
        if volume is None:
            missing_volume = True
        elif volume.node_required is not None:
            terms.append(volume.node_required)
    return VolumeCheck(terms, missing_volume)
