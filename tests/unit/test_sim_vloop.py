"""tests/sim/vloop.py: the simulation's event loop on a virtual clock (issue 30)."""

from __future__ import annotations

import asyncio
import contextlib

from tests.sim.vloop import VirtualLoop


def test_a_wait_a_rounding_error_short_of_its_deadline_lets_time_pass() -> None:
    """Soak seeds 122, 384 and 396: the scheduling loop waits ``deadline - now`` for a queued
    pod's retry (``Tasks.sleep``: an ``asyncio.wait_for``), and the clock stands a rounding
    error short of the deadline. asyncio runs a timer due within its clock resolution in the
    same turn; real time moves on meanwhile, the virtual clock did not: the loop read it short
    of the deadline again and waited again, 200,000 turns with no time passing (a false
    livelock)."""
    loop = VirtualLoop(start=2050.0002100000224)
    deadline = 2050.000210000023  # one float step later

    async def wait_for_the_deadline() -> int:
        waits = 0
        while loop.time() < deadline:
            waits += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.Event().wait(), deadline - loop.time())
        return waits

    try:
        assert loop.run_until_complete(wait_for_the_deadline()) == 1
    finally:
        loop.close()
    assert loop.time() >= deadline
