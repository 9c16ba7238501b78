"""The share walk's order (snapshot/nameorder.py) against the list it stands for.

A share's walk (placement/nodes._walk) reads the GPU nodes touched first, each by name, and may
skip only nodes it would pass over for their cpu or cards; its budget counts every node of the
order. Seeded random filings (new nodes, refilings that change any of untouched, vendor, cpu
left and idlest card, nodes leaving, enough of them to renumber the bits) are checked against
the sorted list: what ``candidates`` yields is exactly the nodes of the order's first
``budget`` whose buckets are at or above the share's, in order, so every node with the cpu
and the card is among them, and ``over`` says whether the order holds more nodes.
"""

from __future__ import annotations

import random

import pytest

from scheduler.core.snapshot.nameorder import NameOrder, card_bucket, cpu_bucket

# name -> (untouched, vendor, cpu left, idlest card's free percent)
Model = dict[str, tuple[bool, str, int, int]]

VENDORS = ("nvidia", "metax")


def _expected(
    model: Model, vendor: str | None, cpu: int, percent: int, budget: int
) -> tuple[list[str], bool]:
    order = sorted(model, key=lambda name: (model[name][0], name))
    wanted = [
        name
        for name in order[:budget]
        if (vendor is None or model[name][1] == vendor)
        and (model[name][2] < 0 or cpu_bucket(model[name][2]) >= cpu_bucket(cpu))
        and (percent == 0 or card_bucket(model[name][3]) >= card_bucket(percent))
    ]
    return wanted, len(order) > budget


def _filing(rng: random.Random) -> tuple[bool, str, int, int]:
    left = rng.choice((-1, 0, 125, 900, 4000, 6000, rng.randrange(0, 200_000)))
    return (
        rng.random() < 0.3,
        rng.choice(VENDORS),
        left,
        rng.choice((0, 10, 16, 47, 100, rng.randrange(101))),
    )


@pytest.mark.parametrize("seed", range(40))
def test_the_candidates_are_the_order_s_nodes_in_their_buckets(seed: int) -> None:
    rng = random.Random(seed)
    order, model = NameOrder(), {}
    for step in range(400):
        roll = rng.random()
        if roll < 0.35 or not model:
            name = f"node-{rng.randrange(300):03d}"
            model[name] = _filing(rng)
            order.put(name, *model[name])
        elif roll < 0.75:
            name = rng.choice(sorted(model))
            untouched, vendor, left, top = model[name]
            # A charge: most refilings move the cpu left or a card, a few the untouched flag.
            if rng.random() < 0.5:
                left = max(-1, left + rng.choice((-4000, -500, 500, 4000)))
            if rng.random() < 0.4:
                top = rng.randrange(101)
            if rng.random() < 0.2:
                untouched = not untouched
            model[name] = (untouched, vendor, left, top)
            order.put(name, *model[name])
        else:
            # Nodes leave, sometimes many at once (their holes renumber the bits).
            for name in rng.sample(sorted(model), k=min(len(model), rng.choice((1, 1, 40)))):
                del model[name]
                order.remove(name)
        if step % 7 == 0:
            vendor = rng.choice((None, *VENDORS))
            cpu = rng.choice((0, 125, 4000, 6000, rng.randrange(0, 200_000)))
            percent = rng.choice((0, 11, 16, 47, 81, 100))
            budget = rng.choice((0, 1, len(model) // 2, len(model), len(model) + 5))
            names, over = order.candidates(vendor, cpu, percent, budget)
            got = list(names)
            assert (got, over) == _expected(model, vendor, cpu, percent, budget)
            # The walk's promise: no node with the cpu and a card that free is left out.
            assert {
                name
                for name in sorted(model, key=lambda n: (model[n][0], n))[:budget]
                if (vendor is None or model[name][1] == vendor)
                and (model[name][2] < 0 or model[name][2] >= cpu)
                and model[name][3] >= percent
            } <= set(got)


def test_buckets_never_fall_as_the_cpu_left_or_the_card_grows() -> None:
    lefts = [-1, *range(0, 300_000, 61)]
    buckets = [cpu_bucket(left) for left in lefts]
    assert buckets == sorted(buckets)
    assert cpu_bucket(-1) == 0 < cpu_bucket(0)
    # Half octaves: a node with twice the cpu is two buckets up, so a bucket is narrow.
    assert cpu_bucket(8000) == cpu_bucket(4000) + 2
    cards = [card_bucket(percent) for percent in range(101)]
    assert cards == sorted(cards)


def test_a_refiling_that_changes_nothing_leaves_the_sets_as_they_are() -> None:
    order = NameOrder()
    order.put("b", False, "nvidia", 4000, 50)
    order.put("a", True, "nvidia", 4000, 50)
    names, _ = order.candidates(None, 0, 0, 10)
    assert list(names) == ["b", "a"]
    # Refiled within its buckets and then as it was: still there, once.
    order.put("b", False, "nvidia", 4100, 51)
    order.put("b", False, "nvidia", 4000, 50)
    names, over = order.candidates("nvidia", 4000, 50, 10)
    assert (list(names), over) == (["b", "a"], False)
    order.remove("b")
    names, over = order.candidates(None, 0, 0, 1)
    assert (list(names), over) == (["a"], False)
