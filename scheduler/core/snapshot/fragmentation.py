"""Fragmentation: how much of a node's free GPU capacity the pods the cluster runs could not use.

The measure is the FGD paper's F_n(M) (Weng et al., "Beware of Fragmentation", USENIX ATC 2023).
M, the target workload, is what the cluster holds now: the request classes of the pods on its
GPU nodes (cpu millicores, cards, percent of each card; a pod without GPUs is a class of no
cards; and where the class can run, its *reach*), most common first until they cover 95% of
those pods, each weighted by its share of them in parts per ``weight_parts`` (per mille). So
the measure follows the workload as it changes, shrinks with it when pods leave, and is a
function of the snapshot.

A class's reach is what limits the nodes its pods can use, as FGD's classes carry the GPU
model a pod is pinned to (issue 32: on openb with a third of the pods pinned to models, a
measure blind to it left two points more of the GPUs idle than FGD): the GPU vendor it holds
cards of, its node selectors and required node affinity on the labels that name a node's pool
of GPUs (``pool_labels``: product, family, instance type), and its tolerations. A node is seen
through the same labels, its vendor and its NoSchedule/NoExecute taints (its *pool*). For one
class m on a node whose cards have f_1 >= f_2 >= ... percent free:

- m asks for no GPU, or cannot run there (its reach leaves the node out, or fewer than its count
  of cards with its percent free, or less cpu left than it asks): all the node's free GPU
  percent counts;
- m fits: the free percent of the cards with less free than m asks counts (slivers it cannot use).

F_n(M) is the weighted sum. To it we add what FGD leaves out, the node's *stranded* GPUs: the
free card percent its cpu left cannot feed at the workload's own cpu per GPU (what its GPU
classes ask for of cpu against card percent, weighted as they are), counted ``stranded_weight``
times the weight of the classes that can run there; for a class that cannot, every idle percent
of the node is stranded. FGD counts cpu only through each class's fit, so it places
cpu-heavy pods where cards stay free that no cpu is left for; on openb most pods FGD refuses
before the cluster is full are refused for want of cpu on every node with a free card
(bench-frag: 4.17% unallocated with the term, against FGD's 4.72). The numbers (95%, the
stranded weight, and the others below) are settings.py's FragmentationSettings, defaults shown.

Last, a pool's *contest*: how much more the classes pinned to some pools (those whose reach
leaves out a pool that has GPUs) ask of it than its share of the cluster's GPUs: each such
class's GPU demand spread over the pools it can run in by their GPUs, as a percent of the
pool's share (100: the pinned classes ask as much of it as its share of the GPUs), at most
``contest_cap_percent``. Every free GPU percent of a node that its cpu left can still feed (the
free percent less the stranded) counts ``contest_weight`` times the workload's weight times its
pool's contest as room the pinned classes need, subtracted: a placement in a contested pool
loses it, so a pod that can run anywhere goes to the pools nobody waits for first (issue 32:
with a third of openb's pods pinned to models, the stranded term alone sent cpu-light pods to
the cpu-poor V100 and P100 pools the pinned pods were refused for, and left a point more of the
GPUs idle than FGD at 100% arrived; with the contest, two points less). A workload without a
pinned class has no contest: it measures as before.

A placement's *gain* on a node is the measure before minus after it: the fragmentation it
removes (negative: what it adds). It depends on the node's shape (cpu left, the
cards' free percent as a multiset) alone, so each Target remembers it by shape, and only a node
whose shape changed is measured again. A node whose status has no cpu counts as having enough.

How placement uses it (placement/nodes.py): the gain, ranked as FGD scores it but twice as steep
(``gain_rank``), orders nodes after the rules that come first (a multi-GPU pod's set score, a pod's
node preferences) and before the rules it replaces while there is a target (smallest fitting
node, busiest card); its ties go to a node some GPU pod uses already, then by name.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from ..model.labels import requirement_holds
from ..model.names import CORES_PER_CARD
from ..model.objects import NodeInput, PodInput, Requirement, Taint, Toleration
from ..settings import FragmentationSettings

# One requirement of a node selector term, as (key, operator, values).
Need = tuple[str, str, tuple[str, ...]]
# Where a class can run: the GPU vendor it holds cards of ("": any, a pod without GPUs); its
# required node terms on the pool labels, ORed, each its requirements ANDed, sorted (): every
# node); its tolerations as (key, operator, value, effect), sorted. Plain tuples, so classes
# order and hash as values.
Reach = tuple[str, tuple[tuple[Need, ...], ...], tuple[tuple[str, str, str, str], ...]]
ANYWHERE: Reach = ("", (), ())
# A node as a reach sees it: its GPU vendor, its pool labels as sorted (key, value), and its
# NoSchedule/NoExecute taints as (key, value, effect) in the node's order.
Pool = tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str, str], ...]]
# A request class: (cpu millicores, cards, percent of each card, where it can run).
RequestClass = tuple[int, int, int, Reach]
# Per pool whose contest is above 0, that contest in percent; sorted by pool.
Contest = tuple[tuple[Pool, int], ...]
# A node as the measure sees it: cpu millicores left (-1: not known, enough for any class), its
# cards' free percent, largest first, idle and shared cards only (a card held whole, or
# unhealthy, or held for a preemptor, has nothing free), and its pool.
Shape = tuple[int, tuple[int, ...], Pool]


class Target:
    """One target workload M and the fragmentation of every node shape measured under it.

    F_n(M) is measured in two parts, each remembered by what it depends on, so that a placement
    never measures a node shape afresh when only the cpu left (or the pod's cpu) differs (issue
    32: a share with a cpu request the memo had not seen measured every candidate afresh, some
    thousand a decision at 5,000 nodes):

    - the classes' part (``_frag``) reads the cpu left only through which classes it can feed,
      so it is kept by (the largest cpu a class asks that the cpu left covers, the cards);
    - the stranded part is a line of the cpu left, worked out each time.

    A new target (the pods held changed a class's weight in parts) starts from the one
    before it (``before``): the cards a placement leaves do not depend on the target and are
    shared, and the classes' part of a shape the one before measured is its value plus what the
    classes whose weight changed add (``delta``, usually a few classes), not a new sum over every
    class. The targets of a filling 5,000-node cluster change every few dozen pods, and each
    emptied memo made the next shares measure every candidate afresh (issue 32).
    """

    __slots__ = (
        "afters",
        "asks",
        "before",
        "beyond",
        "capped",
        "classes",
        "contest",
        "cpu_cap",
        "cpu_per",
        "delta",
        "kept",
        "key",
        "levels",
        "memo",
        "memo_limit",
        "parts",
        "per_cpu",
        "ranks",
        "reserve",
        "strand",
        "unreached",
        "usable",
        "views",
        "weight",
    )

    def __init__(
        self,
        key: tuple[tuple[RequestClass, int], ...],
        settings: FragmentationSettings,
        before: Target | None = None,
        contest: Contest = (),
    ) -> None:
        self.key = key
        self.contest = contest
        self.classes = key
        # No class asks for more cpu: above it, nodes differing in cpu left measure the same.
        self.cpu_cap = max((request[0] for request, _ in key), default=0)
        # The pools as the classes' reaches tell them apart: ranks are remembered per view.
        # The one before's when the reaches are the same (most new targets only weigh the
        # classes anew), with what it worked out per pool.
        reaches = frozenset(request[3] for request, _ in key)
        self.views: PoolViews = (
            before.views
            if before is not None and before.views.reaches == reaches
            else PoolViews(reaches)
        )
        # Per set of blocked reaches, the weight of the classes they are the reaches of.
        self.unreached: dict[frozenset[Reach], int] = {}
        # The cpu the classes ask for, ascending: which of them a cpu left covers.
        self.asks = sorted({request[0] for request, _ in key})
        # The workload's cpu per card percent, as a fraction: what its GPU classes ask for of
        # each, weighted as they are (stranded()).
        gpu = [(request, weight) for request, weight in key if request[1]]
        self.cpu_per = sum(weight * request[0] for request, weight in gpu)
        self.per_cpu = sum(weight * request[1] * request[2] for request, weight in gpu)
        self.strand = settings.stranded_weight
        self.memo_limit = settings.memo_shapes
        self.parts = settings.weight_parts
        # The classes' part by (cpu covered, cards, the reaches that leave the node out), and
        # the cards a placement leaves by (cards, what it takes of them).
        self.memo: dict[_MemoKey, int] = {}
        self.afters: dict[tuple[tuple[int, ...], tuple[tuple[int, int], ...]], tuple[int, ...]] = (
            {} if before is None else before.afters
        )
        # Per cards, the free percent of its cards with at least each percent a class asks
        # free (what a class that fits there can use): no target's, so shared with the one
        # before like ``afters`` (issue 32: summed afresh per class, it was a third of a
        # share's time right after a target change).
        self.usable: dict[tuple[int, ...], dict[int, int]] = {} if before is None else before.usable
        # The target before this one (its asks, views and memo; not its own ``before``: no
        # chain) and each class's weight now minus then, when fewer classes changed than there
        # are.
        self.before: tuple[list[int], PoolViews, dict[_MemoKey, int]] | None = None
        self.delta: tuple[tuple[RequestClass, int], ...] = ()
        if before is not None:
            now, then = dict(key), dict(before.key)
            delta = tuple(
                (request, now.get(request, 0) - then.get(request, 0))
                for request in sorted(now.keys() | then.keys())
                if now.get(request, 0) != then.get(request, 0)
            )
            if 2 * len(delta) < len(key):
                self.before = (before.asks, before.views, before.memo)
                self.delta = delta
        self.ranks: dict[_RankKey, int] = {}
        if before is not None and self.before is not None and not self.delta:
            # The same classes and weights in another order (the pods held changed which of
            # two equally common classes comes first): the same classes' part, its memo kept,
            # and the same ranks too when the pools' contest is the same.
            self.memo, self.before = before.memo, None
            if contest == before.contest:
                self.ranks = before.ranks
        # Per cpu level (how many of ``asks`` a cpu left covers) and reaches that leave the node
        # out, the GPU classes it covers and that can run there summed by (cards, percent):
        # (cards, percent, weight), built when first asked for.
        self.levels: dict[tuple[int, frozenset[Reach]], list[tuple[int, int, int]]] = {}
        # Per (cpu level, blocked reaches, the least a card has free, the most less the percent
        # taken): _kept; per _capped's arguments: its rank (within).
        self.kept: dict[tuple[int, frozenset[Reach], int, int], tuple[int, int]] = {}
        self.capped: dict[tuple[frozenset[Reach], int, int, int, int], int] = {}
        # Per (blocked reaches, percent taken, the ceiling's fall, a rank, kept, lost): cut_beyond.
        self.beyond: dict[tuple[frozenset[Reach], int, int, int, int, int], int] = {}
        self.weight = sum(weight for _, weight in key)
        # Per reaches that leave a contested pool out, what a free GPU percent of it counts
        # (subtracted) in frag(). A pool's contest is the sum of what the pinned classes that
        # can run there ask of it (Profile._contest), so pools the same reaches leave out are
        # contested alike: keyed so, any pool measures as those the reaches treat like it do.
        self.reserve = {
            self.views.blocked(pool): settings.contest_weight * self.weight * percent // 100
            for pool, percent in contest
        }

    def rank(self, shape: Shape, cpu: int, take: tuple[tuple[int, int], ...]) -> int:
        """gain_rank(gain(...)) for a placement on a node of ``shape``, remembered by what the
        gain reads, which is less than the shape: of the pool, the reaches that leave it out;
        of the cpu left before and after, only the classes each covers (``asks``) and how much
        more of the free percent the node strands before than after (the stranded term is
        linear in it, and so is the contest's). Nodes differing only in cpu left, and pods only
        in the cpu they ask, share their answers whenever those agree: a node short of cpu
        before and after strands the pod's percent less the cpu it takes at the workload's rate
        whatever its cpu left (issue 32: keyed by the cpu left, a share right after a target
        change ranked some thousand keys afresh at 5,000 nodes)."""
        left, cards, pool = shape
        blocked = self.views.blocked(pool)
        moved = (cards, take)
        after = self.afters.get(moved)
        if after is None:
            if len(self.afters) >= self.memo_limit:
                _forget_oldest(self.afters)
            after = self.afters[moved] = _after(cards, take)
        idle, idle_after = sum(cards), sum(after)
        asks = self.asks
        if left < 0:
            # A node whose status says nothing of cpu: every class covered, nothing stranded.
            then, level, level_then, cut = left, len(asks), len(asks), 0
        else:
            then = max(0, left - cpu)
            level, level_then = bisect.bisect_right(asks, left), bisect.bisect_right(asks, then)
            cut = self._stranded(left, idle) - self._stranded(then, idle_after)
        key = (cards, take, blocked, level, level_then, cut)
        ranks = self.ranks
        found = ranks.get(key)
        if found is not None:
            return found
        if len(ranks) >= self.memo_limit:
            _forget_oldest(ranks)
        # frag(shape) - frag(after), term by term (frag()).
        unreached = self._unreached(blocked)
        value = (
            self._classes(left, level, cards, pool, blocked)
            - self._classes(then, level_then, after, pool, blocked)
            + self.strand * ((self.weight - unreached) * cut + unreached * (idle - idle_after))
        )
        if self.reserve:
            value -= self.reserve.get(blocked, 0) * (idle - idle_after - cut)
        found = ranks[key] = gain_rank(value, self.parts)
        return found

    def ceiling(self, pool: Pool, cpu: int, taken: int, short: bool) -> int:
        """The highest ``rank`` a placement taking ``taken`` percent of cards (``cpu``
        millicores) can have on any node of ``pool`` (``short``: on a node with less cpu left
        than ``cpu`` too), worked out from the pool alone.

        Each class counts at most ``taken`` percent less after than before: a card too little
        for it was its sliver, and counts what was taken less; a node it no longer fits (or
        is fed on) counted its slivers before and counts all its idle, ``taken`` less, after;
        so the classes' part gains at most ``weight`` times ``taken``. The stranded percent
        falls by at most ``taken`` less what ``cpu`` feeds at the workload's rate (all of
        ``taken`` on a node left with none), and the stranded and contest terms are linear
        in that fall (``rank``)."""
        return self._capped(self.views.blocked(pool), taken, self._fall(cpu, taken, short))

    def _fall(self, cpu: int, taken: int, short: bool) -> int:
        if not self.cpu_per:
            return 0
        return taken if short else max(0, taken - cpu * self.per_cpu // self.cpu_per)

    def within(self, shape: Shape, cpu: int, taken: int, span: tuple[int, int] = (0, 0)) -> int:
        """The highest ``rank`` a placement taking ``taken`` percent of cards (``cpu``
        millicores) can have on a node of ``shape``, worked out as ``ceiling`` but from the
        node: the stranded percent falls by what its cpu left makes it fall (``rank``'s cut);
        and, for a placement on one card with between ``span`` percent free ((0, 0): several
        cards), a class fed there that asks one card of at most the least of them counts no
        less after than before, and one of those that no card of the span leaves usable counts
        at least the least less the percent taken more (``_kept``). Cheap (no shape is
        measured; a lookup when the memos know the answer), and tighter than the ceiling
        wherever the node's cpu left feeds its free cards before and after, or the card is
        one many classes use (issue 32: the nodes a share's search reads first, and the
        shares of much of a card, which seldom reach the ceiling; on bench-core's
        share-heavy workload it is the rank itself for most nodes)."""
        left, cards, pool = shape
        cut, level = 0, len(self.asks)
        if left >= 0:
            level = bisect.bisect_right(self.asks, left)
            cut = self.cut(left, sum(cards), cpu, taken)
        return self.bound(self.views.blocked(pool), level, cut, taken, span)

    def bound(
        self, blocked: frozenset[Reach], level: int, cut: int, taken: int, span: tuple[int, int]
    ) -> int:
        """``within`` from its parts: the node's pool's views.blocked, its cpu left's level
        (how many of ``asks`` it covers; all for a cpu left not known) and ``cut`` (0 then),
        for a caller that has them already (placement/nodes._file: a share files some hundred
        candidates, each told by its cut first)."""
        kept, lost = self._kept_for(level, blocked, taken, span)
        capped = (blocked, taken, cut, kept, lost)
        ranked = self.capped.get(capped)
        if ranked is None:
            if len(self.capped) >= self.memo_limit:
                _forget_oldest(self.capped)
            ranked = self.capped[capped] = self._capped(*capped)
        return ranked

    def cut(self, left: int, idle: int, cpu: int, taken: int) -> int:
        """How much a placement taking ``taken`` percent of cards and ``cpu`` millicores lowers
        the stranded percent of a node with ``left`` cpu (known) and ``idle`` free card
        percent (``within``'s, and its only part that reads the node's cpu left)."""
        if not self.cpu_per:
            return 0
        per, rate = self.per_cpu, self.cpu_per
        # Conditionals, not max(): a share asks this of some 300 nodes (issue 32's tail).
        then = left - cpu if left > cpu else 0
        before = idle - left * per // rate
        after = idle - taken - then * per // rate
        return (before if before > 0 else 0) - (after if after > 0 else 0)

    def cut_beyond(
        self,
        blocked: frozenset[Reach],
        cpu: int,
        taken: int,
        short: bool,
        rank: int,
        level: int = 0,
        span: tuple[int, int] = (0, 0),
    ) -> int:
        """The least ``cut`` with which ``within`` can be above ``rank`` on a node of a pool
        whose views.blocked is ``blocked`` (as ``ceiling``: the classes' part at its most): a
        node whose cut is lower cannot rank above ``rank`` (issue 32: the nodes a share's
        search passes over, told so by two products instead of the whole bound). Above
        ``ceiling``'s fall when no node can. With a one-card placement's ``span`` (as
        ``within``'s) on a node whose cpu left covers the first ``level`` of ``asks``, the
        least with which ``within`` itself can: what the classes the card is kept for count
        is left out too."""
        high = self._fall(cpu, taken, short)
        kept, lost = self._kept_for(level, blocked, taken, span)
        key = (blocked, taken, high, rank, kept, lost)
        found = self.beyond.get(key)
        if found is None:
            if len(self.beyond) >= self.memo_limit:
                _forget_oldest(self.beyond)
            found = self.beyond[key] = self._beyond(blocked, taken, high, rank, kept, lost)
        return found

    def _beyond(
        self, blocked: frozenset[Reach], taken: int, high: int, rank: int, kept: int, lost: int
    ) -> int:
        classes, stranded = self._slopes(blocked, kept)
        base, parts = classes * taken - lost, self.parts
        if gain_rank(base + stranded * high, parts) <= rank:
            return high + 1
        low = -_LOW_CUT
        if gain_rank(base + stranded * low, parts) > rank:
            return NO_CUT  # (a node with 16 cards idle) any node may
        # The rank grows with the cut (``stranded`` is above 0 here): the answer is the cut
        # that ranks above ``rank`` after one that does not. First the cut the sigmoid's
        # inverse says (gain_rank; floating point, so checked: usually it is the answer),
        # then halving what is left between a cut that does and one that does not.
        if rank < 99:
            value = -50 * parts * math.log(100 / (rank + 1) - 1)
            guess = math.ceil((value - base) / stranded)
            if low < guess < high:
                if gain_rank(base + stranded * guess, parts) > rank:
                    high = guess
                else:
                    low = guess
                if low + 1 < high and gain_rank(base + stranded * (high - 1), parts) <= rank:
                    low = high - 1
        while low + 1 < high:
            middle = (low + high) // 2
            if gain_rank(base + stranded * middle, parts) > rank:
                high = middle
            else:
                low = middle
        return high

    def _kept_for(
        self, level: int, blocked: frozenset[Reach], taken: int, span: tuple[int, int]
    ) -> tuple[int, int]:
        """What ``bound`` and ``cut_beyond`` leave out for a one-card placement taking
        ``taken`` percent of a card with between ``span`` percent free ((0, 0): several
        cards, nothing): (the weight of the classes the card is kept for, what some of them
        count more at least), from ``_kept``, remembered."""
        least, most = span
        if not least:
            return 0, 0
        key = (level, blocked, least, most - taken)
        found = self.kept.get(key)
        kept, lost = self._kept(*key) if found is None else found
        return kept, lost * (least - taken)

    def _kept(
        self, level: int, blocked: frozenset[Reach], least: int, over: int
    ) -> tuple[int, int]:
        """(the weight of the one-card classes asking at most ``least`` percent that a cpu
        left covering the first ``level`` of ``asks`` feeds on a node ``blocked`` leaves them
        in, the weight of those of them asking more than ``over`` percent). Taking part of
        a card with at least ``least`` percent free, each of them counts no less after than
        before: the card stays usable to it (no change); or it becomes a sliver, and the
        class counts what is left of the card (it counted none of it), or it stops fitting
        or being fed and counts all the idle percent after (at least what it counted before
        plus the card it could use, less the percent taken). One asking more than what is
        left of any card of the span (``over``) is of the second kind: it counts at least
        the least less the percent taken more."""
        key = (level, blocked, least, over)
        if len(self.kept) >= self.memo_limit:
            _forget_oldest(self.kept)
        groups = self.levels.get((level, blocked))
        if groups is None:
            groups = self.levels[(level, blocked)] = self._level(level, blocked)
        ones = [(core, w) for k, core, w in groups if k == 1 and core <= least]
        found = self.kept[key] = (
            sum(w for _, w in ones),
            sum(w for core, w in ones if core > over),
        )
        return found

    def _capped(
        self, blocked: frozenset[Reach], taken: int, fall: int, kept: int = 0, lost: int = 0
    ) -> int:
        """The rank of the most a placement taking ``taken`` percent on a node the reaches
        ``blocked`` leave out can gain when the stranded percent falls by ``fall``: every
        class but those weighing ``kept`` counting ``taken`` less, less ``lost`` (what some
        of those count more at least)."""
        classes, stranded = self._slopes(blocked, kept)
        return gain_rank(classes * taken + stranded * fall - lost, self.parts)

    def _slopes(self, blocked: frozenset[Reach], kept: int) -> tuple[int, int]:
        """What ``_capped``'s gain counts per percent taken and per percent the stranded
        percent falls."""
        unreached = self._unreached(blocked)
        reserve = self.reserve.get(blocked, 0)
        classes = self.weight - kept + self.strand * unreached - reserve
        return classes, self.strand * (self.weight - unreached) + reserve

    def roomy(self, cards: tuple[int, ...], cpu: int) -> int:
        """The cpu left from which up a placement asking for ``cpu`` millicores ranks the same
        on any node with these cards (``rank``): what the pod and any class could ask, or
        feeding every free card at the workload's cpu per GPU would take."""
        need = self.cpu_cap
        if self.per_cpu:
            need = max(need, -(-sum(cards) * self.cpu_per // self.per_cpu))
        return need + cpu

    def frag(self, shape: Shape) -> int:
        """F_n(M) of a node of this shape, in percent-of-a-card x parts of the workload, plus
        its stranded GPU percent, ``stranded_weight`` times the weight of the classes that can
        run on the node; for the classes that cannot, every idle percent is stranded (a GPU a
        class can never use there is as lost to it as one no cpu is left for: issue 32, a
        stranded term blind to pools sent cpu-heavy pods to the cpu-rich pools pinned pods
        needed, and left 1.1 points more of openb's GPUs idle with a third of its pods
        pinned); less the room its free GPU percent is for the pinned classes, in a contested
        pool (``reserve``)."""
        left, cards, pool = shape
        blocked = self.views.blocked(pool)
        asks = self.asks
        level = bisect.bisect_right(asks, left) if left >= 0 else len(asks)
        unreached = self._unreached(blocked)
        idle = sum(cards)
        cut = self._stranded(left, idle)
        total = self._classes(left, level, cards, pool, blocked) + self.strand * (
            (self.weight - unreached) * cut + unreached * idle
        )
        if self.reserve:
            # The free percent its cpu left can still feed: a GPU no pinned pod could be fed on
            # is no room kept for them, so a cpu-light pod that fills it loses none (taking it
            # for the pinned classes alone, the cpu-poor pools' GPUs they strand at 130%
            # arrived left half a point more of pinned openb idle than with the stranded term
            # alone).
            total -= self.reserve.get(blocked, 0) * (idle - cut)
        return total

    def stranded(self, shape: Shape) -> int:
        """The free card percent of a node of this shape that its cpu left cannot feed at the
        workload's cpu per GPU: idle GPUs no pod like the workload's could use (0 when its
        status says nothing of cpu)."""
        left, cards, _pool = shape
        return self._stranded(left, sum(cards))

    def _stranded(self, left: int, idle: int) -> int:
        if left < 0 or not self.cpu_per:
            return 0
        return max(0, idle - left * self.per_cpu // self.cpu_per)

    def _classes(
        self, left: int, level: int, cards: tuple[int, ...], pool: Pool, blocked: frozenset[Reach]
    ) -> int:
        """The classes' part of frag() for ``cards`` on a node of ``pool`` with ``left`` cpu,
        which covers the first ``level`` of ``asks``: a function of (that level, the cards, the
        reaches ``blocked`` that leave the pool out), remembered so."""
        asks = self.asks
        # The largest cpu a class asks that ``left`` covers (-1: none; a node whose status has
        # no cpu covers every class).
        key = (asks[level - 1] if level else -1, cards, blocked)
        found = self.memo.get(key)
        if found is None:
            if len(self.memo) >= self.memo_limit:
                _forget_oldest(self.memo)
            found = self.memo[key] = self._measured(left, level, cards, pool, blocked)
        return found

    def _unreached(self, blocked: frozenset[Reach]) -> int:
        """The weight of the classes whose reaches are among ``blocked``."""
        unreached = self.unreached.get(blocked)
        if unreached is None:
            unreached = self.unreached[blocked] = sum(
                weight for request, weight in self.key if request[3] in blocked
            )
        return unreached

    def _measured(
        self, left: int, level: int, cards: tuple[int, ...], pool: Pool, blocked: frozenset[Reach]
    ) -> int:
        """The classes' part for cards ``cards`` on a node with ``left`` cpu (covering the
        first ``level`` of ``asks``) of ``pool`` (whose reaches ``blocked`` leave it out): the
        target before's value plus what the changed classes add, when it measured the shape;
        else summed over the classes grouped by what they ask of the cards (_frag's sum, a
        term per (cards, percent) instead of per class)."""
        if self.before is not None:
            asks, views, memo = self.before
            i = bisect.bisect_right(asks, left) if left >= 0 else len(asks)
            # The reaches the target before leaves the pool out with, from its own views
            # (worked out afresh here, they were a sixth of a share's time right after a target
            # change: issue 32).
            then_blocked = views.blocked(pool)
            then = memo.get((asks[i - 1] if i else -1, cards, then_blocked))
            if then is not None:
                # A class that left (or came) covered as the cpu left covers it, not as the
                # classes kept now do: _frag compares what each asks with the cpu itself.
                return then + _frag(self.delta, (left if left >= 0 else _ANY_CPU, cards), pool)
        idle = sum(cards)
        if not idle:
            return 0
        groups = self.levels.get((level, blocked))
        if groups is None:
            groups = self.levels[(level, blocked)] = self._level(level, blocked)
        # Every class counts all the idle percent, but one that runs there (its cards with its
        # percent free: cards[k - 1], the k-th largest) counts only the slivers below it.
        total = self.weight * idle
        count = len(cards)
        usable = self.usable.get(cards)
        if usable is None:
            if len(self.usable) >= self.memo_limit:
                _forget_oldest(self.usable)
            usable = self.usable[cards] = {}
        for k, core, weight in groups:
            if count >= k and cards[k - 1] >= core:
                use = usable.get(core)
                if use is None:
                    use = usable[core] = sum(f for f in cards if f >= core)
                total -= weight * use
        return total

    def _level(self, level: int, blocked: frozenset[Reach]) -> list[tuple[int, int, int]]:
        """The GPU classes a cpu left covering the first ``level`` asks feeds, on a node the
        reaches ``blocked`` leave out, their weights summed by (cards, percent)."""
        covered = self.asks[level - 1] if level else -1
        summed: dict[tuple[int, int], int] = {}
        for (need_cpu, k, core, reach), weight in self.classes:
            if k and need_cpu <= covered and reach not in blocked:
                summed[(k, core)] = summed.get((k, core), 0) + weight
        return [(k, core, weight) for (k, core), weight in sorted(summed.items())]


# Below any node's cut (Target.cut): no floor.
NO_CUT = -(1 << 62)
# Where Target.cut_beyond starts looking (a cut is at least minus the node's idle percent).
_LOW_CUT = 16 * CORES_PER_CARD
# More cpu than any class asks (the node's status says nothing of cpu: it covers every class).
_ANY_CPU = 1 << 62
# What a placement's rank is remembered by (Target.rank): (cards, what it takes of them, the
# reaches that leave the pool out, the levels of ``asks`` the cpu left covers before and after,
# the stranded percent before less after).
_RankKey = tuple[tuple[int, ...], tuple[tuple[int, int], ...], frozenset[Reach], int, int, int]
# What the classes' part of a shape is remembered by: (the largest cpu a class asks that the
# cpu left covers, the cards, the reaches that leave the node out). Nodes of pools that the same
# reaches leave out (every node, in a workload no class of which is pinned) share an entry.
_MemoKey = tuple[int, tuple[int, ...], frozenset[Reach]]


def _frag(
    classes: Iterable[tuple[RequestClass, int]], key: tuple[int, tuple[int, ...]], pool: Pool
) -> int:
    """The classes' part of F_n(M) on cards ``key[1]`` of ``pool`` whose cpu left covers the
    classes asking at most ``key[0]`` (-1: none)."""
    covered, cards = key
    idle = sum(cards)
    if not idle:
        return 0
    total = 0
    count = len(cards)
    # The free percent below each percent a class asks for, summed once per percent: many
    # classes ask for the same (every whole-GPU class asks for 100), and a new target measures
    # every node shape afresh.
    slivers: dict[int, int] = {}
    for (need_cpu, k, core, reach), weight in classes:
        # A class that cannot run here (no GPU, too little cpu or too few cards free, or a
        # reach that leaves the node out, as FGD counts a model mismatch) counts all idle.
        if (
            not k
            or need_cpu > covered
            or count < k
            or cards[k - 1] < core
            or not can_run(reach, pool)
        ):
            total += weight * idle
        else:
            sliver = slivers.get(core)
            if sliver is None:
                sliver = slivers[core] = sum(f for f in cards if f < core)
            total += weight * sliver
    return total


def _forget_oldest(memo: dict[Any, Any]) -> None:
    """Drop the older half of a full memo. Emptying it instead made every candidate of the next
    decisions a miss at once (issue 32: most shares slower than 10 ms at 5,000 nodes came right
    after the rank memo filled)."""
    for key in list(itertools.islice(memo, len(memo) // 2)):
        del memo[key]


def _after(cards: tuple[int, ...], take: Iterable[tuple[int, int]]) -> tuple[int, ...]:
    """The cards' free percent (as a Shape holds them) after taking, per card, (that card's
    free percent, the percent taken)."""
    after = list(cards)
    for free, core in take:
        # A share of GPU memory alone takes no core: the card keeps its free percent (and may
        # have none, when the shape does not list it at all).
        if core:
            after.remove(free)
            after.append(free - core)
    return free_cards(after)


class Profile:
    """The request class of every pod held on a GPU node, and the Target they make.

    ClusterState charges a pod here when it holds GPUs (its class: its cpu request, its whole
    GPUs or its shares) or is recorded on a GPU node without any (its cpu request, no cards),
    and forgets it when it leaves; an entry lives exactly as long as the pod is there.

    The target is a function of the pods held, and of nothing else: not of the order they came
    in, nor of when (or how often) ``target()`` was asked for. The live loop asks on every
    retry and every preemption search, ``simulate`` once a pod, and a restarted scheduler or a
    standby charges the bound pods in the order a LIST gives them; all of them hold the same
    pods and so weigh nodes by the same target (issue 32). A hysteresis (rebuilding only when
    the pods held drifted by some fraction since the last build) would be history, and history
    is exactly what two schedulers do not share.

    The pools' contest (Target) reads the GPU nodes too: each node's pool and healthy GPUs,
    counted here by ``count_node`` as the snapshot sets and removes nodes, so the target is a
    function of the pods held and the nodes, both of which every scheduler of the cluster sees.
    """

    __slots__ = (
        "_changed",
        "_counts",
        "_gpu_pods",
        "_nodes",
        "_pods",
        "_pools_changed",
        "_ranked",
        "_runs",
        "_settings",
        "_supply",
        "_target",
    )

    def __init__(self, settings: FragmentationSettings) -> None:
        self._settings = settings
        self._pods: dict[str, RequestClass] = {}
        self._counts: dict[RequestClass, int] = {}
        # The classes as _key reads them, most common first (ties by class): (minus the count,
        # the class), kept in order as charges move one count at a time (issue 32: sorted
        # afresh, the ninety-odd classes of openb's mix cost every decision after a charge).
        self._ranked: list[tuple[int, RequestClass]] = []
        self._gpu_pods = 0  # entries with cards: only these make a target exist
        self._target: Target | None = None
        # A charge (or a node counted) changed what ``_target`` was worked out from.
        self._changed = True
        # Each GPU node's pool and healthy GPUs, the GPUs per pool, and per reach the pools
        # it can run in (worked out again after the pools changed).
        self._nodes: dict[str, tuple[Pool, int]] = {}
        self._supply: dict[Pool, int] = {}
        self._runs: dict[Reach, tuple[Pool, ...]] = {}
        # A node counted changed the pools' supply since the contest was last worked out.
        self._pools_changed = True

    def __len__(self) -> int:
        return len(self._pods)

    def charge(self, pod: str, request: RequestClass | None) -> None:
        """The pod holds ``request`` now (None: nothing any more)."""
        previous = self._pods.pop(pod, None)
        if previous is not None:
            self._gpu_pods -= previous[1] > 0
            self._count(previous, -1)
        if request is not None:
            self._gpu_pods += request[1] > 0
            self._pods[pod] = request
            self._count(request, 1)
        # A node refreshed charges its pods again with the classes they had: nothing changed.
        self._changed |= previous != request

    def _count(self, request: RequestClass, change: int) -> None:
        """One pod more (``change`` 1) or fewer (-1) of class ``request``."""
        ranked = self._ranked
        was = self._counts.get(request, 0)
        if was:
            at = bisect.bisect_left(ranked, (-was, request))
            del ranked[at]
        now = was + change
        if now:
            self._counts[request] = now
            bisect.insort(ranked, (-now, request))
        else:
            del self._counts[request]

    def count_node(self, name: str, pool: Pool | None, gpus: int) -> None:
        """Node ``name`` is of ``pool`` with ``gpus`` healthy GPUs now (None or 0: it counts no
        more)."""
        now = (pool, gpus) if pool is not None and gpus else None
        previous = self._nodes.get(name)
        if previous == now:
            return
        if previous is not None:
            left = self._supply[previous[0]] - previous[1]
            if left:
                self._supply[previous[0]] = left
            else:
                del self._supply[previous[0]]
                self._runs.clear()
            del self._nodes[name]
        if now is not None:
            self._nodes[name] = now
            if now[0] not in self._supply:
                self._runs.clear()
            self._supply[now[0]] = self._supply.get(now[0], 0) + now[1]
        self._changed = self._pools_changed = True

    def target(self) -> Target | None:
        """M for the pods held now; None while fewer than ``min_pods`` of them hold GPUs (too few
        to say what the workload is: the other rules decide alone; pods without GPUs, however
        many, weigh in a target but do not make one).

        Worked out from the counts of the pods held on the first call after a charge changed
        them, so it is what the pods held make whenever it is asked for. The same Target object
        (and its memo of ranks) as long as the classes and their weights in parts stay the
        same: most charges of a large cluster change neither. The pools' contest is a
        function of the classes and the nodes counted: worked out again only when either
        changed."""
        if self._gpu_pods < self._settings.min_pods:
            return None
        if self._changed:
            self._changed = False
            key = self._key()
            target = self._target
            if target is None or target.key != key or self._pools_changed:
                self._pools_changed = False
                contest = self._contest(key)
                if target is None or target.key != key or target.contest != contest:
                    self._target = Target(key, self._settings, target, contest)
                    # Its views may be the one before's (Target): more pools in them than GPU
                    # nodes counted are of nodes gone.
                    self._target.views.trim(len(self._nodes))
        return self._target

    def _contest(self, key: tuple[tuple[RequestClass, int], ...]) -> Contest:
        """Each pool's contest under the classes ``key`` (Target): the GPU demand (weight x
        cards x percent) of every class whose reach leaves out a pool that has GPUs, spread
        over the pools it runs in by their GPUs, against the pool's share of the cluster's
        GPUs, in percent of the whole demand, capped; the pools above 0, sorted."""
        cap = self._settings.contest_cap_percent
        supply = self._supply
        if not cap or not self._settings.contest_weight or len(supply) < 2:
            return ()
        # The pinned classes' demand by reach, and everyone's.
        pinned: dict[Reach, int] = {}
        total = 0
        for (_cpu, cards, core, reach), weight in key:
            if not cards:
                continue
            demand = weight * cards * core
            total += demand
            runs = self._runs.get(reach)
            if runs is None:
                runs = self._runs[reach] = tuple(p for p in supply if can_run(reach, p))
            if runs and len(runs) < len(supply):
                pinned[reach] = pinned.get(reach, 0) + demand
        if not pinned:
            return ()
        # A pool's contest is its pinned demand share over its GPU share: per reach,
        # demand x pool / reach's GPUs, over (total demand x pool / all GPUs); the pool's
        # GPUs cancel, leaving all GPUs / total demand x the sum of demand / reach's GPUs.
        shares: dict[Pool, Fraction] = {}
        for reach, demand in pinned.items():
            runs = self._runs[reach]
            part = Fraction(demand, sum(supply[p] for p in runs))
            for pool in runs:
                shares[pool] = shares.get(pool, Fraction(0)) + part
        scale = Fraction(100 * sum(supply.values()), total)
        return tuple(
            sorted(
                (pool, percent)
                for pool, share in shares.items()
                if (percent := min(cap, int(share * scale))) > 0
            )
        )

    def _key(self) -> tuple[tuple[RequestClass, int], ...]:
        """The classes of the pods held, most common first (ties by class), until they cover
        ``coverage_percent`` of them, each weighted by its share of those kept in parts per
        ``weight_parts``, rounded (a class that rounds to 0 is left out)."""
        wanted = self._settings.coverage_percent * len(self._pods)
        kept: list[tuple[RequestClass, int]] = []
        covered = 0
        parts = self._settings.weight_parts
        for minus, request in self._ranked:
            n = -minus
            if 100 * covered >= wanted:
                break
            kept.append((request, n))
            covered += n
        return tuple(
            (request, weight)
            for request, n in kept
            if (weight := (2 * parts * n + covered) // (2 * covered)) > 0
        )


def request_class(cpu: int, whole: int, shares: Iterable[int], reach: Reach) -> RequestClass | None:
    """The class of a pod holding ``whole`` GPUs or cards shared at the given percents (one
    entry per card), asking for ``cpu`` millicores, that can run where ``reach`` says; None for
    a pod without GPUs."""
    cores = list(shares)
    if whole:
        return (cpu, whole, CORES_PER_CARD, reach)
    if cores:
        return (cpu, len(cores), max(cores), reach)
    return None


def reach_of(pod: PodInput, vendor: str, pool_labels: Iterable[str]) -> Reach:
    """Where a pod holding cards of ``vendor`` ("": none) can run, as its class carries it: its
    node selector and required node affinity on the pool labels (a requirement on another
    label, or on a field, is left out: the class is taken to run wherever the pool labels let
    it), and its tolerations of NoSchedule and NoExecute taints."""
    keys = frozenset(pool_labels)
    selected = tuple(
        sorted((key, "In", (value,)) for key, value in pod.node_selector.items() if key in keys)
    )
    terms: tuple[tuple[Need, ...], ...] = (selected,) if selected else ()
    affinity = pod.affinity
    if affinity is not None and affinity.node_required is not None:
        kept: set[tuple[Need, ...]] = set()
        for term in affinity.node_required:
            needs = {
                (r.key, r.operator, tuple(sorted(r.values)))
                for r in term.match_expressions
                if r.key in keys
            }
            if not needs and not selected:
                # A term that says nothing of the pool labels: the pod runs in any pool.
                kept = set()
                break
            kept.add(tuple(sorted(needs | set(selected))))
        terms = tuple(sorted(kept))
    tolerations = tuple(
        sorted(
            {
                (t.key, t.operator, t.value, t.effect)
                for t in pod.tolerations
                if t.effect in ("", "NoSchedule", "NoExecute")
            }
        )
    )
    return (vendor, terms, tolerations)


def pool_of(node: NodeInput, vendor: str, pool_labels: Iterable[str]) -> Pool:
    """A node as reaches see it: its GPU vendor, pool labels and NoSchedule/NoExecute taints."""
    labels = node.labels
    return (
        vendor,
        tuple(sorted((key, labels[key]) for key in set(pool_labels) if key in labels)),
        tuple(
            (t.key, t.value, t.effect)
            for t in node.taints
            if t.effect in ("NoSchedule", "NoExecute")
        ),
    )


def can_run(reach: Reach, pool: Pool) -> bool:
    """Whether a class of ``reach`` can run on a node of ``pool``: the vendor its cards are
    (or none), one of its node terms matched by the pool labels (or none to match), and every
    taint tolerated (as kube-scheduler's NodeAffinity and TaintToleration filters read them)."""
    vendor, terms, tolerations = reach
    if vendor and vendor != pool[0]:
        return False
    if terms:
        labels = dict(pool[1])
        if not any(
            all(requirement_holds(Requirement(*need), labels) for need in term) for term in terms
        ):
            return False
    if pool[2]:
        tolerating = [Toleration(*t) for t in tolerations]
        for key, value, effect in pool[2]:
            taint = Taint(key, effect, value)
            if not any(t.tolerates(taint) for t in tolerating):
                return False
    return True


def blocked_by(reaches: Iterable[Reach], pool: Pool) -> frozenset[Reach]:
    """The reaches that leave a node of ``pool`` out."""
    return frozenset(r for r in reaches if not can_run(r, pool))


class PoolViews:
    """Pools as a set of reaches tells them apart: per pool, the reaches that leave it out
    (``blocked``: all the measure reads of a pool, Target.frag), and the first pool asked
    about that the same reaches leave out (``of``), which stands for every such pool. A target
    remembers its ranks per view (Target.rank) and the shape index files its groups by view
    (NodeIndex.shaped). Issue 32: openb's seven GPU models and bench-core's three instance
    types, pool labels no class of the target is pinned to, made as many rank misses after
    each target change and as many shape groups for a whole-GPU pod to rank."""

    __slots__ = ("_blocked", "_first", "_of", "reaches")

    def __init__(self, reaches: Iterable[Reach]) -> None:
        self.reaches = frozenset(reaches)
        self._blocked: dict[Pool, frozenset[Reach]] = {}
        self._first: dict[frozenset[Reach], Pool] = {}
        self._of: dict[Pool, Pool] = {}

    def blocked(self, pool: Pool) -> frozenset[Reach]:
        found = self._blocked.get(pool)
        if found is None:
            found = self._blocked[pool] = blocked_by(self.reaches, pool)
        return found

    def of(self, pool: Pool) -> Pool:
        found = self._of.get(pool)
        if found is None:
            found = self._of[pool] = self._first.setdefault(self.blocked(pool), pool)
        return found

    def trim(self, most: int) -> None:
        """Forget what was worked out per pool once more than ``most`` pools were asked about
        (those of nodes long gone, a taint of their own each); the pools views stand for stay."""
        if len(self._blocked) > most:
            self._blocked.clear()
            self._of.clear()


def gain(target: Target, shape: Shape, cpu: int, take: Iterable[tuple[int, int]]) -> int:
    """F_n(M) before minus after placing, on a node of ``shape``, a pod asking for ``cpu``
    millicores and, per card it takes, (that card's free percent, the percent it takes)."""
    left, cards, pool = shape
    changed: Shape = (left if left < 0 else max(0, left - cpu), _after(cards, take), pool)
    return target.frag(shape) - target.frag(changed)


def gain_rank(value: int, parts: int) -> int:
    """A gain (in percent of a card x the workload's weight, counted in ``parts``) as FGD scores
    it, twice as steep: 100 x sigmoid(gain / (500 milli-GPU x the whole workload)), truncated to
    a whole number, so nodes whose gains differ by less than about 2% of a GPU tie and the rules
    after it decide between them (FGD's 1,000: bench-frag left 0.06 points more of openb's GPUs
    idle)."""
    scaled = -value / (50 * parts)
    if scaled > 700:  # past what exp() can hold: the sigmoid is 0 there
        return 0
    return int(100 / (1 + math.exp(scaled)))


def free_cards(free: Iterable[int]) -> tuple[int, ...]:
    """Cards' free percent as a Shape holds them: largest first, cards with none left out."""
    return tuple(sorted((f for f in free if f > 0), reverse=True))
