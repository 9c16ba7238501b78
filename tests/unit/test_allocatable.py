"""A node's status.allocatable of the whole-GPU resource a pod asks for must cover the request.

allocatable[R] minus what the pods held on the node ask for of R (their limits) must be at least
what the pod (or a gang's part on that node) asks for of R; otherwise the kubelet would refuse the
pod (OutOfResource / UnexpectedAdmissionError). A node object without status (a hand-written
manifest) is not checked. Reasons read like kube-scheduler's.
"""

from __future__ import annotations

import pytest

from scheduler.core.cluster import ClusterState
from scheduler.core.cycle import Unit, decide
from scheduler.core.decisions import Placed, Unschedulable
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.topologies import DGX1_V100, PCIE8


def placed_on(decision: object) -> dict[str, tuple[str, tuple[int, ...]]]:
    assert isinstance(decision, Placed), decision
    return {p.pod.split("/")[1]: (p.node, p.devices) for p in decision.placements}


def reason(decision: object) -> str:
    assert isinstance(decision, Unschedulable), decision
    return decision.reason


def uniform(n: int) -> list[list[int]]:
    return [[0 if i == j else 100 for j in range(n)] for i in range(n)]


def replica(name: str, gpus: int, job: str = "job", n: int = 2) -> MakePod:
    return MakePod().Name(name).Req(gpus).Gang(job, n)


# ---- one pod ---------------------------------------------------------------------------------


def test_a_resource_the_node_does_not_offer_is_refused_with_a_reason() -> None:
    # The device plugin registers topo-scheduler.io/gpu; a pod asking nvidia.com/gpu would be
    # refused by the kubelet, so it is not placed there.
    state = cluster(
        MakeNode().Name("n").Links(PCIE8).Allocatable({"topo-scheduler.io/gpu": 8, "cpu": 64})
    )
    (d,) = schedule(state, MakePod().Name("p").Req(1))
    assert reason(d) == "0/1 nodes are available: 1 has too little allocatable nvidia.com/gpu."
    (e,) = schedule(state, MakePod().Name("q").Req(2, "topo-scheduler.io/gpu"))
    assert placed_on(e)["q"][0] == "n"


def test_a_device_plugin_that_is_down_offers_nothing_until_the_node_is_refreshed() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8).Allocatable({"nvidia.com/gpu": 0}))
    (d,) = schedule(state, MakePod().Name("p").Req(1))
    assert reason(d) == "0/1 nodes are available: 1 has too little allocatable nvidia.com/gpu."
    assert (
        state.set_node(MakeNode().Name("n").Links(PCIE8).Allocatable({"nvidia.com/gpu": 8}).Obj())
        is None
    )
    (e,) = schedule(state, MakePod().Name("p").Req(1))
    assert placed_on(e)["p"][0] == "n"


def test_what_running_pods_ask_for_is_subtracted_from_allocatable() -> None:
    # 8 GPUs but only 4 allocatable; a running pod holds 2 of them: 2 are left to give.
    node = MakeNode().Name("n").Links(PCIE8).Allocatable({"nvidia.com/gpu": 4})
    state = cluster(node, running=(MakePod().Name("r").Req(2).Bound("n", "0,1"),))
    assert state.nodes["n"].free_mask.bit_count() == 6
    (d,) = schedule(state, MakePod().Name("three").Req(3))
    assert reason(d) == "0/1 nodes are available: 1 has too little allocatable nvidia.com/gpu."
    (e,) = schedule(state, MakePod().Name("two").Req(2))
    assert placed_on(e)["two"][0] == "n"
    # The placement is charged too: 4 GPUs free, none allocatable left.
    (f,) = schedule(state, MakePod().Name("one").Req(1))
    assert reason(f) == "0/1 nodes are available: 1 has too little allocatable nvidia.com/gpu."
    state.remove_pod("default/r")
    (g,) = schedule(state, MakePod().Name("one").Req(1))
    assert placed_on(g)["one"][0] == "n"


