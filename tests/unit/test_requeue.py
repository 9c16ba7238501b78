"""core/filters/requeue.py: which waiting pods a pod appearing bound may help (queueing hints)."""

from __future__ import annotations

import msgspec

from scheduler.core.filters.requeue import helped_by_added
from tests.builders import MakePod

HOST = "kubernetes.io/hostname"


def test_a_pod_matching_a_required_affinity_term_helps() -> None:
    waiting = MakePod().Name("w").Req(1).PodAffinity(HOST, app="db").Obj()
    assert helped_by_added(waiting, MakePod().Name("db").Label("app", "db").Obj())
    assert not helped_by_added(waiting, MakePod().Name("web").Label("app", "web").Obj())
    other_ns = msgspec.structs.replace(MakePod().Name("db").Label("app", "db").Obj(), namespace="x")
    assert not helped_by_added(waiting, other_ns)


def test_anti_affinity_and_plain_requests_are_not_helped_by_a_pod_arriving() -> None:
    anti = MakePod().Name("w").Req(1).PodAntiAffinity(HOST, app="db").Obj()
    assert not helped_by_added(anti, MakePod().Name("db").Label("app", "db").Obj())
    plain = MakePod().Name("w").Req(8).Obj()
    assert not helped_by_added(plain, MakePod().Name("db").Label("app", "db").Obj())


def test_a_pod_counted_by_a_hard_spread_constraint_helps() -> None:
    waiting = MakePod().Name("w").Req(1).Label("app", "web").Spread(1, HOST, app="web").Obj()
    assert helped_by_added(waiting, MakePod().Name("w2").Label("app", "web").Obj())
    assert not helped_by_added(waiting, MakePod().Name("db").Label("app", "db").Obj())
