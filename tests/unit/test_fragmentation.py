"""Fragmentation in the core (issue 23): the measure F_n(M) stepped by hand, the target
workload learned from the held pods, and how placement weighs it beside the other rules."""

from __future__ import annotations

import random

from scheduler.core.model.decisions import Placed
from scheduler.core.settings import CoreSettings, FragmentationSettings
from scheduler.core.snapshot.fragmentation import (
    ANYWHERE,
    Pool,
    Profile,
    Reach,
    RequestClass,
    Target,
    free_cards,
    gain,
    gain_rank,
)
from tests.builders import MakeNode, MakePod, cluster, schedule

# Weights in whole percent, as the steps below count them (the default counts per mille).
DEFAULTS = FragmentationSettings(weight_parts=100)
MIN_PODS = DEFAULTS.min_pods
POOL: Pool = ("nvidia", (), ())  # a node of no pool label and no taint
PRODUCT = "nvidia.com/gpu.product"

SHARE_30 = (4000, 1, 30, ANYWHERE)  # 4 cpu, 30% of one card
TWO_GPUS = (8000, 2, 100, ANYWHERE)


def test_frag_of_a_shape_steps_every_case() -> None:
    target = Target(((SHARE_30, 50), (TWO_GPUS, 30)), DEFAULTS)
    # cards 100, 100, 25, 10 (idle 235): both classes fit; the cards below what each asks for
    # count: 35 for both
    assert target.frag((64_000, (100, 100, 25, 10), POOL)) == 50 * 35 + 30 * 35
    # one idle card: two GPUs no longer fit, all 135 idle counts for that class
    assert target.frag((64_000, (100, 25, 10), POOL)) == 50 * 35 + 30 * 135
    # 6 cpu left: the 2-GPU class (8 cpu) cannot run; the share (4 cpu) can. And the workload
    # asks 440 cpu-millicores for every 7.5 card percent (50 x 4000 against 50 x 30, plus
    # 30 x 8000 against 30 x 2 x 100): 6 cpu feed 102 percent, so 133 of the 235 free are
    # stranded, counted 4 times the workload's weight (80)
    assert target.stranded((6000, (100, 100, 25, 10), POOL)) == 235 - 6000 * 7500 // 440_000 == 133
    assert target.frag((6000, (100, 100, 25, 10), POOL)) == 50 * 35 + 30 * 235 + 4 * 80 * 133
    # a node whose status says nothing of cpu has enough
    assert target.frag((-1, (100, 100, 25, 10), POOL)) == 50 * 35 + 30 * 35
    assert target.frag((0, (), POOL)) == 0


def test_gain_is_frag_before_minus_after_and_ranks_like_fgd() -> None:
    target = Target((((0, 1, 30, ANYWHERE), 100),), DEFAULTS)
    shape = (-1, (100, 40), POOL)
    # 30% on the 40% card leaves a 10% sliver no 30% pod can use
    assert gain(target, shape, 0, ((40, 30),)) == -10 * 100
    # on the idle card it leaves 70%: nothing lost
    assert gain(target, shape, 0, ((100, 30),)) == 0
    # FGD's score twice as steep: int(100 x sigmoid(gain in milli-GPU / 500)); ours counts
    # percent x percent
    assert gain_rank(0, 100) == 50
    assert gain_rank(-1000, 100) == 45  # 0.1 GPU of fragment
    assert gain_rank(-150, 100) == 49  # differences below ~0.02 GPU tie
    assert target.rank(shape, 0, ((40, 30),)) == 45


def test_rank_takes_cpu_beyond_what_any_class_asks_or_the_cards_need_as_the_same() -> None:
    target = Target(((TWO_GPUS, 100),), DEFAULTS)  # 8 cpu, 4 for each GPU
    cards = (100, 100, 100)
    one = ((100, 100),)
    # beyond 12 cpu (three free GPUs' 4 each) and the pod's 4, nothing changes
    plenty = target.rank((64_000, cards, POOL), 4000, one)
    assert plenty == target.rank((20_000, cards, POOL), 4000, one) == 50
    assert len(target.ranks) == 1  # 64 and 20 cpu left were one question
    # 12 cpu: after the pod's 4, 8 feed the two GPUs left
    assert target.rank((12_000, cards, POOL), 4000, one) == 50
    # 11 cpu left: after the pod's 4, 7 are left, less than the class asks: two GPUs stranded
    assert target.rank((11_000, cards, POOL), 4000, one) < plenty


