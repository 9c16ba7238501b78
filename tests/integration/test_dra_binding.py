"""Issue 29, item 5: the ResourceClaims a placement allocates are written before its Binding in
kube-scheduler's PreBind order and undone when the Binding fails; failover keeps or releases
them, never gives them twice. Stepped by hand through the live scheduler's own parts on BOTH
stores (the ``backend`` fixture of test_pod_lifecycle.py: the memory store and the real Redis
store), against the fake apiserver of tests/lifecycle.py and its ResourceClaim objects (raw
JSON, resourceVersion preconditions, finalizers, the status subresource).

The core's allocator is being wired into the filters separately (issue 29 item 2): here
``allocating`` stands in for its output, giving each placement of the pods it names the
ClaimAllocation the core would return, unless the snapshot shows that claim allocated already
(then the pod only joins it, as the core does).
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from scheduler.core.model.decisions import ClaimAllocation, Decision, Placed
from scheduler.core.model.dra import (
    EXTENDED_RESOURCE_CLAIM,
    Allocation,
    Device,
    DeviceClass,
    DeviceRequest,
    DeviceResult,
    ExactRequest,
    RequestMapping,
    ResourcePool,
    ResourceSlice,
)
from scheduler.core.model.objects import PodClaim, PodInput
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.watched import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from scheduler.kube.claims import FINALIZER, extended_claim_name
from scheduler.kube.dracodec import convert_resource_claim
from scheduler.service import cycle as cycle_module
from scheduler.service.podbook import Stage
from tests.builders import MakeNode, MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_issue30_binding import lease_lapses
from tests.integration.test_pod_lifecycle import Backend, store_of
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica, node, past_commit, until

redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend

RESULT = {"request": "gpu", "driver": "gpu.example.com", "pool": "n", "device": "gpu-0"}


def ours(
    claim: str, conditions: tuple[str, ...] = (), failures: tuple[str, ...] = ()
) -> ClaimAllocation:
    """What the core allocates for claim ``claim``: device gpu-0 of pool n."""
    result = DeviceResult(
        "gpu",
        "gpu.example.com",
        "n",
        "gpu-0",
        binding_conditions=conditions,
        binding_failure_conditions=failures,
    )
    return ClaimAllocation(f"default/{claim}", f"uid-{claim}", Allocation((result,)))


SPECIAL = ClaimAllocation(
    "default/<extended-resources>",
    "",
    Allocation((DeviceResult("container-0-request-0", "gpu.example.com", "n", "gpu-0"),)),
    special=True,
    requests=(
        DeviceRequest("container-0-request-0", exactly=ExactRequest("gpu.example.com", count=1)),
    ),
    mappings=(RequestMapping("c0", "nvidia.com/gpu", "container-0-request-0"),),
)


def allocating(monkeypatch: pytest.MonkeyPatch, allocations: dict[str, ClaimAllocation]) -> None:
    """The core's DRA allocation, standing in (module doc)."""
    real = cycle_module.decide

    def decide(state: ClusterState, unit: object) -> Decision:
        decision = real(state, unit)  # type: ignore[arg-type]
        if not isinstance(decision, Placed):
            return decision
        placements = []
        for p in decision.placements:
            allocation = allocations.get(p.pod)
            watched = state.inputs.resource_claims.get(allocation.claim) if allocation else None
            if allocation is not None and (watched is None or watched.allocation is None):
                p = msgspec.structs.replace(p, claims=(allocation,))
            placements.append(p)
        return msgspec.structs.replace(decision, placements=tuple(placements))

    monkeypatch.setattr(cycle_module, "decide", decide)


def claim_seen(r: Replica, name: str) -> None:
    """The ResourceClaims watch delivers the claim as the apiserver has it now."""
    obj = r.api.claim(name)
    assert obj is not None
    r.s.intake.event(RESOURCE_CLAIMS, "MODIFIED", convert_resource_claim(obj))


def untouched(api: Apiserver, name: str) -> bool:
    """Nothing of any pod is in the claim: not allocated, reserved for nobody, unprotected."""
    obj = api.claim(name)
    assert obj is not None
    return not obj.get("status") and not obj["metadata"].get("finalizers")


# ---- PreBind ------------------------------------------------------------------------------------


