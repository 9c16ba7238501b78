"""Matching pods per topology domain, kept as pods come and go (issue 32 item 3).

kube-scheduler's PreFilter computes, once per incoming pod, how many existing pods match a spread
constraint's selector in each domain of its topology key, and which domains hold pods an
affinity term matches. Walking the matching pods for that costs a decision time proportional to
the pods; here the counts are kept in the snapshot instead, and a decision reads them in time
proportional to the domains:

- ``domains``: for each topology key in use, how many nodes carry each of its values (the
  domains a constraint may count, and so whether one of them holds no matching pod), and which
  ones (``nodes_in``: the nodes a filter refuses by their domain, left out of a placement's
  ranking without asking each);
- groups: for each *conjunction* of label pairs a selector in use requires (matchLabels and
  single-value ``In``, nothing else), the matching pods per topology key, namespace and value,
  with the terminating ones apart (topology spread skips them, inter-pod affinity does not).

Both are built on first use (a topology key when a constraint or term first names it, a group
when a selector first asks for it: one walk of the nodes or of the matching pods), then charged
and uncharged by the snapshot as records are put and dropped and nodes come, change their labels
or leave. A tentative scope's undo goes through the same put and drop (``undo.py``), so it
undoes the counts too. A group leaves when its last matching pod does, so what is kept is
bounded by the label pairs of the pods present; the keys in use are the topology keys of the
constraints and terms seen (a handful: hostname, zone, rack).

A selector that is not a conjunction of pairs (NotIn, Exists, a multi-value In, an empty
selector) has no group: the filters walk the matching pods for it, as before.

The existing pods' required anti-affinity terms (the symmetric half of InterPodAffinity) are kept
too, always: per distinct term and owner namespace, how many of its instances are on nodes
carrying each value of its topology key. An incoming pod evaluates each distinct term once
(``anti_terms``: those filed under one of its label pairs, as ``PodIndex`` files the pods, or
under none), not each pod that carries it; replicas of one workload share their terms.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

import msgspec

from ..model.objects import LabelSelector, NodeInput, PodAffinityTerm
from .podindex import PodIndex, PodRecord

Pair = tuple[str, str]
Conjunction = frozenset[Pair]
# value -> how many (pods or nodes) there.
Counts = dict[str, int]


def conjunction(selector: LabelSelector) -> Conjunction | None:
    """The label pairs the selector requires when it requires nothing else, each key once; None
    for any other selector (NotIn, Exists, DoesNotExist, a multi-value In, two values for one
    key, or no requirement at all)."""
    pairs = dict(selector.match_labels)
    for r in selector.match_expressions:
        if r.operator != "In" or len(r.values) != 1:
            return None
        if pairs.setdefault(r.key, r.values[0]) != r.values[0]:
            return None  # matches no pod: rare enough to walk
    return frozenset(pairs.items()) if pairs else None


class _Group:
    """The pods whose labels hold every pair of one conjunction."""

    __slots__ = ("dying", "every", "pods")

    def __init__(self) -> None:
        # Matching records, wherever they are (on a known node or not).
        self.pods = 0
        # Topology key -> namespace -> value -> matching pods on nodes with that value.
        self.every: dict[str, dict[str, Counts]] = {}
        # The same for the terminating ones alone (usually empty).
        self.dying: dict[str, dict[str, Counts]] = {}


class AntiTerm:
    """One distinct required anti-affinity term of existing pods, with its owners' namespace."""

    __slots__ = ("instances", "namespace", "term", "values")

    def __init__(self, namespace: str, term: PodAffinityTerm) -> None:
        self.namespace = namespace
        self.term = term
        # The term's instances (one per pod carrying it, wherever the pod is).
        self.instances = 0
        # Value of the term's topology key -> instances on nodes with that value.
        self.values: Counts = {}