def test_gpus_the_cpu_left_cannot_feed_are_stranded() -> None:
    # the workload asks 40 cpu-millicores per card percent
    target = Target(((TWO_GPUS, 100),), DEFAULTS)
    assert target.stranded((64_000, (100, 100, 100), POOL)) == 0
    assert target.stranded((8_000, (100, 100, 100), POOL)) == 100  # 8 cpu feed two of the three
    assert target.stranded((-1, (100, 100, 100), POOL)) == 0  # no cpu in the node's status
    # 10 cpu and two free GPUs: the class runs there, both are fed
    assert target.frag((10_000, (100, 100), POOL)) == 0
    # 6 cpu: the class cannot run (all 200 count), and 6 cpu feed 150 of them: 50 stranded,
    # counted 4 times the workload's weight (100)
    assert target.frag((6_000, (100, 100), POOL)) == 100 * 200 + 4 * 100 * 50
    # a workload of shares only: cpu per percent from what the shares ask
    shares = Target(((SHARE_30, 100),), DEFAULTS)  # 4 cpu for 30%
    assert shares.stranded((4_000, (100, 100), POOL)) == 200 - 4000 * 30 // 4000


def test_profile_learns_the_target_from_held_pods_and_forgets_them() -> None:
    profile = Profile(DEFAULTS)
    for i in range(MIN_PODS - 1):
        profile.charge(f"a{i}", SHARE_30)
    assert profile.target() is None  # too few pods to say what the workload is
    profile.charge("b0", TWO_GPUS)
    target = profile.target()
    assert target is not None
    # 31 of 32 pods (97%) already cover 95%: the 2-GPU class is left out
    assert target.key == ((SHARE_30, 100),)
    assert profile.target() is target  # the same target (and memo) while nothing changed
    for i in range(1, 11):
        profile.charge(f"b{i}", TWO_GPUS)
    target = profile.target()
    assert target is not None
    assert target.key == ((SHARE_30, 74), (TWO_GPUS, 26))  # 31 / 42 and 11 / 42, rounded
    # a node refreshed charges its pods again with the classes they had: the same target
    profile.charge("b10", TWO_GPUS)
    assert profile.target() is target
    # one pod more: 31 / 43 and 12 / 43, the target of the pods held now (a function of them,
    # not of when it was last worked out)
    profile.charge("b11", TWO_GPUS)
    target = profile.target()
    assert target is not None
    assert target.key == ((SHARE_30, 72), (TWO_GPUS, 28))
    # it leaves: back to the same classes and weights, and so the same answers as before
    profile.charge("b11", None)
    again = profile.target()
    assert again is not None and again.key == ((SHARE_30, 74), (TWO_GPUS, 26))
    for i in range(MIN_PODS - 1):
        profile.charge(f"a{i}", None)
    assert len(profile) == 11
    assert profile.target() is None


def gpu_node(name: str, gpus: int, cpu: str = "64", pool: str = "") -> MakeNode:
    node = MakeNode().Name(name).GPUs(gpus)
    node = node.Allocatable({"cpu": cpu, "memory": "256Gi", "nvidia.com/gpu": gpus})
    return node.Label("pool", pool) if pool else node


def whole(name: str, cpu: str = "8", pool: str = "") -> MakePod:
    pod = MakePod().Name(name).Req(1).Requests(cpu=cpu, memory="1Gi")
    return pod.NodeSelector("pool", pool) if pool else pod


def placed(decision: object) -> tuple[str, tuple[int, ...]]:
    assert isinstance(decision, Placed), decision
    (p,) = decision.placements
    return p.node, p.devices or tuple(s.index for s in p.shares)


