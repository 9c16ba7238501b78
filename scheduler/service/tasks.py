"""The loop's background tasks and its wake-up: every part that starts work off the serial cycle
(binds, store writes, reports, re-reads, evictions) spawns it here, so that shutdown waits for
all of it and a test can wait until everything has settled; and anything that gives the loop
work (a pod queued, GPUs freed) wakes it here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


class Tasks:
    def __init__(self) -> None:
        self.running: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    def wake(self) -> None:
        """The loop has something to do."""
        self._wake.set()

    async def sleep(self, timeout: float) -> None:
        """Until woken, or ``timeout`` seconds."""
        self._wake.clear()
        # asyncio.timeout, not wait_for: Python 3.11's wait_for returns normally when it is
        # cancelled in the turn its awaitable ended (a wake-up), and a stopped loop went on
        # (tests/unit/test_tasks.py).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()

    async def settle(self) -> None:
        """Until no task runs (those they start included)."""
        while self.running:
            await asyncio.gather(*list(self.running), return_exceptions=True)

    def __len__(self) -> int:
        return len(self.running)
