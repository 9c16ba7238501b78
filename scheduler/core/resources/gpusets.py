"""GPU topology: link codes, pair scores, and the exact best-set search (rule 1).

Scores follow HAMi's and NVIDIA go-gpuallocator's scale (gpu-topology-facts.md): NV<k> and MX<k>
are 100 per link, then PIX 50, PXB 40, PHB 30, NODE 20, SYS/SOC 10. Keeping that scale lets HAMi's
numeric score annotations mean the same thing here.

Rule 1 picks k GPUs among the free healthy ones (the mask ``free``), comparing candidate sets by
  1. the largest sum of pairwise scores inside the set (mutual connectivity),
  2. the smallest sum of scores between the set and the GPUs left free (least damage),
  3. the lexicographically smallest sorted index tuple.
For k = 1 the first key is always 0, so the second picks the worst-connected GPU.

Damage can be computed without looking at the rest: with deg(i) the sum of i's scores to every
other free GPU, damage(S) = sum(deg(S)) - 2 * internal(S). So for equal internal score, least
damage is the smallest degree sum, which the search bounds cheaply.

The search is a depth-first branch and bound over subsets in lexicographic order, so the first set
found with a given (internal, degree-sum) is also the one with the lowest indices; a branch is cut
when an upper bound on its internal score and a lower bound on its degree sum cannot beat the best
so far. On symmetric machines (NVSwitch: every pair NV12) that cuts everything after the first leaf.
Results are memoised per (topology, free mask, k); a snapshot interns topologies (weakly, in its
``Topologies``) so that thousands of identical nodes share one memo (and one node class), and a
topology no node uses any more is gone with its memo.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from typing import Final

from ..settings import MemoSettings

LINK_SCORES: Final[dict[str, int]] = {
    "PIX": 50,
    "PXB": 40,
    "PHB": 30,
    "NODE": 20,
    "SYS": 10,
    "SOC": 10,
}
_LINKED = re.compile(r"^(NV|MX)([1-9][0-9]?)$")


def link_score(code: str) -> int:
    """Score of one `nvidia-smi topo -m` code; raises ValueError for unknown codes."""
    code = code.strip().upper()
    found = _LINKED.match(code)
    if found:
        links = int(found.group(2))
        if links > 18:
            raise ValueError(f"link count out of range in {code!r}")
        return 100 * links
    try:
        return LINK_SCORES[code]
    except KeyError:
        raise ValueError(f"unknown link code {code!r}") from None


class SetChoice:
    """The best k-set for one (free mask, k): its indices and the two keys that ranked it."""

    __slots__ = ("damage", "indices", "mask", "score")

    def __init__(self, indices: tuple[int, ...], score: int, damage: int) -> None:
        self.indices = indices
        self.score = score
        self.damage = damage
        mask = 0
        for i in indices:
            mask |= 1 << i
        self.mask = mask

    def __repr__(self) -> str:
        return f"SetChoice({self.indices}, score={self.score}, damage={self.damage})"


class Topology:
    """An immutable N x N symmetric score matrix with a memo of best sets. Compared by identity
    (node classes hash it on every charge): a snapshot interns them (``Topologies``)."""

    __slots__ = ("__weakref__", "_memo", "best_set_limit", "key", "n", "scores")

    def __init__(self, scores: tuple[tuple[int, ...], ...], memo_limit: int) -> None:
        self.scores = scores
        self.n = len(scores)
        self.key = scores
        # Best sets remembered, at most (MemoSettings.best_sets): a memo bigger than this is
        # dropped and rebuilt.
        self.best_set_limit = memo_limit
        self._memo: dict[tuple[int, int], SetChoice | None] = {}

    @classmethod
    def of(cls, scores: Sequence[Sequence[int]], memo_limit: int | None = None) -> Topology:
        """A topology of its own (not interned), with a memo of its own (None: the default
        bound)."""
        limit = MemoSettings().best_sets if memo_limit is None else memo_limit
        return cls(tuple(tuple(row) for row in scores), limit)

    def best_set(self, free: int, k: int) -> SetChoice | None:
        """Rule 1: the best k GPUs inside mask ``free``, or None when fewer than k are free."""
        memo_key = (free, k)
        try:
            return self._memo[memo_key]
        except KeyError:
            pass
        if len(self._memo) >= self.best_set_limit:
            self._memo.clear()
        choice = self._search(free, k)
        self._memo[memo_key] = choice
        return choice

    def internal_score(self, indices: Sequence[int]) -> int:
        s = self.scores
        return sum(s[a][b] for pos, a in enumerate(indices) for b in indices[pos + 1 :])

    def damage(self, indices: Sequence[int], free: int) -> int:
        """Sum of scores between ``indices`` and the GPUs of ``free`` outside them."""
        chosen = set(indices)
        rest = [j for j in range(self.n) if free >> j & 1 and j not in chosen]
        s = self.scores
        return sum(s[i][j] for i in indices for j in rest)

    def _search(self, free: int, k: int) -> SetChoice | None:
        cand = [i for i in range(self.n) if free >> i & 1]
        if k <= 0 or len(cand) < k:
            return None
        s = self.scores
        deg = {i: sum(s[i][j] for j in cand if j != i) for i in cand}
        if k == len(cand):
            return SetChoice(tuple(cand), self.internal_score(cand), 0)
        if k == 1:
            best = min(cand, key=lambda i: (deg[i], i))
            return SetChoice((best,), 0, deg[best])
        return self._branch_and_bound(cand, deg, k)

    def _branch_and_bound(self, cand: list[int], deg: dict[int, int], k: int) -> SetChoice:
        s = self.scores
        m = len(cand)
        # For the bound on pairs among still-to-pick GPUs: each candidate's scores to the others,
        # sorted descending, so "its best r-1 partners" is a prefix sum.
        partner_prefix: dict[int, list[int]] = {}
        for i in cand:
            row = sorted((s[i][j] for j in cand if j != i), reverse=True)
            prefix = [0]
            for v in row:
                prefix.append(prefix[-1] + v)
            partner_prefix[i] = prefix

        best_internal = -(1 << 62)
        best_deg = 1 << 62
        best: tuple[int, ...] = ()
        chosen: list[int] = []

        def descend(start: int, internal: int, degsum: int, link: list[int]) -> None:
            # link[p] = sum of scores from cand[p] to the chosen GPUs.
            nonlocal best_internal, best_deg, best
            r = k - len(chosen)
            if r == 0:
                if internal > best_internal or (internal == best_internal and degsum < best_deg):
                    best_internal, best_deg, best = internal, degsum, tuple(chosen)
                return
            if m - start < r:
                return
            rest = range(start, m)
            # Upper bound (doubled to stay in integers) on the internal score reachable: each
            # remaining pick p contributes its links to the chosen set plus at most half of its
            # best r-1 partner scores.
            gains = sorted(
                (2 * link[p] + partner_prefix[cand[p]][r - 1] for p in rest), reverse=True
            )
            upper2 = 2 * internal + sum(gains[:r])
            lower_deg = degsum + sum(sorted(deg[cand[p]] for p in rest)[:r])
            if upper2 < 2 * best_internal or (
                upper2 == 2 * best_internal and lower_deg >= best_deg
            ):
                return
            for p in range(start, m - r + 1):
                gpu = cand[p]
                chosen.append(gpu)
                row = s[gpu]
                descend(
                    p + 1,
                    internal + link[p],
                    degsum + deg[gpu],
                    [link[q] + row[cand[q]] for q in range(m)],
                )
                chosen.pop()

        descend(0, 0, 0, [0] * m)
        damage = best_deg - 2 * best_internal
        return SetChoice(best, best_internal, damage)


class Topologies:
    """One Topology per distinct score matrix, for one snapshot: identical nodes share its memo
    and its node class. Weak: a topology (and its memo) lives while some node's inventory uses
    it, so nodes with matrices of their own that come and go leave nothing behind."""

    __slots__ = ("_interned", "_memo_limit")

    def __init__(self, memo_limit: int | None = None) -> None:
        # Each topology's memo bound (MemoSettings.best_sets; None: the default).
        self._memo_limit = MemoSettings().best_sets if memo_limit is None else memo_limit
        self._interned: weakref.WeakValueDictionary[tuple[tuple[int, ...], ...], Topology] = (
            weakref.WeakValueDictionary()
        )

    def intern(self, scores: Sequence[Sequence[int]]) -> Topology:
        key = tuple(tuple(row) for row in scores)
        found = self._interned.get(key)
        if found is None:
            found = Topology(key, self._memo_limit)
            self._interned[key] = found
        return found

    def __len__(self) -> int:
        return len(self._interned)


def brute_force_best_set(topology: Topology, free: int, k: int) -> SetChoice | None:
    """The definition of rule 1, by enumeration. For tests and for checking the search."""
    from itertools import combinations

    cand = [i for i in range(topology.n) if free >> i & 1]
    if k <= 0 or len(cand) < k:
        return None
    best_key: tuple[int, int, tuple[int, ...]] | None = None
    for combo in combinations(cand, k):
        key = (-topology.internal_score(combo), topology.damage(combo, free), combo)
        if best_key is None or key < best_key:
            best_key = key
    assert best_key is not None
    return SetChoice(best_key[2], -best_key[0], best_key[1])
