"""The live scheduling loop: a serial scheduling cycle and concurrent binding, joined by
assume/forget (kube-scheduler's schedule_one.go shape).

Data flows one way: watch events -> ClusterState (the core's snapshot) -> core decision -> store
reservation -> bind.

Scheduling cycle (one task, one unit at a time): pop a pod from the queue; if it belongs to a gang,
gather every pending member; ask the core; on Placed, reserve all claims in one store call
(fenced by the leader epoch), assume them in the snapshot, and hand them to a binding task.
Nothing in the cycle waits on the apiserver.

Binding cycle (many tasks, bounded): bind each pod with the Binding subresource carrying the
device annotations; 409/404 re-read the pod before deciding anything. Then mark the bound ones in
the store. Pods that could not be bound are forgotten (snapshot) and released (store); for a gang,
the members already bound stay, and the rest are re-planned on the next cycle: the core counts
bound members as present and plans only the missing ones. A gang never holds reservations for
members that are not being bound right now, so two gangs cannot deadlock each other.

Leadership: only the leader schedules. On election it reconciles the store against the
apiserver's bound pods (in the same store call it writes every node's inventory), loads the
reservations a previous leader left for pods that are still pending (it may have died mid-bind),
and only then takes the first pod. Node events reach the store's inventories through a batched
background flush (inventories.py), never through the per-pod path.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
import structlog

from scheduler.core.cluster import ClusterState, Holding, bits, holding_of
from scheduler.core.cycle import Unit, decide, gang_of
from scheduler.core.decisions import Decision, Placed, Placement, Waiting
from scheduler.core.formats.assignment import assignment_annotations
from scheduler.core.objects import NodeInput, PodInput
from scheduler.core.requests import RequestError, parse_gang
from scheduler.core.settings import CoreSettings
from scheduler.kube.api import BindResult
from scheduler.state.base import Claim, Conflict, Fenced, ShareClaim, Store, StoreError

from .inventories import NodeInventories
from .leader import Leadership
from .metrics import Metrics
from .queue import SchedulingQueue

log = structlog.get_logger("scheduler")

BIND_ATTEMPTS = 3
BIND_RETRY_S = 0.5
# After a reservation conflict the store is reconciled with the apiserver, at most this often.
RECONCILE_MIN_S = 2.0


class Cluster(Protocol):
    """What the loop needs from the apiserver (scheduler.kube.api.KubeApi + the codec)."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindResult: ...

    async def get_pod(self, namespace: str, name: str) -> PodInput | None: ...

    async def set_unschedulable(self, namespace: str, name: str, message: str) -> None: ...

    async def event(
        self,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        kind: str,
        timestamp: str,
    ) -> None: ...


class Explanation(msgspec.Struct):
    pod: str
    result: str
    reason: str = ""
    node: str = ""
    devices: tuple[int, ...] = ()
    gang: str | None = None
    attempts: int = 0


