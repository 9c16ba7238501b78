"""InterPodAffinity (scheduler/core/filters/interpod.py), stepped by hand.

Most cases follow kube-scheduler v1.33's own (interpodaffinity/filtering_test.go and
scoring_test.go), named after them; the expected reason is what kube-scheduler's Filter returns
for that node. Scores are the raw sums before kube-scheduler's 0..100 normalisation (its
expected lists are noted where they help to check the order).
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.core.filters.chain import NodeInputs
from scheduler.core.filters.interpod import (
    AFFINITY,
    ANTI_AFFINITY,
    EXISTING_ANTI_AFFINITY,
    InterPod,
    prefilter_interpod,
)
from scheduler.core.model.objects import (
    Affinity,
    LabelSelector,
    NamespaceInput,
    NodeInput,
    PodAffinityTerm,
    PodInput,
    Requirement,
    WeightedPodAffinityTerm,
)
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.podindex import PodIndex, PodRecord

NS = "default"


# ---- builders -----------------------------------------------------------------------------


def node(name: str, **labels: str) -> NodeInput:
    return NodeInput(name=name, labels=labels)


def sel(*reqs: Requirement, **match: str) -> LabelSelector:
    return LabelSelector(match_labels=match, match_expressions=reqs)


def In(key: str, *values: str) -> Requirement:
    return Requirement(key, "In", values)


def NotIn(key: str, *values: str) -> Requirement:
    return Requirement(key, "NotIn", values)


def Exists(key: str) -> Requirement:
    return Requirement(key, "Exists")


def DoesNotExist(key: str) -> Requirement:
    return Requirement(key, "DoesNotExist")


def term(
    topology: str,
    *reqs: Requirement,
    namespaces: tuple[str, ...] = (),
    ns_selector: LabelSelector | None = None,
) -> PodAffinityTerm:
    return PodAffinityTerm(
        topology_key=topology,
        label_selector=sel(*reqs),
        namespaces=namespaces,
        namespace_selector=ns_selector,
    )


def weighted(weight: int, t: PodAffinityTerm) -> WeightedPodAffinityTerm:
    return WeightedPodAffinityTerm(weight=weight, term=t)


def pod(
    labels: Mapping[str, str] | None = None,
    namespace: str = NS,
    name: str = "incoming",
    affinity: tuple[PodAffinityTerm, ...] = (),
    anti: tuple[PodAffinityTerm, ...] = (),
    preferred: tuple[WeightedPodAffinityTerm, ...] = (),
    anti_preferred: tuple[WeightedPodAffinityTerm, ...] = (),
) -> PodInput:
    has_terms = affinity or anti or preferred or anti_preferred
    return PodInput(
        namespace=namespace,
        name=name,
        labels=dict(labels or {}),
        affinity=Affinity(
            pod_required=affinity,
            anti_required=anti,
            pod_preferred=preferred,
            anti_preferred=anti_preferred,
        )
        if has_terms
        else None,
    )


_serial = iter(range(1_000_000))


def bound(
    on: str,
    labels: Mapping[str, str] | None = None,
    namespace: str = NS,
    anti: tuple[PodAffinityTerm, ...] = (),
    terminating: bool = False,
    name: str | None = None,
) -> PodRecord:
    name = name or f"p{next(_serial)}"
    return PodRecord(
        key=f"{namespace}/{name}",
        namespace=namespace,
        node=on,
        labels=dict(labels or {}),
        anti_required=anti,
        terminating=terminating,
    )


def index_of(*records: PodRecord) -> PodIndex:
    index = PodIndex()
    for r in records:
        index.add(r)
    return index


TEAM_NAMESPACES = {
    n.name: n
    for n in (
        NamespaceInput("subteam1.team1", {"team": "team1"}),
        NamespaceInput("subteam2.team1", {"team": "team1"}),
        NamespaceInput("subteam1.team2", {"team": "team2"}),
        NamespaceInput("subteam2.team2", {"team": "team2"}),
    )
}


def prefilter(
    incoming: PodInput,
    records: list[PodRecord],
    nodes: list[NodeInput],
    namespaces: Mapping[str, NamespaceInput] | None = None,
) -> InterPod | None:
    return prefilter_interpod(
        incoming, index_of(*records), {n.name: n for n in nodes}, namespaces or {}
    )


def reasons(
    incoming: PodInput,
    records: list[PodRecord],
    nodes: list[NodeInput],
    namespaces: Mapping[str, NamespaceInput] | None = None,
) -> dict[str, str | None]:
    """Filter's answer per node; the prefilter must not have skipped the pod."""
    state = prefilter(incoming, records, nodes, namespaces)
    assert state is not None, "the prefilter skipped a pod that has something to check"
    return {n.name: state.check(n) for n in nodes}


