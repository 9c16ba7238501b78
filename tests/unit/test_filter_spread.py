"""PodTopologySpread (scheduler/core/filters/spread.py), stepped by hand.

The filter cases follow kube-scheduler v1.33's podtopologyspread/filtering_test.go
(TestSingleConstraint, TestMultipleConstraints), named after them; kube-scheduler's
Unschedulable is ``SPREAD`` and UnschedulableAndUnresolvable ``MISSING_LABEL`` here. Where its
table notes "in real case" (NodeAffinity or TaintToleration would reject the node first), the
expectation is this plugin's own answer, as there. The node inclusion cases are those run with
the policies enabled (the default since v1.26).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from scheduler.core.filters.node import affinity_matches
from scheduler.core.filters.spread import MISSING_LABEL, SPREAD, Spread, prefilter_spread
from scheduler.core.model.objects import (
    Affinity,
    LabelSelector,
    NodeInput,
    NodeSelectorTerm,
    PodInput,
    Requirement,
    SpreadConstraint,
    Taint,
    Toleration,
)
from scheduler.core.snapshot.podindex import PodIndex, PodRecord

NS = "default"

# ---- builders -----------------------------------------------------------------------------


def node(name: str, taints: tuple[Taint, ...] = (), **labels: str) -> NodeInput:
    return NodeInput(name=name, labels=labels, taints=taints)


FOO = LabelSelector(match_expressions=(Requirement("foo", "Exists"),))
BAR = LabelSelector(match_expressions=(Requirement("bar", "Exists"),))
CORDON = (Taint("node.kubernetes.io/unschedulable", "NoSchedule"),)


def hard(
    max_skew: int,
    key: str,
    selector: LabelSelector | None = FOO,
    min_domains: int | None = None,
    affinity_policy: str = "Honor",
    taints_policy: str = "Ignore",
) -> SpreadConstraint:
    return SpreadConstraint(
        max_skew=max_skew,
        topology_key=key,
        when_unsatisfiable="DoNotSchedule",
        label_selector=selector,
        min_domains=min_domains,
        node_affinity_policy=affinity_policy,
        node_taints_policy=taints_policy,
    )


def soft(max_skew: int, key: str, selector: LabelSelector | None = FOO) -> SpreadConstraint:
    return SpreadConstraint(
        max_skew=max_skew,
        topology_key=key,
        when_unsatisfiable="ScheduleAnyway",
        label_selector=selector,
    )


def pod(
    *constraints: SpreadConstraint,
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    node_required: tuple[NodeSelectorTerm, ...] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    namespace: str = NS,
    name: str = "p",
) -> PodInput:
    return PodInput(
        namespace=namespace,
        name=name,
        labels=dict({"foo": ""} if labels is None else labels),
        node_selector=dict(node_selector or {}),
        affinity=Affinity(node_required=node_required) if node_required is not None else None,
        tolerations=tolerations,
        spread=constraints,
    )


def bound(
    name: str,
    on: str,
    labels: Mapping[str, str] | None = None,
    namespace: str = NS,
    terminating: bool = False,
) -> PodRecord:
    return PodRecord(
        key=f"{namespace}/{name}",
        namespace=namespace,
        node=on,
        labels=dict({"foo": ""} if labels is None else labels),
        terminating=terminating,
    )


def node_in(key: str, *values: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm(match_expressions=(Requirement(key, "In", values),)),)


def node_not_in(key: str, *values: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm(match_expressions=(Requirement(key, "NotIn", values),)),)


def prefilter(
    incoming: PodInput,
    records: list[PodRecord],
    nodes: list[NodeInput],
    eligible: Callable[[NodeInput], bool] | None = None,
) -> Spread | None:
    index = PodIndex()
    for r in records:
        index.add(r)
    if eligible is None:

        def eligible(n: NodeInput) -> bool:
            return affinity_matches(incoming, n)

    return prefilter_spread(incoming, index, {n.name: n for n in nodes}, eligible)


def reasons(
    incoming: PodInput, records: list[PodRecord], nodes: list[NodeInput]
) -> dict[str, str | None]:
    state = prefilter(incoming, records, nodes)
    assert state is not None
    return {n.name: state.check(n) for n in nodes}


def scores(incoming: PodInput, records: list[PodRecord], nodes: list[NodeInput]) -> dict[str, int]:
    state = prefilter(incoming, records, nodes)
    assert state is not None
    return {n.name: state.score(n) for n in nodes}


# Two zones of two nodes each, the shape most of kube-scheduler's cases use.
A = node("node-a", zone="zone1", node="node-a")
B = node("node-b", zone="zone1", node="node-b")
X = node("node-x", zone="zone2", node="node-x")
Y = node("node-y", zone="zone2", node="node-y")
ABXY = [A, B, X, Y]

# 2/1/0/3 across nodes, 3/3 across zones.
SPREAD_2_1_0_3 = [
    bound("p-a1", "node-a"),
    bound("p-a2", "node-a"),
    bound("p-b1", "node-b"),
    bound("p-y1", "node-y"),
    bound("p-y2", "node-y"),
    bound("p-y3", "node-y"),
]

OK = None


# ---- TestSingleConstraint ---------------------------------------------------------------------


def test_no_constraints_skip_the_filter() -> None:
    assert prefilter(pod(), SPREAD_2_1_0_3, ABXY) is None


def test_no_existing_pods() -> None:
    assert reasons(pod(hard(1, "zone")), [], ABXY) == dict.fromkeys(
        ("node-a", "node-b", "node-x", "node-y"), OK
    )


def test_no_existing_pods_incoming_pod_does_not_match_itself() -> None:
    assert reasons(pod(hard(1, "zone", BAR)), [], ABXY) == dict.fromkeys(
        ("node-a", "node-b", "node-x", "node-y"), OK
    )


def test_existing_pods_in_a_different_namespace_do_not_count() -> None:
    records = [
        bound("p-a1", "node-a", namespace="ns1"),
        bound("p-b1", "node-a", namespace="ns2"),
        bound("p-x1", "node-x"),
        bound("p-y1", "node-y"),
    ]
    assert reasons(pod(hard(1, "zone")), records, ABXY) == {
        "node-a": OK,
        "node-b": OK,
        "node-x": SPREAD,
        "node-y": SPREAD,
    }


def test_existing_pods_do_not_match_a_null_selector() -> None:
    records = [bound("p-x1", "node-x"), bound("p-y1", "node-y")]
    assert reasons(pod(hard(1, "zone", None)), records, ABXY) == dict.fromkeys(
        ("node-a", "node-b", "node-x", "node-y"), OK
    )


def test_an_empty_selector_counts_no_existing_pod_but_matches_the_pod_itself() -> None:
    # kube-scheduler's countPodsMatchSelector returns 0 for an empty selector; the self-match
    # (+1) still applies, so with maxSkew 0 no node passes, with maxSkew 1 every node does.
    records = [bound("p-x1", "node-x"), bound("p-x2", "node-x")]
    assert reasons(pod(hard(0, "zone", LabelSelector())), records, ABXY) == dict.fromkeys(
        ("node-a", "node-b", "node-x", "node-y"), SPREAD
    )
    assert reasons(pod(hard(1, "zone", LabelSelector())), records, ABXY) == dict.fromkeys(
        ("node-a", "node-b", "node-x", "node-y"), OK
    )


def test_pods_spread_across_zones_as_3_3_all_nodes_fit() -> None:
    assert reasons(pod(hard(1, "zone")), SPREAD_2_1_0_3, ABXY) == dict.fromkeys(
        ("node-a", "node-b", "node-x", "node-y"), OK
    )


def test_a_node_without_the_key_neither_counts_nor_fits() -> None:
    # pods spread across zones as 1/2 due to absence of label 'zone' on node-b
    b = node("node-b", zon="zone1", node="node-b")
    records = [
        bound("p-a1", "node-a"),
        bound("p-b1", "node-b"),
        bound("p-x1", "node-x"),
        bound("p-y1", "node-y"),
    ]
    assert reasons(pod(hard(1, "zone")), records, [A, b, X, Y]) == {
        "node-a": OK,
        "node-b": MISSING_LABEL,
        "node-x": SPREAD,
        "node-y": SPREAD,
    }


def test_no_node_has_the_key() -> None:
    assert reasons(pod(hard(1, "rack")), [], [A, X]) == {
        "node-a": MISSING_LABEL,
        "node-x": MISSING_LABEL,
    }


def test_pods_spread_across_nodes_as_2_1_0_3_only_node_x_fits() -> None:
    assert reasons(pod(hard(1, "node")), SPREAD_2_1_0_3, ABXY) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_pods_spread_across_nodes_as_2_1_0_3_max_skew_2() -> None:
    assert reasons(pod(hard(2, "node")), SPREAD_2_1_0_3, ABXY) == {
        "node-a": SPREAD,
        "node-b": OK,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_pods_spread_as_2_1_0_3_but_the_pod_does_not_match_itself() -> None:
    incoming = pod(hard(1, "node"), labels={"bar": ""})
    assert reasons(incoming, SPREAD_2_1_0_3, ABXY) == {
        "node-a": SPREAD,
        "node-b": OK,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_node_affinity_limits_the_domains_2_x_x_3() -> None:
    # Only node-a and node-y count: minimum 2, so node-a (2+1-2) fits and node-y (3+1-2) not.
    # node-b and node-x are not counted domains; this plugin alone lets them through
    # (NodeAffinity rejects them first in the chain).
    incoming = pod(hard(1, "node"), node_required=node_in("node", "node-a", "node-y"))
    assert reasons(incoming, SPREAD_2_1_0_3, ABXY) == {
        "node-a": OK,
        "node-b": OK,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_terminating_pods_are_excluded() -> None:
    nodes = [node("node-a", node="node-a"), node("node-b", node="node-b")]
    records = [bound("p-a", "node-a", terminating=True), bound("p-b", "node-b")]
    assert reasons(pod(hard(1, "node")), records, nodes) == {"node-a": OK, "node-b": SPREAD}


def test_node_affinity_leaves_pods_on_excluded_nodes_uncounted() -> None:
    # pods spread as 0/~2~/0/1 across nodes, zones count 0/1: node-a fits, zone2 does not.
    incoming = pod(hard(1, "zone"), node_required=node_not_in("node", "node-b"))
    records = [bound("p-b1", "node-b"), bound("p-b2", "node-b"), bound("p-y1", "node-y")]
    assert reasons(incoming, records, ABXY) == {
        "node-a": OK,
        "node-b": OK,
        "node-x": SPREAD,
        "node-y": SPREAD,
    }


THREE_HOSTS = [
    node("node-a", node="node-a"),
    node("node-b", node="node-b"),
    node("node-c", node="node-c"),
]
SPREAD_2_2_1 = [
    bound("p-a1", "node-a"),
    bound("p-a2", "node-a"),
    bound("p-b1", "node-b"),
    bound("p-b2", "node-b"),
    bound("p-c1", "node-c"),
]


def test_fewer_domains_than_min_domains_make_the_minimum_zero() -> None:
    # 2/2/1, maxSkew 2, minDomains 4 > 3 domains: global minimum 0, only node-c (1+1) fits.
    incoming = pod(hard(2, "node", min_domains=4))
    assert reasons(incoming, SPREAD_2_2_1, THREE_HOSTS) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-c": OK,
    }


def test_enough_domains_for_min_domains_use_the_real_minimum() -> None:
    incoming = pod(hard(2, "node", min_domains=2))
    assert reasons(incoming, SPREAD_2_2_1, THREE_HOSTS) == dict.fromkeys(
        ("node-a", "node-b", "node-c"), OK
    )
    # Exactly as many domains as minDomains: still the real minimum.
    incoming = pod(hard(2, "node", min_domains=3))
    assert reasons(incoming, SPREAD_2_2_1, THREE_HOSTS) == dict.fromkeys(
        ("node-a", "node-b", "node-c"), OK
    )


ZONES_2_1 = [bound("p-b1", "node-a"), bound("p-b2", "node-b"), bound("p-y1", "node-y")]


def test_zones_2_1_with_min_domains_above_the_zone_count() -> None:
    assert reasons(pod(hard(2, "zone", min_domains=3)), ZONES_2_1, ABXY) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": OK,
    }


def test_zones_2_1_with_min_domains_below_the_zone_count() -> None:
    assert reasons(pod(hard(2, "zone", min_domains=1)), ZONES_2_1, ABXY) == dict.fromkeys(
        ("node-a", "node-b", "node-x", "node-y"), OK
    )


FOO_NODES = [
    node("node-a", node="node-a", foo=""),
    node("node-b", node="node-b", foo=""),
    node("node-x", node="node-x", foo=""),
    node("node-y", node="node-y"),
]
ONE_EACH_ON_A_B_Y = [bound("p-b1", "node-a"), bound("p-b2", "node-b"), bound("p-y1", "node-y")]


def test_node_affinity_policy_honored_with_node_selector() -> None:
    # pods spread across nodes as 1/1/0/~0~
    incoming = pod(hard(1, "node"), node_selector={"foo": ""})
    assert reasons(incoming, ONE_EACH_ON_A_B_Y, FOO_NODES) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": OK,
    }


def test_node_affinity_policy_ignored_with_node_selector() -> None:
    # pods spread across nodes as 1/1/0/1
    incoming = pod(hard(1, "node", affinity_policy="Ignore"), node_selector={"foo": ""})
    assert reasons(incoming, ONE_EACH_ON_A_B_Y, FOO_NODES) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_node_affinity_policy_honored_with_node_affinity() -> None:
    incoming = pod(hard(1, "node"), node_required=node_in("foo", ""))
    assert reasons(incoming, ONE_EACH_ON_A_B_Y, FOO_NODES) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": OK,
    }


def test_node_affinity_policy_ignored_with_node_affinity() -> None:
    incoming = pod(hard(1, "node", affinity_policy="Ignore"), node_required=node_in("foo", ""))
    assert reasons(incoming, ONE_EACH_ON_A_B_Y, FOO_NODES) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": SPREAD,
    }


TAINTED_Y = [*FOO_NODES[:3], node("node-y", taints=CORDON, node="node-y")]


def test_node_taints_policy_honored() -> None:
    # pods spread across nodes as 1/1/0/~0~
    incoming = pod(hard(1, "node", taints_policy="Honor"))
    assert reasons(incoming, ONE_EACH_ON_A_B_Y, TAINTED_Y) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": OK,
    }


def test_node_taints_policy_ignored() -> None:
    # pods spread across nodes as 1/1/0/1
    assert reasons(pod(hard(1, "node")), ONE_EACH_ON_A_B_Y, TAINTED_Y) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_node_taints_policy_honored_counts_a_tolerated_taint() -> None:
    tolerate = (Toleration(key="node.kubernetes.io/unschedulable", operator="Exists"),)
    incoming = pod(hard(1, "node", taints_policy="Honor"), tolerations=tolerate)
    assert reasons(incoming, ONE_EACH_ON_A_B_Y, TAINTED_Y) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_node_taints_policy_ignores_prefer_no_schedule() -> None:
    soft_taint = (Taint("dedicated", "PreferNoSchedule"),)
    nodes = [*FOO_NODES[:3], node("node-y", taints=soft_taint, node="node-y")]
    incoming = pod(hard(1, "node", taints_policy="Honor"))
    assert reasons(incoming, ONE_EACH_ON_A_B_Y, nodes)["node-y"] == SPREAD


# ---- TestMultipleConstraints -------------------------------------------------------------------


def test_two_constraints_on_zone_and_node_3_3_and_2_1_0_3() -> None:
    incoming = pod(hard(1, "zone"), hard(1, "node"))
    assert reasons(incoming, SPREAD_2_1_0_3, ABXY) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_two_constraints_on_zone_and_node_3_4_and_2_1_0_4() -> None:
    records = [*SPREAD_2_1_0_3, bound("p-y4", "node-y")]
    incoming = pod(hard(1, "zone"), hard(1, "node"))
    assert reasons(incoming, records, ABXY) == dict.fromkeys(
        ("node-a", "node-b", "node-x", "node-y"), SPREAD
    )


def test_constraints_with_different_selectors_1_0_and_1_0_0_1() -> None:
    incoming = pod(hard(1, "zone"), hard(1, "node", BAR), labels={"foo": "", "bar": ""})
    records = [bound("p-a1", "node-a"), bound("p-y1", "node-y", {"bar": ""})]
    assert reasons(incoming, records, ABXY) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_constraints_with_different_selectors_1_0_and_0_0_1_1() -> None:
    incoming = pod(hard(1, "zone"), hard(1, "node", BAR), labels={"foo": "", "bar": ""})
    records = [
        bound("p-a1", "node-a"),
        bound("p-x1", "node-x", {"bar": ""}),
        bound("p-y1", "node-y", {"bar": ""}),
    ]
    assert reasons(incoming, records, ABXY) == dict.fromkeys(
        ("node-a", "node-b", "node-x", "node-y"), SPREAD
    )


def test_constraints_with_different_selectors_2_3_and_1_0_0_1() -> None:
    incoming = pod(hard(1, "zone"), hard(1, "node", BAR), labels={"foo": "", "bar": ""})
    records = [
        bound("p-a1", "node-a"),
        bound("p-a2", "node-a", {"foo": "", "bar": ""}),
        bound("p-y1", "node-y"),
        bound("p-y2", "node-y", {"foo": "", "bar": ""}),
        bound("p-y3", "node-y"),
    ]
    assert reasons(incoming, records, ABXY) == {
        "node-a": SPREAD,
        "node-b": OK,
        "node-x": SPREAD,
        "node-y": SPREAD,
    }


def test_pod_not_matching_itself_on_the_zone_constraint() -> None:
    incoming = pod(hard(1, "zone"), hard(1, "node", BAR), labels={"bar": ""})
    records = [
        bound("p-a1", "node-a"),
        bound("p-x1", "node-x", {"bar": ""}),
        bound("p-y1", "node-y", {"bar": ""}),
    ]
    assert reasons(incoming, records, ABXY) == {
        "node-a": OK,
        "node-b": OK,
        "node-x": SPREAD,
        "node-y": SPREAD,
    }


def test_a_node_missing_one_constraints_key_counts_for_none() -> None:
    # node-x lacks "node": it holds no domain for either constraint, spreads [1/1, 1/0/~0~/1].
    x = node("node-x", zone="zone2")
    records = [bound("p-a1", "node-a"), bound("p-y3", "node-y")]
    incoming = pod(hard(1, "zone"), hard(1, "node"))
    assert reasons(incoming, records, [A, B, x, Y]) == {
        "node-a": SPREAD,
        "node-b": OK,
        "node-x": MISSING_LABEL,
        "node-y": SPREAD,
    }
    # Its own pods do not count for the zone either: zone2 stays at 1 beside zone1's 1.
    records += [bound("p-x1", "node-x"), bound("p-x2", "node-x")]
    assert reasons(incoming, records, [A, B, x, Y]) == {
        "node-a": SPREAD,
        "node-b": OK,
        "node-x": MISSING_LABEL,
        "node-y": SPREAD,
    }
    # With the zone constraint alone node-x counts, zone2 holds 3 against 1 and fails.
    assert reasons(pod(hard(1, "zone")), records, [A, B, x, Y]) == {
        "node-a": OK,
        "node-b": OK,
        "node-x": SPREAD,
        "node-y": SPREAD,
    }


def test_constraints_are_checked_in_order() -> None:
    # node-x fails the zone constraint (zone2 holds 2, zone1 none) before its missing "rack"
    # label is looked at; node-z, in the empty zone, gets to the missing label.
    incoming = pod(hard(1, "zone"), hard(1, "rack"))
    records = [bound("p-y1", "node-y"), bound("p-y2", "node-y")]
    nodes = [
        node("node-a", zone="zone1", rack="r1"),
        node("node-y", zone="zone2", rack="r2"),
        node("node-x", zone="zone2"),
        node("node-z", zone="zone1"),
    ]
    assert reasons(incoming, records, nodes) == {
        "node-a": OK,
        "node-y": SPREAD,
        "node-x": SPREAD,
        "node-z": MISSING_LABEL,
    }


def test_two_inclusion_policies_zone_honor_ignore_node_ignore_ignore() -> None:
    incoming = pod(
        hard(1, "zone"),
        hard(1, "node", affinity_policy="Ignore"),
        node_selector={"foo": ""},
    )
    nodes = [
        node("node-a", zone="zone1", node="node-a", foo=""),
        node("node-b", zone="zone1", node="node-b", foo=""),
        node("node-x", zone="zone2", node="node-x", foo=""),
        node("node-y", zone="zone2", node="node-y"),
    ]
    records = [bound("p-a1", "node-a"), bound("p-b1", "node-b"), bound("p-y1", "node-y")]
    assert reasons(incoming, records, nodes) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_two_inclusion_policies_zone_honor_honor_node_honor_ignore() -> None:
    incoming = pod(hard(1, "zone", taints_policy="Honor"), hard(1, "node"))
    nodes = [
        node("node-a", zone="zone1", node="node-a", foo=""),
        node("node-b", zone="zone1", node="node-b", foo=""),
        node("node-x", zone="zone2", node="node-x", foo=""),
        node("node-y", taints=CORDON, zone="zone2", node="node-y"),
    ]
    records = [bound("p-a1", "node-a"), bound("p-b1", "node-b"), bound("p-y1", "node-y")]
    assert reasons(incoming, records, nodes) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_two_inclusion_policies_zone_honor_ignore_node_honor_ignore() -> None:
    incoming = pod(hard(1, "zone"), hard(1, "node"), node_selector={"foo": ""})
    nodes = [
        node("node-a", zone="zone1", node="node-a", foo=""),
        node("node-b", zone="zone1", node="node-b"),
        node("node-x", zone="zone2", node="node-x", foo=""),
        node("node-y", taints=CORDON, zone="zone2", node="node-y", foo=""),
    ]
    records = [bound("p-a1", "node-a"), bound("p-b1", "node-b"), bound("p-y1", "node-y")]
    assert reasons(incoming, records, nodes) == {
        "node-a": SPREAD,
        "node-b": OK,
        "node-x": OK,
        "node-y": SPREAD,
    }


def test_two_inclusion_policies_zone_honor_honor_node_ignore_ignore() -> None:
    incoming = pod(
        hard(1, "zone", taints_policy="Honor"),
        hard(1, "node", affinity_policy="Ignore"),
        node_selector={"foo": ""},
    )
    nodes = [
        node("node-a", zone="zone1", node="node-a", foo=""),
        node("node-b", zone="zone1", node="node-b"),
        node("node-x", zone="zone2", node="node-x", foo=""),
        node("node-y", taints=CORDON, zone="zone2", node="node-y", foo=""),
    ]
    records = [bound("p-a1", "node-a"), bound("p-b1", "node-b"), bound("p-y1", "node-y")]
    assert reasons(incoming, records, nodes) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": SPREAD,
    }


ZONE_PODS = [
    bound("p-a1", "node-a", {"foo": "", "bar": ""}),
    bound("p-a2", "node-a"),
    bound("p-b1", "node-b", {"foo": "", "bar": ""}),
    bound("p-y1", "node-y"),
    bound("p-y2", "node-y", {"foo": "", "bar": ""}),
    bound("p-y3", "node-y"),
]


def test_two_constraints_on_zone_3_3_and_2_1() -> None:
    incoming = pod(hard(1, "zone", BAR), hard(1, "zone"), labels={"foo": "", "bar": ""})
    assert reasons(incoming, ZONE_PODS, ABXY) == {
        "node-a": SPREAD,
        "node-b": SPREAD,
        "node-x": OK,
        "node-y": OK,
    }


def test_two_constraints_on_zone_3_4_and_2_1() -> None:
    incoming = pod(hard(1, "zone", BAR), hard(1, "zone"), labels={"foo": "", "bar": ""})
    records = [*ZONE_PODS, bound("p-y4", "node-y")]
    assert reasons(incoming, records, ABXY) == dict.fromkeys(
        ("node-a", "node-b", "node-x", "node-y"), SPREAD
    )


# ---- the prefilter's shortcuts and inputs -------------------------------------------------------


def test_pods_on_nodes_outside_the_snapshot_are_ignored() -> None:
    records = [bound("p-gone", "node-gone"), bound("p-a1", "node-a")]
    assert reasons(pod(hard(1, "node")), records, [A, B]) == {"node-a": SPREAD, "node-b": OK}


def test_the_incoming_pods_own_record_is_not_counted() -> None:
    itself = bound("p", "node-a")
    assert reasons(pod(hard(1, "node"), name="p"), [itself], [A, B]) == {
        "node-a": OK,
        "node-b": OK,
    }


def test_eligible_is_not_asked_when_the_pod_has_no_node_constraints() -> None:
    asked: list[str] = []

    def eligible(n: NodeInput) -> bool:
        asked.append(n.name)
        return True

    assert prefilter(pod(hard(1, "zone")), SPREAD_2_1_0_3, ABXY, eligible) is not None
    assert asked == []
    # With a nodeSelector it is asked, once per node at most.
    incoming = pod(hard(1, "zone"), node_selector={"zone": "zone1"})
    assert prefilter(incoming, SPREAD_2_1_0_3, ABXY, eligible) is not None
    assert asked and len(asked) == len(set(asked))


class RecordingNodes(Mapping[str, NodeInput]):
    """The snapshot's nodes, noting every node the prefilter reads."""

    def __init__(self, nodes: list[NodeInput]) -> None:
        self._nodes = {n.name: n for n in nodes}
        self.read: list[str] = []

    def __getitem__(self, name: str) -> NodeInput:
        node = self._nodes[name]
        self.read.append(name)
        return node

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


