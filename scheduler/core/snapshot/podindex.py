"""Every pod bound (or assumed) to a node, reduced to what the Kubernetes filters read.

The live scheduler watches all bound pods, ours or not, and most of them ask for no GPU. For each
it keeps one small ``PodRecord``: namespace, labels, node, its effective resource request (the
sums NodeResourcesFit needs), host ports (NodePorts) and its required anti-affinity terms (the
symmetric half of InterPodAffinity). No model objects, no containers.

``PodIndex`` answers "which pods match this selector in these namespaces" without a scan: an
inverted index (label key, value) -> pod keys, intersected over the selector's equality
requirements (matchLabels and single-value In), then checked in full. A selector with no equality
requirement scans the namespaces named (or every pod). The pods with required anti-affinity are
listed apart (kube-scheduler's symmetry: an incoming pod must not be where their terms match it);
the live filter reads their distinct terms from ``topocounts`` instead, and walks them only
without it (the reference its differential test compares against).

Records leave the index when their pod leaves; every structure here shrinks with it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import TypeVar

from msgspec import Struct, field

from ..model.labels import selector_matches
from ..model.objects import HostPort, LabelSelector, PodAffinityTerm
from ..resources.accounting import Amounts
from .fragmentation import ANYWHERE, Reach


class PodRecord(Struct, frozen=True):
    key: str
    namespace: str
    node: str
    labels: dict[str, str] = field(default_factory=dict)
    requests: Amounts = ()
    host_ports: tuple[HostPort, ...] = ()
    anti_required: tuple[PodAffinityTerm, ...] = ()
    # Deleting: still on its node (its resources and ports stay taken) but not counted by
    # topology spread, as in kube-scheduler; never chosen again as a preemption victim.
    terminating: bool = False
    # What preemption (preemption/preempt.py) weighs a victim by: spec.priority, metadata.uid and
    # creationTimestamp (RFC 3339, sorts as text), and the gang it belongs to with that gang's
    # minimum as far as it is known (0: unknown, so the gang is evicted whole).
    priority: int = 0
    uid: str = ""
    created: str = ""
    gang: str | None = None
    minimum: int = 0
    # Where the pod's request class can run (snapshot/fragmentation.reach_of), its vendor left
    # "": the class of a pod holding GPUs takes its node's vendor (ClusterState._reprofile).
    reach: Reach = ANYWHERE


class PodIndex:
    __slots__ = (
        "_by_label",
        "_by_namespace",
        "_priorities",
        "records",
        "terminating",
        "with_anti",
    )

    def __init__(self) -> None:
        self.records: dict[str, PodRecord] = {}
        self._by_label: dict[tuple[str, str], set[str]] = {}
        self._by_namespace: dict[str, set[str]] = {}
        self.with_anti: set[str] = set()
        # How many records of each priority, and how many are terminating: preemption knows in
        # O(1) that no pod could be a victim (the common case: one priority everywhere).
        self._priorities: dict[int, int] = {}
        self.terminating = 0

    def below(self, priority: int) -> bool:
        """Whether some record has a priority lower than ``priority``."""
        return any(p < priority for p in self._priorities)

    def __len__(self) -> int:
        return len(self.records)

    def sizes(self) -> dict[str, int]:
        """The size of each per-pod structure (for tests and the soak benchmark)."""
        return {
            "records": len(self.records),
            "by_label": len(self._by_label),
            "by_label_pods": sum(len(keys) for keys in self._by_label.values()),
            "by_namespace": len(self._by_namespace),
            "by_namespace_pods": sum(len(keys) for keys in self._by_namespace.values()),
            "with_anti": len(self.with_anti),
            "priorities": len(self._priorities),
            "terminating": self.terminating,
        }

    def add(self, record: PodRecord) -> None:
        self.remove(record.key)
        key = record.key
        self.records[key] = record
        self._by_namespace.setdefault(record.namespace, set()).add(key)
        for pair in record.labels.items():
            self._by_label.setdefault(pair, set()).add(key)
        if record.anti_required:
            self.with_anti.add(key)
        self._priorities[record.priority] = self._priorities.get(record.priority, 0) + 1
        self.terminating += record.terminating

    def remove(self, key: str) -> PodRecord | None:
        record = self.records.pop(key, None)
        if record is None:
            return None
        _discard(self._by_namespace, record.namespace, key)
        for pair in record.labels.items():
            _discard(self._by_label, pair, key)
        if record.anti_required:
            self.with_anti.discard(key)
        left = self._priorities[record.priority] - 1
        if left:
            self._priorities[record.priority] = left
        else:
            del self._priorities[record.priority]
        self.terminating -= record.terminating
        return record

    def matching(
        self, namespaces: Iterable[str] | None, selector: LabelSelector | None
    ) -> Iterator[PodRecord]:
        """Pods in ``namespaces`` (None: all) whose labels the selector matches."""
        if selector is None:
            return
        candidates: set[str] | None = None
        equal = list(selector.match_labels.items())
        equal += [
            (r.key, r.values[0])
            for r in selector.match_expressions
            if r.operator == "In" and len(r.values) == 1
        ]
        for pair in equal:
            keys = self._by_label.get(pair)
            if not keys:
                return
            if candidates is None or len(keys) < len(candidates):
                candidates = keys
        allowed = None if namespaces is None else set(namespaces)
        if candidates is None:
            if allowed is None:
                pool: Iterable[str] = list(self.records)
            else:
                pool = [k for ns in allowed for k in self._by_namespace.get(ns, ())]
        else:
            pool = list(candidates)
        records = self.records
        for key in pool:
            record = records[key]
            if allowed is not None and record.namespace not in allowed:
                continue
            if selector_matches(selector, record.labels):
                yield record

    def anti_affinity_pods(self) -> Iterator[PodRecord]:
        """The pods with required anti-affinity (the caller checks their terms)."""
        records = self.records
        return (records[k] for k in self.with_anti)


K = TypeVar("K", bound=Hashable)


def _discard(index: dict[K, set[str]], at: K, key: str) -> None:
    keys = index.get(at)
    if keys is None:
        return
    keys.discard(key)
    if not keys:
        del index[at]