def test_a_pod_bound_by_another_scheduler_counts_its_limits() -> None:
    node = MakeNode().Name("n").Links(PCIE8).Allocatable({"nvidia.com/gpu": 2})
    state = cluster(node, running=(MakePod().Name("theirs").Req(2).Bound("n"),))
    (d,) = schedule(state, MakePod().Name("p").Req(1))
    assert reason(d) == "0/1 nodes are available: 1 has too little allocatable nvidia.com/gpu."


def test_a_busy_node_is_counted_by_its_free_gpus_not_its_allocatable() -> None:
    # Allocatable that could cover the pod once GPUs free up is not the reason; allocatable that
    # never can (the resource is not offered) is, however busy the node.
    busy = MakeNode().Name("busy").Links(PCIE8).Allocatable({"nvidia.com/gpu": 8})
    other = MakeNode().Links(PCIE8).Allocatable({"aliyun.com/gpu": 8})
    state = cluster(
        busy,
        MakeNode().Name("other-a").Links(PCIE8).Allocatable({"aliyun.com/gpu": 8}),
        other.Name("other-b"),
        running=(MakePod().Name("r").Req(7).Bound("busy", "0,1,2,3,4,5,6"),),
    )
    (d,) = schedule(state, MakePod().Name("p").Req(2))
    assert reason(d) == (
        "0/3 nodes are available: 2 have too little allocatable nvidia.com/gpu, "
        "1 has fewer than 2 free GPUs."
    )


def test_rule_2_passes_over_a_node_without_enough_allocatable() -> None:
    # Every pair scores the same: the 4-GPU node is the smallest fitting node, but offers only
    # 1 allocatable GPU.
    state = cluster(
        MakeNode().Name("small").Scores(uniform(4)).Allocatable({"nvidia.com/gpu": 1}),
        MakeNode().Name("large").Scores(uniform(8)).Allocatable({"nvidia.com/gpu": 8}),
    )
    (d,) = schedule(state, MakePod().Name("p").Req(2))
    assert placed_on(d)["p"][0] == "large"
    (e,) = schedule(state, MakePod().Name("q").Req(1))
    assert placed_on(e)["q"][0] == "small"


def test_a_node_without_status_is_not_checked_but_one_without_allocatable_offers_nothing() -> None:
    state = cluster(
        MakeNode().Name("manifest").Links(PCIE8),  # no status at all: as before, no check
        MakeNode().Name("empty").Links(PCIE8).Allocatable(),  # a status that offers no GPUs
    )
    assert state.nodes["manifest"].allocatable is None
    (d,) = schedule(state, MakePod().Name("p").Req(8))
    assert placed_on(d)["p"][0] == "manifest"
    (e,) = schedule(state, MakePod().Name("q").Req(1))
    assert reason(e) == (
        "0/2 nodes are available: 1 has fewer than 1 free GPU, "
        "1 has too little allocatable nvidia.com/gpu."
    )


def test_nodes_that_differ_only_in_spare_allocatable_share_a_class() -> None:
    # Headroom is capped at the free GPU count: allocatable 8 or 16 on an idle 8-GPU node is the
    # same for every pod, so ranking still runs over one class.
    state = cluster(
        MakeNode().Name("a").Links(PCIE8).Allocatable({"nvidia.com/gpu": 8}),
        MakeNode().Name("b").Links(PCIE8).Allocatable({"nvidia.com/gpu": 16}),
    )
    assert len(state.classes) == 1


# ---- malformed allocatable -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,problem",
    [
        ("eight", "'eight' is not a Kubernetes quantity"),
        ("1.5", "'1.5' must be a whole, non-negative number"),
        ("-2", "'-2' must be a whole, non-negative number"),
    ],
)
def test_a_malformed_allocatable_quantity_is_warned_about_and_offers_nothing(
    text: str, problem: str
) -> None:
    state = ClusterState()
    node = MakeNode().Name("gpu-3").Links(PCIE8)
    warning = state.set_node(
        node.Allocatable({"nvidia.com/gpu": text, "aliyun.com/gpu": "8"}).Obj()
    )
    assert warning == (
        f"node gpu-3: status.allocatable[nvidia.com/gpu]: {problem}; "
        "the node is treated as not offering nvidia.com/gpu"
    )
    (d,) = schedule(state, MakePod().Name("p").Req(1))
    assert reason(d) == "0/1 nodes are available: 1 has too little allocatable nvidia.com/gpu."
    (e,) = schedule(state, MakePod().Name("q").Req(1, "aliyun.com/gpu"))
    assert placed_on(e)["q"][0] == "gpu-3"


