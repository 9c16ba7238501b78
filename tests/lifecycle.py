"""Shared parts of the stepped pod-lifecycle tests (issue 12's timelines) and the soak benchmark.

- ``Apiserver``: the apiserver as the scheduler sees it; the first Binding of a pod wins (later
  ones get 409), and a test can hold a Binding at a gate, lose its answer, refuse it, stall it
  (no answer; the first one commits when the stall ends, as after an etcd stall), or make reads
  fail. Every write gives the pod a new resourceVersion (``PodInput.version``), as etcd does.
  ResourceClaims reserved for a pod are recorded (``reserved``) and removed again by an
  Unreserve; their writes can fail or stall (``claim_writes``). ResourceClaim objects
  (``claims``, raw JSON as the apiserver keeps them) take the binder's DRA writes with
  resourceVersion preconditions (409 on a stale one), finalizers holding a deletion, and the
  status subresource apart from the rest; ``writes`` logs every claim write and Binding that
  landed, in order.
- ``ConfigMaps``: the ConfigMaps of the scheduler's namespace (the epoch witness), with
  resourceVersions, as ``KubeApi`` reads and writes them; a test can make every call fail.
- ``Replica``: one live ``Scheduler`` with its ``Leadership`` on a given store (memory or Redis)
  and a manual clock, stepped by hand: ``elect``, ``step`` (one turn of the loop), ``settle``
  (wait for its background tasks), and the store's contents in a form tests compare.

tests/integration/test_pod_lifecycle.py runs the timelines on the memory store and on a real
redis-server.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from scheduler.config.tuning import Tuning
from scheduler.core.model.dra import RequestMapping
from scheduler.core.model.objects import NodeInput, PodInput
from scheduler.core.settings import CoreSettings
from scheduler.kube.api import BindResult, ConfigMapData
from scheduler.kube.claims import Answer, ClaimObject, ClaimWrite
from scheduler.kube.podgroups import Eviction, EvictResult, Write
from scheduler.service.leader import Leadership, LeaseTiming
from scheduler.service.metrics import Metrics
from scheduler.service.podbook import Stage
from scheduler.service.scheduler import Scheduler
from scheduler.service.witness import Witness
from scheduler.state.base import Store
from tests.builders import MakeNode, MakePod
from tests.clock import ManualClock

TTL_MS = 15_000

A = TypeVar("A")


class Apiserver:
    """The apiserver as the scheduler sees it: the first Binding of a pod wins."""

    def __init__(self) -> None:
        self.pods: dict[str, PodInput] = {}
        self.gates: dict[str, asyncio.Event] = {}  # a Binding waits for its pod's gate
        self.lose_answer: set[str] = set()  # the Binding lands but its answer is lost
        self.refuse: dict[str, int] = {}  # the Binding is refused with this status
        self.reads_fail = False
        self.binds: list[tuple[str, str, str]] = []  # (pod, node, devices) that landed
        self.evictions: list[str] = []  # pods evicted (marked deleting), in order
        self.blocked: set[str] = set()  # pods a PodDisruptionBudget keeps from eviction
        self.nominated: dict[str, str] = {}  # status.nominatedNodeName by pod
        self.reserved: list[tuple[str, str]] = []  # (ResourceClaim key, pod uid) reserved
        # ResourceClaim writes: "" answered, "fail" refused (an apiserver restarting),
        # "stall" never answered (etcd stalls; the client gives up at its timeout).
        self.claim_writes = ""
        # Claim object writes that land but whose answer is lost, as ``writes`` names them.
        self.lose_answers: set[str] = set()
        # ResourceClaim objects by key (raw JSON), and what landed: "create|update|status|
        # delete <claim>" and "bind <pod>", in order.
        self.claims: dict[str, ClaimObject] = {}
        self.writes: list[str] = []
        # status.extendedResourceClaimStatus by pod: (claim name, request mappings).
        self.extended: dict[str, tuple[str, tuple[RequestMapping, ...]]] = {}
        self.claim_writes_tried = 0
        # Unreserves asked for: (ResourceClaim key, its UID precondition, pod uid).
        self.unreserved: list[tuple[str, str, str]] = []
        self.events: list[tuple[str, str, str]] = []  # (pod, reason, message)
        self.unschedulable: dict[str, str] = {}  # PodScheduled=False messages by pod
        # PodScheduled=False writes: a pod's next one waits for its gate here and lands when it
        # is set (a slow write, overtaken by later ones); a pod's in ``refuse_status`` fail.
        self.status_gates: dict[str, asyncio.Event] = {}
        self.refuse_status: set[str] = set()
        # Pods whose Bindings get no answer; the first one commits when the stall ends.
        self.stalled: dict[str, tuple[str, str, dict[str, str]] | None] = {}
        self.version = 0  # the last resourceVersion given

    def stamp(self, pod: PodInput) -> PodInput:
        """The pod as written now: a new resourceVersion."""
        self.version += 1
        return msgspec.structs.replace(pod, version=self.version)

    def create(self, pod: PodInput) -> PodInput:
        pod = self.pods[pod.key] = self.stamp(pod)
        return pod

    def land(self, key: str, node: str, devices: str) -> PodInput:
        """Someone else's Binding (another scheduler, a previous leader) lands."""
        pod = self.pods[key]
        annotations = {**pod.annotations, "topo-scheduler.io/devices": devices}
        pod = self.pods[key] = self.stamp(
            msgspec.structs.replace(pod, node_name=node, annotations=annotations, shown_reason=None)
        )
        return pod

    def end_stall(self, key: str) -> None:
        """The stall ends: the first stalled Binding commits now (if it still may)."""
        first = self.stalled.pop(key)
        if first is not None:
            self._commit(key, *first)

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindResult:
        key = f"{namespace}/{name}"
        if key in self.gates:
            await self.gates[key].wait()
        if key in self.stalled:
            if self.stalled[key] is None:
                self.stalled[key] = (uid, node, annotations)
            await asyncio.Event().wait()  # no answer: the client gives up
        if key in self.refuse:
            return BindResult(self.refuse[key], "refused")
        result = self._commit(key, uid, node, annotations)
        if result.ok and key in self.lose_answer:
            self.lose_answer.discard(key)
            raise ConnectionError("the answer was lost")
        return result

    def _commit(self, key: str, uid: str, node: str, annotations: dict[str, str]) -> BindResult:
        pod = self.pods.get(key)
        if pod is None or pod.uid != uid:
            return BindResult(404, "not found")
        if pod.node_name:
            return BindResult(409, "already bound")
        self.pods[key] = self.stamp(
            msgspec.structs.replace(
                pod,
                node_name=node,
                annotations={**pod.annotations, **annotations},
                shown_reason=None,  # BindingREST sets PodScheduled=True
            )
        )
        self.binds.append((key, node, annotations["topo-scheduler.io/devices"]))
        self.writes.append(f"bind {key}")
        self.bound(key)
        return BindResult(201)

    def bound(self, key: str) -> None:
        """A Binding landed (a hook for fakes that deliver watch events)."""

    async def get_pod(self, namespace: str, name: str) -> PodInput | None:
        if self.reads_fail:
            raise ConnectionError("apiserver unavailable")
        return self.pods.get(f"{namespace}/{name}")

    async def set_unschedulable(self, namespace: str, name: str, uid: str, message: str) -> Write:
        """PodScheduled=False, with the UID precondition the apiserver checks (409 otherwise);
        GONE (404) when no pod of the name is there."""
        key = f"{namespace}/{name}"
        gate = self.status_gates.pop(key, None)
        if gate is not None:
            await gate.wait()
        if key in self.refuse_status:
            raise ConnectionError("apiserver unavailable")
        pod = self.pods.get(key)
        if pod is None:
            return Write.GONE
        if pod.uid != uid:
            raise RuntimeError(f"409: the pod {key} has another UID than {uid}")
        self.unschedulable[key] = message
        if pod.shown_reason != message:  # the condition is part of the pod (a new version)
            self.pods[key] = self.stamp(msgspec.structs.replace(pod, shown_reason=message))
        return Write.DONE

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
        self.events.append((f"{namespace}/{name}", reason, message))

    async def evict(
        self, namespace: str, name: str, uid: str, dry_run: bool = False
    ) -> EvictResult:
        key = f"{namespace}/{name}"
        pod = self.pods.get(key)
        if pod is None or pod.uid != uid:
            return EvictResult(Eviction.GONE, 404)
        if key in self.blocked:
            return EvictResult(
                Eviction.BLOCKED,
                429,
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )
        if dry_run:
            return EvictResult(Eviction.EVICTED, 201)
        self.pods[key] = self.stamp(msgspec.structs.replace(pod, deleting=True))
        self.evictions.append(key)
        return EvictResult(Eviction.EVICTED, 201)

    async def set_nominated_node(self, namespace: str, name: str, node: str | None) -> Write:
        key = f"{namespace}/{name}"
        if key not in self.pods:
            return Write.GONE
        if node:
            self.nominated[key] = node
        else:
            self.nominated.pop(key, None)
        return Write.DONE

    async def reserve_claims(
        self, namespace: str, claims: tuple[str, ...], pod: str, uid: str
    ) -> Write:
        await self._claim_write()
        for claim in claims:
            if (f"{namespace}/{claim}", uid) not in self.reserved:  # a merge by uid: kept once
                self.reserved.append((f"{namespace}/{claim}", uid))
        return Write.DONE

    async def unreserve_claims(
        self, namespace: str, claims: tuple[tuple[str, str], ...], uid: str
    ) -> None:
        await self._claim_write()
        for claim, claim_uid in claims:
            self.unreserved.append((f"{namespace}/{claim}", claim_uid, uid))
            if (f"{namespace}/{claim}", uid) in self.reserved:
                self.reserved.remove((f"{namespace}/{claim}", uid))

    async def _claim_write(self) -> None:
        self.claim_writes_tried += 1
        if self.claim_writes == "fail":
            raise ConnectionError("the apiserver is restarting")
        if self.claim_writes == "stall":
            await asyncio.Event().wait()  # no answer: the client gives up

    # ---- ResourceClaim objects ---------------------------------------------------------------

    def add_claim(self, name: str, requests: list[dict[str, Any]] | None = None) -> ClaimObject:
        """A user's ResourceClaim in namespace default, not allocated."""
        self.version += 1
        obj: ClaimObject = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "resourceVersion": str(self.version),
            },
            "spec": {"devices": {"requests": requests or []}},
        }
        self.claims[f"default/{name}"] = obj
        return copy.deepcopy(obj)

    def claim(self, name: str) -> ClaimObject | None:
        return self.claims.get(f"default/{name}")

    async def read_claim(self, namespace: str, name: str) -> ClaimObject | None:
        if self.reads_fail:
            raise ConnectionError("apiserver unavailable")
        found = self.claims.get(f"{namespace}/{name}")
        return None if found is None else copy.deepcopy(found)

    async def replace_claim(self, obj: ClaimObject, status: bool) -> ClaimWrite:
        await self._claim_write()
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        current = self.claims.get(key)
        if current is None:
            return ClaimWrite(Answer.GONE)
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return ClaimWrite(Answer.CONFLICT)
        new = copy.deepcopy(current)
        if status:  # the status subresource: only the status changes
            new["status"] = copy.deepcopy(obj.get("status") or {})
        else:  # the object: its metadata's mutable fields; status and spec stay
            for field in ("finalizers", "annotations", "labels", "ownerReferences"):
                if field in meta:
                    new["metadata"][field] = copy.deepcopy(meta[field])
                else:
                    new["metadata"].pop(field, None)
        self.version += 1
        new["metadata"]["resourceVersion"] = str(self.version)
        entry = f"{'status' if status else 'update'} {key}"
        self.writes.append(entry)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            del self.claims[key]
        else:
            self.claims[key] = new
        return self._answer(entry, ClaimWrite(Answer.DONE, copy.deepcopy(new)))

    async def create_claim(self, obj: ClaimObject) -> ClaimWrite:
        await self._claim_write()
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if key in self.claims:
            return ClaimWrite(Answer.CONFLICT)
        self.version += 1
        new = copy.deepcopy(obj)
        new["metadata"]["uid"] = f"uid-{meta['name']}"
        new["metadata"]["resourceVersion"] = str(self.version)
        self.claims[key] = new
        self.writes.append(f"create {key}")
        return self._answer(f"create {key}", ClaimWrite(Answer.DONE, copy.deepcopy(new)))

    async def delete_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> Answer:
        await self._claim_write()
        key = f"{namespace}/{name}"
        current = self.claims.get(key)
        if current is None:
            return Answer.GONE
        meta = current["metadata"]
        if meta["uid"] != uid or meta["resourceVersion"] != resource_version:
            return Answer.CONFLICT
        self.writes.append(f"delete {key}")
        if meta.get("finalizers"):
            self.version += 1
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            meta["resourceVersion"] = str(self.version)
        else:
            del self.claims[key]
        return self._answer(f"delete {key}", Answer.DONE)

    async def record_extended_claim(
        self, namespace: str, name: str, uid: str, claim: str, mappings: tuple[RequestMapping, ...]
    ) -> Write:
        key = f"{namespace}/{name}"
        pod = self.pods.get(key)
        if pod is None or pod.uid != uid:
            return Write.GONE
        self.extended[key] = (claim, mappings)
        self.pods[key] = self.stamp(msgspec.structs.replace(pod, extended_claim=claim))
        return Write.DONE

    def _answer(self, entry: str, answer: A) -> A:
        """A claim write that landed: its answer, unless it is to be lost (once)."""
        if entry in self.lose_answers:
            self.lose_answers.discard(entry)
            raise ConnectionError("the answer was lost")
        return answer

    def delete(self, key: str) -> PodInput:
        """The pod is deleted; returns it as the DELETED event shows it (a new version)."""
        return self.stamp(self.pods.pop(key))

    def forget(self) -> None:
        """Empty the logs kept for tests to read (binds, evictions, claims reserved, events,
        PodScheduled messages): they grow with every pod, so a run that measures memory over
        many pods (the soak, the structure sizes test) forgets them between waves."""
        for log in (
            self.binds,
            self.evictions,
            self.reserved,
            self.unreserved,
            self.events,
            self.writes,
        ):
            log.clear()
        self.unschedulable.clear()


