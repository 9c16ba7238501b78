"""The simulated world: a fake apiserver with watch streams and faults, and replicas of the live
scheduler that run as they do in production (``Leadership.run`` and ``Scheduler.run`` as tasks),
all on one virtual clock (vloop.py).

- ``SimApiserver`` holds the truth: pods (with resourceVersions, as etcd gives them) and
  PodGroups (scheduler-plugins', Volcano's and the upstream ones, each API group listed on its
  own as app.py's watches list them). Every change of a pod is fanned out to each replica's two
  pod streams with the field selectors app.py watches with (pending: ours and unbound; bound:
  a node and not finished), as the apiserver's watch cache does (an object leaving a selector
  is a DELETED of its previous state at the new version). Faults: a stall (no write answers;
  the writes commit, in order, when it ends, as after an etcd stall), one-shot faults on the
  next Binding (answer lost, timeout, 403, 409, 500; 404 with the pod deleted at once) and on
  the next claim write, failing reads.
- ``Streams``: one replica's two watches. A stream can lag (paused: events queue) and re-list
  (a LIST taken now, delivered before the events after it: a LIST in transit while the stream
  lags); the pump task delivers every 200 ms of simulated time (slow, not lagging).
- ``SimReplica``: one scheduler process: the real ``Scheduler`` with its ``Leadership`` on the
  shared store, started with synced watches (app.py's order), stopped by SIGTERM (drain, then
  the lease released: app.py's shutdown) or SIGKILL (every task cancelled, nothing more).
- ``World``: the apiserver, the store, the replicas, and the record the invariants read: which
  leader term sent each Binding that landed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import msgspec

from scheduler.core.formats import assignment as assignment_format
from scheduler.core.model.decisions import Share
from scheduler.core.model.dra import RequestMapping, ResourceClaim
from scheduler.core.model.names import ASSIGNMENT_ANNOTATION, DEVICES_ANNOTATION
from scheduler.core.model.objects import NodeInput, PodGroupInput, PodInput
from scheduler.core.settings import CoreSettings
from scheduler.core.snapshot.watched import POD_GROUPS as POD_GROUP_KIND
from scheduler.core.snapshot.watched import RESOURCE_CLAIMS
from scheduler.kube.api import BindResult, ConfigMapData
from scheduler.kube.claims import Answer, ClaimObject, ClaimWrite
from scheduler.kube.podgroups import (
    POD_GROUPS,
    UPSTREAM_GROUP,
    VOLCANO_GROUP,
    Eviction,
    EvictResult,
    Write,
)
from scheduler.kube.tuning import REQUEST_TIMEOUT_S
from scheduler.kube.watch import HttpError
from scheduler.service.leader import Leadership, LeaseTiming
from scheduler.service.metrics import Metrics
from scheduler.service.scheduler import Scheduler
from scheduler.service.witness import Witness
from scheduler.state.base import Claim, Store, Unavailable

NAME = "topo-scheduler"
WITNESS_NAMESPACE = "topo-scheduler"
TIMING = LeaseTiming()  # production's: lease 15 s, renew 5 s, retry 2 s
WATCH_PERIOD_S = 0.2
SLOW_S = 20.0  # a "slow" Binding commits this long after it was sent: longer than the lease
SHUTDOWN_S = 600.0  # the world's shutdown waits this long for the cancelled tasks to end

Pending = Callable[[PodInput], bool]


def pending_selector(pod: PodInput) -> bool:
    """app.py's pending watch: ``spec.schedulerName=<ours>,spec.nodeName=``."""
    return pod.scheduler_name == NAME and not pod.node_name


def bound_selector(pod: PodInput) -> bool:
    """app.py's bound watch: ``spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed``."""
    return bool(pod.node_name) and pod.phase not in ("Succeeded", "Failed")


SELECTORS: dict[str, Pending] = {"pending": pending_selector, "bound": bound_selector}


def _shares(ann: dict[str, str]) -> list[Share]:
    """The shares a Binding's assignment annotation gives its pod."""
    raw = ann.get(ASSIGNMENT_ANNOTATION, "")
    return assignment_format.decode(raw).shares if raw else []


