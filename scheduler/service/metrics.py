"""Prometheus metrics, named like kube-scheduler's so existing dashboards read them.

Each process gets its own CollectorRegistry (tests run several replicas in one interpreter).
TimedStore times every store call in ``scheduler_store_request_duration_seconds{operation}``
(the operation is the Store method's name; ``reserve_each`` counts as ``reserve``), failed
calls included, and counts the failed ones in ``scheduler_store_errors{operation,error}``.

The gauges that describe the whole cluster (free GPUs per node class, gangs waiting) are set by
``observe_cluster`` when /metrics is scraped, not on every change: a scrape every few seconds
costs one pass over the nodes, where keeping them current would cost work on every bind.
The Grafana dashboard (deploy/helm/topo-scheduler/dashboards/) draws these metrics; a test checks
that every metric it queries is exported here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from scheduler.core.snapshot.cluster import ClusterState
from scheduler.state.base import (
    Claim,
    GangRecord,
    History,
    Nomination,
    Owner,
    ReconcileReport,
    Record,
    Store,
)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_E2E_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.attempts = Counter(
            "scheduler_schedule_attempts",
            "Scheduling attempts by result (scheduled, unschedulable, waiting, error).",
            ["result"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Time of one scheduling attempt: snapshot, core decision and store reservation.",
            ["result"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "scheduler_e2e_scheduling_duration_seconds",
            "From the pod's first sighting to its successful bind.",
            buckets=_E2E_BUCKETS,
            registry=r,
        )
        self.pending = Gauge(
            "scheduler_pending_pods", "Pending pods by queue.", ["queue"], registry=r
        )
        self.gang_wait = Histogram(
            "scheduler_gang_wait_duration_seconds",
            "From a gang's first member's sighting to the gang being bound.",
            buckets=_E2E_BUCKETS,
            registry=r,
        )
        self.bind_errors = Counter(
            "scheduler_bind_errors", "Failed bind calls by reason.", ["reason"], registry=r
        )
        self.unexpected = Counter(
            "scheduler_pod_book_unexpected_events",
            "Pod book events its transition table has no entry for (a bug), by stage and event.",
            ["stage", "event"],
            registry=r,
        )
        self.store_latency = Histogram(
            "scheduler_store_request_duration_seconds",
            "Store (Redis) call latency by operation.",
            ["operation"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.events_dropped = Counter(
            "scheduler_events_dropped",
            "Scheduled events dropped because the event lane was full (a backlog far ahead of "
            "the apiserver).",
            registry=r,
        )
        self.leader = Gauge("scheduler_leader", "1 while this replica leads, else 0.", registry=r)
        self.epoch = Gauge(
            "scheduler_leader_epoch",
            "The store epoch this replica leads under (fences its writes); 0 while it does not "
            "lead.",
            registry=r,
        )
        self.store_errors = Counter(
            "scheduler_store_errors",
            "Failed store (Redis) calls by operation and error (Fenced, Conflict, Unavailable, "
            "or the exception's class).",
            ["operation", "error"],
            registry=r,
        )
        self.witness_errors = Counter(
            "scheduler_witness_errors",
            "Failed calls to the epoch witness by call (read, write) and error (the HTTP status "
            "or the exception's class): while they last, this replica does not lead.",
            ["call", "error"],
            registry=r,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts",
            "Unschedulable units for which preemption was considered.",
            registry=r,
        )
        self.evictions = Counter(
            "scheduler_evictions",
            "Eviction API calls by reason (preemption, stale-gang) and outcome (evicted, "
            "blocked by a PodDisruptionBudget, gone, error).",
            ["reason", "outcome"],
            registry=r,
        )
        self.pending_reasons = Gauge(
            "scheduler_pending_pods_by_reason",
            "Pending pods by why they wait: untried, unschedulable, waiting (gang members or "
            "room), preempting (victims leaving), error, scheduled (a failed bind; set when "
            "/metrics is scraped).",
            ["reason"],
            registry=r,
        )
        self.gangs_waiting = Gauge(
            "scheduler_gangs_waiting",
            "Gangs with at least one member pending (set when /metrics is scraped).",
            registry=r,
        )
        self.gpus = Gauge(
            "scheduler_node_gpus",
            "Whole GPUs of the nodes with an inventory, by node class (vendor and model; set "
            "when /metrics is scraped).",
            ["vendor", "model"],
            registry=r,
        )
        self.free_gpus = Gauge(
            "scheduler_node_free_gpus",
            "Whole GPUs that no pod holds, by node class (vendor and model; set when /metrics "
            "is scraped).",
            ["vendor", "model"],
            registry=r,
        )

    def observe_cluster(
        self, state: ClusterState, gangs_waiting: int, pending: Mapping[str, int]
    ) -> None:
        """Set the cluster-wide gauges from the snapshot (one pass over the nodes) and the pod
        book's counts. A node class, or a reason, that is gone leaves the gauges too."""
        total: dict[tuple[str, str], int] = {}
        free: dict[tuple[str, str], int] = {}
        for node in state.gpu_nodes():
            inventory = node.inventory
            assert inventory is not None  # gpu_nodes() yields nodes with one
            key = (inventory.vendor, inventory.model or "unknown")
            total[key] = total.get(key, 0) + len(inventory.devices)
            free[key] = free.get(key, 0) + node.free_mask.bit_count()
        self.gpus.clear()
        self.free_gpus.clear()
        for (vendor, model), n in total.items():
            self.gpus.labels(vendor=vendor, model=model).set(n)
            self.free_gpus.labels(vendor=vendor, model=model).set(free[(vendor, model)])
        self.gangs_waiting.set(gangs_waiting)
        self.pending_reasons.clear()
        for reason, n in pending.items():
            self.pending_reasons.labels(reason=reason).set(n)