def test_the_node_walk_stops_at_the_first_empty_domain() -> None:
    asked: list[str] = []

    def eligible(n: NodeInput) -> bool:
        asked.append(n.name)
        return True

    # node-a holds a pod, node-b none: the minimum is 0 once node-b is seen, so node-x and
    # node-y are never read.
    incoming = pod(hard(1, "node"), node_selector={"foo": ""})
    index = PodIndex()
    index.add(bound("p-a1", "node-a"))
    nodes = RecordingNodes(ABXY)
    assert prefilter_spread(incoming, index, nodes, eligible) is not None
    assert nodes.read == ["node-a", "node-a", "node-b"]  # the pod's node, then the walk
    assert asked == ["node-a", "node-b"]


def test_the_node_walk_reads_every_node_when_every_domain_holds_pods() -> None:
    index = PodIndex()
    for r in SPREAD_2_1_0_3:
        index.add(r)
    nodes = RecordingNodes(ABXY)
    state = prefilter_spread(pod(hard(1, "zone")), index, nodes, lambda n: True)
    assert state is not None
    assert sorted(set(nodes.read)) == ["node-a", "node-b", "node-x", "node-y"]
    # zones hold 3 and 3: the minimum is 3, so either zone takes the pod.
    assert [state.check(n) for n in ABXY] == [OK, OK, OK, OK]


