"""Classes that carry where they can run (issue 32, item 1): a request class's reach (its GPU
vendor, its node selectors and required node affinity on the pool labels, its tolerations), a
node's pool, and the measure counting a node a class cannot run on as FGD counts a GPU model a
class is not pinned to: all its idle GPUs. Stepped by hand on the core."""

from __future__ import annotations

from scheduler.core.model.objects import NodeSelectorTerm, Requirement
from scheduler.core.settings import CoreSettings, FragmentationSettings
from scheduler.core.snapshot.fragmentation import (
    ANYWHERE,
    Pool,
    Reach,
    Target,
    can_run,
    pool_of,
    reach_of,
)
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.unit.test_fragmentation import MIN_PODS, placed

PRODUCT = "nvidia.com/gpu.product"
LABELS = FragmentationSettings().pool_labels
DEFAULTS = FragmentationSettings(weight_parts=100)  # weights in whole percent, as below
T4: Pool = ("nvidia", ((PRODUCT, "T4"),), ())
A100: Pool = ("nvidia", ((PRODUCT, "A100"),), ())
TAINTED: Pool = ("nvidia", ((PRODUCT, "A100"),), (("pool", "train", "NoSchedule"),))
ON_T4: Reach = ("nvidia", (((PRODUCT, "In", ("T4",)),),), ())


def test_a_pods_reach_reads_only_the_pool_labels_and_the_taints_it_tolerates() -> None:
    pod = (
        MakePod()
        .Name("p")
        .NodeSelector(PRODUCT, "T4")
        .NodeSelector("kubernetes.io/hostname", "n1")  # not a pool label: left out
        .Tolerate("pool")
        .Obj()
    )
    assert reach_of(pod, "nvidia", LABELS) == (
        "nvidia",
        (((PRODUCT, "In", ("T4",)),),),
        (("pool", "Exists", "", ""),),
    )
    # Required terms are ORed; a term that says nothing of the pool labels lets the pod run in
    # any pool, so the whole reach is every pool.
    either = (
        MakePod()
        .Name("q")
        .NodeAffinityTerm(
            NodeSelectorTerm(match_expressions=(Requirement(PRODUCT, "In", ("A100", "H100")),))
        )
        .NodeAffinityTerm(
            NodeSelectorTerm(match_expressions=(Requirement(PRODUCT, "In", ("T4",)),))
        )
        .Obj()
    )
    assert reach_of(either, "", LABELS)[1] == (
        ((PRODUCT, "In", ("A100", "H100")),),
        ((PRODUCT, "In", ("T4",)),),
    )
    anywhere = (
        MakePod()
        .Name("r")
        .NodeAffinityTerm(
            NodeSelectorTerm(match_expressions=(Requirement(PRODUCT, "In", ("T4",)),))
        )
        .NodeAffinityTerm(NodeSelectorTerm(match_expressions=(Requirement("zone", "In", ("z1",)),)))
        .Obj()
    )
    assert reach_of(anywhere, "", LABELS) == ANYWHERE
    # With no pool labels set, selectors make no class apart.
    assert reach_of(pod, "", ())[1] == ()


def test_a_class_runs_where_its_vendor_terms_and_tolerations_let_it() -> None:
    assert can_run(ANYWHERE, T4) and can_run(ANYWHERE, A100)
    assert can_run(ON_T4, T4) and not can_run(ON_T4, A100)
    assert not can_run(("amd", (), ()), T4)  # a class holding another vendor's cards
    # A NoSchedule taint keeps out every class that does not tolerate it, pinned or not.
    assert not can_run(ANYWHERE, TAINTED)
    assert can_run(("nvidia", (), (("pool", "Exists", "", ""),)), TAINTED)
    assert not can_run(("nvidia", (), (("pool", "Equal", "infer", "NoSchedule"),)), TAINTED)
    node = (
        MakeNode().Name("n").Label(PRODUCT, "A100").Label("zone", "z1").Taint("pool", value="train")
    )
    assert pool_of(node.Obj(), "nvidia", LABELS) == TAINTED


