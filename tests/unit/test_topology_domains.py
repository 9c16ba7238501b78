"""Issue 21: cross-node topology, each rule stepped by hand.

The cluster of most tests: blocks of racks of 4-GPU nodes, each rack one NVLink clique
(``nvidia.com/gpu.clique`` = ``<block uuid>.<rack>``), levels ``block`` and ``rack`` configured.
"""

from __future__ import annotations

import json

import pytest

from scheduler.core.cycle import Unit, decide
from scheduler.core.formats.assignment import assignment_annotations
from scheduler.core.gangs.constraints import rank_order
from scheduler.core.gangs.domainchoice import Tree, plans, shortfall
from scheduler.core.model.decisions import Placed, Unschedulable, Waiting
from scheduler.core.model.objects import (
    NetworkTopologyInput,
    PodGroupInput,
    TopologyInput,
    TopologyLevel,
)
from scheduler.core.settings import CoreSettings, TopologySettings
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.domains import configured, kueue_hierarchy, of_topology
from tests.builders import MakeNode, MakePod, schedule

BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
CLIQUE = "nvidia.com/gpu.clique"
LEVELS = (TopologyLevel(BLOCK, "block"), TopologyLevel(RACK, "rack"))


def settings(
    compact: bool = True, levels: tuple[TopologyLevel, ...] = LEVELS, spill: bool = True
) -> CoreSettings:
    return CoreSettings(
        topology=TopologySettings(levels=levels, compact_gangs=compact, spill_broken_first=spill)
    )


def node(name: str, block: str | None, rack: str | None, gpus: int = 4) -> MakeNode:
    n = MakeNode().Name(name).GPUs(gpus)
    if block is not None:
        n = n.Label(BLOCK, block)
    if rack is not None:
        n = n.Label(RACK, rack)
        n = n.Label(CLIQUE, f"uuid-{block}.{rack}")
    return n


def topo_cluster(racks: dict[tuple[str, str], int], **kw: object) -> ClusterState:
    """``racks``: (block, rack) -> number of 4-GPU nodes, named ``<block>-<rack>-<i>``."""
    state = ClusterState(settings(**kw))  # type: ignore[arg-type]
    for (block, rack), count in sorted(racks.items()):
        for i in range(count):
            assert state.set_node(node(f"{block}-{rack}-{i}", block, rack).Obj()) is None
    return state


def member(i: int, job: str = "job", n: int = 4, gpus: int = 4, **annotations: str) -> MakePod:
    pod = MakePod().Name(f"{job}-{i}").Req(gpus).Gang(job, n)
    pod = pod.Label("batch.kubernetes.io/job-completion-index", str(i))
    for key, value in annotations.items():
        pod = pod.Annotation(key.replace("__", "/").replace("_", "-"), value)
    return pod


def gang_unit(*pods: MakePod) -> Unit:
    objs = tuple(p.Obj() for p in pods)
    return Unit(f"default/{pods[0].Obj().labels['gpu-topology']}", objs)


def placed_nodes(decision: object) -> dict[str, str]:
    assert isinstance(decision, Placed), decision
    return {p.pod.split("/")[1]: p.node for p in decision.placements}


def required(level: str) -> dict[str, str]:
    return {"topo-scheduler.io/topology-required": level}


def annotated(pod: MakePod, annotations: dict[str, str]) -> MakePod:
    for key, value in annotations.items():
        pod = pod.Annotation(key, value)
    return pod


# ---- the hierarchy -----------------------------------------------------------------------------


def test_levels_from_config_then_nvlink_levels_then_hostname() -> None:
    hierarchy = configured(settings().topology)
    assert [lv.name for lv in hierarchy.levels] == [
        "block",
        "rack",
        "nvlink-domain",
        "nvlink",
        "kubernetes.io/hostname",
    ]
    n = node("n1", "b1", "r1").Obj()
    # nvlink-domain is the clique value before its last ".", nvlink the whole value.
    assert hierarchy.path(n) == ("b1", "r1", "uuid-b1", "uuid-b1.r1")
    assert hierarchy.find(CLIQUE) == 3  # the label key names the whole value's level
    assert hierarchy.find("rack") == hierarchy.find(RACK) == 1
    # A node without the rack label is in block b1 and in no domain below it.
    assert hierarchy.path(node("n2", "b1", None).Obj()) == ("b1",)
    off = configured(TopologySettings(levels=LEVELS, accelerator_label=""))
    assert [lv.name for lv in off.levels] == ["block", "rack", "kubernetes.io/hostname"]


