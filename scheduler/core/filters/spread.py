"""PodTopologySpread, as kube-scheduler v1.33's plugin filters and scores.

A constraint's *domains* are the values of its ``topologyKey`` on the nodes it counts. A node
counts for a constraint when it carries the topology keys of every constraint of the same kind
(all DoNotSchedule ones for the filter, all ScheduleAnyway ones for the score) and passes the
constraint's inclusion policies:

- ``nodeAffinityPolicy: Honor`` (the default): the incoming pod's nodeSelector and required node
  affinity match the node (the caller's ``eligible``; without either, every node passes and
  ``eligible`` is not asked);
- ``nodeTaintsPolicy: Honor`` (default Ignore): the pod tolerates each NoSchedule/NoExecute taint.

A domain's count is the number of bound pods on its counted nodes that are in the incoming pod's
namespace, are not terminating, and match the constraint's label selector. As in kube-scheduler a
missing selector matches nothing and an *empty* selector counts no existing pod (its
``countPodsMatchSelector`` returns 0 for it), though the incoming pod matches it itself.

Filter (``Spread.check``), constraint by constraint in the pod's order:

- the node lacks the topology key: "... (missing required label)";
- ``count(node's domain) + self - min > maxSkew``: "node(s) didn't match pod topology spread
  constraints", where ``self`` is 1 when the incoming pod matches the selector and ``min`` is the
  smallest count over the constraint's domains, or 0 when there are fewer domains than
  ``minDomains`` (default 1).

Cost. Where it can, the PreFilter reads the snapshot's counts (``snapshot/topocounts.py``, kept
as pods are recorded and removed): a constraint's matching pods per domain and the nodes per
domain, so it costs the domains, not the pods or the nodes. It can when every node counts for the
constraint (its kind's topology keys are on every node; nodeAffinityPolicy Honor only for a pod
without nodeSelector or required node affinity; nodeTaintsPolicy Ignore) and the selector is a
conjunction of label pairs (matchLabels and single-value In, matchLabelKeys folded in) or empty.
The minimum is then 0 exactly when fewer domains hold pods than there are domains. Otherwise
(a pod pinned by node affinity with the default Honor, nodeTaintsPolicy Honor, a node lacking a
key, NotIn/Exists/multi-value In in the selector) it walks, as kube-scheduler does: pods through
the index (the constraint's selector in the pod's namespace; only a selector without any
equality requirement makes the index scan that namespace), then the nodes until every walked
constraint has met a domain with no matching pod (with a hostname key, usually at the first
node without one; when every counted domain holds pods, every node: about 1.5 ms for 5,000).
The inclusion policies are asked only about nodes of domains without pods. ``check``
precomputes ``maxSkew + min - self`` per constraint, so a node costs a dict lookup per
constraint.

Score (``Spread.score``, ScheduleAnyway constraints; higher is better):
``-sum(count of the node's domain)`` over the constraints. A node lacking any of their topology
keys scores ``-sum(largest count + 1)``, below every node that has them (kube-scheduler gives
such nodes the lowest normalised score). kube-scheduler also weighs each constraint by
log(domains + 2) and normalises to 0..100: for one constraint the order is the same; for several,
kube-scheduler leans more on the constraint with more domains (hostname over zone), this sum
weighs every pod alike.

Not applied: kube-scheduler's cluster-level default constraints (system defaulting spreads pods
of a Service/ReplicaSet/StatefulSet with no constraints of their own by hostname and zone); a pod
without ``topologySpreadConstraints`` is not spread here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..model.labels import selector_matches
from ..model.objects import NodeInput, PodInput, SpreadConstraint
from ..snapshot.podindex import PodIndex
from ..snapshot.topocounts import TopologyCounts, conjunction

SPREAD = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL = SPREAD + " (missing required label)"

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


class Spread:
    """The PreFilter result for one incoming pod: counts per domain, then per-node lookups."""

    __slots__ = ("_hard", "_soft", "_soft_keys", "_soft_missing")

    def __init__(
        self,
        hard: list[tuple[str, int, dict[str, int]]],
        soft: list[tuple[str, dict[str, int]]],
    ) -> None:
        # DoNotSchedule: (topology key, the largest count the node's domain may hold, counts).
        self._hard = hard
        # ScheduleAnyway: (topology key, counts).
        self._soft = soft
        self._soft_keys = tuple(key for key, _ in soft)
        self._soft_missing = -sum(max(counts.values(), default=0) + 1 for _, counts in soft)

    @property
    def has_preferences(self) -> bool:
        return bool(self._soft)

    def refused(self) -> list[tuple[str, list[str]]]:
        """The domains whose nodes ``check`` refuses, (topology key, values) per DoNotSchedule
        constraint: those holding more matching pods than the constraint's limit."""
        return [
            (key, [value for value, n in counts.items() if n > limit])
            for key, limit, counts in self._hard
        ]

    def check(self, node: NodeInput) -> str | None:
        labels = node.labels
        for key, limit, counts in self._hard:
            value = labels.get(key)
            if value is None:
                return MISSING_LABEL
            if counts.get(value, 0) > limit:
                return SPREAD
        return None

    def score(self, node: NodeInput) -> int:
        labels = node.labels
        total = 0
        for key, counts in self._soft:
            value = labels.get(key)
            if value is None:
                return self._soft_missing
            total -= counts.get(value, 0)
        return total


