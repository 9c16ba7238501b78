"""Memos (core/memo.py, core/snapshot/memos.py): bounded, oldest answer first out, and each
snapshot's own (the core keeps no process-wide state)."""

from __future__ import annotations

import pytest

from scheduler.core.cycle import decide, group_units
from scheduler.core.resources.memo import Memo
from scheduler.core.settings import MemoSettings
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.memos import Memos
from tests.builders import MakeNode, MakePod, cluster
from tests.topologies import DGX1_V100


def test_a_full_memo_drops_its_oldest_answer() -> None:
    memo: Memo[str, int] = Memo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    memo.put("a", 10)  # a known key: replaced, nothing dropped
    assert (memo.get("a"), memo.get("b"), len(memo)) == (10, 2, 2)
    memo.put("c", 3)
    assert (memo.get("a"), memo.get("b"), memo.get("c"), len(memo)) == (None, 2, 3, 2)


def test_a_memo_holds_at_least_one_answer() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Memo(0)


def test_a_snapshots_memos_stay_within_their_bounds() -> None:
    state: ClusterState = cluster(MakeNode().Name("dgx").Links(DGX1_V100))
    state.memos = Memos(MemoSettings(asks=4, requests=4))
    for i in range(10):  # ten specs: ten cpu requests
        pod = MakePod().Name(f"p{i}").Req(1).Requests(cpu=f"{i + 1}00m").Obj()
        (unit,) = group_units([pod])
        decide(state, unit)
    assert len(state.memos.asks) <= 4 and len(state.memos.requests) <= 4
    assert len(state.memos.asks) > 0 and len(state.memos.requests) > 0


def test_two_snapshots_share_no_memo() -> None:
    a: ClusterState = cluster(MakeNode().Name("dgx").Links(DGX1_V100))
    b: ClusterState = cluster(MakeNode().Name("dgx").Links(DGX1_V100))
    (unit,) = group_units([MakePod().Name("p").Req(2).Obj()])
    decide(a, unit)
    assert len(a.memos.asks) == 1 and len(b.memos.asks) == 0
    assert a.nodes["dgx"].inventory is not None and b.nodes["dgx"].inventory is not None
    assert a.nodes["dgx"].inventory.topology is not b.nodes["dgx"].inventory.topology
