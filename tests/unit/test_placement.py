"""Rule 2 (node choice) and rule 5 (reasons), stepped by hand through the pure core."""

from __future__ import annotations

from scheduler.core.model.decisions import Placed, Unschedulable
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.topologies import DGX1_V100, METAX8, PCIE8, SEED003


def placed(decision: object) -> tuple[str, tuple[int, ...]]:
    assert isinstance(decision, Placed), decision
    (p,) = decision.placements
    return p.node, p.devices


def uniform(n: int, score: int = 100) -> list[list[int]]:
    return [[0 if i == j else score for j in range(n)] for i in range(n)]


def test_seed003_smaller_node_first_for_two_gpus() -> None:
    """Two idle nodes with equal pair scores: the 4-GPU node before the 6-GPU node."""
    state = cluster(
        MakeNode().Name("node1").Scores(uniform(4)),
        MakeNode().Name("node2").Scores(uniform(6)),
    )
    (d,) = schedule(state, MakePod().Name("p").Req(2))
    assert placed(d)[0] == "node1"


def test_seed003_single_gpu_goes_to_worst_connected_gpu() -> None:
    state = cluster(MakeNode().Name("n").Scores(SEED003))
    a, b = schedule(state, MakePod().Name("a").Req(1), MakePod().Name("b").Req(1))
    assert placed(a) == ("n", (0,))
    assert placed(b) == ("n", (1,))


def test_multi_gpu_pod_goes_to_best_connected_node_before_smallest() -> None:
    """Topology first: a PCIe 4-GPU node loses to a DGX-1 for a 2-GPU pod."""
    state = cluster(
        MakeNode().Name("small-pcie").Scores(uniform(4, 50)),
        MakeNode().Name("dgx").Links(DGX1_V100),
    )
    (d,) = schedule(state, MakePod().Name("p").Req(2))
    node, devices = placed(d)
    assert node == "dgx"
    assert len(devices) == 2


def test_binpack_prefers_fewest_free_gpus_among_equal_scores() -> None:
    state = cluster(
        MakeNode().Name("a").Links(PCIE8),
        MakeNode().Name("b").Links(PCIE8),
        running=(MakePod().Name("r").Req(4).Bound("b", "4,5,6,7"),),
    )
    (d,) = schedule(state, MakePod().Name("p").Req(2))
    assert placed(d) == ("b", (0, 1))


def test_spread_prefers_most_free_gpus() -> None:
    state = cluster(
        MakeNode().Name("a").Links(PCIE8),
        MakeNode().Name("b").Links(PCIE8),
        running=(MakePod().Name("r").Req(4).Bound("b", "4,5,6,7"),),
    )
    (d,) = schedule(state, MakePod().Name("p").Req(2).NodePolicy("spread"))
    assert placed(d)[0] == "a"


def test_single_gpu_pod_binpacks_onto_the_busy_node_worst_gpu() -> None:
    state = cluster(
        MakeNode().Name("a").Links(DGX1_V100),
        MakeNode().Name("b").Links(DGX1_V100),
        running=(MakePod().Name("r").Req(4).Bound("b", "0,1,2,3"),),
    )
    (d,) = schedule(state, MakePod().Name("p").Req(1))
    node, (gpu,) = placed(d)
    assert node == "b"
    # On {4,5,6,7} every GPU has two NV2 and one NV1 inside its quad: all equal, lowest index.
    assert gpu == 4