class TimedStore:
    """A Store that observes the duration of every call of the store it wraps, under the
    method's name; ``reserve_each`` counts as ``reserve`` (one reservation call either way)."""

    def __init__(
        self,
        store: Store,
        histogram: Histogram,
        errors: Counter,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.inner = store
        self._histogram = histogram
        self._errors = errors
        self._clock = clock

    @contextlib.contextmanager
    def _timed(self, operation: str) -> Iterator[None]:
        """Observe how long the block took, failures included, and count the failures."""
        started = self._clock()
        try:
            yield
        except Exception as exc:
            self._errors.labels(operation=operation, error=type(exc).__name__).inc()
            raise
        finally:
            self._histogram.labels(operation=operation).observe(self._clock() - started)

    async def acquire(self, holder: str, ttl_ms: int) -> int | None:
        with self._timed("acquire"):
            return await self.inner.acquire(holder, ttl_ms)

    async def renew(self, holder: str, epoch: int, ttl_ms: int) -> bool:
        with self._timed("renew"):
            return await self.inner.renew(holder, epoch, ttl_ms)

    async def release_lease(self, holder: str, epoch: int) -> None:
        with self._timed("release_lease"):
            await self.inner.release_lease(holder, epoch)

    async def kept_history(self, holder: str, epoch: int) -> History:
        with self._timed("kept_history"):
            return await self.inner.kept_history(holder, epoch)

    async def mark_settled(self, holder: str, epoch: int) -> None:
        with self._timed("mark_settled"):
            await self.inner.mark_settled(holder, epoch)

    async def reserve(self, holder: str, epoch: int, claims: list[Claim]) -> None:
        with self._timed("reserve"):
            await self.inner.reserve(holder, epoch, claims)

    async def reserve_each(
        self, holder: str, epoch: int, units: list[list[Claim]]
    ) -> list[str | None]:
        with self._timed("reserve"):
            return await self.inner.reserve_each(holder, epoch, units)

    async def mark_bound(self, holder: str, epoch: int, uids: list[str]) -> None:
        with self._timed("mark_bound"):
            await self.inner.mark_bound(holder, epoch, uids)

    async def release(self, holder: str, epoch: int, uids: list[str]) -> None:
        with self._timed("release"):
            await self.inner.release(holder, epoch, uids)

    async def reconcile(
        self,
        holder: str,
        epoch: int,
        truth: list[Claim],
        pending: list[str],
        nodes: dict[str, str] | None = None,
    ) -> ReconcileReport:
        with self._timed("reconcile"):
            return await self.inner.reconcile(holder, epoch, truth, pending, nodes)

    async def nominate(self, holder: str, epoch: int, nomination: Nomination, now_ms: int) -> None:
        with self._timed("nominate"):
            await self.inner.nominate(holder, epoch, nomination, now_ms)

    async def drop_nominations(
        self, holder: str, epoch: int, uids: list[str], now_ms: int | None = None
    ) -> None:
        with self._timed("drop_nominations"):
            await self.inner.drop_nominations(holder, epoch, uids, now_ms)

    async def nominations(self, now_ms: int) -> dict[str, Nomination]:
        with self._timed("nominations"):
            return await self.inner.nominations(now_ms)

    async def update_nodes(
        self, holder: str, epoch: int, put: dict[str, str], drop: list[str]
    ) -> None:
        with self._timed("update_nodes"):
            await self.inner.update_nodes(holder, epoch, put, drop)

    async def records(self) -> dict[str, Record]:
        with self._timed("records"):
            return await self.inner.records()

    async def gangs(self) -> dict[str, GangRecord]:
        with self._timed("gangs"):
            return await self.inner.gangs()

    async def owners(self, node: str) -> dict[int, Owner]:
        with self._timed("owners"):
            return await self.inner.owners(node)

    async def nodes(self) -> dict[str, str]:
        with self._timed("nodes"):
            return await self.inner.nodes()

    async def close(self) -> None:
        await self.inner.close()