def test_shape_of_a_node_counts_idle_and_shared_cards_and_cpu_left() -> None:
    state = cluster(gpu_node("n", 4))
    schedule(
        state,
        whole("w", cpu="8"),
        MakePod().Name("s").Shared(core=30).Requests(cpu="2", memory="1Gi"),
    )
    node = state.nodes["n"]
    assert node.shape() == (54_000, (100, 100, 70), POOL)
    assert state.sizes()["profile"] == 2
    state.remove_pod("default/w")
    assert node.shape() == (62_000, (100, 100, 100, 70), POOL)
    assert state.sizes()["profile"] == 1


def filled(*nodes: MakeNode, settings: FragmentationSettings = DEFAULTS) -> object:
    """``nodes`` and four full filler nodes whose 32 one-GPU pods (8 cpu each) make the
    target workload: one class, one GPU and 8 cpu."""
    fillers = [gpu_node(f"z{i}", 8, pool="fill") for i in range(4)]
    state = cluster(*nodes, *fillers, settings=CoreSettings(fragmentation=settings))
    decisions = schedule(state, *(whole(f"f{i}", pool="fill") for i in range(MIN_PODS)))
    assert all(isinstance(d, Placed) for d in decisions)
    assert state.profile.target() is not None
    return state


def test_whole_gpus_among_equally_small_nodes_go_where_they_strand_nothing() -> None:
    # a and b both have two free GPUs (the same smallest fit); on a, the pod's 8 cpu would leave
    # 4: its other GPU could not take another pod of the workload
    state = filled(gpu_node("a", 2, cpu="12"), gpu_node("b", 2))
    (d,) = schedule(state, whole("p"))
    assert placed(d)[0] == "b"


def test_whole_gpus_go_where_the_cpu_left_still_feeds_the_other_gpus() -> None:
    # the workload asks 8 cpu per GPU; this pod 16. On a (32 cpu) it leaves 16: one more pod
    # of the workload fits, but the third GPU left would wait for cpu; b keeps cpu for all of
    # them. Without the stranded term both rank the same and a, first by name, takes it.
    state = filled(gpu_node("a", 4, cpu="32"), gpu_node("b", 4))
    assert placed(schedule(state, whole("p", cpu="16"))[0])[0] == "b"


def test_with_a_target_whole_gpus_go_by_the_measure_before_the_smallest_fit() -> None:
    # c (2 GPUs) is the smallest fit, but the pod's 8 cpu would leave it 4: its other GPU could
    # not take another pod of the workload. b (4 GPUs) strands nothing: the measure decides.
    state = filled(gpu_node("b", 4), gpu_node("c", 2, cpu="12"))
    (d,) = schedule(state, whole("p"))
    assert placed(d)[0] == "b"


def test_without_a_target_whole_gpus_go_to_the_smallest_fitting_node() -> None:
    # the same nodes before the cluster holds MIN_PODS GPU pods: no measure, the seeds' rule
    state = cluster(gpu_node("b", 4), gpu_node("c", 2, cpu="12"))
    (d,) = schedule(state, whole("p"))
    assert placed(d)[0] == "c"


def test_ties_of_the_measure_go_to_a_used_node_before_an_untouched_one() -> None:
    # a and b rank the same (8 free GPUs, cpu to spare); b holds a share already, a is
    # untouched and first by name: the pod goes to b, a stays whole for what comes next
    state = filled(gpu_node("a", 8), gpu_node("b", 8, pool="b"))
    share = MakePod().Name("s").Shared(core=100).Requests(cpu="1").NodeSelector("pool", "b")
    assert placed(schedule(state, share)[0])[0] == "b"
    assert placed(schedule(state, whole("p"))[0])[0] == "b"


def test_a_pod_without_gpus_goes_where_its_cpu_strands_no_gpu() -> None:
    state = filled(gpu_node("a", 2, cpu="12"), gpu_node("b", 2))
    (d,) = schedule(state, MakePod().Name("cpu-only").Requests(cpu="8", memory="1Gi"))
    assert placed(d)[0] == "b"