def scores(
    incoming: PodInput,
    records: list[PodRecord],
    nodes: list[NodeInput],
    namespaces: Mapping[str, NamespaceInput] | None = None,
) -> dict[str, int]:
    state = prefilter(incoming, records, nodes, namespaces)
    assert state is not None
    return {n.name: state.score(n) for n in nodes}


# ---- TestRequiredAffinitySingleNode ---------------------------------------------------------

NODE1 = node("node1", region="r1", zone="z11")
SECURITYSCAN = {"service": "securityscan"}
S1 = {"security": "S1"}


def existing_scan() -> PodRecord:
    return bound("node1", SECURITYSCAN)


def test_no_terms_and_no_existing_anti_affinity_skips_the_filter() -> None:
    assert prefilter(pod(), [], [NODE1]) is None
    assert prefilter(pod(SECURITYSCAN), [existing_scan()], [NODE1]) is None


def test_affinity_in_operator_matching_the_existing_pod() -> None:
    incoming = pod(S1, affinity=(term("region", In("service", "securityscan", "value2")),))
    assert reasons(incoming, [existing_scan()], [NODE1]) == {"node1": None}


def test_affinity_not_in_operator_matching_the_existing_pod() -> None:
    incoming = pod(S1, affinity=(term("region", NotIn("service", "securityscan3", "value3")),))
    assert reasons(incoming, [existing_scan()], [NODE1]) == {"node1": None}


def test_affinity_does_not_match_a_pod_in_another_namespace() -> None:
    incoming = pod(
        S1,
        affinity=(
            term("region", In("service", "securityscan", "value2"), namespaces=("DiffNameSpace",)),
        ),
    )
    existing = bound("node1", SECURITYSCAN, namespace="ns")
    assert reasons(incoming, [existing], [NODE1]) == {"node1": AFFINITY}


def test_affinity_with_unmatching_selector_fails() -> None:
    # The incoming pod does not match its own term either, so the first-pod escape is closed.
    incoming = pod(SECURITYSCAN, affinity=(term("region", In("service", "antivirusscan")),))
    assert reasons(incoming, [existing_scan()], [NODE1]) == {"node1": AFFINITY}


def test_affinity_terms_with_different_operators_all_match() -> None:
    incoming = pod(
        S1,
        affinity=(
            term("region", Exists("service"), DoesNotExist("wrongkey")),
            term("region", In("service", "securityscan"), NotIn("service", "WrongValue")),
        ),
    )
    assert reasons(incoming, [existing_scan()], [NODE1]) == {"node1": None}


def test_affinity_requirements_are_anded() -> None:
    incoming = pod(
        S1,
        affinity=(
            term("region", Exists("service"), DoesNotExist("wrongkey")),
            term("region", In("service", "securityscan2"), NotIn("service", "WrongValue")),
        ),
    )
    assert reasons(incoming, [existing_scan()], [NODE1]) == {"node1": AFFINITY}


def test_affinity_and_anti_affinity_both_satisfied() -> None:
    incoming = pod(
        S1,
        affinity=(term("region", In("service", "securityscan", "value2")),),
        anti=(term("node", In("service", "antivirusscan", "value2")),),
    )
    assert reasons(incoming, [existing_scan()], [NODE1]) == {"node1": None}


def test_affinity_and_anti_affinity_and_symmetry_satisfied() -> None:
    incoming = pod(
        S1,
        affinity=(term("region", In("service", "securityscan", "value2")),),
        anti=(term("node", In("service", "antivirusscan", "value2")),),
    )
    existing = bound(
        "node1", SECURITYSCAN, anti=(term("node", In("service", "antivirusscan", "value2")),)
    )
    assert reasons(incoming, [existing], [NODE1]) == {"node1": None}


def test_affinity_satisfied_but_anti_affinity_not() -> None:
    incoming = pod(
        S1,
        affinity=(term("region", In("service", "securityscan", "value2")),),
        anti=(term("zone", In("service", "securityscan", "value2")),),
    )
    assert reasons(incoming, [existing_scan()], [NODE1]) == {"node1": ANTI_AFFINITY}


