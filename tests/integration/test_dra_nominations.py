"""Issue 29 item 6: a preemptor's nomination holds the DRA devices its plan allocates, in the
live scheduler and across a failover. Stepped by hand on BOTH stores (the ``backend`` fixture of
test_pod_lifecycle.py) against the fake apiserver of tests/lifecycle.py.

A low-priority pod's claim holds the one device (gpu-0 of node n); a high-priority pod whose
claim needs it evicts the low one and is nominated. The leader dies while the victim
terminates; the next one reloads the nomination from the store. Once the victim is gone and its
claim's allocation cleared, a pod of lower priority than the preemptor asking for the device
must not take it first (the preemptor would evict again): the preemptor gets it. A preemptor of
higher priority planning over a lower nomination's device ends that nomination.
"""

from __future__ import annotations

import msgspec

from scheduler.core.model.objects import PodClaim, PodInput
from scheduler.service.podbook import Stage
from tests.builders import MakePod
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_dra_binding import ONE_GPU, RESULT, claim_seen, dra_world, holders
from tests.integration.test_pod_lifecycle import Backend, run
from tests.lifecycle import Apiserver, node

redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend


def with_claim(pod: MakePod, claim: str) -> PodInput:
    return msgspec.structs.replace(pod.Obj(), resource_claims=(PodClaim("gpu", claim),))


def allocated_to(api: Apiserver, claim: str, pod: PodInput) -> None:
    """The claim holds gpu-0 for ``pod`` (another scheduler allocated it)."""
    api.claims[f"default/{claim}"]["status"] = {
        "allocation": {"devices": {"results": [RESULT]}},
        "reservedFor": [{"resource": "pods", "name": pod.name, "uid": pod.uid}],
    }


async def test_a_reloaded_nomination_keeps_its_device_from_a_lower_pod(backend: Backend) -> None:
    api = Apiserver()
    for name in ("gv", "gc", "gq"):
        api.add_claim(name, ONE_GPU)
    low = api.create(with_claim(MakePod().Name("v").Priority(1).Bound("n"), "gv"))
    allocated_to(api, "gv", low)
    old = backend.replica(api, "old")
    dra_world(old)
    claim_seen(old, "gv")
    await old.elect([node(1)], [low])
    p = old.pending(with_claim(MakePod().Name("p").Priority(1000), "gc"))
    await run(old)
    assert api.evictions == ["default/v"] and api.nominated == {"default/p": "n"}

    # The old leader dies while v terminates; the new one reloads p's nomination.
    await old.store.release_lease("old", old.leadership.epoch or 0)
    old.s.accepting = False
    new = backend.replica(api, "new")
    dra_world(new)
    claim_seen(new, "gv")
    new.s.intake.pending_event("ADDED", msgspec.structs.replace(p, nominated_node="n"))
    await new.elect([node(1)], [api.pods["default/v"]])
    await new.settle()
    assert set(new.s.state.nominations) == {"default/p"}
    await run(new)  # p waits for its victim

    # v's claim lets gpu-0 go (v still terminating); q (priority 500) asks for a device of the
    # class before p is tried again.
    api.claims["default/gv"].pop("status")
    claim_seen(new, "gv")
    new.pending(with_claim(MakePod().Name("q").Priority(500), "gq"))
    assert await new.step() == "default/q"
    await new.settle()
    assert holders(api, "gpu-0") == [] and api.binds == []
    assert new.s.book.stage("default/q") is Stage.PENDING
    assert "cannot allocate all claims" in api.unschedulable["default/q"]

    # v goes: p is tried again and gets gpu-0.
    new.s.intake.bound_event("DELETED", api.delete("default/v"))
    await new.settle()
    await run(new)
    assert [k for k, _, _ in api.binds] == ["default/p"]
    assert holders(api, "gpu-0") == ["default/gc"]


async def test_a_preemptor_planning_over_a_lower_nominations_device_ends_it(
    backend: Backend,
) -> None:
    """mid (priority 500) is nominated for v's device; while v terminates, high (priority 1000)
    plans for the same device: mid's nomination is over (kube-scheduler clears the lower
    nominations it plans over), so it holds the device for nobody once high has it."""
    api = Apiserver()
    for name in ("gv", "gc", "gq"):
        api.add_claim(name, ONE_GPU)
    low = api.create(with_claim(MakePod().Name("v").Priority(1).Bound("n"), "gv"))
    allocated_to(api, "gv", low)
    r = backend.replica(api, "a")
    dra_world(r)
    claim_seen(r, "gv")
    await r.elect([node(1)], [low])
    r.pending(with_claim(MakePod().Name("mid").Priority(500), "gc"))
    await run(r)
    assert api.evictions == ["default/v"] and api.nominated == {"default/mid": "n"}
    r.s.intake.bound_event("MODIFIED", api.pods["default/v"])  # v terminates (slowly)
    r.pending(with_claim(MakePod().Name("high").Priority(1000), "gq"))
    await run(r)
    assert api.nominated == {"default/high": "n"}
    assert set(r.s.state.nominations) == {"default/high"}
    assert [n.pod for n in (await r.store.nominations(0)).values()] == ["default/high"]
