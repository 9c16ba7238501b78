"""The FGD simulator's BestFit and FGD policies, as its score plugins define them, in this
harness (benchmarks only: they are references, not part of the scheduler).

Both score every node that passes the filters (Node.fits) and take the highest score; ties go
to the node first in the seeded tie-break order (the simulator's smallest prefixed name).

BestFit (best_fit_score.go): score = int(100 x (1 - [0.5 (cpu left - cpu) / 128000 +
0.5 (GPU milli left on the node - GPU milli asked) / 8000])), truncated; its min-max
normalisation keeps the maximum, so it is left out. The card inside the node: a share goes to
the card with the least free milli that still fits it (the first such index), whole GPUs to the
first idle cards by index.

FGD (fgd_score.go): score = int(100 x sigmoid((F_n(M) before - F_n(M) after) / 1000)),
truncated (so many nodes tie). A share is tried on every card with room for it, the card giving
the highest score wins (the first index on ties) and is the one the pod gets; a whole-GPU or
CPU-only pod is scored on the node after taking the cards with the least free milli that fit
(for whole GPUs: idle cards, so the multiset is the same), and gets the first idle cards by index.
"""

from __future__ import annotations

import math
from typing import Protocol

from .measure import Cluster, Meter, Node
from .trace import MILLI, PodSpec

MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8_000

Choice = tuple[Node, tuple[int, ...]] | None


class Policy(Protocol):
    name: str

    def choose(self, pod: PodSpec) -> Choice: ...


def first_idle(node: Node, n: int) -> tuple[int, ...]:
    return tuple([i for i, free in enumerate(node.cards) if free == MILLI][:n])


def tightest_card(node: Node, milli: int) -> int:
    best = -1
    for i, free in enumerate(node.cards):
        if free >= milli and (best < 0 or free < node.cards[best]):
            best = i
    return best


def bestfit_score(node: Node, pod: PodSpec) -> int:
    score = (node.cpu - pod.cpu) / MAX_SPEC_CPU * 0.5
    score += (sum(node.cards) - pod.total_milli) / MAX_SPEC_GPU * 0.5
    return int((1.0 - score) * 100)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _fgd(before: float, after: float) -> int:
    return int(sigmoid((before - after) / 1000) * 100)


def fgd_score(meter: Meter, node: Node, pod: PodSpec) -> tuple[int, int]:
    """(score, card) for a share (the card it would take), (score, -1) otherwise."""
    cards = node.sorted_cards()
    before = meter.frag(node.model, node.cpu, cards)
    cpu_after = node.cpu - pod.cpu
    if pod.shared:
        best, card = 0, -1
        for i, free in enumerate(node.cards):
            if free < pod.milli:
                continue
            after = list(node.cards)
            after[i] -= pod.milli
            shape = tuple(sorted(after, reverse=True))
            score = _fgd(before, meter.frag(node.model, cpu_after, shape))
            if card < 0 or score > best:
                best, card = score, i
        return best, card
    left = sorted(cards)  # least free first: the simulator's NodeResource.Sub
    need = pod.gpus
    for j, free in enumerate(left):
        if need and pod.milli <= free:
            left[j] -= pod.milli
            need -= 1
    shape = tuple(sorted(left, reverse=True))
    return _fgd(before, meter.frag(node.model, cpu_after, shape)), -1


class _Scored:
    """Highest score over the fitting nodes, first in tie-break order on ties; a node's score
    for a pod depends on its shape and the pod's request alone, so it is remembered."""

    name = "?"

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        # per request, per node shape number: the score, or -1 when the node does not fit
        self._memo: dict[tuple[object, ...], dict[int, int]] = {}

    def score(self, node: Node, pod: PodSpec) -> int:
        raise NotImplementedError

    def card(self, node: Node, pod: PodSpec) -> int:
        raise NotImplementedError

    def choose(self, pod: PodSpec) -> Choice:
        request = (pod.cpu, pod.memory, pod.gpus, pod.milli, pod.models)
        memo = self._memo.setdefault(request, {})
        best: Node | None = None
        best_score = -1
        for node in self.cluster.by_rank:
            score = memo.get(node.sid)
            if score is None:
                score = memo[node.sid] = self.score(node, pod) if node.fits(pod) else -1
            if score > best_score:
                best, best_score = node, score
        if best is None:
            return None
        if not pod.gpus:
            return best, ()
        if pod.shared:
            return best, (self.card(best, pod),)
        return best, first_idle(best, pod.gpus)


class BestFit(_Scored):
    name = "BestFit"

    def score(self, node: Node, pod: PodSpec) -> int:
        return bestfit_score(node, pod)

    def card(self, node: Node, pod: PodSpec) -> int:
        return tightest_card(node, pod.milli)


class FGD(_Scored):
    name = "FGD"

    def score(self, node: Node, pod: PodSpec) -> int:
        return fgd_score(self.cluster.meter, node, pod)[0]

    def card(self, node: Node, pod: PodSpec) -> int:
        return fgd_score(self.cluster.meter, node, pod)[1]