def test_seed000_metax_spread_keeps_cards_under_one_metaxlink() -> None:
    """Spread: the idlest node, and the pod's cards inside one MetaXLink group."""
    state = cluster(
        MakeNode().Name("mx-a").Vendor("metax").Links(METAX8),
        MakeNode().Name("mx-b").Vendor("metax").Links(METAX8),
        running=(MakePod().Name("r").Req(4, "metax-tech.com/gpu").Bound("mx-b", "0,1,2,3"),),
    )
    pod = MakePod().Name("p").Req(2, "metax-tech.com/gpu").NodePolicy("spread")
    (d,) = schedule(state, pod)
    node, devices = placed(d)
    assert node == "mx-a"
    assert {i // 4 for i in devices} == {0}  # one MetaXLink group


def test_seed000_metax_binpack_minimises_damage_to_metaxlink_groups() -> None:
    """Binpack: the fullest node; a single card comes from the already broken group."""
    state = cluster(
        MakeNode().Name("mx-a").Vendor("metax").Links(METAX8),
        MakeNode().Name("mx-b").Vendor("metax").Links(METAX8),
        running=(MakePod().Name("r").Req(1, "metax-tech.com/gpu").Bound("mx-b", "3"),),
    )
    (d,) = schedule(state, MakePod().Name("p").Req(1, "metax-tech.com/gpu").NodePolicy("binpack"))
    node, (card,) = placed(d)
    assert node == "mx-b"
    assert card in (0, 1, 2)  # group {0..3} is broken already; group {4..7} stays whole


def test_vendor_must_match() -> None:
    state = cluster(MakeNode().Name("nv").Links(PCIE8))
    (d,) = schedule(state, MakePod().Name("p").Req(1, "metax-tech.com/gpu"))
    assert isinstance(d, Unschedulable)
    assert d.reason == "0/1 nodes are available: 1 has no metax GPUs."


def test_unhealthy_gpus_are_never_allocated() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8).Unhealthy(0, 1, 2, 3, 4, 5))
    a, b = schedule(state, MakePod().Name("a").Req(2), MakePod().Name("b").Req(1))
    assert placed(a) == ("n", (6, 7))
    assert isinstance(b, Unschedulable)


def test_reason_counts_every_node_like_kube_scheduler() -> None:
    nodes = [MakeNode().Name(f"gpu-{i}").Links(PCIE8) for i in range(8)]
    nodes += [MakeNode().Name(f"cpu-{i}").NoGPUs() for i in range(4)]
    running = tuple(
        MakePod().Name(f"r{i}").Req(6).Bound(f"gpu-{i}", "0,1,2,3,4,5") for i in range(8)
    )
    state = cluster(*nodes, running=running)
    (d,) = schedule(state, MakePod().Name("p").Req(4))
    assert isinstance(d, Unschedulable)
    assert (
        d.reason == "0/12 nodes are available: 4 are not GPU nodes, 8 have fewer than 4 free GPUs."
    )


def test_cordoned_tainted_and_selected_nodes() -> None:
    state = cluster(
        MakeNode().Name("cordoned").Links(PCIE8).Cordoned(),
        MakeNode().Name("tainted").Links(PCIE8).Taint("dedicated").Label("pool", "b"),
        MakeNode().Name("labelled").Links(PCIE8).Label("pool", "a"),
    )
    (d,) = schedule(state, MakePod().Name("p").Req(1).NodeSelector("pool", "b"))
    assert isinstance(d, Unschedulable)
    assert d.reason == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {dedicated: }, 1 node(s) were unschedulable."
    )
    (ok,) = schedule(
        state, MakePod().Name("q").Req(1).Tolerate("dedicated").NodeSelector("pool", "b")
    )
    assert placed(ok)[0] == "tainted"
    (sel,) = schedule(state, MakePod().Name("s").Req(1).NodeSelector("pool", "a"))
    assert placed(sel)[0] == "labelled"


def test_running_pods_devices_are_respected_and_freed_on_finish() -> None:
    state = cluster(MakeNode().Name("n").Scores(SEED003))
    state.add_bound_pod(MakePod().Name("r").Req(4).Bound("n", "0,1,2,3").Obj())
    (d,) = schedule(state, MakePod().Name("p").Req(1))
    assert isinstance(d, Unschedulable)
    state.add_bound_pod(MakePod().Name("r").Req(4).Bound("n", "0,1,2,3").Phase("Succeeded").Obj())
    (d,) = schedule(state, MakePod().Name("p2").Req(1))
    assert placed(d) == ("n", (0,))


def test_pod_without_gpus_prefers_non_gpu_nodes() -> None:
    state = cluster(MakeNode().Name("a-gpu").Links(PCIE8), MakeNode().Name("z-cpu").NoGPUs())
    (d,) = schedule(state, MakePod().Name("p").Container("c", {"cpu": "1"}))
    assert placed(d) == ("z-cpu", ())


def test_decide_does_not_mutate_state_until_applied() -> None:
    from scheduler.core.cycle import Unit, decide

    state = cluster(MakeNode().Name("n").Links(DGX1_V100))
    before = state.nodes["n"].free_mask
    pod = MakePod().Name("p").Req(2).Obj()
    d1 = decide(state, Unit(None, (pod,)))
    d2 = decide(state, Unit(None, (pod,)))
    assert d1 == d2
    assert state.nodes["n"].free_mask == before
