"""A node's status.allocatable of the whole-GPU resource a pod asks for must cover the request.

allocatable[R] minus what the pods held on the node ask for of R (their limits) must be at least
what the pod (or a gang's part on that node) asks for of R; otherwise the kubelet would refuse the
pod (OutOfResource / UnexpectedAdmissionError). A node object without status (a hand-written
manifest) is not checked. Reasons read like kube-scheduler's.
"""

from __future__ import annotations

import pytest

from scheduler.core.cycle import Unit, decide
from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.snapshot.cluster import ClusterState
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
        "0/3 nodes are available: 1 has fewer than 2 free GPUs, "
        "2 have too little allocatable nvidia.com/gpu."
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
    # a has 8 free GPUs but allocatable for one 4-GPU replica of three: the allocatable is what
    # falls short there, not the free GPUs.
    state = cluster(
        MakeNode().Name("a").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 4}),
        MakeNode().Name("b").Links(DGX1_V100).Allocatable({"aliyun.com/gpu": 8}),
    )
    before = {n: list(s.used) for n, s in state.nodes.items()}
    pods = tuple(replica(f"r{i}", 4, n=3).Obj() for i in range(3))
    d = decide(state, Unit("default/job", pods))
    assert reason(d) == (
        "gang default/job: 3 pending replicas need 12 GPUs and cannot all be placed; "
        "0/2 nodes are available: 2 have too little allocatable nvidia.com/gpu."
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


def test_a_gang_short_of_allocatable_on_every_node_says_so_not_free_gpus() -> None:
    # Both nodes have 8 free GPUs but allocatable 1: the one-node plan and the fewest-nodes plan
    # both fail for want of allocatable, which is what the reason must say.
    state = cluster(
        MakeNode().Name("a").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 1}),
        MakeNode().Name("b").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 1}),
    )
    pods = tuple(replica(f"r{i}", 1, n=4).Obj() for i in range(4))
    d = decide(state, Unit("default/job", pods))
    assert reason(d) == (
        "gang default/job: 4 pending replicas need 4 GPUs and cannot all be placed; "
        "0/2 nodes are available: 2 have too little allocatable nvidia.com/gpu."
    )


def test_a_gang_short_of_free_gpus_still_says_free_gpus() -> None:
    # 1 GPU free and 1 allocatable left on each node: the free GPUs limit as much as the
    # allocatable does, so the reason stays the free-GPU count.
    running = tuple(MakePod().Name(f"r-{n}").Req(7).Bound(n, "0,1,2,3,4,5,6") for n in ("a", "b"))
    state = cluster(
        MakeNode().Name("a").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 8}),
        MakeNode().Name("b").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 8}),
        running=running,
    )
    pods = tuple(replica(f"g{i}", 1, n=4).Obj() for i in range(4))
    d = decide(state, Unit("default/job", pods))
    assert reason(d).endswith("0/2 nodes are available: 2 have fewer than 1 free GPU.")


# ---- pods of other schedulers and reloaded reservations ---------------------------------------


def used(state: ClusterState, node: str, resource: str = "nvidia.com/gpu") -> int:
    return int(state.nodes[node].used[state.resource_index[resource]])


def test_a_pod_bound_before_the_inventory_arrives_is_charged_to_allocatable() -> None:
    # The node registers with allocatable 8 before our agent annotates it; the default
    # scheduler binds a 4-GPU pod there; then the inventory arrives.
    state = cluster(MakeNode().Name("n").NoGPUs().Allocatable({"nvidia.com/gpu": 8}))
    assert state.add_bound_pod(MakePod().Name("theirs").Req(4).Bound("n").Obj()) is None
    assert used(state, "n") == 4
    assert (
        state.set_node(MakeNode().Name("n").Links(PCIE8).Allocatable({"nvidia.com/gpu": 8}).Obj())
        is None
    )
    assert used(state, "n") == 4
    assert state.nodes["n"].free_mask.bit_count() == 4  # its GPUs are guessed now
    (d,) = schedule(state, MakePod().Name("eight").Req(8))
    assert isinstance(d, Unschedulable)
    (e,) = schedule(state, MakePod().Name("four").Req(4))
    assert placed_on(e)["four"][0] == "n"
    assert used(state, "n") == 8
    state.remove_pod("default/theirs")
    assert used(state, "n") == 4
    assert state.nodes["n"].free_mask.bit_count() == 4


