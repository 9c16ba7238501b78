"""The Scheduled events' lane: written by one background task, never on a pod's path.

kube-scheduler hands its events to a broadcaster: a bounded buffer drained in the background,
that drops what does not fit. A Scheduled event per pod written at bind time cost as much as the
Binding itself under a backlog (py-spy: 13.5% of the event loop, against 12.6% for binds) and
competed with the binds for the apiserver. Here a bind only enqueues its event; one writer sends
them in order; when the queue is full (a backlog far ahead of the apiserver) the event is dropped
and counted in ``scheduler_events_dropped_total``. FailedScheduling events and the PodScheduled
condition keep their own path: a pending pod's reason is never dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog
from prometheus_client import Counter

log = structlog.get_logger("scheduler")

Send = Callable[[], Awaitable[None]]


class EventLane:
    def __init__(self, dropped: Counter, size: int) -> None:
        # At most ``size`` events wait to be written (run.tuning.eventQueueSize); past it they
        # are dropped and counted.
        self.size = size
        self._queue: asyncio.Queue[Send] = asyncio.Queue(size)
        self._dropped = dropped
        self._task: asyncio.Task[None] | None = None

    def put(self, send: Send) -> None:
        """Queue one event's write (a coroutine factory); drop it when the lane is full. The
        writer runs only while there is something to send."""
        try:
            self._queue.put_nowait(send)
        except asyncio.QueueFull:
            self._dropped.inc()
            return
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="events")

    def __len__(self) -> int:
        return self._queue.qsize()

    async def _run(self) -> None:
        try:
            while not self._queue.empty():
                send = self._queue.get_nowait()
                try:
                    await send()
                except Exception as exc:  # an event is best effort: log and go on
                    log.warning("event failed", error=str(exc))
        finally:
            self._task = None  # no await since the queue was seen empty: put() restarts it

    async def close(self, timeout: float) -> None:
        """Send what is queued (for at most ``timeout``), then stop."""
        task = self._task
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
