"""InterPodAffinity, as kube-scheduler v1.33's plugin filters and scores.

PreFilter (``prefilter_interpod``, once per decision) counts, per topology key and value:

- ``affinity``: bound pods that match *all* the incoming pod's required affinity terms, once per
  term's topology key on the pod's node (kube-scheduler's ``podMatchesAllAffinityTerms``);
- ``anti``: bound pods that match each required anti-affinity term, on that term's key;
- ``existing``: bound pods whose own required anti-affinity terms match the incoming pod (the
  symmetric rule), on those terms' keys.

A pod's node must carry the term's topology key for the pod to count anywhere. Filter
(``InterPod.check``, per node) then looks a few pairs up, in kube-scheduler v1.33's order
(its ``Filter``: the pod's affinity, its anti-affinity, then the existing pods'):

1. Required affinity: the node must carry every term's topology key, and each term's domain
   must hold a counted pod. Exception: when no pod is counted anywhere and the incoming pod
   matches all its own terms, it is the first of its group and may go to any node that carries
   the keys (otherwise a self-affine group could never start).
2. Required anti-affinity: no term's domain (on a node carrying the key) holds a matching pod.
3. Existing pods' anti-affinity: no pair of the node's labels holds a pod whose required
   anti-affinity term matches the incoming pod.

Namespaces of a term: ``namespaces`` empty and no ``namespace_selector`` means the term owner's
namespace (the incoming pod's for its own terms, the existing pod's for the symmetric check);
otherwise the listed namespaces plus those the selector matches, where an empty selector matches
every namespace. For the incoming pod's terms the selector is resolved once against the known
namespaces (kube-scheduler merges it into the names); for an existing pod's term it is evaluated
against the incoming pod's namespace labels (empty when that namespace is unknown), as
kube-scheduler does. A ``None`` label selector matches no pod; an empty one every pod.

Terminating pods still count here: kube-scheduler's InterPodAffinity does not skip pods with a
deletionTimestamp (only PodTopologySpread does). The incoming pod's own record, should the
index hold one (a pod being re-placed), is never counted against itself.

Score (``InterPod.score``): ``sum(weight * matching pods in the node's domain)`` over the
preferred affinity terms, minus the same sum over the preferred anti-affinity terms, a domain
being the nodes sharing the node's value of the term's topology key (a node without the key gets
nothing from that term). That is kube-scheduler's raw score for the incoming pod's preferred
terms, before its min-max normalisation to 0..100 (ranking only needs the order).
kube-scheduler also adds the existing pods' preferred terms and required affinity
(hardPodAffinityWeight) that match the incoming pod; the pod index does not carry those terms,
so they are not scored here. ``has_preferences`` is false when every node would score 0.

``prefilter_interpod`` returns None when no node can fail and none can score: no required
affinity, no anti-affinity term with a matching pod, no existing pod's anti-affinity matching
the incoming pod, no preferred term with a matching pod.

Cost: the prefilter reads the snapshot's counts (``snapshot/topocounts.py``, kept as pods are
recorded and removed): for a term whose selector is a conjunction of label pairs (matchLabels
and single-value In), its matching pods per value of its topology key, summed over its
namespaces, so a term costs its domains, not its pods; for the symmetric rule, each distinct
required anti-affinity term of the existing pods that requires one of the incoming pod's label
pairs or requires none, evaluated once, with its instances per domain. Walked as before (the
pods the index returns for the selector, an inverted index on equality requirements): a term
with any other selector (NotIn, Exists, a multi-value In, an empty one), and the required
affinity of a pod with several terms (a pod counts only if it matches them all). ``check`` and
``score`` are a few dict lookups per term.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from ..model.labels import selector_matches
from ..model.objects import (
    LabelSelector,
    NamespaceInput,
    NodeInput,
    PodAffinityTerm,
    PodInput,
    WeightedPodAffinityTerm,
)
from ..snapshot.podindex import PodIndex, PodRecord
from ..snapshot.topocounts import TopologyCounts, conjunction

AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

# topology key -> value -> how many pods counted there (never 0; a key without any is absent).
# Per key, not per (key, value) pair: a term whose selector the snapshot's counts answer is
# one copy of their values (made in C), not a tuple per domain.
KeyCounts = dict[str, dict[str, int]]
_NONE: dict[str, int] = {}


class _Term:
    """One of the incoming pod's terms with its namespaces resolved (None: every namespace)."""

    __slots__ = ("key", "namespaces", "selector")

    def __init__(
        self, term: PodAffinityTerm, own: str, known: Mapping[str, NamespaceInput]
    ) -> None:
        self.key = term.topology_key
        self.selector = term.label_selector
        self.namespaces = _resolve_namespaces(term, own, known)

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return selector_matches(self.selector, labels)

    def pods(self, index: PodIndex) -> Iterable[PodRecord]:
        return index.matching(self.namespaces, self.selector)


