"""DynamicResources: kube-scheduler's DRA plugin, allocating the pod's ResourceClaims ourselves
(issue 29) with the structured allocator of ``core/dra``.

A pod's ``spec.resourceClaims`` name ResourceClaims directly (``resourceClaimName``) or through
a template, whose claim the resource claim controller creates and records in the pod's
``status.resourceClaimStatuses`` (``PodClaim.claim``; "" until then). PreFilter
(``prefilter_dra``, once per decision) sorts them:

- a claim not created yet, or being deleted, or another pod's allocation of it is in flight
  (assumed by us, not yet written): no node can help, the pod waits with a pod-level reason;
- a claim allocated already (by anyone; or assumed by this very pod) restricts the pod to the
  nodes its allocation reaches (``status.allocation.nodeSelector``: "resourceclaim not
  available on the node"), and must be reservable (reserved for the pod already, or fewer than
  256 consumers: "resourceclaim in use"). The binder adds the pod to ``reservedFor``;
- the others are allocated per node (Filter, ``check``): all of them together on that node, by
  ``dra.allocator.allocate_pools`` over the node's pools (snapshot/devices.py) with every device
  any visible claim holds, or our assumed placements took, out of reach, and the node's GPU
  inventory for the choice by interconnect (dra/choice.py). The outcome is remembered per node
  for the decision: ``claims_on(node)`` is what the placement allocates there
  (``Placement.claims``), for the binder to write.

Pre-filtering by class: a node whose free devices matching a request's DeviceClass (the class
index of snapshot/devices.py, node-local devices only) are fewer than the ExactCount requests
of that class ask for is refused without running the allocator ("cannot allocate all claims"),
so nodes without a candidate slice cost a dictionary lookup. ``everywhere`` (a network-attached
device matches the class) turns the pre-filter off for that class.

Reasons read like kube-scheduler's: "cannot allocate all claims", "invalid resource pools were
encountered", "resourceclaim not available on the node"; what it reports as an Error of the
cycle (a missing DeviceClass, a CEL compile or runtime error, All on an incomplete pool, the
32-result limit, a search out of budget) is this node's reason here, with the allocator's text
(the CEL error included), and the pod stays pending; nothing raises.

DRA-backed extended resources (v1.37 GA, KEP-5004): a request for an extended resource R on a
node whose allocatable has none of R is DRA's to satisfy when a DeviceClass declares
``extendedResourceName: R`` (or R is ``deviceclass.resource.kubernetes.io/<class>``): the
pod's special claim (``special_claim``) is allocated on such nodes, as kube-scheduler would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..dra.allocator import NO_SOLUTION, Outcome, allocate_pools
from ..dra.extended import special_claim
from ..model.decisions import ClaimAllocation
from ..model.dra import ALL, RequestMapping, ResourceClaim
from ..model.labels import terms_match
from ..model.objects import NodeSelectorTerm, PodInput
from ..snapshot.cluster import ClusterState
from ..snapshot.devices import account_of
from ..snapshot.nodes import NodeState

NOT_AVAILABLE = "resourceclaim not available on the node"
IN_USE = "resourceclaim in use"
# ResourceClaimReservedForMaxSize: how many consumers a claim may be reserved for.
RESERVED_FOR_MAX = 256


class _Variant:
    """The claims to allocate on the nodes where one set of the pod's DRA-backed extended
    resources is DRA's (allocatable 0 there): the unallocated claims, then the special claim
    for that set (with its request mappings), and the devices per class they ask for."""

    __slots__ = ("claims", "mappings", "needs", "special")

    def __init__(
        self,
        claims: Sequence[ResourceClaim],
        special: tuple[ResourceClaim, tuple[RequestMapping, ...]] | None,
    ) -> None:
        self.claims = (*claims, special[0]) if special is not None else tuple(claims)
        self.special = special is not None
        self.mappings = special[1] if special is not None else ()
        self.needs: dict[str, int] = {}
        for claim in self.claims:
            for request in claim.requests:
                spec = request.exactly
                if spec is None or spec.admin_access or spec.allocation_mode == ALL:
                    continue
                self.needs[spec.device_class_name] = (
                    self.needs.get(spec.device_class_name, 0) + spec.count
                )


class DraCheck:
    """The pod's claims for one decision: the allocated claims' node restrictions, and the
    unallocated claims (with, where the node leaves the pod's DRA-backed extended resources to
    DRA, the special claim) allocated per node (``check``), each node's outcome remembered
    while the devices in use stay as they were."""

    __slots__ = (
        "backed",
        "claims",
        "covered",
        "gpu_backed",
        "outcomes",
        "pod",
        "state",
        "terms",
        "variants",
    )

    def __init__(
        self,
        state: ClusterState,
        pod: PodInput,
        terms: list[tuple[NodeSelectorTerm, ...]],
        claims: Sequence[ResourceClaim],
        backed: Mapping[str, str],
        covered: bool = False,
    ) -> None:
        self.state = state
        self.pod = pod
        self.terms = terms
        self.claims = tuple(claims)  # unallocated, in the pod's order
        self.backed = dict(backed)  # DRA-backed extended resources asked for -> DeviceClass
        # Those of them that are whole-GPU resources (the GPU rules place them elsewhere).
        self.gpu_backed = [r for r in self.backed if r in state.resource_index]
        # The extended resources are in a claim created and allocated already (``terms``).
        self.covered = covered
        self.outcomes: dict[str, tuple[int, Outcome]] = {}
        self.variants: dict[frozenset[str], _Variant] = {}

    @property
    def allocates(self) -> bool:
        """Whether the pod has claims to allocate on some node."""
        return bool(self.claims) or bool(self.backed)

    def dra_side(self, node: NodeState) -> frozenset[str]:
        """The DRA-backed resources the pod asks for that ``node`` leaves to DRA (its
        allocatable has none of them; a node without a status is not checked)."""
        if not self.backed:
            return frozenset()
        out = []
        for resource in self.backed:
            index = self.state.resource_index.get(resource)
            if index is not None:
                if node.allocatable is not None and node.allocatable[index] == 0:
                    out.append(resource)
            elif node.resources is not None and not node.resources.get(resource, 0):
                out.append(resource)
        return frozenset(out)

    def variant(self, side: frozenset[str]) -> _Variant:
        found = self.variants.get(side)
        if found is None:
            special = None
            if side and not self.covered:
                special = special_claim(self.pod, {r: self.backed[r] for r in side})
            found = self.variants[side] = _Variant(self.claims, special)
        return found

    @property
    def dra_variant(self) -> _Variant:
        """The claims on a node that leaves every DRA-backed resource the pod asks for to DRA."""
        return self.variant(frozenset(self.backed))

    def check(self, node: NodeState) -> str | None:
        n = node.node
        for terms in self.terms:
            if not terms_match(terms, n.name, n.labels):
                return NOT_AVAILABLE
        variant = self.variant(self.dra_side(node))
        if not variant.claims:
            return None
        version = self.state.devices.version
        found = self.outcomes.get(n.name)
        if found is None or found[0] != version:
            found = self.outcomes[n.name] = (version, self._allocate(node, variant))
        return found[1].reason or None

    def _allocate(self, node: NodeState, variant: _Variant) -> Outcome:
        devices = self.state.devices
        for class_name, count in variant.needs.items():
            index = devices.class_index(class_name, self.state.nodes)
            if index is not None and not index.everywhere and index.free.get(node.name, 0) < count:
                return Outcome(reason=NO_SOLUTION)
        return allocate_pools(
            variant.claims,
            self.state.inputs.device_classes,
            devices.pools(node.name, node.node.labels),
            devices.in_use,
            node.name,
            devices.selectors,
            node.inventory,
            devices.limits,
        )

    def claims_on(self, node: NodeState) -> tuple[ClaimAllocation, ...]:
        """What placing the pod on ``node`` allocates (the node passed ``check``)."""
        variant = self.variant(self.dra_side(node))
        if not variant.claims:
            return ()
        outcome = self.outcomes[node.name][1]
        out = []
        for claim, allocation in zip(variant.claims, outcome.allocations, strict=True):
            if claim.extended and variant.special:
                out.append(
                    ClaimAllocation(
                        claim.key, "", allocation, True, claim.requests, variant.mappings
                    )
                )
            else:
                out.append(ClaimAllocation(claim.key, claim.uid, allocation))
        return tuple(sorted(out, key=lambda c: c.claim))


def prefilter_dra(pod: PodInput, state: ClusterState) -> DraCheck | str | None:
    """None when the pod uses no ResourceClaim and asks for no DRA-backed extended resource; a
    reason (str) when no node can take it now; otherwise the per-node check."""
    backed = _backed(pod, state.dra_extended)
    if not pod.resource_claims and not backed:
        return None
    claims: Mapping[str, ResourceClaim] = state.inputs.resource_claims
    devices = state.devices
    terms: list[tuple[NodeSelectorTerm, ...]] = []
    unallocated: list[ResourceClaim] = []
    seen: set[str] = set()
    mine = {account for account, _ in devices.assumed_by(pod.key)}
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
        if key in seen:
            continue
        seen.add(key)
        claim = claims.get(key)
        if claim is None:
            return f'waiting for resourceclaim "{entry.claim}" to be created'
        if claim.deleting:
            return f'resourceclaim "{entry.claim}" is being deleted'
        allocation = devices.allocation(claim)
        if allocation is None:
            unallocated.append(claim)
            continue
        if claim.allocation is None and account_of(claim) not in mine:
            return f"resource claim {key} is in the process of being allocated"
        reserved = claim.reserved_for
        if pod.uid not in reserved and len(reserved) >= RESERVED_FOR_MAX:
            return IN_USE
        if allocation.node_selector is not None:
            terms.append(allocation.node_selector)
    covered = False
    created = claims.get(f"{pod.namespace}/{pod.extended_claim}") if pod.extended_claim else None
    if created is not None and backed:
        # The claim an earlier attempt created (by us or kube-scheduler) stands for the
        # extended resources: allocated, it is the pod's like any; not, it is stale (its
        # creator deletes it), as kube-scheduler says. One the pod's status still names but
        # that is gone (deleted by the Unreserve of a failed Binding) is none: kube-scheduler
        # looks the claim up by its owner, and makes a new one when there is none.
        if created.allocation is None:
            return "cannot schedule extended resource claim"
        if created.allocation.node_selector is not None:
            terms.append(created.allocation.node_selector)
        covered = True
    for claim in unallocated:
        for request in claim.requests:
            subs = [request.exactly] if request.exactly is not None else []
            subs += [s.exactly for s in request.first_available]
            for spec in subs:
                if spec.device_class_name not in state.inputs.device_classes:
                    return (
                        f"claim {claim.key}, request {request.name}: device class "
                        f"{spec.device_class_name} does not exist"
                    )
    return DraCheck(state, pod, terms, unallocated, backed, covered)


def claims_for(
    state: ClusterState, pod: PodInput, node: NodeState
) -> tuple[ClaimAllocation, ...] | str:
    """The claims placing ``pod`` on ``node`` allocates, against what is in use now (gang
    planning: after the members placed before it), or why it cannot."""
    dra = prefilter_dra(pod, state)
    if dra is None:
        return ()
    if isinstance(dra, str):
        return dra
    why = dra.check(node)
    return why if why is not None else dra.claims_on(node)


def _backed(pod: PodInput, extended: Mapping[str, str]) -> dict[str, str]:
    """The extended resources the pod's containers ask for that a DeviceClass backs."""
    if not extended:
        return {}
    out = {}
    for c in (*pod.init_containers, *pod.containers):
        for resource in (*c.limits, *c.requests):
            device_class = extended.get(resource)
            if device_class is not None:
                out[resource] = device_class
    return out