def prefilter_spread(
    pod: PodInput,
    index: PodIndex,
    nodes: Mapping[str, NodeInput],
    eligible: Callable[[NodeInput], bool],
    counts: TopologyCounts | None = None,
) -> Spread | None:
    """`eligible(node)` says whether the incoming pod's nodeSelector/required node affinity match
    the node (for nodeAffinityPolicy Honor); taints for nodeTaintsPolicy Honor are checked here
    with the pod's tolerations (NoSchedule/NoExecute taints). ``counts``: the snapshot's
    matching pods per domain, read for the constraints they can answer (None: every constraint
    walks the pods). None when the pod has no constraints."""
    if not pod.spread:
        return None
    policies = _Policies(pod, eligible)
    hard_constraints = [c for c in pod.spread if c.when_unsatisfiable == DO_NOT_SCHEDULE]
    soft_constraints = [c for c in pod.spread if c.when_unsatisfiable == SCHEDULE_ANYWAY]

    hard_counts, minimums = _domains(pod, hard_constraints, index, nodes, policies, counts)
    hard: list[tuple[str, int, dict[str, int]]] = []
    for c, found, minimum in zip(hard_constraints, hard_counts, minimums, strict=True):
        self_match = 1 if selector_matches(c.label_selector, pod.labels) else 0
        # count + self - min > maxSkew fails, so the domain may hold up to this many.
        hard.append((c.topology_key, c.max_skew + minimum - self_match, found))

    soft_counts, _ = _domains(pod, soft_constraints, index, nodes, policies, counts)
    soft = [(c.topology_key, found) for c, found in zip(soft_constraints, soft_counts, strict=True)]
    return Spread(hard, soft)


def _domains(
    pod: PodInput,
    constraints: list[SpreadConstraint],
    index: PodIndex,
    nodes: Mapping[str, NodeInput],
    policies: _Policies,
    counts: TopologyCounts | None,
) -> tuple[list[dict[str, int]], list[int]]:
    """Each constraint's matching pods per domain and its minimum (constraints of one kind: a
    node counts only if it carries every one's topology key).

    The snapshot's counts answer a constraint when every node counts for it: its kind's keys
    are on every node, and neither inclusion policy can leave a node out (nodeAffinityPolicy
    Honor with a nodeSelector or required node affinity, nodeTaintsPolicy Honor: those walk);
    and when its selector is a conjunction of label pairs. Then the domains are the key's
    values on the nodes, and the minimum is 0 exactly when some domain holds no matching pod."""
    keys = [c.topology_key for c in constraints]
    out: list[dict[str, int]] = [{} for _ in constraints]
    minimums = [0] * len(constraints)
    walked: list[int] = []  # the constraints the snapshot's counts cannot answer
    everywhere = counts is not None and all(counts.on_every_node(key, nodes) for key in keys)
    for i, c in enumerate(constraints):
        selector = c.label_selector
        empty = selector is None or (not selector.match_labels and not selector.match_expressions)
        conj = None if empty or selector is None else conjunction(selector)
        if (
            counts is None
            or not everywhere
            or not policies.all_nodes(c)
            or (conj is None and not empty)
        ):
            walked.append(i)
            continue
        if conj is not None:
            # kube-scheduler counts no existing pod for a missing or empty selector.
            found = counts.pods_per_domain(
                conj, (pod.namespace,), c.topology_key, index, nodes, terminating=False
            )
            _uncount_own(found, pod, c, index, nodes)
            out[i] = found
        domains = counts.nodes_per_domain(c.topology_key, nodes)
        # A counted pod's domain is among the nodes' values: fewer values with pods than
        # values means a domain holds none.
        if len(out[i]) == len(domains):
            minimums[i] = _smallest(out[i], c)
    if walked:
        slow = [constraints[i] for i in walked]
        slow_counts = _count(pod, slow, keys, index, nodes, policies)
        for i, found, minimum in zip(
            walked, slow_counts, _minimums(slow, keys, slow_counts, nodes, policies), strict=True
        ):
            out[i], minimums[i] = found, minimum
    return out, minimums


def _uncount_own(
    found: dict[str, int],
    pod: PodInput,
    c: SpreadConstraint,
    index: PodIndex,
    nodes: Mapping[str, NodeInput],
) -> None:
    """The incoming pod's own record (a pod being re-placed) is not counted against itself."""
    record = index.records.get(pod.key)
    if record is None or record.terminating or record.namespace != pod.namespace:
        return
    if not selector_matches(c.label_selector, record.labels):
        return
    node = nodes.get(record.node)
    value = node.labels.get(c.topology_key) if node is not None else None
    if value is not None:
        left = found[value] - 1
        if left:
            found[value] = left
        else:
            del found[value]


