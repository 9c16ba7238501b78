"""Issue 30's timeline 6, its last point: a resourceVersion that is not an integer switches the
pod watches' stale-news protection off (intake.py orders news by it), and the reflector says so
once per watch, not once per event; a watch whose news nobody orders says nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import msgspec
from structlog.testing import capture_logs

from scheduler.kube.watch import Reflector


class Meta(msgspec.Struct):
    resourceVersion: str = ""


class Item(msgspec.Struct):
    name: str
    metadata: Meta = msgspec.field(default_factory=Meta)


def item(name: str, version: str) -> dict[str, object]:
    return {"name": name, "metadata": {"resourceVersion": version}}


def reflector(list_version: str, versions: list[str], ordered: bool) -> Reflector[Item]:
    """A LIST of one item per version of ``versions`` at ``list_version``, then a watch that
    shows each item modified at the same version."""

    async def one_page(token: str) -> bytes:
        body = {
            "metadata": {"resourceVersion": list_version},
            "items": [item(f"p{i}", v) for i, v in enumerate(versions)],
        }
        return json.dumps(body).encode()

    async def no_list() -> bytes:
        raise AssertionError("paged")

    async def watch(rv: str, timeout: int) -> AsyncIterator[bytes]:
        async def lines() -> AsyncIterator[bytes]:
            for i, v in enumerate(versions):
                yield json.dumps({"type": "MODIFIED", "object": item(f"p{i}", v)}).encode()

        return lines()

    return Reflector(
        "pods",
        Item,
        no_list,
        watch,
        lambda items: None,
        lambda kind, obj: None,
        lambda obj: obj.metadata.resourceVersion,
        page_call=one_page,
        ordered=ordered,
    )


def told(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["log_level"] == "warning"]


async def test_issue30_6_a_non_integer_resource_version_is_said_once_per_watch() -> None:
    with capture_logs() as logs:
        r = reflector("abc", ["x1", "x2", "x3"], ordered=True)
        await r._list()
        await r._watch_once()
        await r._list()  # a re-list of the same watch: still said once
    (warning,) = told(logs)
    assert warning["watch"] == "pods" and warning["resource_version"] == "x1"  # the first seen
    with capture_logs() as logs:
        other = reflector("7", ["8", "y", "z"], ordered=True)  # another watch says it too
        await other._list()
        await other._watch_once()
    assert [w["resource_version"] for w in told(logs)] == ["y"]


async def test_integer_versions_or_an_unordered_watch_say_nothing() -> None:
    with capture_logs() as logs:
        ordered = reflector("10", ["8", "9"], ordered=True)
        await ordered._list()
        await ordered._watch_once()
        unordered = reflector("abc", ["x", "y"], ordered=False)
        await unordered._list()
        await unordered._watch_once()
    assert told(logs) == []


async def test_a_bookmark_tells_how_far_the_watch_has_delivered() -> None:
    """Issue 30, sim seed 5: the bound pods' watch's bookmarks are its progress (intake's
    bound view, which a gang's bound members are counted in); events are told as events."""

    async def watch(rv: str, timeout: int) -> AsyncIterator[bytes]:
        async def lines() -> AsyncIterator[bytes]:
            yield json.dumps({"type": "MODIFIED", "object": item("p", "8")}).encode()
            yield json.dumps({"type": "BOOKMARK", "object": item("", "12")}).encode()

        return lines()

    async def no_list() -> bytes:
        raise AssertionError("listed")

    applied: list[str] = []
    progress: list[str] = []
    r = Reflector(
        "pods",
        Item,
        no_list,
        watch,
        lambda items: None,
        lambda kind, obj: applied.append(obj.metadata.resourceVersion),
        lambda obj: obj.metadata.resourceVersion,
        progress=progress.append,
    )
    r.resource_version = "7"
    assert await r._watch_once()
    assert applied == ["8"] and progress == ["12"] and r.resource_version == "12"
