"""A bound pod's event that repeats (the kubelet's status updates, the confirm after our own
Binding) leaves the snapshot as releasing and holding the unchanged holding again would, without
doing either (ClusterState.add_bound_pod); stepped by hand on the core."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core.model.decisions import Placed
from scheduler.core.model.objects import PodInput
from scheduler.core.snapshot.cluster import ClusterState
from tests.builders import MakeNode, MakePod, cluster, schedule


def gpu_node(name: str) -> MakeNode:
    return (
        MakeNode()
        .Name(name)
        .GPUs(8)
        .Allocatable({"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 8})
    )


def pod(name: str, gpus: int = 1) -> MakePod:
    return MakePod().Name(name).Req(gpus).Requests(cpu="4", memory="1Gi")


NODES = [gpu_node(f"n{i}") for i in range(10)]
# Other schedulers' pods, a gang's two members among them, enough to make a target workload.
RUNNING = (
    *(pod(f"r{i}").Bound(f"n{i % 6}", str(i // 6)) for i in range(36)),
    pod("g0", 2).Gang("job", 2).Bound("n0", "6,7"),
    pod("g1", 2).Gang("job", 2).Bound("n1", "6,7"),
)


def seen(state: Any) -> object:
    """What a decision can read of the snapshot: holdings, the nodes' charges and classes, the
    gangs' bound members and the changed ones, the sizes (orphans, records, profile), the
    fragmentation target."""
    target = state.profile.target()
    return (
        dict(state.holdings),
        {
            name: (n.whole, list(n.used), dict(n.pods), state.node_index.class_of(name).key[1:])
            for name, n in state.nodes.items()
        },
        state.take_gangs_changed(),
        state.sizes(),
        None if target is None else target.key,
    )


def placements(state: Any) -> list[tuple[str, tuple[int, ...]]]:
    out: list[tuple[str, tuple[int, ...]]] = []
    for decision in schedule(state, *(pod(f"new{i}", 1 + i % 2) for i in range(12))):
        assert isinstance(decision, Placed), decision
        out.extend((p.node, p.devices) for p in decision.placements)
    return out


@pytest.mark.parametrize("key", ["default/r5", "default/g1", "default/mine"])
def test_a_repeated_bound_event_leaves_what_a_release_and_hold_would(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, slow = cluster(*NODES, running=RUNNING), cluster(*NODES, running=RUNNING)
    for state in (fast, slow):
        # our own: assumed from a decision first, then its Binding's confirm
        (decision,) = schedule(state, pod("mine", 2))
        assert isinstance(decision, Placed)
    (placement,) = decision.placements
    events: dict[str, PodInput] = {p.Obj().key: p.Obj() for p in RUNNING}
    devices = ",".join(map(str, placement.devices))
    events["default/mine"] = pod("mine", 2).Bound(placement.node, devices).Obj()
    for state in (fast, slow):
        assert state.add_bound_pod(events["default/mine"]) is None
        state.take_gangs_changed()
    released: list[str] = []
    release = ClusterState.release

    def counted(self: ClusterState, holding: Any) -> None:
        released.append(holding.pod)
        release(self, holding)

    monkeypatch.setattr(ClusterState, "release", counted)
    assert fast.add_bound_pod(events[key]) is None
    assert released == []  # the fast path: nothing released, nothing held again
    slow.release(slow.holdings[key])
    assert slow.add_bound_pod(events[key]) is None
    assert seen(fast) == seen(slow)
    assert placements(fast) == placements(slow)


def test_a_repeated_event_of_a_double_claim_still_warns() -> None:
    state = cluster(*NODES)
    first = pod("a").Bound("n0", "3").Obj()
    second = pod("b").Bound("n0", "3").Obj()
    assert state.add_bound_pod(first) is None
    warning = state.add_bound_pod(second)
    assert warning is not None and "GPU 3" in warning
    assert state.add_bound_pod(second) == warning  # released and held again: the same warning
