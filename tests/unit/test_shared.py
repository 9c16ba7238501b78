"""Rule 4: shared GPUs (Koordinator fractions, MetaX sGPU with QoS)."""

from __future__ import annotations

from scheduler.core.model.decisions import Placed, Unschedulable
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.topologies import METAX8, PCIE8


def shares(decision: object) -> tuple[str, list[tuple[int, int, int, int, str | None]]]:
    assert isinstance(decision, Placed), decision
    (p,) = decision.placements
    return p.node, [(s.index, s.core, s.memory_mib, s.sgpu, s.qos) for s in p.shares]


def metax(name: str = "mx") -> MakeNode:
    return MakeNode().Name(name).Vendor("metax").Links(METAX8).MemoryMiB(65536).SGPU(16)


def test_seed002_sgpu_pod_gets_a_slice_with_its_qos() -> None:
    state = cluster(metax())
    pod = MakePod().Name("test-metax-sgpu").Shared(core=10, memory="1Gi", sgpu=1, qos="fixed-share")
    (d,) = schedule(state, pod)
    assert shares(d) == ("mx", [(0, 10, 1024, 1, "fixed-share")])


def test_binpack_fills_the_busiest_card_first() -> None:
    state = cluster(metax())
    pods = [MakePod().Name(f"p{i}").Shared(core=30, memory="1Gi", sgpu=1) for i in range(4)]
    ds = schedule(state, *pods)
    cards = [shares(d)[1][0][0] for d in ds]
    assert cards == [0, 0, 0, 1]  # 3 x 30% fit on card 0; the fourth opens card 1


def test_spread_uses_the_idlest_card() -> None:
    state = cluster(metax())
    pods = [MakePod().Name(f"p{i}").Shared(core=10, sgpu=1).GPUPolicy("spread") for i in range(3)]
    cards = [shares(d)[1][0][0] for d in schedule(state, *pods)]
    assert cards == [0, 1, 2]


def test_a_card_serves_one_qos_policy_at_a_time() -> None:
    state = cluster(metax().GPUs(2).Links([["X", "MX1"], ["MX1", "X"]]))
    a, b, c = schedule(
        state,
        MakePod().Name("a").Shared(core=10, sgpu=1, qos="fixed-share"),
        MakePod().Name("b").Shared(core=10, sgpu=1, qos="burst-share"),
        MakePod().Name("c").Shared(core=10, sgpu=1, qos="best-effort"),
    )
    assert shares(a)[1][0][0] == 0
    assert shares(b)[1][0][0] == 1  # card 0 serves fixed-share now
    assert isinstance(c, Unschedulable)
    assert "QoS best-effort" in c.reason


def test_sgpu_slots_are_limited_per_card() -> None:
    state = cluster(metax().GPUs(1).Links([["X"]]).SGPU(2))
    ds = schedule(state, *(MakePod().Name(f"p{i}").Shared(core=1, sgpu=1) for i in range(3)))
    assert [type(d).__name__ for d in ds] == ["Placed", "Placed", "Unschedulable"]


def test_memory_ratio_resolves_against_the_card() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8).MemoryMiB(40960))
    (d,) = schedule(state, MakePod().Name("p").Shared(core=50, ratio=25))
    assert shares(d) == ("n", [(0, 50, 10240, 0, None)])


def test_whole_gpu_pods_avoid_shared_cards_and_shared_pods_avoid_whole_ones() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8).GPUs(8))
    s, w = schedule(state, MakePod().Name("s").Shared(core=10), MakePod().Name("w").Req(8))
    assert shares(s)[1][0][0] == 0
    assert isinstance(w, Unschedulable)  # card 0 is shared: only 7 whole GPUs remain
    state2 = cluster(
        MakeNode().Name("n").Links(PCIE8),
        running=(MakePod().Name("w").Req(8).Bound("n", "0,1,2,3,4,5,6,7"),),
    )
    (d,) = schedule(state2, MakePod().Name("s").Shared(core=10))
    assert isinstance(d, Unschedulable)


def test_shared_holdings_survive_a_restart_through_the_assignment_annotation() -> None:
    from scheduler.core.formats.assignment import assignment_annotations

    state = cluster(metax())
    (d,) = schedule(state, MakePod().Name("a").Shared(core=60, sgpu=1, qos="fixed-share"))
    assert isinstance(d, Placed)
    annotations = assignment_annotations(d.placements[0])
    assert annotations["topo-scheduler.io/devices"] == ""
    restarted = cluster(metax())
    bound = MakePod().Name("a").Shared(core=60, sgpu=1, qos="fixed-share").Bound("mx")
    for k, v in annotations.items():
        bound.Annotation(k, v)
    assert restarted.add_bound_pod(bound.Obj()) is None
    # 60% of card 0 is held again: a 50% pod must go to card 1.
    (d2,) = schedule(restarted, MakePod().Name("b").Shared(core=50, sgpu=1, qos="fixed-share"))
    assert shares(d2)[1][0][0] == 1


def test_sgpu_needs_a_node_with_sgpu_slots() -> None:
    state = cluster(MakeNode().Name("nv").Links(PCIE8))
    (d,) = schedule(state, MakePod().Name("p").Shared(core=10, sgpu=1))
    assert isinstance(d, Unschedulable)
    assert d.reason == "0/1 nodes are available: 1 has no metax GPUs."


def test_two_shared_cards_split_the_totals() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8))
    (d,) = schedule(state, MakePod().Name("p").Shared(core=100, memory="2Gi", cards=2))
    _node, got = shares(d)
    assert [(c, m) for _, c, m, _, _ in got] == [(50, 1024), (50, 1024)]
    assert len({i for i, *_ in got}) == 2


def test_reasons_name_what_no_card_has() -> None:
    state = cluster(
        MakeNode().Name("a").Links(PCIE8).MemoryMiB(16384),
        MakeNode().Name("b").Links(PCIE8).MemoryMiB(16384),
    )
    one, two = schedule(
        state,
        MakePod().Name("one").Shared(core=10, memory="20Gi"),
        MakePod().Name("two").Shared(core=10, memory="40Gi", cards=2),
    )
    assert isinstance(one, Unschedulable)
    assert one.reason == (
        "0/2 nodes are available: 2 have no GPU with 10% free cores and 20480 MiB free memory."
    )
    assert isinstance(two, Unschedulable)
    assert two.reason == (
        "0/2 nodes are available: "
        "2 have fewer than 2 GPUs with 5% free cores and 20480 MiB free memory."
    )


def test_a_memory_request_on_a_node_without_memory_figures_says_so() -> None:
    state = cluster(MakeNode().Name("n").Links(PCIE8).MemoryMiB(0))
    (d,) = schedule(state, MakePod().Name("p").Shared(core=10, ratio=50))
    assert isinstance(d, Unschedulable)
    assert d.reason == "0/1 nodes are available: 1 reports no GPU memory."