@dataclass(frozen=True)
class Landed:
    """A Binding that committed: the pod, where, and the leader term that sent it."""

    key: str
    uid: str
    node: str
    devices: str
    holder: str
    epoch: int
    term: int  # the index of (holder, epoch) in ``World.terms`` (-1: unknown)
    at: float
    # Sent under the binder's fencing rule by the newest term's leader: no later leader was
    # elected yet, and the sender led with more lease left than the request's timeout
    # (invariants.fencing).
    fenced: bool
    shares: str = ""  # the cards it has a share of, as "0:50%,1:50%" (create_shared)


class Streams:
    """One replica's two pod watches (pending, bound): queues of events, a LIST that may be in
    transit, and whether each stream lags."""

    def __init__(self, replica: SimReplica) -> None:
        self.replica = replica
        self.queues: dict[str, deque[tuple[str, PodInput]]] = {
            "pending": deque(),
            "bound": deque(),
        }
        self.lists: dict[str, tuple[list[PodInput], int] | None] = {
            "pending": None,
            "bound": None,
        }
        self.paused: dict[str, bool] = {"pending": False, "bound": False}

    def push(self, stream: str, kind: str, pod: PodInput) -> None:
        self.queues[stream].append((kind, pod))

    def relist(self, stream: str, pods: list[PodInput], version: int) -> None:
        """A new LIST (a re-list, or a 410 Gone): the old queue is dropped, the LIST goes first.
        It is asked for now, when it is taken (kube/watch.py's Relist tells intake before it
        sends the request, and a LIST is read at least as late as that): the book's newest
        version now is what its version must reach in one era. Told at its delivery instead, a
        LIST taken before news the other stream delivered meanwhile looked like an etcd
        restore (a new era) and its stale pods replaced newer ones (seed 48)."""
        self.queues[stream].clear()
        self.lists[stream] = (pods, version)
        intake = self.replica.s.intake
        if stream == "bound":
            intake.bound_list_begin()
        else:
            intake.pending_list_begin()

    def idle(self) -> bool:
        return not any(self.queues.values()) and not any(v is not None for v in self.lists.values())

    def deliver(self) -> None:
        intake = self.replica.s.intake
        for stream in ("bound", "pending"):
            if self.paused[stream]:
                continue
            listed = self.lists[stream]
            if listed is not None:
                self.lists[stream] = None
                pods, version = listed
                if stream == "bound":
                    intake.bound_list_page(pods)
                    intake.bound_list_end(version)
                else:
                    intake.pending_list_page(pods)
                    intake.pending_list_end(version)
                continue  # the watch from the LIST's version delivers at the next turn
            queue = self.queues[stream]
            while queue:
                kind, pod = queue.popleft()
                if stream == "bound":
                    intake.bound_event(kind, pod)
                else:
                    intake.pending_event(kind, pod)
            if stream == "bound":
                # A bookmark: everything up to the apiserver's version now is delivered.
                intake.bound_progress(self.replica.world.api.version)


class Backup(NamedTuple):
    """What an etcd snapshot holds of the objects the simulation models."""

    pods: dict[str, PodInput]
    claims: dict[str, ResourceClaim]
    version: int