def test_own_terms_satisfied_but_existing_pods_anti_affinity_not() -> None:
    incoming = pod(
        SECURITYSCAN,
        affinity=(term("region", In("service", "securityscan", "value2")),),
        anti=(term("node", In("service", "antivirusscan", "value2")),),
    )
    existing = bound(
        "node1", SECURITYSCAN, anti=(term("zone", In("service", "securityscan", "value2")),)
    )
    assert reasons(incoming, [existing], [NODE1]) == {"node1": EXISTING_ANTI_AFFINITY}


def test_existing_anti_affinity_applies_to_a_pod_without_terms() -> None:
    existing = bound(
        "node1", SECURITYSCAN, anti=(term("zone", In("service", "securityscan", "value2")),)
    )
    assert reasons(pod(SECURITYSCAN), [existing], [NODE1]) == {"node1": EXISTING_ANTI_AFFINITY}


def test_existing_anti_affinity_that_does_not_match_skips_the_filter() -> None:
    existing = bound(
        "node1", SECURITYSCAN, anti=(term("zone", NotIn("service", "securityscan", "value2")),)
    )
    assert prefilter(pod(SECURITYSCAN), [existing], [NODE1]) is None


def test_own_anti_affinity_fails_before_the_existing_pods_symmetric_one() -> None:
    incoming = pod(
        SECURITYSCAN,
        anti=(term("region", Exists("service")), term("region", Exists("security"))),
    )
    existing = bound("node1", S1, anti=(term("zone", Exists("security")),))
    assert reasons(incoming, [existing], [NODE1]) == {"node1": ANTI_AFFINITY}


def test_symmetry_a1_partial_match_own_anti_affinity_fails() -> None:
    incoming = pod(
        SECURITYSCAN, anti=(term("zone", Exists("service")), term("zone", Exists("security")))
    )
    existing = bound("node1", S1, anti=(term("zone", Exists("security")),))
    assert reasons(incoming, [existing], [NODE1]) == {"node1": ANTI_AFFINITY}


def test_symmetry_a2_partial_match_existing_anti_affinity_fails() -> None:
    incoming = pod(S1, anti=(term("zone", Exists("security")),))
    existing = bound(
        "node1",
        SECURITYSCAN,
        anti=(term("zone", Exists("service")), term("zone", Exists("security"))),
    )
    assert reasons(incoming, [existing], [NODE1]) == {"node1": EXISTING_ANTI_AFFINITY}


def test_symmetry_b1_and_b2_each_side_matches_the_other() -> None:
    terms = (term("zone", Exists("abc")), term("zone", Exists("def")))
    incoming = pod({"abc": "", "xyz": ""}, anti=terms)
    existing = bound("node1", {"def": "", "xyz": ""}, anti=terms)
    assert reasons(incoming, [existing], [NODE1]) == {"node1": ANTI_AFFINITY}
    incoming = pod({"def": "", "xyz": ""}, anti=terms)
    existing = bound("node1", {"abc": "", "xyz": ""}, anti=terms)
    assert reasons(incoming, [existing], [NODE1]) == {"node1": ANTI_AFFINITY}


def test_affinity_with_namespace_selector() -> None:
    team1 = sel(In("team", "team1"))
    incoming = pod(S1, affinity=(term("region", In("service", "securityscan"), ns_selector=team1),))
    matching = bound("node1", SECURITYSCAN, namespace="subteam1.team1")
    assert reasons(incoming, [matching], [NODE1], TEAM_NAMESPACES) == {"node1": None}
    other_team = bound("node1", SECURITYSCAN, namespace="subteam1.team2")
    assert reasons(incoming, [other_team], [NODE1], TEAM_NAMESPACES) == {"node1": AFFINITY}


def test_anti_affinity_with_namespace_selector() -> None:
    team1 = sel(In("team", "team1"))
    incoming = pod(
        S1,
        namespace="subteam1.team1",
        anti=(term("zone", In("service", "securityscan"), ns_selector=team1),),
    )
    same_team = bound("node1", SECURITYSCAN, namespace="subteam2.team1")
    assert reasons(incoming, [same_team], [NODE1], TEAM_NAMESPACES) == {"node1": ANTI_AFFINITY}
    # An anti-affinity term that matches nothing can fail nowhere: the filter is skipped.
    other_team = bound("node1", SECURITYSCAN, namespace="subteam1.team2")
    assert prefilter(incoming, [other_team], [NODE1], TEAM_NAMESPACES) is None


