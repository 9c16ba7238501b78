"""A real redis-server for tests and the demo, on a unix socket in a temporary folder; and a
Sentinel set (a master, two replicas, three Sentinels) on free loopback ports.

Persistence is off and the single server has no TCP port, so runs never collide; every process
gets a parent-death signal and ``stop``/``close`` kill it, so none outlives the test session.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

from .controlplane import die_with_parent, free_port


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
        binary = _binary()
        self.socket.unlink(missing_ok=True)
        self.proc = _spawn(
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
            self.folder / "redis.log",
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


def _binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisServerError(
            "redis-server is not installed; `make integration` installs Debian's "
            "redis-server, or run `apt-get install redis-server`"
        )
    return binary


def _spawn(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


class SentinelSet:
    """A master, two replicas and three Sentinels (``redis-server --sentinel``) on free
    loopback ports, every one with ``password``, set up as deploy/redis-sentinel/ sets them up
    (``min-replicas-to-write 1``, ``min-replicas-max-lag`` below ``down-after``, quorum 2),
    with shorter times. Nodes are numbered 0 (the first master), 1, 2; Sentinels 0, 1, 2."""

    def __init__(
        self,
        folder: Path | None = None,
        master_name: str = "topo",
        password: str = "sentinel-test-password",
        down_after_ms: int = 2000,
        max_lag_s: int = 1,
        failover_timeout_ms: int = 6000,
    ) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if folder is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="topo-sentinel-")
            folder = Path(self._tmp.name)
        self.folder = folder
        self.master_name = master_name
        self.password = password
        self.down_after_ms = down_after_ms
        self.max_lag_s = max_lag_s
        self.failover_timeout_ms = failover_timeout_ms
        self.ports = [free_port() for _ in range(3)]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.nodes: list[subprocess.Popen[bytes] | None] = [None, None, None]
        self.sentinels: list[subprocess.Popen[bytes] | None] = [None, None, None]

    @property
    def addresses(self) -> tuple[str, ...]:
        """The Sentinels, as run.redisSentinel.addresses lists them."""
        return tuple(f"127.0.0.1:{p}" for p in self.sentinel_ports)

    @property
    def url(self) -> str:
        """run.redisUrl with Sentinels: only the password and the database count."""
        return f"redis://:{self.password}@ignored/0"

    def start(self) -> SentinelSet:
        try:
            for i in range(3):
                self.start_node(i, replica_of=None if i == 0 else self.ports[0])
            self._until("both replicas in sync", lambda: self._replicas_of(0) == 2)
            for i in range(3):
                self.start_sentinel(i)
            self._until("the Sentinels see each other and both replicas", self._sentinels_ready)
        except BaseException:
            self.close()
            raise
        return self

    def start_node(self, i: int, replica_of: int | None) -> None:
        folder = self.folder / f"node{i}"
        folder.mkdir(exist_ok=True)
        argv = [
            _binary(),
            "--port", str(self.ports[i]),
            "--bind", "127.0.0.1",
            "--dir", str(folder),
            "--save", "",
            "--appendonly", "no",
            "--requirepass", self.password,
            "--masterauth", self.password,
            "--min-replicas-to-write", "1",
            "--min-replicas-max-lag", str(self.max_lag_s),
            "--repl-diskless-sync", "yes",
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        if replica_of is not None:
            argv += ["--replicaof", "127.0.0.1", str(replica_of)]
        self.nodes[i] = _spawn(argv, folder / "redis.log")
        self._until(f"node {i} answers", lambda: self._ping(self.ports[i]))

    def start_sentinel(self, i: int) -> None:
        folder = self.folder / f"sentinel{i}"
        folder.mkdir(exist_ok=True)
        config = folder / "sentinel.conf"  # Sentinel rewrites it: its own, writable copy
        name = self.master_name
        config.write_text(
            f"port {self.sentinel_ports[i]}\n"
            "bind 127.0.0.1\n"
            f"dir {folder}\n"
            f"requirepass {self.password}\n"
            f"sentinel monitor {name} 127.0.0.1 {self.ports[0]} 2\n"
            f"sentinel auth-pass {name} {self.password}\n"
            f"sentinel down-after-milliseconds {name} {self.down_after_ms}\n"
            f"sentinel failover-timeout {name} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {name} 1\n"
        )
        self.sentinels[i] = _spawn([_binary(), str(config), "--sentinel"], folder / "sentinel.log")
        self._until(f"Sentinel {i} answers", lambda: self._ping(self.sentinel_ports[i]))

    # ---- faults --------------------------------------------------------------------------

    def master_port(self) -> int:
        """The master's port as the first Sentinel that answers says."""
        for port in self.sentinel_ports:
            with contextlib.suppress(redis.RedisError, OSError), self._client(port) as c:
                _, master = c.execute_command(
                    "SENTINEL", "get-master-addr-by-name", self.master_name
                )
                return int(master)
        raise RedisServerError("no Sentinel answers")

    def master_index(self) -> int:
        return self.ports.index(self.master_port())

    def signal_node(self, i: int, sig: signal.Signals) -> None:
        proc = self.nodes[i]
        assert proc is not None and proc.poll() is None, f"node {i} is not running"
        os.kill(proc.pid, sig)
        if sig is signal.SIGKILL:
            proc.wait(timeout=10)
            self.nodes[i] = None

    def wait_failover(self, old: int, timeout_s: float = 60.0) -> int:
        """Until the Sentinels name another master than node ``old`` and it takes writes
        from a replica's acknowledgement on; its index."""
        self._until(
            "a failover",
            lambda: self.master_index() != old and self._replicas_of(self.master_index()) >= 1,
            timeout_s,
        )
        return self.master_index()

    def wait_demoted(self, i: int, timeout_s: float = 60.0) -> None:
        """Until node ``i`` (a master that came back) has been made a replica by the Sentinels."""

        def demoted() -> bool:
            with contextlib.suppress(redis.RedisError, OSError), self.node_client(i) as c:
                return bool(c.info("replication")["role"] == "slave")
            return False

        self._until(f"node {i} demoted to a replica", demoted, timeout_s)

    # ---- helpers -------------------------------------------------------------------------

    def node_client(self, i: int) -> redis.Redis:
        """A plain (synchronous) client of node ``i``."""
        return self._client(self.ports[i])

    def _client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, password=self.password, socket_timeout=1.0)

    def _ping(self, port: int) -> bool:
        with contextlib.suppress(redis.RedisError, OSError), self._client(port) as c:
            return bool(c.ping())
        return False

    def _replicas_of(self, i: int) -> int:
        with contextlib.suppress(redis.RedisError, OSError), self._client(self.ports[i]) as c:
            info = c.info("replication")
            if info.get("role") != "master":
                return 0
            return sum(
                1
                for k, v in info.items()
                if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
            )
        return 0

    def _sentinels_ready(self) -> bool:
        for port in self.sentinel_ports:
            try:
                with self._client(port) as c:
                    state = c.sentinel_master(self.master_name)
            except (redis.RedisError, OSError):
                return False
            if int(state["num-slaves"]) < 2 or int(state["num-other-sentinels"]) < 2:
                return False
        return True

    def _until(self, what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.05)
        tails = [
            f"--- {log.relative_to(self.folder)}\n{log.read_text(errors='replace')[-1500:]}"
            for log in sorted(self.folder.glob("*/*.log"))
        ]
        raise RedisServerError(f"timed out waiting for {what}\n" + "\n".join(tails))

    def close(self) -> None:
        for procs in (self.sentinels, self.nodes):
            for i, proc in enumerate(procs):
                if proc is not None and proc.poll() is None:
                    with contextlib.suppress(OSError):
                        os.kill(proc.pid, signal.SIGCONT)  # a paused one too
                    proc.kill()
                    proc.wait(timeout=10)
                procs[i] = None
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._tmp.cleanup()
            self._tmp = None
