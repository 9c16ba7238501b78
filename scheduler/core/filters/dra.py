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
from ..model.decisions import ClaimAllocation
from ..model.dra import ALL, ResourceClaim
from ..model.labels import terms_match
from ..model.objects import NodeSelectorTerm, PodInput
from ..snapshot.cluster import ClusterState
from ..snapshot.devices import account_of
from ..snapshot.nodes import NodeState

NOT_AVAILABLE = "resourceclaim not available on the node"
IN_USE = "resourceclaim in use"
# ResourceClaimReservedForMaxSize: how many consumers a claim may be reserved for.
RESERVED_FOR_MAX = 256


class DraCheck:
    """The pod's claims for one decision: the allocated claims' node restrictions, and the
    unallocated claims allocated per node (``check``), each node's outcome remembered."""

    __slots__ = ("claims", "needs", "outcomes", "special", "state", "terms")

    def __init__(
        self,
        state: ClusterState,
        terms: list[tuple[NodeSelectorTerm, ...]],
        claims: Sequence[ResourceClaim],
        special: int,
    ) -> None:
        self.state = state
        self.terms = terms
        self.claims = tuple(claims)  # to allocate, in the pod's order
        self.special = special  # how many of them (the last) are special claims
        self.outcomes: dict[str, Outcome] = {}
        # class -> devices the ExactCount requests of that class ask for, all claims together
        self.needs: dict[str, int] = {}
        for claim in claims:
            for request in claim.requests:
                spec = request.exactly
                if spec is None or spec.admin_access or spec.allocation_mode == ALL:
                    continue
                self.needs[spec.device_class_name] = (
                    self.needs.get(spec.device_class_name, 0) + spec.count
                )

    @property
    def allocates(self) -> bool:
        return bool(self.claims)

    def check(self, node: NodeState) -> str | None:
        n = node.node
        for terms in self.terms:
            if not terms_match(terms, n.name, n.labels):
                return NOT_AVAILABLE
        if not self.claims:
            return None
        outcome = self.outcomes.get(n.name)
        if outcome is None:
            outcome = self.outcomes[n.name] = self._allocate(node)
        return outcome.reason or None

    def _allocate(self, node: NodeState) -> Outcome:
        devices = self.state.devices
        for class_name, count in self.needs.items():
            index = devices.class_index(class_name, self.state.nodes)
            if index is not None and not index.everywhere and index.free.get(node.name, 0) < count:
                return Outcome(reason=NO_SOLUTION)
        return allocate_pools(
            self.claims,
            self.state.inputs.device_classes,
            devices.pools(node.name, node.node.labels),
            devices.in_use,
            node.name,
            devices.selectors,
            node.inventory,
            devices.limits,
        )

    def claims_on(self, node: str) -> tuple[ClaimAllocation, ...]:
        """What placing the pod on ``node`` allocates (the node passed ``check``)."""
        if not self.claims:
            return ()
        outcome = self.outcomes[node]
        out = []
        for pos, (claim, allocation) in enumerate(
            zip(self.claims, outcome.allocations, strict=True)
        ):
            special = pos >= len(self.claims) - self.special
            out.append(ClaimAllocation(claim.key, claim.uid, allocation, special))
        return tuple(sorted(out, key=lambda c: c.claim))


def prefilter_dra(
    pod: PodInput, state: ClusterState, special: Sequence[ResourceClaim] = ()
) -> DraCheck | str | None:
    """None when the pod uses no ResourceClaim (and no ``special`` claim, for its DRA-backed
    extended resources); a reason (str) when no node can take it now; otherwise the per-node
    check."""
    if not pod.resource_claims and not special:
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
    for claim in (*unallocated, *special):
        for request in claim.requests:
            subs = [request.exactly] if request.exactly is not None else []
            subs += [s.exactly for s in request.first_available]
            for spec in subs:
                if spec.device_class_name not in state.inputs.device_classes:
                    return (
                        f"claim {claim.key}, request {request.name}: device class "
                        f"{spec.device_class_name} does not exist"
                    )
    return DraCheck(state, terms, [*unallocated, *special], len(special))


def dra_backed_reason(resource: str, device_class: str) -> str:
    return (
        f"{resource} is offered by DRA there (DeviceClass {device_class}): topo-scheduler "
        "does not allocate ResourceClaims"
    )
