"""The node order is a setting (issue 32, item 6): ``placement.nodeOrder`` is fragmentation (rule
6, the default), smallestFit (the seeds' HAMi rule) or spread, validated, fitted to the node
policy a pod names and to ``defaults.nodePolicy``, and read by ``run`` and ``simulate --config``
alike: both place the same pods on the same nodes."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.config import Config, ConfigError, parse_config
from scheduler.core.model.decisions import Placed
from scheduler.core.model.objects import PodInput
from scheduler.core.settings import CoreSettings
from scheduler.sim.loader import Loaded
from scheduler.sim.simulate import simulate
from scheduler.state.memory import MemoryStore
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica

MIN_PODS = CoreSettings().fragmentation.min_pods


def settings(**placement: str) -> CoreSettings:
    return parse_config({"placement": placement} if placement else {}).to_core()


# ---- the setting ----------------------------------------------------------------------------


def test_the_node_order_is_validated_with_its_path() -> None:
    assert Config().placement.node_order == "fragmentation"
    assert parse_config({"placement": None}) == Config()  # all of it commented out
    with pytest.raises(ConfigError) as err:
        parse_config({"placement": {"nodeOrder": "bestFit", "order": 1}})
    assert str(err.value) == (
        "config: 2 problems:\n"
        "  - placement.nodeOrder: Invalid enum value 'bestFit'\n"
        "  - placement.order: unknown field (known: nodeOrder)"
    )


@pytest.mark.parametrize(
    ("node_policy", "node_order", "policy", "binpack"),
    [
        ("binpack", "fragmentation", "binpack", "fragmentation"),
        ("binpack", "smallestFit", "binpack", "smallestFit"),
        ("binpack", "spread", "spread", "fragmentation"),
        ("spread", "fragmentation", "spread", "fragmentation"),
        ("spread", "smallestFit", "spread", "smallestFit"),
        ("spread", "spread", "spread", "fragmentation"),
    ],
)
def test_node_order_and_node_policy_make_one_pair_of_core_settings(
    node_policy: str, node_order: str, policy: str, binpack: str
) -> None:
    # docs/configuration.md's table: spread in either setting spreads the pods that name no
    # policy; the binpack order is what a pod naming binpack gets
    core = parse_config(
        {"defaults": {"nodePolicy": node_policy}, "placement": {"nodeOrder": node_order}}
    ).to_core()
    assert (core.node_policy, core.binpack_order) == (policy, binpack)


# ---- seed 003's rule, with a target workload present -------------------------------------------


def gpu_node(name: str, gpus: int, pool: str = "") -> MakeNode:
    node = MakeNode().Name(name).GPUs(gpus)
    node = node.Allocatable({"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": gpus})
    return node.Label("pool", pool) if pool else node


def four_gpu_filler(i: int) -> MakePod:
    pod = MakePod().Name(f"f{i}").Req(4).Requests(cpu="16", memory="1Gi")
    return pod.NodeSelector("pool", "fill")


# Seed 003 ("Node Selection"): Node1 has 4 GPUs, Node2 6; a 2-GPU pod goes to Node1, "the
# smaller node that still fits the request", leaving Node2 for larger workloads. The fillers
# hold MIN_PODS 4-GPU pods: the workload the fragmentation order keeps room for.
SEED_NODES = (
    gpu_node("node1", 4),
    gpu_node("node2", 6),
    *(gpu_node(f"z{i:02d}", 8, "fill") for i in range(MIN_PODS // 2)),
)


def seed_cluster(core: CoreSettings) -> Any:
    state = cluster(*SEED_NODES, settings=core)
    assert all(
        isinstance(d, Placed) for d in schedule(state, *map(four_gpu_filler, range(MIN_PODS)))
    )
    assert state.profile.target() is not None  # the measure has a workload to weigh by
    return state


def placed_on(state: Any, pod: MakePod) -> str:
    (decision,) = schedule(state, pod)
    assert isinstance(decision, Placed), decision
    return str(decision.placements[0].node)


def two_gpus(name: str = "p") -> MakePod:
    return MakePod().Name(name).Req(2).Requests(cpu="8", memory="1Gi")


def test_smallest_fit_is_the_seeds_rule_with_a_target_workload_present() -> None:
    state = seed_cluster(settings(nodeOrder="smallestFit"))
    assert placed_on(state, two_gpus()) == "node1"


def test_the_fragmentation_order_keeps_the_smaller_node_whole_for_the_workload() -> None:
    # The same cluster in the default order: two GPUs of node1 would leave two no 4-GPU pod of
    # the workload can use; node2 keeps four. (So the test above fails under this order.)
    state = seed_cluster(settings())
    assert placed_on(state, two_gpus()) == "node2"


def test_a_pods_own_node_policy_still_wins_over_the_node_order() -> None:
    state = seed_cluster(settings(nodeOrder="smallestFit"))
    assert placed_on(state, two_gpus("s").NodePolicy("spread")) == "node2"
    # nodeOrder spread spreads the pods that name nothing; one naming binpack is packed in the
    # default binpack order
    state = seed_cluster(settings(nodeOrder="spread"))
    assert placed_on(state, two_gpus("n")) == "node2"
    assert placed_on(state, two_gpus("b").NodePolicy("binpack")) == "node2"
    # and smallestFit with spread by default: the pod naming binpack gets the seeds' rule
    core = parse_config(
        {"defaults": {"nodePolicy": "spread"}, "placement": {"nodeOrder": "smallestFit"}}
    ).to_core()
    state = seed_cluster(core)
    assert placed_on(state, two_gpus("b").NodePolicy("binpack")) == "node1"
    assert placed_on(state, two_gpus("n")) == "node2"


def test_smallest_fit_gives_a_share_the_busiest_card() -> None:
    # Rule 4 alone: a 20% share goes to the card 40% already uses, though the 40% it leaves
    # no 50% share of the workload can use (the fragmentation order takes the idle card).
    shares = [gpu_node(f"z{i}", 8, "fill") for i in range(2)]
    fillers = [
        MakePod().Name(f"f{i}").Shared(core=50).Requests(cpu="1").NodeSelector("pool", "fill")
        for i in range(MIN_PODS)
    ]
    first = MakePod().Name("first").Shared(core=40).Requests(cpu="1")
    share = MakePod().Name("p").Shared(core=20).Requests(cpu="1")
    for order, card in (("smallestFit", 0), ("fragmentation", 1)):
        state = cluster(gpu_node("t", 2), *shares, settings=settings(nodeOrder=order))
        assert all(isinstance(d, Placed) for d in schedule(state, first, *fillers))
        (d,) = schedule(state, share)
        assert isinstance(d, Placed)
        assert (d.placements[0].node, d.placements[0].shares[0].index) == ("t", card), order


# ---- run and simulate place the same pods the same way ---------------------------------------


def running() -> list[PodInput]:
    """The fillers, bound as a previous leader left them: two 4-GPU pods on each filler node."""
    return [
        four_gpu_filler(i).Bound(f"z{i // 2:02d}", "0,1,2,3" if i % 2 == 0 else "4,5,6,7").Obj()
        for i in range(MIN_PODS)
    ]


def backlog() -> list[PodInput]:
    """Pods of every kind, in queue order: one that fits nowhere first (the live loop searches
    for victims and retries it; simulate searches once), then whole GPUs, shares, a pod without
    GPUs and one naming spread."""
    return [
        MakePod().Name("too-big").Req(8).Requests(cpu="8", memory="1Gi").Obj(),
        two_gpus("two").Obj(),
        MakePod().Name("one").Req(1).Requests(cpu="8", memory="1Gi").Obj(),
        MakePod().Name("share").Shared(core=30).Requests(cpu="1").Obj(),
        MakePod().Name("cpu-only").Requests(cpu="2", memory="1Gi").Obj(),
        two_gpus("spread").NodePolicy("spread").Obj(),
        MakePod().Name("one-more").Req(1).Requests(cpu="8", memory="1Gi").Obj(),
    ]


def where(state: Any, key: str) -> tuple[str, int, tuple[tuple[int, int], ...]] | None:
    """(node, whole GPUs, shares) the snapshot holds for the pod; a pod without GPUs by its
    record's node; None when it holds nothing."""
    holding = state.holdings.get(key)
    if holding is not None:
        return holding.node, holding.whole, tuple((s.index, s.core) for s in holding.shares)
    record = state.index.records.get(key)
    return None if record is None else (record.node, 0, ())


