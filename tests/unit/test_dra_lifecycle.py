"""DRA through the live scheduler's own parts (issue 20's small item, issue 25's DRA rule): a
pod whose ResourceClaim nobody allocated is never bound and says why; a pod whose claim is
allocated is reserved on the claim, then bound to a node the allocation reaches."""

from __future__ import annotations

from msgspec.structs import replace

from scheduler.core.model.dra import Allocation, DeviceRequest, ExactRequest, ResourceClaim
from scheduler.core.model.objects import NodeSelectorTerm, PodClaim, Requirement
from scheduler.core.snapshot.watched import RESOURCE_CLAIMS
from scheduler.state.memory import MemoryStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica, node


def live() -> Replica:
    clock = ManualClock(0.0)
    return Replica(Apiserver(), MemoryStore(clock), clock, tuning=QUICK_RETRIES)


def claimed(name: str) -> object:
    pod = MakePod().Name(name).Req(1).Obj()
    return replace(pod, resource_claims=(PodClaim("net", "nic"),))


async def test_a_claim_that_cannot_be_allocated_keeps_the_pod_pending_and_unbound() -> None:
    r = live()
    await r.elect([node(1)])
    nic = DeviceRequest("nic", ExactRequest("nic.example.com"))
    r.s.intake.replace(RESOURCE_CLAIMS, [ResourceClaim("default", "nic", "c1", (nic,))])
    r.pending(claimed("p"))  # type: ignore[arg-type]
    assert await r.step() == "default/p"
    await r.settle()
    assert r.api.binds == [] and r.api.reserved == []
    explained = r.s.explain("default/p")
    assert explained is not None and explained.result == "unschedulable"
    assert "device class nic.example.com does not exist" in str(explained.reason)


async def test_an_allocated_claim_is_reserved_for_the_pod_before_its_binding() -> None:
    r = live()
    await r.elect([node(1)])
    here = (NodeSelectorTerm(match_fields=(Requirement("metadata.name", "In", ("n",)),)),)
    claim = ResourceClaim("default", "nic", "c1", allocation=Allocation(node_selector=here))
    r.s.intake.replace(RESOURCE_CLAIMS, [claim])
    pod = r.pending(claimed("p"))  # type: ignore[arg-type]
    assert await r.step() == "default/p"
    await r.settle()
    assert r.api.reserved == [("default/nic", pod.uid)]
    assert r.api.binds == [("default/p", "n", "0")]
