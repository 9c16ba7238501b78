"""A real redis-server for tests and the demo, on a unix socket in a temporary folder.

Persistence is off and there is no TCP port, so runs never collide; the process gets a
parent-death signal and ``stop`` kills it, so it never outlives the test session.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .controlplane import die_with_parent


class RedisServerError(RuntimeError):
    pass


class RedisServer:
    def __init__(self, folder: Path | None = None) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if folder is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="topo-redis-")
            folder = Path(self._tmp.name)
        self.folder = folder
        self.socket = folder / "redis.sock"
        self.url = f"unix://{self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerError(
                "redis-server is not installed; `make integration` installs Debian's "
                "redis-server, or run `apt-get install redis-server`"
            )
        self.socket.unlink(missing_ok=True)
        log = (self.folder / "redis.log").open("ab")
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
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        for _ in range(500):
            if self.socket.exists():
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        tail = (self.folder / "redis.log").read_text(errors="replace")[-2000:]
        self.stop()
        raise RedisServerError(f"redis-server did not start:\n{tail}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._tmp.cleanup()
            self._tmp = None
