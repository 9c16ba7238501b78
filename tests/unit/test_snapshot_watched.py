"""The keyed collection of watched inputs (core/snapshot/watched.py): replace and event say
whether anything changed, a LIST of one part leaves the others alone, derived state follows."""

from __future__ import annotations

from scheduler.core.model.dra import DeviceClass
from scheduler.core.model.objects import (
    NamespaceInput,
    TopologyInput,
    TopologyLevel,
)
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.watched import NAMESPACES, TOPOLOGIES, Inputs, Keyed


def ns(name: str, **labels: str) -> NamespaceInput:
    return NamespaceInput(name, dict(labels))


def topology(kind: str, name: str) -> TopologyInput:
    return TopologyInput(kind, name, (TopologyLevel("rack"),))


def test_events_put_and_remove_and_say_whether_they_changed_anything() -> None:
    keyed: Keyed[NamespaceInput] = Keyed(NAMESPACES)
    assert keyed.event("ADDED", ns("a"))
    assert not keyed.event("MODIFIED", ns("a"))  # the same object: no news
    assert keyed.event("MODIFIED", ns("a", team="x"))
    assert keyed == {"a": ns("a", team="x")}
    assert keyed.event("DELETED", ns("a"))  # deleted by key, whatever its last labels
    assert not keyed.event("DELETED", ns("a"))  # not there any more
    assert keyed == {} and len(keyed) == 0 and keyed.get("a") is None


def test_replace_drops_what_the_list_lacks_and_keeps_what_it_repeats() -> None:
    keyed: Keyed[NamespaceInput] = Keyed(NAMESPACES)
    assert keyed.replace([ns("a"), ns("b")])
    assert not keyed.replace([ns("b"), ns("a")])  # the same items: no change
    assert keyed.replace([ns("b"), ns("c")])
    assert sorted(keyed) == ["b", "c"] and "a" not in keyed
    assert keyed.replace([])
    assert keyed == {}


def test_replace_of_one_part_leaves_the_other_parts_alone() -> None:
    keyed: Keyed[TopologyInput] = Keyed(TOPOLOGIES)
    keyed.replace([topology("Kueue", "a"), topology("KAI", "b")])
    assert keyed.replace([topology("Kueue", "c")], "Kueue")
    assert sorted(keyed) == ["KAI/b", "Kueue/c"]
    assert keyed.replace([], "KAI")  # that project's CRD went away
    assert sorted(keyed) == ["Kueue/c"]


def test_on_change_is_called_for_changes_only() -> None:
    calls: list[int] = []
    keyed = Keyed(NAMESPACES, lambda: calls.append(len(calls)))
    keyed.put(ns("a"))
    keyed.put(ns("a"))
    keyed.remove("b")
    keyed.remove("a")
    assert len(calls) == 2


def test_a_kind_finds_its_collection() -> None:
    inputs = Inputs()
    assert inputs.of(NAMESPACES) is inputs.namespaces
    assert inputs.of(TOPOLOGIES) is inputs.topologies


def test_the_snapshot_derives_from_its_inputs() -> None:
    state = ClusterState()
    state.inputs.device_classes.put(
        DeviceClass("gpu.example.com", extended_resource_name="example.com/gpu")
    )
    assert state.dra_extended["example.com/gpu"] == "gpu.example.com"
    state.inputs.device_classes.replace([])
    assert state.dra_extended == {}


def test_intake_wakes_waiting_pods_on_every_list_and_on_events_that_change_something() -> None:
    from tests.unit.test_podgroup_status import IntakeHarness

    h = IntakeHarness()
    h.intake.replace(NAMESPACES, [ns("a")])
    h.intake.replace(NAMESPACES, [ns("a")])  # the same LIST: pods may have waited for it
    assert h.wakes == 2
    h.intake.event(NAMESPACES, "MODIFIED", ns("a"))  # nothing the filters read changed
    h.intake.event(NAMESPACES, "DELETED", ns("b"))  # never known
    assert h.wakes == 2
    h.intake.event(NAMESPACES, "MODIFIED", ns("a", team="x"))
    h.intake.event(NAMESPACES, "DELETED", ns("a"))
    assert h.wakes == 4 and h.state.inputs.namespaces == {}


def test_on_item_sees_each_item_before_and_after() -> None:
    seen: list[tuple[object, object]] = []
    keyed: Keyed[NamespaceInput] = Keyed(NAMESPACES)
    keyed.on_item = lambda before, after: seen.append((before, after))
    a, a2 = NamespaceInput("a"), NamespaceInput("a", {"x": "1"})
    keyed.put(a)
    keyed.put(a)  # no change: not seen
    keyed.replace([a2])
    keyed.event("DELETED", a2)
    assert seen == [(None, a), (a, a2), (a2, None)]
