"""Issue 32 item 7: a pod that needs no topology domain goes to the domains already broken
(placement/domainorder.py), each step decided by the core by hand.

The cluster: blocks of racks of 4-GPU nodes (each rack one NVLink clique), levels ``block`` and
``rack`` configured, as in test_topology_domains.py.
"""

from __future__ import annotations

from scheduler.core.cycle import Unit, decide
from scheduler.core.model.decisions import Placed
from scheduler.core.model.objects import TopologyLevel
from scheduler.core.placement.domainorder import domain_order
from scheduler.core.settings import CoreSettings, FragmentationSettings, TopologySettings
from scheduler.core.snapshot.cluster import ClusterState
from tests.builders import MakeNode, MakePod, cluster, schedule

BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
CLIQUE = "nvidia.com/gpu.clique"
LEVELS = (TopologyLevel(BLOCK, "block"), TopologyLevel(RACK, "rack"))


def settings(pack: bool = True, min_pods: int = 32) -> CoreSettings:
    return CoreSettings(
        topology=TopologySettings(levels=LEVELS, pack_domains=pack),
        fragmentation=FragmentationSettings(min_pods=min_pods),
    )


def racks(
    layout: dict[tuple[str, str], int], running: tuple[MakePod, ...] = (), **kw: object
) -> ClusterState:
    """``layout``: (block, rack) -> number of 4-GPU nodes, named ``<block>-<rack>-<i>``."""
    nodes = [
        MakeNode()
        .Name(f"{block}-{rack}-{i}")
        .GPUs(4)
        .Label(BLOCK, block)
        .Label(RACK, rack)
        .Label(CLIQUE, f"uuid-{block}.{rack}")
        for (block, rack), count in sorted(layout.items())
        for i in range(count)
    ]
    state: ClusterState = cluster(*nodes, running=running, settings=settings(**kw))  # type: ignore[arg-type]
    return state


def held(name: str, node: str, devices: str) -> MakePod:
    return MakePod().Name(name).Req(len(devices.split(","))).Bound(node, devices)


def node_of(state: ClusterState, pod: MakePod) -> str:
    decision = decide(state, Unit(None, (pod.Obj(),)))
    assert isinstance(decision, Placed), decision
    (placement,) = decision.placements
    return placement.node


LAYOUT = {("b1", "r1"): 2, ("b1", "r2"): 2, ("b2", "r3"): 2}


def test_an_untouched_node_of_a_broken_block_before_a_whole_block() -> None:
    # b2-r3-0 is full: block b2 is broken, b1 whole. A 4-GPU pod ties on every untouched node;
    # by name it would break b1 (b1-r1-0), packed it takes b2-r3-1.
    running = (held("big", "b2-r3-0", "0,1,2,3"),)
    assert node_of(racks(LAYOUT, running), MakePod().Name("p").Req(4)) == "b2-r3-1"
    assert node_of(racks(LAYOUT, running, pack=False), MakePod().Name("p").Req(4)) == "b1-r1-0"


def test_the_fullest_block_first_then_its_fullest_rack() -> None:
    # b1-r2-0 full: b1 is broken (12 free GPUs), b2 whole (8, fewer: broken comes first all
    # the same); in b1, r2 holds 4 free, r1 8.
    running = (held("big", "b1-r2-0", "0,1,2,3"),)
    state = racks(LAYOUT, running)
    assert node_of(state, MakePod().Name("p").Req(4)) == "b1-r2-1"
    # Placed, that rack is full too; the next goes to b1's other rack (b1 still the broken one).
    (first,) = schedule(state, MakePod().Name("p").Req(4))
    assert isinstance(first, Placed) and first.placements[0].node == "b1-r2-1"
    assert node_of(state, MakePod().Name("q").Req(4)) == "b1-r1-0"


def test_the_node_rule_comes_first() -> None:
    # b2-r3-0 has 1 GPU free, in the emptier block (b1: 8 free, b2: 5): a 1-GPU pod still takes
    # the tightest node (rule 2), the domains only order the nodes it ranks equal.
    running = (
        held("a", "b1-r1-0", "0,1,2,3"),
        held("b", "b1-r1-1", "0,1,2,3"),
        held("c", "b2-r3-0", "0,1,2"),
        held("d", "b2-r3-1", "0,1,2,3"),
    )
    layout = {("b1", "r1"): 2, ("b1", "r2"): 2, ("b2", "r3"): 2}
    assert node_of(racks(layout, running), MakePod().Name("p").Req(1)) == "b2-r3-0"


def test_with_a_target_workload_the_ties_of_the_measure_go_to_the_broken_domains() -> None:
    # One GPU pod held makes a target (min_pods 1): the measure ranks the nodes, and the
    # untouched ones tie; the broken block's comes first.
    running = (held("big", "b2-r3-0", "0,1,2,3"),)
    state = racks(LAYOUT, running, min_pods=1)
    assert state.profile.target() is not None
    assert node_of(state, MakePod().Name("p").Req(4)) == "b2-r3-1"
    off = racks(LAYOUT, running, min_pods=1, pack=False)
    assert node_of(off, MakePod().Name("p").Req(4)) == "b1-r1-0"