def test_a_share_takes_the_card_it_leaves_no_sliver_on() -> None:
    # the workload is 50% shares; card 0 of t has 60% free: 20% more there would leave 40%,
    # which no 50% share can use; an idle card keeps 80%, so the share goes there, not to the
    # busiest card
    shares = [gpu_node(f"z{i}", 8, pool="fill") for i in range(2)]
    state = cluster(gpu_node("t", 2), *shares)
    first = MakePod().Name("first").Shared(core=40).Requests(cpu="1")
    fillers = [
        MakePod().Name(f"f{i}").Shared(core=50).Requests(cpu="1").NodeSelector("pool", "fill")
        for i in range(MIN_PODS)
    ]
    assert placed(schedule(state, first)[0]) == ("t", (0,))
    assert all(isinstance(d, Placed) for d in schedule(state, *fillers))
    (d,) = schedule(state, MakePod().Name("p").Shared(core=20).Requests(cpu="1"))
    assert placed(d) == ("t", (1,))


def test_a_share_of_memory_alone_goes_to_a_card_with_no_core_free() -> None:
    # a share asking for GPU memory and no core takes nothing of a card's core percent: with a
    # target workload it may go to a card whose cores are all shared out (which the node's shape
    # leaves out, as it has no free percent), and its gain is nothing there (it crashed:
    # fragmentation.gain took the card's free percent out of a shape that has no such card)
    shares = [gpu_node(f"z{i}", 8, pool="fill") for i in range(2)]
    state = cluster(gpu_node("t", 1), *shares)
    full = MakePod().Name("full").Shared(core=100, memory="1024").Requests(cpu="1")
    fillers = [
        MakePod().Name(f"f{i}").Shared(core=50).Requests(cpu="1").NodeSelector("pool", "fill")
        for i in range(MIN_PODS)
    ]
    assert placed(schedule(state, full)[0]) == ("t", (0,))
    assert all(isinstance(d, Placed) for d in schedule(state, *fillers))
    assert state.profile.target() is not None
    (d,) = schedule(state, MakePod().Name("m").Shared(memory="2048").Requests(cpu="1"))
    assert placed(d) == ("t", (0,))
    target = Target((((1000, 1, 50, ANYWHERE), 100),), DEFAULTS)
    assert gain(target, (8000, (100,), POOL), 1000, ((0, 0),)) == 0


def test_a_cluster_of_any_size_ranks_whole_gpus_by_the_measure() -> None:
    # the nodes of test_with_a_target_whole_gpus_go_by_the_measure_before_the_smallest_fit,
    # among 2,048 more (cordoned): past 2,048 nodes the free count came first (c); now the same
    # rule at every size (the shape index: test_shape_index.py)
    far = [gpu_node(f"far{i}", 8).Cordoned() for i in range(2048)]
    state = filled(gpu_node("b", 4), gpu_node("c", 2, cpu="12"), *far)
    (d,) = schedule(state, whole("p"))
    assert placed(d)[0] == "b"


def test_a_pod_without_gpus_on_a_gpu_node_is_a_class_whose_idle_gpus_all_count() -> None:
    # FGD's target workload has its cpu-only classes: for them every idle GPU is lost
    target = Target((((8000, 0, 0, ANYWHERE), 40), (SHARE_30, 60)), DEFAULTS)
    assert target.frag((64_000, (100, 25), POOL)) == 40 * 125 + 60 * 25
    # the profile counts such a pod on a GPU node, not on a node without GPUs
    plain = MakeNode().Name("cpu").NoGPUs().Allocatable({"cpu": "64", "memory": "64Gi"})
    state = cluster(gpu_node("g", 2, pool="g"), plain.Label("pool", "cpu"))
    only = MakePod().Requests(cpu="8", memory="1Gi")
    schedule(state, only.Name("on-gpu").NodeSelector("pool", "g"))
    schedule(state, only.Name("on-cpu").NodeSelector("pool", "cpu"))
    assert set(state.nodes["g"].pods) == {"default/on-gpu"}
    assert set(state.nodes["cpu"].pods) == {"default/on-cpu"}
    # pods without GPUs weigh in a target but do not make one
    for i in range(MIN_PODS):
        state.profile.charge(f"cpu-only-{i}", (1000, 0, 0, ANYWHERE))
    assert state.profile.target() is None
    for i in range(MIN_PODS):
        state.profile.charge(f"cpu-only-{i}", None)
    assert state.sizes()["profile"] == 1
    # a restart reads it back bound, with the other scheduler's pods: the same profile
    again = cluster(gpu_node("g", 2, pool="g"), plain.Label("pool", "cpu"))
    bound = only.Name("on-gpu").Bound("g").Obj()
    assert again.add_bound_pod(bound) is None
    assert again.sizes()["profile"] == 1
    # it leaves; so does the node of a pod: its class goes with either
    state.remove_pod("default/on-gpu")
    assert state.sizes()["profile"] == 0
    again.remove_node("g")
    assert again.sizes()["profile"] == 0
    again.set_node(gpu_node("g", 2, pool="g").Obj())
    assert again.sizes()["profile"] == 1