def test_kueue_and_kai_topology_objects_are_hierarchies() -> None:
    kueue = TopologyInput("Kueue", "default", (TopologyLevel(BLOCK), TopologyLevel(RACK)))
    kai = TopologyInput("KAI", "gb200", (TopologyLevel(BLOCK, "spine"), TopologyLevel(CLIQUE)))
    h = of_topology(kai)
    assert [lv.name for lv in h.levels] == ["spine", CLIQUE, "kubernetes.io/hostname"]
    assert h.find("spine") == h.find(BLOCK) == 0
    found = kueue_hierarchy(RACK, {kueue.key: kueue, kai.key: kai})
    assert found is not None and found.source == "Kueue Topology default"
    assert kueue_hierarchy("other", {kueue.key: kueue}) is None


# ---- constraint sources --------------------------------------------------------------------


def test_ours_required_keeps_the_gang_in_one_rack_tightest_first() -> None:
    # Rack r1 holds 3 nodes, r2 exactly 2, r3 4: a gang of 2 x 4 GPUs goes to r2 (BestFit).
    state = topo_cluster({("b1", "r1"): 3, ("b1", "r2"): 2, ("b2", "r3"): 4})
    pods = [annotated(member(i, n=2), required("rack")) for i in range(2)]
    got = placed_nodes(decide(state, gang_unit(*pods)))
    assert got == {"job-0": "b1-r2-0", "job-1": "b1-r2-1"}


def test_required_rack_shortfall_names_the_best_rack_and_how_many_come_close() -> None:
    state = topo_cluster({("b1", "r07"): 3, ("b1", "r08"): 2, ("b2", "r01"): 3})
    pods = [annotated(member(i, n=4), required("rack")) for i in range(4)]
    d = decide(state, gang_unit(*pods))
    assert isinstance(d, Unschedulable)
    assert d.reason == (
        "gang default/job: needs 4 pods in one rack; the best rack fits 3 (block=b1,rack=r07), "
        "3 racks fit 2 or more"
    )


def test_kueue_required_topology_by_label_key() -> None:
    state = topo_cluster({("b1", "r1"): 2, ("b1", "r2"): 2})
    # r1's first node is busy: only r2 holds both members.
    state.add_bound_pod(MakePod().Name("busy").Req(4).Bound("b1-r1-0", "0,1,2,3").Obj())
    pods = [
        annotated(member(i, n=2), {"kueue.x-k8s.io/podset-required-topology": RACK})
        for i in range(2)
    ]
    got = placed_nodes(decide(state, gang_unit(*pods)))
    assert set(got.values()) == {"b1-r2-0", "b1-r2-1"}


def test_kueue_chosen_domain_is_final() -> None:
    state = topo_cluster({("b1", "r1"): 2, ("b1", "r2"): 2})
    pods = [
        annotated(member(i, n=2), {"kueue.x-k8s.io/podset-required-topology": RACK}).NodeSelector(
            RACK, "r2"
        )
        for i in range(2)
    ]
    d = decide(state, gang_unit(*pods))
    assert set(placed_nodes(d).values()) == {"b1-r2-0", "b1-r2-1"}
    assert isinstance(d, Placed)
    assert dict(d.placements[0].topology)["rack"] == "r2"


def test_kai_topology_levels_by_alias_and_waiting_for_the_topology() -> None:
    state = topo_cluster({("b1", "r1"): 1, ("b1", "r2"): 2})
    kai = {
        "kai.scheduler/topology": "gb200",
        "kai.scheduler/topology-required-placement": "rack-alias",
    }
    pods = [annotated(member(i, n=2), kai) for i in range(2)]
    d = decide(state, gang_unit(*pods))
    assert isinstance(d, Waiting)
    assert "waiting for KAI Topology gb200" in d.reason
    state.inputs.topologies.put(
        TopologyInput("KAI", "gb200", (TopologyLevel(BLOCK), TopologyLevel(RACK, "rack-alias")))
    )
    assert set(placed_nodes(decide(state, gang_unit(*pods))).values()) == {"b1-r2-0", "b1-r2-1"}