class TopologyCounts:
    """Nodes per domain and matching pods per domain, for the topology keys and selectors in use;
    and the existing pods' required anti-affinity terms per domain."""

    __slots__ = (
        "_anti",
        "_anti_by_pair",
        "_by_pair",
        "_groups",
        "_members",
        "carriers",
        "domains",
    )

    def __init__(self) -> None:
        # Topology key in use -> value -> nodes carrying it; ``carriers``: nodes carrying the key.
        self.domains: dict[str, Counts] = {}
        self.carriers: dict[str, int] = {}
        # Topology key in use -> value -> the names of the nodes carrying it.
        self._members: dict[str, dict[str, set[str]]] = {}
        self._groups: dict[Conjunction, _Group] = {}
        # Each group under one pair of its conjunction (the smallest): a record visits only the
        # groups filed under its own pairs.
        self._by_pair: dict[Pair, set[Conjunction]] = {}
        # (owner namespace, the term encoded) -> the term's counts; filed, as PodIndex files the
        # pods, under one pair each term's selector requires (None: it requires none).
        self._anti: dict[tuple[str, bytes], AntiTerm] = {}
        self._anti_by_pair: dict[Pair | None, set[tuple[str, bytes]]] = {}

    def sizes(self) -> dict[str, int]:
        """The size of each structure (tests, the soak benchmark)."""
        return {
            "keys": len(self.domains),
            "groups": len(self._groups),
            "group_counts": sum(
                len(values)
                for group in self._groups.values()
                for part in (group.every, group.dying)
                for by_ns in part.values()
                for values in by_ns.values()
            ),
            "anti_terms": len(self._anti),
            "anti_counts": sum(len(entry.values) for entry in self._anti.values()),
        }

    # ---- charged by the snapshot -----------------------------------------------------------

    def node(self, name: str, labels: Mapping[str, str], sign: int) -> None:
        """The node ``name`` with these labels came (+1) or left (-1)."""
        for key, values in self.domains.items():
            value = labels.get(key)
            if value is not None:
                _add(values, value, sign)
                self.carriers[key] += sign
                members = self._members[key]
                if sign > 0:
                    members.setdefault(value, set()).add(name)
                else:
                    _discard(members, value, name)

    def record(self, record: PodRecord, labels: Mapping[str, str] | None, sign: int) -> None:
        """A record was put (+1) or dropped (-1); ``labels``: its node's (None: node unknown)."""
        if record.anti_required:
            self._charge_anti(record, labels, sign)
        if not self._groups:
            return
        for conj in self._matched(record.labels):
            group = self._groups[conj]
            group.pods += sign
            if labels is not None:
                self._place(group, record, labels, sign)
            if not group.pods:
                del self._groups[conj]
                _discard(self._by_pair, min(conj), conj)

    def relabel(
        self,
        records: Iterable[PodRecord],
        before: Mapping[str, str] | None,
        after: Mapping[str, str] | None,
    ) -> None:
        """The records' node changed its labels, came (``before`` None) or left (``after``
        None): their pods move between domains, their groups keep them."""
        for record in records:
            if record.anti_required:
                for at, term in zip(_anti_ats(record), record.anti_required, strict=True):
                    values = self._anti[at].values
                    if before is not None and term.topology_key in before:
                        _add(values, before[term.topology_key], -1)
                    if after is not None and term.topology_key in after:
                        _add(values, after[term.topology_key], +1)
            if not self._groups:
                continue
            for conj in self._matched(record.labels):
                group = self._groups[conj]
                if before is not None:
                    self._place(group, record, before, -1)
                if after is not None:
                    self._place(group, record, after, +1)

    # ---- read by the filters' PreFilter ----------------------------------------------------

    def nodes_per_domain(self, key: str, nodes: Mapping[str, NodeInput]) -> Counts:
        """value -> nodes carrying it, for ``key`` (the live dict: do not change it)."""
        values = self.domains.get(key)
        if values is None:
            values = self._use(key, nodes)
        return values

    def nodes_in(self, domains: Sequence[tuple[str, Iterable[str]]]) -> set[str]:
        """The names of the nodes in these domains, (topology key, its values) each; a key not
        in use names none (a caller asks only about keys its PreFilter read). A new set."""
        out: set[str] = set()
        for key, values in domains:
            members = self._members.get(key)
            if members is None:
                continue
            for value in values:
                names = members.get(value)
                if names:
                    out |= names
        return out

    def on_every_node(self, key: str, nodes: Mapping[str, NodeInput]) -> bool:
        """Whether every node carries ``key``."""
        if key not in self.domains:
            self._use(key, nodes)
        return self.carriers[key] == len(nodes)

    def pods_per_domain(
        self,
        conj: Conjunction,
        namespaces: Iterable[str] | None,
        key: str,
        index: PodIndex,
        nodes: Mapping[str, NodeInput],
        terminating: bool,
    ) -> Counts:
        """value -> pods in ``namespaces`` (None: every one) whose labels hold ``conj``, on
        nodes carrying ``key``; the terminating ones only when ``terminating``. A new dict."""
        if key not in self.domains:
            self._use(key, nodes)
        group = self._groups.get(conj)
        if group is None:
            group = self._build(conj, index, nodes)
            if group is None:
                return {}
        out: Counts = {}
        _sum(out, group.every.get(key), namespaces, +1)
        if not terminating:
            _sum(out, group.dying.get(key), namespaces, -1)
        return out

    def anti_terms(self, labels: Mapping[str, str]) -> list[AntiTerm]:
        """The distinct anti-affinity terms that might match a pod with these labels: those
        filed under one of its pairs or under none (the caller checks each in full)."""
        by_pair = self._anti_by_pair
        found = set(by_pair.get(None, ()))
        for pair in labels.items():
            filed = by_pair.get(pair)
            if filed:
                found |= filed
        anti = self._anti
        return [anti[at] for at in found]

    # ---- internals -------------------------------------------------------------------------

    def _charge_anti(self, record: PodRecord, labels: Mapping[str, str] | None, sign: int) -> None:
        for at, term in zip(_anti_ats(record), record.anti_required, strict=True):
            pair = _required_pair(term)
            entry = self._anti.get(at)
            if entry is None:
                entry = self._anti[at] = AntiTerm(record.namespace, term)
                self._anti_by_pair.setdefault(pair, set()).add(at)
            entry.instances += sign
            value = labels.get(term.topology_key) if labels is not None else None
            if value is not None:
                _add(entry.values, value, sign)
            if not entry.instances:
                del self._anti[at]
                _discard(self._anti_by_pair, pair, at)

    def _matched(self, labels: Mapping[str, str]) -> list[Conjunction]:
        """The groups whose conjunction these labels hold."""
        by_pair = self._by_pair
        out: list[Conjunction] = []
        for pair in labels.items():
            filed = by_pair.get(pair)
            if filed:
                out.extend(c for c in filed if all(labels.get(k) == v for k, v in c))
        return out

    def _place(
        self, group: _Group, record: PodRecord, labels: Mapping[str, str], sign: int
    ) -> None:
        for key in self.domains:
            value = labels.get(key)
            if value is None:
                continue
            _add_nested(group.every, key, record.namespace, value, sign)
            if record.terminating:
                _add_nested(group.dying, key, record.namespace, value, sign)

    def _use(self, key: str, nodes: Mapping[str, NodeInput]) -> Counts:
        """Start keeping ``key``: its domains from the nodes; the groups are dropped (they lack
        the key's counts) and rebuilt as they are asked for."""
        values: Counts = {}
        members: dict[str, set[str]] = {}
        carriers = 0
        for name, node in nodes.items():
            value = node.labels.get(key)
            if value is not None:
                values[value] = values.get(value, 0) + 1
                members.setdefault(value, set()).add(name)
                carriers += 1
        self.domains[key] = values
        self._members[key] = members
        self.carriers[key] = carriers
        self._groups.clear()
        self._by_pair.clear()
        return values

    def _build(
        self, conj: Conjunction, index: PodIndex, nodes: Mapping[str, NodeInput]
    ) -> _Group | None:
        """The group of ``conj`` from its matching records (None when no record matches)."""
        group = _Group()
        for record in index.matching(None, LabelSelector(match_labels=dict(conj))):
            group.pods += 1
            node = nodes.get(record.node)
            if node is not None:
                self._place(group, record, node.labels, +1)
        if not group.pods:
            return None
        self._groups[conj] = group
        self._by_pair.setdefault(min(conj), set()).add(conj)
        return group