def test_a_pod_bound_before_its_node_is_known_is_charged_when_the_node_arrives() -> None:
    state = ClusterState()
    assert state.add_bound_pod(MakePod().Name("theirs").Req(4).Bound("n").Obj()) is None
    assert (
        state.set_node(MakeNode().Name("n").Links(PCIE8).Allocatable({"nvidia.com/gpu": 8}).Obj())
        is None
    )
    assert used(state, "n") == 4
    assert state.nodes["n"].free_mask.bit_count() == 4
    (d,) = schedule(state, MakePod().Name("five").Req(5))
    assert isinstance(d, Unschedulable)


def test_gpus_on_a_plain_init_container_of_another_schedulers_pod_count() -> None:
    # The kubelet admits it against max(largest init container, sum of the others): 4 here,
    # though parse_request refuses such a pod of ours.
    theirs = MakePod().Name("theirs").InitContainer("setup", {"nvidia.com/gpu": "4"}).Req(1)
    node = MakeNode().Name("n").Links(PCIE8).Allocatable({"nvidia.com/gpu": 8})
    state = cluster(node, running=(theirs.Bound("n"),))
    assert used(state, "n") == 4
    assert state.nodes["n"].free_mask.bit_count() == 4
    (d,) = schedule(state, MakePod().Name("five").Req(5))
    assert isinstance(d, Unschedulable)
    (e,) = schedule(state, MakePod().Name("four").Req(4))
    assert placed_on(e)["four"][0] == "n"


def test_another_schedulers_pod_asking_several_vendors_is_charged_per_resource() -> None:
    node = MakeNode().Name("n").Links(PCIE8)
    node.Allocatable({"nvidia.com/gpu": 4, "metax-tech.com/gpu": 2})
    theirs = (
        MakePod()
        .Name("theirs")
        .Container("main", {"nvidia.com/gpu": "3", "metax-tech.com/gpu": "1"})
    )
    state = cluster(node, running=(theirs.Bound("n"),))
    assert used(state, "n") == 3
    assert used(state, "n", "metax-tech.com/gpu") == 1
    assert state.nodes["n"].free_mask.bit_count() == 5  # the node's NVIDIA GPUs only
    (d,) = schedule(state, MakePod().Name("two").Req(2))
    assert reason(d) == "0/1 nodes are available: 1 has too little allocatable nvidia.com/gpu."


def test_a_repeated_event_of_a_pod_that_fills_its_node_keeps_it_charged() -> None:
    node = MakeNode().Name("n").Links(PCIE8).Allocatable({"nvidia.com/gpu": 8})
    theirs = MakePod().Name("theirs").Req(8).Bound("n")
    state = cluster(node, running=(theirs,))
    assert state.nodes["n"].free_mask == 0
    # A status update of the same pod: no set of 8 is free while it holds them itself.
    assert state.add_bound_pod(theirs.Obj()) is None
    assert state.nodes["n"].free_mask == 0
    assert used(state, "n") == 8
    (d,) = schedule(state, MakePod().Name("one").Req(1))
    assert isinstance(d, Unschedulable)


def test_a_guessed_mask_is_kept_across_events_and_node_refreshes() -> None:
    node = MakeNode().Name("n").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 8})
    theirs = MakePod().Name("theirs").Req(2).Bound("n")
    state = cluster(node, running=(theirs,))
    mask = state.holdings["default/theirs"].whole
    assert mask.bit_count() == 2
    assert state.add_bound_pod(theirs.Obj()) is None
    assert state.holdings["default/theirs"].whole == mask
    assert state.set_node(node.Obj()) is None
    assert state.holdings["default/theirs"].whole == mask
    # A pod of ours on those GPUs (its annotation is the truth): the guess moves aside.
    state.remove_node("n")
    state.add_bound_pod(
        MakePod()
        .Name("ours")
        .Req(2)
        .Bound("n", ",".join(str(i) for i in range(8) if mask >> i & 1))
        .Obj()
    )
    assert state.set_node(node.Obj()) is None
    moved = state.holdings["default/theirs"].whole
    assert moved.bit_count() == 2 and not moved & mask
    assert used(state, "n") == 4


