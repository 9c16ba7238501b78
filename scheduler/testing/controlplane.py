"""A real local Kubernetes control plane: etcd, kube-apiserver, KWOK and kube-controller-manager
as local processes.

There is no Docker engine on our machines, so kind and k3d are out. tools/k8s/build.sh builds the
real binaries from Go modules into a cache; this module runs them on free loopback ports with
temporary data folders, for the tests, `make demo` and the benchmarks:

- etcd, on a free client port, fsync off (test data);
- kube-apiserver with RBAC and token authentication: an admin identity (system:masters) and a
  scheduler identity that can do only what a ClusterRole grants it; ServiceAccount admission off
  (no service-account controller runs, so there are no default service accounts);
- KWOK, which keeps nodes annotated ``kwok.x-k8s.io/node: fake`` Ready and runs the pods bound to
  them (and finishes their deletion);
- kube-controller-manager with only what DRA needs (``KCM_CONTROLLERS``): the resourceclaim
  controller and the garbage collector. dradriver.py publishes the KWOK nodes' ResourceSlices.

``restart_apiserver()`` stops kube-apiserver (gracefully, or with SIGKILL) and starts it again
on the same port, certificates, tokens and etcd: clients keep their kubeconfigs, and every watch
breaks and re-lists (tests/e2e/test_chaos.py).

Nothing may outlive the test session, so cleanup has several layers:

- every process is started in its own session (``start_new_session``: its own process group, out
  of reach of the terminal's Ctrl-C, which would otherwise kill it before we could stop it in
  order), and ``stop`` sends SIGTERM to the whole group, waits, then SIGKILLs it and waits again;
- ``stop`` runs from ``finally`` / ``with`` blocks (a failing test), from ``atexit`` (an
  interrupted run), and from a SIGTERM/SIGHUP handler installed when a plane starts in the main
  thread and nobody else handles those signals (the run is terminated);
- when the plane is started from the main thread, each child also gets a parent-death signal
  (``PR_SET_PDEATHSIG``), so even ``kill -9`` of the test runner takes the children with it. (Linux
  ties that signal to the *thread* that forked, so it is not used from other threads.)

Kubeconfigs are written per identity: ``admin`` (group ``system:masters``), and the users of
deploy/'s two ServiceAccounts, the scheduler's and the node agent's, which can do nothing until
their ClusterRoles are bound: ``grant_scheduler_role()`` and ``grant_agent_role()`` apply
deploy/'s own ClusterRole and ClusterRoleBinding files unmodified (a ServiceAccount subject
matches exactly the user ``system:serviceaccount:<namespace>:<name>``).

Start-up is checked, not guessed: etcd's ``/health``, the apiserver's ``/readyz`` and KWOK's
``/healthz`` must answer before ``start`` returns; a process that exits or times out raises
``ControlPlaneError`` with the tail of its log (all logs are kept in the work folder).

``apply_crds()`` installs deploy/optional/'s CRDs (scheduler-plugins' PodGroup) and returns
once the apiserver serves them (condition Established), as a cluster without scheduler-plugins
would have them after `kubectl apply -f deploy/optional/podgroup-crd.yaml`.

``python -m scheduler.testing.controlplane up|down --state DIR`` runs it in the background for
`make cluster-up` / `make cluster-down`.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "tools" / "k8s" / "build.sh"
DEPLOY_BASE = REPO / "deploy" / "base"
OPTIONAL_CRDS = (REPO / "deploy" / "optional" / "podgroup-crd.yaml",)
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RESOURCE_API = "/apis/resource.k8s.io/v1"  # DRA, served by default in v1.37
# kube-apiserver's --request-timeout here (its default is 60 s): how long a Binding stalled in etcd
# may still commit, which a scheduler run against this plane waits out after a failover.
REQUEST_TIMEOUT_S = 10
ADMIN_TOKEN = "topo-admin-token"
SCHEDULER_TOKEN = "topo-scheduler-token"
AGENT_TOKEN = "topo-scheduler-agent-token"
# The identities deploy/'s ServiceAccounts have in a real cluster (their tokens' usernames).
SCHEDULER_USER = "system:serviceaccount:topo-scheduler:topo-scheduler"
AGENT_USER = "system:serviceaccount:topo-scheduler:topo-scheduler-agent"
SERVICE_ACCOUNT_GROUPS = "system:serviceaccounts,system:serviceaccounts:topo-scheduler"
START_TIMEOUT_S = 90.0
# kube-controller-manager runs only what DRA needs: the resourceclaim controller (claims from
# ResourceClaimTemplates, pod status.resourceClaimStatuses, reservedFor cleaned up and allocations
# cleared when their pods are gone) and the garbage collector (the claims, and the driver's
# ResourceSlices, of deleted pods and nodes, through their ownerReferences).
KCM_CONTROLLERS = ("resourceclaim-controller", "garbage-collector-controller")


class ControlPlaneError(RuntimeError):
    pass


def build_binaries() -> Path:
    """Run tools/k8s/build.sh (builds only what is missing) and return the cache folder."""
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=None, text=True
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    for line in lines[:-1]:
        print(line, file=sys.stderr)
    if proc.returncode != 0 or not lines:
        raise ControlPlaneError(f"tools/k8s/build.sh failed (exit {proc.returncode})")
    return Path(lines[-1])


_LOWEST_PORT = 10_000  # below: well-known and registered services' habits


def _ephemeral_low() -> int:
    """The first port the kernel hands out as an outgoing connection's source port."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32_768  # Linux's default


