"""The Kubernetes filter chain, in kube-scheduler's order, with PreFilter and Filter apart.

``PodFilters(state, pod)`` is the PreFilter step: everything about the incoming pod that does not
depend on the node is computed once per decision (its effective request, host ports, the volumes'
node restrictions, the inter-pod affinity and topology-spread counts, read from the snapshot's
``domain_counts`` where they can be). ``check(node)`` is the Filter
step, cheap per node, and returns kube-scheduler's reasons (empty: the node passes):

    NodeUnschedulable, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit,
    VolumeBinding (node affinity of bound volumes), PodTopologySpread, InterPodAffinity,
    DynamicResources (allocated claims' node selectors; the pod's other claims allocated on the
    node: filters/dra.py), NodeDeclaredFeatures

Whole GPUs are not in the chain: the GPU rules (``placement``) rank node classes by GPU topology
first and ask the chain only about the candidate nodes, so a node that fails here costs one
check, not a ranking. ``score(node)`` sums the preferences (preferred node affinity weights,
preferred inter-pod affinity, ScheduleAnyway spread); placement ranks by it right after the
GPU-set score (docs/placement.md).

``GroupFilters`` checks several pods that would share one node (a gang's part on that node): each
member passes on its own, their requests fit together, their host ports do not collide, and no
member's required anti-affinity matches another member (a job asking for one replica per node
gets one per node).

``problem`` is a pod-level reason (an unbound or missing PersistentVolumeClaim, a ResourceClaim
not created yet or being deleted): no node can help.

``refused()`` names nodes ``check`` refuses, known without asking each: those in the domains
PodTopologySpread and InterPodAffinity refuse (a spread domain over its limit, a domain holding
a pod an anti-affinity term matches), from the snapshot's nodes per domain. Placement does not
rank them: with maxSkew 1 over hostnames, or one pod per node, the nodes refused are most of
those a binpack order prefers, and ranking them, then asking each in turn, cost a ranking and a
check per node refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Set

from ..model.labels import selector_matches
from ..model.objects import HostPort, NodeInput, PodAffinityTerm, PodInput
from ..resources.accounting import Amounts, pod_requests
from ..resources.ports import host_ports
from ..snapshot.cluster import ClusterState
from ..snapshot.nodes import NodeState
from ..snapshot.topocounts import TopologyCounts
from .dra import DraCheck, prefilter_dra
from .features import missing_features, required_features
from .interpod import InterPod, prefilter_interpod
from .node import (
    PORTS,
    affinity_matches,
    affinity_score,
    node_affinity,
    port_conflict,
    unschedulable,
    untolerated_taint,
)
from .resources import insufficient
from .spread import Spread, prefilter_spread
from .volumes import VolumeCheck, prefilter_volumes

ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"


class NodeInputs(Mapping[str, NodeInput]):
    """The snapshot's nodes as name -> NodeInput, without copying them."""

    __slots__ = ("_nodes",)

    def __init__(self, nodes: Mapping[str, NodeState]) -> None:
        self._nodes = nodes

    def __getitem__(self, name: str) -> NodeInput:
        return self._nodes[name].node

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes


class PodFilters:
    __slots__ = (
        "_counts",
        "_refused",
        "dra",
        "features",
        "has_preferences",
        "interpod",
        "pinned",
        "pod",
        "ports",
        "problem",
        "requests",
        "spread",
        "volumes",
    )

    nowhere = False  # a single pod's pod-level problems are ``problem``

    def __init__(self, state: ClusterState, pod: PodInput) -> None:
        """Raises RequestError (naming pod and field) for a malformed resource quantity."""
        self.pod = pod
        self.requests: Amounts = pod_requests(
            pod, state.gpu_names, strict=True, memo=state.memos.requests
        )
        self.ports: tuple[HostPort, ...] = host_ports(pod)
        # A node selector or required node affinity: NodeAffinity can refuse a node.
        self.pinned = bool(pod.node_selector) or (
            pod.affinity is not None and pod.affinity.node_required is not None
        )
        volumes = prefilter_volumes(pod, state.inputs.claims, state.inputs.volumes)
        self.problem: str | None = volumes if isinstance(volumes, str) else None
        self.volumes: VolumeCheck | None = volumes if isinstance(volumes, VolumeCheck) else None
        dra = prefilter_dra(pod, state)
        if self.problem is None and isinstance(dra, str):
            self.problem = dra
        self.dra: DraCheck | None = dra if isinstance(dra, DraCheck) else None
        self.features = required_features(pod)
        nodes = NodeInputs(state.nodes)
        self.interpod: InterPod | None = prefilter_interpod(
            pod, state.index, nodes, state.inputs.namespaces, state.domain_counts
        )
        self.spread: Spread | None = prefilter_spread(
            pod,
            state.index,
            nodes,
            lambda node: affinity_matches(pod, node),
            state.domain_counts,
        )
        self.has_preferences = bool(
            (pod.affinity is not None and pod.affinity.node_preferred)
            or (self.interpod is not None and self.interpod.has_preferences)
            or (self.spread is not None and self.spread.has_preferences)
        )
        self._counts: TopologyCounts = state.domain_counts
        self._refused: Set[str] | None = None

    def refused(self) -> Set[str]:
        """Names of nodes ``check`` refuses (not all of them): those in a domain the spread
        or inter-pod filter refuses. Built on the first call, in the domains refused and their
        nodes, then kept: like the counts it is read from, it is this PreFilter's."""
        if self._refused is None:
            domains: list[tuple[str, Iterable[str]]] = []
            if self.spread is not None:
                domains += self.spread.refused()
            if self.interpod is not None:
                domains += self.interpod.refused()
            self._refused = self._counts.nodes_in(domains) if domains else frozenset()
        return self._refused

    def check(self, node: NodeState) -> list[str]:
        """kube-scheduler's reasons this node cannot take the pod; empty when it can."""
        pod, n = self.pod, node.node
        # Each filter asked only when it can refuse (a cordon, a taint, a selector or required
        # affinity, a host port): a share's or a reason's walk asks thousands of nodes.
        why = (
            (unschedulable(n, pod.tolerations) if n.unschedulable else None)
            or (untolerated_taint(n, pod.tolerations) if n.taints else None)
            or (node_affinity(pod, n) if self.pinned else None)
            or (port_conflict(self.ports, node.ports) if self.ports else None)
        )
        if why is not None:
            return [why]
        if node.resources is not None:
            short = insufficient(self.requests, node.resources, node.requested, node.pod_count)
            if short:
                short = self._dra_backed(short, node) if self.dra is not None else short
            if short:
                return short
        why = (
            (self.volumes.check(n) if self.volumes is not None else None)
            or (self.spread.check(n) if self.spread is not None else None)
            or (self.interpod.check(n) if self.interpod is not None else None)
            or (self.dra.check(node) if self.dra is not None else None)
            or (missing_features(self.features, n) if self.features else None)
        )
        return [why] if why is not None else []

    def _dra_backed(self, short: list[str], node: NodeState) -> list[str]:
        """A resource the node has none of, which a DeviceClass backs, is DRA's to allocate
        there (kube-scheduler v1.37): not short, the DRA filter allocates it."""
        assert self.dra is not None
        side = self.dra.dra_side(node)
        if not side:
            return short
        return [r for r in short if r.removeprefix("Insufficient ") not in side]

    def score(self, node: NodeState) -> int:
        if not self.has_preferences:
            return 0
        n = node.node
        total = affinity_score(self.pod, n)
        if self.interpod is not None:
            total += self.interpod.score(n)
        if self.spread is not None:
            total += self.spread.score(n)
        return total