def test_only_schedule_anyway_constraints_never_filter() -> None:
    state = prefilter(pod(soft(1, "zone")), SPREAD_2_1_0_3, [A, node("bare")])
    assert state is not None
    assert state.has_preferences
    assert state.check(A) is None
    assert state.check(node("bare")) is None


def test_only_do_not_schedule_constraints_have_no_preferences() -> None:
    state = prefilter(pod(hard(1, "zone")), SPREAD_2_1_0_3, ABXY)
    assert state is not None
    assert not state.has_preferences
    assert [state.score(n) for n in ABXY] == [0, 0, 0, 0]


# ---- ScheduleAnyway scores ----------------------------------------------------------------------


def test_fewer_matching_pods_score_higher() -> None:
    assert scores(pod(soft(1, "node")), SPREAD_2_1_0_3, ABXY) == {
        "node-a": -2,
        "node-b": -1,
        "node-x": 0,
        "node-y": -3,
    }


def test_scores_add_up_over_constraints() -> None:
    # zones 3/3, nodes 2/1/0/3.
    assert scores(pod(soft(1, "zone"), soft(1, "node")), SPREAD_2_1_0_3, ABXY) == {
        "node-a": -5,
        "node-b": -4,
        "node-x": -3,
        "node-y": -6,
    }


