"""Node inventories in the store, kept off the per-pod path.

The leader mirrors the inventory of every GPU node of its snapshot into the store (Redis
``P:nodes``): the reconcile on taking leadership writes them all and drops nodes that no longer
exist; afterwards node events mark names dirty and one background flush writes the changes of a
burst of events in one fenced ``update_nodes`` call. Scheduling a pod never waits on it.

The later, rate-limited reconciles (after a reservation conflict, say) leave the inventories
alone, unless a write of ours failed since the last complete one: a failed flush or reconcile
keeps its names pending, asks for a reconcile (``on_failure``), and that reconcile writes every
inventory again. Whatever failed (the store, or an unexpected error), nothing is dropped silently.

What is stored is the inventory the scheduler read, as JSON in the ``topo-scheduler.io/gpus``
shape with ``scores`` (whatever annotation it came from, and ``source`` naming that annotation):
scheduler/core/resources/inventory.py's ``inventory_json``, whose Structs are in
core/formats/gpus.py. A node without a usable inventory (not a GPU node, or a malformed annotation)
has none.

Only the leader writes (the store fences it anyway); a standby drops its changes, since the
reconcile of whoever leads next writes every inventory. A leader whose local lease lapsed (a
renewal's answer late) writes nothing meanwhile either, but may lead on at the same epoch: it
asks for a reconcile, which writes every inventory once it leads again. The flush is a task of
the scheduler's own set, so shutdown awaits it like a bind in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import structlog

from scheduler.core.resources.inventory import Inventory, inventory_json
from scheduler.state.base import Store

from .leader import Leadership

log = structlog.get_logger("inventories")


class NodeInventories:
    def __init__(
        self,
        store: Store,
        leadership: Leadership,
        read: Callable[[], dict[str, Inventory | None]],
        may_write: Callable[[], bool],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        on_failure: Callable[[], None],
        flush_delay_s: float,
    ) -> None:
        self._store = store
        self._leadership = leadership
        self._read = read  # node name -> inventory (None: no usable inventory), of the snapshot
        self._may_write = may_write
        self._spawn = spawn
        self._on_failure = on_failure
        # A burst of node events (a re-list, a rolling agent update) within this long becomes
        # one store call (run.tuning.inventoryFlushSeconds).
        self.flush_delay_s = flush_delay_s
        self._dirty: set[str] = set()
        self._written: dict[str, str] = {}  # what the store holds, as far as we know
        # The store may lack some of our inventories (nothing written yet, or a write failed):
        # the next reconcile must write them all.
        self._behind = True
        self._flushing = False
        # Held while the reconcile or a flush writes, so a flush never lands under an older
        # reconcile and the other way round.
        self.lock = asyncio.Lock()

    def all(self) -> dict[str, str]:
        """Every inventory of the snapshot (pending changes included)."""
        return {name: inventory_json(inv) for name, inv in sorted(self._read().items()) if inv}

    @contextlib.asynccontextmanager
    async def reconciling(self, elected: bool) -> AsyncIterator[dict[str, str] | None]:
        """Around the store's reconcile call: gives its ``nodes`` argument, every inventory
        right after an election (the store holds what the previous leader wrote) or when a
        write of ours failed since the last complete one, else None (leave them alone: the
        flush keeps them current). The pending changes it covers are cleared only if the call
        succeeds; if it fails they stay pending and the next reconcile writes them all."""
        async with self.lock:
            if not (elected or self._behind):
                yield None
                return
            nodes = self.all()
            covered, self._dirty = self._dirty, set()
            try:
                yield nodes
            except BaseException:
                self._dirty |= covered
                self._behind = True
                raise
            self._written = dict(nodes)
            self._behind = False

    def changed(self, name: str) -> None:
        """A node was added, changed or deleted in the snapshot."""
        self._dirty.add(name)
        if self._flushing:
            return
        if self._may_write():
            self._flushing = True
            self._spawn(self._flush())
        else:
            self._skipped()

    def _skipped(self) -> None:
        """Changes this replica may not write now stay pending: a standby's are written by the
        next leader's reconcile, which writes every inventory, and a draining leader's by its
        successor's. A leader whose local lease lapsed (it still holds its epoch; a renewal's
        answer is late) may lead on with no election, and so no election reconcile: it asks
        for a reconcile, which writes every inventory once it leads again."""
        leadership = self._leadership
        if self._dirty and leadership.epoch is not None and not leadership.leading:
            self._behind = True
            self._on_failure()

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(self.flush_delay_s)
            while self._dirty and self._may_write():
                async with self.lock:
                    epoch = self._leadership.epoch
                    if epoch is None:
                        return
                    names, self._dirty = self._dirty, set()
                    try:
                        put, drop = self._changes(names)
                        if not put and not drop:
                            continue
                        await self._store.update_nodes(self._leadership.holder, epoch, put, drop)
                    except Exception as exc:
                        # Any failure (the store's StoreError or anything else): the names stay
                        # pending, and the reconcile asked for writes every inventory again.
                        log.warning(
                            "store node update failed", nodes=sorted(names), error=repr(exc)
                        )
                        self._dirty |= names
                        self._behind = True
                        self._on_failure()
                        return
                    self._written.update(put)
                    for name in drop:
                        self._written.pop(name, None)
            self._skipped()  # what the loop left because this replica may not write now
        finally:
            self._flushing = False

    def _changes(self, names: set[str]) -> tuple[dict[str, str], list[str]]:
        """What to write (changed inventories) and to drop (nodes gone or without one)."""
        inventories = self._read()
        put: dict[str, str] = {}
        drop: list[str] = []
        for name in sorted(names):
            inv = inventories.get(name)
            if inv is None:
                if name in self._written:
                    drop.append(name)
            else:
                encoded = inventory_json(inv)
                if self._written.get(name) != encoded:
                    put[name] = encoded
        return put, drop
