"""The nodes the spread and inter-pod filters refuse by their domain (``PodFilters.refused``).

Placement does not rank them (placement/nodes.py): a hint, never a verdict, so it must name
only nodes ``check`` refuses, and placements must be what they were without it. Stepped by hand
on a few nodes, then the same backlogs decided with and without the hint on seeded random clusters.
"""

from __future__ import annotations

import random

import pytest

from scheduler.core.filters import chain
from scheduler.core.filters.chain import PodFilters
from scheduler.core.model.decisions import Placed
from scheduler.core.settings import CoreSettings, FragmentationSettings
from tests.builders import MakeNode, MakePod, cluster, schedule
from tests.topologies import DGX1_V100, PCIE8

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
# A target workload from the first GPU pod on: placement ranks by the fragmentation measure,
# the path that reads the hint.
EARLY_TARGET = CoreSettings(fragmentation=FragmentationSettings(min_pods=1))


def gpu_node(name: str, zone: str, links: list[list[str]] = DGX1_V100) -> MakeNode:
    return MakeNode().Name(name).Links(links).Label(HOST, name).Label(ZONE, zone)


def spread_pod(name: str, key: str = HOST) -> MakePod:
    return MakePod().Name(name).Req(1).Label("app", "web").Spread(1, key, app="web")


def apart_pod(name: str, key: str = HOST) -> MakePod:
    return MakePod().Name(name).Req(1).Label("app", "db").PodAntiAffinity(key, app="db")


def test_spread_over_hostnames_refuses_the_nodes_over_the_limit() -> None:
    state = cluster(*(gpu_node(n, "z1") for n in ("a", "b", "c")), settings=EARLY_TARGET)
    # Nothing placed yet: every node at 0, none refused.
    assert PodFilters(state, spread_pod("p0").Obj()).refused() == frozenset()
    (first,) = schedule(state, spread_pod("p0"))
    assert isinstance(first, Placed)
    used = first.placements[0].node
    # One pod on one node, the minimum 0 (nodes without one): that node is over the limit.
    assert PodFilters(state, spread_pod("p1").Obj()).refused() == {used}
    # The two next pods go to the other two nodes (skew 1), and then nothing is refused.
    placed = schedule(state, spread_pod("p1"), spread_pod("p2"))
    nodes = {d.placements[0].node for d in placed if isinstance(d, Placed)}
    assert nodes == {"a", "b", "c"} - {used}
    assert PodFilters(state, spread_pod("p3").Obj()).refused() == set()
    # A pod that the constraint does not select is refused nowhere.
    plain = MakePod().Name("other").Req(1).Label("app", "batch").Spread(1, HOST, app="web")
    assert PodFilters(state, plain.Obj()).refused() == set()


def test_spread_over_zones_refuses_every_node_of_the_full_zone() -> None:
    nodes = [gpu_node("a1", "z1"), gpu_node("a2", "z1"), gpu_node("b1", "z2")]
    running = (spread_pod("r", ZONE).Bound("a1", "0"),)
    state = cluster(*nodes, running=running, settings=EARLY_TARGET)
    assert PodFilters(state, spread_pod("p", ZONE).Obj()).refused() == {"a1", "a2"}
    (decision,) = schedule(state, spread_pod("p", ZONE))
    assert isinstance(decision, Placed) and decision.placements[0].node == "b1"


def test_anti_affinity_refuses_the_nodes_holding_a_matching_pod_both_ways() -> None:
    nodes = [gpu_node(n, "z1") for n in ("a", "b", "c")]
    running = (
        apart_pod("r").Bound("a", "0"),  # the incoming pod's own term matches it
        # No term of its own, but the incoming pod's term matches it.
        MakePod().Name("s").Req(1).Label("app", "db").Bound("b", "0"),
    )
    state = cluster(*nodes, running=running, settings=EARLY_TARGET)
    assert PodFilters(state, apart_pod("p").Obj()).refused() == {"a", "b"}
    # The symmetric rule alone: r's term repels any pod labelled app=db.
    lone = MakePod().Name("q").Req(1).Label("app", "db")
    assert PodFilters(state, lone.Obj()).refused() == {"a"}
    (decision,) = schedule(state, apart_pod("p"))
    assert isinstance(decision, Placed) and decision.placements[0].node == "c"


def test_the_hint_follows_the_nodes_labels() -> None:
    names = ("a", "b", "c")
    state = cluster(*(gpu_node(n, f"z-{n}") for n in names), settings=EARLY_TARGET)
    schedule(state, spread_pod("p0", ZONE))
    (node,) = PodFilters(state, spread_pod("p1", ZONE).Obj()).refused()
    other = min(set(names) - {node})
    # Another node moves into the zone holding the pod: it is refused too (a zone stays empty).
    state.set_node(gpu_node(other, f"z-{node}").Obj())
    assert PodFilters(state, spread_pod("p1", ZONE).Obj()).refused() == {node, other}
    state.remove_node(other)
    assert PodFilters(state, spread_pod("p1", ZONE).Obj()).refused() == {node}


def random_backlog(rng: random.Random, count: int) -> list[MakePod]:
    pods = []
    for i in range(count):
        roll = rng.random()
        key = HOST if rng.random() < 0.7 else ZONE
        app = rng.choice(("web", "db"))
        pod = MakePod().Name(f"p{i}").Req(rng.choice((1, 1, 2, 4))).Label("app", app)
        if roll < 0.4:
            pod = pod.Spread(rng.choice((1, 2)), key, app=app)
        elif roll < 0.7:
            pod = pod.PodAntiAffinity(key, app=app)
        pods.append(pod)
    return pods


SMALLEST_FIT = CoreSettings(binpack_order="smallestFit")


@pytest.mark.parametrize("settings", [EARLY_TARGET, SMALLEST_FIT], ids=["measure", "smallestFit"])
@pytest.mark.parametrize("seed", range(20))
def test_placements_are_the_same_without_the_hint(
    seed: int, settings: CoreSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    nodes = [
        gpu_node(f"n{i:02d}", f"z{rng.randrange(3)}", DGX1_V100 if i % 2 else PCIE8)
        for i in range(rng.randrange(6, 24))
    ]
    backlog = random_backlog(rng, rng.randrange(20, 80))
    asked: dict[str, int] = {}
    real_check = chain.PodFilters.check

    def counted(self: PodFilters, node: object) -> list[str]:
        asked["checks"] = asked.get("checks", 0) + 1
        return real_check(self, node)  # type: ignore[arg-type]

    monkeypatch.setattr(chain.PodFilters, "check", counted)
    with_hint = schedule(cluster(*nodes, settings=settings), *backlog)
    checks_with = asked.pop("checks", 0)
    monkeypatch.setattr(chain.PodFilters, "refused", lambda self: frozenset())
    without = schedule(cluster(*nodes, settings=settings), *backlog)
    assert with_hint == without
    assert checks_with <= asked.get("checks", 0)