def test_volcano_hard_tier_one_is_the_narrowest_level_above_hostname() -> None:
    state = topo_cluster({("b1", "r1"): 1, ("b1", "r2"): 2}, levels=LEVELS)
    state.inputs.pod_groups.put(
        PodGroupInput(
            "scheduling.volcano.sh",
            "default",
            "job",
            min_member=2,
            network_topology=NetworkTopologyInput("hard", highest_tier_allowed=3),
        )
    )
    pods = [
        MakePod().Name(f"job-{i}").Req(4).Annotation("scheduling.k8s.io/group-name", "job").Obj()
        for i in range(2)
    ]
    # tier 1 = nvlink, 2 = nvlink-domain, 3 = rack: both members in one rack.
    assert set(placed_nodes(decide(state, Unit("default/job", tuple(pods)))).values()) == {
        "b1-r2-0",
        "b1-r2-1",
    }
    state.inputs.pod_groups.put(
        PodGroupInput(
            "scheduling.volcano.sh",
            "default",
            "job",
            min_member=2,
            network_topology=NetworkTopologyInput("hard", highest_tier_allowed=9),
        )
    )
    d = decide(state, Unit("default/job", tuple(pods)))
    assert isinstance(d, Unschedulable)
    assert "highestTierAllowed: tier 9, but the config has 4 level(s) above hostname" in d.reason


def test_disagreeing_sources_keep_the_gang_waiting_naming_both() -> None:
    state = topo_cluster({("b1", "r1"): 2})
    both = {
        "topo-scheduler.io/topology-required": "rack",
        "kueue.x-k8s.io/podset-required-topology": BLOCK,
    }
    pods = [annotated(member(i, n=2), both) for i in range(2)]
    d = decide(state, gang_unit(*pods))
    assert isinstance(d, Waiting)
    assert "topology sources disagree" in d.reason
    assert "topo-scheduler.io/topology-required=rack" in d.reason
    assert f"kueue.x-k8s.io/podset-required-topology={BLOCK}" in d.reason
    # The same level by alias and by key agrees.
    same = {
        "topo-scheduler.io/topology-required": "rack",
        "kueue.x-k8s.io/podset-required-topology": RACK,
    }
    pods = [annotated(member(i, n=2), same) for i in range(2)]
    assert isinstance(decide(state, gang_unit(*pods)), Placed)


def test_members_disagreeing_wait() -> None:
    state = topo_cluster({("b1", "r1"): 2})
    pods = [annotated(member(0, n=2), required("rack")), member(1, n=2)]
    d = decide(state, gang_unit(*pods))
    assert isinstance(d, Waiting)
    assert "members disagree on topology" in d.reason


def test_unknown_level_is_never_silently_ignored() -> None:
    state = topo_cluster({("b1", "r1"): 2})
    pods = [annotated(member(i, n=2), required("rak")) for i in range(2)]
    d = decide(state, gang_unit(*pods))
    assert isinstance(d, Unschedulable)
    assert "'rak' is not a level of the config" in d.reason


# ---- the joint choice ----------------------------------------------------------------------


def test_consecutive_ranks_share_a_node() -> None:
    state = ClusterState(settings())
    for i in range(2):
        state.set_node(node(f"n{i}", "b1", "r1", gpus=8).Obj())
    # Names in another order than ranks: ranks 0-3 on one node, 4-7 on the other.
    pods = [
        MakePod()
        .Name(f"w-{name}")
        .Req(2)
        .Gang("w", 8)
        .Label("batch.kubernetes.io/job-completion-index", str(rank))
        for rank, name in enumerate("hgfedcba")
    ]
    (d,) = schedule(state, *pods)
    assert isinstance(d, Placed)
    by_rank = {p.rank: p.node for p in d.placements}
    assert {by_rank[r] for r in range(4)} == {"n0"}
    assert {by_rank[r] for r in range(4, 8)} == {"n1"}


def test_rank_order_reads_the_labels_in_order_then_names() -> None:
    pods = [
        MakePod().Name("c").Obj(),
        MakePod().Name("b").Label("training.kubeflow.org/replica-index", "1").Obj(),
        MakePod().Name("a").Label("apps.kubernetes.io/pod-index", "0").Obj(),
    ]
    assert [p.name for p in rank_order(pods)] == ["a", "b", "c"]


