"""Rule 3: gangs are placed all together or not at all, their GPUs chosen jointly."""

from __future__ import annotations

from scheduler.core.cycle import Unit, decide
from scheduler.core.model.decisions import Placed, Unschedulable, Waiting
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.topologies import DGX1_V100, PCIE8


def by_pod(decision: object) -> dict[str, tuple[str, tuple[int, ...]]]:
    assert isinstance(decision, Placed), decision
    return {p.pod.split("/")[1]: (p.node, p.devices) for p in decision.placements}


def replica(name: str, job: str = "pytorch-dist-nccl", n: int = 2, gpus: int = 1) -> MakePod:
    return MakePod().Name(name).Req(gpus, "aliyun.com/gpu").Gang(job, n)


def test_seed004_two_replicas_share_an_nvlink_pair_on_one_node() -> None:
    state = cluster(
        MakeNode().Name("dgx-a").Links(DGX1_V100), MakeNode().Name("dgx-b").Links(DGX1_V100)
    )
    (d,) = schedule(state, replica("master-0"), replica("worker-0"))
    got = by_pod(d)
    (m_node, (m,)), (w_node, (w,)) = got["master-0"], got["worker-0"]
    assert m_node == w_node
    # Joint selection: an NV2 pair, not two worst-connected GPUs.
    nv2 = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}
    assert tuple(sorted((m, w))) in nv2
    assert all(p.gang == "default/pytorch-dist-nccl" for p in d.placements)


def test_gang_waits_until_all_replicas_exist() -> None:
    state = cluster(MakeNode().Name("n").Links(DGX1_V100))
    (d,) = schedule(state, replica("master-0"))
    assert isinstance(d, Waiting)
    assert d.reason == "gang default/pytorch-dist-nccl: 1 of 2 replicas present"
    assert state.nodes["n"].free_mask == 0xFF  # nothing held while waiting


def test_gang_is_all_or_nothing() -> None:
    state = cluster(
        MakeNode().Name("a").Links(PCIE8),
        running=(MakePod().Name("r").Req(5).Bound("a", "0,1,2,3,4"),),
    )
    (d,) = schedule(state, *(replica(f"w{i}", "big", 2, gpus=2) for i in range(2)))
    assert isinstance(d, Unschedulable)
    assert d.reason.startswith("gang default/big: 2 pending replicas need 4 GPUs")
    assert state.nodes["a"].free_mask == 0b11100000  # nothing partly placed


def test_gang_spreads_over_fewest_nodes_when_one_is_not_enough() -> None:
    state = cluster(*(MakeNode().Name(f"n{i}").Links(DGX1_V100) for i in range(3)))
    pods = [replica(f"w{i}", "wide", 4, gpus=4) for i in range(4)]
    (d,) = schedule(state, *pods)
    got = by_pod(d)
    nodes = {node for node, _ in got.values()}
    assert len(nodes) == 2  # 16 GPUs on 8-GPU nodes: two nodes, not three
    for _node, devices in got.values():
        assert len(devices) == 4
    # Two replicas on one node get disjoint quads, each the best-connected quad (score 900).
    for node in nodes:
        held = [set(dev) for n, dev in got.values() if n == node]
        assert held[0].isdisjoint(held[1])
        assert {frozenset(h) for h in held} == {frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7})}


def test_gang_replicas_may_ask_for_different_amounts() -> None:
    state = cluster(MakeNode().Name("n").Links(DGX1_V100))
    (d,) = schedule(
        state, replica("master", "mixed", 2, gpus=1), replica("worker", "mixed", 2, gpus=3)
    )
    got = by_pod(d)
    assert len(got["master"][1]) == 1 and len(got["worker"][1]) == 3
    assert set(got["master"][1]).isdisjoint(got["worker"][1])


def test_conflicting_replica_counts_make_every_member_wait() -> None:
    state = cluster(MakeNode().Name("n").Links(DGX1_V100))
    (d,) = schedule(state, replica("a", "job", 2), replica("b", "job", 3))
    assert isinstance(d, Waiting)
    assert d.pods == ("default/a", "default/b")
    assert "disagree on gpu-topology-replica (2, 3)" in d.reason


def test_more_members_than_replicas_waits_with_reason() -> None:
    state = cluster(MakeNode().Name("n").Links(DGX1_V100))
    (d,) = schedule(state, *(replica(f"r{i}", "job", 2) for i in range(3)))
    assert isinstance(d, Waiting)
    assert d.reason == "gang default/job: 3 members present but gpu-topology-replica says 2"


def test_bound_members_count_and_missing_ones_are_planned() -> None:
    """A member was bound earlier (e.g. re-plan after a lost member): only the rest is planned."""
    state = cluster(
        MakeNode().Name("n").Links(DGX1_V100),
        running=(replica("r0", "job", 2).Bound("n", "0"),),
    )
    (d,) = schedule(state, replica("r1", "job", 2))
    got = by_pod(d)
    assert got == {"r1": ("n", got["r1"][1])}
    assert 0 not in got["r1"][1]


def test_gangs_in_different_namespaces_are_different_gangs() -> None:
    state = cluster(MakeNode().Name("n").Links(DGX1_V100))
    a = replica("a", "job", 2).Namespace("team-a")
    b = replica("b", "job", 2).Namespace("team-b")
    d1, d2 = schedule(state, a, b)
    assert isinstance(d1, Waiting) and "team-a/job: 1 of 2" in d1.reason
    assert isinstance(d2, Waiting) and "team-b/job: 1 of 2" in d2.reason


def test_gang_plan_rolls_back_its_tentative_placements() -> None:
    state = cluster(MakeNode().Name("n").Links(DGX1_V100), MakeNode().Name("m").Links(DGX1_V100))
    pods = tuple(replica(f"w{i}", "job", 3, gpus=4).Obj() for i in range(3))
    before = {n: s.free_mask for n, s in state.nodes.items()}
    d = decide(state, Unit("default/job", pods))
    assert isinstance(d, Placed)
    assert {n: s.free_mask for n, s in state.nodes.items()} == before
    assert state.holdings == {}


def test_gang_member_with_bad_request_blocks_the_gang_with_its_reason() -> None:
    state = cluster(MakeNode().Name("n").Links(DGX1_V100))
    (d,) = schedule(state, replica("a"), replica("b").Req("1.5"))
    assert isinstance(d, Unschedulable)
    assert "gang default/pytorch-dist-nccl: pod default/b" in d.reason
    assert "must be a whole, non-negative number" in d.reason