class GroupFilters:
    """Several pods on one node together (a gang's part there).

    ``joint=False`` checks each member alone (no sums, no repulsion): what a gang's reason
    counts per node, so that it names what stops the members, not how they were grouped.
    """

    __slots__ = (
        "allocating",
        "has_preferences",
        "joint",
        "members",
        "nowhere",
        "ports",
        "problem",
        "repel_keys",
        "requests",
        "state",
    )

    def __init__(self, state: ClusterState, members: list[PodFilters], joint: bool = True) -> None:
        self.members = members
        self.joint = joint and len(members) > 1
        self.problem = next((m.problem for m in members if m.problem), None)
        self.has_preferences = any(m.has_preferences for m in members)
        total: dict[str, int] = {}
        for m in members:
            for resource, n in m.requests:
                total[resource] = total.get(resource, 0) + n
        self.requests: Amounts = tuple(sorted(total.items()))
        self.ports: tuple[HostPort, ...] = tuple(p for m in members for p in m.ports)
        # The topology keys on which one member's required anti-affinity matches another: a
        # node with any of them cannot take the group (the same node is the same domain).
        self.repel_keys = _repel_keys(state, [m.pod for m in members]) if self.joint else set()
        self.nowhere = self.problem is not None or any(
            state.on_every_node(key) for key in self.repel_keys
        )
        self.state = state
        # Members with DRA claims to allocate: on one node, allocated one after the other.
        self.allocating = [m for m in members if m.dra is not None and m.dra.allocates]

    def refused(self) -> Set[str]:
        """Every member must pass on its own: the nodes any member's filters refuse."""
        out: set[str] = set()
        for m in self.members:
            out |= m.refused()
        return out

    def check(self, node: NodeState) -> list[str]:
        for m in self.members:
            reasons = m.check(node)
            if reasons:
                return reasons
        if not self.joint:
            return []
        if node.resources is not None:
            extra = len(self.members) - 1
            short = insufficient(
                self.requests, node.resources, node.requested, node.pod_count + extra
            )
            if short:
                return short
        if _ports_collide(self.ports):
            return [PORTS]
        labels = node.node.labels
        if any(key in labels for key in self.repel_keys):
            return [ANTI_AFFINITY]
        if len(self.allocating) > 1:
            why = self._claims_together(node)
            if why is not None:
                return [why]
        return []

    def _claims_together(self, node: NodeState) -> str | None:
        """The members' claims allocated on the node one after the other, in the order gang
        planning applies them (members.split_joint), each seeing the devices of those before
        it (tentatively: the state is left as it was)."""
        state = self.state
        with state.tentative():
            for m in self.allocating:
                dra = m.dra
                assert dra is not None
                why = dra.check(node)
                if why is not None:
                    return why
                state.charge_claims(m.pod.key, m.pod.uid, dra.claims_on(node))
        return None

    def score(self, node: NodeState) -> int:
        return sum(m.score(node) for m in self.members) if self.has_preferences else 0


def _repel_keys(state: ClusterState, pods: list[PodInput]) -> set[str]:
    keys: set[str] = set()
    for a in pods:
        for term in a.affinity.anti_required if a.affinity is not None else ():
            if term.topology_key in keys:
                continue
            for b in pods:
                if b is not a and _term_matches(state, term, a.namespace, b):
                    keys.add(term.topology_key)
                    break
    return keys


def _term_matches(state: ClusterState, term: PodAffinityTerm, own: str, pod: PodInput) -> bool:
    if not _in_namespaces(term, own, pod.namespace, state):
        return False
    return selector_matches(term.label_selector, pod.labels)


def _in_namespaces(term: PodAffinityTerm, own: str, namespace: str, state: ClusterState) -> bool:
    if not term.namespaces and term.namespace_selector is None:
        return namespace == own
    if namespace in term.namespaces:
        return True
    if term.namespace_selector is None:
        return False
    ns = state.inputs.namespaces.get(namespace)
    return selector_matches(term.namespace_selector, ns.labels if ns is not None else {})


def _ports_collide(ports: tuple[HostPort, ...]) -> bool:
    seen: dict[tuple[str, int], dict[str, int]] = {}
    for p in ports:
        if port_conflict((p,), seen):
            return True
        seen.setdefault((p.protocol, p.port), {})[p.host_ip] = 1
    return False