def test_slices_each_in_one_nvlink() -> None:
    # Two cliques of 3 nodes: 4 members in slices of 2 -> each clique takes one whole slice,
    # not 3 + 1.
    state = topo_cluster({("b1", "r1"): 3, ("b1", "r2"): 3})
    ask = {
        "topo-scheduler.io/topology-slice-required": "nvlink",
        "topo-scheduler.io/topology-slice-size": "2",
        "topo-scheduler.io/topology-preferred": "block",
    }
    pods = [annotated(member(i, n=4), ask) for i in range(4)]
    d = decide(state, gang_unit(*pods))
    assert isinstance(d, Placed)
    rack = {p.rank: dict(p.topology)["rack"] for p in d.placements}
    assert rack[0] == rack[1] and rack[2] == rack[3]


def test_tree_counts_whole_slices_and_fills_largest_first_last_tightest() -> None:
    # Hand-made counts: racks fit 3, 3, 2, 1 members; 7 members spread over block b1 give
    # 3 + 3 + 1 (Kueue's BestFit example), the 1 on the tightest rack that holds it.
    hierarchy = configured(settings(levels=LEVELS).topology)
    fits = [  # (path, members that fit, nodes)
        (("b1", "r1"), 3, 1),
        (("b1", "r2"), 3, 1),
        (("b1", "r3"), 2, 1),
        (("b1", "r4"), 1, 1),
    ]
    tree = Tree(hierarchy, fits, None)
    (plan,) = list(plans(tree, None, 7, False, ()))
    assert [(c.path, c.count) for c in plan] == [
        (("b1", "r1"), 3),
        (("b1", "r2"), 3),
        (("b1", "r4"), 1),
    ]


def test_spill_over_the_cluster_spares_the_largest_block_in_as_few_blocks() -> None:
    # No block holds 7 members (b1 fits 6, b2 4, b3 3, b4 1). Kueue's BestFit
    # (spillBrokenFirst off): the largest first, b1's 6, then the tightest that holds the 1
    # left, b4: two blocks, b1 emptied. On: largest first takes two blocks (6 + 4 >= 7); the
    # blocks after b1 still hold 7 in two (4 + 3), so b1 is left out; after b2 they do not
    # (3 + 1), so the order is b2, b3, b4: b2's 4 (its racks largest first, the last the
    # tightest), then the tightest that holds the 3 left, b3. Two blocks again, b1 kept.
    hierarchy = configured(settings(levels=LEVELS).topology)
    fits = [
        (("b1", "r1"), 3, 1),
        (("b1", "r2"), 3, 1),
        (("b2", "r1"), 2, 1),
        (("b2", "r2"), 2, 1),
        (("b3", "r1"), 3, 1),
        (("b4", "r1"), 1, 1),
    ]

    def plan(broken_first: bool, n: int) -> list[tuple[tuple[str, ...], int]] | None:
        tree = Tree(hierarchy, fits, None, broken_first)
        found = next(plans(tree, None, n, False, ()), None)
        return None if found is None else [(c.path, c.count) for c in found]

    assert plan(False, 7) == [(("b1", "r1"), 3), (("b1", "r2"), 3), (("b4", "r1"), 1)]
    assert plan(True, 7) == [(("b2", "r1"), 2), (("b2", "r2"), 2), (("b3", "r1"), 3)]
    # 14: every block either way (all four needed); 3: b3 holds them, no spill.
    assert plan(True, 14) == plan(False, 14)
    assert plan(True, 3) == plan(False, 3) == [(("b3", "r1"), 3)]
    assert plan(True, 15) is None


def test_spill_broken_first_through_decide() -> None:
    # The same on nodes (one 4-GPU member per node), a 7-member gang preferred in a block that
    # no block holds: off, b1's 6 nodes and b4's; on (the default), b2's 4 and b3's 3.
    racks = {("b1", "r1"): 3, ("b1", "r2"): 3, ("b2", "r1"): 2, ("b2", "r2"): 2}
    racks |= {("b3", "r1"): 3, ("b4", "r1"): 1}
    pods = [
        annotated(member(i, n=7), {"topo-scheduler.io/topology-preferred": "block"})
        for i in range(7)
    ]
    off = placed_nodes(decide(topo_cluster(racks, spill=False), gang_unit(*pods)))
    assert {n.rsplit("-", 2)[0] for n in off.values()} == {"b1", "b4"}
    on = placed_nodes(decide(topo_cluster(racks), gang_unit(*pods)))
    assert sorted(on.values()) == [
        "b2-r1-0",
        "b2-r1-1",
        "b2-r2-0",
        "b2-r2-1",
        "b3-r1-0",
        "b3-r1-1",
        "b3-r1-2",
    ]


