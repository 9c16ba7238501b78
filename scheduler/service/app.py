"""`topo-scheduler run`: wires the watches, the store, leadership, the loop and the HTTP side.

Three reflectors feed the scheduler's snapshot:
- pending pods of this scheduler (``spec.schedulerName=<name>,spec.nodeName=``);
- pods bound to a node and not finished (``spec.nodeName!=,status.phase!=Succeeded,...``): which
  GPUs are in use; a pod leaving this set (finished or deleted) frees its GPUs. The two watches
  together tell a bind from a delete;
- nodes.

PodDisruptionBudgets are watched from the start (preemption ranks its candidates by the budgets
they would break) but not waited for: a replica whose watch of them fails (no RBAC for them, say)
still schedules, and an eviction a budget refuses is still handled (preemption.py).

Optional ones: namespaces, claims and volumes once a pending pod needs them, and PodGroups
(scheduler-plugins' and Volcano's) while their CRD exists (podgroups.py: checked at start and
every minute). The PodGroup watches also feed the PodGroup status writer (podgroups.py), as does
the bound-pods watch (which members are placed, running, finished).

Shutdown on SIGTERM or SIGINT, in this order: readiness turns off, the loop stops taking pods,
binds in flight finish, the lease is released (a standby takes over at once), watches and
clients close, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import structlog

from scheduler.config import Config, ConfigError, RedisSentinel, sentinel_problems
from scheduler.core.model.objects import PodInput, TopologyInput
from scheduler.core.snapshot import nodesums
from scheduler.kube.api import KubeApi
from scheduler.kube.budgets import PodDisruptionBudget, budget_from_obj
from scheduler.kube.client import api_client
from scheduler.kube.codec import (
    Claim,
    DeviceClass,
    Namespace,
    Node,
    Pod,
    ResourceClaim,
    Volume,
    claim_from_obj,
    device_class_from_obj,
    namespace_from_obj,
    node_from_obj,
    pod_from_obj,
    resource_claim_from_obj,
    resource_version,
    volume_from_obj,
)
from scheduler.kube.podgroups import CUSTOM_RESOURCES, CustomResource, PodGroup, listed_as
from scheduler.kube.topologies import KINDS as TOPOLOGY_KINDS
from scheduler.kube.topologies import (
    TOPOLOGY_RESOURCES,
    Topology,
    TopologyObjectError,
    topology_or_error,
)
from scheduler.kube.watch import Reflector
from scheduler.state.base import Store
from scheduler.state.memory import MemoryStore
from scheduler.state.redis_store import RedisStore

from . import heap
from .http import ProbeServer
from .leader import Leadership, LeaseTiming
from .metrics import Metrics, TimedStore
from .podbook import Stage
from .podgroups import CrdWatches, PodGroupStatuses, read_group
from .scheduler import Scheduler
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
    run_cfg = config.run
    holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    store: Store
    sentinel = run_cfg.redis_sentinel
    if sentinel.master_name:
        store = RedisStore.from_sentinels(
            sentinel.master_name,
            sentinel.addresses,
            run_cfg.redis_url,
            run_cfg.redis_prefix,
            run_cfg.tuning.redis_timeout_seconds,
            run_cfg.tuning.store_reconcile_chunk,
            run_cfg.tuning.sentinel_timeout_seconds,
        )
        log.info(
            "store",
            kind="redis-sentinel",
            master=sentinel.master_name,
            sentinels=list(sentinel.addresses),
            prefix=run_cfg.redis_prefix,
            holder=holder,
        )
    elif run_cfg.redis_url:
        store = RedisStore.from_url(
            run_cfg.redis_url,
            run_cfg.redis_prefix,
            run_cfg.tuning.redis_timeout_seconds,
            run_cfg.tuning.store_reconcile_chunk,
        )
        log.info("store", kind="redis", prefix=run_cfg.redis_prefix, holder=holder)
    else:
        store = MemoryStore(time.monotonic)
        log.warning(
            "store",
            kind="memory",
            detail="no Redis URL: embedded in-memory store; run a single replica only",
        )
    tuning = run_cfg.tuning
    watch_timing = tuning.watch_timing()
    client = await api_client(kubeconfig, tuning.api_connections + run_cfg.bind_concurrency)
    api = KubeApi(client, tuning.list_page_size, tuning.api_timeout_seconds)
    metrics = Metrics()
    store = TimedStore(
        store, metrics.store_latency, metrics.store_errors
    )  # timed, failures counted
    lease = run_cfg.lease
    # A store shared by several replicas: a leader may have come before this one, and the
    # apiserver's epoch witness records who leads (witness.py).
    shared = bool(run_cfg.redis_url or sentinel.master_name)
    witness = Witness(api, config.scheduler_name) if shared else None
    leadership = Leadership(
        store,
        holder,
        LeaseTiming(lease.duration_seconds, lease.renew_seconds, lease.retry_seconds),
        time.monotonic,
        superseded=None if witness is None else witness.superseded,
    )
    started: dict[str, list[Reflector[Any]]] = {}

    def watch_needed(kind: str) -> bool:
        """Start ``kind``'s watches if they are not running; True once they have listed. A
        PodGroup watch (by CRD name) runs while its CRD exists: True once listed, or when the
        CRD does not exist. (It reads the watches defined below: it is first called once they
        run.)"""
        if kind in CUSTOM_RESOURCES or kind in TOPOLOGY_RESOURCES:
            return crds.ready(kind)
        if kind in optional:
            started[kind] = optional.pop(kind)
            for reflector in started[kind]:
                log.info("starting watch", watch=reflector.name)
                tasks.append(asyncio.create_task(reflector.run(), name=f"watch-{reflector.name}"))
        return all(r.synced.is_set() for r in started.get(kind, ()))

    scheduler = Scheduler(
        config.to_core(),
        config.scheduler_name,
        api,
        store,
        leadership,
        metrics,
        time.monotonic,
        bind_concurrency=run_cfg.bind_concurrency,
        gang_wait_timeout=config.gang.wait_timeout_seconds,
        stale_gang_policy=config.gang.stale_gang_policy,
        stale_gang_grace=config.gang.stale_gang_grace_seconds,
        preemption=config.preemption,
        tuning=run_cfg.tuning,
        # The embedded store serves one replica: no other leader can have come before.
        wait_for_unknown_leader=shared,
        witness=witness,
        watch_needed=watch_needed,
    )

    # scheduler-plugins PodGroups' status, written by the leader when nobody else writes it.
    assumed_stage = frozenset({Stage.ASSUMED})
    statuses = PodGroupStatuses(
        api.patch_pod_group_status,
        lambda: leadership.leading,
        lambda: [e.pod for e in scheduler.book.in_stages(assumed_stage) if e.pod is not None],
        api.mark_initially_scheduled,
    )

    def pods_version(p: Pod) -> str:
        return p.metadata.resource_version

    class BoundList:
        """The bound pods' LIST, taken in as it arrives (kube/watch.py's Relist)."""

        def begin(self) -> None:
            scheduler.intake.bound_list_begin()
            statuses.pods_list_begin()

        def page(self, pods: list[PodInput]) -> None:
            scheduler.intake.bound_list_page(pods)
            statuses.pods_list_page(pods)

        def end(self, version: str) -> None:
            scheduler.intake.bound_list_end(resource_version(version))
            statuses.pods_list_end()

    def bound_event(kind: str, p: Pod) -> None:
        pod = pod_from_obj(p)
        scheduler.intake.bound_event(kind, pod)
        statuses.pod_event(kind, pod)

    pending_selector = f"spec.schedulerName={config.scheduler_name},spec.nodeName="
    bound_selector = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
    reflectors: list[Reflector[Any]] = [
        Reflector(
            "nodes",
            Node,
            api.list_nodes,
            api.watch_nodes,
            lambda nodes: scheduler.intake.replace_nodes([node_from_obj(n) for n in nodes]),
            lambda kind, n: scheduler.intake.node_event(kind, node_from_obj(n)),
            lambda n: n.metadata.resource_version,
            timing=watch_timing,
        ),
        Reflector(
            "bound-pods",
            Pod,
            lambda: api.list_pods(bound_selector),
            lambda rv, t: api.watch_pods(rv, t, bound_selector),
            lambda pods: None,  # taken in by BoundList
            bound_event,
            pods_version,
            page_call=lambda token: api.list_pods_page(bound_selector, token),
            convert=pod_from_obj,
            relist=BoundList(),
            timing=watch_timing,
        ),
        Reflector(
            "pending-pods",
            Pod,
            lambda: api.list_pods(pending_selector),
            lambda rv, t: api.watch_pods(rv, t, pending_selector),
            scheduler.intake.replace_pending,
            lambda kind, p: scheduler.intake.pending_event(kind, pod_from_obj(p)),
            pods_version,
            page_call=lambda token: api.list_pods_page(pending_selector, token),
            convert=pod_from_obj,
            timing=watch_timing,
        ),
    ]
    stopping = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []

    def version(obj: Any) -> str:
        return str(obj.metadata.resource_version)

    # Namespaces (for namespaceSelector) and claims and volumes (for the volume filter) are
    # watched only once a pending pod needs them: most clusters' GPU pods use neither, and a
    # scheduler that never needs them asks the apiserver for nothing more.
    def lazy(kind: str, struct: Any, convert: Any, replace: Any, event: Any) -> Reflector[Any]:
        return Reflector(
            kind,
            struct,
            lambda: api.list_kind(kind),
            lambda rv, t: api.watch_kind(kind, rv, t),
            lambda items: replace([convert(item) for item in items]),
            lambda change, item: event(change, convert(item)),
            version,
            timing=watch_timing,
        )

    optional: dict[str, list[Reflector[Any]]] = {
        "namespaces": [
            lazy(
                "namespaces",
                Namespace,
                namespace_from_obj,
                scheduler.intake.replace_namespaces,
                scheduler.intake.namespace_event,
            )
        ],
        # DRA (filters/dra.py): ResourceClaims and DeviceClasses, once a pod uses a claim.
        "dra": [
            lazy(
                "resourceclaims",
                ResourceClaim,
                resource_claim_from_obj,
                scheduler.intake.replace_resource_claims,
                scheduler.intake.resource_claim_event,
            ),
            lazy(
                "deviceclasses",
                DeviceClass,
                device_class_from_obj,
                scheduler.intake.replace_device_classes,
                scheduler.intake.device_class_event,
            ),
        ],
        "volumes": [
            lazy(
                "persistentvolumeclaims",
                Claim,
                claim_from_obj,
                scheduler.intake.replace_claims,
                scheduler.intake.claim_event,
            ),
            lazy(
                "persistentvolumes",
                Volume,
                volume_from_obj,
                scheduler.intake.replace_volumes,
                scheduler.intake.volume_event,
            ),
        ],
    }

    # PodGroups of either API group, while their CRD exists.
    def pod_group_reflector(resource: CustomResource) -> Reflector[PodGroup]:
        kind = resource.name

        def replace(items: list[PodGroup]) -> None:
            read = [read_group(listed_as(item, resource)) for item in items]
            scheduler.intake.replace_pod_groups(resource.group, [group for group, _ in read])
            statuses.groups_replaced(resource.group, read)

        def event(change: str, item: PodGroup) -> None:
            group, observed = read_group(item)
            scheduler.intake.pod_group_event(change, group)
            if change == "DELETED":
                statuses.group_removed(group.key)
            else:
                statuses.group_set(group, observed)

        return Reflector(
            kind,
            PodGroup,
            lambda: api.list_kind(kind),
            lambda rv, t: api.watch_kind(kind, rv, t),
            replace,
            event,
            version,
            timing=watch_timing,
        )

    # Kueue's and KAI's Topology objects (issue 21), while their CRD exists.
    def topology_reflector(resource: CustomResource) -> Reflector[Topology]:
        kind = resource.name
        project = TOPOLOGY_KINDS[resource.group]

        def usable(item: Topology) -> TopologyInput | None:
            found = topology_or_error(item)
            if isinstance(found, TopologyObjectError):
                log.warning("Topology not usable", error=str(found))
                return None
            return found

        def replace(items: list[Topology]) -> None:
            found = [usable(item) for item in items]
            scheduler.intake.replace_topologies(project, [t for t in found if t is not None])

        def event(change: str, item: Topology) -> None:
            found = usable(item)
            if found is not None:
                scheduler.intake.topology_event(change, found)
            elif change == "DELETED":
                scheduler.intake.topology_event(
                    change, TopologyInput(project, item.metadata.name, ())
                )

        return Reflector(
            kind,
            Topology,
            lambda: api.list_kind(kind),
            lambda rv, t: api.watch_kind(kind, rv, t),
            replace,
            event,
            version,
            timing=watch_timing,
        )

    def crd_cleared(kind: str) -> None:
        if kind in TOPOLOGY_RESOURCES:
            scheduler.intake.replace_topologies(TOPOLOGY_KINDS[TOPOLOGY_RESOURCES[kind].group], [])
            return
        resource = CUSTOM_RESOURCES[kind]
        scheduler.intake.replace_pod_groups(resource.group, [])
        statuses.groups_replaced(resource.group, [])

    def maker(resource: CustomResource) -> Callable[[], Reflector[Any]]:
        return lambda: pod_group_reflector(resource)

    def topology_maker(resource: CustomResource) -> Callable[[], Reflector[Any]]:
        return lambda: topology_reflector(resource)

    crds = CrdWatches(
        api.crd_established,
        {name: maker(resource) for name, resource in CUSTOM_RESOURCES.items()}
        | {name: topology_maker(resource) for name, resource in TOPOLOGY_RESOURCES.items()},
        crd_cleared,
    )

    def readiness() -> tuple[bool, str]:
        if stopping.is_set():
            return False, "shutting down"
        unsynced = [r.name for r in reflectors if not r.synced.is_set()]
        if unsynced:
            return False, f"watches not synced: {', '.join(unsynced)}"
        role = "leader" if leadership.leading else "standby"
        return True, f"ready ({role}, epoch {leadership.epoch})"

    host, _, port = run_cfg.http_address.rpartition(":")
    http = ProbeServer(
        host or "0.0.0.0",
        int(port),
        metrics,
        readiness,
        scheduler.explain,
        debug_from_anywhere=run_cfg.debug_from_anywhere,
        nominations=scheduler.preemptions.view,
        nodes=lambda: nodesums.held(scheduler.state),
        before_scrape=scheduler.observe_cluster,
    )
    await http.start()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)

    tasks += [asyncio.create_task(r.run(), name=f"watch-{r.name}") for r in reflectors]
    budgets = Reflector(
        "poddisruptionbudgets",
        PodDisruptionBudget,
        lambda: api.list_kind("poddisruptionbudgets"),
        lambda rv, t: api.watch_kind("poddisruptionbudgets", rv, t),
        lambda items: scheduler.preemptions.replace_budgets([budget_from_obj(b) for b in items]),
        lambda change, b: scheduler.preemptions.budget_event(change, budget_from_obj(b)),
        version,
        timing=watch_timing,
    )
    tasks.append(asyncio.create_task(budgets.run(), name="watch-poddisruptionbudgets"))
    # The PodGroup CRDs there are now (before any decision); looked at again every minute.
    crds_read = await crds.check()
    tasks.append(asyncio.create_task(crds.run(crds_read), name="podgroup-crds"))
    tasks.append(asyncio.create_task(statuses.run(), name="podgroup-status"))

    # Only a replica with synced watches competes for the lease: a new leader must see the cluster.
    async def all_synced() -> None:
        for r in reflectors:
            await r.synced.wait()

    synced = asyncio.create_task(all_synced())
    stop_wait = asyncio.create_task(stopping.wait())
    await asyncio.wait({synced, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    synced.cancel()
    stop_wait.cancel()
    if not stopping.is_set():
        heap.settle()  # the start-up's objects are never walked by the collector again
        log.info("watches synced", holder=holder)
        tasks.append(
            asyncio.create_task(
                leadership.run(scheduler.on_elected, scheduler.on_lost), name="leadership"
            )
        )
        tasks.append(asyncio.create_task(scheduler.run(), name="scheduling-loop"))

    await stopping.wait()
    log.info("shutting down: readiness off, finishing binds in flight")
    await scheduler.drain()
    await leadership.release()
    metrics.leader.set(0)
    metrics.epoch.set(0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await crds.stop()
    await http.stop()
    with contextlib.suppress(Exception):
        await store.close()
    await client.close()
    log.info("stopped", holder=holder)
    return 0