def test_another_schedulers_pod_without_gpus_is_not_held() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8).Allocatable({"nvidia.com/gpu": 8}))
    assert (
        state.add_bound_pod(MakePod().Name("cpu").Container("c", {"cpu": "2"}).Bound("n").Obj())
        is None
    )
    assert "default/cpu" not in state.holdings


@pytest.mark.parametrize(
    "init,containers,want",
    [
        # (name, gpus, sidecar) init containers in order; app container GPUs
        ([], [2, 1], 3),
        ([("setup", 4, False)], [1], 4),
        ([("setup", 1, False)], [2, 1], 3),
        ([("side", 1, True), ("setup", 3, False)], [1], 4),  # sidecar runs beside setup
        ([("setup", 3, False), ("side", 1, True)], [1], 3),  # sidecar starts after setup
        ([("side", 2, True)], [1], 3),
    ],
)
def test_kubelet_request_is_the_kubelets_effective_request(
    init: list[tuple[str, int, bool]], containers: list[int], want: int
) -> None:
    from scheduler.core.resources.requests import kubelet_request
    from scheduler.core.settings import CoreSettings

    pod = MakePod().Name("p")
    for name, n, sidecar in init:
        pod.InitContainer(name, {"nvidia.com/gpu": str(n)}, sidecar=sidecar)
    for n in containers:
        pod.Req(n)
    assert kubelet_request(pod.Obj(), CoreSettings()) == (("nvidia.com/gpu", want),)


def test_kubelet_request_is_per_resource_and_skips_what_the_apiserver_refuses() -> None:
    from scheduler.core.resources.requests import kubelet_request
    from scheduler.core.settings import CoreSettings

    pod = (
        MakePod()
        .Name("p")
        .InitContainer("setup", {"aliyun.com/gpu": "2", "nvidia.com/gpu": "1"})
        .Container("a", {"nvidia.com/gpu": "2", "cpu": "1"})
        .Container("b", {"nvidia.com/gpu": "1.5", "aliyun.com/gpu": "1"})
    )
    assert kubelet_request(pod.Obj(), CoreSettings()) == (
        ("aliyun.com/gpu", 2),
        ("nvidia.com/gpu", 2),
    )


def test_a_short_guess_takes_the_gpus_freed_on_its_node() -> None:
    """Another scheduler's pod bound beside one we hold on its only free GPU (a transient
    over-commit, or an etcd restore bringing it back) is guessed short: no GPU was free for
    it. The kubelet admitted it all the same, so once ours leaves, the GPU freed is the one
    it uses: counted free, it went to the next pod (the stepped service test of sim seed
    25470's restore placed a pod there on the Redis store)."""
    state = cluster(MakeNode().Name("n").GPUs(1))
    assert state.add_bound_pod(MakePod().Name("ours").Req(1).Bound("n", "0").Obj()) is None
    assert state.add_bound_pod(MakePod().Name("theirs").Req(1).Bound("n").Obj()) is None
    assert state.holdings["default/theirs"].whole == 0  # short: GPU 0 was held
    state.remove_pod("default/ours")
    assert state.holdings["default/theirs"].whole == 0b1
    assert state.nodes["n"].free_mask == 0
    (d,) = schedule(state, MakePod().Name("next").Req(1))
    assert isinstance(d, Unschedulable)


def test_a_tentative_scope_restores_a_short_guess() -> None:
    state = cluster(MakeNode().Name("n").GPUs(1))
    state.add_bound_pod(MakePod().Name("ours").Req(1).Bound("n", "0").Obj())
    state.add_bound_pod(MakePod().Name("theirs").Req(1).Bound("n").Obj())
    with state.tentative():
        state.remove_pod("default/ours")
        assert state.holdings["default/theirs"].whole == 0b1
    assert state.holdings["default/theirs"].whole == 0
    assert state.holdings["default/ours"].whole == 0b1
    assert state.nodes["n"].free_mask == 0
