"""Issue 32 item 7: a gang that needs no domain leaves the one kept for the gang that waits
longest for a required domain (``topology.yieldToRequired``, gangs/waiting.py), stepped by hand.

Which gang waits is read from the snapshot alone: its pending pods (``set_pending``, what the
shells see pending), nothing of the gang held, in the queue's order (priority, the oldest
member's creationTimestamp, the gang key). So ``run`` and ``simulate`` keep the same domain.

The cluster: block b1 of three racks of one 4-GPU node each (3 members of 4 GPUs, none in
one rack), block b2 of one rack of two nodes. A gang of 3 requiring a rack waits (no rack
holds it); b2's rack, the one with the most room for it, is kept for it.
"""

from __future__ import annotations

from typing import Any

from scheduler.config import Config, parse_config
from scheduler.core.cycle import Unit, apply_decision, decide, schedule_in_order
from scheduler.core.gangs.waiting import kept_domains, waiting
from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.settings import CoreSettings, TopologySettings
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.domains import configured
from scheduler.sim.loader import Loaded
from scheduler.sim.simulate import simulate
from scheduler.state.memory import MemoryStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica
from tests.unit.test_topology_domains import (
    BLOCK,
    LEVELS,
    RACK,
    annotated,
    gang_unit,
    member,
    node,
    placed_nodes,
    required,
)

PREFERRED_BLOCK = {"topo-scheduler.io/topology-preferred": "block"}
RACKS = {("b1", "r1"): 1, ("b1", "r2"): 1, ("b1", "r3"): 1, ("b2", "r1"): 2}
EARLY, LATE = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"


def cluster(yield_to_required: bool = True) -> ClusterState:
    topology = TopologySettings(levels=LEVELS, yield_to_required=yield_to_required)
    state = ClusterState(CoreSettings(topology=topology))
    for (block, rack), count in sorted(RACKS.items()):
        for i in range(count):
            assert state.set_node(node(f"{block}-{rack}-{i}", block, rack).Obj()) is None
    return state


def requiring(job: str = "w", created: str = EARLY, priority: int = 0) -> list[MakePod]:
    """A gang of 3 requiring a rack: no rack holds it."""
    return [
        annotated(member(i, job=job, n=3), required("rack")).Created(created).Priority(priority)
        for i in range(3)
    ]


def preferring(n: int, created: str = LATE) -> list[MakePod]:
    return [annotated(member(i, job="p", n=n), PREFERRED_BLOCK).Created(created) for i in range(n)]


def pend(state: ClusterState, pods: list[MakePod]) -> Unit:
    """The gang's pods pending in the snapshot (the watch showed them)."""
    unit = gang_unit(*pods)
    for pod in unit.pods:
        state.set_pending(pod)
    return unit


def kept(state: ClusterState, gang: str = "default/p") -> list[tuple[str, ...]]:
    hierarchy = configured(state.settings.topology)
    return [p[:2] for p in kept_domains(state, gang, hierarchy)]


def blocks_of(decision: object) -> set[str]:
    return {name.split("-")[0] for name in placed_nodes(decision).values()}


def test_a_pending_required_gang_holding_nothing_keeps_the_rack_with_most_room() -> None:
    state = cluster()
    w = pend(state, requiring())
    assert isinstance(decide(state, w), Unschedulable)
    assert [key for key, _ in waiting(state)] == ["default/w"]
    # b2/r1 fits 2 of its 3 members, every b1 rack 1.
    assert kept(state) == [("b2", "r1")]
    # Its own plans leave nothing out.
    assert kept(state, "default/w") == []
    # One member bound (or assumed): the gang holds something, it waits for no domain.
    state.set_node(node("b2-r1-2", "b2", "r1").Obj())
    placed = decide(state, w)
    assert isinstance(placed, Placed)
    apply_decision(state, placed, w)
    assert kept(state) == [] and list(waiting(state)) == []
    # The watch shows them bound: no longer pending.
    node_of = placed_nodes(placed)
    for pod in requiring():
        name = pod.Obj().name
        assert state.add_bound_pod(pod.Bound(node_of[name], "0,1,2,3").Obj()) is None
    assert state.pending_gangs == {}


def test_a_gang_gone_or_gated_or_without_a_required_level_waits_for_nothing() -> None:
    state = cluster()
    w = pend(state, requiring())
    pend(state, preferring(9))  # a preference: waits for no domain
    assert [key for key, _ in waiting(state)] == ["default/w"]
    for pod in w.pods:
        state.drop_pending(pod.key)
    assert list(waiting(state)) == [] and set(state.pending_gangs) == {"default/p"}
    gated = requiring()
    gated[0] = gated[0].Gate("example.com/quota")
    pend(state, gated)
    assert list(waiting(state)) == []
    assert state.sizes()["pending_gang_pods"] == 12


