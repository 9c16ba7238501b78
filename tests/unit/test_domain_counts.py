"""The snapshot's topology counts (snapshot/topocounts.py) against the walk they replace.

The spread and inter-pod affinity PreFilter read matching pods per domain from
``ClusterState.domain_counts``; without it (``counts=None``) they walk the pods as before. On
hundreds of seeded random clusters, changed between decisions (pods put, dropped, terminating;
nodes relabelled, removed, added after their pods; tentative scopes opened and closed), both give
every node the same verdict, reason and score; the nodes the filters name as refused by their
domain (``refused``, placement's hint) are nodes they refuse, and the snapshot's nodes per
domain name exactly the nodes carrying each value. And the counts shrink when the pods leave.
"""

from __future__ import annotations

import random

import pytest

from scheduler.core.filters.chain import NodeInputs
from scheduler.core.filters.interpod import prefilter_interpod
from scheduler.core.filters.node import affinity_matches
from scheduler.core.filters.spread import prefilter_spread
from scheduler.core.model.objects import (
    Affinity,
    LabelSelector,
    NamespaceInput,
    NodeInput,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodInput,
    Requirement,
    SpreadConstraint,
    Taint,
    Toleration,
    WeightedPodAffinityTerm,
)
from scheduler.core.snapshot.cluster import ClusterState

NAMESPACES = ("a", "b", "c")
KEYS = ("zone", "host", "rack")
LABELS = {"app": ("x", "y", "z"), "tier": ("web", "db"), "ver": ("1", "2")}


def random_node(rng: random.Random, name: str) -> NodeInput:
    labels = {"zone": f"z{rng.randrange(3)}", "host": name, "rack": f"r{rng.randrange(4)}"}
    for key in ("zone", "rack", "host"):
        if rng.random() < 0.08:
            del labels[key]
    if rng.random() < 0.3:
        labels["pool"] = rng.choice(("gpu", "cpu"))
    taints = (Taint("dedicated", "NoSchedule", "gpu"),) if rng.random() < 0.15 else ()
    return NodeInput(name, labels=labels, taints=taints)


def random_labels(rng: random.Random) -> dict[str, str]:
    return {k: rng.choice(vs) for k, vs in LABELS.items() if rng.random() < 0.7}


def random_selector(rng: random.Random) -> LabelSelector | None:
    roll = rng.random()
    if roll < 0.05:
        return None
    if roll < 0.1:
        return LabelSelector()
    keys = rng.sample(sorted(LABELS), rng.choice((1, 1, 1, 2)))
    match_labels = {}
    expressions = []
    for key in keys:
        value = rng.choice(LABELS[key])
        kind = rng.random()
        if kind < 0.6:
            match_labels[key] = value
        elif kind < 0.8:
            expressions.append(Requirement(key, "In", (value,)))
        elif kind < 0.9:
            expressions.append(Requirement(key, "NotIn", (value,)))
        else:
            expressions.append(Requirement(key, "Exists"))
    return LabelSelector(match_labels=match_labels, match_expressions=tuple(expressions))


def random_term(rng: random.Random) -> PodAffinityTerm:
    roll = rng.random()
    namespaces: tuple[str, ...] = ()
    namespace_selector = None
    if roll < 0.15:
        namespaces = tuple(rng.sample(NAMESPACES, 2))
    elif roll < 0.25:
        namespace_selector = LabelSelector()  # every namespace
    elif roll < 0.32:
        namespace_selector = LabelSelector(match_labels={"team": "ml"})
    return PodAffinityTerm(rng.choice(KEYS), random_selector(rng), namespaces, namespace_selector)


