"""The share index decides as the walk over every node did (issue 32 item 2).

``place_shared`` and ``place_without_gpus`` rank groups of the share index (snapshot/shares.py)
and ask the filter chain only about candidates, and ``unschedulable_reason`` works a GPU reason
out once per group or class and, for a pod the chain refuses only for want of resources, counts
what each GPU node has left (kept in the index while the node stays as it is filed); before,
each walked every node (the chain on every node, every card ranked, every node's reason
phrased). The walks are kept here as the reference (the rules as they stood), and hundreds of
seeded random clusters (whole-GPU and shared pods already placed, cpu-only pods, pods and nodes
leaving, cordoned and tainted nodes, nodes full of pods, a resource no node has, unhealthy
cards, model pinning, preferences, card memory, binpack and spread, with and without a target
workload) check that both choose the same node and cards for every pod, and give the same
reason when none fits.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import msgspec
import pytest

from scheduler.core.cycle import Unit, apply_decision, decide
from scheduler.core.filters.chain import PodFilters
from scheduler.core.model.decisions import Placed, Placement, Share
from scheduler.core.model.names import (
    CORE_RESOURCE,
    CORES_PER_CARD,
    GPU_POLICY_ANNOTATION,
    GPUS_ANNOTATION,
    MEMORY_RESOURCE,
    NODE_POLICY_ANNOTATION,
    SGPU_RESOURCE,
)
from scheduler.core.model.objects import (
    Affinity,
    ContainerInput,
    NodeInput,
    NodeSelectorTerm,
    PodInput,
    PreferredNodeTerm,
    Requirement,
    Taint,
)
from scheduler.core.placement import nodes
from scheduler.core.placement.nodes import (
    Reason,
    _before_nodes,
    _cpu,
    _dra_backed,
    _histogram,
    _node_reasons,
    place_shared,
    place_without_gpus,
    ranked_by,
    unschedulable_reason,
)
from scheduler.core.resources.requests import PodRequest, SharedRequest, parse_request
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.fragmentation import Target
from scheduler.core.snapshot.nodes import CardUse, NodeState
from scheduler.core.snapshot.shares import CardKey, ShareIndex

MODEL = "example.com/model"


# ---- the reference: the walk over every node, as place_shared was ---------------------------


def _card_fit(node: NodeState, index: int, req: SharedRequest) -> tuple[int, int] | None:
    inv = node.inventory
    assert inv is not None
    device = inv.device(index)
    use = node.cards.get(index) or CardUse()
    memory = req.memory_mib
    if req.memory_ratio:
        if device.memory_mib <= 0:
            return None
        memory = device.memory_mib * req.memory_ratio // 100
    if use.core + req.core > CORES_PER_CARD:
        return None
    if memory and (device.memory_mib <= 0 or use.memory_mib + memory > device.memory_mib):
        return None
    if req.sgpu:
        if inv.sgpu_per_card <= 0 or use.sgpu + req.sgpu > inv.sgpu_per_card:
            return None
        if use.qos is not None and use.qos != req.qos:
            return None
    return CORES_PER_CARD - use.core - req.core, memory


def _least_fragmenting(
    target: Target,
    node: NodeState,
    cpu: int,
    shared: SharedRequest,
    fits: list[tuple[int, int, int]],
    busiest: list[tuple[int, int, int]],
) -> tuple[int, list[tuple[int, int, int]]]:
    shape = node.shape()
    core = shared.core
    if shared.cards > 1:
        take = tuple((f[0] + core, core) for f in busiest)
        return -target.rank(shape, cpu, take), busiest
    best: tuple[int, tuple[int, int, int]] | None = None
    for fit in fits:
        rank = target.rank(shape, cpu, ((fit[0] + core, core),))
        if best is None or rank > best[0]:
            best = (rank, fit)
    assert best is not None
    return -best[0], [best[1]]


def walk(
    state: ClusterState, pod: PodInput, req: PodRequest, filters: PodFilters
) -> Placement | None:
    shared = req.shared
    assert shared is not None
    if filters.problem is not None:
        return None
    spread_cards = req.gpu_policy == "spread"
    spread_nodes = req.node_policy == "spread"
    target = ranked_by(state, spread_cards or spread_nodes)
    cpu = _cpu(state, pod)
    best: tuple[tuple[int, int, int, int, str], NodeState, list[tuple[int, int]]] | None = None
    for node in state.gpu_nodes():
        inv = node.inventory
        assert inv is not None
        if shared.vendor is not None and inv.vendor != shared.vendor:
            continue
        if filters.check(node):
            continue
        fits: list[tuple[int, int, int]] = []
        for device in inv.devices:
            if not device.healthy or (node.whole | node.nominated) >> device.index & 1:
                continue
            fit = _card_fit(node, device.index, shared)
            if fit is not None:
                fits.append((fit[0], device.index, fit[1]))
        if len(fits) < shared.cards:
            continue
        fits.sort(key=lambda f: (-f[0] if spread_cards else f[0], f[1]))
        chosen = fits[: shared.cards]
        frag = 0
        rest: tuple[int, int]
        if target is not None:
            frag, chosen = _least_fragmenting(target, node, cpu, shared, fits, chosen)
            rest = (node.untouched, 0)
        else:
            free_after = sum(f[0] for f in chosen)
            rest = (-free_after if spread_nodes else free_after, node.free_mask.bit_count())
        key = (-filters.score(node), frag, *rest, node.name)
        if best is None or key < best[0]:
            best = (key, node, [(f[1], f[2]) for f in chosen])
    if best is None:
        return None
    node = best[1]
    assert node.inventory is not None
    shares = tuple(
        Share(
            index=i,
            uuid=node.inventory.device(i).uuid,
            core=shared.core,
            memory_mib=memory,
            sgpu=shared.sgpu,
            qos=shared.qos,
        )
        for i, memory in sorted(best[2])
    )
    return Placement(pod.key, pod.uid, node.name, (), (), shares, None)


def walk_without_gpus(state: ClusterState, pod: PodInput, filters: PodFilters) -> Placement | None:
    if filters.problem is not None:
        return None
    target = ranked_by(state, False)
    cpu = _cpu(state, pod)
    best: tuple[tuple[bool, int, int, int, str], NodeState] | None = None
    for node in state.nodes.values():
        if filters.check(node):
            continue
        frag = fresh = 0
        if target is not None and node.inventory is not None:
            frag = -target.rank(node.shape(), cpu, ())
            fresh = node.untouched
        key = (node.inventory is not None, -filters.score(node), frag, fresh, node.name)
        if best is None or key < best[0]:
            best = (key, node)
    if best is None:
        return None
    return Placement(pod.key, pod.uid, best[1].name, (), (), (), None)


def walk_reason(state: ClusterState, filters: PodFilters, req: PodRequest) -> str:
    early = _before_nodes(state, filters)
    if early is not None:
        return early
    counts: Counter[Reason] = Counter()
    demand = [(state.resource_index[r], r, n) for r, n in req.resources]
    dra = _dra_backed(state, demand)
    for node in state.nodes.values():
        counts.update(_node_reasons(node, filters, req, req.gpus, demand, demand, dra))
    return _histogram(len(state.nodes), counts)


# ---- random clusters -----------------------------------------------------------------------


def _node(rng: random.Random, i: int) -> NodeInput:
    gpus = rng.choice((1, 2, 2, 4, 8, 8))
    memory = rng.choice((0, 0, 16384, 32768))
    devices = [
        {
            "index": d,
            "uuid": f"GPU-{i}-{d}",
            "memoryMiB": memory,
            "healthy": rng.random() > 0.05,
        }
        for d in range(gpus)
    ]
    inventory = {"vendor": "nvidia", "devices": devices}
    cpu = rng.choice((8000, 16000, 32000, 64000, 96000))
    taints = (Taint("pool", "gpu", "NoSchedule"),) if rng.random() < 0.05 else ()
    return NodeInput(
        f"n{rng.randrange(1000):03d}-{i}",
        labels={MODEL: rng.choice(("a", "b", "c"))},
        annotations={GPUS_ANNOTATION: json.dumps(inventory)},
        allocatable={
            "cpu": f"{cpu}m",
            "memory": f"{rng.choice((65536, 262144))}Mi",
            "pods": rng.choice(("110", "110", "110", "4")),  # a few nodes full of pods
            "nvidia.com/gpu": str(gpus),
        },
        unschedulable=rng.random() < 0.03,
        taints=taints,
    )


def _pod(rng: random.Random, i: int, share: bool) -> PodInput:
    limits: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if share:
        limits[CORE_RESOURCE] = str(rng.choice((10, 25, 30, 50, 50, 60, 80, 100)))
        if rng.random() < 0.2:
            limits[MEMORY_RESOURCE] = str(rng.choice((2048, 8192)))
            if rng.random() < 0.3:  # memory alone: a share of no core, even on a full card
                del limits[CORE_RESOURCE]
        if rng.random() < 0.15:
            annotations[GPU_POLICY_ANNOTATION] = "spread"
        if rng.random() < 0.1:
            annotations[NODE_POLICY_ANNOTATION] = "spread"
    elif rng.random() < 0.8:
        limits["nvidia.com/gpu"] = str(rng.choice((1, 1, 1, 2, 4)))
    affinity = None
    roll = rng.random()
    if roll < 0.1:
        term = NodeSelectorTerm(match_expressions=(Requirement(MODEL, "In", ("a", "b")),))
        affinity = Affinity(node_required=(term,))
    elif roll < 0.15:
        term = NodeSelectorTerm(match_expressions=(Requirement(MODEL, "In", ("c",)),))
        affinity = Affinity(node_preferred=(PreferredNodeTerm(rng.choice((1, 5)), term),))
    requests = {
        "cpu": f"{rng.choice((500, 1000, 3152, 4000, 8000, 11908))}m",
        "memory": f"{rng.choice((1024, 8192, 32768))}Mi",
    }
    if rng.random() < 0.05:  # a resource no node has
        requests["example.com/fpga"] = "1"
    return PodInput(
        "default",
        f"p{i}",
        uid=f"u{i}",
        scheduler_name="topo-scheduler",
        containers=(
            ContainerInput(
                "main",
                limits=limits,
                requests=requests,
            ),
        ),
        annotations=annotations,
        affinity=affinity,
    )


@pytest.mark.parametrize("seed", range(200))
def test_the_indexes_choose_and_refuse_as_the_walks_over_every_node(seed: int) -> None:
    rng = random.Random(seed)
    state = ClusterState()
    for i in range(rng.randrange(3, 40)):
        state.set_node(_node(rng, i))
    if rng.random() < 0.3:  # a node without GPUs, or with an invalid inventory
        state.set_node(NodeInput("plain", allocatable={"cpu": "4000m", "pods": "110"}))
        state.set_node(NodeInput("broken", annotations={GPUS_ANNOTATION: "{"}))
    assert _compared(rng, state)


@pytest.mark.parametrize("seed", range(60))
def test_shares_choose_as_the_walk_on_clusters_of_many_alike_nodes(seed: int) -> None:
    """A few kinds of node, each many times over: more nodes than share groups, so a share read
    node by node in name order (placement/nodes._walk) runs out of its budget (a node per
    group) part of the time and files the groups then, and decides alone the rest: both must
    choose as the walk over every node."""
    rng = random.Random(seed)
    assert _compared(rng, _alike_nodes(rng))


def _alike_nodes(rng: random.Random) -> ClusterState:
    """20 to 80 nodes of one to three kinds."""
    state = ClusterState()
    kinds = [_node(rng, i) for i in range(rng.randrange(1, 4))]
    for i in range(rng.randrange(20, 80)):
        state.set_node(msgspec.structs.replace(rng.choice(kinds), name=f"n{i:03d}"))
    return state


def test_a_walk_that_ran_out_bounds_the_filing_and_shares_still_choose_as_the_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A share whose read runs out of its budget with a best already found files only the
    candidates that could rank above it (placement/nodes._Walked: not one whose cut, at its
    cpu left's level, or bound is too low). On clusters of many alike nodes (as above) some
    reads run out so, each share still chooses as the walk over every node, and the filing
    after them leaves most candidates out."""
    ran_out = 0
    filed = [0, 0]  # (with the walk's best to beat, without)
    walk_, file_ = nodes._walk, nodes._file

    def walk_counted(*args: Any) -> nodes._Walked:
        nonlocal ran_out
        found = walk_(*args)
        ran_out += not found.decided and found.best is not None
        return found

    def file_counted(
        pending: list[Any],
        target: Any,
        groups: Any,
        asks: Any,
        shared: Any = None,
        spread_cards: bool = False,
        known: Any = None,
        walked: nodes._Walked | None = None,
    ) -> None:
        groups = list(groups)  # read twice
        if walked is not None and walked.best is not None:
            alone: list[Any] = []
            file_(alone, target, groups, asks, shared, spread_cards, known, None)
            before = len(pending)
            file_(pending, target, groups, asks, shared, spread_cards, known, walked)
            filed[0] += len(pending) - before
            filed[1] += len(alone)
        else:
            file_(pending, target, groups, asks, shared, spread_cards, known, walked)

    monkeypatch.setattr(nodes, "_walk", walk_counted)
    monkeypatch.setattr(nodes, "_file", file_counted)
    for seed in range(60):
        rng = random.Random(seed)
        assert _compared(rng, _alike_nodes(rng))
    assert ran_out >= 100
    assert 2 * filed[0] < filed[1]


