"""NodeUnschedulable, TaintToleration, NodeAffinity and NodePorts stepped by hand (kube-scheduler's
node_affinity_test.go, taint_toleration_test.go and node_ports_test.go as guides)."""

from __future__ import annotations

from scheduler.core.filters.node import (
    NODE_AFFINITY,
    PORTS,
    UNSCHEDULABLE,
    affinity_score,
    node_affinity,
    port_conflict,
    unschedulable,
    untolerated_taint,
)
from scheduler.core.model.labels import requirement_holds
from scheduler.core.model.objects import (
    HostPort,
    NodeInput,
    NodeSelectorTerm,
    Requirement,
    Taint,
    Toleration,
)
from scheduler.core.resources.ports import charge_ports
from tests.builders import MakeNode, MakePod, cluster, schedule


def node(name: str = "n1", **labels: str) -> NodeInput:
    return NodeInput(name, labels={k.replace("_", "-"): v for k, v in labels.items()})


def test_operators() -> None:
    labels = {"zone": "a", "rack": "7"}
    assert requirement_holds(Requirement("zone", "In", ("a", "b")), labels)
    assert not requirement_holds(Requirement("zone", "NotIn", ("a",)), labels)
    assert requirement_holds(Requirement("missing", "NotIn", ("a",)), labels)
    assert requirement_holds(Requirement("zone", "Exists"), labels)
    assert requirement_holds(Requirement("missing", "DoesNotExist"), labels)
    assert requirement_holds(Requirement("rack", "Gt", ("6",)), labels)
    assert not requirement_holds(Requirement("rack", "Lt", ("7",)), labels)
    assert not requirement_holds(Requirement("zone", "Gt", ("1",)), labels)  # not a number
    assert not requirement_holds(Requirement("missing", "Gt", ("1",)), labels)


def test_terms_are_ored_and_requirements_anded_with_the_node_selector() -> None:
    pod = (
        MakePod()
        .NodeSelector("gpu", "v100")
        .NodeAffinityIn("zone", "a")
        .NodeAffinityIn("zone", "b")
        .Obj()
    )
    assert node_affinity(pod, node(zone="b", gpu="v100")) is None
    assert node_affinity(pod, node(zone="b")) == NODE_AFFINITY
    assert node_affinity(pod, node(zone="c", gpu="v100")) == NODE_AFFINITY


def test_an_empty_term_matches_no_node_and_match_fields_read_the_name() -> None:
    empty = MakePod().NodeAffinityTerm(NodeSelectorTerm()).Obj()
    assert node_affinity(empty, node()) == NODE_AFFINITY
    pinned = (
        MakePod()
        .NodeAffinityTerm(
            NodeSelectorTerm(match_fields=(Requirement("metadata.name", "In", ("n2",)),))
        )
        .Obj()
    )
    assert node_affinity(pinned, node("n2")) is None
    assert node_affinity(pinned, node("n1")) == NODE_AFFINITY


def test_preferred_terms_add_their_weights() -> None:
    pod = MakePod().PreferNode(5, "zone", "a").PreferNode(3, "disk", "ssd").Obj()
    assert affinity_score(pod, node(zone="a", disk="ssd")) == 8
    assert affinity_score(pod, node(zone="b", disk="ssd")) == 3


def test_cordoned_nodes_take_only_pods_that_tolerate_the_cordon_taint() -> None:
    cordoned = NodeInput("n", unschedulable=True)
    assert unschedulable(cordoned, ()) == UNSCHEDULABLE
    toleration = Toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoSchedule")
    assert unschedulable(cordoned, (toleration,)) is None


def test_the_first_untolerated_taint_is_named() -> None:
    tainted = NodeInput(
        "n",
        taints=(
            Taint("soft", "PreferNoSchedule"),
            Taint("dedicated", "NoSchedule", "ml"),
            Taint("gpu", "NoExecute"),
        ),
    )
    assert untolerated_taint(tainted, ()) == "node(s) had untolerated taint {dedicated: ml}"
    ok = Toleration("dedicated", "Equal", "ml")
    assert untolerated_taint(tainted, (ok,)) == "node(s) had untolerated taint {gpu: }"
    assert untolerated_taint(tainted, (ok, Toleration(operator="Exists"))) is None


def test_host_ports_conflict_on_protocol_port_and_overlapping_ips() -> None:
    used: dict[tuple[str, int], dict[str, int]] = {}
    charge_ports(used, (HostPort(8080, "TCP", "127.0.0.1"),), +1)
    assert port_conflict((HostPort(8080, "UDP"),), used) is None
    assert port_conflict((HostPort(8080, "TCP", "127.0.0.2"),), used) is None
    assert port_conflict((HostPort(8080, "TCP", "127.0.0.1"),), used) == PORTS
    assert port_conflict((HostPort(8080, "TCP", "0.0.0.0"),), used) == PORTS
    charge_ports(used, (HostPort(9090),), +1)
    assert port_conflict((HostPort(9090, "TCP", "10.0.0.1"),), used) == PORTS
    charge_ports(used, (HostPort(9090),), -1)
    charge_ports(used, (HostPort(8080, "TCP", "127.0.0.1"),), -1)
    assert used == {}


# ---- through the core -----------------------------------------------------------------------


def gpu_node(name: str, **labels: str) -> MakeNode:
    n = MakeNode().Name(name).GPUs(8)
    for k, v in labels.items():
        n = n.Label(k.replace("_", "."), v)
    return n


def test_required_affinity_excludes_the_wrong_instance_type() -> None:
    kind = "node.kubernetes.io/instance-type"
    state = cluster(
        gpu_node("a").Label(kind, "g5.xlarge"),
        gpu_node("b").Label(kind, "p4d.24xlarge"),
    )
    pod = MakePod().Name("train").Req(2).NodeAffinityIn(kind, "p4d.24xlarge")
    (decision,) = schedule(state, pod)
    assert decision.placements[0].node == "b"


def test_a_host_port_in_use_sends_the_pod_elsewhere_and_reads_like_kube_scheduler() -> None:
    web = MakePod().Name("exporter").HostPort(9100).Bound("a")
    state = cluster(gpu_node("a"), running=(web,))
    pod = MakePod().Name("p").Req(1).HostPort(9100)
    (decision,) = schedule(state, pod)
    assert decision.reason == (
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    )


def test_preferred_affinity_ranks_after_the_gpu_set_score() -> None:
    # Both nodes are equal for the GPU rules; the preference picks the later name.
    state = cluster(gpu_node("a", zone="x"), gpu_node("b", zone="y"))
    pod = MakePod().Name("p").Req(1).PreferNode(10, "zone", "y")
    (decision,) = schedule(state, pod)
    assert decision.placements[0].node == "b"


def test_reasons_are_sorted_as_text_like_kube_scheduler() -> None:
    state = cluster(
        gpu_node("a", zone="x"),
        gpu_node("b", zone="x"),
        MakeNode().Name("c").GPUs(2).Label("zone", "y"),
        MakeNode().Name("d").NoGPUs(),
    )
    pod = MakePod().Name("p").Req(4).NodeSelector("zone", "y")
    (decision,) = schedule(state, pod)
    assert decision.reason == (
        "0/4 nodes are available: 1 has fewer than 4 GPUs in total, 1 is not a GPU node, "
        "2 node(s) didn't match Pod's node affinity/selector."
    )
