"""DynamicResources: the part of kube-scheduler's DRA plugin a scheduler that allocates no
ResourceClaims needs (DRA is GA and on by default since v1.34).

A pod's ``spec.resourceClaims`` name ResourceClaims directly (``resourceClaimName``) or through
a template, whose claim the resource claim controller creates and records in the pod's
``status.resourceClaimStatuses``. kube-scheduler allocates an unallocated claim (the structured
allocator over ResourceSlices and DeviceClasses) and reserves it for the pod before binding;
topo-scheduler does neither allocation nor device choice for DRA, so:

- a claim allocated already (by kube-scheduler for another pod sharing it, or by a DRA driver's
  controller) restricts the pod to the nodes its allocation reaches
  (``status.allocation.nodeSelector``, kube-scheduler's "resourceclaim not available on the
  node"), and must be reservable: reserved for this pod already, or with room in
  ``status.reservedFor`` (at most 256 consumers; else "resourceclaim in use"). The binder adds the
  pod to ``reservedFor`` before the Binding, as kube-scheduler's PreBind does;
- a claim not allocated, not created yet, or being deleted is never bound blindly: the pod waits
  with a reason saying so (pod-level, the same for every node), and is tried again when claims
  change.

DRA-backed extended resources (v1.37 GA, KEP-5004): a request for an extended resource R on a
node whose allocatable has none of R is DRA's to satisfy when a DeviceClass declares
``extendedResourceName: R`` (or R is ``deviceclass.resource.kubernetes.io/<class>``); that too
would need an allocation, so such a node is refused with a reason saying that R is DRA-backed
there and topo-scheduler does not allocate claims (``extended_resources``,
``dra_backed_reason``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..model.dra import ResourceClaim
from ..model.labels import terms_match
from ..model.objects import NodeInput, NodeSelectorTerm, PodInput

NOT_AVAILABLE = "resourceclaim not available on the node"
IN_USE = "resourceclaim in use"
# ResourceClaimReservedForMaxSize: how many consumers a claim may be reserved for.
RESERVED_FOR_MAX = 256
NOT_ALLOCATED = "topo-scheduler does not allocate ResourceClaims"


class DraCheck:
    """The allocated claims' node restrictions for one pod (PreFilter once, ``check`` per
    node)."""

    __slots__ = ("terms",)

    def __init__(self, terms: list[tuple[NodeSelectorTerm, ...]]) -> None:
        self.terms = terms

    def check(self, node: NodeInput) -> str | None:
        for terms in self.terms:
            if not terms_match(terms, node.name, node.labels):
                return NOT_AVAILABLE
        return None


def prefilter_dra(pod: PodInput, claims: Mapping[str, ResourceClaim]) -> DraCheck | str | None:
    """None when the pod uses no ResourceClaim; a reason (str) when no node can take it now;
    otherwise the per-node check."""
    if not pod.resource_claims:
        return None
    terms: list[tuple[NodeSelectorTerm, ...]] = []
    for entry in pod.resource_claims:
        where = f"spec.resourceClaims[{entry.name}]"
        if not entry.claim:
            if entry.template:
                return (
                    f"pod {pod.key}: {where}: waiting for the ResourceClaim of template "
                    f"{entry.template} to be created"
                )
            return f"pod {pod.key}: {where}: names neither a ResourceClaim nor a template"
        key = f"{pod.namespace}/{entry.claim}"
        claim = claims.get(key)
        if claim is None:
            return f'waiting for resourceclaim "{entry.claim}" to be created'
        if claim.deleting:
            return f'resourceclaim "{entry.claim}" is being deleted'
        if claim.allocation is None:
            return (
                f"ResourceClaim {key} ({where}) is not allocated: {NOT_ALLOCATED} (allocate "
                "it with kube-scheduler or a DRA controller, then this pod is placed on a "
                "node the allocation reaches)"
            )
        reserved = claim.reserved_for
        if pod.uid not in reserved and len(reserved) >= RESERVED_FOR_MAX:
            return IN_USE
        if claim.allocation.node_selector is not None:
            terms.append(claim.allocation.node_selector)
    return DraCheck(terms)


def dra_backed_reason(resource: str, device_class: str) -> str:
    return f"{resource} is offered by DRA there (DeviceClass {device_class}): {NOT_ALLOCATED}"