@pytest.mark.parametrize("seed", range(40))
def test_shares_of_two_vendors_choose_as_the_walk(seed: int) -> None:
    """NVIDIA and MetaX nodes, and sGPU shares only MetaX cards take: the highest ceiling a
    share's read stops at is of its own vendor's pools (a pool's ceiling counts its vendor's
    pods' classes as unable to run there), and every share still chooses as the walk over
    every node."""
    rng = random.Random(seed)
    state = ClusterState()
    kinds = [_node(rng, i) for i in range(rng.randrange(1, 3))]
    kinds += [_metax_node(rng, 100 + i) for i in range(rng.randrange(1, 3))]
    for i in range(rng.randrange(20, 60)):
        state.set_node(msgspec.structs.replace(rng.choice(kinds), name=f"n{i:03d}"))
    assert _compared(rng, state, sgpu=0.3)


def _metax_node(rng: random.Random, i: int) -> NodeInput:
    gpus = rng.choice((1, 2, 4))
    devices = [
        {"index": d, "uuid": f"MX-{i}-{d}", "memoryMiB": 65536, "healthy": True}
        for d in range(gpus)
    ]
    inventory = {"vendor": "metax", "devices": devices, "sgpuPerCard": rng.choice((4, 8))}
    return NodeInput(
        f"m{i:03d}",
        labels={MODEL: "mx"},
        annotations={GPUS_ANNOTATION: json.dumps(inventory)},
        allocatable={"cpu": f"{rng.choice((8000, 32000))}m", "memory": "262144Mi", "pods": "110"},
    )