class SimApiserver:
    def __init__(self, nodes: list[NodeInput], gpus: dict[str, int]) -> None:
        self.nodes = nodes
        self.gpus = gpus  # GPUs per node
        self.pods: dict[str, PodInput] = {}
        self.groups: dict[str, PodGroupInput] = {}
        self.claims: dict[str, ResourceClaim] = {}  # allocated by a DRA driver
        self.version = 0
        self.streams: list[Streams] = []
        self.landed: list[Landed] = []
        self.evictions: list[tuple[float, str]] = []  # (when, pod) evicted: made terminating
        # (when, pod) deleted right after its Binding committed (the fault "404").
        self.deleted: list[tuple[float, str]] = []
        # Faults.
        self.stalled = False
        self.in_stall: list[tuple[Callable[[], object], asyncio.Future[object]]] = []
        # The "slow" Bindings not committed yet: (their commit's timer, their answer).
        self.in_slow: list[tuple[asyncio.TimerHandle, asyncio.Future[object]]] = []
        self.bind_faults: deque[str] = deque()  # one per Binding: lose, timeout, 403, ...
        self.claim_faults: deque[str] = deque()
        self.reads_fail = False
        # The epoch witness's ConfigMap (name -> resourceVersion, data), and its faults: the
        # next reads or compare-and-swaps answered 403 (an authorization webhook timing out,
        # RBAC re-applied), one-shot or until a time.
        self.config_maps: dict[str, tuple[int, dict[str, str]]] = {}
        self.witness_faults: dict[str, int] = {"read": 0, "write": 0}
        self.witness_forbidden_until: dict[str, float] = {"read": 0.0, "write": 0.0}
        self.uids = itertools.count(1)
        self.term_of: Callable[[str, int], int] = lambda holder, epoch: -1
        self.newest_term: Callable[[], int] = lambda: -1
        self.clock: Callable[[], float] = lambda: 0.0

    # ---- the truth -------------------------------------------------------------------------

    def stamp(self, pod: PodInput) -> PodInput:
        self.version += 1
        return msgspec.structs.replace(pod, version=self.version)

    def put(self, pod: PodInput) -> PodInput:
        old = self.pods.get(pod.key)
        new = self.pods[pod.key] = self.stamp(pod)
        self._fan_out(old, new)
        return new

    def remove(self, key: str) -> None:
        old = self.pods.pop(key, None)
        if old is not None:
            self.version += 1
            self._fan_out(old, None)

    def _fan_out(self, old: PodInput | None, new: PodInput | None) -> None:
        for stream, selector in SELECTORS.items():
            was = old is not None and selector(old)
            now = new is not None and selector(new)
            if now:
                assert new is not None
                event = (("MODIFIED" if was else "ADDED"), new)
            elif was:
                assert old is not None
                # The watch cache: the object as it last matched, at the new version.
                event = ("DELETED", msgspec.structs.replace(old, version=self.version))
            else:
                continue
            for s in self.streams:
                s.push(stream, *event)

    def listed(self, stream: str) -> tuple[list[PodInput], int]:
        selector = SELECTORS[stream]
        return [p for p in self.pods.values() if selector(p)], self.version

    def backup(self) -> Backup:
        """An etcd snapshot: every object it holds, the claims beside the pods."""
        return Backup(dict(self.pods), dict(self.claims), self.version)

    def restore(self, saved: Backup) -> None:
        """etcd restored from a backup without ``--bump-revision``: the pods and the claims as
        they were (a claim's ``reservedFor`` too: kept as it is now, a claim reserved after the
        backup for a pod the restore puts back to pending was a reservation no real etcd
        holds), and resourceVersions start again from the backup's (below what watchers have
        seen). Every watch breaks and re-lists. A write waiting in an etcd stall never commits:
        the restore replaced the members it waited for, and its client gets an error (left
        to commit after the restore, a Binding sent before it onto GPUs a pod deleted then
        gave back landed beside that pod, which the restore brought back: seed 54). Nor does a
        Binding hanging in a slow apiserver: a restore stops every apiserver first (the
        documented procedure), and the requests they held end with an error (seeds 40428 and
        40700: left to commit, the same pod beside the same restored one).

        A pod that finished before the restore and that the restore brings back running on the
        same node is finished again at once: its kubelet ran it to its end and never runs it
        again (a kubelet never moves a pod from a terminal phase back), and its status manager
        writes the pod's status it holds to the apiserver whenever the apiserver's differs
        (status_manager.go's reconcile). Left running, the restored pod held in the
        apiserver's view a GPU no container used any more, and a pod bound there afterwards
        was a GPU given twice in this world only (seed 718); the scheduler sees the kubelet's
        write as any pod finishing."""
        ended = {p.uid: p for p in self.pods.values() if p.finished and p.node_name}
        # A PodScheduled condition is part of its pod: written after the backup, it is undone.
        self.pods, self.claims, self.version = dict(saved.pods), dict(saved.claims), saved.version
        waiting, self.in_stall = self.in_stall, []
        slow, self.in_slow = self.in_slow, []
        for timer, _ in slow:
            timer.cancel()
        for _, answer in (*waiting, *slow):
            if not answer.done():
                answer.set_exception(ConnectionError("etcd was restored from a backup"))
        for s in self.streams:
            s.replica.s.intake.replace(RESOURCE_CLAIMS, list(self.claims.values()))
            for stream in SELECTORS:
                s.relist(stream, *self.listed(stream))
        for pod in list(self.pods.values()):
            end = ended.get(pod.uid)
            if end is not None and not pod.finished and pod.node_name == end.node_name:
                self.put(msgspec.structs.replace(pod, phase=end.phase))

    def create(self, pod: PodInput) -> PodInput:
        return self.put(msgspec.structs.replace(pod, uid=f"u{next(self.uids)}"))

    # ---- faults ----------------------------------------------------------------------------

    def end_stall(self) -> None:
        """etcd answers again: the writes sent meanwhile commit, in the order they came."""
        self.stalled = False
        waiting, self.in_stall = self.in_stall, []
        for commit, answer in waiting:
            result = commit()
            if not answer.done():
                answer.set_result(result)

    async def _write(self, commit: Callable[[], object]) -> object:
        if not self.stalled:
            return commit()
        answer: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.in_stall.append((commit, answer))
        return await asyncio.shield(answer)

    # ---- what a replica calls (through its Client) -----------------------------------------

    async def bind(
        self,
        sender: SimReplica,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        ann: dict[str, str],
    ) -> BindResult:
        key = f"{namespace}/{name}"
        holder, epoch = sender.name, sender.leadership.epoch or 0
        lease = sender.leadership
        fenced = (
            lease.leading
            and lease.remaining() > sender.s.binder.timeout_s
            and 0 <= self.term_of(holder, epoch) == self.newest_term()
        )
        fault = self.bind_faults.popleft() if self.bind_faults else ""
        if fault in ("403", "500"):
            return BindResult(int(fault), "injected")
        if fault == "timeout":  # never reaches etcd; the client gives up
            await asyncio.Event().wait()

        def commit() -> BindResult:
            return self._commit(key, uid, node, ann, holder, epoch, fenced)

        if fault == "slow":
            # One request hangs in a slow apiserver longer than the lease, then commits
            # (whether or not its client is still waiting).
            answer: asyncio.Future[object] = asyncio.get_running_loop().create_future()

            def late() -> None:
                self.in_slow.remove(held)
                result = commit()
                if not answer.done():
                    answer.set_result(result)

            held = (asyncio.get_running_loop().call_later(SLOW_S, late), answer)
            self.in_slow.append(held)
            result: object = await asyncio.shield(answer)
        else:
            result = await self._write(commit)
        assert isinstance(result, BindResult)
        if fault == "lose" and result.ok:
            raise ConnectionError("the answer was lost")
        if fault == "409" and result.ok:
            # The apiserver committed, then the answer that came back was an error (an
            # apiserver behind a proxy that retried the request: the retry found it bound).
            return BindResult(409, "injected")
        if fault == "404" and result.ok:
            # The apiserver committed and the pod was deleted at once (grace period 0, as
            # ``delete_pod`` without grace); the proxy's retry found no such pod. A 404 for a
            # pod that still exists is no answer an apiserver gives (its Binding reads the pod
            # from etcd: 404 only when it is gone, 409 when it is bound already, else 201),
            # so the pod goes with it: answered 404 and left bound, the world showed what no
            # cluster does.
            self.remove(key)
            self.deleted.append((self.clock(), key))
            return BindResult(404, "injected")
        if fault == "500-committed" and result.ok:
            # etcd committed, but its answer timed out inside the apiserver: a 500.
            return BindResult(500, "injected: etcdserver: request timed out")
        return result

    def _commit(
        self,
        key: str,
        uid: str,
        node: str,
        ann: dict[str, str],
        holder: str,
        epoch: int,
        fenced: bool,
    ) -> BindResult:
        pod = self.pods.get(key)
        if pod is None or pod.uid != uid:
            return BindResult(404, "not found")
        if pod.node_name:
            return BindResult(409, "already bound")
        if pod.deleting:
            # The apiserver's BindingREST refuses a pod with a deletionTimestamp ("is being
            # deleted, cannot be assigned to a host", a 409): an evicted or deleted pod whose
            # Binding was still in flight never lands on the node its GPUs were given away from.
            return BindResult(409, "being deleted")
        # BindingREST sets the pod's PodScheduled condition to True: it shows no reason since.
        bound = msgspec.structs.replace(
            pod, node_name=node, annotations={**pod.annotations, **ann}, shown_reason=None
        )
        self.put(bound)
        term = self.term_of(holder, epoch)
        self.landed.append(
            Landed(
                key,
                uid,
                node,
                ann.get(DEVICES_ANNOTATION, ""),
                holder,
                epoch,
                term,
                self.clock(),
                fenced,
                ",".join(f"{s.index}:{s.core}%" for s in _shares(ann)),
            )
        )
        return BindResult(201)

    async def get_pod(self, namespace: str, name: str) -> PodInput | None:
        if self.reads_fail:
            raise ConnectionError("apiserver unavailable")
        if self.stalled:  # a quorum read waits for etcd too, or the client's timeout
            answered = asyncio.get_running_loop().create_future()
            self.in_stall.append((lambda: None, answered))
            await asyncio.wait_for(asyncio.shield(answered), REQUEST_TIMEOUT_S)
        return self.pods.get(f"{namespace}/{name}")

    async def set_unschedulable(self, namespace: str, name: str, uid: str, message: str) -> Write:
        """The pod's PodScheduled=False condition: a status write, which moves its version
        and is news on the pending watch. GONE when no pod of the name is there (the
        apiserver's 404; another UID's is its 409, which refuses the write as well)."""
        key = f"{namespace}/{name}"
        pod = self.pods.get(key)
        if pod is None or pod.uid != uid:
            return Write.GONE
        if pod.shown_reason != message:  # the apiserver writes nothing for a no-op patch
            self.put(msgspec.structs.replace(pod, shown_reason=message))
        return Write.DONE

    async def evict(
        self, namespace: str, name: str, uid: str, dry_run: bool = False
    ) -> EvictResult:
        """The Eviction API. The eviction itself is a write (the pod's deletionTimestamp), so in
        an etcd stall it waits like a Binding: it commits, in order, when etcd answers (the
        client gives up after its timeout), and fails if etcd is restored meanwhile. Committed
        at once during a stall, an eviction that a restore from a backup taken before it then
        undid was one no real apiserver had answered (soak seed 1326). The dry run writes
        nothing and answers at once."""
        key = f"{namespace}/{name}"

        def commit() -> EvictResult:
            pod = self.pods.get(key)
            if pod is None or pod.uid != uid:
                return EvictResult(Eviction.GONE, 404)
            if not dry_run:
                # Accepted: the pod is deleted gracefully (terminating until ``reap``).
                self.put(msgspec.structs.replace(pod, deleting=True))
                self.evictions.append((self.clock(), key))
            return EvictResult(Eviction.EVICTED, 201)

        if dry_run:
            return commit()
        evicted = await asyncio.wait_for(self._write(commit), REQUEST_TIMEOUT_S)
        assert isinstance(evicted, EvictResult)
        return evicted

    async def set_nominated_node(self, namespace: str, name: str, node: str | None) -> Write:
        key = f"{namespace}/{name}"
        pod = self.pods.get(key)
        if pod is None:
            return Write.GONE
        self.put(msgspec.structs.replace(pod, nominated_node=node or ""))
        return Write.DONE

    async def reserve_claims(
        self, namespace: str, claims: tuple[str, ...], pod: str, uid: str
    ) -> Write:
        fault = self.claim_faults.popleft() if self.claim_faults else ""
        if fault == "timeout":
            await asyncio.Event().wait()
        if fault:
            raise ConnectionError("claim write failed")

        def commit() -> Write:
            for name in claims:
                key = f"{namespace}/{name}"
                claim = self.claims.get(key)
                if claim is not None and uid not in claim.reserved_for:
                    self._claim_changed(
                        msgspec.structs.replace(claim, reserved_for=(*claim.reserved_for, uid))
                    )
            return Write.DONE

        written = await self._write(commit)
        assert isinstance(written, Write)
        return written

    def _witness_fault(self, call: str) -> None:
        if self.witness_faults[call] > 0:
            self.witness_faults[call] -= 1
            raise HttpError(403, f"{call} of the epoch witness forbidden (injected)")
        if self.clock() < self.witness_forbidden_until[call]:
            raise HttpError(403, f"{call} of the epoch witness forbidden (injected)")

    async def read_config_map(self, namespace: str, name: str) -> ConfigMapData | None:
        """A quorum GET (waits for etcd in a stall, up to the client's timeout)."""
        self._witness_fault("read")
        if self.stalled:
            answered = asyncio.get_running_loop().create_future()
            self.in_stall.append((lambda: None, answered))
            await asyncio.wait_for(asyncio.shield(answered), REQUEST_TIMEOUT_S)
        if name not in self.config_maps:
            return None
        version, data = self.config_maps[name]
        return msgspec.convert(
            {"metadata": {"resourceVersion": str(version)}, "data": dict(data)}, ConfigMapData
        )

    async def write_config_map(
        self, namespace: str, name: str, data: dict[str, str], resource_version: str | None
    ) -> bool:
        """KubeApi's compare-and-swap: a create when ``resource_version`` is None, else a patch
        with that resourceVersion; False when the ConfigMap was created, changed or deleted
        since it was read (409, or 404 on the patch). In a stall it commits when etcd answers
        again, whether or not the client (timed out) still waits."""
        self._witness_fault("write")

        def commit() -> bool:
            current = self.config_maps.get(name)
            if (current is None) != (resource_version is None):
                return False
            if current is not None and str(current[0]) != resource_version:
                return False
            self.version += 1
            self.config_maps[name] = (self.version, {**(current[1] if current else {}), **data})
            return True

        written = await asyncio.wait_for(self._write(commit), REQUEST_TIMEOUT_S)
        assert isinstance(written, bool)
        return written

    async def unreserve_claims(
        self, namespace: str, claims: tuple[tuple[str, str], ...], uid: str
    ) -> None:
        """Unreserve: the pod's UID leaves each claim's ``reservedFor`` (a claim replaced
        meanwhile, another claim UID, is left alone: the precondition)."""
        fault = self.claim_faults.popleft() if self.claim_faults else ""
        if fault == "timeout":
            await asyncio.Event().wait()
        if fault:
            raise ConnectionError("claim write failed")

        def commit() -> None:
            for name, claim_uid in claims:
                key = f"{namespace}/{name}"
                claim = self.claims.get(key)
                if claim is not None and claim.uid == claim_uid and uid in claim.reserved_for:
                    left = tuple(u for u in claim.reserved_for if u != uid)
                    self._claim_changed(msgspec.structs.replace(claim, reserved_for=left))

        await self._write(commit)

    def _claim_changed(self, claim: ResourceClaim) -> None:
        """A claim's write committed: every running replica's claim watch delivers it (as a
        real one does; the world delivered only a claim's creation, so no replica saw a
        reservation, and a leader could not know one was left for a pending pod)."""
        self.claims[claim.key] = claim
        for s in self.streams:
            s.replica.s.intake.event(RESOURCE_CLAIMS, "MODIFIED", claim)


