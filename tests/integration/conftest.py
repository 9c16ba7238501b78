"""A real redis-server per test session (scheduler/testing/redisserver.py).

No mock of what we can run: the store's Lua scripts are only proven by a real Redis. A missing
redis-server fails the run with the command that installs it; it never skips.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler.testing.redisserver import RedisServer, RedisServerError


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        server.start()
    except RedisServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()
