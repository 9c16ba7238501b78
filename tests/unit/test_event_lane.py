"""The Scheduled events' lane: in order, off the caller's path, bounded, idle when empty."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Counter

from scheduler.config.tuning import Tuning
from scheduler.service.events import EventLane


def _dropped() -> Counter:
    return Counter("dropped", "test", registry=CollectorRegistry())


async def test_events_are_sent_in_order_and_the_writer_stops_when_empty() -> None:
    sent: list[int] = []
    lane = EventLane(_dropped(), Tuning().event_queue_size)

    def event(n: int):  # type: ignore[no-untyped-def]
        async def send() -> None:
            await asyncio.sleep(0)
            sent.append(n)

        return send

    for n in range(5):
        lane.put(event(n))
    assert sent == [] and len(lane) == 5  # nothing written on the caller's path
    await lane.close(Tuning().shutdown_events_seconds)
    assert sent == [0, 1, 2, 3, 4] and len(lane) == 0
    assert lane._task is None


async def test_a_full_lane_drops_and_counts_and_a_failing_event_does_not_stop_it() -> None:
    dropped = _dropped()
    lane = EventLane(dropped, size=2)
    sent: list[str] = []

    async def fails() -> None:
        raise RuntimeError("apiserver said no")

    async def ok() -> None:
        sent.append("ok")

    lane.put(fails)
    lane.put(ok)
    lane.put(ok)  # the third does not fit
    assert dropped._value.get() == 1
    await lane.close(Tuning().shutdown_events_seconds)
    assert sent == ["ok"]