class ConfigMaps:
    """One namespace's ConfigMaps as ``KubeApi`` reads and writes them (compare-and-swap on the
    resourceVersion; a write says False when the ConfigMap was created, changed or deleted
    since it was read). ``failure`` makes every call raise it (a 403, a timeout)."""

    def __init__(self) -> None:
        self.maps: dict[str, tuple[int, dict[str, str]]] = {}
        self.failure: Exception | None = None

    async def read_config_map(self, namespace: str, name: str) -> ConfigMapData | None:
        if self.failure is not None:
            raise self.failure
        if name not in self.maps:
            return None
        version, data = self.maps[name]
        return msgspec.convert(
            {"metadata": {"resourceVersion": str(version)}, "data": dict(data)}, ConfigMapData
        )

    async def write_config_map(
        self, namespace: str, name: str, data: dict[str, str], resource_version: str | None
    ) -> bool:
        if self.failure is not None:
            raise self.failure
        current = self.maps.get(name)
        if (current is None) != (resource_version is None):
            return False  # created meanwhile, or gone
        if current is not None and str(current[0]) != resource_version:
            return False  # changed since it was read
        version = 0 if current is None else current[0]
        self.maps[name] = (version + 1, {**(current[1] if current else {}), **data})
        return True


class Replica:
    def __init__(
        self,
        api: Apiserver,
        store: Store,
        clock: ManualClock,
        holder: str = "a",
        wait_for_unknown_leader: bool = False,
        bind_timeout: float = 5.0,
        witness: Witness | None = None,
        tuning: Tuning | None = None,
        settings: CoreSettings | None = None,
    ) -> None:
        self.api, self.store, self.clock, self.holder = api, store, clock, holder
        self.tuning = tuning
        superseded = None if witness is None else witness.superseded
        self.leadership = Leadership(store, holder, LeaseTiming(), clock, superseded=superseded)
        self.s = Scheduler(
            settings or CoreSettings(),
            "topo-scheduler",
            api,
            store,
            self.leadership,
            Metrics(),
            clock,
            bind_timeout=bind_timeout,
            wait_for_unknown_leader=wait_for_unknown_leader,
            witness=witness,
            tuning=tuning,
        )

    async def elect(self, nodes: list[NodeInput], bound: list[PodInput] | None = None) -> int:
        """Synced watches, then the lease won (what app.py and Leadership.run do)."""
        self.s.intake.replace_nodes(nodes)
        self.s.intake.replace_bound(bound or [], self.api.version)
        epoch = await self.store.acquire(self.holder, TTL_MS)
        assert epoch is not None
        self.leadership.epoch = epoch
        self.leadership._renewed_at = self.clock.now
        await self.s.on_elected(epoch)
        return epoch

    async def renew(self) -> None:
        assert self.leadership.epoch is not None
        assert await self.store.renew(self.holder, self.leadership.epoch, TTL_MS)
        self.leadership._renewed_at = self.clock.now

    async def renewal(self) -> None:
        """One renewal as ``Leadership.run`` makes it: it counts only if the store accepts it
        and the epoch witness (if any) still holds this replica's record."""
        await self.leadership.renew(self.s.on_lost)

    def pending(self, pod: PodInput) -> PodInput:
        pod = self.api.create(pod)
        self.s.intake.pending_event("ADDED", pod)
        return pod

    def bound_list(self) -> tuple[list[PodInput], int]:
        """A LIST of the bound pods taken now: its items and its resourceVersion."""
        return [p for p in self.api.pods.values() if p.node_name], self.api.version

    def bound_seen(self, key: str) -> None:
        """The bound pods' watch delivers the pod as the apiserver has it now."""
        self.s.intake.pending_event("DELETED", self.api.pods[key])
        self.s.intake.bound_event("ADDED", self.api.pods[key])

    async def step(self) -> str | None:
        """One turn of the loop: the next pod, decided, reserved and handed to the binder."""
        assert self.s.may_decide()
        await self.s.sync.if_needed()
        await self.s.settle()  # the loop's mark of an election whose wait is over
        self.s.effects.settle_due()  # the loop's timer for a previous leader's reservations
        key = self.s.queue.pop()
        if key is not None:
            await self.s.cycle.schedule(key)
        return key

    async def settle(self) -> None:
        while self.s.tasks.running:
            await asyncio.gather(*list(self.s.tasks.running))

    def held(self, key: str) -> tuple[str, list[int]] | None:
        h = self.s.state.holdings.get(key)
        return None if h is None else (h.node, [i for i in range(64) if h.whole >> i & 1])

    async def records(self) -> dict[str, str]:
        """The store's pod records: pod -> "state:(devices)"."""
        return {
            r.claim.pod: f"{r.state}:{r.claim.devices}"
            for r in (await self.store.records()).values()
        }

    async def owners(self, node: str = "n") -> dict[int, str]:
        """The store's owners of the node's whole GPUs: GPU index -> pod (its UID when the store
        has no record of it, which would be a store that disagrees with itself)."""
        pods = {uid: r.claim.pod for uid, r in (await self.store.records()).items()}
        return {i: pods.get(o.uid, o.uid) for i, o in (await self.store.owners(node)).items()}

    async def gangs(self) -> dict[str, str]:
        """The store's gang records: gang -> "state:member pods,..." (UIDs as in ``owners``)."""
        pods = {uid: r.claim.pod for uid, r in (await self.store.records()).items()}
        return {
            gang: f"{g.state}:{','.join(sorted(pods.get(u, u) for u in g.members))}"
            for gang, g in (await self.store.gangs()).items()
        }