def test_resources_we_do_not_schedule_are_not_read() -> None:
    state = ClusterState()
    node = MakeNode().Name("n").Links(PCIE8)
    warning = state.set_node(
        node.Allocatable({"nvidia.com/gpu": "8", "memory": "lots", "example.com/fpga": "x"}).Obj()
    )
    assert warning is None


def test_a_malformed_inventory_and_allocatable_both_warn() -> None:
    state = ClusterState()
    node = MakeNode().Name("bad").RawInventory('{"vendor": "nvidia"}')
    warning = state.set_node(node.Allocatable({"nvidia.com/gpu": "x"}).Obj())
    assert warning is not None
    first, second = warning.split("; node excluded from GPU scheduling; ")
    assert first.startswith("node bad: annotation topo-scheduler.io/gpus: ")
    assert second.startswith("node bad: status.allocatable[nvidia.com/gpu]: ")


# ---- gangs -----------------------------------------------------------------------------------


def test_a_gangs_part_on_one_node_must_fit_in_its_allocatable_together() -> None:
    # dgx-a comes first by name, and has the GPUs for both replicas but allocatable for one.
    state = cluster(
        MakeNode().Name("dgx-a").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 1}),
        MakeNode().Name("dgx-b").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 8}),
    )
    (d,) = schedule(state, replica("r0", 1), replica("r1", 1))
    got = placed_on(d)
    assert got["r0"][0] == got["r1"][0] == "dgx-b"


def test_a_gang_spreads_when_no_node_has_the_allocatable_for_all_of_it() -> None:
    # Each node has 8 free GPUs but 4 allocatable: one 4-GPU replica per node.
    state = cluster(
        MakeNode().Name("a").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 4}),
        MakeNode().Name("b").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 4}),
    )
    (d,) = schedule(state, replica("r0", 4), replica("r1", 4))
    got = placed_on(d)
    assert {got["r0"][0], got["r1"][0]} == {"a", "b"}
    assert state.nodes["a"].used == state.nodes["b"].used


def test_a_gang_that_no_allocatable_can_hold_stays_whole_and_says_why() -> None:
    state = cluster(
        MakeNode().Name("a").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 4}),
        MakeNode().Name("b").Links(DGX1_V100).Allocatable({"aliyun.com/gpu": 8}),
    )
    before = {n: list(s.used) for n, s in state.nodes.items()}
    pods = tuple(replica(f"r{i}", 4, n=3).Obj() for i in range(3))
    d = decide(state, Unit("default/job", pods))
    assert reason(d) == (
        "gang default/job: 3 pending replicas need 12 GPUs and cannot all be placed; "
        "0/2 nodes are available: 1 has fewer than 4 free GPUs, "
        "1 has too little allocatable nvidia.com/gpu."
    )
    # The tentative placements were rolled back, allocatable use included.
    assert {n: list(s.used) for n, s in state.nodes.items()} == before
    assert all(s.free_mask == 0xFF for s in state.nodes.values())


def test_gang_replicas_asking_different_resource_names_are_counted_per_name() -> None:
    # Both names are NVIDIA GPUs; dgx-a offers only nvidia.com/gpu, so the aliyun replica cannot
    # join the other there, and the gang goes to dgx-b, which offers both.
    state = cluster(
        MakeNode().Name("dgx-a").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 8}),
        MakeNode()
        .Name("dgx-b")
        .Links(DGX1_V100)
        .Allocatable({"nvidia.com/gpu": 1, "aliyun.com/gpu": 1}),
    )
    nvidia = MakePod().Name("r0").Req(1).Gang("job", 2)
    aliyun = MakePod().Name("r1").Req(1, "aliyun.com/gpu").Gang("job", 2)
    (d,) = schedule(state, nvidia, aliyun)
    got = placed_on(d)
    assert got["r0"][0] == got["r1"][0] == "dgx-b"