@dataclass
class StoreFaults:
    """The store's faults, as every replica meets them: ``down`` (every call fails, as while
    Redis is unreachable or Sentinel fails over) and ``delay`` (every call answers that many
    seconds late, as a store on a slow network or a busy master: a renewal's answer late
    enough lets the local lease lapse while the replica keeps its epoch)."""

    down: bool = False
    delay: float = 0.0
    # The calls a killed replica's tasks went on to make, each waiting for good (a killed
    # process sends nothing): cancelled at the world's shutdown, as SIGKILL ends every task
    # of a process. The lease renewer of a leader taking up its election, which SIGKILL's
    # cancellation of the replica's tasks does not reach and the cancelled leadership loop
    # waits for (leader.py's ``_renewing``), waited in one, and the loop went on past the
    # shutdown (sim seed 42795: "tasks went on after SIGKILL").
    hung: list[asyncio.Future[None]] = field(default_factory=list)


class FaultyStore:
    """The store as one replica reaches it: the server ``reach`` names at each call (the master,
    or the old master a partition leaves it on: ``World.store_of``), with the store's faults.
    Every other attribute is the store's own. Each unit ``reserve_each`` refuses goes into
    ``refused`` with the store's reason, for ``invariants.own_refusals``."""

    def __init__(
        self,
        reach: Callable[[], Store],
        faults: StoreFaults,
        alive: Callable[[], bool],
        refused: list[tuple[list[Claim], str]],
    ) -> None:
        self.reach = reach
        self.faults = faults
        self.alive = alive
        self.refused = refused

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.reach(), name)
        if not inspect.iscoroutinefunction(value):
            return value

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.faults.delay:
                await asyncio.sleep(self.faults.delay)
            if not self.alive():
                # A killed process sends nothing. SIGKILL is modelled by cancelling the
                # replica's tasks, and Python 3.11's asyncio.wait_for swallows a cancellation
                # that lands as its call completes (the fake apiserver's witness write, seed
                # 61): the dead replica's leadership loop went on renewing its lease for good.
                hung: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self.faults.hung.append(hung)
                await hung
            if self.faults.down:
                raise Unavailable("the store is unreachable (injected)")
            # The server of the moment the call is sent (a failover may come while it waits).
            answer = await getattr(self.reach(), name)(*args, **kwargs)
            if name == "reserve_each":
                units: list[list[Claim]] = args[2]
                self.refused += [(u, why) for u, why in zip(units, answer, strict=True) if why]
            return answer

        return call


