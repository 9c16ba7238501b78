"""The cluster as the FGD simulator measures it, and its fragmentation measure.

A node is its model, cpu and memory left, and each card's free GPU milli (1000 = an idle card).
The measure is the paper's F_n(M) (Weng et al., ATC 2023; the simulator's
NodeGpuShareFragAmount): M is the target workload, the request classes (cpu milli, per-GPU
milli, GPU count, allowed models) of the original trace, most popular first, kept until they
cover 95% of its pods, each weighted by its share of the kept pods. For one class m on node n:

- a CPU-only class, or one the node's model does not serve: every idle GPU milli of n counts;
- a class that cannot run on n (fewer than its GPU count of cards with its milli free, or too
  little cpu left): every idle GPU milli counts;
- a class that fits: the free milli of the cards with less free than it asks counts.

F_n(M) is the popularity-weighted sum; the cluster's fragmentation is the sum over nodes. A
node's measure depends on its shape (model, cpu left, its cards' free milli as a multiset)
alone, so it is remembered by shape.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from .trace import MILLI, NodeSpec, PodSpec

POPULARITY = 95  # percent of the trace's pods the target workload covers


class Klass(NamedTuple):
    """A request class of the target workload, with its popularity weight."""

    cpu: int
    milli: int
    gpus: int
    models: tuple[str, ...]
    weight: float


def class_of(pod: PodSpec) -> tuple[int, int, int, tuple[str, ...]]:
    return (pod.cpu, pod.milli, pod.gpus, pod.models)


def target_classes(pods: Sequence[PodSpec], popularity: int = POPULARITY) -> list[Klass]:
    """The simulator's GetTypicalPods: classes by count, ties by the larger class first (its
    sort is the reverse of (count, cpu, milli, GPUs, models)), added one at a time while the
    pods covered are below ``popularity`` percent; weights renormalised over those kept."""
    counts = Counter(class_of(p) for p in pods)
    ranked = sorted(
        counts.items(),
        key=lambda kv: (kv[1], kv[0][0], kv[0][1], kv[0][2], "|".join(kv[0][3])),
        reverse=True,
    )
    wanted = popularity * len(pods) / 100
    kept: list[tuple[tuple[int, int, int, tuple[str, ...]], int]] = []
    covered = 0
    for key, n in ranked:
        if covered >= wanted:
            break
        kept.append((key, n))
        covered += n
    return [Klass(*key, weight=n / covered) for key, n in kept]


ShapeKey = tuple[str, int, tuple[int, ...]]


class Meter:
    """F_n(M) by node shape, remembered."""

    def __init__(self, classes: Sequence[Klass]) -> None:
        self.classes = tuple(classes)
        self._memo: dict[ShapeKey, float] = {}

    def frag(self, model: str, cpu_left: int, cards: tuple[int, ...]) -> float:
        """F_n(M) of a node; ``cards`` its cards' free milli, largest first."""
        key = (model, cpu_left, cards)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._frag(model, cpu_left, cards)
        return found

    def _frag(self, model: str, cpu_left: int, cards: tuple[int, ...]) -> float:
        idle = sum(cards)
        if not idle:
            return 0.0
        total = 0.0
        for c in self.classes:
            if c.milli == 0 or (c.models and model not in c.models) or cpu_left < c.cpu:
                total += c.weight * idle
                continue
            # cards are largest first: the class fits when its gpus-th largest card does
            if len(cards) >= c.gpus and cards[c.gpus - 1] >= c.milli:
                total += c.weight * sum(f for f in cards if f < c.milli)
            else:
                total += c.weight * idle
        return total


class Node:
    """One node of the replay: what is left of it."""

    __slots__ = ("cards", "cpu", "index", "memory", "model", "name", "rank", "shape", "sid")

    def __init__(self, index: int, spec: NodeSpec, rank: int) -> None:
        self.index = index
        self.name = spec.name
        self.rank = rank  # place in the seeded tie-break order
        self.model = spec.model
        self.cpu = spec.cpu
        self.memory = spec.memory
        self.cards = [MILLI] * spec.gpus
        self.shape = self._shape()
        self.sid = -1  # the shape's number in its Cluster (policies remember scores by it)

    def _shape(self) -> tuple[str, int, int, tuple[int, ...]]:
        return (self.model, self.cpu, self.memory, tuple(sorted(self.cards, reverse=True)))

    def sorted_cards(self) -> tuple[int, ...]:
        return self.shape[3]

    def fits(self, pod: PodSpec) -> bool:
        """The simulator's filters: cpu and memory (NodeResourcesFit), the model, and a card
        with the share free (shared) or enough idle cards (whole)."""
        if pod.cpu > self.cpu or pod.memory > self.memory:
            return False
        if pod.models and self.model not in pod.models:
            return False
        if not pod.gpus:
            return True
        cards = self.shape[3]
        if pod.shared:
            return bool(cards) and cards[0] >= pod.milli
        return len(cards) >= pod.gpus and cards[pod.gpus - 1] == MILLI

    def take(self, pod: PodSpec, cards: Sequence[int]) -> None:
        self.cpu -= pod.cpu
        self.memory -= pod.memory
        for i in cards:
            self.cards[i] -= pod.milli
            assert self.cards[i] >= 0, (self.name, i)
        self.shape = self._shape()


class Cluster:
    """The replay's cluster and its running totals (allocated milli, idle milli, F)."""

    def __init__(self, nodes: Sequence[NodeSpec], ranks: Sequence[int], meter: Meter) -> None:
        self.meter = meter
        self.nodes = [Node(i, spec, ranks[i]) for i, spec in enumerate(nodes)]
        # In tie-break order: a policy that scans them keeps the first of equal scores.
        self.by_rank = sorted(self.nodes, key=lambda n: n.rank)
        self._sids: dict[tuple[str, int, int, tuple[int, ...]], int] = {}
        for node in self.nodes:
            node.sid = self._sids.setdefault(node.shape, len(self._sids))
        self.capacity = MILLI * sum(spec.gpus for spec in nodes)
        self.allocated = 0
        self._frag = [self.node_frag(n) for n in self.nodes]
        self.frag = sum(self._frag)

    def node_frag(self, node: Node) -> float:
        return self.meter.frag(node.model, node.cpu, node.sorted_cards())

    @property
    def idle(self) -> int:
        return self.capacity - self.allocated

    def place(self, node: Node, pod: PodSpec, cards: Sequence[int]) -> None:
        if not node.fits(pod) or len(cards) != pod.gpus or len(set(cards)) != len(cards):
            raise AssertionError(f"pod {pod.name} does not fit node {node.name} on {cards}")
        if not pod.shared and any(node.cards[i] != MILLI for i in cards):
            raise AssertionError(f"pod {pod.name}: cards {cards} of {node.name} are not idle")
        node.take(pod, cards)
        node.sid = self._sids.setdefault(node.shape, len(self._sids))
        self.allocated += pod.total_milli
        new = self.node_frag(node)
        self.frag += new - self._frag[node.index]
        self._frag[node.index] = new
