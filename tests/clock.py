"""A clock that tests step by hand (the injected clock of the queue, the stores, the scheduler)."""

from __future__ import annotations


class ManualClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