async def test_prebind_writes_the_finalizer_then_allocation_and_reservation_then_binds(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.api.add_claim("gc")
    allocating(monkeypatch, {"default/a": ours("gc")})
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    await r.step()
    await r.settle()
    # kube-scheduler's order: Update (the finalizer), one UpdateStatus, then the Binding.
    assert r.api.writes == ["update default/gc", "status default/gc", "bind default/a"]
    claim = r.api.claim("gc")
    assert claim is not None and claim["metadata"]["finalizers"] == [FINALIZER]
    status = claim["status"]
    assert status["reservedFor"] == [{"resource": "pods", "name": "a", "uid": a.uid}]
    assert status["allocation"]["devices"] == {"results": [RESULT]}
    assert status["allocation"]["allocationTimestamp"].endswith("Z")
    assert r.s.book.stage("default/a") is Stage.ASSUMED


async def test_a_failed_binding_leaves_no_claim_allocated_or_reserved_for_the_pod(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.api.add_claim("gc")
    allocating(monkeypatch, {"default/a": ours("gc")})
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.refuse["default/a"] = 403  # e.g. an admission webhook refuses the Binding
    await r.step()
    await r.settle()
    assert r.api.binds == [] and r.s.book.stage("default/a") is Stage.PENDING
    # Unreserve: the pod leaves reservedFor, the allocation goes with it, then the finalizer.
    assert r.api.writes == [
        "update default/gc",
        "status default/gc",
        "status default/gc",
        "update default/gc",
    ]
    assert untouched(r.api, "gc")
    assert r.held("default/a") is None and await store_of(r) == ({}, {}, {})


async def test_a_pod_deleted_before_its_binding_leaves_no_claim_allocated_for_it(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.api.add_claim("gc")
    allocating(monkeypatch, {"default/a": ours("gc")})
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.gates["default/a"] = asyncio.Event()
    await r.step()
    await until(lambda: r.api.writes == ["update default/gc", "status default/gc"])
    r.api.delete("default/a")  # the Binding will find no pod (404)
    r.api.gates["default/a"].set()
    await r.settle()
    assert untouched(r.api, "gc") and r.api.binds == []


async def test_unreserve_keeps_the_allocation_others_are_reserved_in(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared claim another pod joined after our write: only our pod leaves it."""
    r = backend.live()
    await r.elect([node(1)])
    r.api.add_claim("gc")
    allocating(monkeypatch, {"default/a": ours("gc")})
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.gates["default/a"] = asyncio.Event()
    await r.step()
    await until(lambda: r.api.writes == ["update default/gc", "status default/gc"])
    claim = r.api.claims["default/gc"]
    claim["status"]["reservedFor"].append({"resource": "pods", "name": "b", "uid": "uid-b"})
    r.api.refuse["default/a"] = 409
    r.api.pods["default/a"] = r.api.stamp(r.api.pods["default/a"])  # still pending
    r.api.gates["default/a"].set()
    await r.settle()
    claim = r.api.claims["default/gc"]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "b", "uid": "uid-b"}]
    assert claim["status"]["allocation"]["devices"] == {"results": [RESULT]}
    assert claim["metadata"]["finalizers"] == [FINALIZER]


async def test_a_lost_answer_of_the_status_write_is_settled_by_reading_the_claim(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.api.add_claim("gc")
    allocating(monkeypatch, {"default/a": ours("gc")})
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.lose_answers = {"status default/gc"}  # it lands; the answer is lost
    await r.step()
    await r.settle()
    # Read again, the claim shows the write landed: not written twice, the Binding sent.
    assert r.api.writes == ["update default/gc", "status default/gc", "bind default/a"]
    claim = r.api.claim("gc")
    assert claim is not None and [c["uid"] for c in claim["status"]["reservedFor"]] == [a.uid]
    assert r.s.book.stage("default/a") is Stage.ASSUMED


async def test_an_unanswered_claim_write_holds_everything_until_it_is_settled(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = backend.live(bind_timeout=0.02)
    await r.elect([node(1)])
    r.api.add_claim("gc")
    allocating(monkeypatch, {"default/a": ours("gc")})
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.claim_writes = "stall"  # etcd stalls: no answer (the write may yet land)
    await r.step()
    await until(lambda: r.api.claim_writes_tried >= 3)
    await until(lambda: r.s.metrics.bind_errors.labels(reason="claim")._value.get() >= 3)
    assert r.s.book.stage("default/a") is Stage.BINDING and r.held("default/a") == ("n", [0])
    assert r.s.state.holdings["default/a"].claims == (ours("gc"),)
    r.api.claim_writes = ""  # the stall ends: the re-send writes and binds
    await r.settle()
    assert r.api.writes == ["update default/gc", "status default/gc", "bind default/a"]
    assert r.s.book.stage("default/a") is Stage.ASSUMED


async def test_an_unknown_claim_write_then_a_claim_gone_fails_the_pod_no_binding_was_sent(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The re-send after an unanswered claim write finds the claim deleted: no Binding of the
    pod was ever sent, so it is not bound and nothing of it is held (not re-sent forever)."""
    r = backend.live(bind_timeout=0.02)
    await r.elect([node(1)])
    r.api.add_claim("gc")
    allocating(monkeypatch, {"default/a": ours("gc")})
    r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.claim_writes = "stall"
    await r.step()
    await until(lambda: r.s.metrics.bind_errors.labels(reason="claim")._value.get() >= 3)
    assert r.s.book.stage("default/a") is Stage.BINDING
    del r.api.claims["default/gc"]  # deleted meanwhile; the stall ends
    r.api.claim_writes = ""
    await until(lambda: r.s.book.stage("default/a") is Stage.PENDING)
    await r.settle()
    assert r.api.binds == [] and r.held("default/a") is None and await store_of(r) == ({}, {}, {})


async def test_no_claim_write_when_the_lease_would_not_outlive_it(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    r.api.add_claim("gc")
    allocating(monkeypatch, {"default/a": ours("gc")})
    r.pending(MakePod().Name("a").Req(1).Obj())
    await r.step()
    r.clock.now += r.leadership.remaining() - 1  # less than the bind timeout left
    await r.settle()
    assert r.api.writes == [] and untouched(r.api, "gc")
    assert r.s.book.stage("default/a") is Stage.PENDING


# ---- the special claim of extended resources backed by DRA -------------------------------------


async def test_the_special_claim_is_created_as_kube_scheduler_does_and_recorded_on_the_pod(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    allocating(monkeypatch, {"default/a": SPECIAL})
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    await r.step()
    await r.settle()
    name = extended_claim_name("a", a.uid)
    assert (
        name.startswith("a-extended-resources-") and len(name) == len("a-extended-resources-") + 5
    )
    key = f"default/{name}"
    assert r.api.writes == [f"create {key}", f"update {key}", f"status {key}", "bind default/a"]
    claim = r.api.claims[key]
    assert claim["metadata"]["annotations"] == {EXTENDED_RESOURCE_CLAIM: "true"}
    assert claim["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "a", "uid": a.uid, "controller": True}
    ]
    assert claim["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-0",
            "exactly": {
                "deviceClassName": "gpu.example.com",
                "allocationMode": "ExactCount",
                "count": 1,
            },
        }
    ]
    assert r.api.extended["default/a"] == (name, SPECIAL.mappings)


async def test_a_failed_binding_deletes_the_special_claim(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    allocating(monkeypatch, {"default/a": SPECIAL})
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.refuse["default/a"] = 403
    await r.step()
    await r.settle()
    key = f"default/{extended_claim_name('a', a.uid)}"
    # kube-scheduler's Unreserve of the special claim: its finalizer removed, then deleted.
    assert r.api.writes[-2:] == [f"update {key}", f"delete {key}"]
    assert r.api.claims == {}


async def test_a_lost_create_answer_makes_no_second_special_claim(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    allocating(monkeypatch, {"default/a": SPECIAL})
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    key = f"default/{extended_claim_name('a', a.uid)}"
    r.api.lose_answers = {f"create {key}"}
    await r.step()
    await r.settle()
    assert list(r.api.claims) == [key]
    assert r.api.writes == [f"create {key}", f"update {key}", f"status {key}", "bind default/a"]


# ---- binding conditions ------------------------------------------------------------------------


def waiting_replica(backend: Backend, wait_s: float = 600.0) -> Replica:
    tuning = msgspec.structs.replace(
        QUICK_RETRIES, binding_conditions_seconds=wait_s, binding_conditions_poll_seconds=0.001
    )
    return Replica(Apiserver(), backend.store, backend.clock, tuning=tuning)


def report(api: Apiserver, name: str, condition: str) -> None:
    """The driver reports a condition of device gpu-0 True in the claim's status.devices."""
    status = api.claims[f"default/{name}"]["status"]
    status["devices"] = [
        {
            "driver": "gpu.example.com",
            "pool": "n",
            "device": "gpu-0",
            "conditions": [{"type": condition, "status": "True"}],
        }
    ]


async def test_the_binding_waits_for_the_binding_conditions(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = waiting_replica(backend)
    await r.elect([node(1)])
    r.api.add_claim("gc")
    allocating(monkeypatch, {"default/a": ours("gc", ("attached",), ("failed",))})
    r.pending(MakePod().Name("a").Req(1).Obj())
    await r.step()
    await until(lambda: r.api.writes == ["update default/gc", "status default/gc"])
    await asyncio.sleep(0.01)
    assert r.api.binds == []  # waiting for the driver
    report(r.api, "gc", "attached")
    await r.settle()
    assert r.api.writes[-1] == "bind default/a"


@pytest.mark.parametrize("outcome", ["failure", "timeout"])
async def test_a_binding_failure_condition_or_the_timeout_releases_the_claim(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    r = waiting_replica(backend, 600.0 if outcome == "failure" else 0.02)
    await r.elect([node(1)])
    r.api.add_claim("gc")
    allocating(monkeypatch, {"default/a": ours("gc", ("attached",), ("failed",))})
    r.pending(MakePod().Name("a").Req(1).Obj())
    await r.step()
    await until(lambda: r.api.writes == ["update default/gc", "status default/gc"])
    if outcome == "failure":
        report(r.api, "gc", "failed")
    await r.settle()
    assert r.api.binds == [] and untouched(r.api, "gc")
    assert r.s.book.stage("default/a") is Stage.PENDING and r.held("default/a") is None


# ---- failover ----------------------------------------------------------------------------------


async def test_a_leader_killed_between_the_claim_write_and_the_binding(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next leader holds the devices while the old leader's writes may land (its store
    record carries the claim's allocation), then finds the claim allocated for the pod and
    keeps it: the same devices, written once, the pod bound once."""
    api = Apiserver()
    api.add_claim("gc")
    allocating(monkeypatch, {"default/p": ours("gc")})
    old = backend.replica(api, "old")
    new = backend.replica(api, "new")
    await old.elect([node(1)])
    p = old.pending(MakePod().Name("p").Req(1).Obj())
    new.s.intake.pending_event("ADDED", p)
    api.gates["default/p"] = asyncio.Event()  # the Binding waits: the claim writes landed
    await old.step()
    await until(lambda: api.writes == ["update default/gc", "status default/gc"])
    written = api.claim("gc")
    # kill -9: nothing of the old leader runs any more; its lease lapses.
    old.s.accepting = False
    for t in list(old.s.tasks.running):
        t.cancel()
    await asyncio.gather(*list(old.s.tasks.running), return_exceptions=True)
    await lease_lapses(backend)
    del api.gates["default/p"]
    await new.elect([node(1)])
    # Held where the old leader decided, its claim's devices with it, from the store's record.
    assert new.s.book.stage("default/p") is Stage.UNSETTLED and new.held("default/p") == ("n", [0])
    assert new.s.state.holdings["default/p"].claims == (ours("gc"),)
    assert (await backend.store.records())[p.uid].claim.claims == (ours("gc"),)
    claim_seen(new, "gc")  # the claims watch shows the old leader's allocation
    await past_commit(new)  # no write of the old leader can land now: read back pending
    assert new.s.book.stage("default/p") is Stage.RELOADED
    assert await new.step() == "default/p"
    await new.settle()
    # Kept: the allocation as the old leader wrote it, reserved once, the pod bound once.
    assert api.writes == ["update default/gc", "status default/gc", "bind default/p"]
    assert api.claim("gc") == written
    assert new.s.book.stage("default/p") is Stage.ASSUMED


async def test_a_pod_whose_old_leader_died_before_its_claim_write_is_allocated_once(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old leader reserved the pod in the store and died before any claim write: the next
    leader decides it afresh and writes the claim itself, once."""
    api = Apiserver()
    api.add_claim("gc")
    allocating(monkeypatch, {"default/p": ours("gc")})
    old = backend.replica(api, "old")
    new = backend.replica(api, "new")
    await old.elect([node(1)])
    p = old.pending(MakePod().Name("p").Req(1).Obj())
    new.s.intake.pending_event("ADDED", p)
    api.claim_writes = "stall"  # the old leader's claim write never lands (etcd gave up)
    await old.step()
    await until(lambda: api.claim_writes_tried >= 1)
    old.s.accepting = False
    for t in list(old.s.tasks.running):
        t.cancel()
    await asyncio.gather(*list(old.s.tasks.running), return_exceptions=True)
    await lease_lapses(backend)
    api.claim_writes = ""
    await new.elect([node(1)])
    assert new.s.state.holdings["default/p"].claims == (ours("gc"),)
    claim_seen(new, "gc")
    await past_commit(new)
    assert await new.step() == "default/p"
    await new.settle()
    assert api.writes == ["update default/gc", "status default/gc", "bind default/p"]
    claim = api.claim("gc")
    assert claim is not None and [c["uid"] for c in claim["status"]["reservedFor"]] == [p.uid]


# ---- failover with the core's own allocator ----------------------------------------------------

GPU_CLASS = DeviceClass("gpu.example.com", ("device.driver == 'gpu.example.com'",))
GPU_SLICE = ResourceSlice(
    "n-gpus", "gpu.example.com", ResourcePool("n", 1, 1), node_name="n", devices=(Device("gpu-0"),)
)
ONE_GPU = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 1}}]


def dra_world(*replicas: Replica) -> None:
    """The DRA watches of every replica have listed the class, the slice (one device, gpu-0 of
    node n) and the claims."""
    for r in replicas:
        r.s.intake.replace(DEVICE_CLASSES, [GPU_CLASS])
        r.s.intake.replace(RESOURCE_SLICES, [GPU_SLICE])
        for name in ("gc", "gq"):
            claim_seen(r, name)


def claiming(name: str, claim: str) -> PodInput:
    return msgspec.structs.replace(
        MakePod().Name(name).Obj(), resource_claims=(PodClaim("gpu", claim),)
    )


def holders(api: Apiserver, device: str) -> list[str]:
    """The claims whose allocation holds ``device`` (of pool n)."""
    return sorted(
        key
        for key, obj in api.claims.items()
        for r in ((obj.get("status") or {}).get("allocation") or {})
        .get("devices", {})
        .get("results", [])
        if r["device"] == device
    )


async def test_a_killed_leaders_claim_devices_are_held_and_not_given_to_another_pod(
    backend: Backend,
) -> None:
    """The old leader wrote p's claim (gpu-0) and was killed before the Binding; the new
    leader's claims watch has not shown that write yet. Its reloaded reservation holds gpu-0,
    so q, asking for a device of the same class, waits; p keeps gpu-0 and is bound once."""
    api = Apiserver()
    api.add_claim("gc", ONE_GPU)
    api.add_claim("gq", ONE_GPU)
    old = backend.replica(api, "old")
    new = backend.replica(api, "new")
    dra_world(old, new)
    await old.elect([node(1)])
    p = old.pending(claiming("p", "gc"))
    new.s.intake.pending_event("ADDED", p)
    api.gates["default/p"] = asyncio.Event()  # the Binding waits: the claim writes landed
    await old.step()
    await until(lambda: api.writes == ["update default/gc", "status default/gc"])
    assert holders(api, "gpu-0") == ["default/gc"]
    old.s.accepting = False  # kill -9
    for t in list(old.s.tasks.running):
        t.cancel()
    await asyncio.gather(*list(old.s.tasks.running), return_exceptions=True)
    await lease_lapses(backend)
    del api.gates["default/p"]
    await new.elect([node(1)])
    assert new.s.book.stage("default/p") is Stage.UNSETTLED
    q = new.pending(claiming("q", "gq"))
    assert await new.step() == "default/q"
    await new.settle()
    assert holders(api, "gpu-0") == ["default/gc"]  # not given twice
    assert new.s.book.stage("default/q") is Stage.PENDING and api.binds == []
    claim_seen(new, "gc")  # the watch catches up
    await past_commit(new)
    assert new.s.book.stage("default/p") is Stage.RELOADED
    while await new.step() is not None:
        pass
    await new.settle()
    assert [k for k, _, _ in api.binds] == ["default/p"]
    assert holders(api, "gpu-0") == ["default/gc"]
    claim = api.claim("gc")
    assert claim is not None and [c["uid"] for c in claim["status"]["reservedFor"]] == [p.uid]
    assert new.s.book.stage("default/q") is Stage.PENDING and q.key not in {
        k for k, _, _ in api.binds
    }


async def test_a_failed_binding_frees_the_device_for_the_next_pod(backend: Backend) -> None:
    """With the core's own allocator: p's Binding is refused, its claim is released, and q
    gets the device once the watch shows the claim free."""
    r = backend.live()
    r.api.add_claim("gc", ONE_GPU)
    r.api.add_claim("gq", ONE_GPU)
    dra_world(r)
    await r.elect([node(1)])
    r.pending(claiming("p", "gc"))
    r.api.refuse["default/p"] = 403
    assert await r.step() == "default/p"
    await r.settle()
    assert untouched(r.api, "gc") and r.s.book.stage("default/p") is Stage.PENDING
    claim_seen(r, "gc")
    r.pending(claiming("q", "gq"))
    assert await r.step() == "default/q"
    await r.settle()
    assert [k for k, _, _ in r.api.binds] == ["default/q"]
    assert holders(r.api, "gpu-0") == ["default/gq"]


async def test_a_gpu_pod_on_a_dra_only_node_gets_its_special_claim_created_and_allocated(
    backend: Backend,
) -> None:
    """With the core's own allocator: nvidia.com/gpu backed by a DeviceClass on a node that
    advertises none; the claim kube-scheduler would create is created, allocated and recorded
    on the pod, then the pod is bound."""
    r = backend.live()
    backed = msgspec.structs.replace(GPU_CLASS, extended_resource_name="nvidia.com/gpu")
    r.s.intake.replace(DEVICE_CLASSES, [backed])
    r.s.intake.replace(RESOURCE_SLICES, [GPU_SLICE])
    await r.elect([MakeNode().Name("n").NoGPUs().Allocatable({"cpu": "8"}).Obj()])  # none
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    assert await r.step() == "default/a"
    await r.settle()
    name = extended_claim_name("a", a.uid)
    key = f"default/{name}"
    assert r.api.writes == [f"create {key}", f"update {key}", f"status {key}", "bind default/a"]
    assert holders(r.api, "gpu-0") == [key]
    claim, mappings = r.api.extended["default/a"]
    assert claim == name and [(m.container, m.resource) for m in mappings] == [
        ("c0", "nvidia.com/gpu")
    ]


async def test_a_pod_whose_failed_binding_deleted_its_special_claim_gets_a_new_one(
    backend: Backend,
) -> None:
    """With the core's own allocator: the Binding refused, the special claim is deleted while
    the pod's status still names it (recorded before the Binding). Tried again, the pod gets
    the claim anew and binds (kube-scheduler looks the claim up by its owner and makes a new
    one when there is none), instead of "cannot schedule extended resource claim" for ever."""
    r = backend.live()
    backed = msgspec.structs.replace(GPU_CLASS, extended_resource_name="nvidia.com/gpu")
    r.s.intake.replace(DEVICE_CLASSES, [backed])
    r.s.intake.replace(RESOURCE_SLICES, [GPU_SLICE])
    await r.elect([MakeNode().Name("n").NoGPUs().Allocatable({"cpu": "8"}).Obj()])
    a = r.pending(MakePod().Name("a").Req(1).Obj())
    r.api.refuse["default/a"] = 403
    assert await r.step() == "default/a"
    await r.settle()
    name = extended_claim_name("a", a.uid)
    assert r.api.claims == {} and r.api.extended["default/a"][0] == name
    r.s.intake.pending_event("MODIFIED", r.api.pods["default/a"])  # its status, as watched
    del r.api.refuse["default/a"]
    backend.clock.now += 2  # past the backoff (1 s after a first failure)
    assert await r.step() == "default/a"
    await r.settle()
    assert r.s.book.stage("default/a") is not Stage.PENDING, r.api.unschedulable
    assert [k for k, _, _ in r.api.binds] == ["default/a"]
    assert holders(r.api, "gpu-0") == [f"default/{name}"]