# The ports free_port handed out lately, which it does not hand out again: each is free when
# drawn and taken only when its server binds it a moment later.
_handed: collections.deque[int] = collections.deque(maxlen=1_000)


def free_port() -> int:
    """A loopback port nobody listens on, for a server started a moment later.

    The port is drawn below the kernel's ephemeral range: a port from bind(0) comes from that
    range, so any outgoing connection on the machine (a client of another test, a Redis replica
    dialling its master) could take it as its source port before our server binds it, and the
    server then fails with "Address already in use". Below the range only another free_port
    caller can collide, and a random draw over ~20,000 ports makes that unlikely; within this
    process not at all: a port handed out lately is not drawn again (a Sentinel set draws six
    before it starts any, and CI once saw a Sentinel given its master's port)."""
    high = _ephemeral_low()
    draw = random.Random()
    for _ in range(100):
        port = draw.randrange(_LOWEST_PORT, high) if high > _LOWEST_PORT + 1_000 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        if port in _handed:
            continue
        _handed.append(port)
        return port
    raise ControlPlaneError("no free loopback port below the ephemeral range after 100 draws")


def _load_prctl() -> Any:
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    return None


# Resolved once, in the parent: the child of a fork must not dlopen. A preexec_fn runs between
# fork and exec, where only the forking thread exists; a lock another thread held at the fork
# (the dynamic loader's, taken by a gRPC or asyncio thread) is never released there, and the
# child would hang before it ever runs its program.
_PRCTL = _load_prctl()


def die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the thread that started it dies (Linux)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# Every started, not yet stopped plane: atexit and the signal handler stop them.
_LIVE: list[ControlPlane] = []
_LIVE_LOCK = threading.RLock()  # re-entrant: the signal handler runs on the main thread


def stop_all() -> None:
    """Stop every control plane this process started and has not stopped yet."""
    with _LIVE_LOCK:
        planes = list(_LIVE)
    for plane in planes:
        with contextlib.suppress(Exception):
            plane.stop()


atexit.register(stop_all)


