"""An asyncio event loop on simulated time: the one clock of a simulation run.

The live scheduler's waits are asyncio waits (``asyncio.sleep``, ``asyncio.wait_for`` around a
Binding, the loop's wake-up) and its clock is an injected callable. Here both read one virtual
clock, ``loop.time()``: when no callback is ready and no socket has data, the loop does not sleep
until its next timer, it jumps the clock there. A run then takes as long as its work, whatever
the lease or the bind timeout, and the order of everything is fixed by the program alone: the
same schedule gives the same run (FoundationDB's and TigerBeetle's simulators work this way).

Sockets (the real Redis store behind ``--redis``) are polled first, and while ``io_busy()``
says a request is in flight the loop waits for its reply in real time (up to ``IO_WAIT_S``)
instead of jumping: a Redis call then takes no simulated time, and the order of events stays
the program's. (A Redis that does not answer within ``IO_WAIT_S`` lets time jump, as a real
stall would.)

``on_jump`` is called with each jump's length before timers fire (the Redis harness moves the
lease TTLs Redis keeps in real time by the same amount).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable
from contextvars import Context
from typing import Any, TypeVarTuple

IO_WAIT_S = 5.0
LIVELOCK_TURNS = 200_000

_Ts = TypeVarTuple("_Ts")


class Livelock(AssertionError):
    """The loop turned and turned while no simulated time passed."""


class _JumpingSelector(selectors.BaseSelector):
    """The loop's selector: polls the real one, and when nothing is ready makes the wait a jump
    of the virtual clock instead of a sleep."""

    def __init__(self, loop: VirtualLoop, real: selectors.BaseSelector) -> None:
        self._loop = loop
        self._real = real

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.get_key(fileobj)

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = self._real.select(0)
        if events or timeout == 0:
            self._loop.standstill()
            return events
        if self._loop.io_busy():
            events = self._real.select(IO_WAIT_S)
            if events:
                return events
        if timeout is None:
            raise RuntimeError("simulation deadlock: nothing is ready and no timer is set")
        # A microsecond past the timer: a wait computed as ``deadline - now`` then lands on or
        # after the deadline, never a rounding error short of it (a loop that waits for its
        # deadline would otherwise spin at a standstill; real time always moves on).
        self._loop.jump(timeout + 1e-6)
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, start: float = 1000.0) -> None:
        super().__init__()
        self._now = start
        self.io_busy: Callable[[], bool] = lambda: False
        self.on_jump: Callable[[float], None] = lambda seconds: None
        self._turns = 0
        self._selector = _JumpingSelector(self, self._selector)  # type: ignore[has-type]
        # Timers due within this much of now run now; simulated time needs no slack.
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self._now

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        """A timer set in the future runs only once the clock jumped to it. asyncio runs in the
        same turn a timer due within ``_clock_resolution`` of now; in real time the clock moves
        on meanwhile, so whoever waited for a deadline reads a clock past it. Here the clock
        stands still: a loop waiting ``deadline - now`` (a rounding error above zero) would
        read a clock still short of its deadline, wait again, and spin with no time passing
        (a false livelock: soak seeds 122, 384, 396 of issue 30)."""
        if self._now < when < self._now + self._clock_resolution:
            when = self._now + self._clock_resolution
        return super().call_at(when, callback, *args, context=context)

    def jump(self, seconds: float) -> None:
        if seconds > 0:
            self._now += seconds
            self._turns = 0
            self.on_jump(seconds)

    def standstill(self) -> None:
        """One more turn of the loop without time passing: past ``LIVELOCK_TURNS`` the program
        spins (a task that wakes another that wakes it, at once, forever): in production that
        is a core at 100% and a loop that never sleeps."""
        self._turns += 1
        if self._turns > LIVELOCK_TURNS:
            self._turns = 0
            raise Livelock(f"livelock: {LIVELOCK_TURNS} turns of the event loop, no time passed")