def _compared(rng: random.Random, state: ClusterState, sgpu: float = 0.0) -> int:
    """Place and refuse random pods on ``state``, each as the walks do (``sgpu``: the part of
    the shares that ask for a MetaX sGPU slot instead); how many were shares."""
    compared = 0
    for i in range(rng.randrange(40, 160)):
        share = rng.random() < 0.5
        pod = _pod(rng, i, share=share)
        if share and rng.random() < sgpu:
            main = pod.containers[0]
            limits = {k: v for k, v in main.limits.items() if k != CORE_RESOURCE}
            limits[SGPU_RESOURCE] = "1"
            pod = msgspec.structs.replace(
                pod, containers=(msgspec.structs.replace(main, limits=limits),)
            )
        req = parse_request(pod, state.settings, state.memos.asks)
        filters = PodFilters(state, pod)
        if req.shared is not None:
            placed = place_shared(state, pod, req, filters)
            assert placed == walk(state, pod, req, filters)
            compared += 1
        elif not req.gpus:
            placed = place_without_gpus(state, pod, filters)
            assert placed == walk_without_gpus(state, pod, filters)
        if req.shared is not None or req.gpus:  # the reason asked when nothing fits
            reason = unschedulable_reason(state, filters, req)
            assert reason == walk_reason(state, filters, req)
        unit = Unit(None, (pod,))
        decision = decide(state, unit)
        if isinstance(decision, Placed):
            apply_decision(state, decision, unit)
        if rng.random() < 0.1 and state.holdings:  # pods leave too
            state.remove_pod(rng.choice(sorted(state.holdings)))
        if rng.random() < 0.03 and len(state.nodes) > 3:  # and nodes
            state.remove_node(rng.choice(sorted(state.nodes)))
    return compared