def test_a_tentative_scope_leaves_the_profile_as_it_was() -> None:
    state = filled(gpu_node("a", 8, pool="a"))
    before = state.sizes()["profile"]
    with state.tentative():
        schedule(state, whole("p", pool="a"))
        assert state.sizes()["profile"] == before  # not charged while planning
    assert state.sizes()["profile"] == before
    schedule(state, whole("q", pool="a"))
    assert state.sizes()["profile"] == before + 1


def test_a_target_started_from_the_one_before_measures_as_a_fresh_one() -> None:
    """A new target takes the classes' part of a shape the one before measured and adds what the
    changed classes add (issue 32: its memo is not started empty); every shape and placement
    measures as a target built alone does, whichever classes came, left or changed weight."""
    rng = random.Random(32)
    # Pools of two models, one of them tainted, and classes pinned to a model, tolerating the
    # taint, both or neither (issue 32: where a class can run changes what a node measures).
    pools: list[Pool] = [
        ("nvidia", ((PRODUCT, "T4"),), ()),
        ("nvidia", ((PRODUCT, "A100"),), ()),
        ("nvidia", ((PRODUCT, "A100"),), (("pool", "train", "NoSchedule"),)),
    ]
    reaches: list[Reach] = [
        ANYWHERE,
        ("nvidia", (((PRODUCT, "In", ("A100",)),),), ()),
        ("nvidia", (), (("pool", "Exists", "", "NoSchedule"),)),
        ("nvidia", (((PRODUCT, "In", ("A100",)),),), (("pool", "Exists", "", ""),)),
    ]
    shapes = [
        (
            rng.choice((-1, 0, 1000, 2500, 3000, 4500, 6000, 7000, 9000, 64_000)),
            free_cards(rng.choice((0, 10, 25, 50, 70, 100)) for _ in range(rng.randint(0, 4))),
            rng.choice(pools),
        )
        for _ in range(300)
    ]

    def request() -> RequestClass:
        k, core = rng.choice(((0, 0), (1, 30), (1, 50), (1, 100), (2, 100)))
        cpu = rng.choice((0, 1000, 2000, 3000, 4000, 5000, 6000, 8000))
        return (cpu, k, core, rng.choice(reaches) if k else ANYWHERE)

    key = tuple((request(), rng.randint(1, 40)) for _ in range(8))
    before: Target | None = None
    for _ in range(40):
        # Most changes move a weight, or a class comes or leaves, or two swap places; now and
        # then all change.
        change = rng.random()
        kept = list(dict(key).items())
        if change < 0.15:  # the same classes and weights in another order
            kept.reverse()
        elif change < 0.3:
            i = rng.randrange(len(kept))
            kept[i] = (kept[i][0], kept[i][1] + 1)
        elif change < 0.6 and len(kept) > 3:
            kept.pop(rng.randrange(len(kept)))
        elif change < 0.9:
            kept.append((request(), rng.randint(1, 40)))
        else:
            kept = [(request(), rng.randint(1, 40)) for _ in range(8)]
        key = tuple(dict(kept).items())
        target, fresh = Target(key, DEFAULTS, before), Target(key, DEFAULTS)
        for shape in shapes:
            assert target.frag(shape) == fresh.frag(shape)
            take = ((shape[1][0], min(30, shape[1][0])),) if shape[1] else ()
            assert target.rank(shape, 2000, take) == fresh.rank(shape, 2000, take)
        before = target