def test_a_node_missing_a_key_scores_below_every_other() -> None:
    bare = node("node-z", node="node-z")  # no zone
    state = prefilter(pod(soft(1, "zone"), soft(1, "node")), SPREAD_2_1_0_3, [*ABXY, bare])
    assert state is not None
    worst = min(state.score(n) for n in ABXY)
    assert state.score(bare) < worst
    # Zones hold 3 and 3, nodes at most 3: -(3 + 1) - (3 + 1).
    assert state.score(bare) == -8
    # Pods on a node lacking one of the keys count for no constraint: five pods on node-z
    # would make the largest node count 5 otherwise.
    on_bare = [*SPREAD_2_1_0_3, *(bound(f"p-z{i}", "node-z") for i in range(5))]
    both = pod(soft(1, "zone"), soft(1, "node"))
    assert scores(both, on_bare, [*ABXY, bare])["node-z"] == -8
    # With the node constraint alone node-z has every key, and its pods count.
    assert scores(pod(soft(1, "node")), on_bare, [*ABXY, bare])["node-z"] == -5


def test_scores_honor_the_inclusion_policies() -> None:
    # node-y does not match the nodeSelector: its pods do not count for the zone2 domain.
    incoming = pod(soft(1, "zone"), node_selector={"foo": ""})
    nodes = [
        node("node-a", zone="zone1", foo=""),
        node("node-x", zone="zone2", foo=""),
        node("node-y", zone="zone2"),
    ]
    records = [bound("p-a1", "node-a"), bound("p-y1", "node-y"), bound("p-y2", "node-y")]
    assert scores(incoming, records, nodes) == {"node-a": -1, "node-x": 0, "node-y": 0}


def test_scores_skip_terminating_pods_and_other_namespaces() -> None:
    records = [
        bound("p-a1", "node-a", terminating=True),
        bound("p-b1", "node-b", namespace="other"),
        bound("p-x1", "node-x"),
    ]
    assert scores(pod(soft(1, "node")), records, [A, B, X]) == {
        "node-a": 0,
        "node-b": 0,
        "node-x": -1,
    }


def test_hard_and_soft_constraints_together() -> None:
    incoming = pod(hard(1, "zone"), soft(1, "node"))
    state = prefilter(incoming, SPREAD_2_1_0_3, ABXY)
    assert state is not None and state.has_preferences
    assert [state.check(n) for n in ABXY] == [OK, OK, OK, OK]
    assert [state.score(n) for n in ABXY] == [-2, -1, 0, -3]
