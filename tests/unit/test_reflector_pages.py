"""A paged LIST (the pod watches' first step): every page's items, the last page's version, one
page body held at a time, and a continue token that expired starting the LIST over."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import msgspec
import pytest

from scheduler.kube.watch import Gone, Reflector


class Item(msgspec.Struct):
    name: str


def page(names: list[str], token: str, version: str = "7") -> bytes:
    return json.dumps(
        {
            "metadata": {"resourceVersion": version, "continue": token},
            "items": [{"name": n} for n in names],
        }
    ).encode()


class Pages:
    def __init__(self, pages: dict[str, bytes], expire: str | None = None) -> None:
        self.pages = pages
        self.asked: list[str] = []
        self.expire = expire  # a token that has expired (410) once

    async def __call__(self, token: str) -> bytes:
        self.asked.append(token)
        if token == self.expire:
            self.expire = None
            raise Gone("the continue token expired")
        return self.pages[token]


def reflector(pages: Pages, seen: list[list[str]]) -> Reflector[Item]:
    async def no_list() -> bytes:
        raise AssertionError("a paged reflector never asks for the whole list")

    async def no_watch(rv: str, timeout: int) -> AsyncIterator[bytes]:
        raise AssertionError("not watched here")

    return Reflector(
        "items",
        Item,
        no_list,
        no_watch,
        lambda items: seen.append([i.name for i in items]),
        lambda kind, item: None,
        lambda item: "",
        page_call=pages,
    )


async def test_every_page_is_read_and_the_last_version_kept() -> None:
    pages = Pages(
        {"": page(["a", "b"], "t1", "9"), "t1": page(["c"], "t2", "9"), "t2": page([], "", "9")}
    )
    seen: list[list[str]] = []
    r = reflector(pages, seen)
    await r._list()
    assert seen == [["a", "b", "c"]]
    assert pages.asked == ["", "t1", "t2"]
    assert r.resource_version == "9" and r.synced.is_set()


async def test_an_expired_continue_token_lists_again_from_the_start() -> None:
    pages = Pages({"": page(["a"], "t1"), "t1": page(["b"], "")}, expire="t1")
    seen: list[list[str]] = []
    r = reflector(pages, seen)
    with pytest.raises(Gone):
        await r._list()
    assert seen == []  # nothing half-listed is handed on
    await r._list()  # run() lists again after a Gone
    assert seen == [["a", "b"]]
    assert pages.asked == ["", "t1", "", "t1"]


async def test_items_are_converted_as_each_page_is_decoded_while_the_next_is_asked_for() -> None:
    pages = Pages({"": page(["a"], "t1"), "t1": page(["b"], "t2"), "t2": page(["c"], "")})
    seen: list[list[str]] = []
    converted: list[str] = []

    def convert(item: Item) -> str:
        converted.append(item.name)
        # The next page was asked for before this one's items were decoded, and no page
        # after it (at most two pages' bodies are held).
        following = {"a": "t1", "b": "t2", "c": "t2"}[item.name]
        assert pages.asked[-1] == following
        return item.name.upper()

    r = reflector(pages, seen)
    r._convert = convert
    replaced: list[list[str]] = []
    r._replace = replaced.append
    await r._list()
    assert replaced == [["A", "B", "C"]] and converted == ["a", "b", "c"]


class Taken:
    """A Relist that records what it is handed, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def begin(self) -> None:
        self.calls.append("begin")

    def page(self, items: list[Item]) -> None:
        self.calls += [i.name for i in items]

    def end(self, version: str) -> None:
        self.calls.append("end")


async def test_a_relist_takes_each_page_as_it_arrives_and_is_told_when_the_list_ended() -> None:
    pages = Pages({"": page(["a", "b"], "t1"), "t1": page(["c"], "")})
    seen: list[list[str]] = []
    r = reflector(pages, seen)
    taken = Taken()
    r._relist = taken
    asked_when: dict[str, int] = {}

    def convert(item: Item) -> Item:
        asked_when[item.name] = len(pages.asked)
        return item

    r._convert = convert
    await r._list()
    assert taken.calls == ["begin", "a", "b", "c", "end"]
    assert seen == []  # nothing is held whole for replace
    assert asked_when == {"a": 2, "b": 2, "c": 2}  # a and b were taken while t1 was asked
    assert r.synced.is_set()


async def test_a_relist_that_expires_halfway_begins_again_and_ends_once() -> None:
    pages = Pages({"": page(["a"], "t1"), "t1": page(["b"], "")}, expire="t1")
    r = reflector(pages, [])
    taken = Taken()
    r._relist = taken
    with pytest.raises(Gone):
        await r._list()
    assert taken.calls == ["begin", "a"]  # handed on, never ended: nothing was let go
    await r._list()
    assert taken.calls == ["begin", "a", "begin", "a", "b", "end"]
