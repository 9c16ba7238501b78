"""Prometheus metrics, named like kube-scheduler's so existing dashboards read them.

Each process gets its own CollectorRegistry (tests run several replicas in one interpreter).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
        self.store_latency = Histogram(
            "scheduler_store_request_duration_seconds",
            "Store (Redis) call latency by operation.",
            ["operation"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.leader = Gauge("scheduler_leader", "1 while this replica leads, else 0.", registry=r)
