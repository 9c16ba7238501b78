"""A re-list of the bound pods taken in page by page (intake.py, kube/watch.py's Relist): each
pod is charged as its page arrives, and only the end of the LIST lets go of the pods the book
held bound that the LIST did not show."""

from __future__ import annotations

import msgspec

from scheduler.service.podbook import Stage
from scheduler.state.memory import MemoryStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica, node


async def test_a_paged_relist_frees_what_it_did_not_show_only_when_it_ends() -> None:
    clock = ManualClock(0.0)
    r = Replica(Apiserver(), MemoryStore(clock), clock, tuning=QUICK_RETRIES)
    a = r.api.create(MakePod().Name("a").Req(1).Obj())
    a = msgspec.structs.replace(a, node_name="n", annotations={"topo-scheduler.io/devices": "0"})
    await r.elect([node(2)], bound=[a])
    assert r.held("default/a") == ("n", [0]) and r.s.book.stage("default/a") is Stage.BOUND
    # The bound watch expired; its LIST shows b (bound meanwhile by someone) and not a (deleted).
    b = MakePod().Name("b").Req(1).Obj()
    b = msgspec.structs.replace(b, node_name="n", annotations={"topo-scheduler.io/devices": "1"})
    intake = r.s.intake
    intake.bound_list_begin()
    intake.bound_list_page([b])
    assert r.held("default/b") == ("n", [1])  # taken in as its page arrived
    assert r.held("default/a") == ("n", [0])  # a later page may still show it
    assert r.s.sizes()["intake"] == {
        "listing": 1,
        "listed-stale": 0,
        "listing-pending": 0,
        "set-aside": 0,
    }
    intake.bound_list_end(r.api.version)
    await r.settle()
    assert r.held("default/a") is None and r.s.book.get("default/a") is None
    assert r.held("default/b") == ("n", [1])
    assert r.s.sizes()["intake"] == {
        "listing": 0,
        "listed-stale": 0,
        "listing-pending": 0,
        "set-aside": 0,
    }
    assert "default/a" not in await r.records()  # its store record was released too
