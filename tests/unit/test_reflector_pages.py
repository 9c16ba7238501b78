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


async def test_items_are_converted_as_each_page_is_decoded() -> None:
    pages = Pages({"": page(["a"], "t1"), "t1": page(["b"], "")})
    seen: list[list[str]] = []
    converted: list[str] = []

    def convert(item: Item) -> str:
        converted.append(item.name)
        assert pages.asked[-1] == ("" if item.name == "a" else "t1")  # before the next page
        return item.name.upper()

    r = reflector(pages, seen)
    r._convert = convert
    replaced: list[list[str]] = []
    r._replace = replaced.append
    await r._list()
    assert replaced == [["A", "B"]] and converted == ["a", "b"]
