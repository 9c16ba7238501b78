"""bench-frag's harness stepped by hand: the target workload, the fragmentation measure F_n(M),
the simulator's BestFit and FGD (node score, truncation, tie order, the card inside the node),
the workload draw, and our core behind the same harness."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.frag import report
from benchmarks.frag.measure import Cluster, Klass, Meter, target_classes
from benchmarks.frag.ours import Ours
from benchmarks.frag.references import FGD, BestFit, bestfit_score, fgd_score
from benchmarks.frag.replay import Run, Sample, replay
from benchmarks.frag.trace import (
    NodeSpec,
    PodSpec,
    TraceError,
    load_pods,
    scaled,
    trace_dir,
    workload,
)


def pod(name: str, cpu: int = 1000, gpus: int = 0, milli: int = 0, mem: int = 1024) -> PodSpec:
    return PodSpec(name, cpu, mem, gpus, milli if gpus else 0, ())


def spec(name: str, gpus: int, cpu: int = 64_000, model: str = "T4") -> NodeSpec:
    return NodeSpec(name, cpu, 262_144, gpus, model)


# ---- the target workload ------------------------------------------------------------------


def test_target_classes_keep_the_most_popular_until_95_percent_and_renormalise() -> None:
    pods = [pod(f"a{i}", gpus=1, milli=500) for i in range(60)]
    pods += [pod(f"b{i}", gpus=1, milli=1000) for i in range(36)]
    pods += [pod(f"c{i}", cpu=2000) for i in range(3)]
    pods += [pod("d", gpus=8, milli=1000)]
    classes = target_classes(pods)
    # 60 + 36 = 96 of 100 pods >= 95: the two rarest classes are left out
    assert [(c.milli, c.gpus) for c in classes] == [(500, 1), (1000, 1)]
    assert [c.weight for c in classes] == [60 / 96, 36 / 96]


def test_target_classes_break_equal_counts_by_the_larger_class_first() -> None:
    pods = [pod("small", cpu=1000, gpus=1, milli=200), pod("large", cpu=8000, gpus=1, milli=200)]
    classes = target_classes(pods, popularity=50)
    assert [c.cpu for c in classes] == [8000]


# ---- the measure ---------------------------------------------------------------------------

SHARE_300 = Klass(cpu=4000, milli=300, gpus=1, models=(), weight=0.5)
TWO_GPUS = Klass(cpu=8000, milli=1000, gpus=2, models=(), weight=0.3)
CPU_ONLY = Klass(cpu=2000, milli=0, gpus=0, models=(), weight=0.2)


def test_frag_of_one_node_steps_every_case() -> None:
    meter = Meter([SHARE_300, TWO_GPUS, CPU_ONLY])
    # cards (largest first) 1000, 1000, 250, 100: idle 2350
    cards = (1000, 1000, 250, 100)
    # share 300m fits: the cards below 300 count (350); two GPUs fit: the partial cards count
    # (350); CPU-only: all idle counts (2350)
    assert meter.frag("T4", 64_000, cards) == pytest.approx(0.5 * 350 + 0.3 * 350 + 0.2 * 2350)
    # one idle card less: two GPUs no longer fit, all idle counts for them
    cards = (1000, 250, 100)
    assert meter.frag("T4", 64_000, cards) == pytest.approx(0.5 * 350 + 0.3 * 1350 + 0.2 * 1350)
    # too little cpu for the 2-GPU class (8000) but enough for the share (4000)
    cards = (1000, 1000, 250, 100)
    assert meter.frag("T4", 6000, cards) == pytest.approx(0.5 * 350 + 0.3 * 2350 + 0.2 * 2350)
    # no GPU left: nothing is fragmented
    assert meter.frag("T4", 64_000, (0, 0)) == 0.0


def test_frag_counts_all_idle_for_a_class_the_model_does_not_serve() -> None:
    meter = Meter([Klass(cpu=0, milli=500, gpus=1, models=("V100",), weight=1.0)])
    assert meter.frag("T4", 64_000, (1000, 600)) == 1600
    assert meter.frag("V100", 64_000, (1000, 600)) == 0


def test_cluster_keeps_its_fragmentation_as_pods_are_placed() -> None:
    meter = Meter([SHARE_300, TWO_GPUS, CPU_ONLY])
    cluster = Cluster([spec("n0", 2), spec("n1", 4)], [0, 1], meter)
    n0 = cluster.nodes[0]
    cluster.place(n0, pod("p", cpu=1000, gpus=1, milli=800), (1,))
    assert n0.cards == [1000, 200]
    expected = meter.frag("T4", 63_000, (1000, 200)) + meter.frag("T4", 64_000, (1000,) * 4)
    assert cluster.frag == pytest.approx(expected)
    assert cluster.allocated == 800
    with pytest.raises(AssertionError):  # the harness refuses a placement that does not fit
        cluster.place(n0, pod("q", gpus=1, milli=300), (1,))


# ---- BestFit -------------------------------------------------------------------------------


def test_bestfit_score_is_truncated_and_takes_cpu_and_node_gpu_milli() -> None:
    cluster = Cluster([spec("n0", 4, cpu=96_000)], [0], Meter([]))
    p = pod("p", cpu=8000, gpus=1, milli=500)
    # 1 - (0.5 * 88000/128000 + 0.5 * 3500/8000) = 0.4375 - ... -> 43.75 -> 43
    expected = int((1 - (0.5 * 88_000 / 128_000 + 0.5 * 3_500 / 8_000)) * 100)
    assert bestfit_score(cluster.nodes[0], p) == expected == 43


def test_bestfit_takes_the_fullest_node_the_tightest_card_and_ties_by_rank() -> None:
    meter = Meter([])
    cluster = Cluster([spec("n0", 2), spec("n1", 2), spec("n2", 2)], [2, 0, 1], meter)
    _n0, n1, n2 = cluster.nodes
    policy = BestFit(cluster)
    # all equal: the first in tie-break order (rank 0 = n1), first idle card
    share = pod("s", gpus=1, milli=300)
    assert policy.choose(share) == (n1, (0,))
    cluster.place(n1, share, (0,))
    # n1 is fuller now: the next share goes there, onto the tightest card that fits (card 0)
    assert policy.choose(pod("t", gpus=1, milli=600)) == (n1, (0,))
    # one that fits card 0 no more goes to card 1 of n1
    assert policy.choose(pod("u", gpus=1, milli=800)) == (n1, (1,))
    # whole GPUs: first idle cards by index; n1 has one idle card only
    assert policy.choose(pod("w", gpus=2, milli=1000)) == (n2, (0, 1))


# ---- FGD -----------------------------------------------------------------------------------


def test_fgd_score_is_the_truncated_sigmoid_of_the_frag_decrease() -> None:
    meter = Meter([SHARE_300, TWO_GPUS])
    cluster = Cluster([spec("n0", 2)], [0], meter)
    node = cluster.nodes[0]
    p = pod("p", cpu=1000, gpus=1, milli=800)
    before = meter.frag("T4", 64_000, (1000, 1000))
    after = meter.frag("T4", 63_000, (1000, 200))
    score, card = fgd_score(meter, node, p)
    assert score == int(100 / (1 + math.exp(-(before - after) / 1000)))
    assert card == 0  # both cards score the same: the first index


def test_fgd_picks_the_card_that_fragments_least_and_ties_nodes_by_rank() -> None:
    meter = Meter([SHARE_300])
    cluster = Cluster([spec("n0", 2), spec("n1", 2)], [1, 0], meter)
    n0, n1 = cluster.nodes
    cluster.place(n0, pod("a", gpus=1, milli=500), (1,))  # n0: 1000, 500
    cluster.place(n1, pod("b", gpus=1, milli=500), (1,))  # n1: 1000, 500
    policy = FGD(cluster)
    # a 300m share on the 500 card leaves 200 (< 300: fragment); on the idle card it leaves
    # 700 and 500, both usable: FGD takes the idle card; both nodes tie, rank 0 (n1) wins
    c = pod("c", gpus=1, milli=300)
    assert policy.choose(c) == (n1, (0,))
    cluster.place(n1, c, (0,))  # n1: 700, 500
    # a 500m share on n1's 700 card would leave 200 (a fragment); on its 500 card nothing
    assert policy.choose(pod("d", gpus=1, milli=500)) == (n1, (1,))


def test_fgd_puts_whole_gpus_on_the_first_idle_cards() -> None:
    meter = Meter([SHARE_300, TWO_GPUS])
    cluster = Cluster([spec("n0", 4)], [0], meter)
    n0 = cluster.nodes[0]
    cluster.place(n0, pod("a", gpus=1, milli=500), (0,))
    assert FGD(cluster).choose(pod("w", gpus=2, milli=1000)) == (n0, (1, 2))


# ---- the workload and the replay ------------------------------------------------------------


def test_workload_draws_copies_until_the_next_would_pass_the_ratio() -> None:
    nodes = [spec("n0", 2)]  # 2000 milli; 1.3 x = 2600
    pods = [pod("p0", gpus=1, milli=1000), pod("p1", gpus=1, milli=300)]
    work = workload(nodes, pods, seed=42, ratio=1.3)
    total = sum(p.total_milli for p in work.pods)
    assert total <= 2600
    assert sorted(p.name for p in work.pods[:2]) == ["p0", "p1"]
    assert all("-tuned-" in p.name for p in work.pods[2:])
    assert workload(nodes, pods, seed=42, ratio=1.3) == work  # seeded
    # above the ratio already: pods are dropped until it is not
    down = workload(nodes, pods * 3, seed=7, ratio=0.5)
    assert sum(p.total_milli for p in down.pods) <= 1000


def test_scaled_repeats_the_node_list_and_the_workload_grows_with_it() -> None:
    nodes = [spec("n0", 2), spec("n1", 4)]
    five = scaled(nodes, 5)
    assert [n.name for n in five] == ["n0", "n1", "n0-x1", "n1-x1", "n0-x2"]
    assert [n.gpus for n in five] == [2, 4, 2, 4, 2]
    assert scaled(nodes, 2) == nodes
    pods = [pod("p0", gpus=1, milli=1000)]
    assert len(workload(five, pods, seed=42, ratio=1.0).pods) == 14  # 14 of its 14 GPUs
    assert len(workload(nodes, pods, seed=42, ratio=1.0).pods) == 6


def test_replay_bins_by_arrived_percent_and_counts_failures_by_class() -> None:
    nodes = [spec("n0", 1)]
    pods = [pod("a", gpus=1, milli=1000), pod("b", gpus=1, milli=500)]
    work = workload(nodes, pods, seed=1, ratio=1.0)._replace(pods=pods, ranks=[0])
    run = replay(nodes, work, Meter([]), BestFit, lambda: 0.0)
    assert run.bins[100].unallocated == 0.0  # a fills the only card
    assert run.failed == {"share 500m": 1}  # b arrives at 150%, fails
    assert run.bins[150].unallocated == 0.0


def test_missing_trace_names_where_it_looked_and_how_to_point_elsewhere(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"--trace-dir .*TOPO_OPENB_DIR"):
        trace_dir(str(tmp_path))


def test_a_gpu_spec_row_restricts_the_models_the_references_place_on(tmp_path: Path) -> None:
    (tmp_path / "pods.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
        "p0,4000,1024,1,1000,V100M16|V100M32,LS\n"
        "p1,4000,1024,1,1500,,LS\n"
    )
    pinned, free = load_pods(tmp_path, "pods.csv")
    assert pinned.models == ("V100M16", "V100M32") and free.models == ()
    assert free.milli == 1000  # clamped to one card, as the simulator does
    nodes = [spec("t4", 2, model="T4"), spec("v100", 2, model="V100M32")]
    cluster = Cluster(nodes, [0, 1], Meter(target_classes([pinned])))
    assert not cluster.nodes[0].fits(pinned) and cluster.nodes[1].fits(pinned)
    choice = FGD(cluster).choose(pinned)  # t4 is first in tie order but not its model
    assert choice is not None and choice[0] is cluster.nodes[1]
    # the pinned class counts every idle GPU of the T4 node as fragment
    assert cluster.node_frag(cluster.nodes[0]) == 2000


def _runs(policy: str, unallocated: float) -> list[Run]:
    sample = Sample(unallocated, 0.0, 0.0)
    return [Run(policy, 42, {100: sample}, {}, 1, 0.0, 0.0)]


def test_calibration_checks_every_published_trace_and_fails_outside_the_tolerance() -> None:
    trace = "openb_pod_list_gpuspec33.csv"
    good = {"BestFit": _runs("BestFit", 19.50), "FGD": _runs("FGD", 12.12)}
    lines, ok = report.calibration(trace, good)
    assert ok and len(lines) == 2 and all(line.endswith(": ok") for line in lines)
    off = {"BestFit": _runs("BestFit", 19.50), "FGD": _runs("FGD", 12.50)}
    lines, ok = report.calibration(trace, off)
    assert not ok and "HARNESS WRONG" in lines[1]
    for name in ("gpuspec10", "gpushare60", "multigpu30", "cpu250"):
        assert set(report.PUBLISHED[f"openb_pod_list_{name}.csv"]) == {"BestFit", "FGD"}
    # --pin's own pins are other pods: the published gpuspec figures are printed, never failed
    assert report.calibration(trace, off, pin=33)[1]


# ---- ours behind the harness ----------------------------------------------------------------


def test_ours_places_through_the_core_and_the_harness_accepts_it() -> None:
    cluster = Cluster([spec("n0", 2), spec("n1", 4)], [1, 0], Meter([]))
    ours = Ours(cluster)
    whole = pod("w", gpus=2, milli=1000)
    node, cards = ours.choose(whole) or (None, ())
    assert node is cluster.nodes[0] and len(cards) == 2  # the smallest node that fits
    assert node is not None
    cluster.place(node, whole, cards)
    share = pod("s", gpus=1, milli=300)
    choice = ours.choose(share)
    assert choice is not None and choice[0] is cluster.nodes[1]
    cluster.place(choice[0], share, choice[1])
    assert ours.choose(pod("big", cpu=200_000)) is None  # no node has the cpu