def random_affinity(rng: random.Random) -> Affinity | None:
    if rng.random() < 0.3:
        return None
    return Affinity(
        pod_required=tuple(random_term(rng) for _ in range(rng.choice((0, 0, 1, 1, 2)))),
        anti_required=tuple(random_term(rng) for _ in range(rng.choice((0, 1, 1, 2)))),
        pod_preferred=tuple(
            WeightedPodAffinityTerm(rng.choice((0, 1, 5)), random_term(rng))
            for _ in range(rng.choice((0, 1)))
        ),
        anti_preferred=tuple(
            WeightedPodAffinityTerm(rng.choice((1, 5)), random_term(rng))
            for _ in range(rng.choice((0, 1)))
        ),
        node_required=(
            (NodeSelectorTerm(match_expressions=(Requirement("pool", "In", ("gpu",)),)),)
            if rng.random() < 0.2
            else None
        ),
    )


def random_spread(rng: random.Random) -> tuple[SpreadConstraint, ...]:
    return tuple(
        SpreadConstraint(
            rng.choice((1, 1, 2)),
            rng.choice(KEYS),
            rng.choice(("DoNotSchedule", "DoNotSchedule", "ScheduleAnyway")),
            random_selector(rng),
            min_domains=rng.choice((None, None, 2, 5)),
            node_affinity_policy=rng.choice(("Honor", "Honor", "Ignore")),
            node_taints_policy=rng.choice(("Ignore", "Ignore", "Honor")),
        )
        for _ in range(rng.choice((0, 1, 1, 2)))
    )


def random_pod(rng: random.Random, name: str, node: str = "") -> PodInput:
    return PodInput(
        rng.choice(NAMESPACES),
        name,
        node_name=node,
        phase="Running" if node else "Pending",
        labels=random_labels(rng),
        node_selector={"pool": "gpu"} if rng.random() < 0.1 else {},
        tolerations=(Toleration("dedicated", "Exists"),) if rng.random() < 0.3 else (),
        deleting=bool(node) and rng.random() < 0.1,
        affinity=random_affinity(rng),
        spread=random_spread(rng),
    )


def verdicts(state: ClusterState, pod: PodInput, indexed: bool) -> list[tuple[object, ...]]:
    nodes = NodeInputs(state.nodes)
    counts = state.domain_counts if indexed else None
    spread = prefilter_spread(
        pod, state.index, nodes, lambda node: affinity_matches(pod, node), counts
    )
    interpod = prefilter_interpod(pod, state.index, nodes, state.inputs.namespaces, counts)
    out: list[tuple[object, ...]] = [(spread is None, interpod is None)]
    for name, node in sorted(nodes.items()):
        out.append(
            (
                name,
                spread.check(node) if spread is not None else None,
                spread.score(node) if spread is not None else None,
                interpod.check(node) if interpod is not None else None,
                interpod.score(node) if interpod is not None else None,
            )
        )
    return out


def same_decisions(state: ClusterState, rng: random.Random, bound: list[str]) -> None:
    for i in range(4):
        pod = random_pod(rng, f"in-{i}")
        if bound and rng.random() < 0.2:  # a pod being re-placed: its own record is there
            ns, name = rng.choice(bound).split("/")
            pod = PodInput(
                ns, name, labels=random_labels(rng), spread=pod.spread, affinity=pod.affinity
            )
        assert verdicts(state, pod, True) == verdicts(state, pod, False)
        refused_are_refused(state, pod)


def refused_are_refused(state: ClusterState, pod: PodInput) -> None:
    """What ``refused`` names, ``check`` refuses; the nodes named per domain are those whose
    labels carry it (for the keys in use)."""
    nodes = NodeInputs(state.nodes)
    counts = state.domain_counts
    spread = prefilter_spread(
        pod, state.index, nodes, lambda node: affinity_matches(pod, node), counts
    )
    interpod = prefilter_interpod(pod, state.index, nodes, state.inputs.namespaces, counts)
    domains = [*(spread.refused() if spread else ()), *(interpod.refused() if interpod else ())]
    named = counts.nodes_in(domains)
    for name in named:
        node = nodes[name]
        assert (spread is not None and spread.check(node)) or (
            interpod is not None and interpod.check(node)
        ), name
    carrying = {
        name
        for name, node in nodes.items()
        for key, values in domains
        if key in counts.domains and node.labels.get(key) in set(values)
    }
    assert named == carrying