def test_a_node_a_class_cannot_run_on_counts_all_its_idle_gpus_for_it() -> None:
    # half the workload one GPU pinned to T4, half one GPU anywhere; both 1 cpu
    target = Target((((1000, 1, 100, ON_T4), 50), ((1000, 1, 100, ANYWHERE), 50)), DEFAULTS)
    # cards 100 and 40 free: on a T4 node both classes fit (the 40% sliver counts for both)
    assert target.frag((64_000, (100, 40), T4)) == 50 * 40 + 50 * 40
    # on an A100 node the pinned class cannot run: all 140 idle count for it, and are stranded
    # for it (counted ``stranded_weight`` times its weight) as GPUs no cpu is left for are
    assert target.frag((64_000, (100, 40), A100)) == 50 * 140 + 50 * 40 + 4 * 50 * 140
    # so a one-GPU pod placed there removes fragmentation (the pinned class's idle); on the T4
    # node it removes none (the 40% left is a sliver to both classes before and after)
    assert target.rank((64_000, (100, 40), A100), 1000, ((100, 100),)) == 99
    assert target.rank((64_000, (100, 40), T4), 1000, ((100, 100),)) == 50


def held_on_fillers(*nodes: MakeNode, settings: FragmentationSettings = DEFAULTS) -> object:
    """``nodes`` and four full T4 filler nodes holding MIN_PODS one-GPU pods pinned to T4 (the
    target workload: one class, one GPU, 8 cpu, T4 only; the fillers' own label is not a pool
    label, so it makes no class apart)."""
    fillers = [
        MakeNode()
        .Name(f"z{i}")
        .GPUs(8)
        .Allocatable({"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 8})
        .Label(PRODUCT, "T4")
        .Label("fill", "yes")
        for i in range(4)
    ]
    state = cluster(*nodes, *fillers, settings=CoreSettings(fragmentation=settings))
    pinned = [
        MakePod()
        .Name(f"f{i}")
        .Req(1)
        .Requests(cpu="8", memory="1Gi")
        .NodeSelector(PRODUCT, "T4")
        .NodeSelector("fill", "yes")
        for i in range(MIN_PODS)
    ]
    decisions = schedule(state, *pinned)
    assert {placed(d)[0] for d in decisions} == {f"z{i}" for i in range(4)}
    return state


def two_gpus(name: str, product: str) -> MakeNode:
    node = MakeNode().Name(name).GPUs(2)
    return node.Allocatable({"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 2}).Label(
        PRODUCT, product
    )


def test_an_unpinned_pod_goes_where_the_pinned_workload_cannot_run() -> None:
    # a (T4) and b (A100) are alike but for their model; the workload is pinned to T4. The
    # unpinned pod goes to b and keeps a's GPUs for the workload. Blind to reaches (no pool
    # labels), both rank the same and a, first by name, takes it (issue 32: 14.1% of openb's
    # GPUs left idle with a third of the pods pinned, against FGD's 12.1).
    pod = MakePod().Name("p").Req(1).Requests(cpu="8", memory="1Gi")
    state = held_on_fillers(two_gpus("a", "T4"), two_gpus("b", "A100"))
    assert placed(schedule(state, pod)[0])[0] == "b"
    blind = FragmentationSettings(pool_labels=())
    state = held_on_fillers(two_gpus("a", "T4"), two_gpus("b", "A100"), settings=blind)
    assert placed(schedule(state, pod)[0])[0] == "a"


def test_a_pod_tolerating_a_tainted_pool_goes_there_before_the_workloads_nodes() -> None:
    # b is tainted: the workload (no toleration) cannot run there; a pod that tolerates the
    # taint goes to b, leaving a to the workload
    pod = MakePod().Name("p").Req(1).Requests(cpu="8", memory="1Gi").Tolerate("pool")
    state = held_on_fillers(two_gpus("a", "T4"), two_gpus("b", "T4").Taint("pool", value="t"))
    assert placed(schedule(state, pod)[0])[0] == "b"
