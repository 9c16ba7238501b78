"""A placement's rank is remembered by what its gain reads (Target.rank), not by the node's cpu
left or the pod's cpu: nodes and pods that differ only there share an answer whenever the levels
of ``asks`` the cpu left covers before and after, and the stranded percent before less after,
agree (issue 32: keyed by the cpu left, a share right after a target change ranked some
thousand keys afresh at 5,000 nodes). Sharing must never change an answer: every rank, from
the memo or not, is the gain worked out from scratch on a fresh target."""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterator

from scheduler.core.snapshot.fragmentation import (
    ANYWHERE,
    NO_CUT,
    Pool,
    Target,
    free_cards,
    gain,
    gain_rank,
)
from tests.unit.test_fragmentation_reach import A100, DEFAULTS, ON_T4, T4

POOL: Pool = ("nvidia", (), ())
TWO_GPUS = (8000, 2, 100, ANYWHERE)  # 4 cpu per GPU


def test_pods_and_nodes_short_of_cpu_alike_share_one_rank() -> None:
    target = Target(((TWO_GPUS, 100),), DEFAULTS)
    cards, one = (100, 100, 100), ((100, 100),)
    # 6 or 7 cpu left, 1 asked: no class covered before or after, and the node strands as much
    # more before than after (the GPU taken, less what 1 cpu feeds of it)
    short = target.rank((6000, cards, POOL), 1000, one)
    assert target.rank((7000, cards, POOL), 1000, one) == short
    assert len(target.ranks) == 1
    # 9 left: the class is covered before (not after): another question
    target.rank((9000, cards, POOL), 1000, one)
    assert len(target.ranks) == 2
    # plenty of cpu: nothing stranded before or after, every class covered, whatever the pod asks
    plenty = target.rank((64_000, cards, POOL), 1000, one)
    assert target.rank((48_000, cards, POOL), 2000, one) == plenty
    assert len(target.ranks) == 3


def test_every_rank_is_the_gain_worked_out_afresh() -> None:
    rng = random.Random(7)
    classes = (
        ((4000, 1, 30, ANYWHERE), 300),
        ((8000, 2, 100, ANYWHERE), 200),
        ((2000, 1, 100, ON_T4), 250),
        ((0, 0, 0, ANYWHERE), 150),
        ((16000, 1, 60, ANYWHERE), 100),
    )
    for contest in ((), ((T4, 40),)):
        target = Target(classes, DEFAULTS, contest=contest)
        for _ in range(3000):
            cards = free_cards(rng.choice((0, 10, 40, 60, 100)) for _ in range(rng.randint(1, 4)))
            pool = rng.choice((POOL, T4, A100))
            left = rng.choice((-1, *range(0, 40_000, 1000)))
            cpu = rng.choice((0, 1000, 2000, 3000, 8000))
            fits = [f for f in cards if f >= 30]
            take = ((rng.choice(fits), 30),) if fits and rng.random() < 0.7 else ()
            shape = (left, cards, pool)
            fresh = Target(classes, DEFAULTS, contest=contest)
            expected = gain_rank(gain(fresh, shape, cpu, take), DEFAULTS.weight_parts)
            assert target.rank(shape, cpu, take) == expected, (shape, cpu, take)
        assert len(target.ranks) < 3000  # answers were shared


# The classes the bounds are checked under: one-card shares of 10 and 30%, whole cards (one
# pinned to T4), two-card pods and pods without GPUs.
BOUNDED = (
    ((4000, 1, 30, ANYWHERE), 300),
    ((8000, 2, 100, ANYWHERE), 200),
    ((2000, 1, 100, ON_T4), 250),
    ((0, 0, 0, ANYWHERE), 150),
    ((1000, 1, 10, ANYWHERE), 100),
)
# A random one-card placement: the target, the node's (cpu left, cards, pool), the pod's cpu,
# the percent taken, and the node's cards that fit it.
Drawn = tuple[Target, int, tuple[int, ...], Pool, int, int, list[int]]