def mutate(state: ClusterState, rng: random.Random, bound: list[str], serial: list[int]) -> None:
    names = sorted(state.nodes) or ["none"]
    for _ in range(rng.randrange(1, 8)):
        roll = rng.random()
        if roll < 0.45 or not bound:
            serial[0] += 1
            node = rng.choice(names) if rng.random() < 0.95 else "ghost"
            pod = random_pod(rng, f"p{serial[0]}", node)
            state.add_bound_pod(pod)
            bound.append(pod.key)
        elif roll < 0.65:
            key = bound.pop(rng.randrange(len(bound)))
            state.remove_pod(key)
        elif roll < 0.8:  # a node changes its labels (or keeps them)
            state.set_node(random_node(rng, rng.choice(names)))
        elif roll < 0.88:
            state.remove_node(rng.choice(names))
        else:  # a node comes (back) to its pods, or the ghost node the pods wait for
            state.set_node(random_node(rng, "ghost" if rng.random() < 0.3 else f"n{serial[0]}"))
        names = sorted(state.nodes) or ["none"]


@pytest.mark.parametrize("seed", range(300))
def test_counts_decide_as_the_walk(seed: int) -> None:
    rng = random.Random(seed)
    state = ClusterState()
    state.inputs.namespaces.put(NamespaceInput("a", {"team": "ml"}))
    state.inputs.namespaces.put(NamespaceInput("b"))
    for i in range(rng.randrange(3, 14)):
        state.set_node(random_node(rng, f"n{i}"))
    bound: list[str] = []
    serial = [0]
    for _ in range(rng.randrange(3, 8)):
        mutate(state, rng, bound, serial)
        same_decisions(state, rng, bound)
        with state.tentative():  # a plan's tentative pods count, then leave no trace
            for j in range(3):
                state.add_bound_pod(
                    random_pod(rng, f"t{j}", rng.choice(sorted(state.nodes) or ["x"]))
                )
            same_decisions(state, rng, bound)
        same_decisions(state, rng, bound)


def test_counts_shrink_when_pods_leave() -> None:
    state = ClusterState()
    for i in range(20):
        state.set_node(NodeInput(f"n{i}", labels={"zone": f"z{i % 3}", "host": f"n{i}"}))
    incoming = PodInput(
        "a",
        "in",
        labels={"app": "x"},
        spread=(
            SpreadConstraint(1, "zone", "DoNotSchedule", LabelSelector(match_labels={"app": "x"})),
        ),
        affinity=Affinity(
            anti_required=(
                PodAffinityTerm("host", LabelSelector(match_labels={"app": "x", "tier": "web"})),
            )
        ),
    )
    apart = Affinity(anti_required=(PodAffinityTerm("host", LabelSelector({"app": "x"})),))
    pods = [
        PodInput(
            "a",
            f"p{i}",
            node_name=f"n{i % 20}",
            labels={"app": "x", "tier": "web"},
            affinity=apart if i % 2 else None,
        )
        for i in range(60)
    ]
    for pod in pods:
        state.add_bound_pod(pod)
    verdicts(state, incoming, True)  # the first use of "host" drops the group built for "zone"
    verdicts(state, incoming, True)
    # Per group: 3 zones and 20 hosts with pods.
    # Per group: 3 zones and 20 hosts with pods; one distinct anti-affinity term on 10 hosts.
    assert state.domain_counts.sizes() == {
        "keys": 2,
        "groups": 2,
        "group_counts": 2 * (3 + 20),
        "anti_terms": 1,
        "anti_counts": 10,
    }
    for pod in pods:
        state.remove_pod(pod.key)
    assert state.domain_counts.sizes() == {
        "keys": 2,
        "groups": 0,
        "group_counts": 0,
        "anti_terms": 0,
        "anti_counts": 0,
    }
    for i in range(20):
        state.remove_node(f"n{i}")
    assert state.domain_counts.domains == {"zone": {}, "host": {}}
