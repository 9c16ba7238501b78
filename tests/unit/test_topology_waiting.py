"""Issue 32 item 7: a gang that needs no domain leaves the one kept for a gang waiting for a
required domain (``topology.yieldToRequired``, gangs/waiting.py), stepped by hand.

The cluster: block b1 of three racks of one 4-GPU node each (3 members of 4 GPUs, none in
one rack), block b2 of one rack of two nodes. A gang of 3 requiring a rack waits (no rack
holds it); b2's rack, the one with the most room for it, is kept for it.
"""

from __future__ import annotations

from scheduler.core.cycle import Unit, apply_decision, decide, done_waiting, note_waiting
from scheduler.core.gangs.waiting import kept_domains
from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.settings import CoreSettings, TopologySettings
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.domains import configured
from tests.unit.test_topology_domains import (
    LEVELS,
    annotated,
    gang_unit,
    member,
    node,
    placed_nodes,
    required,
)

PREFERRED_BLOCK = {"topo-scheduler.io/topology-preferred": "block"}
RACKS = {("b1", "r1"): 1, ("b1", "r2"): 1, ("b1", "r3"): 1, ("b2", "r1"): 2}


def cluster(yield_to_required: bool = True) -> ClusterState:
    topology = TopologySettings(levels=LEVELS, yield_to_required=yield_to_required)
    state = ClusterState(CoreSettings(topology=topology))
    for (block, rack), count in sorted(RACKS.items()):
        for i in range(count):
            assert state.set_node(node(f"{block}-{rack}-{i}", block, rack).Obj()) is None
    return state


def waiting_gang(state: ClusterState) -> Unit:
    """The gang of 3 requiring a rack, refused; the queue keeps it waiting and says so."""
    unit = gang_unit(*(annotated(member(i, job="w", n=3), required("rack")) for i in range(3)))
    decision = decide(state, unit)
    assert isinstance(decision, Unschedulable), decision
    note_waiting(state, unit)
    return unit


def preferring(n: int) -> Unit:
    return gang_unit(*(annotated(member(i, job="p", n=n), PREFERRED_BLOCK) for i in range(n)))


def blocks_of(decision: object) -> set[str]:
    return {name.split("-")[0] for name in placed_nodes(decision).values()}


def test_a_refused_required_gang_waits_and_keeps_the_rack_with_most_room() -> None:
    state = cluster()
    waiting_gang(state)
    assert set(state.gangs_waiting) == {"default/w"}
    hierarchy = state.gangs_waiting["default/w"].hierarchy
    assert hierarchy == configured(state.settings.topology)
    # b2/r1 fits 2 of its 3 members, every b1 rack 1.
    assert [p[:2] for p in kept_domains(state, "default/p", hierarchy)] == [("b2", "r1")]
    # Its own plans leave nothing out; a gang that waits no longer keeps nothing.
    assert kept_domains(state, "default/w", hierarchy) == []
    done_waiting(state, "default/w")
    assert kept_domains(state, "default/p", hierarchy) == []


def test_a_preferred_gang_leaves_the_kept_rack_while_another_block_holds_it() -> None:
    # Off: Kueue's BestFit takes b2, the tightest block for 2, and closes the kept rack.
    off = cluster(yield_to_required=False)
    waiting_gang(off)
    assert blocks_of(decide(off, preferring(2))) == {"b2"}
    # On (the default): b1's racks hold it (one block still), b2's rack stays for w.
    on = cluster()
    w = waiting_gang(on)
    p = preferring(2)
    decision = decide(on, p)
    assert blocks_of(decision) == {"b1"}
    apply_decision(on, decision, p)
    # A node of b2's rack comes back to the pool: w fits there now, and waits no longer.
    assert on.set_node(node("b2-r1-2", "b2", "r1").Obj()) is None
    placed = decide(on, w)
    assert set(placed_nodes(placed).values()) == {"b2-r1-0", "b2-r1-1", "b2-r1-2"}
    apply_decision(on, placed, w)
    done_waiting(on, "default/w")
    assert on.gangs_waiting == {}


def test_the_kept_rack_is_taken_when_nothing_else_holds_the_gang() -> None:
    # 4 members: without b2's rack only b1's 3 nodes are left, so it takes its ordinary plan.
    state = cluster()
    waiting_gang(state)
    decision = decide(state, preferring(4))
    assert isinstance(decision, Placed) and len(decision.placements) == 4
    assert blocks_of(decision) == {"b1", "b2"}


def test_only_gangs_with_a_required_level_wait_for_a_domain() -> None:
    state = cluster()
    # Applying a refusal records nothing (schedule_in_order and the live queue do not tell
    # the core yet, so run and simulate decide alike); the queue's note does.
    unit = gang_unit(*(annotated(member(i, job="w", n=3), required("rack")) for i in range(3)))
    refused = decide(state, unit)
    apply_decision(state, refused, unit)
    assert state.gangs_waiting == {}
    note_waiting(state, unit)
    assert set(state.gangs_waiting) == {"default/w"}
    # A gang without a required level waits for no domain.
    big = preferring(9)
    assert isinstance(decide(state, big), Unschedulable)
    note_waiting(state, big)
    assert set(state.gangs_waiting) == {"default/w"}


def test_only_the_gang_that_waited_longest_keeps_a_domain() -> None:
    state = cluster()
    first = gang_unit(*(annotated(member(i, job="z", n=3), required("rack")) for i in range(3)))
    note_waiting(state, first)
    waiting_gang(state)  # w starts waiting after z
    hierarchy = configured(state.settings.topology)
    kept = [("b2", "r1")]
    assert [p[:2] for p in kept_domains(state, "default/p", hierarchy)] == kept
    # Noted again (another refusal), z keeps its place at the head; w's own plans keep z's.
    note_waiting(state, first)
    assert list(state.gangs_waiting) == ["default/z", "default/w"]
    assert [p[:2] for p in kept_domains(state, "default/w", hierarchy)] == kept
    # z goes: w is the head, and its domain is kept for it (the same rack here).
    done_waiting(state, "default/z")
    assert [p[:2] for p in kept_domains(state, "default/p", hierarchy)] == kept
    assert kept_domains(state, "default/w", hierarchy) == []