def test_the_head_is_the_queue_order_priority_then_the_oldest_member_then_the_key() -> None:
    state = cluster()
    pend(state, requiring("z", LATE))
    pend(state, requiring("w", EARLY))
    pend(state, requiring("y", EARLY))
    assert [key for key, _ in waiting(state)] == ["default/w", "default/y", "default/z"]
    pend(state, requiring("x", LATE, priority=10))
    assert next(key for key, _ in waiting(state)) == "default/x"
    # Off: nothing is kept.
    off = cluster(yield_to_required=False)
    pend(off, requiring())
    assert kept(off) == []


def test_a_head_with_no_room_in_any_domain_of_its_level_is_passed_over() -> None:
    state = cluster()
    big = [
        annotated(member(i, job="g", n=2, gpus=8), required("rack")).Created(EARLY)
        for i in range(2)
    ]
    pend(state, big)  # 8 GPUs a member: no node of 4 holds one
    pend(state, requiring("w", LATE))
    assert [key for key, _ in waiting(state)] == ["default/g", "default/w"]
    assert kept(state) == [("b2", "r1")]  # w's


def test_a_preferred_gang_leaves_the_kept_rack_while_another_block_holds_it() -> None:
    # Simulate's loop (schedule_in_order) puts every pod pending first: w is refused, and p
    # leaves its rack. Before the rule read the snapshot, only a queue that said so kept it.
    pods = [p.Obj() for p in (*requiring(), *preferring(2))]
    off = schedule_in_order(cluster(yield_to_required=False), pods)
    assert isinstance(off[0], Unschedulable) and blocks_of(off[1]) == {"b2"}  # BestFit
    on = cluster()
    w_refused, p_placed = schedule_in_order(on, pods)
    assert isinstance(w_refused, Unschedulable)
    assert blocks_of(p_placed) == {"b1"}  # one block still; b2's rack stays for w
    # A node of b2's rack comes back to the pool: w fits there now.
    assert on.set_node(node("b2-r1-2", "b2", "r1").Obj()) is None
    w = gang_unit(*requiring())
    assert set(placed_nodes(decide(on, w)).values()) == {"b2-r1-0", "b2-r1-1", "b2-r1-2"}


def test_the_kept_rack_is_taken_when_nothing_else_holds_the_gang() -> None:
    # 4 members: without b2's rack only b1's 3 nodes are left, so it takes its ordinary plan.
    state = cluster()
    pend(state, requiring())
    decision = decide(state, gang_unit(*preferring(4)))
    assert isinstance(decision, Placed) and len(decision.placements) == 4
    assert blocks_of(decision) == {"b1", "b2"}


# ---- run and simulate keep the same domain --------------------------------------------------


def topology_config(yield_to_required: bool) -> Config:
    levels = [{"nodeLabel": BLOCK, "alias": "block"}, {"nodeLabel": RACK, "alias": "rack"}]
    return parse_config({"topology": {"levels": levels, "yieldToRequired": yield_to_required}})


def nodes() -> list[Any]:
    return [
        node(f"{block}-{rack}-{i}", block, rack).Obj()
        for (block, rack), count in sorted(RACKS.items())
        for i in range(count)
    ]


def backlog() -> list[Any]:
    """The gang requiring a rack (older), then the gang preferring a block."""
    return [p.Obj() for p in (*requiring(), *preferring(2))]


async def live_placements(config: Config) -> dict[str, str | None]:
    clock = ManualClock(0.0)
    r = Replica(
        Apiserver(), MemoryStore(clock), clock, tuning=QUICK_RETRIES, settings=config.to_core()
    )
    await r.elect(nodes(), [])
    for pod in backlog():
        r.pending(pod)
    while await r.step() is not None:
        pass
    await r.settle()
    held = {p.key: r.s.state.held(p.key) for p in backlog()}
    return {k: (h.node if h is not None else None) for k, h in held.items()}


def simulated_placements(config: Config) -> dict[str, str | None]:
    result = simulate(Loaded(nodes=nodes(), pods=backlog()), config)
    held = {p.key: result.state.held(p.key) for p in backlog()}
    return {k: (h.node if h is not None else None) for k, h in held.items()}


async def test_run_and_simulate_keep_the_same_rack_for_the_waiting_gang() -> None:
    for on in (True, False):
        config = topology_config(on)
        live = await live_placements(config)
        assert live == simulated_placements(config), on
        assert all(live[f"default/w-{i}"] is None for i in range(3))
        blocks = {live[f"default/p-{i}"].split("-")[0] for i in range(2)}  # type: ignore[union-attr]
        assert blocks == ({"b1"} if on else {"b2"}), on
