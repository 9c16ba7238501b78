"""The typed undo operations (core/snapshot/undo.py): each one, reverted, restores the snapshot
exactly as it was before the change it logged (every part: node accounting and classes,
holdings, orphans, gangs, records, nominations); a tentative scope reverts them all and the log
lives only while the outermost scope is open."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.core.model.decisions import Share
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.holdings import Holding
from scheduler.core.snapshot.nominations import Nominated
from scheduler.core.snapshot.podindex import PodRecord
from scheduler.core.snapshot.undo import Held, Operation, Recorded, Released, Renominated
from tests.builders import MakeNode, cluster
from tests.topologies import DGX1_V100


def picture(state: ClusterState) -> Any:
    """Everything the parts keep, as plain values."""
    nodes = {
        name: (
            s.whole,
            {
                i: (u.core, u.memory_mib, u.sgpu, u.pods, u.qos, u.qos_pods)
                for i, u in s.cards.items()
            },
            s.nominated,
            tuple(s.used),
            dict(s.requested),
            s.pod_count,
            {k: dict(v) for k, v in s.ports.items()},
            set(s.pods),
            s.free_mask,
        )
        for name, s in state.nodes.items()
    }
    return (
        nodes,
        dict(state.holdings),
        {key: state.held(key) for key in ("default/a", "default/b", "default/far")},
        {gang: set(keys) for gang, keys in state.gang_bound.items()},
        dict(state.index.records),
        {key: set(cls.names) for key, cls in state.classes.items()},
        dict(state.nominations),
        state.sizes(),
    )


def snapshot() -> ClusterState:
    state: ClusterState = cluster(
        MakeNode().Name("dgx").Links(DGX1_V100).Allocatable({"nvidia.com/gpu": 8, "cpu": "64"}),
        MakeNode().Name("other").Links(DGX1_V100),
    )
    state.put_record(PodRecord("default/a", "default", "dgx", requests=(("cpu", 2000),)))
    state.hold(Holding("default/a", "dgx", 0b11, gang="job", resources=(("nvidia.com/gpu", 2),)))
    state.hold(Holding("default/far", "nowhere", 0b1, gang="job"))  # an orphan
    state.nominate(Nominated(pod="default/pre", priority=5, node="dgx", devices=(6, 7)))
    return state


HOLD_B = Holding("default/b", "dgx", 0b1100, resources=(("nvidia.com/gpu", 2),))
SHARE_B = Holding("default/b", "other", 0, shares=(Share(5, "", 30, 1024),))
RECORD_B = PodRecord("default/b", "default", "other", requests=(("cpu", 500),))
RECORD_A2 = PodRecord("default/a", "default", "dgx", requests=(("cpu", 4000),))
NOMINATED_2 = Nominated(pod="default/pre", priority=5, node="other", devices=(0,))
NOMINATED_3 = Nominated(pod="default/pre3", priority=1, node="dgx", devices=(4,))

# Each change, and the operation it logs.
CHANGES: dict[str, tuple[Callable[[ClusterState], object], Callable[[ClusterState], Operation]]] = {
    "hold": (lambda s: s.hold(HOLD_B), lambda s: Held(HOLD_B)),
    "hold a share": (lambda s: s.hold(SHARE_B), lambda s: Held(SHARE_B)),
    "hold an orphan": (
        lambda s: s.hold(Holding("default/b", "gone", 1, gang="job")),
        lambda s: Held(Holding("default/b", "gone", 1, gang="job")),
    ),
    "release": (
        lambda s: s.release(s.holdings["default/a"]),
        lambda s: Released(s.holdings["default/a"]),
    ),
    "record a new pod": (lambda s: s.put_record(RECORD_B), lambda s: Recorded("default/b", None)),
    "record a pod again": (
        lambda s: s.put_record(RECORD_A2),
        lambda s: Recorded("default/a", s.index.records["default/a"]),
    ),
    "drop a record": (
        lambda s: s.drop_record("default/a"),
        lambda s: Recorded("default/a", s.index.records["default/a"]),
    ),
    "nominate": (lambda s: s.nominate(NOMINATED_3), lambda s: Renominated("default/pre3", None)),
    "nominate elsewhere": (
        lambda s: s.nominate(NOMINATED_2),
        lambda s: Renominated("default/pre", s.nominations["default/pre"]),
    ),
    "unnominate": (
        lambda s: s.unnominate("default/pre"),
        lambda s: Renominated("default/pre", s.nominations["default/pre"]),
    ),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_each_operation_reverts_exactly_what_it_changed(change: str) -> None:
    state = snapshot()
    before = picture(state)
    do, logged = CHANGES[change]
    op = logged(state)  # read before the change: what it was
    do(state)
    assert picture(state) != before
    op.undo(state)
    assert picture(state) == before


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_scope_logs_each_change_and_reverts_it(change: str) -> None:
    state = snapshot()
    before = picture(state)
    do, _ = CHANGES[change]
    with state.tentative():
        do(state)
        assert state.sizes()["undo"] >= 1
        assert picture(state) != before
    assert picture(state) == before
    assert not state._undo.open


def test_nested_scopes_revert_to_their_own_mark_and_the_log_goes_with_the_outer_one() -> None:
    state = snapshot()
    before = picture(state)
    with state.tentative():
        state.hold(HOLD_B)
        middle = picture(state)
        with state.tentative():
            state.drop_record("default/a")
            state.unnominate("default/pre")
        assert picture(state) == middle
        assert state.sizes()["undo"] == 1
    assert picture(state) == before and state.sizes()["undo"] == 0


def test_a_scope_reverts_on_an_exception_too() -> None:
    state = snapshot()
    before = picture(state)
    with pytest.raises(RuntimeError), state.tentative():
        state.hold(HOLD_B)
        raise RuntimeError("planning failed")
    assert picture(state) == before and not state._undo.open


def test_outside_a_scope_nothing_is_logged() -> None:
    state = snapshot()
    state.hold(HOLD_B)
    state.drop_record("default/a")
    assert state.sizes()["undo"] == 0
