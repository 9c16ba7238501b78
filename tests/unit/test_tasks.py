"""The loop's sleep (service/tasks.py) ends when it is cancelled, even in the turn it is woken.

Python 3.11's ``asyncio.wait_for`` returns normally when the task awaiting it is cancelled in
the turn its awaitable ended: the cancellation is lost. ``Scheduler.run`` sleeps between turns
through ``Tasks.sleep``; cancelled (a SIGKILL in the simulation, the shutdown's last step) as a
wake-up came, it went on turning for good, and a soak's teardown spun on it (the shrinking of
seed 5205). Every wait with a timeout in the scheduler and the agent is ``asyncio.timeout``."""

from __future__ import annotations

import asyncio

import pytest

from scheduler.service.tasks import Tasks


async def test_a_sleep_cancelled_in_the_turn_it_is_woken_is_cancelled() -> None:
    tasks = Tasks()
    sleeper = asyncio.create_task(tasks.sleep(60.0))
    await asyncio.sleep(0)  # it sleeps
    tasks.wake()
    sleeper.cancel()  # in the same turn
    with pytest.raises(asyncio.CancelledError):
        await sleeper


async def test_a_sleep_woken_ends_and_one_not_woken_times_out() -> None:
    tasks = Tasks()
    sleeper = asyncio.create_task(tasks.sleep(60.0))
    await asyncio.sleep(0)
    tasks.wake()
    await asyncio.wait_for(sleeper, 1.0)
    await tasks.sleep(0.01)  # not woken: the timeout ends it, quietly