class Client:
    """The apiserver as one replica's client sees it (service/apiserver.py's Cluster): each call
    knows its sender, so a Binding that lands is tagged with the sender's leader term."""

    def __init__(self, api: SimApiserver, replica: SimReplica) -> None:
        self.api, self.replica = api, replica

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindResult:
        return await self.api.bind(self.replica, namespace, name, uid, node, annotations)

    async def get_pod(self, namespace: str, name: str) -> PodInput | None:
        return await self.api.get_pod(namespace, name)

    async def set_unschedulable(self, namespace: str, name: str, uid: str, message: str) -> Write:
        return await self.api.set_unschedulable(namespace, name, uid, message)

    async def evict(
        self, namespace: str, name: str, uid: str, dry_run: bool = False
    ) -> EvictResult:
        return await self.api.evict(namespace, name, uid, dry_run)

    async def set_nominated_node(self, namespace: str, name: str, node: str | None) -> Write:
        return await self.api.set_nominated_node(namespace, name, node)

    async def reserve_claims(
        self, namespace: str, claims: tuple[str, ...], pod: str, uid: str
    ) -> Write:
        return await self.api.reserve_claims(namespace, claims, pod, uid)

    async def unreserve_claims(
        self, namespace: str, claims: tuple[tuple[str, str], ...], uid: str
    ) -> None:
        await self.api.unreserve_claims(namespace, claims, uid)

    async def read_config_map(self, namespace: str, name: str) -> ConfigMapData | None:
        return await self.api.read_config_map(namespace, name)

    async def write_config_map(
        self, namespace: str, name: str, data: dict[str, str], resource_version: str | None
    ) -> bool:
        return await self.api.write_config_map(namespace, name, data, resource_version)

    async def read_claim(self, namespace: str, name: str) -> ClaimObject | None:
        raise AssertionError("the simulation allocates no ResourceClaim (yet)")

    async def replace_claim(self, obj: ClaimObject, status: bool) -> ClaimWrite:
        raise AssertionError("the simulation allocates no ResourceClaim (yet)")

    async def create_claim(self, obj: ClaimObject) -> ClaimWrite:
        raise AssertionError("the simulation allocates no ResourceClaim (yet)")

    async def delete_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> Answer:
        raise AssertionError("the simulation allocates no ResourceClaim (yet)")

    async def record_extended_claim(
        self, namespace: str, name: str, uid: str, claim: str, mappings: tuple[RequestMapping, ...]
    ) -> Write:
        raise AssertionError("the simulation allocates no ResourceClaim (yet)")

    async def event(
        self,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        kind: str,
        timestamp: str,
    ) -> None:
        return None