class InterPod:
    """The PreFilter result for one incoming pod: pair counts, then cheap per-node lookups."""

    __slots__ = (
        "_affinity",
        "_affinity_keys",
        "_anti",
        "_anti_keys",
        "_existing",
        "_existing_keys",
        "_first_of_group",
        "_scores",
    )

    def __init__(
        self,
        affinity_keys: tuple[str, ...],
        affinity: KeyCounts,
        first_of_group: bool,
        anti_keys: tuple[str, ...],
        anti: KeyCounts,
        existing: KeyCounts,
        scores: dict[str, dict[str, int]],
    ) -> None:
        self._affinity_keys = affinity_keys
        self._affinity = affinity
        self._first_of_group = first_of_group
        self._anti_keys = anti_keys
        self._anti = anti
        self._existing = existing
        # Only the keys that occur in ``existing``: a node's other labels cannot hit a pair.
        self._existing_keys = tuple(existing)
        self._scores = scores

    @property
    def has_preferences(self) -> bool:
        """Whether some node can score other than 0 (a matching pod under a preferred term)."""
        return bool(self._scores)

    def refused(self) -> list[tuple[str, Iterable[str]]]:
        """Domains whose nodes ``check`` refuses, (topology key, values): those holding a pod
        a required anti-affinity term matches, the pod's own or an existing pod's. (The
        domains required affinity refuses are the others, not named.)"""
        return [*self._anti.items(), *self._existing.items()]

    def check(self, node: NodeInput) -> str | None:
        labels = node.labels
        if self._affinity_keys:
            every_domain_has_pods = True
            for key in self._affinity_keys:
                value = labels.get(key)
                if value is None:
                    # Every term's topology key must be on the node, even for the first pod.
                    return AFFINITY
                if value not in self._affinity.get(key, _NONE):
                    every_domain_has_pods = False
            if not every_domain_has_pods and not self._first_of_group:
                return AFFINITY
        if self._anti:
            for key in self._anti_keys:
                value = labels.get(key)
                if value is not None and value in self._anti.get(key, _NONE):
                    return ANTI_AFFINITY
        if self._existing:
            for key in self._existing_keys:
                value = labels.get(key)
                if value is not None and value in self._existing[key]:
                    return EXISTING_ANTI_AFFINITY
        return None

    def score(self, node: NodeInput) -> int:
        labels = node.labels
        total = 0
        for key, by_value in self._scores.items():
            value = labels.get(key)
            if value is not None:
                total += by_value.get(value, 0)
        return total


def prefilter_interpod(
    pod: PodInput,
    index: PodIndex,
    nodes: Mapping[str, NodeInput],
    namespaces: Mapping[str, NamespaceInput],
    counts: TopologyCounts | None = None,
) -> InterPod | None:
    """None when nothing can fail or score (no terms on the pod and no existing pod with required
    anti-affinity that matches it): the caller skips the filter. ``counts``: the snapshot's
    matching pods per domain, read for the terms they can answer (None: every term walks)."""
    pods = _Pods(pod.key, index, nodes, counts)
    affinity = pod.affinity
    own = pod.namespace
    required = [_Term(t, own, namespaces) for t in affinity.pod_required] if affinity else []
    anti_terms = [_Term(t, own, namespaces) for t in affinity.anti_required] if affinity else []

    own_ns = namespaces.get(own)
    ns_labels = own_ns.labels if own_ns is not None else {}
    if counts is None:
        existing = _existing_anti_counts(pod, ns_labels, index, nodes)
    else:
        existing = _existing_anti_terms(pod, ns_labels, counts, index, nodes)

    affinity_counts: KeyCounts = {}
    first_of_group = False
    if required:
        affinity_counts = _affinity_counts(required, pods)
        # kube-scheduler's escape for a self-affine group's first pod: nothing matches all the
        # terms anywhere, but the pod itself does.
        first_of_group = not affinity_counts and all(t.matches(own, pod.labels) for t in required)

    anti: KeyCounts = {}
    for term in anti_terms:
        pods.count(anti, term)

    scores: dict[str, dict[str, int]] = {}
    if affinity is not None:
        _score_terms(scores, affinity.pod_preferred, 1, pod, pods, namespaces)
        _score_terms(scores, affinity.anti_preferred, -1, pod, pods, namespaces)

    if not required and not anti and not existing and not scores:
        return None
    return InterPod(
        affinity_keys=tuple(dict.fromkeys(t.key for t in required)),
        affinity=affinity_counts,
        first_of_group=first_of_group,
        anti_keys=tuple(dict.fromkeys(t.key for t in anti_terms)),
        anti=anti,
        existing=existing,
        scores=scores,
    )