def test_anti_affinity_with_empty_namespace_selector_matches_every_namespace() -> None:
    incoming = pod(
        S1,
        namespace="subteam1.team1",
        anti=(term("zone", In("service", "securityscan"), ns_selector=LabelSelector()),),
    )
    # Even a namespace the snapshot does not know: the empty selector is "everything".
    elsewhere = bound("node1", SECURITYSCAN, namespace="unlisted")
    assert reasons(incoming, [elsewhere], [NODE1], TEAM_NAMESPACES) == {"node1": ANTI_AFFINITY}


def test_namespaces_list_and_selector_are_united() -> None:
    team1 = sel(In("team", "team1"))
    t = term("region", In("service", "securityscan"), namespaces=("ops",), ns_selector=team1)
    incoming = pod(S1, affinity=(t,))
    in_list = bound("node1", SECURITYSCAN, namespace="ops")
    by_selector = bound("node1", SECURITYSCAN, namespace="subteam2.team1")
    neither = bound("node1", SECURITYSCAN, namespace="subteam2.team2")
    assert reasons(incoming, [in_list], [NODE1], TEAM_NAMESPACES) == {"node1": None}
    assert reasons(incoming, [by_selector], [NODE1], TEAM_NAMESPACES) == {"node1": None}
    assert reasons(incoming, [neither], [NODE1], TEAM_NAMESPACES) == {"node1": AFFINITY}


def test_existing_pods_term_namespace_selector_reads_the_incoming_pods_namespace() -> None:
    team1 = sel(In("team", "team1"))
    existing = bound(
        "node1",
        namespace="subteam1.team2",
        anti=(term("zone", Exists("security"), ns_selector=team1),),
    )
    incoming = pod(S1, namespace="subteam2.team1")
    assert reasons(incoming, [existing], [NODE1], TEAM_NAMESPACES) == {
        "node1": EXISTING_ANTI_AFFINITY
    }
    # Same pod from a team2 namespace: the existing pod's term does not look there.
    incoming = pod(S1, namespace="subteam2.team2")
    assert prefilter(incoming, [existing], [NODE1], TEAM_NAMESPACES) is None


def test_existing_pods_term_without_namespaces_means_its_own_namespace() -> None:
    existing = bound("node1", namespace="ns2", anti=(term("zone", Exists("security")),))
    assert prefilter(pod(S1, namespace="ns1"), [existing], [NODE1]) is None
    assert reasons(pod(S1, namespace="ns2"), [existing], [NODE1]) == {
        "node1": EXISTING_ANTI_AFFINITY
    }


def test_every_affinity_term_checks_its_own_namespaces() -> None:
    # The pod matches both selectors, but the second term looks only at "ops".
    incoming = pod(
        affinity=(
            term("region", In("service", "securityscan")),
            term("region", Exists("service"), namespaces=("ops",)),
        )
    )
    assert reasons(incoming, [existing_scan()], [NODE1]) == {"node1": AFFINITY}
    in_ops = bound("node1", SECURITYSCAN, namespace="ops")
    assert reasons(incoming, [existing_scan(), in_ops], [NODE1]) == {"node1": AFFINITY}


def test_first_pod_escape_needs_the_pod_in_its_terms_namespaces() -> None:
    nodes = [node("a", zone="z1")]
    own = pod({"app": "db"}, affinity=(term("zone", In("app", "db")),))
    assert reasons(own, [], nodes) == {"a": None}
    elsewhere = pod({"app": "db"}, affinity=(term("zone", In("app", "db"), namespaces=("ops",)),))
    assert reasons(elsewhere, [], nodes) == {"a": AFFINITY}


# ---- TestRequiredAffinityMultipleNodes --------------------------------------------------------

CHINA = node("node1", region="China")
CHINA_AZ1 = node("node2", region="China", az="az1")
INDIA = node("node3", region="India")


def test_affinity_holds_in_the_whole_domain_of_a_matching_pod() -> None:
    incoming = pod(affinity=(term("region", In("foo", "bar")),))
    existing = bound("node1", {"foo": "bar"})
    assert reasons(incoming, [existing], [CHINA, CHINA_AZ1, INDIA]) == {
        "node1": None,
        "node2": None,
        "node3": AFFINITY,
    }