def _smallest(counts: dict[str, int], c: SpreadConstraint) -> int:
    """The minimum when every counted domain holds a pod (``counts``' keys are the domains):
    the smallest count, or 0 when there are fewer domains than minDomains (default 1)."""
    min_domains = c.min_domains if c.min_domains is not None else 1
    if counts and len(counts) >= min_domains:
        return min(counts.values())
    return 0


class _Policies:
    """Node inclusion for the incoming pod, memoised per node name within one decision."""

    __slots__ = ("_affinity", "_eligible", "_everywhere", "_taints", "_tolerations")

    def __init__(self, pod: PodInput, eligible: Callable[[NodeInput], bool]) -> None:
        self._eligible = eligible
        # Without a nodeSelector or required node affinity every node matches: skip the calls.
        self._everywhere = not pod.node_selector and (
            pod.affinity is None or pod.affinity.node_required is None
        )
        self._tolerations = pod.tolerations
        self._affinity: dict[str, bool] = {}
        self._taints: dict[str, bool] = {}

    def all_nodes(self, c: SpreadConstraint) -> bool:
        """Whether every node passes the constraint's inclusion policies, known without asking
        any: affinity is not honoured or the pod has no node selection, taints are ignored."""
        return (c.node_affinity_policy != HONOR or self._everywhere) and (
            c.node_taints_policy != HONOR
        )

    def includes(self, c: SpreadConstraint, node: NodeInput) -> bool:
        if c.node_affinity_policy == HONOR and not self._everywhere:
            ok = self._affinity.get(node.name)
            if ok is None:
                ok = self._affinity[node.name] = self._eligible(node)
            if not ok:
                return False
        if c.node_taints_policy == HONOR and node.taints:
            ok = self._taints.get(node.name)
            if ok is None:
                ok = self._taints[node.name] = self._tolerated(node)
            if not ok:
                return False
        return True

    def _tolerated(self, node: NodeInput) -> bool:
        for taint in node.taints:
            if taint.effect not in _BLOCKING_EFFECTS:
                continue
            if not any(t.tolerates(taint) for t in self._tolerations):
                return False
        return True


def _count(
    pod: PodInput,
    constraints: list[SpreadConstraint],
    keys: list[str],
    index: PodIndex,
    nodes: Mapping[str, NodeInput],
    policies: _Policies,
) -> list[dict[str, int]]:
    """Matching pods per domain, for each constraint (only pods on nodes that count for it: those
    carrying all ``keys``, the topology keys of the constraints of its kind), walking them."""
    namespaces = (pod.namespace,)
    out: list[dict[str, int]] = []
    for c in constraints:
        counts: dict[str, int] = {}
        out.append(counts)
        selector = c.label_selector
        if selector is None or (not selector.match_labels and not selector.match_expressions):
            continue  # kube-scheduler counts no existing pod for a missing or empty selector
        for record in index.matching(namespaces, selector):
            if record.terminating or record.key == pod.key:
                continue
            node = nodes.get(record.node)
            if node is None:
                continue
            labels = node.labels
            if not all(k in labels for k in keys) or not policies.includes(c, node):
                continue
            value = labels[c.topology_key]
            counts[value] = counts.get(value, 0) + 1
    return out


def _minimums(
    constraints: list[SpreadConstraint],
    keys: list[str],
    counts: list[dict[str, int]],
    nodes: Mapping[str, NodeInput],
    policies: _Policies,
) -> list[int]:
    """Each constraint's global minimum: 0 when a counted domain has no matching pod or there are
    fewer domains than minDomains, else the smallest count; walking the nodes (those carrying
    all ``keys``)."""
    # Constraints that have not yet met a counted domain without matching pods, as
    # (index, topology key, counts).
    open_ = [(i, c.topology_key, counts[i]) for i, c in enumerate(constraints)]
    if open_:
        for node in nodes.values():
            labels = node.labels
            for key in keys:
                if key not in labels:
                    break
            else:
                # Membership first: a node in a domain that holds pods settles nothing, so
                # the inclusion policies (eligible, taints) are asked only about the others.
                closed = [
                    entry
                    for entry in open_
                    if labels[entry[1]] not in entry[2]
                    and policies.includes(constraints[entry[0]], node)
                ]
                if closed:
                    done = {entry[0] for entry in closed}
                    open_ = [entry for entry in open_ if entry[0] not in done]
                    if not open_:
                        break
    minimums = [0] * len(constraints)
    for i, _, _ in open_:
        # Every counted domain holds a pod, so the counted domains are exactly counts[i]'s keys.
        minimums[i] = _smallest(counts[i], constraints[i])
    return minimums
