"""Fixtures every test layer shares.

- ``redis_server``: a real redis-server per test session (scheduler/testing/redisserver.py). No
  mock of what we can run: the store's Lua scripts are only proven by a real Redis. A missing
  redis-server fails the run with the command that installs it; it never skips.
- ``no_leaked_tasks`` (automatic): a test that leaves asyncio tasks running fails, naming them.
  A leaked task is a watch, a bind or a timer that outlives its owner: in the service that is a
  shutdown bug, so tests must not hide it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

from scheduler.testing.redisserver import RedisServer, RedisServerError, SentinelSet


class _Process(Protocol):
    def start(self) -> object: ...

    def close(self) -> None: ...


P = TypeVar("P", bound=_Process)


@contextlib.contextmanager
def _running(process: P) -> Iterator[P]:
    """``process`` started, and closed whatever happens; a failed start fails the test (never
    a skip)."""
    try:
        process.start()
    except RedisServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield process
    finally:
        process.close()


def started_redis(folder: Path) -> contextlib.AbstractContextManager[RedisServer]:
    """A local redis-server in ``folder``, stopped whatever happens."""
    return _running(RedisServer(folder))


def started_sentinels(
    folder: Path, down_after_ms: int = 2000, max_lag_s: int = 1
) -> contextlib.AbstractContextManager[SentinelSet]:
    """A master, two replicas and three Sentinels in ``folder`` (SentinelSet), every process
    killed whatever happens."""
    return _running(SentinelSet(folder, down_after_ms=down_after_ms, max_lag_s=max_lag_s))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with started_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    # Give tasks that were cancelled or are finishing one turn of the loop to end.
    for _ in range(3):
        await asyncio.sleep(0)
    leaked = [
        t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()
    ]
    for task in leaked:
        task.cancel()
    if leaked:
        await asyncio.gather(*leaked, return_exceptions=True)
        names = ", ".join(sorted(f"{t.get_name()} ({t.get_coro()!r})" for t in leaked))
        pytest.fail(f"the test left asyncio tasks running: {names}", pytrace=False)