def test_first_pod_of_a_self_affine_group_may_go_anywhere_with_the_keys() -> None:
    labels = {"foo": "bar", "service": "securityscan"}
    incoming = pod(
        labels,
        affinity=(term("zone", In("foo", "bar")), term("zone", In("service", "securityscan"))),
    )
    # The existing pod matches only the first term: nothing matches all, and the incoming pod
    # matches its own terms.
    existing = bound("nodeA", {"foo": "bar"})
    nodes = [node("nodeA", zone="az1", hostname="h1"), node("nodeB", zone="az2", hostname="h2")]
    assert reasons(incoming, [existing], nodes) == {"nodeA": None, "nodeB": None}


def test_first_pod_of_a_group_still_needs_the_topology_keys() -> None:
    labels = {"foo": "bar", "service": "securityscan"}
    incoming = pod(
        labels,
        affinity=(term("zone", In("foo", "bar")), term("zone", In("service", "securityscan"))),
    )
    existing = bound("nodeA", {"foo": "bar"})
    nodes = [
        node("nodeA", zoneLabel="az1", hostname="h1"),
        node("nodeB", zoneLabel="az2", hostname="h2"),
    ]
    assert reasons(incoming, [existing], nodes) == {"nodeA": AFFINITY, "nodeB": AFFINITY}


def test_first_pod_escape_closes_once_a_matching_pod_exists() -> None:
    incoming = pod({"app": "db"}, affinity=(term("zone", In("app", "db")),))
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    # No pod yet: the first one goes anywhere.
    assert reasons(incoming, [], nodes) == {"a": None, "b": None}
    # One in z1: the rest must join it.
    assert reasons(incoming, [bound("a", {"app": "db"})], nodes) == {"a": None, "b": AFFINITY}


def test_anti_affinity_covers_the_domain_of_a_matching_pod() -> None:
    incoming = pod(anti=(term("region", In("foo", "abc")),))
    existing = bound("nodeA", {"foo": "abc"})
    nodes = [node("nodeA", region="r1", hostname="nodeA"), node("nodeB", region="r1")]
    assert reasons(incoming, [existing], nodes) == {
        "nodeA": ANTI_AFFINITY,
        "nodeB": ANTI_AFFINITY,
    }


def test_anti_affinity_when_any_term_matches() -> None:
    incoming = pod(anti=(term("region", In("foo", "abc")), term("zone", In("service", "x"))))
    existing = bound("nodeA", {"service": "x"})
    nodes = [
        node("nodeA", region="r1", zone="z1"),
        node("nodeB", region="r1", zone="z1"),
        node("nodeC", region="r2", zone="z2"),
    ]
    assert reasons(incoming, [existing], nodes) == {
        "nodeA": ANTI_AFFINITY,
        "nodeB": ANTI_AFFINITY,
        "nodeC": None,
    }


def test_existing_anti_affinity_in_another_namespace_does_not_reach_the_pod() -> None:
    incoming = pod({"foo": "123"}, namespace="NS1", anti=(term("region", In("foo", "bar")),))
    records = [
        bound("nodeA", {"foo": "bar"}, namespace="NS1"),
        bound("nodeC", namespace="NS2", anti=(term("region", In("foo", "123")),)),
    ]
    nodes = [
        node("nodeA", region="China"),
        node("nodeB", region="China", az="az1"),
        node("nodeC", region="India"),
    ]
    assert reasons(incoming, records, nodes) == {
        "nodeA": ANTI_AFFINITY,
        "nodeB": ANTI_AFFINITY,
        "nodeC": None,
    }


HOSTS = [
    node("nodeA", region="r1", zone="z1", hostname="nodeA"),
    node("nodeB", region="r1", zone="z2", hostname="nodeB"),
]


def test_existing_anti_affinity_on_a_key_no_node_has_skips_the_filter() -> None:
    existing = bound("nodeA", anti=(term("invalid-node-label", Exists("foo")),))
    assert prefilter(pod({"foo": ""}), [existing], HOSTS) is None


def test_own_anti_affinity_needs_the_key_on_the_node() -> None:
    # The selector matches, but no node carries the topology key: no domain holds the pod.
    incoming = pod(anti=(term("invalid-node-label", Exists("foo")),))
    assert prefilter(incoming, [bound("nodeA", {"foo": ""})], HOSTS) is None


def test_existing_anti_affinity_of_several_pods_covers_all_nodes() -> None:
    records = [
        bound("nodeA", anti=(term("zone", Exists("foo")),)),
        bound("nodeA", anti=(term("region", Exists("bar")),)),
    ]
    assert reasons(pod({"foo": "", "bar": ""}), records, HOSTS) == {
        "nodeA": EXISTING_ANTI_AFFINITY,
        "nodeB": EXISTING_ANTI_AFFINITY,
    }


