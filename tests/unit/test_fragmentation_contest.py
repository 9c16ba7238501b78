"""A pool's contest (issue 32, item 1): the classes pinned to some pools ask more of a pool than
its share of the cluster's GPUs, and its fed free GPUs count as room kept for them, so a pod
that can run anywhere leaves them to the pinned pods. Stepped by hand on the profile, the
measure and a decision."""

from __future__ import annotations

from scheduler.core.settings import CoreSettings, FragmentationSettings
from scheduler.core.snapshot.fragmentation import (
    Contest,
    Pool,
    Profile,
    Reach,
    RequestClass,
    Target,
)
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.unit.test_fragmentation import MIN_PODS, placed

PRODUCT = "nvidia.com/gpu.product"
DEFAULTS = FragmentationSettings(weight_parts=100)  # weights in whole percent, as below
T4: Pool = ("nvidia", ((PRODUCT, "T4"),), ())
V100: Pool = ("nvidia", ((PRODUCT, "V100"),), ())
NVIDIA: Reach = ("nvidia", (), ())  # an unpinned class holding NVIDIA cards
ON_V100: Reach = ("nvidia", (((PRODUCT, "In", ("V100",)),),), ())
ANY_GPU: RequestClass = (8000, 1, 100, NVIDIA)  # one GPU anywhere, 8 cpu
V100_GPU: RequestClass = (8000, 1, 100, ON_V100)  # one GPU on a V100, 8 cpu


def profile_of(held: dict[str, RequestClass], pools: dict[Pool, int]) -> Profile:
    """A profile holding ``held`` (pod: class) on nodes of these pools (pool: GPUs, one node
    each)."""
    profile = Profile(DEFAULTS)
    for i, (pool, gpus) in enumerate(pools.items()):
        profile.count_node(f"n{i}", pool, gpus)
    for pod, request in held.items():
        profile.charge(pod, request)
    return profile


def contest_of(profile: Profile) -> Contest:
    target = profile.target()
    assert target is not None
    return target.contest


def test_a_pools_contest_is_its_pinned_demand_share_against_its_gpu_share() -> None:
    # 40 one-GPU pods, 10 of them pinned to V100, which holds 20 of the 100 GPUs: the pinned
    # classes ask a quarter of the demand of a fifth of the GPUs, 125%, capped at 100%
    held = {f"a{i}": ANY_GPU for i in range(30)} | {f"v{i}": V100_GPU for i in range(10)}
    profile = profile_of(held, {T4: 80, V100: 20})
    assert contest_of(profile) == ((V100, 100),)
    # with a V100 pool four times larger (80 of 160 GPUs), a quarter of the demand is half
    # its share: 50%
    profile.count_node("n2", V100, 60)
    assert contest_of(profile) == ((V100, 50),)
    # the larger node gone, the first contest again
    profile.count_node("n2", None, 0)
    assert contest_of(profile) == ((V100, 100),)
    # no contest: in a cluster of one pool, or a workload no class of which is pinned, or one
    # whose pinned class runs in every pool that has GPUs
    assert contest_of(profile_of(held, {V100: 20})) == ()
    assert contest_of(profile_of({f"a{i}": ANY_GPU for i in range(40)}, {T4: 80, V100: 20})) == ()
    zoned: Pool = ("nvidia", ((PRODUCT, "V100"), ("zone", "z1")), ())
    assert contest_of(profile_of(held, {V100: 20, zoned: 5})) == ()


def test_a_contested_pools_fed_free_gpus_count_as_room_kept_for_the_pinned_classes() -> None:
    key = ((ANY_GPU, 75), (V100_GPU, 25))
    plain, contested = Target(key, DEFAULTS), Target(key, DEFAULTS, contest=((V100, 100),))
    # a V100 node with two idle cards and the cpu to feed them: 200 free percent, counted the
    # contest weight (4) times the workload's weight (100) times 100% less
    fed = (64_000, (100, 100), V100)
    assert contested.frag(fed) == plain.frag(fed) - 4 * 100 * 200
    # with 8 cpu left it feeds one card (the workload asks 8 cpu a GPU): one is stranded, and
    # only the one fed counts as room
    poor = (8000, (100, 100), V100)
    assert plain.stranded(poor) == 100
    assert contested.frag(poor) == plain.frag(poor) - 4 * 100 * 100
    # a T4 node is not contested
    assert contested.frag((64_000, (100, 100), T4)) == plain.frag((64_000, (100, 100), T4))
    # so a one-GPU pod with its 8 cpu loses the room of one card on the fed V100 node, and
    # ranks below the same placement on a T4 node
    take = ((100, 100),)
    assert contested.rank(fed, 8000, take) < contested.rank((64_000, (100, 100), T4), 8000, take)


def node(name: str, product: str, gpus: int, filler: bool = False) -> MakeNode:
    made = (
        MakeNode()
        .Name(name)
        .GPUs(gpus)
        .Allocatable({"cpu": str(8 * gpus), "memory": "256Gi", "nvidia.com/gpu": gpus})
        .Label(PRODUCT, product)
    )
    return made.Label("fill", "yes") if filler else made


def test_a_pod_that_can_run_anywhere_leaves_the_contested_pool_to_the_pinned_pods() -> None:
    # The workload: 8 one-GPU pods pinned to V100, 12 to T4, 12 anywhere (8 cpu each), held
    # on full filler nodes; beside them a (V100) and b (T4), two idle GPUs each. The V100
    # pool has 10 of the 36 GPUs and its pinned pods ask a quarter of the demand: contested
    # (90%), T4 less (its 26 GPUs, 37.5% of the demand: 51%). Without the contest a pod that
    # can run anywhere takes a, where the T4 pods cannot run (FGD counts its idle GPUs for
    # them), and a V100 pod that comes later waits; with it, it takes b.
    fillers = [node("zv", "V100", 8, filler=True)]
    fillers += [node(f"zt{i}", "T4", 8, filler=True) for i in range(3)]
    held = [
        MakePod().Name(f"f{i}").Req(1).Requests(cpu="8", memory="1Gi").NodeSelector("fill", "yes")
        for i in range(MIN_PODS)
    ]
    for pod in held[:8]:
        pod.NodeSelector(PRODUCT, "V100")
    for pod in held[8:20]:
        pod.NodeSelector(PRODUCT, "T4")
    pod = MakePod().Name("p").Req(1).Requests(cpu="8", memory="1Gi")
    for weight, where in ((4, "b"), (0, "a")):
        settings = CoreSettings(fragmentation=FragmentationSettings(contest_weight=weight))
        state = cluster(node("a", "V100", 2), node("b", "T4", 2), *fillers, settings=settings)
        assert all(placed(d)[0] in ("zv", "zt0", "zt1", "zt2") for d in schedule(state, *held))
        target = state.profile.target()
        assert target.contest == (((T4, 51), (V100, 90)) if weight else ())
        assert placed(schedule(state, pod)[0])[0] == where, weight