# Bind retries, re-sends and pod re-reads without their waits.
QUICK_RETRIES = Tuning(bind_retry_seconds=0.0, check_retry_seconds=0.001, rebind_seconds=0.001)


def node(gpus: int = 1) -> NodeInput:
    return MakeNode().Name("n").GPUs(gpus).Obj()


async def until(condition: Callable[[], object], tries: int = 500) -> None:
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("never happened")


async def reloaded(r: Replica) -> PodInput:
    """Timeline 7's start: a previous leader ("old", on ``r``'s store) reserved GPU 0 of node n
    for pod p and died before binding; ``r`` is elected and reloads that reservation, held
    where it is (unsettled) while the old leader's Binding may still land."""
    p = r.api.create(MakePod().Name("p").Req(1).Obj())
    old = Replica(r.api, r.store, r.clock, "old", tuning=r.tuning)
    await old.elect([node(1)])
    old.s.intake.pending_event("ADDED", p)
    await old.step()  # reserved; "old" dies before binding
    r.api.gates.clear()
    await r.store.release_lease("old", old.leadership.epoch or 0)
    old.s.accepting = False
    for t in list(old.s.tasks.running):
        t.cancel()
    await asyncio.gather(*list(old.s.tasks.running), return_exceptions=True)
    r.s.intake.pending_event("ADDED", p)
    await r.elect([node(1)])
    assert r.s.book.stage("default/p") is Stage.UNSETTLED and r.held("default/p") == ("n", [0])
    return p


async def past_commit(*replicas: Replica) -> None:
    """Time passes (the leader renewing its lease) until no Binding sent before the leader's
    election can land any more; the loop's timer re-reads the unsettled pods."""
    leader = next(r for r in replicas if r.leadership.leading)
    while leader.clock.now < leader.s.effects.settled_at:
        leader.clock.now += 5.0
        await leader.renew()
    leader.s.effects.settle_due()
    await leader.settle()
