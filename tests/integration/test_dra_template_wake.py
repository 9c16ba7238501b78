"""A pod whose ResourceClaim comes from a ResourceClaimTemplate: the reason it shows follows its
decisions, whichever of the resourceclaim controller's two writes (the claim's creation, the
pod's ``status.resourceClaimStatuses``) the watches deliver first.

The e2e's ``consumable-what-is-left-is-short`` probe (a loaded machine) stayed 30 s showing
"waiting for the ResourceClaim of template ... to be created" while its status named the claim.
The pod was not lost: every order of the claim's ADDED, the pod's update and the attempts wakes it
(``test_either_order_decides_the_pod_afresh``). What was lost was the report: each decision's
PodScheduled=False write was its own task, so a slow first write (the template's wait) landed
after the second decision's and stayed, and a refused write was never made again (the book
remembered the reason as written). Stepped by hand on BOTH stores (the ``backend`` fixture of
test_pod_lifecycle.py) against the fake apiserver of tests/lifecycle.py.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from scheduler.core.model.objects import PodClaim, PodInput
from scheduler.core.snapshot.watched import RESOURCE_CLAIMS
from scheduler.kube.dracodec import convert_resource_claim
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_pod_lifecycle import Backend
from tests.lifecycle import Replica, node

redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend

KEY = "default/a"
CLAIM = "a-c0-x"  # the claim the resourceclaim controller makes from the template
# It asks for a DeviceClass nobody made: decided, the pod stays pending with another reason.
REQUESTS = [{"name": "gpu", "exactly": {"deviceClassName": "missing.example.com"}}]


def from_template(r: Replica) -> PodInput:
    pod = MakePod().Name("a").Obj()
    return r.pending(msgspec.structs.replace(pod, resource_claims=(PodClaim("c0", "", "tmpl"),)))


def claim_added(r: Replica) -> None:
    """The resourceclaim controller created the claim; its watch delivers it."""
    r.s.intake.event(
        RESOURCE_CLAIMS, "ADDED", convert_resource_claim(r.api.add_claim(CLAIM, REQUESTS))
    )


def status_updated(r: Replica, pod: PodInput) -> None:
    """The controller recorded the claim in the pod's status; the pending watch delivers it."""
    named = msgspec.structs.replace(pod, resource_claims=(PodClaim("c0", CLAIM, "tmpl"),))
    named = r.api.pods[KEY] = r.api.stamp(named)
    r.s.intake.pending_event("MODIFIED", named)


def reason(r: Replica) -> str:
    entry = r.s.book.get(KEY)
    assert entry is not None and entry.explanation is not None
    return entry.explanation.reason


async def decided_afresh(r: Replica) -> None:
    """Turns of the loop (its backoff waited out) until the pod's reason is no longer the
    template's wait."""
    for _ in range(10):
        r.clock.now += 1.0
        await r.renew()
        await r.step()
        if "to be created" not in reason(r):
            return
    raise AssertionError(f"never decided afresh: {reason(r)}")


@pytest.mark.parametrize("claim_first", [True, False], ids=["claim-first", "status-first"])
async def test_either_order_decides_the_pod_afresh(backend: Backend, claim_first: bool) -> None:
    r = backend.live()
    await r.elect([node(1)])
    pod = from_template(r)
    await r.step()
    assert "waiting for the ResourceClaim of template tmpl to be created" in reason(r)
    if claim_first:
        claim_added(r)
        status_updated(r, pod)
    else:
        status_updated(r, pod)
        await r.step()  # decided before the claim is in: it waits for the claim by its name
        assert f'waiting for resourceclaim "{CLAIM}" to be created' in reason(r)
        claim_added(r)
    await decided_afresh(r)
    await r.settle()
    assert r.api.unschedulable[KEY] == reason(r)


@pytest.mark.parametrize("claim_first", [True, False], ids=["claim-first", "status-first"])
async def test_a_slow_first_report_does_not_outlast_the_next_decision(
    backend: Backend, claim_first: bool
) -> None:
    r = backend.live()
    await r.elect([node(1)])
    pod = from_template(r)
    slow = r.api.status_gates[KEY] = asyncio.Event()
    await r.step()  # its report (the template's wait) is slow to land
    await asyncio.sleep(0)
    if claim_first:
        claim_added(r)
        status_updated(r, pod)
    else:
        status_updated(r, pod)
        claim_added(r)
    await decided_afresh(r)
    for _ in range(5):
        await asyncio.sleep(0)  # the next decision's report, had it been sent, lands first
    slow.set()
    await r.settle()
    assert r.api.unschedulable[KEY] == reason(r)


async def test_a_refused_report_is_written_at_the_next_decision(backend: Backend) -> None:
    r = backend.live()
    await r.elect([node(1)])
    pod = from_template(r)
    await r.step()
    await r.settle()
    claim_added(r)
    status_updated(r, pod)
    r.api.refuse_status.add(KEY)
    await decided_afresh(r)
    await r.settle()
    assert "to be created" in r.api.unschedulable[KEY]  # refused: the template's wait stays
    r.api.refuse_status.clear()
    r.s.intake.node_event("MODIFIED", node(2))  # something changed: the pod is tried again
    r.clock.now += 10.0
    await r.renew()
    assert await r.step() == KEY
    await r.settle()
    assert r.api.unschedulable[KEY] == reason(r)
