"""The gauges /metrics computes at scrape time from the snapshot (Metrics.observe_cluster): whole
GPUs and free GPUs per node class (vendor, model), the gangs waiting (PodBook.gangs_in) and the
pending pods by reason (PodBook.pending_reasons)."""

from __future__ import annotations

import json

from scheduler.service.metrics import Metrics
from scheduler.service.podbook import SCHEDULABLE_STAGES, PodBook, Stage
from scheduler.service.podbook import Event as E
from scheduler.state.memory import MemoryStore
from tests.builders import MakeNode, MakePod, cluster
from tests.clock import ManualClock
from tests.lifecycle import Apiserver, Replica, node


def gauge(metrics: Metrics, name: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels["vendor"], s.labels["model"]): s.value
        for m in metrics.registry.collect()
        if m.name == name
        for s in m.samples
    }


def with_model(node: MakeNode, model: str) -> MakeNode:
    inventory = {**node.inventory(), "model": model}
    return node.RawInventory(json.dumps(inventory))


def test_free_gpus_per_node_class_and_a_class_that_leaves() -> None:
    state = cluster(
        with_model(MakeNode().Name("a").GPUs(8), "V100"),
        with_model(MakeNode().Name("b").GPUs(8), "V100"),
        MakeNode().Name("c").GPUs(4),  # no model in its inventory
        MakeNode().Name("cpu").NoGPUs(),
        running=(
            MakePod().Name("r").Req(2).Bound("a", "0,1"),
            MakePod().Name("s").Req(1).Bound("c", "3"),
        ),
    )
    metrics = Metrics()
    metrics.observe_cluster(state, 0, {})
    assert gauge(metrics, "scheduler_node_gpus") == {
        ("nvidia", "V100"): 16,
        ("nvidia", "unknown"): 4,
    }
    assert gauge(metrics, "scheduler_node_free_gpus") == {
        ("nvidia", "V100"): 14,
        ("nvidia", "unknown"): 3,
    }
    state.remove_node("c")
    metrics.observe_cluster(state, 0, {})
    assert gauge(metrics, "scheduler_node_free_gpus") == {("nvidia", "V100"): 14}


def test_gangs_waiting_counts_gangs_with_a_pending_member() -> None:
    book = PodBook()
    pods = {
        "default/a-0": MakePod().Name("a-0").Gang("a", 2).Obj(),
        "default/a-1": MakePod().Name("a-1").Gang("a", 2).Obj(),
        "default/b-0": MakePod().Name("b-0").Gang("b", 1).Obj(),
        "default/solo": MakePod().Name("solo").Obj(),
    }
    for key, pod in pods.items():
        transition = book.handle(key, pod.uid, E.PENDING_SEEN, 0.0)
        assert transition is not None and transition.entry is not None
        book.set_pod(transition.entry, pod)
    assert {e.stage for e in book.entries.values()} <= SCHEDULABLE_STAGES
    assert book.gangs_in(SCHEDULABLE_STAGES) == 2
    metrics = Metrics()
    metrics.observe_cluster(cluster(), book.gangs_in(SCHEDULABLE_STAGES), {})
    assert metrics.registry.get_sample_value("scheduler_gangs_waiting") == 2
    # Gang b's only member leaves: one gang waits.
    book.handle("default/b-0", pods["default/b-0"].uid, E.PENDING_LEFT, 0.0)
    assert book.gangs_in(SCHEDULABLE_STAGES) == 1
    assert book.gangs_in(frozenset({Stage.BINDING})) == 0


async def test_leader_epoch_is_the_epoch_it_leads_under_and_zero_once_lost() -> None:
    clock = ManualClock(0.0)
    r = Replica(Apiserver(), MemoryStore(clock), clock)
    registry = r.s.metrics.registry
    assert registry.get_sample_value("scheduler_leader_epoch") == 0
    epoch = await r.elect([node(8)])
    assert epoch >= 1
    assert registry.get_sample_value("scheduler_leader_epoch") == epoch
    assert registry.get_sample_value("scheduler_leader") == 1
    # The cluster gauges the scrape sets, through the scheduler's own snapshot and book.
    r.pending(MakePod().Name("g-0").Req(1).Gang("g", 2).Obj())
    r.pending(MakePod().Name("big").Req(16).Obj())
    r.s.observe_cluster()
    assert registry.get_sample_value("scheduler_gangs_waiting") == 1
    by_reason = "scheduler_pending_pods_by_reason"
    assert registry.get_sample_value(by_reason, {"reason": "untried"}) == 2
    # One attempt each: the gang waits for its second member, the big pod fits no node.
    await r.step()
    await r.step()
    await r.settle()
    r.s.observe_cluster()
    assert registry.get_sample_value(by_reason, {"reason": "untried"}) is None  # none left
    assert registry.get_sample_value(by_reason, {"reason": "waiting"}) == 1
    assert registry.get_sample_value(by_reason, {"reason": "unschedulable"}) == 1
    free = registry.get_sample_value(
        "scheduler_node_free_gpus", {"vendor": "nvidia", "model": "unknown"}
    )
    assert free is not None and free > 0
    await r.s.on_lost()
    assert registry.get_sample_value("scheduler_leader_epoch") == 0
