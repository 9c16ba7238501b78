"""The real kube-scheduler as a process on a local control plane (controlplane.py).

The differential tests use it as the oracle of Kubernetes' scheduling semantics (a pod that
topo-scheduler binds to node N must also be bound to N by kube-scheduler when pinned there, and a
pod ours leaves pending must stay pending under kube-scheduler); the benchmarks compare against
it. It is the binary tools/k8s/build.sh builds with the plane (same Kubernetes version).

It runs with its own KubeSchedulerConfiguration (``kubescheduler.config.k8s.io/v1``), written into
its work folder:

- one profile with its own ``schedulerName`` (``kube-oracle`` by default), so it schedules only
  the pods that ask for it and never competes with topo-scheduler or another test's scheduler;
- ``leaderElection.leaderElect: false`` (one instance; no Lease objects);
- ``clientConnection``: the plane's admin kubeconfig, qps/burst 5000 (no client-side throttling
  in the benchmarks);
- ``DefaultPreemption`` disabled unless ``preemption=True``: an oracle must not evict the pods a
  test set up in order to place a probe.

It serves HTTPS on a free loopback ``--secure-port`` (self-signed certificates in its folder);
``/healthz``, ``/readyz``, ``/livez`` and ``/metrics`` need no credentials. ``start`` returns once
``/healthz`` and ``/readyz`` (which includes its informers' sync) answer ``ok``.

Cleanup follows controlplane.py's layers: the process has its own session and a parent-death
signal (when started from the main thread), ``stop`` kills its whole process group and waits, and
every scheduler not yet stopped is stopped at exit (``atexit``) and on SIGTERM/SIGHUP (a handler
that stops them, then hands the signal to the plane's handler or dies of it). Its log is kept in
its folder (``log``; ``tail()`` for error messages).

Usage::

    with KubeScheduler(plane, "kube-oracle") as oracle:
        ...  # pods with spec.schedulerName "kube-oracle" are scheduled by kube-scheduler
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from . import controlplane
from .controlplane import ControlPlane, ControlPlaneError, Process, free_port

DEFAULT_NAME = "kube-oracle"
START_TIMEOUT_S = 60.0

# Every started, not yet stopped kube-scheduler of this process: atexit and the signal handler.
_LIVE: list[KubeScheduler] = []
_LIVE_LOCK = threading.RLock()


def stop_all() -> None:
    """Stop every kube-scheduler this process started and has not stopped yet."""
    with _LIVE_LOCK:
        schedulers = list(_LIVE)
    for scheduler in schedulers:
        with contextlib.suppress(Exception):
            scheduler.stop()


atexit.register(stop_all)

_previous_handlers: dict[int, Any] = {}


def _on_terminate(signum: int, frame: FrameType | None) -> None:
    """Stop our kube-schedulers, then do what would have happened without us: the previous
    handler (the plane's, which stops the planes and dies of the signal), or stop the planes and
    die of the signal."""
    stop_all()
    previous = _previous_handlers.get(signum)
    if callable(previous):
        previous(signum, frame)
        return
    controlplane.stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        current = signal.getsignal(signum)
        if current is _on_terminate:
            continue
        # Chain only to the default or to the plane's own handler; a program that handles the
        # signal itself (``controlplane up``) stops what it started.
        if current is signal.SIG_DFL or current is controlplane._on_terminate:
            _previous_handlers[signum] = current
            signal.signal(signum, _on_terminate)


def configuration(
    kubeconfig: Path,
    scheduler_name: str = DEFAULT_NAME,
    preemption: bool = False,
    profile: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The KubeSchedulerConfiguration: one profile named ``scheduler_name``; ``profile`` adds or
    replaces fields of that profile (e.g. ``pluginConfig``, ``plugins``)."""
    prof: dict[str, Any] = {"schedulerName": scheduler_name}
    if not preemption:
        prof["plugins"] = {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}}
    prof.update(profile or {})
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 5000, "burst": 5000},
        "leaderElection": {"leaderElect": False},
        "profiles": [prof],
    }


class KubeScheduler:
    """The real kube-scheduler on ``plane``, for the pods whose schedulerName is ``name``."""

    def __init__(
        self,
        plane: ControlPlane,
        name: str = DEFAULT_NAME,
        workdir: Path | None = None,
        preemption: bool = False,
        profile: dict[str, Any] | None = None,
        verbosity: int = 2,
    ) -> None:
        self.plane = plane
        self.name = name
        self.binary = plane.bin_dir / "kube-scheduler"
        # Its own folder in the plane's (kept as long as the plane's), one per instance.
        self.dir = workdir or Path(
            tempfile.mkdtemp(prefix=f"kube-scheduler-{name}-", dir=plane.dir)
        )
        self.config_path = self.dir / "config.yaml"
        self.log = self.dir / "kube-scheduler.log"
        self.config = configuration(plane.admin_kubeconfig, name, preemption, profile)
        self.verbosity = verbosity
        self.port = 0
        self.process: Process | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> KubeScheduler:
        """Start it and wait until ``/healthz`` and ``/readyz`` answer ok; ControlPlaneError
        (with the log's tail) when the binary is missing, the process exits or times out."""
        if self.process is not None:
            raise ControlPlaneError(f"kube-scheduler {self.name} is already started")
        if not os.access(self.binary, os.X_OK):
            raise ControlPlaneError(
                f"kube-scheduler binary missing at {self.binary} (tools/k8s/build.sh builds it)"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        # JSON is YAML: no dependency on how a YAML writer quotes things.
        self.config_path.write_text(json.dumps(self.config, indent=2))
        _install_signal_handlers()
        with _LIVE_LOCK:
            _LIVE.append(self)
        try:
            self._spawn_and_wait()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn_and_wait(self) -> None:
        self.port = free_port()
        certs = self.dir / "certs"
        certs.mkdir(exist_ok=True)
        args = [
            str(self.binary),
            f"--config={self.config_path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={certs}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            f"--v={self.verbosity}",
        ]
        self.process = Process(f"kube-scheduler-{self.name}", args, self.log, dict(os.environ))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.process.alive():
                raise ControlPlaneError(
                    f"kube-scheduler {self.name} exited while starting:\n{self.tail()}"
                )
            with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
                if self.get("/healthz") == "ok" and self.get("/readyz") == "ok":
                    return
            time.sleep(0.2)
        raise ControlPlaneError(
            f"kube-scheduler {self.name}: /healthz and /readyz not ok after "
            f"{START_TIMEOUT_S:.0f} s:\n{self.tail()}"
        )

    def stop(self) -> None:
        """Stop the process group and wait for it; safe to call more than once."""
        if self.process is not None:
            self.process.stop()
        with _LIVE_LOCK:
            if self in _LIVE:
                _LIVE.remove(self)

    def __enter__(self) -> KubeScheduler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- inspection ------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def get(self, path: str, timeout: float = 2.0) -> str:
        """GET one of its unauthenticated paths (``/healthz``, ``/readyz``, ``/metrics``)."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(self.url + path, context=context, timeout=timeout) as resp:
            return str(resp.read().decode(errors="replace"))

    def tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-chars:]
        return ""


@contextlib.contextmanager
def running(
    plane: ControlPlane, name: str = DEFAULT_NAME, **kwargs: Any
) -> Iterator[KubeScheduler]:
    """A started kube-scheduler, stopped whatever happens."""
    scheduler = KubeScheduler(plane, name, **kwargs)
    with scheduler:
        yield scheduler
