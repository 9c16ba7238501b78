"""The binding cycle: Bindings with the device annotations, several in flight; each pod's
outcome is returned (effects.py turns it into a pod book event).

Fencing rule (docs/operations.md, "State and HA"): a Binding is sent only while this replica's lease
has more than the bind timeout left, and is abandoned when that timeout runs out. So every Binding
of a leader completes before its local lease ends, and its local lease ends before the store's lease
(renewals are timed from before the request). A replica that takes over after the lease lapsed
cannot race a Binding of the previous leader; one that cannot know who led before (the
store's epochs started afresh: a flushed or new Redis) waits one lease duration before its
first decision (scheduler.py), by which time any previous leader's Binding has completed.

The outcome of one pod:
- ``BIND_OK``: the apiserver bound it (or a retry found our own earlier bind landed);
- ``BIND_FAILED``: refused, or not sent because the lease is too short (or because its
  ResourceClaims could not be reserved for it): no Binding of this pod sent by this replica can
  land. Only then are its ResourceClaims' ``reservedFor`` entries for it removed (kube-scheduler's
  Unreserve; the allocation stays);
- ``BIND_GONE``: the pod no longer exists (404, or the name has another UID now);
- ``BIND_ELSEWHERE``: another scheduler or a previous leader bound it; the pod read back is
  returned, its annotations are the truth;
- ``BIND_UNKNOWN``: it may be bound: a Binding was sent without an answer (abandoned at the
  timeout, or its answer lost) and nothing has settled it since. A read-back that finds the pod
  still pending settles nothing (the abandoned request may yet commit, after an etcd stall): the
  book keeps its GPUs and has the same Binding sent again (``bind_all(..., uncertain=True)``), until
  an answer says: 201, 404, or a 409 whose pod is bound as we asked (then it is ours).

A pod with ResourceClaims has them reserved for it before every Binding, re-sends included (the
kubelet runs a pod only with its claims reserved for it). A claim write that fails before the
first Binding was sent is BIND_FAILED; after it (a re-send: ``uncertain``, or a retry after a
lost answer) it says nothing of the Bindings already sent, which may land: the pod is read back
as after any unanswered Binding (BIND_UNKNOWN while pending: its GPUs stay held, issue 30).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from scheduler.core.formats.assignment import assignment_annotations
from scheduler.core.model.decisions import Placement
from scheduler.core.model.dra import ResourceClaim
from scheduler.core.model.objects import PodInput
from scheduler.kube.podgroups import Write

from .apiserver import Cluster
from .leader import Leadership
from .metrics import Metrics
from .podbook import Event

log = structlog.get_logger("scheduler")


def bind_timeout_for(lease_s: float, renew_s: float) -> float:
    """The bind timeout: half the time a lease has left just before its renewal."""
    return max(0.05, (lease_s - renew_s) / 2)


@dataclass(frozen=True)
class Outcome:
    pod: PodInput
    placement: Placement
    event: Event
    current: PodInput | None = None  # the pod read back (BIND_ELSEWHERE)


class Binder:
    def __init__(
        self,
        cluster: Cluster,
        leadership: Leadership,
        metrics: Metrics,
        concurrency: int = 64,
        timeout_s: float = 5.0,
        *,
        attempts: int,
        retry_s: float,
        resource_claims: Mapping[str, ResourceClaim],
    ) -> None:
        self.cluster = cluster
        # The watched ResourceClaims by key: their UIDs are the preconditions of an Unreserve.
        self.resource_claims = resource_claims
        self.leadership = leadership
        self.metrics = metrics
        self._slots = asyncio.Semaphore(concurrency)
        self.timeout_s = timeout_s
        # A Binding that failed for a reason worth retrying is sent up to ``attempts`` times,
        # the n-th retry after n times ``retry_s`` (run.tuning.bindAttempts, bindRetrySeconds).
        self.attempts = attempts
        self.retry_s = retry_s
        self.in_flight = 0  # pods handed over whose outcome has not been returned yet

    async def bind_all(
        self, pods: list[tuple[PodInput, Placement]], uncertain: bool = False
    ) -> list[Outcome]:
        """Bind one unit's pods, concurrently; their outcomes, in order. ``uncertain``: an
        earlier Binding of theirs may have landed (a re-send)."""
        self.in_flight += len(pods)
        try:
            return list(
                await asyncio.gather(*(self.bind_one(pod, p, uncertain) for pod, p in pods))
            )
        finally:
            self.in_flight -= len(pods)

    def sizes(self) -> dict[str, int]:
        return {"in_flight": self.in_flight}

    def may_send(self) -> bool:
        """The fencing rule: the lease outlives a request started now."""
        return self.leadership.leading and self.leadership.remaining() > self.timeout_s

    async def bind_one(
        self, pod: PodInput, placement: Placement, uncertain: bool = False
    ) -> Outcome:
        try:
            event, current = await self._bind(pod, placement, uncertain)
        except Exception:
            log.exception("bind crashed", pod=pod.key)
            event, current = Event.BIND_UNKNOWN, None
        return Outcome(pod, placement, event, current)

    async def _bind(
        self, pod: PodInput, placement: Placement, uncertain: bool
    ) -> tuple[Event, PodInput | None]:
        async with self._slots:
            event, current = await self._send(pod, placement, uncertain)
            if event is Event.BIND_FAILED and pod.resource_claims and self.leadership.leading:
                # No Binding of ours can land: its claims let it go. Only while leading: a
                # later leader may have reserved them for the same pod meanwhile.
                await self._unreserve(pod)
            return event, current

    async def _send(
        self, pod: PodInput, placement: Placement, uncertain: bool
    ) -> tuple[Event, PodInput | None]:
        # Every attempt sends the same Binding: the placement's node and annotations.
        annotations = assignment_annotations(placement)
        # An earlier attempt may have landed without our seeing the answer.
        maybe_sent = uncertain
        if pod.resource_claims and not await self._reserve(pod):
            if maybe_sent:
                # A re-send's claim write failed: an earlier Binding may still land.
                return await self._read_back(pod, placement, maybe_sent)
            return Event.BIND_FAILED, None
        for attempt in range(1, self.attempts + 1):
            if not self.may_send():
                # A deposed leader must not bind, nor one whose request could outlive its
                # lease.
                if maybe_sent:
                    return await self._read_back(pod, placement, maybe_sent)
                return Event.BIND_FAILED, None
            try:
                result = await asyncio.wait_for(
                    self.cluster.bind(
                        pod.namespace, pod.name, pod.uid, placement.node, annotations
                    ),
                    self.timeout_s,
                )
            except Exception as exc:
                maybe_sent = True
                reason = "timeout" if isinstance(exc, TimeoutError) else "exception"
                self.metrics.bind_errors.labels(reason=reason).inc()
                log.warning("bind failed", pod=pod.key, error=repr(exc), attempt=attempt)
                await asyncio.sleep(self.retry_s * attempt)
                continue
            if result.ok:
                return Event.BIND_OK, None
            self.metrics.bind_errors.labels(reason=str(result.status)).inc()
            if result.status in (404, 409):
                # A definite answer: whatever an earlier attempt did has been decided.
                return await self._read_back(pod, placement, False)
            log.warning("bind refused", pod=pod.key, status=result.status, message=result.message)
            await asyncio.sleep(self.retry_s * attempt)
        if maybe_sent:
            return await self._read_back(pod, placement, maybe_sent)
        return Event.BIND_FAILED, None

    async def _reserve(self, pod: PodInput) -> bool:
        """DRA: reserve the pod's (allocated) ResourceClaims for it before its Binding, as
        kube-scheduler's PreBind does (the kubelet runs a pod only with its claims reserved for
        it). False when a claim is gone or the apiserver refused: the bind is not sent."""
        if not self.may_send():
            return False
        claims = tuple(c.claim for c in pod.resource_claims)
        try:
            written = await asyncio.wait_for(
                self.cluster.reserve_claims(pod.namespace, claims, pod.name, pod.uid),
                self.timeout_s,
            )
        except Exception as exc:
            log.warning("could not reserve the pod's ResourceClaims", pod=pod.key, error=repr(exc))
            return False
        return written is Write.DONE

    async def _unreserve(self, pod: PodInput) -> None:
        """Remove the pod from its ResourceClaims' ``reservedFor`` (kube-scheduler's Unreserve),
        each claim's UID as the precondition when its watch knows it. A failure is logged: the
        pod is tried again (its next reservation rewrites the entry), and the resource claim
        controller removes entries of pods that no longer exist."""
        claims = []
        for c in pod.resource_claims:
            known = self.resource_claims.get(f"{pod.namespace}/{c.claim}")
            claims.append((c.claim, known.uid if known is not None else ""))
        try:
            await asyncio.wait_for(
                self.cluster.unreserve_claims(pod.namespace, tuple(claims), pod.uid),
                self.timeout_s,
            )
        except Exception as exc:
            log.warning(
                "could not unreserve the pod's ResourceClaims", pod=pod.key, error=repr(exc)
            )

    async def _read_back(
        self, pod: PodInput, placement: Placement, uncertain: bool
    ) -> tuple[Event, PodInput | None]:
        """409, 404 or a lost answer: never assume; read the pod and take what it says."""
        try:
            current = await self.cluster.get_pod(pod.namespace, pod.name)
        except Exception as exc:
            log.warning("could not read the pod back after its bind", pod=pod.key, error=str(exc))
            return Event.BIND_UNKNOWN, None
        return settle(pod, placement, current, uncertain)


def settle(
    pod: PodInput, placement: Placement, current: PodInput | None, uncertain: bool = False
) -> tuple[Event, PodInput | None]:
    """What the pod read back says of our Binding. ``uncertain``: a Binding of ours was sent
    and never answered, so a pod still pending is no answer (BIND_UNKNOWN, not BIND_FAILED)."""
    if current is None or current.uid != pod.uid:
        return Event.BIND_GONE, None  # deleted (or replaced by a new pod of the same name)
    ours = assignment_annotations(placement)
    if current.node_name == placement.node and all(
        current.annotations.get(k) == v for k, v in ours.items()
    ):
        return Event.BIND_OK, None  # our own Binding landed (a late one, or a lost answer)
    if current.node_name:
        # Bound elsewhere (another scheduler, or a previous leader): its annotations are the
        # truth.
        return Event.BIND_ELSEWHERE, current
    return (Event.BIND_UNKNOWN if uncertain else Event.BIND_FAILED), None
