"""The binding cycle: Bindings with the device annotations, several in flight; each pod's
outcome is returned (effects.py turns it into a pod book event).

Fencing rule (docs/operations.md, "State and HA"): a Binding is sent only while this replica's lease
has more than the bind timeout left, and is abandoned when that timeout runs out. So every Binding
of a leader completes before its local lease ends, and its local lease ends before the store's lease
(renewals are timed from before the request). A replica that takes over after the lease lapsed
cannot race a Binding of the previous leader; one that cannot know who led before (the
store's history cut: flushed, new, restarted or promoted) waits one lease plus
bindCommitSeconds before its first decision (scheduler.py's ``first_wait``), by which time any
previous leader's Binding has committed or never will.

The outcome of one pod:
- ``BIND_OK``: the apiserver bound it (or a retry found our own earlier bind landed);
- ``BIND_FAILED``: refused, or not sent because the lease is too short (or because its
  ResourceClaims could not be reserved for it): no Binding of this pod sent by this replica can
  land. Only then are its ResourceClaims' ``reservedFor`` entries for it removed (kube-scheduler's
  Unreserve; the allocation stays). A gang member's, while its gang is below its minimum with
  other members bound or binding, is GANG_BIND_FAILED in the book (effects.py): its GPUs stay
  the gang's;
- ``BIND_GONE``: the pod no longer exists (404, or the name has another UID now) or has
  finished (``settle``); the claims its placement allocated are released as after BIND_FAILED;
- ``BIND_ELSEWHERE``: another scheduler or a previous leader bound it; the pod read back is
  returned, its annotations are the truth;
- ``BIND_UNKNOWN``: it may be bound: a Binding was sent without an answer (abandoned at the
  timeout, or its answer lost) and nothing has settled it since. A read-back that finds the pod
  still pending settles nothing (the abandoned request may yet commit, after an etcd stall): the
  book keeps its GPUs and has the same Binding sent again (``bind_all(..., uncertain=True)``), until
  an answer says: 201, 404, or a 409 whose pod is bound as we asked (then it is ours). A replica
  that may no longer send (deposed: a partition, a store failover) only reads the pod back, and
  a read begun ``commit_s`` (run.tuning.bindCommitSeconds, the apiserver's request timeout)
  after the last Binding was sent settles it: still pending, none of ours can bind it any more
  (BIND_FAILED). Held on, its GPUs stayed taken in the standby's snapshot for good, and elected
  again it sent that old term's Binding onto GPUs a later leader had given away (issue 30, sim
  seed 691). So does a pod decided before an etcd restore began the era the book is in
  (``fresh``): re-sent after the restore, its Binding landed on GPUs the restore gave back to
  the pods bound there before it (issue 30, soak seed 3090); read back pending once none can
  land, it is decided afresh. No Binding goes out while both pod watches re-list (a restore
  breaks every watch): sent before a LIST began the new era, it landed beside a pod the restore
  brought back (soak seed 5205).

A pod with ResourceClaims has them reserved for it before every Binding, re-sends included (the
kubelet runs a pod only with its claims reserved for it). A claim write that fails before the
first Binding was sent is BIND_FAILED; after it (a re-send: ``uncertain``, or a retry after a
lost answer) it says nothing of the Bindings already sent, which may land: the pod is read back
as after any unanswered Binding (BIND_UNKNOWN while pending: its GPUs stay held, issue 30).

DRA allocation (issue 29): the claims a placement allocates (``Placement.claims``) are written
before the Binding in kube-scheduler's PreBind order (kube/claims.py): a special claim created,
the delete-protection finalizer, one status write with the allocation, the pod in
``reservedFor`` and the allocation timestamp, the special claim recorded on the pod; then, if a
device has binding conditions, the Binding waits (bounded: ``binding_wait_s``) until its
driver reports them. Claims allocated by others are only reserved for the pod, as before. Every
claim write is fenced like a Binding (``may_send``) and preconditioned on the resourceVersion it
read, so a write whose answer was lost is settled by reading the claim again: it landed (the
pod is in ``reservedFor``) or it never will once the claim moved on. A claim whose write stays
unanswered after ``attempts`` tries is BIND_UNKNOWN: the book holds everything and sends again.
When the Binding fails (BIND_FAILED: none of ours can land), Unreserve undoes every write of
ours, each preconditioned again: the pod leaves ``reservedFor``, the allocation goes when nobody
else is reserved, then the finalizer; a special claim is deleted.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import structlog

from scheduler.core.formats.assignment import assignment_annotations
from scheduler.core.model.decisions import ClaimAllocation, Placement
from scheduler.core.model.dra import ResourceClaim
from scheduler.core.model.objects import PodInput
from scheduler.kube import claims as kc
from scheduler.kube.claims import Answer, ClaimObject, ClaimWrite
from scheduler.kube.dracodec import allocation_json, requests_json
from scheduler.kube.podgroups import Write
from scheduler.kube.watch import HttpError

from .apiserver import Cluster
from .leader import Leadership
from .metrics import Metrics
from .podbook import Event

log = structlog.get_logger("scheduler")

T = TypeVar("T")


def bind_timeout_for(lease_s: float, renew_s: float) -> float:
    """The bind timeout: half the time a lease has left just before its renewal."""
    return max(0.05, (lease_s - renew_s) / 2)


class Written(enum.Enum):
    """What the PreBind writes of one pod came to."""

    DONE = "done"
    FAILED = "failed"  # refused, or the claim gone or taken: nothing more of ours will land
    UNKNOWN = "unknown"  # a write's answer was lost and no later answer settled it


@dataclass(frozen=True)
class Outcome:
    pod: PodInput
    placement: Placement
    event: Event
    current: PodInput | None = None  # the pod read back (BIND_ELSEWHERE)


@dataclass(frozen=True)
class Era:
    """The era of the pod book a unit was decided in, as the binder asks it before every
    Binding: ``fresh``, whether it is still the book's (an etcd restore begins another);
    ``watching``, clear while both pod watches re-list (PodBook.watching)."""

    fresh: Callable[[], bool]
    watching: asyncio.Event


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
        binding_wait_s: float = 600.0,
        binding_poll_s: float = 5.0,
        wall_ms: Callable[[], int],
        clock: Callable[[], float],
        commit_s: float,
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
        # Binding conditions (KEP-5007): how long the Binding waits for the drivers to report
        # them, and how often the claims are read meanwhile (run.tuning.bindingConditionsSeconds,
        # bindingConditionsPollSeconds; kube-scheduler's bindingTimeout and its 5 s poll).
        self.binding_wait_s = binding_wait_s
        self.binding_poll_s = binding_poll_s
        self.wall_ms = wall_ms  # the allocation timestamp's clock
        self.clock = clock
        self.commit_s = commit_s  # a Binding commits, if at all, this long after it was sent
        self.in_flight = 0  # pods handed over whose outcome has not been returned yet
        # Pods (UIDs) a Binding was sent for without a settled outcome (BIND_UNKNOWN), with the
        # time the last one was sent: a re-send is uncertain only for them, not for a pod whose
        # claim write alone was left unknown (no Binding of it was sent: a failed claim write
        # then fails it, and Unreserve runs), and only while that Binding may still commit.
        # A pod that leaves while unknown stays here: one UID per such pod.
        self._sent: dict[str, float] = {}
        # Pods (UIDs) whose stale reservations are being removed (``unreserve_stale``): set
        # when that write is answered or given up. Their next reservation waits for it, so that
        # the older write cannot land after the newer one and undo it.
        self._unreserving: dict[str, asyncio.Event] = {}

    async def bind_all(
        self,
        pods: list[tuple[PodInput, Placement]],
        uncertain: bool = False,
        *,
        era: Era,
    ) -> list[Outcome]:
        """Bind one unit's pods, concurrently; their outcomes, in order. ``uncertain``: an
        earlier Binding of theirs may have landed (a re-send). ``era``: the one they were
        decided in (asked before every Binding: ``_current``)."""
        self.in_flight += len(pods)
        try:
            return list(
                await asyncio.gather(*(self.bind_one(pod, p, era, uncertain) for pod, p in pods))
            )
        finally:
            self.in_flight -= len(pods)

    def sizes(self) -> dict[str, int]:
        return {"in_flight": self.in_flight, "sent_unsettled": len(self._sent)}

    def _may_land(self, uid: str) -> bool:
        """A Binding of this pod sent without an answer may still commit: the last was sent less
        than ``commit_s`` ago. Asked before a read back begins: past that time, a read that
        finds the pod pending is the answer (not bound, and none of ours can bind it)."""
        sent = self._sent.get(uid)
        return sent is not None and self.clock() < sent + self.commit_s

    def may_send(self) -> bool:
        """The fencing rule: the lease outlives a request started now."""
        return self.leadership.leading and self.leadership.remaining() > self.timeout_s

    async def bind_one(
        self,
        pod: PodInput,
        placement: Placement,
        era: Era,
        uncertain: bool = False,
    ) -> Outcome:
        try:
            event, current = await self._bind(pod, placement, era, uncertain)
        except Exception:
            log.exception("bind crashed", pod=pod.key)
            event, current = Event.BIND_UNKNOWN, None
        if event is not Event.BIND_UNKNOWN:
            self._sent.pop(pod.uid, None)
        return Outcome(pod, placement, event, current)

    async def _bind(
        self, pod: PodInput, placement: Placement, era: Era, uncertain: bool
    ) -> tuple[Event, PodInput | None]:
        async with self._slots:
            event, current = await self._send(pod, placement, era, uncertain)
            if not self.leadership.leading:
                # A later leader may have reserved the claims for the same pod meanwhile.
                return event, current
            if event in (Event.BIND_FAILED, Event.BIND_GONE) and placement.claims:
                # No Binding of ours can land (or the pod is gone): what we allocated goes.
                await self._release(pod, placement)
            if event is Event.BIND_FAILED and self._others(pod, placement):
                await self._unreserve(pod, placement)
            return event, current

    async def _send(
        self, pod: PodInput, placement: Placement, era: Era, uncertain: bool
    ) -> tuple[Event, PodInput | None]:
        # Every attempt sends the same Binding: the placement's node and annotations.
        annotations = assignment_annotations(placement)
        # An earlier attempt may have landed without our seeing the answer.
        maybe_sent = uncertain and pod.uid in self._sent
        if not await self._current(era):
            return await self._stale(pod, placement, maybe_sent)
        written = await self._prebind(pod, placement)
        if written is not Written.DONE:
            if maybe_sent:
                # A re-send's claim write failed: an earlier Binding may still land.
                return await self._read_back(pod, placement, self._may_land(pod.uid))
            if written is Written.UNKNOWN:
                # A claim write may yet land: everything stays held, and it is all sent again.
                return Event.BIND_UNKNOWN, None
            return Event.BIND_FAILED, None
        for attempt in range(1, self.attempts + 1):
            if not await self._current(era):
                return await self._stale(pod, placement, maybe_sent)
            if not self.may_send():
                # A deposed leader must not bind, nor one whose request could outlive its
                # lease.
                if maybe_sent:
                    return await self._read_back(pod, placement, self._may_land(pod.uid))
                return Event.BIND_FAILED, None
            self._sent[pod.uid] = self.clock()
            try:
                async with asyncio.timeout(self.timeout_s):
                    result = await self.cluster.bind(
                        pod.namespace, pod.name, pod.uid, placement.node, annotations
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
            return await self._read_back(pod, placement, self._may_land(pod.uid))
        return Event.BIND_FAILED, None

    async def _current(self, era: Era) -> bool:
        """Whether the pod's decision may be sent: its era is still the book's, asked once
        the pod watches are not both re-listing (waited for up to the request timeout, after
        which the decision is not sent). An etcd restore breaks every
        watch before the apiserver serves the restored history: a Binding sent then, decided
        before a LIST could say the restore began a new era, landed beside a pod the restore
        brought back onto the GPUs it was decided onto (soak seed 5205). Waiting costs nothing
        while a watch is up."""
        if not era.watching.is_set():
            try:
                async with asyncio.timeout(self.timeout_s):
                    await era.watching.wait()
            except TimeoutError:
                return False
        return era.fresh()

    async def _stale(
        self, pod: PodInput, placement: Placement, maybe_sent: bool
    ) -> tuple[Event, PodInput | None]:
        """The pod was decided in an era before the book's (an etcd restore may have given the
        GPUs it was decided onto back to pods bound there before it: effects.py's ``_bind``):
        nothing more is sent, as by a deposed leader. Never sent, it failed; else it is read
        back until a read says, a pending one held while a Binding of it may still land."""
        if maybe_sent:
            return await self._read_back(pod, placement, self._may_land(pod.uid))
        return Event.BIND_FAILED, None

    # ---- PreBind ----------------------------------------------------------------------------

    async def _prebind(self, pod: PodInput, placement: Placement) -> Written:
        """DRA's writes before the Binding: the claims the placement allocates, then the pod
        reserved in the claims others allocated, then the binding conditions awaited."""
        for allocation in placement.claims:
            written = await self._allocate(pod, allocation)
            if written is not Written.DONE:
                return written
        if self._others(pod, placement) and not await self._reserve(pod, placement):
            return Written.FAILED
        if any(r.binding_conditions for c in placement.claims for r in c.allocation.results):
            return await self._binding_conditions(pod, placement)
        return Written.DONE

    def _others(self, pod: PodInput, placement: Placement) -> tuple[str, ...]:
        """The pod's claims it only joins (allocated by anyone but this placement), by name."""
        ours = {c.claim for c in placement.claims}
        return tuple(
            c.claim
            for c in pod.resource_claims
            if c.claim and f"{pod.namespace}/{c.claim}" not in ours
        )

    @staticmethod
    def _name(pod: PodInput, allocation: ClaimAllocation) -> str:
        if allocation.special and not allocation.uid:
            return kc.extended_claim_name(pod.name, pod.uid)
        return allocation.claim.partition("/")[2]

    async def _allocate(self, pod: PodInput, allocation: ClaimAllocation) -> Written:
        """Write one claim's allocation for the pod (module doc), re-reading it after a conflict
        or a lost answer, up to ``attempts`` times."""
        name = self._name(pod, allocation)
        unanswered = False  # a write of ours has no answer, and no later write was answered
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.retry_s * attempt)
            try:
                obj = await self._read(pod.namespace, name)
                if obj is None and allocation.special and not allocation.uid:
                    body = kc.extended_claim(
                        pod.namespace, pod.name, pod.uid, requests_json(allocation.requests)
                    )
                    created = await self._write(partial(self.cluster.create_claim, body))
                    unanswered = False
                    if created.answer is not Answer.DONE:
                        continue  # it exists (an earlier create of ours landed): read it
                    obj = created.obj
                if obj is None or not self._ours_to_write(pod, allocation, obj):
                    log.warning("ResourceClaim not allocatable now", pod=pod.key, claim=name)
                    return Written.FAILED
                if not kc.held_for(obj, pod.uid):
                    obj = await self._write_allocation(pod, allocation, obj)
                    unanswered = False
                    if obj is None:
                        continue  # changed meanwhile: read it again
                if allocation.special and pod.extended_claim != name:
                    recorded = await self._call(
                        partial(
                            self.cluster.record_extended_claim,
                            pod.namespace,
                            pod.name,
                            pod.uid,
                            name,
                            allocation.mappings,
                        )
                    )
                    if recorded is not Write.DONE:
                        return Written.FAILED
                return Written.DONE
            except _Fenced:
                return Written.UNKNOWN if unanswered else Written.FAILED
            except _Refused as exc:
                log.warning("ResourceClaim write refused", pod=pod.key, claim=name, error=str(exc))
                return Written.FAILED
            except _Lost as exc:
                unanswered = unanswered or exc.write
                self.metrics.bind_errors.labels(reason="claim").inc()
                log.warning(
                    "ResourceClaim write unanswered", pod=pod.key, claim=name, error=str(exc)
                )
        return Written.UNKNOWN if unanswered else Written.FAILED

    def _ours_to_write(self, pod: PodInput, allocation: ClaimAllocation, obj: ClaimObject) -> bool:
        """The claim read is the one the core allocated, still free to allocate for the pod (or
        already ours): not replaced, not being deleted, allocated by nobody else; a special
        claim is the pod's own."""
        if allocation.uid and kc.uid_of(obj) != allocation.uid:
            return False
        if allocation.special and not kc.owned_by(obj, pod.uid):
            return False
        if kc.held_for(obj, pod.uid):
            # Written for this pod already (an earlier attempt, or a previous leader): kept as
            # it is, whatever devices the core chose this time (the watch will show them).
            return True
        return not kc.deleting(obj) and not kc.allocated(obj)

    async def _write_allocation(
        self, pod: PodInput, allocation: ClaimAllocation, obj: ClaimObject
    ) -> ClaimObject | None:
        """The finalizer, then the status: the claim as written, or None after a conflict."""
        protected = kc.with_finalizer(obj)
        if protected is not None:
            answer = await self._write(partial(self.cluster.replace_claim, protected, status=False))
            if answer.answer is not Answer.DONE or answer.obj is None:
                return self._settled(answer)
            obj = answer.obj
        body = kc.allocated_for(
            obj, allocation_json(allocation.allocation), pod.name, pod.uid, self.wall_ms()
        )
        answer = await self._write(partial(self.cluster.replace_claim, body, status=True))
        if answer.answer is not Answer.DONE or answer.obj is None:
            return self._settled(answer)
        return answer.obj

    @staticmethod
    def _settled(answer: ClaimWrite) -> None:
        """A write's answer other than DONE: a conflict is retried by the caller (None); a
        claim gone is a refusal."""
        if answer.answer is Answer.GONE:
            raise _Refused("the ResourceClaim is gone")

    async def _write(self, call: Callable[[], Awaitable[ClaimWrite]]) -> ClaimWrite:
        """One claim write, fenced like a Binding (_Fenced: not sent)."""
        if not self.may_send():
            raise _Fenced()
        return await self._call(call, write=True)

    async def _read(self, namespace: str, name: str) -> ClaimObject | None:
        return await self._call(partial(self.cluster.read_claim, namespace, name))

    async def _call(self, call: Callable[[], Awaitable[T]], write: bool = False) -> T:
        """One request within the bind timeout: its answer, or _Lost (no answer, or a 5xx or
        429, which say nothing of what a write did) or _Refused (any other error status)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await call()
        except HttpError as exc:
            if exc.status >= 500 or exc.status == 429:
                raise _Lost(str(exc), write) from exc
            raise _Refused(str(exc)) from exc
        except Exception as exc:
            raise _Lost(repr(exc), write) from exc

    async def _binding_conditions(self, pod: PodInput, placement: Placement) -> Written:
        """Wait until the drivers report every binding condition of the allocated devices
        (kube-scheduler's PreBind), at most ``binding_wait_s``: a failure condition, or the
        time running out, fails the Binding (Unreserve follows). The pod keeps its bind slot
        meanwhile (run.bindConcurrency bounds the pods waiting too)."""
        waiting = [
            c for c in placement.claims if any(r.binding_conditions for r in c.allocation.results)
        ]
        deadline = asyncio.get_running_loop().time() + self.binding_wait_s
        awaited = ""
        while True:
            pending = []
            for allocation in waiting:
                try:
                    obj = await self._read(pod.namespace, self._name(pod, allocation))
                except (_Lost, _Refused):
                    pending.append(allocation)
                    continue
                if obj is None:
                    return Written.FAILED
                state, awaited = kc.binding_state(obj, allocation.allocation.results)
                if state is kc.Binding.FAILED:
                    log.warning("device binding failed", pod=pod.key, condition=awaited)
                    return Written.FAILED
                if state is kc.Binding.WAITING:
                    pending.append(allocation)
            waiting = pending
            if not waiting:
                return Written.DONE
            if asyncio.get_running_loop().time() >= deadline or not self.leadership.leading:
                log.warning("device binding timeout", pod=pod.key, awaiting=awaited)
                return Written.FAILED
            await asyncio.sleep(self.binding_poll_s)

    # ---- claims allocated by others: the pod joins their reservedFor --------------------------

    async def _reserve(self, pod: PodInput, placement: Placement) -> bool:
        """DRA: reserve the pod's (allocated) ResourceClaims for it before its Binding, as
        kube-scheduler's PreBind does (the kubelet runs a pod only with its claims reserved for
        it). False when a claim is gone or the apiserver refused: the bind is not sent."""
        if (unreserving := self._unreserving.get(pod.uid)) is not None:
            await unreserving.wait()
        if not self.may_send():
            return False
        claims = self._others(pod, placement)
        try:
            async with asyncio.timeout(self.timeout_s):
                written = await self.cluster.reserve_claims(
                    pod.namespace, claims, pod.name, pod.uid
                )
        except Exception as exc:
            log.warning("could not reserve the pod's ResourceClaims", pod=pod.key, error=repr(exc))
            return False
        return written is Write.DONE

    async def _unreserve(self, pod: PodInput, placement: Placement) -> None:
        """Remove the pod from the ``reservedFor`` of the claims others allocated
        (kube-scheduler's Unreserve), each claim's UID as the precondition when its watch knows
        it. A failure is logged: the pod is tried again (its next reservation rewrites the
        entry), and the resource claim controller removes entries of pods that no longer
        exist."""
        claims = []
        for claim in self._others(pod, placement):
            known = self.resource_claims.get(f"{pod.namespace}/{claim}")
            claims.append((claim, known.uid if known is not None else ""))
        await self._unreserve_claims(pod, tuple(claims))

    async def unreserve_stale(self, pod: PodInput) -> None:
        """Unreserve the claims the watch shows still reserved for ``pod``, a pending pod the
        leader just found no place for and holds nowhere: a reservation left by a Binding that
        no replica will Unreserve (a leader deposed, killed or fenced between its PreBind and
        its Binding's outcome, issue 30, sim seeds 25 and 1016). The resource claim controller
        removes only the entries of pods that are gone or done, and kube-scheduler, one process,
        Unreserves before it could lose its turn; left, the claim counts towards its
        ``reservedFor`` limit and says the pod may run. Fenced like every claim write: a deposed
        replica leaves it to the next leader's turn of the pod."""
        claims = tuple(
            (c.claim, known.uid)
            for c in pod.resource_claims
            if c.claim
            and (known := self.resource_claims.get(f"{pod.namespace}/{c.claim}")) is not None
            and pod.uid in known.reserved_for
        )
        if not claims or pod.uid in self._unreserving or not self.may_send():
            return
        done = self._unreserving[pod.uid] = asyncio.Event()
        try:
            await self._unreserve_claims(pod, claims)
        finally:
            del self._unreserving[pod.uid]
            done.set()

    async def _unreserve_claims(self, pod: PodInput, claims: tuple[tuple[str, str], ...]) -> None:
        """The pod leaves the ``reservedFor`` of ``claims`` (name, UID precondition); a
        failure is logged."""
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.cluster.unreserve_claims(pod.namespace, claims, pod.uid)
        except Exception as exc:
            log.warning(
                "could not unreserve the pod's ResourceClaims", pod=pod.key, error=repr(exc)
            )

    # ---- Unreserve of the claims this placement allocated --------------------------------

    async def _release(self, pod: PodInput, placement: Placement) -> None:
        """Undo PreBind's writes for the pod (module doc), each claim re-read and written with
        its resourceVersion as the precondition, up to ``attempts`` tries. A claim still
        holding the pod afterwards is logged: its devices stay in use (the watch shows the
        allocation), and the pod, tried again, finds its claim allocated for it."""
        for allocation in placement.claims:
            name = self._name(pod, allocation)
            for attempt in range(self.attempts):
                if attempt:
                    await asyncio.sleep(self.retry_s * attempt)
                try:
                    if await self._release_one(pod, allocation, name):
                        break
                except _Fenced:
                    return  # no longer ours to write: the next leader finds the claim
                except (_Lost, _Refused) as exc:
                    log.warning(
                        "could not release a ResourceClaim", pod=pod.key, claim=name, error=str(exc)
                    )
            else:
                log.error(
                    "ResourceClaim left allocated for a pod not bound", pod=pod.key, claim=name
                )

    async def _release_one(self, pod: PodInput, allocation: ClaimAllocation, name: str) -> bool:
        """One try: True once nothing of ours is left in the claim; False after a conflict."""
        obj = await self._read(pod.namespace, name)
        if obj is None or (allocation.uid and kc.uid_of(obj) != allocation.uid):
            return True  # gone or replaced: nothing of ours is left
        if allocation.special:
            if not kc.owned_by(obj, pod.uid):
                return True
            # kube-scheduler deletes it, its finalizer removed first.
            unprotected = kc.without_finalizer(obj)
            if unprotected is not None:
                answer = await self._write(
                    partial(self.cluster.replace_claim, unprotected, status=False)
                )
                if answer.answer is not Answer.DONE or answer.obj is None:
                    return answer.answer is Answer.GONE
                obj = answer.obj
            uid, version = kc.uid_of(obj), str(kc.meta(obj).get("resourceVersion", ""))
            deleted = await self._write(
                partial(_answered, self.cluster.delete_claim, pod.namespace, name, uid, version)
            )
            return deleted.answer is not Answer.CONFLICT
        released = kc.released_by(obj, pod.uid)
        if released is not None:
            answer = await self._write(partial(self.cluster.replace_claim, released, status=True))
            if answer.answer is not Answer.DONE or answer.obj is None:
                return answer.answer is Answer.GONE
            obj = answer.obj
        if kc.allocated(obj):
            return True  # others are reserved: their allocation and its finalizer stay
        unprotected = kc.without_finalizer(obj)
        if unprotected is None:
            return True
        answer = await self._write(partial(self.cluster.replace_claim, unprotected, status=False))
        return answer.answer is not Answer.CONFLICT

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


class _Fenced(Exception):
    """The lease does not outlive a write started now: it is not sent."""


class _Refused(Exception):
    """The apiserver refused a claim write or read for good (4xx), or the claim is gone."""


class _Lost(Exception):
    """No answer (a timeout, a lost connection, a 5xx): ``write`` when it was a write."""

    def __init__(self, message: str, write: bool) -> None:
        super().__init__(message)
        self.write = write


async def _answered(
    delete: Callable[[str, str, str, str], Awaitable[Answer]], *args: str
) -> ClaimWrite:
    """A delete's answer as a claim write's."""
    return ClaimWrite(await delete(*args))


def replaced_or_finished(current: PodInput, uid: str) -> bool:
    """A pod read back (not deleted) holds no GPUs any more: replaced by a new pod of its name,
    or finished (the binder's read-back below and the pod book's re-read, effects.py's CHECK)."""
    return current.uid != uid or current.finished


def settle(
    pod: PodInput, placement: Placement, current: PodInput | None, uncertain: bool = False
) -> tuple[Event, PodInput | None]:
    """What the pod read back says of our Binding. ``uncertain``: a Binding of ours was sent
    and never answered, so a pod still pending is no answer (BIND_UNKNOWN, not BIND_FAILED).

    A pod read back finished (Succeeded or Failed) is gone as far as GPUs go, whoever bound
    it: it holds nothing any more (kube-scheduler's informer leaves terminal pods out), and the
    bound watch, which shows only pods not finished, will never show it again. Taken as bound
    (ours, or elsewhere), it was held as assumed or bound for good: a pending LIST taken before
    its Binding and delivered after the bound watch told it bound and finished (the book's
    entry gone, its version with it) showed it pending again, its next Binding got 409, and
    the read-back found it bound as we had asked: its GPUs stayed taken in the snapshot and
    its record bound in the store (issue 30, soak seed 1992)."""
    if current is None or replaced_or_finished(current, pod.uid):
        return Event.BIND_GONE, None  # deleted, replaced by a new pod of its name, or finished
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
