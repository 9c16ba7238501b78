"""The real Redis store under the simulation (soak.py ``--redis``): a redis-server this process
starts and stops (scheduler/testing/redisserver.py), emptied before each run, and the service's
``RedisStore`` built as app.py builds it, one per run (its connections belong to the run's loop).

Two things bridge Redis to simulated time (vloop.py):
- every store call is counted while in flight (``Counted``), and the loop waits for its reply in
  real time instead of jumping: a Redis call takes no simulated time;
- Redis keeps the lease's TTL in real time: at every jump of the simulated clock the lease's TTL
  is shortened by the same amount (and the key deleted when it runs out), so a killed leader's
  lease lapses after 15 simulated seconds (to within ``TTL_STEP_MS``), as in production.

FLUSHALL is Redis' own.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import redis

from scheduler.state.base import Store
from scheduler.state.redis_store import RedisStore
from scheduler.testing.redisserver import RedisServer

from .machine import Backend

PREFIX = "sim"
TTL_STEP_MS = 250  # the lease's TTL follows simulated time to within this


class Counted:
    """A store whose calls in flight are counted (``busy``)."""

    def __init__(self, inner: RedisStore) -> None:
        self._inner = inner
        self.busy = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        @functools.wraps(attr)
        async def call(*args: Any, **kw: Any) -> Any:
            self.busy += 1
            try:
                return await attr(*args, **kw)
            finally:
                self.busy -= 1

        return call


@contextlib.contextmanager
def redis_backend() -> Iterator[Backend]:
    server = RedisServer().start()
    sync = redis.Redis(unix_socket_path=str(server.socket))
    current: list[Counted] = []
    lease = f"{PREFIX}:lease"

    def make(clock: Callable[[], float]) -> Store:
        sync.flushall()
        current[:] = [Counted(RedisStore.from_url(server.url, prefix=PREFIX))]
        return current[0]

    async def flush(store: Store, clock: Callable[[], float]) -> None:
        sync.flushall()

    carry = [0.0]  # simulated milliseconds not yet taken off the TTL

    def on_jump(seconds: float) -> None:
        carry[0] += seconds * 1000
        ms = int(carry[0])
        if ms < TTL_STEP_MS:  # a Redis round trip per watch turn would cost more than the run
            return
        carry[0] -= ms
        left = sync.pttl(lease)
        if left is None or left < 0:
            return
        if left <= ms:
            sync.delete(lease)
        else:
            sync.pexpire(lease, left - ms)

    try:
        yield Backend(
            make=make,
            flush=flush,
            io_busy=lambda: bool(current and current[0].busy),
            on_jump=on_jump,
        )
    finally:
        sync.close()
        server.close()