def _resolve_namespaces(
    term: PodAffinityTerm, own: str, known: Mapping[str, NamespaceInput]
) -> frozenset[str] | None:
    """The namespaces an incoming pod's term looks at; None when it looks at every one."""
    selector = term.namespace_selector
    if not term.namespaces and selector is None:
        return frozenset((own,))
    if selector is not None and _is_empty(selector):
        return None
    names = set(term.namespaces)
    if selector is not None:
        names.update(name for name, ns in known.items() if selector_matches(selector, ns.labels))
    return frozenset(names)


def _is_empty(selector: LabelSelector) -> bool:
    return not selector.match_labels and not selector.match_expressions


def _has_equality(selector: LabelSelector | None) -> bool:
    """Whether the index can narrow this selector's candidates without a namespace scan."""
    if selector is None:
        return True  # matches nothing: the index answers at once
    return bool(selector.match_labels) or any(
        r.operator == "In" and len(r.values) == 1 for r in selector.match_expressions
    )


class _Pods:
    """The pods a term matches, counted per pair of its topology key: read from the snapshot's
    counts when the term's selector is a conjunction of label pairs, else walked."""

    __slots__ = ("_counts", "_index", "_nodes", "_own")

    def __init__(
        self,
        own: str,
        index: PodIndex,
        nodes: Mapping[str, NodeInput],
        counts: TopologyCounts | None,
    ) -> None:
        self._own = own
        self._index = index
        self._nodes = nodes
        self._counts = counts

    def walk(self, term: _Term) -> Iterator[tuple[PodRecord, NodeInput]]:
        """The term's matching pods on known nodes, the incoming pod's own record left out."""
        nodes = self._nodes
        for record in term.pods(self._index):
            if record.key == self._own:
                continue
            node = nodes.get(record.node)
            if node is not None:
                yield record, node

    def count(self, counts: KeyCounts, term: _Term) -> None:
        """Add one per pod the term matches to its domain's count."""
        key = term.key
        conj = conjunction(term.selector) if term.selector is not None else None
        if self._counts is None or conj is None:
            by_value = counts.setdefault(key, {})
            for _, node in self.walk(term):
                value = node.labels.get(key)
                if value is not None:
                    by_value[value] = by_value.get(value, 0) + 1
            if not by_value:
                del counts[key]
            return
        found = self._counts.pods_per_domain(
            conj, term.namespaces, key, self._index, self._nodes, terminating=True
        )
        own = self._index.records.get(self._own)
        if own is not None and term.matches(own.namespace, own.labels):
            own_node = self._nodes.get(own.node)
            value = own_node.labels.get(key) if own_node is not None else None
            if value is not None:
                # The own record is never counted against itself.
                if found[value] == 1:
                    del found[value]
                else:
                    found[value] -= 1
        _merge(counts, key, found)


def _merge(counts: KeyCounts, key: str, found: dict[str, int]) -> None:
    """Add ``found`` (value -> a positive count, a dict of the caller's own) to ``key``'s counts:
    the first one for a key is kept as it is."""
    if not found:
        return
    by_value = counts.get(key)
    if by_value is None:
        counts[key] = found
        return
    for value, n in found.items():
        by_value[value] = by_value.get(value, 0) + n