def _required_pair(term: PodAffinityTerm) -> Pair | None:
    """One (key, value) the term's selector requires (matchLabels first, else a single-value
    In): a pod without that pair cannot match it. None when it requires none, or has no
    selector (then it matches no pod, and filing it under None costs one check)."""
    selector = term.label_selector
    if selector is None:
        return None
    pair = next(iter(selector.match_labels.items()), None)
    if pair is None:
        pair = next(
            (
                (r.key, r.values[0])
                for r in selector.match_expressions
                if r.operator == "In" and len(r.values) == 1
            ),
            None,
        )
    return pair


def _anti_ats(record: PodRecord) -> list[tuple[str, bytes]]:
    """Where each of the record's anti-affinity terms is kept: its owner's namespace and the term
    itself, encoded (a term holds dicts, so it is not hashable as it is)."""
    return [(record.namespace, msgspec.msgpack.encode(term)) for term in record.anti_required]


def _add(values: Counts, value: str, n: int) -> None:
    total = values.get(value, 0) + n
    if total:
        values[value] = total
    else:
        del values[value]


def _add_nested(
    part: dict[str, dict[str, Counts]], key: str, namespace: str, value: str, n: int
) -> None:
    by_ns = part.setdefault(key, {})
    values = by_ns.setdefault(namespace, {})
    _add(values, value, n)
    if not values:
        del by_ns[namespace]
        if not by_ns:
            del part[key]


def _sum(
    out: Counts, by_ns: dict[str, Counts] | None, namespaces: Iterable[str] | None, sign: int
) -> None:
    if not by_ns:
        return
    if namespaces is None:
        parts: Iterable[Counts] = by_ns.values()
    else:
        parts = [by_ns[ns] for ns in namespaces if ns in by_ns]
    for values in parts:
        if not out and sign > 0:
            # The usual case, one namespace: a copy made in C, not a value at a time (a
            # decision's cost was this loop over every domain, 500 for hostnames on 500 nodes).
            # Kept counts are never 0, so the copy holds no zero either.
            out.update(values)
            continue
        for value, n in values.items():
            _add(out, value, sign * n)


K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Hashable)


def _discard(index: dict[K, set[V]], at: K, item: V) -> None:
    filed = index.get(at)
    if filed is None:
        return
    filed.discard(item)
    if not filed:
        del index[at]