class SimReplica:
    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        clock = world.loop.time
        client = Client(world.api, self)
        # The store as this replica reaches it (a partition may leave it on the old master),
        # and the epoch witness in the apiserver, as app.py wires them for a shared store.
        self.store = cast(
            Store,
            FaultyStore(
                lambda: world.store_of(self),
                world.faults,
                lambda: not self.killed,
                world.refused,
            ),
        )
        self.witness = Witness(client, NAME, namespace=WITNESS_NAMESPACE)
        self.leadership = Leadership(
            self.store, name, TIMING, clock, superseded=self.witness.superseded
        )
        self.s = Scheduler(
            CoreSettings(),
            NAME,
            client,
            self.store,
            self.leadership,
            Metrics(),
            clock,
            wait_for_unknown_leader=True,
            witness=self.witness,
            wall_ms=lambda: int(clock() * 1000),
        )
        self.streams = Streams(self)
        self.tasks: list[asyncio.Task[None]] = []
        self.state = "new"  # running, stopping (SIGTERM), stopped
        self.killed = False  # SIGKILL: its store calls never answer (FaultyStore)

    def start(self) -> None:
        """Watches listed and synced, then leadership and the loop (app.py's order)."""
        api = self.world.api
        api.streams.append(self.streams)
        self.s.intake.replace_nodes(api.nodes)
        for part in (POD_GROUPS.group, UPSTREAM_GROUP, VOLCANO_GROUP):  # a LIST per API group
            groups = [g for g in api.groups.values() if g.group == part]
            self.s.intake.replace(POD_GROUP_KIND, groups, part)
        self.s.intake.replace(RESOURCE_CLAIMS, list(api.claims.values()))
        for stream in ("bound", "pending"):
            self.streams.relist(stream, *api.listed(stream))
        self.streams.deliver()
        self.state = "running"
        self._spawn(self.leadership.run(self._elected, self.s.on_lost))
        self._spawn(self.s.run())
        self._spawn(self._pump())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(self.world.loop.create_task(coro))

    async def _elected(self, epoch: int) -> None:
        self.world.terms.append((self.name, epoch))
        self.world.elected_at.append(self.world.loop.time())
        await self.s.on_elected(epoch)

    async def _pump(self) -> None:
        while True:
            await asyncio.sleep(WATCH_PERIOD_S)
            self.streams.deliver()

    def sigterm(self) -> None:
        """A rolling update's SIGTERM: app.py's shutdown (drain, release the lease), in the
        background; the replica stops when it is done."""
        self.state = "stopping"
        self._spawn(self._shutdown())

    async def _shutdown(self) -> None:
        await self.s.drain()
        await self.leadership.release()
        self._stop()

    def sigkill(self) -> None:
        self.killed = True
        self._stop()

    def _stop(self) -> None:
        self.state = "stopped"
        with contextlib.suppress(ValueError):
            self.world.api.streams.remove(self.streams)
        loop = self.world.loop
        current = asyncio.current_task(loop) if loop.is_running() else None
        for task in [*self.tasks, *self.s.tasks.running]:
            if task is not current:
                task.cancel()

    @property
    def leading(self) -> bool:
        return self.state == "running" and self.leadership.leading