def _affinity_counts(terms: list[_Term], pods: _Pods) -> KeyCounts:
    """Pods matching every required affinity term, once per term's key on their node."""
    counts: KeyCounts = {}
    if len(terms) == 1:
        pods.count(counts, terms[0])
        return counts
    # Several terms: a pod counts only if it matches them all, which no per-selector count
    # says. Drive the walk with a term the inverted index can narrow; the others are checked.
    lead = next((t for t in terms if _has_equality(t.selector)), terms[0])
    rest = [t for t in terms if t is not lead]
    keys = [t.key for t in terms]
    for record, node in pods.walk(lead):
        if not all(t.matches(record.namespace, record.labels) for t in rest):
            continue
        labels = node.labels
        for key in keys:
            value = labels.get(key)
            if value is not None:
                by_value = counts.setdefault(key, {})
                by_value[value] = by_value.get(value, 0) + 1
    return counts


def _existing_anti_counts(
    pod: PodInput,
    namespace_labels: Mapping[str, str],
    index: PodIndex,
    nodes: Mapping[str, NodeInput],
) -> KeyCounts:
    """Where a bound pod's required anti-affinity term matches the incoming pod, per key."""
    counts: KeyCounts = {}
    for record in index.anti_affinity_pods():
        if record.key == pod.key:
            continue
        node: NodeInput | None = None
        for term in record.anti_required:
            if not _existing_term_matches(term, record.namespace, pod, namespace_labels):
                continue
            # Look the node up only once a term matches: most terms name other pods.
            if node is None:
                node = nodes.get(record.node)
                if node is None:
                    break
            value = node.labels.get(term.topology_key)
            if value is not None:
                by_value = counts.setdefault(term.topology_key, {})
                by_value[value] = by_value.get(value, 0) + 1
    return counts


def _existing_anti_terms(
    pod: PodInput,
    namespace_labels: Mapping[str, str],
    counts: TopologyCounts,
    index: PodIndex,
    nodes: Mapping[str, NodeInput],
) -> KeyCounts:
    """The same counts from the snapshot's distinct anti-affinity terms, each evaluated once."""
    out: KeyCounts = {}
    for entry in counts.anti_terms(pod.labels):
        term = entry.term
        if not entry.values or not _existing_term_matches(
            term, entry.namespace, pod, namespace_labels
        ):
            continue
        # A copy (made in C): the entry's values are the snapshot's, kept as pods come and go.
        _merge(out, term.topology_key, dict(entry.values))
    own = index.records.get(pod.key)
    node = nodes.get(own.node) if own is not None and own.anti_required else None
    if own is not None and node is not None:
        # The incoming pod's own record (a pod being re-placed) does not repel it.
        for term in own.anti_required:
            own_value = node.labels.get(term.topology_key)
            if own_value is None or not _existing_term_matches(
                term, own.namespace, pod, namespace_labels
            ):
                continue
            by_value = out[term.topology_key]
            left = by_value[own_value] - 1
            if left:
                by_value[own_value] = left
            else:
                del by_value[own_value]
                if not by_value:
                    del out[term.topology_key]
    return out


def _existing_term_matches(
    term: PodAffinityTerm, owner_namespace: str, pod: PodInput, namespace_labels: Mapping[str, str]
) -> bool:
    selector = term.namespace_selector
    if not term.namespaces and selector is None:
        in_namespace = pod.namespace == owner_namespace
    else:
        in_namespace = pod.namespace in term.namespaces or (
            selector is not None and selector_matches(selector, namespace_labels)
        )
    return in_namespace and selector_matches(term.label_selector, pod.labels)


def _score_terms(
    scores: dict[str, dict[str, int]],
    terms: tuple[WeightedPodAffinityTerm, ...],
    sign: int,
    pod: PodInput,
    pods: _Pods,
    namespaces: Mapping[str, NamespaceInput],
) -> None:
    for weighted in terms:
        if weighted.weight == 0:
            continue
        term = _Term(weighted.term, pod.namespace, namespaces)
        counts: KeyCounts = {}
        pods.count(counts, term)
        step = sign * weighted.weight
        for key, found in counts.items():
            by_value = scores.setdefault(key, {})
            for value, n in found.items():
                total = by_value.get(value, 0) + step * n
                if total:
                    by_value[value] = total
                else:
                    # Affinity and anti-affinity weights can cancel out: keep only what ranks.
                    by_value.pop(value, None)
            if not by_value:
                del scores[key]