def test_preferred_climbs_to_the_block_when_no_rack_holds_the_gang() -> None:
    state = topo_cluster({("b1", "r1"): 2, ("b1", "r2"): 2, ("b2", "r1"): 3})
    pods = [
        annotated(member(i, n=4), {"topo-scheduler.io/topology-preferred": "rack"})
        for i in range(4)
    ]
    d = decide(state, gang_unit(*pods))
    blocks = {dict(p.topology)["block"] for p in d.placements}  # type: ignore[union-attr]
    assert blocks == {"b1"}  # one block (b2 holds only 3)


def test_compact_by_default_and_off() -> None:
    racks = {("b1", "r1"): 1, ("b1", "r2"): 2, ("b2", "r3"): 2}
    pods = [member(i, n=2) for i in range(2)]
    # Without topology the first names win (b1-r1-0 and b1-r2-0: two racks); compact: one rack.
    on = placed_nodes(decide(topo_cluster(racks), gang_unit(*pods)))
    assert set(on.values()) == {"b1-r2-0", "b1-r2-1"}
    off = placed_nodes(decide(topo_cluster(racks, compact=False), gang_unit(*pods)))
    assert set(off.values()) == {"b1-r1-0", "b1-r2-0"}


def test_a_replaced_member_sticks_to_the_bound_members_rack() -> None:
    # Without the bound member, rack r1 (2 free nodes) is as tight as r2 and has fewer nodes.
    state = topo_cluster({("b1", "r1"): 2, ("b1", "r2"): 3})
    bound = annotated(member(0, n=2), required("rack")).Bound("b1-r2-0", "0,1,2,3")
    assert state.add_bound_pod(bound.Obj()) is None
    replaced = annotated(member(1, n=2), required("rack"))
    d = decide(state, Unit("default/job", (replaced.Obj(),)))
    assert placed_nodes(d) == {"job-1": "b1-r2-1"}


def test_shortfall_is_arithmetic_on_the_tree() -> None:
    hierarchy = configured(settings().topology)
    tree = Tree(hierarchy, [(("b", "r07"), 12, 3), (("b", "r01"), 8, 2)], None)
    from scheduler.core.gangs.constraints import Constraint

    c = Constraint(hierarchy=hierarchy, required=1)
    assert shortfall(tree, c, 16) == (
        "needs 16 pods in one rack; the best rack fits 12 (block=b,rack=r07), 2 racks fit 8 or more"
    )


def test_assignment_gains_topology_and_rank() -> None:
    state = topo_cluster({("b1", "r1"): 2})
    pods = [annotated(member(i, n=2), required("rack")) for i in range(2)]
    d = decide(state, gang_unit(*pods))
    assert isinstance(d, Placed)
    record = json.loads(assignment_annotations(d.placements[1])["topo-scheduler.io/assignment"])
    assert record["rank"] == 1
    assert record["topology"] == {
        "block": "b1",
        "rack": "r1",
        "nvlink-domain": "uuid-b1",
        "nvlink": "uuid-b1.r1",
    }


def test_no_topology_labels_no_topology_fields() -> None:
    state = ClusterState()
    state.set_node(MakeNode().Name("n").GPUs(8).Obj())
    pods = [member(i, n=2) for i in range(2)]
    d = decide(state, gang_unit(*pods))
    assert isinstance(d, Placed)
    record = json.loads(assignment_annotations(d.placements[0])["topo-scheduler.io/assignment"])
    assert "topology" not in record and "rank" not in record


@pytest.mark.parametrize("size", ["0", "x"])
def test_bad_slice_size_is_a_reason(size: str) -> None:
    state = topo_cluster({("b1", "r1"): 2})
    ask = {
        "topo-scheduler.io/topology-slice-required": "rack",
        "topo-scheduler.io/topology-slice-size": size,
    }
    pods = [annotated(member(i, n=2), ask) for i in range(2)]
    d = decide(state, gang_unit(*pods))
    assert isinstance(d, Unschedulable)
    assert "topo-scheduler.io/topology-slice-size" in d.reason


