"""A real redis-server per test session, on a unix socket in a temporary folder.

No mock of what we can run: the store's Lua scripts are only proven by a real Redis. The server
has persistence off and no TCP port, so nothing collides with another run, and the fixture kills
it at the end of the session, also when a test fails. A missing redis-server fails the run with
the command that installs it (`make integration` installs it itself); it never skips.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


class RedisServer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "redis.sock"
        self.url = f"unix://{self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail(
                "redis-server is not installed; run `make integration` (it installs Debian's "
                "redis-server) or `apt-get install redis-server`",
                pytrace=False,
            )
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                "0",
                "--unixsocket",
                str(self.socket),
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=(self.folder / "redis.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for _ in range(500):
            if self.socket.exists():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        log = (self.folder / "redis.log").read_text(errors="replace")[-2000:]
        self.stop()
        pytest.fail(f"redis-server did not start:\n{log}", pytrace=False)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.socket.unlink(missing_ok=True)
        self.start()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