@dataclass
class World:
    """``master``: the store's server every replica reaches, but those a partition leaves on
    ``old_master`` (``partitioned``, by name) after a failover, until it heals."""

    loop: asyncio.AbstractEventLoop
    master: Store
    api: SimApiserver
    faults: StoreFaults = field(default_factory=StoreFaults)
    old_master: Store | None = None
    partitioned: set[str] = field(default_factory=set)
    replicas: list[SimReplica] = field(default_factory=list)
    terms: list[tuple[str, int]] = field(default_factory=list)
    # Every unit a store refused to reserve, with the store's reason (FaultyStore).
    refused: list[tuple[list[Claim], str]] = field(default_factory=list)
    elected_at: list[float] = field(default_factory=list)
    names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self.api.clock = self.loop.time
        self.api.term_of = self.term_of
        self.api.newest_term = lambda: len(self.terms) - 1

    def store_of(self, replica: SimReplica) -> Store:
        if self.old_master is not None and replica.name in self.partitioned:
            return self.old_master
        return self.master

    def term_of(self, holder: str, epoch: int) -> int:
        for i in range(len(self.terms) - 1, -1, -1):
            if self.terms[i] == (holder, epoch):
                return i
        return -1

    def start_replica(self) -> SimReplica:
        r = SimReplica(self, f"r{next(self.names)}")
        self.replicas.append(r)
        r.start()
        return r

    def running(self) -> list[SimReplica]:
        return [r for r in self.replicas if r.state != "stopped"]

    def leader(self) -> SimReplica | None:
        leaders = [r for r in self.running() if r.leading]
        return leaders[-1] if leaders else None

    async def shutdown(self) -> None:
        for r in self.replicas:
            r.sigkill()
        for _, answer in self.api.in_stall:
            answer.cancel()
        self.api.in_stall.clear()
        for timer, answer in self.api.in_slow:
            timer.cancel()
            answer.cancel()
        self.api.in_slow.clear()
        for hung in self.faults.hung:
            hung.cancel()
        self.faults.hung.clear()
        tasks = [t for r in self.replicas for t in (*r.tasks, *r.s.tasks.running)]
        stuck: set[asyncio.Task[Any]] = set()
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=SHUTDOWN_S)
        await self.master.close()
        if stuck:
            # A task that goes on after its cancellation (Python 3.11's wait_for lost one in
            # the turn its awaitable ended: the soak's teardown spun on it while shrinking
            # seed 5205) is a replica that SIGKILL did not stop: a finding, not a wait.
            names = sorted(t.get_coro().__qualname__ for t in stuck)  # type: ignore[union-attr]
            raise AssertionError(f"tasks went on after SIGKILL cancelled them: {names}")