async def live_placements(config: Config) -> dict[str, Any]:
    clock = ManualClock(0.0)
    r = Replica(
        Apiserver(), MemoryStore(clock), clock, tuning=QUICK_RETRIES, settings=config.to_core()
    )
    for pod in running():
        r.api.create(pod)
    bound, _ = r.bound_list()
    await r.elect([n.Obj() for n in SEED_NODES], bound)
    for pod in backlog():
        r.pending(pod)
    while await r.step() is not None:
        pass
    # the pod that fits nowhere is retried after its backoff, asking for the target again
    for _ in range(6):  # the leader renews its lease meanwhile
        clock.now += 5
        await r.renew()
    while await r.step() is not None:
        pass
    await r.settle()
    return {p.key: where(r.s.state, p.key) for p in backlog()}


def simulated_placements(config: Config) -> dict[str, Any]:
    loaded = Loaded(nodes=[n.Obj() for n in SEED_NODES], pods=[*running(), *backlog()])
    result = simulate(loaded, config)
    return {p.key: where(result.state, p.key) for p in backlog()}


@pytest.mark.parametrize("order", ["fragmentation", "smallestFit", "spread"])
async def test_run_and_simulate_place_identically_under_the_same_pods(order: str) -> None:
    config = parse_config({"placement": {"nodeOrder": order}})
    live = await live_placements(config)
    assert live == simulated_placements(config)
    assert live["default/too-big"] is None
    first = {"fragmentation": "node2", "smallestFit": "node1", "spread": "node2"}[order]
    assert live["default/two"] is not None and live["default/two"][0] == first