def test_own_anti_affinity_violated_by_a_different_pod_per_node() -> None:
    incoming = pod(anti=(term("zone", Exists("foo")), term("region", Exists("bar"))))
    records = [bound("nodeA", {"foo": ""}), bound("nodeB", {"bar": ""})]
    assert reasons(incoming, records, HOSTS) == {
        "nodeA": ANTI_AFFINITY,
        "nodeB": ANTI_AFFINITY,
    }


def test_existing_term_counts_only_when_selector_and_key_both_match() -> None:
    existing = bound(
        "nodeA", anti=(term("invalid-node-label", Exists("foo")), term("zone", Exists("bar")))
    )
    assert reasons(pod({"foo": "", "bar": ""}), [existing], HOSTS) == {
        "nodeA": EXISTING_ANTI_AFFINITY,
        "nodeB": None,
    }
    existing = bound("nodeA", anti=(term("region", Exists("foo")), term("zone", Exists("bar"))))
    assert reasons(pod({"foo": "", "bar": ""}), [existing], HOSTS) == {
        "nodeA": EXISTING_ANTI_AFFINITY,
        "nodeB": EXISTING_ANTI_AFFINITY,
    }


def test_own_term_counts_only_when_selector_and_key_both_match() -> None:
    incoming = pod(anti=(term("invalid-node-label", Exists("foo")), term("zone", Exists("bar"))))
    existing = bound("nodeA", {"foo": "", "bar": ""})
    assert reasons(incoming, [existing], HOSTS) == {"nodeA": ANTI_AFFINITY, "nodeB": None}
    incoming = pod(anti=(term("region", Exists("foo")), term("zone", Exists("bar"))))
    assert reasons(incoming, [existing], HOSTS) == {
        "nodeA": ANTI_AFFINITY,
        "nodeB": ANTI_AFFINITY,
    }


def test_existing_anti_affinity_leaves_only_the_third_zone() -> None:
    records = [
        bound("nodeA", anti=(term("zone", Exists("foo")), term("zone", Exists("labelA")))),
        bound("nodeB", anti=(term("zone", Exists("bar")), term("zone", Exists("labelB")))),
    ]
    nodes = [*HOSTS, node("nodeC", region="r1", zone="z3", hostname="nodeC")]
    assert reasons(pod({"foo": "", "bar": ""}), records, nodes) == {
        "nodeA": EXISTING_ANTI_AFFINITY,
        "nodeB": EXISTING_ANTI_AFFINITY,
        "nodeC": None,
    }


def test_affinity_terms_must_all_match_one_pod() -> None:
    incoming = pod(affinity=(term("region", Exists("foo")), term("zone", Exists("bar"))))
    nodes = [
        node("nodeA", region="r1", zone="z1", hostname="nodeA"),
        node("nodeB", region="r1", zone="z1", hostname="nodeB"),
    ]
    one_pod = [bound("nodeA", {"foo": "", "bar": ""})]
    assert reasons(incoming, one_pod, nodes) == {"nodeA": None, "nodeB": None}
    # Each term matched by a different pod: no pod matches all of them.
    two_pods = [bound("nodeA", {"foo": ""}), bound("nodeB", {"bar": ""})]
    assert reasons(incoming, two_pods, HOSTS) == {"nodeA": AFFINITY, "nodeB": AFFINITY}


# ---- beyond kube-scheduler's table: order, terminating pods, the snapshot ----------------------


def test_affinity_is_checked_before_the_anti_affinity_rules() -> None:
    # kube-scheduler v1.33's Filter: pod affinity, then pod anti-affinity, then existing pods'.
    incoming = pod(
        {"app": "web"},
        affinity=(term("zone", In("app", "db")),),
        anti=(term("zone", In("app", "cache")),),
    )
    records = [
        bound("b", {"app": "db"}),
        bound("a", {"app": "cache"}, anti=(term("zone", In("app", "web")),)),
    ]
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    assert reasons(incoming, records, nodes) == {"a": AFFINITY, "b": None}
    records.append(bound("b", {"app": "cache"}))
    assert reasons(incoming, records, nodes)["b"] == ANTI_AFFINITY


def test_terminating_pods_still_count_for_inter_pod_affinity() -> None:
    incoming = pod(anti=(term("zone", In("app", "db")),))
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    records = [bound("a", {"app": "db"}, terminating=True)]
    assert reasons(incoming, records, nodes) == {"a": ANTI_AFFINITY, "b": None}