def test_no_levels_in_use_is_by_name() -> None:
    # Nodes without the levels' labels: every domain is the cluster, the rule does not apply.
    plain = [MakeNode().Name(n).GPUs(4) for n in ("a", "b", "c")]
    state = cluster(*plain, running=(held("big", "c", "0,1"),), settings=settings())
    assert node_of(state, MakePod().Name("p").Req(4)) == "a"


def test_spread_pods_are_not_packed() -> None:
    # A spread pod asks for the idlest node; the domains do not reorder it.
    running = (held("big", "b2-r3-0", "0,1,2,3"),)
    pod = MakePod().Name("p").Req(4).NodePolicy("spread")
    assert node_of(racks(LAYOUT, running), pod) == "b1-r1-0"


def test_the_domain_sums_follow_placements_and_removals() -> None:
    # The DomainIndex keeps free GPUs, GPUs and nodes per domain as nodes change class; after
    # pods come and go they equal a count from scratch, and an emptied domain leaves no entry.
    from scheduler.core.snapshot.domains import configured

    state = racks(LAYOUT)
    index = state.domain_index(configured(state.settings.topology))

    def recount() -> dict[tuple[str, ...], list[int]]:
        sums: dict[tuple[str, ...], list[int]] = {}
        for name, path in index.where.items():
            node = state.nodes[name]
            for depth in range(1, len(path) + 1):
                entry = sums.setdefault(path[:depth], [0, 0, 0])
                entry[0] += node.free_mask.bit_count()
                entry[1] += 4
                entry[2] += 1
        return sums

    pods = [MakePod().Name(f"p{i}").Req(n) for i, n in enumerate((4, 1, 2, 3, 4))]
    for decision in schedule(state, *pods):
        assert isinstance(decision, Placed)
    assert index.sums == recount()
    for pod in pods[:3]:
        state.remove_pod(pod.Obj().key)
    assert index.sums == recount()
    state.remove_node("b2-r3-0")
    state.remove_node("b2-r3-1")
    assert index.sums == recount()
    assert not any(path[0] == "b2" for path in index.sums)


def test_domains_of_one_rank_are_one_tier_ordered_by_node_name() -> None:
    """With a target workload, the nodes the measure ties are ranked by their domains, then by
    name across every domain of that rank: two whole racks alike in two blocks, the smaller
    name wins whichever block it is in (the nodes are gathered by domain, and the domains of
    one rank are one tier, not ordered by path)."""
    nodes = [
        MakeNode()
        .Name(name)
        .GPUs(4)
        .Label(BLOCK, block)
        .Label(RACK, rack)
        .Label(CLIQUE, f"uuid-{block}.{rack}")
        for name, block, rack in (
            ("z-1", "b1", "r1"),
            ("z-2", "b1", "r1"),
            ("a-2", "b2", "r2"),
            ("a-1", "b2", "r2"),
        )
    ]
    # A full node outside every domain holds the pod that makes the target workload.
    full = MakeNode().Name("o-1").GPUs(4)
    running = (held("w", "o-1", "0,1,2,3"),)
    state: ClusterState = cluster(  # type: ignore[arg-type]
        full, *nodes, running=running, settings=settings(min_pods=1)
    )
    assert state.profile.target() is not None
    assert node_of(state, MakePod().Name("p").Req(1)) == "a-1"


def test_the_domains_are_walked_a_tier_at_a_time_best_first() -> None:
    """DomainOrder.tiers: a node outside every domain first; then, per level, the domains of
    one rank together: the nodes whose path ends there (a node with a block and no rack) before
    those below, and the equal racks of a rank in one tier by name. y-1 holds a GPU, so b1 is
    broken and comes first, and its broken rack r2 before its whole r1; b2's two whole racks
    are one tier."""
    layout = (("m-1", "b1", None), ("x-1", "b1", "r1"), ("y-1", "b1", "r2"))
    layout += (("n-1", "b2", None), ("c-1", "b2", "r4"), ("a-1", "b2", "r3"))
    nodes = [MakeNode().Name("o-1").GPUs(4)]
    for name, block, rack in layout:
        node = MakeNode().Name(name).GPUs(4).Label(BLOCK, block)
        nodes.append(node if rack is None else node.Label(RACK, rack))
    state: ClusterState = cluster(  # type: ignore[arg-type]
        *nodes, running=(held("w", "y-1", "0"),), settings=settings()
    )
    order = domain_order(state)
    assert order is not None
    keys = {cls.key for cls in state.node_index.classes.values()}
    assert list(order.tiers(keys)) == [
        ["o-1"],
        ["m-1"],
        ["y-1"],
        ["x-1"],
        ["n-1"],
        ["a-1", "c-1"],
    ]
    # only the classes asked for: y-1 (3 GPUs free) is a class of its own
    y_key = state.node_index.class_of("y-1")
    assert y_key is not None
    assert [t for t in order.tiers(keys - {y_key.key})] == [
        ["o-1"],
        ["m-1"],
        ["x-1"],
        ["n-1"],
        ["a-1", "c-1"],
    ]
