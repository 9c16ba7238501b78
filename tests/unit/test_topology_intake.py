"""Kueue and KAI Topology objects in the live scheduler's snapshot (issue 21): watch events and
re-lists set it and wake the pods that wait; a pod naming a Topology waits for that watch."""

from __future__ import annotations

from scheduler.core.model import names
from scheduler.core.model.objects import TopologyInput, TopologyLevel
from scheduler.kube.topologies import KAI_TOPOLOGIES, KUEUE_TOPOLOGIES
from tests.builders import MakePod
from tests.unit.test_podgroup_status import IntakeHarness


def kai(name: str, *labels: str) -> TopologyInput:
    return TopologyInput("KAI", name, tuple(TopologyLevel(label) for label in labels))


def test_topology_events_and_relists_set_the_snapshot_and_wake() -> None:
    h = IntakeHarness()
    t = kai("dc", "block", "rack")
    h.intake.topology_event("ADDED", t)
    assert h.state.topologies == {t.key: t} and h.wakes == 1
    h.intake.topology_event("MODIFIED", t)  # the same levels: nothing the core reads
    assert h.wakes == 1
    kueue = TopologyInput("Kueue", "default", (TopologyLevel("rack"),))
    h.intake.replace_topologies("Kueue", [kueue])
    h.intake.replace_topologies("KAI", [kai("other", "rack")])
    assert set(h.state.topologies) == {kueue.key, "KAI/other"}
    h.intake.topology_event("DELETED", kai("other"))
    h.intake.replace_topologies("Kueue", [])  # its CRD went away
    assert h.state.topologies == {} and h.wakes == 5


def test_a_pod_naming_a_topology_waits_for_its_watch_to_list() -> None:
    h = IntakeHarness({KAI_TOPOLOGIES.name: False, KUEUE_TOPOLOGIES.name: True})
    pod = MakePod().Name("a").Req(4).Annotation(names.KAI_TOPOLOGY_ANNOTATION, "dc").Obj()
    assert not h.intake.watches_ready(pod)
    assert h.asked == [KAI_TOPOLOGIES.name]
    kueue = (
        MakePod()
        .Name("k")
        .Req(4)
        .Annotation(names.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION, "rack")
        .Obj()
    )
    assert h.intake.watches_ready(kueue)
    assert h.asked[-1] == KUEUE_TOPOLOGIES.name
