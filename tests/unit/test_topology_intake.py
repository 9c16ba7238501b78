"""Kueue and KAI Topology objects in the live scheduler's snapshot (issue 21): watch events and
re-lists set it and wake the pods that wait; a pod naming a Topology waits for that watch."""

from __future__ import annotations

from scheduler.core.model import names
from scheduler.core.model.objects import TopologyInput, TopologyLevel
from scheduler.core.snapshot.watched import TOPOLOGIES
from scheduler.kube.topologies import KAI_TOPOLOGIES, KUEUE_TOPOLOGIES
from tests.builders import MakePod
from tests.unit.test_podgroup_status import IntakeHarness


def kai(name: str, *labels: str) -> TopologyInput:
    return TopologyInput("KAI", name, tuple(TopologyLevel(label) for label in labels))


def test_topology_events_and_relists_set_the_snapshot_and_wake() -> None:
    h = IntakeHarness()
    t = kai("dc", "block", "rack")
    h.intake.event(TOPOLOGIES, "ADDED", t)
    assert h.state.inputs.topologies == {t.key: t} and h.wakes == 1
    h.intake.event(TOPOLOGIES, "MODIFIED", t)  # the same levels: nothing the core reads
    assert h.wakes == 1
    kueue = TopologyInput("Kueue", "default", (TopologyLevel("rack"),))
    h.intake.replace(TOPOLOGIES, [kueue], "Kueue")
    h.intake.replace(TOPOLOGIES, [kai("other", "rack")], "KAI")
    assert set(h.state.inputs.topologies) == {kueue.key, "KAI/other"}
    h.intake.event(TOPOLOGIES, "DELETED", kai("other"))
    h.intake.replace(TOPOLOGIES, [], "Kueue")  # its CRD went away
    assert h.state.inputs.topologies == {} and h.wakes == 5


def test_a_pod_naming_a_topology_waits_for_its_watch_to_list() -> None:
    h = IntakeHarness({KAI_TOPOLOGIES.name: False, KUEUE_TOPOLOGIES.name: True})
    pod = MakePod().Name("a").Req(4).Annotation(names.KAI_TOPOLOGY_ANNOTATION, "dc").Obj()
    assert not h.intake.watches_ready(pod)
    assert h.asked == [KAI_TOPOLOGIES.name, "dra"]  # DRA's: a DeviceClass may back the GPUs
    kueue = (
        MakePod()
        .Name("k")
        .Req(4)
        .Annotation(names.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION, "rack")
        .Obj()
    )
    assert h.intake.watches_ready(kueue)
    assert h.asked[-2] == KUEUE_TOPOLOGIES.name