def _on_terminate(signum: int, frame: FrameType | None) -> None:
    """Stop our processes, then die of the same signal as if no handler had been installed."""
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    """SIGTERM/SIGHUP would end this process without running atexit: catch them, unless the
    program handles them itself (then it is its job to stop the plane, e.g. ``up`` below)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _on_terminate)


class Process:
    def __init__(self, name: str, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = log
        self._log_file = log.open("wb")
        in_main_thread = threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(
            args,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent if in_main_thread else None,
        )

    def tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-chars:]
        return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = 5.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # The leader is gone; make sure nothing else of its group is left either.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log_file.close()


class ControlPlane:
    def __init__(self, bin_dir: Path, workdir: Path | None = None) -> None:
        self.bin_dir = bin_dir
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="topo-k8s-")
            workdir = Path(self._tmp.name)
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.processes: list[Process] = []
        self.etcd_url = ""
        self.server = ""
        self._apiserver_args: list[str] = []
        self._apiserver_starts = 0
        self.admin_kubeconfig = self.dir / "admin.kubeconfig"
        self.scheduler_kubeconfig = self.dir / "scheduler.kubeconfig"
        self.agent_kubeconfig = self.dir / "agent.kubeconfig"

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        _install_signal_handlers()
        with _LIVE_LOCK:
            _LIVE.append(self)
        try:
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfigs()
            self._start_kwok()
            self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process (whole process groups, in reverse start order) and wait for them.
        Safe to call more than once."""
        for process in reversed(list(self.processes)):
            process.stop()  # idempotent: a signal handler may stop a plane that is stopping
            with contextlib.suppress(ValueError):
                self.processes.remove(process)
        with _LIVE_LOCK:
            if self in _LIVE:
                _LIVE.remove(self)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None, log: str = ""
    ) -> Process:
        full_env = dict(os.environ)
        full_env.update(env or {})
        process = Process(name, args, self.dir / f"{log or name}.log", full_env)
        self.processes.append(process)
        return process

    def _wait(self, process: Process, check: Any, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not process.alive():
                raise ControlPlaneError(f"{process.name} exited while {what}:\n{process.tail()}")
            with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
                if check():
                    return
            time.sleep(0.2)
        raise ControlPlaneError(f"{process.name}: timed out {what}:\n{process.tail()}")

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        etcd = self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:
                return bool(json.load(resp).get("health") == "true")

        self._wait(etcd, healthy, "waiting for etcd /health")

    def _start_apiserver(self) -> None:
        certs = self.dir / "certs"
        certs.mkdir(exist_ok=True)
        sa_key = self.dir / "sa.key"
        subprocess.run(
            ["openssl", "genrsa", "-out", str(sa_key), "2048"],
            check=True,
            capture_output=True,
        )
        tokens = self.dir / "tokens.csv"
        tokens.write_text(
            f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n'
            f'{SCHEDULER_TOKEN},{SCHEDULER_USER},scheduler-uid,"{SERVICE_ACCOUNT_GROUPS}"\n'
            f'{AGENT_TOKEN},{AGENT_USER},agent-uid,"{SERVICE_ACCOUNT_GROUPS}"\n'
        )
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        self._apiserver_args = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--cert-dir={certs}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # v1.37 refuses a loopback address for the default/kubernetes Endpoints it keeps;
            # nothing here reaches the apiserver through that Service.
            "--endpoint-reconciler-type=none",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # kube-controller-manager runs only DRA's controllers: no default service accounts
            # to admit against, and no node lifecycle controller to lift the not-ready taint that
            # TaintNodesByCondition puts on every new node.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--authorization-mode=RBAC",
            f"--token-auth-file={tokens}",
            "--service-account-issuer=https://127.0.0.1/",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            # Tests of the 410 path compact etcd themselves; keep the apiserver from doing it.
            "--etcd-compaction-interval=0",
            # A request (a Binding stalled in etcd) is given up after this long; a scheduler
            # run against this plane sets run.tuning.bindCommitSeconds to it (tests/e2e/live.py).
            f"--request-timeout={REQUEST_TIMEOUT_S}s",
            # The upstream Workload API (Workload, PodGroup; beta and off by default in v1.37),
            # which the sixth gang source reads. DRA's resource.k8s.io/v1 is served by default.
            "--feature-gates=GenericWorkload=true",
            "--runtime-config=scheduling.k8s.io/v1beta1=true",
            "--profiling=false",
            "--v=0",
        ]
        self._wait_apiserver(self._spawn("kube-apiserver", self._apiserver_args))

    def _wait_apiserver(self, apiserver: Process) -> None:
        self._wait(
            apiserver,
            lambda: self.request("GET", "/readyz", raw=True) == b"ok",
            "waiting for kube-apiserver /readyz",
        )

    def restart_apiserver(self, kill: bool = False) -> float:
        """Stop kube-apiserver (SIGTERM, its graceful shutdown; SIGKILL with ``kill``) and start
        it again with the same arguments: same port, certificates, tokens and etcd, so clients
        keep their kubeconfigs, and every watch breaks and re-lists. Returns when the new one is
        ready (``/readyz``); the value is how long it was unavailable, in seconds."""
        old = next((p for p in self.processes if p.name == "kube-apiserver"), None)
        if old is None or not self._apiserver_args:
            raise ControlPlaneError("restart_apiserver: no kube-apiserver was started")
        position = self.processes.index(old)
        began = time.monotonic()
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(old.proc.pid, signal.SIGKILL)
        old.stop(grace_s=30.0)
        self.processes.remove(old)
        self._apiserver_starts += 1
        log = f"kube-apiserver-{self._apiserver_starts}"  # the stopped one's log is kept
        new = self._spawn("kube-apiserver", self._apiserver_args, log=log)
        # Keep the start order, so ``stop`` still stops kube-controller-manager and KWOK before
        # the apiserver, and etcd last.
        self.processes.remove(new)
        self.processes.insert(position, new)
        self._wait_apiserver(new)
        return time.monotonic() - began

    def _write_kubeconfigs(self) -> None:
        for path, user, token in (
            (self.admin_kubeconfig, "admin", ADMIN_TOKEN),
            (self.scheduler_kubeconfig, "topo-scheduler", SCHEDULER_TOKEN),
            (self.agent_kubeconfig, "topo-scheduler-agent", AGENT_TOKEN),
        ):
            config = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {"server": self.server, "insecure-skip-tls-verify": True},
                    }
                ],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
                "current-context": user,
            }
            path.write_text(json.dumps(config, indent=2))

    def _start_kwok(self) -> None:
        home = self.dir / "kwok-home"
        home.mkdir(exist_ok=True)  # kwok reads ~/.kwok/kwok.yaml: give it an empty home
        address = f"127.0.0.1:{free_port()}"
        kwok = self._spawn(
            "kwok",
            [
                str(self.bin_dir / "kwok"),
                f"--kubeconfig={self.admin_kubeconfig}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.0.0.1/16",
                "--node-lease-duration-seconds=40",
                # KWOK >= v0.8 has no built-in stages: tools/k8s/build.sh puts its "fast" ones
                # beside the binary.
                f"--config={self.bin_dir / 'kwok-stages.yaml'}",
                f"--server-address={address}",
            ],
            env={"HOME": str(home)},
        )

        # KWOK serves /healthz only after its controllers have started.
        def healthy() -> bool:
            with urllib.request.urlopen(f"http://{address}/healthz", timeout=2) as resp:
                return bool(resp.status == 200)

        self._wait(kwok, healthy, "waiting for kwok /healthz")

    def _start_controller_manager(self) -> None:
        """kube-controller-manager with only DRA's controllers (``KCM_CONTROLLERS``)."""
        certs = self.dir / "kcm-certs"
        certs.mkdir(exist_ok=True)
        port = free_port()
        kcm = self._spawn(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self.admin_kubeconfig}",
                # An explicit list: no service-account, namespace, node-lifecycle or workload
                # controllers act on the tests' objects.
                f"--controllers={','.join(KCM_CONTROLLERS)}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={certs}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                # As the apiserver's: the resourceclaim controller refuses a pod of a PodGroup
                # (spec.schedulingGroup) when GenericWorkload is off.
                "--feature-gates=GenericWorkload=true",
                # Its client's default (20 qps, burst 30) makes the resourceclaim controller take
                # minutes over the claims of a benchmark's 2,000 pods (each deleted pod's claim
                # is one or two writes: reservedFor, then the finalizer; a template's claim is a
                # create and the pod's status): the benchmarks would wait on the controller.
                "--kube-api-qps=1000",
                "--kube-api-burst=1000",
                "--profiling=false",
                "--v=1",
            ],
        )
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE

        # /healthz answers ok once every listed controller is built (each adds its check).
        def healthy() -> bool:
            url = f"https://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, context=context, timeout=2) as resp:
                return bool(resp.read() == b"ok")

        self._wait(kcm, healthy, "waiting for kube-controller-manager /healthz")

    # ---- a tiny REST client (admin identity) -----------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str = ADMIN_TOKEN,
        raw: bool = False,
        content_type: str = "application/json",
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(req, context=context, timeout=30) as resp:
            payload = resp.read()
        return payload if raw else json.loads(payload or b"{}")

    def apply(self, obj: dict[str, Any]) -> Any:
        """Create an object (Node, Pod, Namespace, ClusterRole, ...) as the admin."""
        return self.request("POST", _collection_path(obj), obj)

    def apply_or_replace(self, obj: dict[str, Any]) -> Any:
        """Create an object, or replace it (unconditionally) when it exists."""
        try:
            return self.apply(obj)
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise
        path = f"{_collection_path(obj)}/{obj['metadata']['name']}"
        return self.request("PUT", path, obj)

    def apply_file(self, path: Path) -> None:
        """Create or replace every object of a YAML file, unmodified, as the admin."""
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                self.apply_or_replace(doc)

    def apply_crds(
        self, paths: tuple[Path, ...] = OPTIONAL_CRDS, timeout_s: float = START_TIMEOUT_S
    ) -> list[str]:
        """Create (or update) every CustomResourceDefinition of ``paths``, unmodified, as the
        admin, and wait until each is Established. Returns their names."""
        names = []
        for path in paths:
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc:
                    continue
                if doc.get("kind") != "CustomResourceDefinition":
                    raise ControlPlaneError(f"{path}: {doc.get('kind')} is not a CRD")
                self._create_or_update_crd(doc)
                names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + timeout_s
        for name in names:
            while not _established(self.request("GET", f"{CRD_PATH}/{name}")):
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"CRD {name} not Established after {timeout_s} s")
                time.sleep(0.1)
        return names

    def _create_or_update_crd(self, crd: dict[str, Any]) -> None:
        try:
            self.request("POST", CRD_PATH, crd)
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise
        # A CRD's update must name the version it replaces (no unconditional updates).
        path = f"{CRD_PATH}/{crd['metadata']['name']}"
        current = self.request("GET", path)
        updated = {**crd, "metadata": {**crd["metadata"], **_version_of(current)}}
        self.request("PUT", path, updated)

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the kubectl built with the plane (same version, kustomize v5.8) as the admin, from
        the repository's top folder; a non-zero exit fails with its output."""
        done = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.admin_kubeconfig), *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}:\n{done.stdout}{done.stderr}")
        return done

    def grant_scheduler_role(self) -> None:
        """Bind deploy/'s scheduler ClusterRole to the scheduler identity, through deploy/'s own
        ClusterRoleBinding (subject: ServiceAccount topo-scheduler/topo-scheduler), and its Role
        in namespace topo-scheduler (the epoch witness) through its RoleBinding."""
        self.apply_file(DEPLOY_BASE / "scheduler-clusterrole.yaml")
        self.apply_file(DEPLOY_BASE / "namespace.yaml")
        self.apply_file(DEPLOY_BASE / "scheduler-role.yaml")

    def grant_agent_role(self) -> None:
        """Bind deploy/'s node-agent ClusterRole to the agent identity, through deploy/'s own
        ClusterRoleBinding (subject: ServiceAccount topo-scheduler/topo-scheduler-agent)."""
        self.apply_file(DEPLOY_BASE / "agent-clusterrole.yaml")

    def create_gpu_node(
        self,
        name: str,
        inventory: dict[str, Any] | str | None,
        gpus: int = 8,
        resource: str | None = "nvidia.com/gpu",
        labels: dict[str, str] | None = None,
        extra_capacity: dict[str, str] | None = None,
    ) -> Any:
        """A KWOK node with ``gpus`` of ``resource`` allocatable; with ``resource`` None, none at
        all: a DRA-only node, whose GPUs only its ResourceSlices announce (dradriver.py)."""
        annotations = {"kwok.x-k8s.io/node": "fake"}
        if inventory is not None:
            annotations["topo-scheduler.io/gpus"] = (
                inventory if isinstance(inventory, str) else json.dumps(inventory)
            )
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "110"}
        if resource is not None:
            capacity[resource] = str(gpus)
        capacity.update(extra_capacity or {})
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": annotations,
                "labels": {"kubernetes.io/hostname": name, "type": "kwok", **(labels or {})},
            },
            "spec": {},
            "status": {"capacity": capacity, "allocatable": capacity},
        }
        return self.apply(node)

    def create_pod(
        self,
        name: str,
        gpus: int = 1,
        resource: str = "nvidia.com/gpu",
        namespace: str = "default",
        scheduler: str = "topo-scheduler",
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        limits: dict[str, str] | None = None,
        node_selector: dict[str, str] | None = None,
        containers: dict[str, dict[str, str]] | None = None,
        priority_class: str | None = None,
    ) -> Any:
        """A pod with one container ``main`` asking for ``limits`` (default: ``gpus`` of
        ``resource``), or with ``containers``, name -> limits, in that order; of a PriorityClass
        (the apiserver's Priority admission sets its spec.priority) when one is named."""
        return self.apply(
            pod_manifest(
                name,
                namespace,
                scheduler,
                containers or {"main": limits or {resource: str(gpus)}},
                labels=labels,
                annotations=annotations,
                node_selector=node_selector,
                priority_class=priority_class,
            )
        )

    def create_priority_class(self, name: str, value: int) -> Any:
        """A PriorityClass (cluster-wide; preemptionPolicy PreemptLowerPriority)."""
        return self.apply(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def delete_crd(self, name: str, timeout_s: float = 30.0) -> None:
        """Delete a CustomResourceDefinition and wait until it is gone (its objects with it)."""
        path = f"{CRD_PATH}/{name}"
        self.delete(path)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.request("GET", path)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return
                raise
            time.sleep(0.1)
        raise ControlPlaneError(f"CRD {name} was not deleted within {timeout_s:.0f} s")


def pod_manifest(
    name: str,
    namespace: str,
    scheduler: str,
    containers: dict[str, dict[str, str]],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    node: str | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    """A pod with ``containers`` (name -> limits, in that order), optionally already bound to
    ``node`` and of a PriorityClass: ``create_pod``'s object, and the benchmarks' bulk ones."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {"name": c, "image": "busybox", "resources": {"limits": lim}}
            for c, lim in containers.items()
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if node is not None:
        spec["nodeName"] = node
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []  # null right after creation
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _version_of(obj: dict[str, Any]) -> dict[str, str]:
    return {"resourceVersion": obj["metadata"]["resourceVersion"]}


def _collection_path(obj: dict[str, Any]) -> str:
    kind = obj["kind"]
    namespace = obj.get("metadata", {}).get("namespace", "default")
    plural = {
        "Node": ("/api/v1", "nodes", False),
        "Pod": ("/api/v1", "pods", True),
        "Namespace": ("/api/v1", "namespaces", False),
        "Secret": ("/api/v1", "secrets", True),
        "ConfigMap": ("/api/v1", "configmaps", True),
        "ServiceAccount": ("/api/v1", "serviceaccounts", True),
        "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
        "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
        "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
        "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
        "PriorityClass": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
        "ResourceSlice": (RESOURCE_API, "resourceslices", False),
        "DeviceTaintRule": (RESOURCE_API, "devicetaintrules", False),
        "DeviceClass": (RESOURCE_API, "deviceclasses", False),
        "ResourceClaim": (RESOURCE_API, "resourceclaims", True),
        "ResourceClaimTemplate": (RESOURCE_API, "resourceclaimtemplates", True),
    }
    if kind not in plural:
        raise ValueError(f"apply: unsupported kind {kind}")
    prefix, resource, namespaced = plural[kind]
    if namespaced:
        return f"{prefix}/namespaces/{namespace}/{resource}"
    return f"{prefix}/{resource}"


@contextlib.contextmanager
def running(workdir: Path | None = None) -> Iterator[ControlPlane]:
    """Build what is missing, start a control plane, and stop it whatever happens."""
    plane = ControlPlane(build_binaries(), workdir)
    with plane:
        yield plane


# ---- `make cluster-up` / `make cluster-down` ------------------------------------------------


def _up(state: Path) -> int:
    """Start in this (backgrounded) process and keep running until SIGTERM."""
    state.mkdir(parents=True, exist_ok=True)
    ready = state / "ready.json"
    ready.unlink(missing_ok=True)
    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # Every cluster-up starts from empty folders: no nodes or pods of an earlier run in etcd.
    shutil.rmtree(state / "data", ignore_errors=True)
    plane = ControlPlane(build_binaries(), state / "data")
    try:
        plane.start()
        ready.write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "server": plane.server,
                    "adminKubeconfig": str(plane.admin_kubeconfig),
                    "schedulerKubeconfig": str(plane.scheduler_kubeconfig),
                    "agentKubeconfig": str(plane.agent_kubeconfig),
                    "kubectl": str(plane.bin_dir / "kubectl"),
                }
            )
        )
        while not stop and all(p.alive() for p in plane.processes):
            time.sleep(0.5)
    finally:
        plane.stop()
        ready.unlink(missing_ok=True)
    return 0


def _detach(state: Path) -> int:
    """`make cluster-up`: start ``up`` as a background daemon, wait until ready, print the
    admin KUBECONFIG export as the last line."""
    state.mkdir(parents=True, exist_ok=True)
    pid_file = state / "pid"
    running_pid = None
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), 0)
            running_pid = int(pid_file.read_text())
    daemon = None
    if running_pid is None:  # else one is running or starting: wait for it to be ready
        build_binaries()  # in the foreground, so its progress shows
        log = (state / "up.log").open("wb")
        daemon = subprocess.Popen(
            [sys.executable, "-m", "scheduler.testing.controlplane", "up", "--state", str(state)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
        )
        pid_file.write_text(str(daemon.pid))
    deadline = time.monotonic() + START_TIMEOUT_S * 2
    while time.monotonic() < deadline:
        gone = daemon.poll() is not None if daemon else not _alive(running_pid)
        if gone:
            pid_file.unlink(missing_ok=True)
            print((state / "up.log").read_text(errors="replace")[-3000:], file=sys.stderr)
            print("the local control plane failed to start", file=sys.stderr)
            return 1
        with contextlib.suppress(OSError, ValueError):
            ready = json.loads((state / "ready.json").read_text())
            print(
                f"control plane up: {ready['server']} (scheduler identity: "
                f"{ready['schedulerKubeconfig']}, agent identity: {ready['agentKubeconfig']}, "
                f"kubectl: {ready['kubectl']}); stop it with `make cluster-down`"
            )
            print(f"export KUBECONFIG={ready['adminKubeconfig']}")
            return 0
        time.sleep(0.3)
    if daemon is not None:
        daemon.terminate()
    print("the local control plane did not become ready in time", file=sys.stderr)
    return 1


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _down(state: Path) -> int:
    pid_file = state / "pid"
    if not pid_file.exists():
        print("no local control plane is running")
        return 0
    pid = int(pid_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        for _ in range(150):
            os.kill(pid, 0)
            time.sleep(0.2)
        os.kill(pid, signal.SIGKILL)  # its children die with it (parent-death signal)
    pid_file.unlink(missing_ok=True)
    print("local control plane stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the local Kubernetes control plane")
    parser.add_argument("action", choices=["build", "up", "detach", "down"])
    parser.add_argument("--state", default=str(REPO / ".cluster"))
    args = parser.parse_args(argv)
    state = Path(args.state).resolve()
    if args.action == "build":
        print(build_binaries())
        return 0
    if args.action == "up":
        return _up(state)
    if args.action == "detach":
        return _detach(state)
    return _down(state)


if __name__ == "__main__":
    raise SystemExit(main())
