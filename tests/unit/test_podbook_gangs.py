"""The pod book's gang index: the cycle finds a gang's pending members without walking every
entry, and the index follows each entry's latest pending object and leaves with it."""

from __future__ import annotations

import msgspec

from scheduler.core.model.objects import PodInput
from scheduler.service.podbook import SCHEDULABLE_STAGES, Event, PodBook
from tests.builders import MakePod


def seen(book: PodBook, pod: PodInput) -> None:
    """The pending watch shows ``pod`` (what Scheduler.dispatch does with PENDING_SEEN)."""
    t = book.handle(pod.key, pod.uid, Event.PENDING_SEEN, 0.0)
    assert t is not None and t.entry is not None
    book.set_pod(t.entry, pod)


def members(book: PodBook, gang: str) -> list[str]:
    return [e.key for e in book.gang_members(gang, SCHEDULABLE_STAGES)]


def test_a_gangs_members_are_found_by_its_key_and_leave_with_their_entries() -> None:
    book = PodBook()
    b = MakePod().Name("b").Req(1).Gang("job", 2).Obj()
    seen(book, b)
    seen(book, MakePod().Name("a").Req(1).Gang("job", 2).Obj())
    seen(book, MakePod().Name("x").Req(1).Gang("other", 1).Obj())
    seen(book, MakePod().Name("single").Req(1).Obj())
    assert members(book, "default/job") == ["default/a", "default/b"]
    assert members(book, "default/other") == ["default/x"]
    # A member taken by the cycle and placed is no longer schedulable: not a member to gather.
    book.handle("default/a", "", Event.PLACED, 0.0)
    assert members(book, "default/job") == ["default/b"]
    # b's new object names another gang: the index follows the latest object.
    seen(book, msgspec.structs.replace(b, labels={**b.labels, "gpu-topology": "other"}))
    assert members(book, "default/other") == ["default/b", "default/x"]
    assert members(book, "default/job") == []
    # Entries that leave take their index entries with them.
    for key in ("default/a", "default/b", "default/x", "default/single"):
        book.handle(key, "", Event.PENDING_ENDED, 0.0)
    assert book.sizes()["entries"] == 0 and book.sizes()["gangs"] == 0