class Scheduler:
    def __init__(
        self,
        settings: CoreSettings,
        scheduler_name: str,
        cluster: Cluster,
        store: Store,
        leadership: Leadership,
        metrics: Metrics,
        clock: Callable[[], float],
        bind_concurrency: int = 16,
        gang_wait_timeout: float = 600.0,
    ) -> None:
        self.name = scheduler_name
        self.gang_wait_timeout = gang_wait_timeout  # 0: wait forever, say nothing
        self.cluster = cluster
        self.store = store
        self.leadership = leadership
        self.metrics = metrics
        self.clock = clock
        self.state = ClusterState(settings)
        self.queue = SchedulingQueue(clock)
        self.pending: dict[str, PodInput] = {}
        self.first_seen: dict[str, float] = {}
        self.in_flight: dict[str, Placement] = {}
        self.explanations: dict[str, Explanation] = {}
        self._reported: dict[str, str] = {}  # last message written to the pod, to not repeat it
        self._bind_slots = asyncio.Semaphore(bind_concurrency)
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.accepting = True
        self.ready_to_schedule = False  # set after the leader's reconcile
        self.bound_synced = False
        # Set when the store disagreed with the snapshot; the loop then reconciles (rate-limited).
        self._needs_reconcile = False
        self._last_reconcile = 0.0
        self.inventories = NodeInventories(
            store,
            leadership,
            lambda: {name: node.inventory for name, node in self.state.nodes.items()},
            lambda: self.accepting and self.leadership.leading,
            self._spawn,
            self._store_behind,
        )

    # ---- watch events (synchronous, cheap) ---------------------------------------------------

    def _ours_pending(self, pod: PodInput) -> bool:
        return (
            pod.scheduler_name == self.name
            and not pod.node_name
            and not pod.deleting
            and not pod.finished
        )

    def replace_pending(self, pods: list[PodInput]) -> None:
        fresh = {p.key: p for p in pods if self._ours_pending(p)}
        for key in list(self.pending):
            if key not in fresh:
                self._drop_pending(key)
        # A LIST returns pods in name order; the queue wants them in creation order.
        for pod in sorted(fresh.values(), key=lambda p: (p.created, p.key)):
            self.pending_event("ADDED", pod)

    def pending_event(self, kind: str, pod: PodInput) -> None:
        key = pod.key
        if kind == "DELETED" or not self._ours_pending(pod):
            self._drop_pending(key)
            return
        old = self.pending.get(key)
        self.pending[key] = pod
        self.first_seen.setdefault(key, self.clock())
        if old is None or old != pod:
            self.queue.add(key)
            if gang_of(pod) is not None and old is None:
                self.queue.on_cluster_event()  # a gang member arrived: waiting members retry
        self._kick()

    def _drop_pending(self, key: str) -> None:
        if self.pending.pop(key, None) is not None:
            self.queue.delete(key)
        self._reported.pop(key, None)
        if key not in self.in_flight:  # a bind in flight records its latency when it returns
            self.first_seen.pop(key, None)

    def replace_bound(self, pods: list[PodInput]) -> None:
        keep = {p.key for p in pods}
        gone = [
            key
            for key in self.state.holdings
            if key not in keep and key not in self.in_flight and key not in self.pending
        ]
        for key in gone:
            self._forget_bound(key)
        for pod in pods:
            self.bound_event("ADDED", pod)
        self.bound_synced = True

    def bound_event(self, kind: str, pod: PodInput) -> None:
        key = pod.key
        if kind == "DELETED" or pod.finished or not pod.node_name:
            if key in self.state.holdings and key not in self.in_flight:
                self._forget_bound(key)
            return
        before = self.state.holdings.get(key)
        warning = self.state.add_bound_pod(pod)
        if warning:
            log.warning("bound pod", pod=key, warning=warning)
        after = self.state.holdings.get(key)
        if before is not None and after is not None and before.whole != after.whole:
            # The device plugin reported other GPUs than we reserved (its mode `adopt`): they
            # are the truth, so the store must follow at the next (rate-limited) reconcile.
            log.info("bound pod moved GPUs", pod=key, node=after.node, devices=bits(after.whole))
            self._needs_reconcile = True
            self._kick()
        if key not in self.in_flight:  # our own binds record their latency when they return
            self.first_seen.pop(key, None)

    def _forget_bound(self, key: str) -> None:
        """A bound pod finished or was deleted: its GPUs are free, in the snapshot and the store."""
        holding = self.state.holdings[key]
        self.state.remove_pod(key)
        if holding.uid:
            self._spawn(self._release_in_store([holding.uid]))
        self.queue.on_cluster_event()
        self._kick()

    async def _release_in_store(self, uids: list[str]) -> None:
        epoch = self.leadership.epoch
        if epoch is None or not self.leadership.leading:
            return  # the next leader's reconcile frees them
        try:
            await self.store.release(self.leadership.holder, epoch, uids)
        except StoreError as exc:
            self._needs_reconcile = True
            log.warning("store release failed", uids=uids, error=str(exc))

    def replace_nodes(self, nodes: list[NodeInput]) -> None:
        names = {n.name for n in nodes}
        for name in list(self.state.nodes):
            if name not in names:
                self.state.remove_node(name)
                self.inventories.changed(name)
        for node in nodes:
            self.node_event("ADDED", node)

    def node_event(self, kind: str, node: NodeInput) -> None:
        if kind == "DELETED":
            self.state.remove_node(node.name)
            self.inventories.changed(node.name)
            return
        current = self.state.nodes.get(node.name)
        if current is not None and current.node == node:
            # Heartbeat-only status churn: nothing we read changed. What we read includes the
            # allocatable amount of each whole-GPU resource (the codec keeps only those), so a
            # device plugin that registers, changes its count or goes down refreshes the node.
            return
        warning = self.state.set_node(node)
        if warning:
            log.warning("node inventory", node=node.name, warning=warning)
        self.inventories.changed(node.name)
        self.queue.on_cluster_event()
        self._kick()

    def _kick(self) -> None:
        self._wake.set()

    def _store_behind(self) -> None:
        self._needs_reconcile = True

    # ---- leadership --------------------------------------------------------------------------

    async def on_elected(self, epoch: int) -> None:
        self.metrics.leader.set(1)
        while not self.bound_synced:
            await asyncio.sleep(0.05)
        await self._reconcile(epoch, elected=True)  # a failure gives the lease up (leader.py)
        self.ready_to_schedule = True
        for key in self.pending:
            self.queue.add(key)
        self._kick()

    async def _reconcile(self, epoch: int, elected: bool = False) -> None:
        """Make the store equal to the apiserver's truth (bound pods in the snapshot).

        Right after an election it also writes every node inventory; later (rate-limited)
        reconciles do only if an inventory write failed since (inventories.py). If it fails,
        a reconcile is still needed: the loop tries again."""
        self._needs_reconcile = False
        self._last_reconcile = self.clock()
        try:
            await self._write_truth(epoch, elected)
        except BaseException:
            self._needs_reconcile = True
            raise

    async def _write_truth(self, epoch: int, elected: bool) -> None:
        truth = [c for c in (self._claim_of(h) for h in self.state.holdings.values()) if c]
        truth = [c for c in truth if c.pod not in self.in_flight and c.pod not in self.pending]
        pending_uids = [p.uid for p in self.pending.values() if p.uid]
        async with self.inventories.reconciling(elected) as nodes:
            report = await self.store.reconcile(
                self.leadership.holder, epoch, truth, pending_uids, nodes
            )
        # Reservations a previous leader made for pods still pending: keep their GPUs out of
        # reach until those pods are decided again (their own new reservation replaces them).
        by_uid = {p.uid: p for p in self.pending.values()}
        loaded = 0
        for record in (await self.store.records()).values():
            pod = by_uid.get(record.claim.uid)
            if record.state == "reserved" and pod is not None and pod.key not in self.in_flight:
                self.state.hold(_holding_of(record.claim))
                loaded += 1
        log.info(
            "reconciled store",
            epoch=epoch,
            added=report.added,
            freed=report.freed,
            kept=report.kept,
            loaded_reservations=loaded,
            conflicts=list(report.conflicts),
        )

    async def on_lost(self) -> None:
        self.metrics.leader.set(0)
        self.ready_to_schedule = False

    def _claim_of(self, holding: Holding) -> Claim | None:
        if not holding.uid:
            return None
        node = self.state.nodes.get(holding.node)
        shares = []
        for s in holding.shares:
            cap_mem, cap_sgpu = 0, 0
            if node is not None and node.inventory is not None:
                try:
                    cap_mem = node.inventory.device(s.index).memory_mib
                except KeyError:
                    cap_mem = 0
                cap_sgpu = node.inventory.sgpu_per_card
            shares.append(
                ShareClaim(s.index, s.core, s.memory_mib, s.sgpu, s.qos or "", cap_mem, cap_sgpu)
            )
        devices = tuple(bits(holding.whole))
        return Claim(
            uid=holding.uid,
            pod=holding.pod,
            node=holding.node,
            devices=devices,
            shares=tuple(shares),
            gang=holding.gang or "",
            replicas=holding.replicas if holding.gang else 0,
            resources=holding.resources,
        )

    # ---- scheduling cycle --------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            if not (self.accepting and self.ready_to_schedule and self.leadership.leading):
                await self._sleep_until_woken(1.0)
                continue
            await self.reconcile_if_needed()
            key = self.queue.pop()
            self._update_gauges()
            if key is None:
                wake_at = self.queue.next_wakeup()
                timeout = 1.0 if wake_at is None else max(0.0, min(1.0, wake_at - self.clock()))
                await self._sleep_until_woken(timeout)
                continue
            try:
                await self.schedule_one(key)
            except Exception:
                log.exception("scheduling attempt crashed", pod=key)
                self.queue.backoff(key)
            await asyncio.sleep(0)  # let watch events in between attempts

    async def reconcile_if_needed(self) -> None:
        """The loop's reconcile after the store disagreed with the snapshot (a reservation
        conflict, GPUs moved by the device plugin, a failed store write), at most every
        RECONCILE_MIN_S. A failed one stays needed, so the loop tries again."""
        if not self._needs_reconcile or self.clock() - self._last_reconcile < RECONCILE_MIN_S:
            return
        epoch = self.leadership.epoch
        if epoch is None:
            return
        try:
            await self._reconcile(epoch)
        except StoreError as exc:
            log.warning("reconcile failed", error=str(exc))
        except Exception:
            log.exception("reconcile crashed")

    async def _sleep_until_woken(self, timeout: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _update_gauges(self) -> None:
        for queue, n in self.queue.counts().items():
            self.metrics.pending.labels(queue=queue).set(n)

    def _unit_for(self, pod: PodInput) -> Unit:
        gang = gang_of(pod)
        if gang is None:
            return Unit(None, (pod,))
        members = [
            p for p in self.pending.values() if p.key not in self.in_flight and gang_of(p) == gang
        ]
        members.sort(key=lambda p: p.key)
        for m in members:
            if m.key != pod.key:
                self.queue.take(m.key)
        return Unit(gang, tuple(members))

    async def schedule_one(self, key: str) -> None:
        pod = self.pending.get(key)
        if pod is None or key in self.in_flight:
            return
        start = self.clock()
        unit = self._unit_for(pod)
        # A pending pod may still hold a reservation left by a previous leader; decide afresh.
        for member in unit.pods:
            stale = self.state.holdings.get(member.key)
            if stale is not None:
                self.state.release(stale)
        decision = decide(self.state, unit)
        result = await self._act(unit, decision)
        elapsed = self.clock() - start
        self.metrics.attempts.labels(result=result).inc()
        self.metrics.attempt_duration.labels(result=result).observe(elapsed)
        summary: dict[str, Any] = {
            "pod": key,
            "gang": unit.gang,
            "pods": len(unit.pods),
            "result": result,
            "duration_ms": round(elapsed * 1000, 3),
            "attempts": self.queue.attempts(key),
        }
        if isinstance(decision, Placed):
            summary["placements"] = {p.pod: [p.node, list(p.devices)] for p in decision.placements}
        else:
            summary["reason"] = decision.reason
        log.info("scheduling attempt", **summary)

    async def _act(self, unit: Unit, decision: Decision) -> str:
        if isinstance(decision, Placed):
            return await self._reserve_and_bind(unit, decision)
        result = "waiting" if isinstance(decision, Waiting) else "unschedulable"
        reason, retry_by = decision.reason, None
        if isinstance(decision, Waiting) and self.gang_wait_timeout > 0:
            # The gang holds nothing while it waits, so a timeout only changes what its pods
            # say; they are retried when it runs out so that the message appears on time.
            now = self.clock()
            since = min(self.first_seen.get(p.key, now) for p in unit.pods)
            retry_by = since + self.gang_wait_timeout
            if now >= retry_by:
                reason += (
                    f"; waited {now - since:.0f} s, longer than gang.waitTimeoutSeconds "
                    f"({self.gang_wait_timeout:g} s)"
                )
                retry_by = None
        for pod in unit.pods:
            self.queue.unschedulable(pod.key, retry_by)
            self.explanations[pod.key] = Explanation(
                pod.key,
                result,
                reason,
                gang=unit.gang,
                attempts=self.queue.attempts(pod.key),
            )
            if self._reported.get(pod.key) != reason:
                self._reported[pod.key] = reason
                self._spawn(self._report_unschedulable(pod, reason))
        return result

    async def _reserve_and_bind(self, unit: Unit, decision: Placed) -> str:
        epoch = self.leadership.epoch
        if epoch is None or not self.leadership.leading:
            for pod in unit.pods:
                self.queue.add(pod.key)
            return "error"
        claims = []
        for placement in decision.placements:
            holding = holding_of(placement, _replicas_of(unit, placement.pod))
            claim = self._claim_of(holding)
            assert claim is not None
            claims.append(claim)
        try:
            await self.store.reserve(self.leadership.holder, epoch, claims)
        except Conflict as exc:
            # The snapshot was behind the store (another replica's leftovers or a race with a
            # watch event): retry after a backoff, by then the watches have caught up.
            log.warning("reservation conflict", pods=[p.key for p in unit.pods], error=str(exc))
            self._needs_reconcile = True
            for pod in unit.pods:
                self.queue.backoff(pod.key)
            return "error"
        except Fenced:
            log.warning("fenced: no longer leader", epoch=epoch)
            await self.on_lost()
            for pod in unit.pods:
                self.queue.add(pod.key)
            return "error"
        except StoreError as exc:
            log.warning("store unavailable", error=str(exc))
            for pod in unit.pods:
                self.queue.backoff(pod.key)
            return "error"
        pods = {p.key: p for p in unit.pods}
        for placement in decision.placements:  # assume
            self.state.apply(placement, _replicas_of(unit, placement.pod))
            self.in_flight[placement.pod] = placement
            self.queue.done(placement.pod)
        self._spawn(self._bind_all(unit, decision.placements, pods, epoch))
        return "scheduled"

    # ---- binding cycle -----------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bind_all(
        self,
        unit: Unit,
        placements: tuple[Placement, ...],
        pods: dict[str, PodInput],
        epoch: int,
    ) -> None:
        results = await asyncio.gather(
            *(self._bind_one(pods[p.pod], p) for p in placements), return_exceptions=True
        )
        now = self.clock()  # the binds are done: end-to-end latency ends here
        bound = [p for p, ok in zip(placements, results, strict=True) if ok is True]
        failed = [p for p, ok in zip(placements, results, strict=True) if ok is not True]
        if unit.gang and bound and not failed:
            first = min((self.first_seen.get(k, now) for k in pods), default=now)
            self.metrics.gang_wait.observe(max(0.0, now - first))
        holder = self.leadership.holder
        try:
            if bound:
                await self.store.mark_bound(holder, epoch, [p.uid for p in bound])
            if failed:
                await self.store.release(holder, epoch, [p.uid for p in failed])
        except StoreError as exc:
            # The next leader's (or our next) reconcile repairs the store from the apiserver.
            log.warning("store update after bind failed", error=str(exc))
        for p in bound:
            self.in_flight.pop(p.pod, None)
            seen = self.first_seen.pop(p.pod, None)
            if seen is not None:
                self.metrics.e2e.observe(now - seen)
            self.explanations[p.pod] = Explanation(
                p.pod, "scheduled", node=p.node, devices=p.devices, gang=p.gang
            )
        for p in failed:
            self.in_flight.pop(p.pod, None)
            holding = self.state.holdings.get(p.pod)
            if holding is not None:
                self.state.release(holding)  # forget
            if p.pod in self.pending:
                self.queue.backoff(p.pod)
        if failed:
            self.queue.on_cluster_event()
        self._kick()

    async def _bind_one(self, pod: PodInput, placement: Placement) -> bool:
        annotations = assignment_annotations(placement)
        async with self._bind_slots:
            for attempt in range(1, BIND_ATTEMPTS + 1):
                if not self.leadership.leading:
                    return False  # a deposed leader must not bind
                try:
                    result = await self.cluster.bind(
                        pod.namespace, pod.name, pod.uid, placement.node, annotations
                    )
                except Exception as exc:
                    self.metrics.bind_errors.labels(reason="exception").inc()
                    log.warning("bind failed", pod=pod.key, error=str(exc), attempt=attempt)
                    await asyncio.sleep(BIND_RETRY_S * attempt)
                    continue
                if result.ok:
                    self._spawn(self._report_scheduled(pod, placement))
                    return True
                self.metrics.bind_errors.labels(reason=str(result.status)).inc()
                if result.status in (404, 409):
                    return await self._settle_conflict(pod, placement)
                log.warning(
                    "bind refused", pod=pod.key, status=result.status, message=result.message
                )
                await asyncio.sleep(BIND_RETRY_S * attempt)
        return False

    async def _settle_conflict(self, pod: PodInput, placement: Placement) -> bool:
        """409 or 404: never assume; read the pod and take what the apiserver says."""
        current = await self.cluster.get_pod(pod.namespace, pod.name)
        if current is None or current.uid != pod.uid:
            return False  # deleted (or replaced by a new pod of the same name)
        if current.node_name == placement.node and current.annotations.get(
            "topo-scheduler.io/devices"
        ) == ",".join(str(i) for i in placement.devices):
            return True  # our own bind landed (a retry after a lost response)
        if current.node_name:
            # Bound elsewhere (another scheduler, or a previous leader): its annotations are the
            # truth, and the bound watch will charge them.
            return False
        return False

    async def _report_scheduled(self, pod: PodInput, placement: Placement) -> None:
        gpus = ",".join(str(i) for i in placement.devices) or "shared"
        message = f"Successfully assigned {pod.key} to {placement.node} (GPUs {gpus})"
        try:
            await self.cluster.event(
                pod.namespace, pod.name, pod.uid, "Scheduled", message, "Normal", _now()
            )
        except Exception as exc:
            log.warning("event failed", pod=pod.key, error=str(exc))

    async def _report_unschedulable(self, pod: PodInput, reason: str) -> None:
        try:
            await self.cluster.set_unschedulable(pod.namespace, pod.name, reason)
            await self.cluster.event(
                pod.namespace, pod.name, pod.uid, "FailedScheduling", reason, "Warning", _now()
            )
        except Exception as exc:
            log.warning("could not report unschedulable pod", pod=pod.key, error=str(exc))

    # ---- shutdown ----------------------------------------------------------------------------

    async def drain(self) -> None:
        """Stop taking pods and wait for the binds in flight."""
        self.accepting = False
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def explain(self, key: str) -> Explanation | None:
        return self.explanations.get(key)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _replicas_of(unit: Unit, pod_key: str) -> int:
    for pod in unit.pods:
        if pod.key == pod_key:
            try:
                gang = parse_gang(pod)
            except RequestError:
                return 0
            return gang.replicas if gang else 0
    return 0


def _holding_of(claim: Claim) -> Holding:
    from scheduler.core.decisions import Share

    whole = 0
    for i in claim.devices:
        whole |= 1 << i
    shares = tuple(
        Share(s.index, "", s.core, s.memory_mib, s.sgpu, s.qos or None) for s in claim.shares
    )
    return Holding(
        claim.pod,
        claim.node,
        whole,
        shares,
        claim.gang or None,
        claim.replicas,
        claim.uid,
        claim.resources,
    )