def _placements(seed: int) -> Iterator[Drawn]:
    """3,000 random one-card placements under BOUNDED, without and with a contest for T4."""
    rng = random.Random(seed)
    for contest in ((), ((T4, 40),)):
        target = Target(BOUNDED, DEFAULTS, contest=contest)
        for _ in range(3000):
            cards = free_cards(
                rng.choice((0, 5, 10, 40, 60, 100)) for _ in range(rng.randint(1, 4))
            )
            pool = rng.choice((POOL, T4, A100))
            left = rng.choice((-1, *range(0, 40_000, 1000)))
            cpu = rng.choice((0, 1000, 2000, 3000, 8000))
            core = rng.choice((0, 5, 20, 30))
            fits = [f for f in cards if f >= core]
            if fits:
                yield target, left, cards, pool, cpu, core, fits


def test_no_placement_ranks_above_its_pools_ceiling_or_its_nodes_bound() -> None:
    rng = random.Random(11)
    reached = tighter = met = 0
    for target, left, cards, pool, cpu, core, fits in _placements(11):
        card = rng.choice(fits)
        rank = target.rank((left, cards, pool), cpu, ((card, core),))
        ceiling = target.ceiling(pool, cpu, core, 0 <= left < cpu)
        assert rank <= ceiling, (left, cards, pool, cpu, core)
        reached += rank == ceiling
        # The node's own bound: no higher than the ceiling, no lower than the rank, for any
        # span of cards the one taken is in.
        least = rng.choice([f for f in fits if f <= card])
        most = rng.choice([f for f in fits if f >= card])
        within = target.within((left, cards, pool), cpu, core, (least, most))
        assert rank <= within <= ceiling, (left, cards, pool, cpu, core, least)
        tighter += within < ceiling
        met += rank == within
    assert reached  # the ceiling is reached: a share on a sliver no class can use
    assert tighter > 1000 and met > 1000


def test_a_node_whose_cut_is_below_the_floor_ranks_no_higher_than_the_floors_rank() -> None:
    """Target.cut_beyond: the least cut with which a node's bound can be above a rank, so a
    share's walk passes over a node below it without its bound (issue 32): every bound above
    the rank has a cut of at least it, and the floor is met by some bound above the rank."""
    above = met = 0
    for target, left, cards, pool, cpu, core, fits in _placements(12):
        if left < 0:
            continue  # no cut: the walk reads a node whose status says nothing of cpu
        within = target.within((left, cards, pool), cpu, core, (min(fits), max(fits)))
        cut = target.cut(left, sum(cards), cpu, core)
        for rank in (within - 5, within - 1, within):
            floor = target.cut_beyond(target.views.blocked(pool), cpu, core, left < cpu, rank)
            if within > rank:
                assert cut >= floor, (left, cards, pool, cpu, core, rank)
                above += 1
                met += cut == floor
    assert above > 1000 and met > 50


def test_the_floor_is_the_least_cut_whose_bound_ranks_above() -> None:
    """Target.cut_beyond finds its floor from the sigmoid's inverse first (floating point,
    checked) and halves the rest: either way it is exactly the least cut whose bound
    (Target.bound) ranks above the rank, for any pool, level and span of cards, or the
    ceiling's fall plus one when not even the ceiling does."""
    rng = random.Random(13)
    exact = 0
    for target, left, _cards, pool, cpu, core, fits in _placements(13):
        blocked = target.views.blocked(pool)
        short = 0 <= left < cpu
        level = bisect.bisect_right(target.asks, left) if left >= 0 else len(target.asks)
        span = rng.choice(((0, 0), (min(fits), max(fits))))
        ceiling = target.ceiling(pool, cpu, core, short)
        for rank in range(0, ceiling + 1, 7):
            floor = target.cut_beyond(blocked, cpu, core, short, rank, level, span)
            if floor == NO_CUT:
                continue
            assert target.bound(blocked, level, floor - 1, core, span) <= rank
            if target.bound(blocked, level, floor, core, span) > rank:
                exact += 1
            elif span == (0, 0):  # the ceiling's fall plus one: not even the ceiling is above
                assert ceiling <= rank
    assert exact > 1000