def test_pods_on_nodes_outside_the_snapshot_are_ignored() -> None:
    incoming = pod(anti=(term("zone", In("app", "db")),))
    nodes = [node("a", zone="z1")]
    records = [
        bound("gone", {"app": "db"}),
        bound("gone", anti=(term("zone", Exists("app")),)),
    ]
    assert prefilter(incoming, records, nodes) is None


def test_the_incoming_pods_own_record_is_not_counted() -> None:
    incoming = pod({"app": "db"}, name="db-0", anti=(term("zone", In("app", "db")),))
    itself = bound("a", {"app": "db"}, name="db-0", anti=(term("zone", In("app", "db")),))
    assert prefilter(incoming, [itself], [node("a", zone="z1")]) is None


def test_a_missing_label_selector_matches_no_pod() -> None:
    no_selector = PodAffinityTerm(topology_key="zone")
    incoming = pod({"app": "db"}, affinity=(no_selector,))
    nodes = [node("a", zone="z1")]
    # Nothing matches, not even the pod itself: no node passes.
    assert reasons(incoming, [bound("a", {"app": "db"})], nodes) == {"a": AFFINITY}


# ---- TestPreferredAffinity (raw scores) -------------------------------------------------------

SCORE_NODES = [
    node("node1", region="China"),
    node("node2", region="India"),
    node("node3", az="az1"),
]


def test_no_preferred_terms_means_no_preferences() -> None:
    state = prefilter(pod(anti=(term("zone", Exists("x")),)), [bound("n", {"x": ""})], [])
    assert state is None
    state = prefilter(
        pod(anti=(term("region", Exists("x")),)), [bound("node1", {"x": ""})], SCORE_NODES
    )
    assert state is not None
    assert not state.has_preferences
    assert {n.name: state.score(n) for n in SCORE_NODES} == {"node1": 0, "node2": 0, "node3": 0}


def test_preferred_affinity_scores_the_domain_with_a_matching_pod() -> None:
    # kube-scheduler: node1 100, node2 0, node3 0 (node3 has the pod but not the key).
    incoming = pod(S1, preferred=(weighted(5, term("region", In("security", "S1"))),))
    records = [
        bound("node1", S1),
        bound("node2", {"security": "S2"}),
        bound("node3", S1),
    ]
    state = prefilter(incoming, records, SCORE_NODES)
    assert state is not None and state.has_preferences
    assert {n.name: state.score(n) for n in SCORE_NODES} == {"node1": 5, "node2": 0, "node3": 0}


def test_preferred_affinity_counts_every_matching_pod_in_the_domain() -> None:
    # kube-scheduler: China nodes 100, India nodes 0 (four matches against two).
    incoming = pod(S1, preferred=(weighted(6, term("region", In("security", "S2"))),))
    nodes = [
        node("node1", region="China"),
        node("node2", region="India"),
        node("node3", region="China"),
        node("node4", region="China"),
        node("node5", region="India"),
    ]
    s2 = {"security": "S2"}
    records = [bound(n, s2) for n in ("node1", "node1", "node2", "node3", "node4", "node5")]
    assert scores(incoming, records, nodes) == {
        "node1": 24,
        "node2": 12,
        "node3": 24,
        "node4": 24,
        "node5": 12,
    }


def test_preferred_affinity_terms_with_different_operators() -> None:
    # kube-scheduler: node1 20, node2 100, node3 0 — the raw 2, 10, 0 normalised.
    incoming = pod(
        S1,
        preferred=(
            weighted(8, term("region", NotIn("security", "S1"), In("security", "S2"))),
            weighted(2, term("region", Exists("security"), DoesNotExist("wrongkey"))),
        ),
    )
    records = [bound("node1", S1), bound("node2", {"security": "S2"}), bound("node3", S1)]
    assert scores(incoming, records, SCORE_NODES) == {"node1": 2, "node2": 10, "node3": 0}


def test_preferred_anti_affinity_lowers_the_domain_with_matching_pods() -> None:
    # kube-scheduler: node1 0, node2 100.
    incoming = pod(S1, anti_preferred=(weighted(5, term("az", In("security", "S1"))),))
    records = [bound("node1", S1), bound("node1", S1), bound("node2", {"security": "S2"})]
    nodes = [node("node1", az="az1"), node("node2", region="India")]
    assert scores(incoming, records, nodes) == {"node1": -10, "node2": 0}


