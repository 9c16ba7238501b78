"""The shape index ranks whole-GPU pods as ranking every node did (issue 32 item 4).

With a target workload, a whole-GPU pod's nodes of the best set score are ordered by (the
fragmentation gain's rank, untouched, damage, name). Up to 2,048 nodes that walked every node;
past it the free count came first (``scanNodes``). Now a node class keeps its nodes by shape
(snapshot/nodes.NodeClass.shapes: cards, untouched, then cpu left) and placement ranks those,
the cpu left above what the pod and the workload could use as one, at every cluster size. The
walk over every node is kept here as the reference, and seeded random clusters (the share
index's: whole and shared pods placed, cpu-only pods, pods and nodes leaving, cordoned and
tainted nodes, unhealthy cards, model pinning) check that both choose the same node and GPUs
for every whole-GPU pod, and that the index is what filing every node afresh would build.
"""

from __future__ import annotations

import random

import pytest

from scheduler.core.cycle import Unit, apply_decision, decide
from scheduler.core.filters.chain import PodFilters
from scheduler.core.model.decisions import Placed
from scheduler.core.model.names import CORES_PER_CARD
from scheduler.core.model.objects import PodInput
from scheduler.core.placement.nodes import _cpu, _rank_of, best_whole_node, ranked_by
from scheduler.core.resources.requests import PodRequest, parse_request
from scheduler.core.settings import CoreSettings, FragmentationSettings
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.fragmentation import Target
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.unit.test_share_index import _node, _pod

# A target workload after a few pods, so most decisions of a small cluster rank by it.
SETTINGS = CoreSettings(fragmentation=FragmentationSettings(min_pods=4))


def walk(
    state: ClusterState, req: PodRequest, filters: PodFilters, target: Target, cpu: int
) -> tuple[str, tuple[int, ...]] | None:
    """The reference: every node the chain accepts, by (-set score, -gain rank, untouched,
    damage, name)."""
    take = ((CORES_PER_CARD, CORES_PER_CARD),) * req.gpus
    demand = state.demand(req.resources)
    best: tuple[tuple[int, int, int, int, str], tuple[int, ...]] | None = None
    for node in state.gpu_nodes():
        cls = state.node_index.class_of(node.name)
        if cls is None or cls.key[1] != req.vendor:
            continue
        headroom = cls.key[4]
        if headroom is not None and any(headroom[i] < n for i, n in demand):
            continue
        found = _rank_of(cls, req.gpus, False)
        if found is None or filters.check(node):
            continue
        (score, _, _, damage), choice = found
        rank = target.rank(node.shape(), cpu, take)
        order = (score, -rank, node.untouched, damage, node.name)
        if best is None or order < best[0]:
            best = (order, choice.indices)
    return None if best is None else (best[0][-1], best[1])


def indexed(
    state: ClusterState, req: PodRequest, filters: PodFilters, target: Target, cpu: int
) -> tuple[str, tuple[int, ...]] | None:
    demand = state.demand(req.resources)
    found = best_whole_node(state, filters, req.gpus, req.vendor, False, demand, (target, cpu))
    return None if found is None else (found.node.name, found.choice.indices)


def filed_afresh(state: ClusterState) -> dict[str, tuple[object, ...]]:
    """Every node's place in the shape index as filing it now would make it."""
    return {
        name: (cls.key, node.shape()[1], node.untouched, node.shape()[0])
        for name, node in state.nodes.items()
        if (cls := state.node_index.class_of(name)) is not None
    }


def filed(state: ClusterState) -> dict[str, tuple[object, ...]]:
    """Every node's place in the shape index as it is."""
    out: dict[str, tuple[object, ...]] = {}
    for cls in state.node_index.classes.values():
        for group in cls.shapes.values():
            assert group.cpus == sorted(group.by_cpu) and group.names.names
            assert group.names.names == set().union(*(s.names for s in group.by_cpu.values()))
            for left, names in group.by_cpu.items():
                for name in names.names:
                    assert name not in out
                    out[name] = (cls.key, group.cards, group.untouched, left)
    return out


def _whole(state: ClusterState, pod: PodInput) -> PodRequest | None:
    req = parse_request(pod, state.settings, state.memos.asks)
    return req if req.gpus and req.shared is None else None


@pytest.mark.parametrize("seed", range(150))
def test_the_shape_index_chooses_as_the_walk_over_every_node(seed: int) -> None:
    rng = random.Random(seed)
    state = ClusterState(SETTINGS)
    for i in range(rng.randrange(3, 40)):
        state.set_node(_node(rng, i))
    compared = 0
    for i in range(rng.randrange(40, 160)):
        pod = _pod(rng, i, share=rng.random() < 0.4)
        req = _whole(state, pod)
        target = ranked_by(state, False)
        if req is not None and target is not None:
            filters = PodFilters(state, pod)
            if not filters.has_preferences:
                cpu = _cpu(state, pod)
                assert indexed(state, req, filters, target, cpu) == walk(
                    state, req, filters, target, cpu
                )
                assert filed(state) == filed_afresh(state)
                compared += 1
        unit = Unit(None, (pod,))
        decision = decide(state, unit)
        if isinstance(decision, Placed):
            apply_decision(state, decision, unit)
        if rng.random() < 0.1 and state.holdings:  # pods leave too
            state.remove_pod(rng.choice(sorted(state.holdings)))
        if rng.random() < 0.03 and len(state.nodes) > 3:  # and nodes
            state.remove_node(rng.choice(sorted(state.nodes)))
    state.node_index.shaped(())
    assert filed(state) == filed_afresh(state)
    assert compared


def test_a_pod_without_gpus_refiles_its_node_under_its_new_cpu_left() -> None:
    # the index is kept lazily: a pod without GPUs (a record) changes its node's cpu left, not
    # its class; the node is filed under its new cpu when the shapes are next read
    node = MakeNode().Name("n").GPUs(2).Allocatable({"cpu": "64", "nvidia.com/gpu": 2})
    state = cluster(node)
    state.node_index.shaped(())
    assert filed(state)["n"][3] == 64_000
    (decision,) = schedule(state, MakePod().Name("cpu-only").Requests(cpu="500m"))
    assert isinstance(decision, Placed)
    state.node_index.shaped(())
    assert filed(state)["n"][3] == 63_500
    assert filed(state) == filed_afresh(state)
