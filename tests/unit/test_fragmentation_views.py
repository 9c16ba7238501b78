"""Pools the target's reaches treat alike measure alike (issue 32): the measure reads nothing
of a pool but the reaches that leave it out, so ranks are remembered per such view
(Target.rank) and the shape groups a whole-GPU pod ranks hold every pool of one view
(NodeIndex.shaped). A workload no class of which is pinned ranks one group where the nodes'
instance types (pool labels) made three. Stepped by hand on the core."""

from __future__ import annotations

from scheduler.core.snapshot.fragmentation import ANYWHERE, Pool, Reach, Target
from tests.builders import MakeNode, cluster
from tests.unit.test_fragmentation_reach import A100, DEFAULTS, ON_T4, PRODUCT, T4

# T4 and A100 nodes of another instance type: pools apart, but no reach below tells T4 apart.
INSTANCE = "node.kubernetes.io/instance-type"
T4_BIG: Pool = ("nvidia", ((INSTANCE, "big"), (PRODUCT, "T4")), ())
UNPINNED = Target((((1000, 1, 100, ANYWHERE), 100),), DEFAULTS)
PINNED = Target((((1000, 1, 100, ON_T4), 50), ((1000, 1, 100, ANYWHERE), 50)), DEFAULTS)
ONE_GPU = ((100, 100),)


def test_ranks_are_remembered_per_view_not_per_pool() -> None:
    # unpinned, every pool is one view: the second pool's rank is the first's, remembered once
    target = Target(UNPINNED.key, DEFAULTS)
    first = target.rank((64_000, (100, 40), T4), 1000, ONE_GPU)
    assert target.rank((64_000, (100, 40), A100), 1000, ONE_GPU) == first
    assert len(target.ranks) == 1
    # pinned to T4, A100 is another view (ranked apart), and T4 of another instance type is not
    target = Target(PINNED.key, DEFAULTS)
    on_t4 = target.rank((64_000, (100, 40), T4), 1000, ONE_GPU)
    assert target.rank((64_000, (100, 40), T4_BIG), 1000, ONE_GPU) == on_t4
    assert len(target.ranks) == 1
    assert target.rank((64_000, (100, 40), A100), 1000, ONE_GPU) != on_t4
    assert len(target.ranks) == 2


def test_a_pool_is_reserved_as_the_contested_pools_its_reaches_treat_alike() -> None:
    # the contest names T4; T4 of another instance type is left out by the same reaches (none),
    # so it is reserved the same and measures the same
    target = Target(PINNED.key, DEFAULTS, contest=((T4, 40),))
    assert target.frag((64_000, (100, 40), T4_BIG)) == target.frag((64_000, (100, 40), T4))
    assert target.frag((64_000, (100, 40), A100)) != target.frag((64_000, (100, 40), T4))


def gpus(name: str, product: str) -> MakeNode:
    node = MakeNode().Name(name).GPUs(2).Label(PRODUCT, product)
    return node.Allocatable({"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 2})


def groups(state: object, reaches: list[Reach]) -> list[set[str]]:
    index = state.node_index  # type: ignore[attr-defined]
    index.shaped(reaches)
    cls = index.class_of("a")
    assert cls is index.class_of("b")  # one node class: they differ only by their model
    return sorted(set(g.names.names) for g in cls.shapes.values())


def test_shape_groups_tell_apart_only_the_pools_the_targets_reaches_do() -> None:
    state = cluster(gpus("a", "T4"), gpus("b", "A100"))
    assert groups(state, [ANYWHERE]) == [{"a", "b"}]
    # a class pinned to T4 in the target: every node is filed again, T4 apart from A100
    assert groups(state, [ANYWHERE, ON_T4]) == [{"a"}, {"b"}]
    # it left the target: a finer split ranks the same, so nothing is filed again
    assert groups(state, [ANYWHERE]) == [{"a"}, {"b"}]