# ---- preemption within one domain ------------------------------------------------------------


def test_preemption_chooses_victims_within_one_rack_and_keeps_to_it() -> None:
    from scheduler.core.preemption.preempt import Preemption, preempt

    # Rack r1: one node busy with one low pod, one free. Rack r2: both nodes busy with one low
    # pod each. The gang (2 x 4 GPUs, one rack) needs one eviction in r1, two in r2.
    state = topo_cluster({("b1", "r1"): 2, ("b1", "r2"): 2})
    for name, node_name in (("low-a", "b1-r1-0"), ("low-b", "b1-r2-0"), ("low-c", "b1-r2-1")):
        pod = MakePod().Name(name).Req(4).Created(f"2026-01-01T00:00:0{len(name)}Z")
        assert state.add_bound_pod(pod.Bound(node_name, "0,1,2,3").Obj()) is None
    pods = [annotated(member(i, n=2), required("rack")).Priority(10) for i in range(2)]
    unit = gang_unit(*pods)
    assert isinstance(decide(state, unit), Unschedulable)
    result = preempt(state, unit)
    assert isinstance(result, Preemption), result
    assert [v.pod for v in result.victims] == ["default/low-a"]
    assert result.domain == "block=b1,rack=r1"
    assert "(in block=b1,rack=r1)" in result.summary
    assert {p.node for p in result.placements} == {"b1-r1-0", "b1-r1-1"}
    # While the victim leaves, the nominations keep the gang to rack r1, even once r2 is free.
    for nomination in result.nominations:
        state.nominate(nomination)
    state.remove_pod("default/low-b")
    state.remove_pod("default/low-c")
    assert isinstance(decide(state, unit), Unschedulable)
    state.remove_pod("default/low-a")
    assert set(placed_nodes(decide(state, unit)).values()) == {"b1-r1-0", "b1-r1-1"}


def test_required_hostname_keeps_the_gang_on_one_node_the_tightest() -> None:
    state = ClusterState(settings())
    state.set_node(node("small", "b1", "r1", gpus=4).Obj())
    state.set_node(node("big", "b1", "r1", gpus=8).Obj())
    host = required("kubernetes.io/hostname")
    pairs = [annotated(member(i, n=2, gpus=2), host) for i in range(2)]
    assert set(placed_nodes(decide(state, gang_unit(*pairs))).values()) == {"small"}
    fours = [annotated(member(i, job="big", n=2, gpus=4), host) for i in range(2)]
    assert set(placed_nodes(decide(state, gang_unit(*fours))).values()) == {"big"}
    eights = [annotated(member(i, job="huge", n=2, gpus=8), host) for i in range(2)]
    d = decide(state, gang_unit(*eights))
    assert isinstance(d, Unschedulable)
    assert d.reason == "gang default/huge: needs 2 pods on one node; no node holds them"


def test_slices_of_the_hostname_level_are_refused_not_ignored() -> None:
    state = topo_cluster({("b1", "r1"): 2})
    ask = {
        "topo-scheduler.io/topology-slice-required": "kubernetes.io/hostname",
        "topo-scheduler.io/topology-slice-size": "2",
    }
    d = decide(state, gang_unit(*(annotated(member(i, n=2), ask) for i in range(2))))
    assert isinstance(d, Unschedulable)
    assert "slices of the hostname level are not supported" in d.reason


def test_volcano_soft_is_preferred_and_a_soft_tier_beyond_the_levels_is_dropped() -> None:
    from scheduler.core.gangs.constraints import volcano_ask
    from scheduler.core.snapshot.domains import configured as hierarchy_of

    group = PodGroupInput("scheduling.volcano.sh", "default", "job", min_member=2)
    hierarchy = hierarchy_of(settings().topology)
    soft = volcano_ask(group, NetworkTopologyInput("soft", highest_tier_name="rack"), hierarchy)
    assert soft is not None and (soft.required, soft.preferred) == (None, "rack")
    assert (
        volcano_ask(group, NetworkTopologyInput("soft", highest_tier_allowed=9), hierarchy) is None
    )
    hard = volcano_ask(group, NetworkTopologyInput("hard", highest_tier_allowed=1), hierarchy)
    assert hard is not None and hard.required == "nvlink"  # tier 1: the narrowest above hostname