def test_a_reason_counts_the_nodes_of_one_share_group_that_disagree_on_what_they_have_left() -> (
    None
):
    # Two nodes of one group and cpu left, one with exactly the memory the pod asks for left and
    # one with less: the reason counts them apart (the group is read node by node), and a third
    # node lacks cpu; none has two free GPUs.
    def node(name: str, memory: str, cpu: str = "16") -> NodeInput:
        inventory = {"vendor": "nvidia", "devices": [{"index": 0, "uuid": f"GPU-{name}"}]}
        return NodeInput(
            name,
            annotations={GPUS_ANNOTATION: json.dumps(inventory)},
            allocatable={"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": "1"},
        )

    state = ClusterState()
    for made in (node("a", "32Gi"), node("b", "31Gi"), node("c", "32Gi", cpu="4")):
        state.set_node(made)
    for share in (True, False):
        limits = {CORE_RESOURCE: "50"} if share else {"nvidia.com/gpu": "2"}
        pod = PodInput(
            "default",
            "p",
            uid="u",
            scheduler_name="topo-scheduler",
            containers=(
                ContainerInput("main", limits=limits, requests={"cpu": "8", "memory": "32Gi"}),
            ),
        )
        req = parse_request(pod, state.settings, state.memos.asks)
        filters = PodFilters(state, pod)
        reason = unschedulable_reason(state, filters, req)
        assert reason == walk_reason(state, filters, req)
        gpu = "has no GPU with 50% free cores" if share else "has fewer than 2 GPUs in total"
        assert reason == (
            f"0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 {gpu}."
        )


