"""``run.tuning``: the running scheduler's speed against its load, and the waits before it tries
again; one section of the config file (scheduler/config/__init__.py), its own module as the
agent's section is.

Each value is handed to the one part that uses it (service/scheduler.py, service/app.py,
service/watches.py). Those of state/ and kube/, layers below this one, keep their default as a
parameter default beside their use (kube/tuning.py, state/redis_store.py, state/sentinel.py),
which the field here starts from. docs/configuration.md says what each one trades.
"""

from __future__ import annotations

import msgspec

from scheduler.kube.tuning import LIST_PAGE, POOL_SIZE, REQUEST_TIMEOUT_S, WatchTiming
from scheduler.state.redis_store import RECONCILE_CHUNK, REDIS_TIMEOUT_S
from scheduler.state.sentinel import SENTINEL_TIMEOUT_S

_WATCH = WatchTiming()


class Tuning(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    """The running scheduler's speed against its load and its waits (``run.tuning``)."""

    # service/cycle.py: the most pods decided back to back before their claims go to the store
    # in one call (a backlog's store calls against how long watch events wait for a batch).
    batch_pods: int = 32
    # service/binder.py: tries of a Binding that failed for a reason worth retrying, the n-th
    # retry waiting n times bindRetrySeconds.
    bind_attempts: int = 3
    bind_retry_seconds: float = 0.5
    # service/effects.py: a failed re-read of a pod (effect CHECK) is tried again after this
    # long; an uncertain Binding (effect REBIND) is sent again after rebindSeconds.
    check_retry_seconds: float = 1.0
    rebind_seconds: float = 1.0
    # service/effects.py: how long after it was sent a Binding may still commit (kube-apiserver's
    # --request-timeout: a write stalled in etcd is answered, or given up, by then). A new
    # leader holds a previous leader's reservation where it is that long after its election.
    bind_commit_seconds: float = 60.0
    # service/binder.py: a Binding whose DRA devices have binding conditions (KEP-5007) waits
    # this long at most for their drivers to report them (kube-scheduler's bindingTimeout),
    # reading the claims every bindingConditionsPollSeconds (its 5 s poll).
    binding_conditions_seconds: float = 600.0
    binding_conditions_poll_seconds: float = 5.0
    # service/queue.py (kube-scheduler's podInitialBackoffSeconds, podMaxBackoffSeconds,
    # podMaxInUnschedulablePodsDuration): a failed pod's backoff doubles from the first to the
    # second; an unschedulable pod is retried after the third at the latest.
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    pod_max_unschedulable_seconds: float = 300.0
    # service/storesync.py: after a failed store write the store is reconciled with the
    # apiserver at most this often; writes queued meanwhile go at most storeWriteBatch per call.
    store_reconcile_seconds: float = 2.0
    store_write_batch: int = 1000
    # service/storesync.py: the marks of Bindings answered within this long go to the store
    # together (a release, or storeWriteBatch marks, sends them at once).
    store_mark_seconds: float = 0.02
    # state/redis_store.py: items per fenced reconcile call; how long a Redis call may take
    # before it counts as failed.
    store_reconcile_chunk: int = RECONCILE_CHUNK
    redis_timeout_seconds: float = REDIS_TIMEOUT_S
    # state/sentinel.py: how long a Sentinel may take to answer before the next one is asked.
    sentinel_timeout_seconds: float = SENTINEL_TIMEOUT_S
    # service/inventories.py: a burst of node events within this long is one store call.
    inventory_flush_seconds: float = 0.05
    # kube/client.py: apiserver connections besides the binds in flight (bindConcurrency).
    api_connections: int = POOL_SIZE
    # kube/api.py: how long one apiserver call may take before it counts as failed.
    api_timeout_seconds: float = REQUEST_TIMEOUT_S
    # kube/api.py: pods per page of a paged LIST.
    list_page_size: int = LIST_PAGE
    # service/podgroups.py: PodGroup status patches in flight at once; passes of the status
    # writer at least this far apart; a pass every podGroupIdleSeconds without being woken.
    pod_group_patches_in_flight: int = 4
    pod_group_pass_seconds: float = 0.2
    pod_group_idle_seconds: float = 1.0
    # service/podgroups.py: the PodGroup and Topology CRDs are looked at again this often (one
    # GET each); sooner, every crdRetrySeconds, while one cannot be read.
    crd_check_seconds: float = 60.0
    crd_retry_seconds: float = 5.0
    # service/events.py: pod Events waiting to be written, at most; past it they are dropped.
    event_queue_size: int = 1000
    # service/scheduler.py: the loop wakes at least this often while idle, so its timers
    # (nominations' and stale gangs' expiry) run at most this late.
    loop_tick_seconds: float = 1.0
    # service/app.py: the shutdown's time bounds: the binds in flight, the lease's release,
    # every other step (keep their sum within the pod's terminationGracePeriodSeconds); and
    # within the drain, how long the queued pod Events may take to be written.
    shutdown_drain_seconds: float = 20.0
    shutdown_release_seconds: float = 3.0
    shutdown_step_seconds: float = 1.0
    shutdown_events_seconds: float = 5.0
    # kube/tuning.py (WatchTiming): a watch's own timeout; the backoff after a failed LIST or
    # watch, doubling up to the max; LIST items decoded between two turns of the event loop.
    watch_timeout_seconds: int = _WATCH.timeout_s
    watch_backoff_seconds: float = _WATCH.backoff_s
    watch_backoff_max_seconds: float = _WATCH.backoff_max_s
    list_decode_slice: int = _WATCH.decode_slice

    def watch_timing(self) -> WatchTiming:
        return WatchTiming(
            self.watch_timeout_seconds,
            self.watch_backoff_seconds,
            self.watch_backoff_max_seconds,
            self.list_decode_slice,
        )
