"""`topo-scheduler run`: one replica from start to exit, in named steps (``run``, read top to
bottom):

1. ``start_store_and_lease``: the store (Redis through its Sentinels, Redis at a URL, or the
   embedded one), the apiserver client, every part wired (``Replica``: leadership, the
   scheduler, the watches, the probe server), the probe server up (not ready yet), signals
   caught. The lease itself is taken by the leadership loop (step 4).
2. ``start_watches``: the watches (watches.py) and the PodGroup status writer's task.
3. ``wait_for_sync``: until the watches a decision needs have listed; only then does a replica
   compete for the lease, since a new leader must see the cluster.
4. ``run_loops``: the leadership loop (elected, renewed, lost: scheduler.py's ``on_elected``)
   and the scheduling loop.
5. ``shut_down``, on SIGTERM or SIGINT, in this order, each step bounded in time: readiness
   turns off, the loop stops taking pods, binds in flight finish, the lease is released (a
   standby takes over at once), the loops, the watches, the probe server and the clients stop;
   exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable
from typing import Any

import structlog
from kubernetes_asyncio.client import ApiClient

from scheduler.config import Config, ConfigError, RedisSentinel, Run, sentinel_problems
from scheduler.core.snapshot import nodesums
from scheduler.kube.api import KubeApi
from scheduler.kube.client import api_client
from scheduler.state.base import Store
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore

from . import heap
from .http import ProbeServer
from .leader import Leadership, LeaseTiming
from .metrics import Metrics, TimedStore
from .scheduler import Scheduler
from .watches import Watches
from .witness import Witness

log = structlog.get_logger("app")


def settings_from(
    config: Config,
    redis_url: str | None,
    http_address: str | None,
    debug_from_anywhere: bool = False,
) -> Config:
    """Flags override the environment, which overrides the file. The Sentinels come from
    ``TOPO_SCHEDULER_REDIS_SENTINEL_MASTER_NAME`` and ``TOPO_SCHEDULER_REDIS_SENTINEL_ADDRESSES``
    (comma-separated host:port) when set; the result is checked again (ConfigError)."""
    changes: dict[str, Any] = {}
    sentinel = config.run.redis_sentinel
    env_master = os.environ.get("TOPO_SCHEDULER_REDIS_SENTINEL_MASTER_NAME")
    env_addresses = os.environ.get("TOPO_SCHEDULER_REDIS_SENTINEL_ADDRESSES")
    if env_master is not None:
        sentinel = RedisSentinel(master_name=env_master, addresses=sentinel.addresses)
    if env_addresses is not None:
        given = tuple(a.strip() for a in env_addresses.split(",") if a.strip())
        sentinel = RedisSentinel(master_name=sentinel.master_name, addresses=given)
    if sentinel != config.run.redis_sentinel:
        changes["redis_sentinel"] = sentinel
    if debug_from_anywhere:
        changes["debug_from_anywhere"] = True
    env_redis = os.environ.get("TOPO_SCHEDULER_REDIS_URL")
    env_http = os.environ.get("TOPO_SCHEDULER_HTTP_ADDRESS")
    if env_redis is not None:
        changes["redis_url"] = env_redis
    if env_http is not None:
        changes["http_address"] = env_http
    if redis_url is not None:
        changes["redis_url"] = redis_url
    if http_address is not None:
        changes["http_address"] = http_address
    out = config.with_run(**changes) if changes else config
    problems = sentinel_problems(out.run)
    if problems:
        listed = "\n".join(f"  - {problem}" for problem in problems)
        raise ConfigError(f"settings after the environment and flags:\n{listed}")
    return out


async def run(config: Config, kubeconfig: str | None) -> int:
    """One replica from start to exit, in named steps (the module doc tells why this order)."""
    replica = await Replica.start_store_and_lease(config, kubeconfig)
    await replica.start_watches()
    if await replica.wait_for_sync():
        replica.run_loops()
    await replica.stopping.wait()
    await replica.shut_down()
    return 0


class Replica:
    """One replica's parts, built once in the order they need each other; ``run`` takes its
    steps."""

    def __init__(
        self, config: Config, store: Store, client: ApiClient, holder: str, shared: bool
    ) -> None:
        run_cfg = config.run
        tuning = run_cfg.tuning
        # The shutdown's time bounds (run.tuning), all within the pod's
        # terminationGracePeriodSeconds (30 s, deploy/): the binds in flight (each ends within
        # the bind timeout, binder.py), the lease's release (one store call), every other step.
        self.drain_s = tuning.shutdown_drain_seconds
        self.release_s = tuning.shutdown_release_seconds
        self.stop_s = tuning.shutdown_step_seconds
        self.holder = holder
        self.client = client
        self.metrics = Metrics()
        self.store = TimedStore(store, self.metrics.store_latency, self.metrics.store_errors)
        api = KubeApi(client, tuning.list_page_size, tuning.api_timeout_seconds)
        # A store shared by several replicas: a leader may have come before this one, and the
        # apiserver's epoch witness records who leads (witness.py). The embedded store is the
        # one configuration without it: a single replica, no other leader.
        witness = (
            Witness(api, config.scheduler_name, errors=self.metrics.witness_errors)
            if shared
            else None
        )
        lease = run_cfg.lease
        self.leadership = Leadership(
            self.store,
            holder,
            LeaseTiming(lease.duration_seconds, lease.renew_seconds, lease.retry_seconds),
            time.monotonic,
            superseded=None if witness is None else witness.superseded,
        )
        self.scheduler = Scheduler(
            config.to_core(),
            config.scheduler_name,
            api,
            self.store,
            self.leadership,
            self.metrics,
            time.monotonic,
            bind_concurrency=run_cfg.bind_concurrency,
            gang_wait_timeout=config.gang.wait_timeout_seconds,
            stale_gang_policy=config.gang.stale_gang_policy,
            stale_gang_grace=config.gang.stale_gang_grace_seconds,
            preemption=config.preemption,
            tuning=tuning,
            # The embedded store serves one replica: no other leader can have come before.
            wait_for_unknown_leader=shared,
            witness=witness,
            watch_needed=self._watch_needed,
            patch_pod_group=api.patch_pod_group_status,
            mark_initially_scheduled=api.mark_initially_scheduled,
        )
        self.watches = Watches(api, config.scheduler_name, self.scheduler, tuning)
        host, _, port = run_cfg.http_address.rpartition(":")
        scheduler = self.scheduler
        self.http = ProbeServer(
            host or "0.0.0.0",
            int(port),
            self.metrics,
            self.readiness,
            scheduler.explain,
            debug_from_anywhere=run_cfg.debug_from_anywhere,
            nominations=scheduler.preemptions.view,
            nodes=lambda: nodesums.held(scheduler.state),
            before_scrape=scheduler.observe_cluster,
        )
        self.stopping = asyncio.Event()  # set by SIGTERM or SIGINT
        self.loops: list[asyncio.Task[Any]] = []

    def _watch_needed(self, kind: str) -> bool:
        """The scheduler's ``watch_needed``: first called once the watches run."""
        return self.watches.needed(kind)

    def readiness(self) -> tuple[bool, str]:
        if self.stopping.is_set():
            return False, "shutting down"
        unsynced = self.watches.unsynced()
        if unsynced:
            return False, f"watches not synced: {', '.join(unsynced)}"
        role = "leader" if self.leadership.leading else "standby"
        return True, f"ready ({role}, epoch {self.leadership.epoch})"

    # ---- the steps ---------------------------------------------------------------------------

    @classmethod
    async def start_store_and_lease(cls, config: Config, kubeconfig: str | None) -> Replica:
        """The store (Redis, through Sentinel or not, or the embedded one), the apiserver
        client, every part wired (the lease is taken later, by the leadership loop), the probe
        server up (not ready until the watches have listed), SIGTERM and SIGINT caught."""
        run_cfg = config.run
        holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        store = open_store(run_cfg, holder)
        connections = run_cfg.tuning.api_connections + run_cfg.bind_concurrency
        client = await api_client(kubeconfig, connections)
        shared = bool(run_cfg.redis_url or run_cfg.redis_sentinel.master_name)
        replica = cls(config, store, client, holder, shared)
        await replica.http.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, replica.stopping.set)
        return replica

    async def start_watches(self) -> None:
        """The watches (watches.py), and the PodGroup status writer's own task (a standby keeps
        what changed and writes it once elected)."""
        await self.watches.start()
        self.loops.append(
            asyncio.create_task(self.scheduler.statuses.run(), name="podgroup-status")
        )

    async def wait_for_sync(self) -> bool:
        """Until the required watches have listed (True), or a signal came first (False): only a
        replica with synced watches competes for the lease, since a new leader must see the
        cluster."""
        synced = asyncio.create_task(self.watches.synced())
        stop_wait = asyncio.create_task(self.stopping.wait())
        await asyncio.wait({synced, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        synced.cancel()
        stop_wait.cancel()
        if self.stopping.is_set():
            return False
        heap.settle()  # the start-up's objects are never walked by the collector again
        log.info("watches synced", holder=self.holder)
        return True

    def run_loops(self) -> None:
        """The leadership loop (the lease: elected, renewed, lost) and the scheduling loop."""
        scheduler = self.scheduler
        self.loops.append(
            asyncio.create_task(
                self.leadership.run(scheduler.on_elected, scheduler.on_lost), name="leadership"
            )
        )
        self.loops.append(asyncio.create_task(scheduler.run(), name="scheduling-loop"))

    async def shut_down(self) -> None:
        """Readiness is off already (``stopping``). The loop stops taking pods and the binds in
        flight finish; then the lease is released, so a standby takes over at once; then the
        loops, the watches, the probe server and the clients stop. Each step has a time bound
        (run.tuning), by default all within the pod's terminationGracePeriodSeconds (30 s). Binds
        that outlast theirs keep the lease: it lapses on its own, and the fencing rule
        (binder.py) keeps a successor from racing them."""
        log.info("shutting down: readiness off, finishing binds in flight")
        drained = await _bounded("drain", self.scheduler.drain(), self.drain_s)
        if drained:
            await _bounded("lease release", self.leadership.release(), self.release_s)
        self.metrics.leader.set(0)
        self.metrics.epoch.set(0)
        for task in self.loops:
            task.cancel()
        stop_s = self.stop_s
        await _bounded("loops", asyncio.gather(*self.loops, return_exceptions=True), stop_s)
        await _bounded("watches", self.watches.stop(), stop_s)
        await _bounded("probe server", self.http.stop(), stop_s)
        with contextlib.suppress(Exception):
            await _bounded("store", self.store.close(), stop_s)
        await _bounded("apiserver client", self.client.close(), stop_s)
        log.info("stopped", holder=self.holder)


def open_store(run_cfg: Run, holder: str) -> Store:
    """Redis through its Sentinels, Redis at a URL, or the embedded in-memory store."""
    sentinel = run_cfg.redis_sentinel
    tuning = run_cfg.tuning
    if sentinel.master_name:
        log.info(
            "store",
            kind="redis-sentinel",
            master=sentinel.master_name,
            sentinels=list(sentinel.addresses),
            prefix=run_cfg.redis_prefix,
            holder=holder,
        )
        return RedisStore.from_sentinels(
            sentinel.master_name,
            sentinel.addresses,
            run_cfg.redis_url,
            run_cfg.redis_prefix,
            tuning.redis_timeout_seconds,
            tuning.store_reconcile_chunk,
            tuning.sentinel_timeout_seconds,
        )
    if run_cfg.redis_url:
        log.info("store", kind="redis", prefix=run_cfg.redis_prefix, holder=holder)
        return RedisStore.from_url(
            run_cfg.redis_url,
            run_cfg.redis_prefix,
            tuning.redis_timeout_seconds,
            tuning.store_reconcile_chunk,
        )
    log.warning(
        "store",
        kind="memory",
        detail="no Redis URL: embedded in-memory store; run a single replica only",
    )
    return MemoryStore(time.monotonic)


async def _bounded(step: str, work: Awaitable[object], seconds: float) -> bool:
    """One shutdown step, for at most ``seconds``; False (logged) when it did not finish."""
    try:
        async with asyncio.timeout(seconds):
            await work
    except TimeoutError:
        log.warning("shutdown step did not finish in time", step=step, seconds=seconds)
        return False
    return True
