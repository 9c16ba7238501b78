"""List-then-watch over raw JSON: a small reflector.

kubernetes-asyncio's Watch builds model objects for every event (milliseconds per pod) and hides
410 handling; here the raw HTTP stream is read line by line and decoded with msgspec into the
small Structs of ``codec`` (microseconds). The pattern is client-go's reflector:

1. LIST (page by page when given a ``page_call``), remember ``metadata.resourceVersion``, hand
   the items to ``replace`` (synced). A ``Relist`` instead takes each page's items as the page
   arrives and is told when the LIST ended: a LIST of 50,000 pods is then never held whole,
   and its items are taken in while the apiserver prepares the next page;
2. WATCH from that version with ``allowWatchBookmarks`` and a server-side timeout; apply each event
   with ``apply`` and advance the version (bookmarks advance it too);
3. a watch that ends normally (its timeout) resumes from the last version; a 410 Gone (as an HTTP
   status or as an ERROR event) goes back to 1; any other error backs off (``WatchTiming`` below,
   doubling, capped) and goes back to 1. The backoff starts over only once a watch has ended
   normally, not after a LIST: an apiserver that lists fine but
   fails every watch would otherwise be re-listed at the initial backoff forever.

A stream whose consumer orders its news by resourceVersion (``ordered``: the pod watches, whose
intake drops news older than what it knows) says once, not per event, when a version is not
an integer: such news cannot be told from stale news.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import msgspec
import structlog

from .tuning import WatchTiming

log = structlog.get_logger("watch")

T = TypeVar("T")


class ListMeta(msgspec.Struct):
    resourceVersion: str = ""
    # A paged LIST's token for the next page ("" on the last page).
    continue_: str = msgspec.field(default="", name="continue")


class ObjectMeta(msgspec.Struct):
    resourceVersion: str = ""


class _WithMeta(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class Status(msgspec.Struct):
    code: int = 0
    reason: str = ""
    message: str = ""


class RawEvent(msgspec.Struct):
    type: str
    object: msgspec.Raw


class RawList(msgspec.Struct):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[msgspec.Raw] = msgspec.field(default_factory=list)


class Gone(Exception):
    """410: the resourceVersion is too old; re-list."""


class HttpError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class Relist(Protocol):
    """What a paged LIST hands over as it goes (instead of ``replace``): ``begin`` when a LIST
    starts; ``page`` with the items (converted) as they arrive, a slice of a page at a time;
    ``end`` once the last page is in, with the LIST's resourceVersion, to let go of what the
    LIST did not show (unless what is known of it is newer than the LIST). A LIST that
    fails halfway has handed on its first items, each a truth newer than the one it replaces,
    and begins again; only ``end`` may drop anything."""

    def begin(self) -> None: ...

    def page(self, items: list[Any]) -> None: ...

    def end(self, version: str) -> None: ...


ListCall = Callable[[], Awaitable[bytes]]
# A paged LIST: one page from a continue token ("" for the first page).
PageCall = Callable[[str], Awaitable[bytes]]
WatchCall = Callable[[str, int], Awaitable[AsyncIterator[bytes]]]


class Reflector(Generic[T]):
    def __init__(
        self,
        name: str,
        item_type: type[T],
        list_call: ListCall,
        watch_call: WatchCall,
        replace: Callable[[list[Any]], None],
        apply: Callable[[str, T], None],
        version_of: Callable[[T], str],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        page_call: PageCall | None = None,
        convert: Callable[[T], Any] | None = None,
        relist: Relist | None = None,
        timing: WatchTiming | None = None,
        ordered: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.name = name
        self._timing = timing or WatchTiming()
        self._decoder = msgspec.json.Decoder(item_type)
        self._list_call = list_call
        self._watch_call = watch_call
        self._replace = replace
        self._apply = apply
        self._version_of = version_of
        self._sleep = sleep
        self._page_call = page_call
        # What a LIST hands ``replace``: each item converted as it is decoded (page by page), so
        # that a LIST of 50,000 pods never holds both their decoded and converted forms.
        self._convert = convert
        self._relist = relist  # with a page_call: pages handed on as they arrive
        # Told each bookmark's version: everything up to it has been delivered.
        self._progress = progress
        # Whether the consumer orders this stream's news by resourceVersion (the pod watches:
        # intake.py drops news older than what it knows). A version that is not an integer
        # switches that off for the object it comes with: said once per stream, not per event.
        self._ordered = ordered
        self._unordered_told = False
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.relists = 0

    async def run(self) -> None:
        timing = self._timing
        backoff = timing.backoff_s
        while True:
            try:
                await self._list()
                while True:
                    if await self._watch_once():
                        backoff = timing.backoff_s
            except Gone:
                log.info("watch expired, re-listing", watch=self.name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every failure re-lists after a backoff
                log.warning("watch failed", watch=self.name, error=str(exc), retry_s=backoff)
                await self._sleep(backoff)
                backoff = min(timing.backoff_max_s, backoff * 2)

    async def _list(self) -> None:
        began = time.monotonic()
        if self._page_call is None:
            body = await self._list_call()
            raw = msgspec.json.decode(body, type=RawList)
            items = [self._item(item) for item in raw.items]
            version = raw.metadata.resourceVersion
            count = len(items)
        else:
            items, version, count = await self._list_pages(self._page_call)
        self._check_order(version)
        self.resource_version = version
        self.relists += 1
        listed = time.monotonic()
        if self._relist is not None:
            self._relist.end(version)
        else:
            self._replace(items)
        log.info(
            "listed",
            watch=self.name,
            items=count,
            list_s=round(listed - began, 3),
            replace_s=round(time.monotonic() - listed, 3),
        )
        self.synced.set()

    def _item(self, raw: msgspec.Raw) -> Any:
        obj = self._decoder.decode(raw)
        if self._ordered and not self._unordered_told:
            self._check_order(self._version_of(obj))
        return obj if self._convert is None else self._convert(obj)

    def _check_order(self, version: str) -> None:
        """A resourceVersion that is not a positive integer (KEP-5504 says it is one) leaves
        its news unordered: stale news is then taken as new. Said once per stream."""
        if self._ordered and not self._unordered_told and not version.isdigit():
            self._unordered_told = True
            log.warning(
                "resourceVersion is not an integer: this watch's news can no longer be told "
                "from stale news (said once for this watch)",
                watch=self.name,
                resource_version=version,
            )

    async def _list_pages(self, page_call: PageCall) -> tuple[list[Any], str, int]:
        """A LIST page by page (client-go's pager): at most two pages' bodies are held at a
        time, not the whole cluster's (50,000 pods are some hundred MB of JSON). The next page
        is asked for before this one's items are decoded, so the apiserver reads and encodes it
        (a paged LIST is read from etcd) while this process decodes; the decoding yields to the
        loop every ``decode_slice`` items, which lets that request go out and keeps the loop's other
        tasks (lease renewals, probes) going. The pages are one consistent snapshot; a token
        that expired (410) starts the LIST over, as any 410 does."""
        items: list[Any] = []  # the whole LIST's, for ``replace`` (not with a Relist)
        slice_ = self._timing.decode_slice
        count = 0
        if self._relist is not None:
            self._relist.begin()
        body = await page_call("")
        while True:
            raw = msgspec.json.decode(body, type=RawList)
            token = raw.metadata.continue_
            following = asyncio.ensure_future(page_call(token)) if token else None
            try:
                for start in range(0, len(raw.items), slice_):
                    await asyncio.sleep(0)
                    got = [self._item(i) for i in raw.items[start : start + slice_]]
                    count += len(got)
                    if self._relist is not None:
                        self._relist.page(got)
                    else:
                        items.extend(got)
            except BaseException:
                if following is not None:
                    following.cancel()
                raise
            if following is None:
                return items, raw.metadata.resourceVersion, count
            del raw
            body = await following

    async def _watch_once(self) -> bool:
        """One watch until it ends normally (then True: the watch works); errors raise."""
        lines = await self._watch_call(self.resource_version, self._timing.timeout_s)
        async for line in lines:
            if not line.strip():
                continue
            event = msgspec.json.decode(line, type=RawEvent)
            if event.type == "ERROR":
                status = msgspec.json.decode(event.object, type=Status)
                if status.code == 410:
                    raise Gone(status.message)
                raise HttpError(status.code, status.message)
            if event.type == "BOOKMARK":
                meta = msgspec.json.decode(event.object, type=_WithMeta)
                self.resource_version = meta.metadata.resourceVersion or self.resource_version
                if self._progress is not None and meta.metadata.resourceVersion:
                    self._progress(meta.metadata.resourceVersion)
                continue
            obj = self._decoder.decode(event.object)
            version = self._version_of(obj)
            self._check_order(version)
            self.resource_version = version or self.resource_version
            self._apply(event.type, obj)
        return True