def test_preferred_affinity_and_anti_affinity_add_up() -> None:
    incoming = pod(
        S1,
        preferred=(weighted(8, term("region", In("security", "S1"))),),
        anti_preferred=(weighted(5, term("az", In("security", "S2"))),),
    )
    nodes = [
        node("node1", region="China", az="az1"),
        node("node2", region="China", az="az2"),
        node("node3", region="India", az="az2"),
    ]
    records = [bound("node1", S1), bound("node3", {"security": "S2"})]
    assert scores(incoming, records, nodes) == {"node1": 8, "node2": 8 - 5, "node3": -5}


def test_preferred_terms_with_namespace_selector() -> None:
    t = term(
        "region",
        In("security", "S1"),
        namespaces=("subteam2.team2",),
        ns_selector=sel(In("team", "team1")),
    )
    incoming = pod(S1, namespace="subteam1.team1", preferred=(weighted(5, t),))
    records = [
        bound("node1", S1, namespace="subteam2.team1"),  # by the selector
        bound("node2", S1, namespace="subteam2.team2"),  # by the list
        bound("node2", S1, namespace="subteam1.team2"),  # neither
    ]
    assert scores(incoming, records, SCORE_NODES, TEAM_NAMESPACES) == {
        "node1": 5,
        "node2": 5,
        "node3": 0,
    }


def test_weights_that_cancel_out_leave_no_preference() -> None:
    t = term("region", In("security", "S1"))
    incoming = pod(S1, preferred=(weighted(5, t),), anti_preferred=(weighted(5, t),))
    assert prefilter(incoming, [bound("node1", S1)], SCORE_NODES) is None


def test_preferred_terms_matching_no_pod_skip_everything() -> None:
    incoming = pod(S1, preferred=(weighted(5, term("region", In("security", "S9"))),))
    assert prefilter(incoming, [bound("node1", S1)], SCORE_NODES) is None


def test_preferences_do_not_filter() -> None:
    incoming = pod(S1, anti_preferred=(weighted(100, term("region", In("security", "S1"))),))
    state = prefilter(incoming, [bound("node1", S1)], SCORE_NODES)
    assert state is not None
    assert [state.check(n) for n in SCORE_NODES] == [None, None, None]
    assert state.score(SCORE_NODES[0]) == -100


def test_existing_pods_anti_affinity_is_read_by_the_pairs_its_terms_require() -> None:
    """The snapshot keeps the existing pods' distinct required anti-affinity terms by one label
    pair each requires: the incoming pod reads only those under its own pairs, and those that
    require none (NotIn, Exists), whatever its labels; they leave with their pods."""
    state = ClusterState()
    state.set_node(node("n1", zone="z1"))
    names: dict[str, str] = {}  # a selector's repr -> the term's name

    def anti(key: str, *terms: LabelSelector) -> None:
        for i, s in enumerate(terms):
            names[repr(s)] = key + (str(i + 1) if len(terms) > 1 else "")
        state.put_record(
            PodRecord(
                key=f"{NS}/{key}",
                namespace=NS,
                node="n1",
                anti_required=tuple(PodAffinityTerm("zone", s) for s in terms),
            )
        )

    anti("a", LabelSelector(match_labels={"app": "web"}))
    anti(
        "b",
        LabelSelector(match_expressions=(Requirement("app", "In", ("db",)),)),
        LabelSelector(match_labels={"tier": "x"}),
    )
    anti("c", LabelSelector(match_expressions=(Requirement("app", "NotIn", ("web",)),)))

    def read(**labels: str) -> set[str]:
        found = state.domain_counts.anti_terms(labels)
        return {names[repr(t.term.label_selector)] for t in found}

    assert read(app="web") == {"a", "c"}
    assert read(app="db") == {"b1", "c"}
    assert read(tier="x", app="web") == {"a", "b2", "c"}
    assert read() == {"c"}
    nodes = NodeInputs(state.nodes)
    # The filter's answer is unchanged: c's NotIn term matches a pod labelled app=db.
    incoming = PodInput(NS, "p", labels={"app": "db"})
    found = prefilter_interpod(incoming, state.index, nodes, {}, state.domain_counts)
    assert found is not None and found.check(nodes["n1"]) == EXISTING_ANTI_AFFINITY
    # app=web, app=db, tier=x, and c's under no pair; then nothing.
    assert state.domain_counts.sizes()["anti_terms"] == 4
    for key in ("a", "b", "c"):
        state.drop_record(f"{NS}/{key}")
    assert read(app="web", tier="x") == set()
    assert state.domain_counts.sizes()["anti_terms"] == 0
