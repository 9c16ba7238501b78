"""Issue 29: a DeviceTaintRule, as the live scheduler's watch delivers it, keeps the devices it
selects from a claim that does not tolerate them, as kube-scheduler's allocator (which lists the
slices with the rules' taints patched in) does; the rule's deletion frees them, and the pod that
waited on them is tried again and bound. Stepped on BOTH stores (the ``backend`` fixture of
test_pod_lifecycle.py) against the fake apiserver of tests/lifecycle.py.
"""

from __future__ import annotations

from scheduler.core.model.dra import DeviceTaintRule, DeviceTaintSelector
from scheduler.core.model.objects import Taint
from scheduler.core.snapshot.watched import DEVICE_TAINT_RULES
from scheduler.service.podbook import Stage
from tests.integration import test_pod_lifecycle as lifecycle_tests
from tests.integration.test_dra_binding import ONE_GPU, claiming, dra_world, holders
from tests.integration.test_pod_lifecycle import Backend
from tests.lifecycle import node

redis_url = lifecycle_tests.redis_url
backend = lifecycle_tests.backend

DRAIN = DeviceTaintRule(
    "drain",
    Taint("example.com/drain", "NoSchedule"),
    DeviceTaintSelector("gpu.example.com", "n", "gpu-0"),
)


async def test_a_device_a_rule_taints_is_not_allocated_until_the_rule_goes(
    backend: Backend,
) -> None:
    r = backend.live()
    r.api.add_claim("gc", ONE_GPU)
    r.api.add_claim("gq", ONE_GPU)
    dra_world(r)  # the class, the slice (gpu-0 of node n), the claims
    r.s.intake.event(DEVICE_TAINT_RULES, "ADDED", DRAIN)
    await r.elect([node(1)])
    r.pending(claiming("p", "gc"))
    assert await r.step() == "default/p"
    await r.settle()
    assert r.api.binds == [] and holders(r.api, "gpu-0") == []
    assert r.s.book.stage("default/p") is Stage.PENDING
    assert "cannot allocate all claims" in r.api.unschedulable["default/p"]
    # The rule deleted: the pod is tried again and gets the device.
    r.s.intake.event(DEVICE_TAINT_RULES, "DELETED", DRAIN)
    backend.clock.now += 2  # past the backoff (1 s after a first failure)
    assert await r.step() == "default/p"
    await r.settle()
    assert [k for k, _, _ in r.api.binds] == ["default/p"]
    assert holders(r.api, "gpu-0") == ["default/gc"]