def test_groups_by_their_idlest_card_stay_in_step_with_the_groups() -> None:
    """A share passes over the groups without a card its percent free (``groups(vendor,
    least)``): that view is every group with such a card, no more, and a group dropped for good
    leaves it too (nothing kept for a node that is gone)."""
    rng = random.Random(11)
    index = ShareIndex()
    filed: dict[str, CardKey] = {}
    for step in range(400):
        name = f"n{rng.randrange(40)}"
        if name in filed and rng.random() < 0.4:
            index.drop(name)
            del filed[name]
            continue
        index.drop(name)
        cards = tuple(
            (i, 0, None if rng.random() < 0.3 else (rng.choice((20, 50, 80, 100)), 0, 0, None))
            for i in range(rng.randrange(1, 4))
        )
        key: CardKey = (rng.choice(("nvidia", "metax")), 0, False, False, cards, ("", (), ()))
        index.file(name, key, rng.choice((-1, 1000, 4000)))
        filed[name] = key
        for vendor in ("nvidia", "metax", None):
            every = list(index.groups(vendor))
            for least in (0, 1, 21, 50, 51, 100):
                want = {id(g) for g in every if not least or g.top >= least}
                assert {id(g) for g in index.groups(vendor, least)} == want, (step, least)
    for name in list(filed):
        index.drop(name)
    assert not list(index.groups()) and not list(index.groups(None, 1))


def test_what_a_reason_reads_is_numbered_and_forgotten_as_the_nodes_change() -> None:
    """A refused pod counts the nodes by what its GPU reason reads of them, each distinct
    value numbered in the share index (``ShareIndex.reads``). A node whose status keeps
    changing numbers a new value at every refile: the numbers are forgotten once they outgrow
    the nodes (``recount``), so they do not grow with every state a node was in, and the
    reason stays the one a walk over every node gives."""

    def node(name: str, allocatable: int = 4) -> NodeInput:
        devices = [{"index": i, "uuid": f"GPU-{name}-{i}"} for i in range(4)]
        return NodeInput(
            name,
            annotations={GPUS_ANNOTATION: json.dumps({"vendor": "nvidia", "devices": devices})},
            allocatable={
                "cpu": "64",
                "memory": "256Gi",
                "pods": "110",
                "nvidia.com/gpu": str(allocatable),
            },
        )

    def pod(name: str, gpus: int) -> PodInput:
        return PodInput(
            "default",
            name,
            uid=f"u-{name}",
            scheduler_name="topo-scheduler",
            containers=(
                ContainerInput("main", limits={"nvidia.com/gpu": str(gpus)}, requests={"cpu": "1"}),
            ),
        )

    state = ClusterState()
    for name in ("a", "b", "c"):
        state.set_node(node(name))
    index = state.node_index.shares
    refused = pod("big", 5)
    most = 0
    for i in range(300):
        if len(state.holdings) > 2:
            state.remove_pod(sorted(state.holdings)[i % len(state.holdings)])
        # Node a's status counts another allocatable each time: a value never read before.
        state.set_node(node("a", allocatable=4 + i))
        unit = Unit(None, (pod(f"p{i}", 1 + i % 3),))
        decision = decide(state, unit)
        assert isinstance(decision, Placed)
        apply_decision(state, decision, unit)
        req = parse_request(refused, state.settings, state.memos.asks)
        filters = PodFilters(state, refused)
        reason = unschedulable_reason(state, filters, req)
        assert reason == walk_reason(state, filters, req)
        assert reason == "0/3 nodes are available: 3 have fewer than 5 GPUs in total."
        most = max(most, len(index.reads))
    assert 6 < most <= 2 * 3 + 64 + 6
