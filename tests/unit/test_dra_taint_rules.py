"""DeviceTaintRules (GA in v1.37), stepped through the core: a rule's taint keeps the devices its
selector matches from a claim that does not tolerate it, exactly as the same taint published in
the slice would (kube-scheduler's slice tracker patches rules into the slices its allocator
lists: dra/taintrules.py). Driver, pool and device name narrow the selector; no selector taints
nothing; the None effect, a toleration, or the rule's deletion leaves the devices usable."""

from __future__ import annotations

from msgspec.structs import replace

from scheduler.core.dra.taintrules import with_taint_rules
from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.model.dra import DeviceTaintRule, DeviceTaintSelector
from scheduler.core.model.objects import Taint, Toleration
from tests.builders import schedule
from tests.unit.test_dra_filter import DRIVER, claiming, devices, dra_cluster, gpu_claim, gpu_slice

XID = Taint("gpu.nvidia.com/xid", "NoSchedule", "79")


def rule(name: str, taint: Taint = XID, **selector: str) -> DeviceTaintRule:
    return DeviceTaintRule(name, taint, DeviceTaintSelector(**selector))


def test_a_rule_taints_the_devices_it_selects_and_only_those() -> None:
    slice_ = gpu_slice("a", 3)
    assert with_taint_rules(slice_, ()) is slice_
    assert with_taint_rules(slice_, (DeviceTaintRule("none", XID),)) is slice_  # no selector
    assert with_taint_rules(slice_, (rule("other", driver="other.example.com"),)) is slice_
    assert with_taint_rules(slice_, (rule("other-pool", pool="b"),)) is slice_
    assert with_taint_rules(slice_, (rule("no-device", device="gpu-9"),)) is slice_
    evict = Taint("example.com/drain", "NoExecute")
    patched = with_taint_rules(
        slice_, (rule("all"), rule("one", evict, driver=DRIVER, pool="a", device="gpu-1"))
    )
    assert [d.taints for d in patched.devices] == [(XID,), (XID, evict), (XID,)]
    # The driver's own taints stay first; the slice itself is not changed.
    own = Taint("gpu.nvidia.com/xid", "NoExecute", "48")
    published = replace(slice_, devices=(replace(slice_.devices[0], taints=(own,)),))
    assert with_taint_rules(published, (rule("all"),)).devices[0].taints == (own, XID)
    assert slice_.devices[0].taints == ()


def test_a_rule_keeps_its_devices_from_claims_until_tolerated_or_deleted() -> None:
    state = dra_cluster(("a", 2))
    rules = state.inputs.device_taint_rules
    claims = state.inputs.resource_claims
    # The pools are gathered before the rule arrives: the rule drops them.
    claims.put(gpu_claim("warm"))
    (warm,) = schedule(state, claiming("w", "warm"))
    assert devices(warm) == [("a", "gpu-0")]
    state.forget("default/w")

    rules.put(rule("gpu-0", device="gpu-0"))
    claims.put(gpu_claim("one"))
    (one,) = schedule(state, claiming("p", "one"))
    assert devices(one) == [("a", "gpu-1")]  # gpu-0 is tainted
    state.forget("default/p")

    claims.put(gpu_claim("two", 2))
    (two,) = schedule(state, claiming("q", "two"))
    assert isinstance(two, Unschedulable)
    assert two.reason == "0/1 nodes are available: 1 cannot allocate all claims."

    tolerant = gpu_claim("tolerant", 2)
    request = tolerant.requests[0]
    assert request.exactly is not None
    tolerations = (Toleration(key="gpu.nvidia.com/xid", operator="Exists"),)
    exactly = replace(request.exactly, tolerations=tolerations)
    claims.put(replace(tolerant, requests=(replace(request, exactly=exactly),)))
    (tolerated,) = schedule(state, claiming("r", "tolerant"))
    assert devices(tolerated) == [("a", "gpu-0"), ("a", "gpu-1")]
    state.forget("default/r")

    rules.remove("gpu-0")
    (freed,) = schedule(state, claiming("q", "two"))
    assert devices(freed) == [("a", "gpu-0"), ("a", "gpu-1")]


def test_effect_none_and_a_rule_without_selector_block_nothing() -> None:
    state = dra_cluster(("a", 1))
    state.inputs.device_taint_rules.put(rule("note", Taint("example.com/note", "None")))
    state.inputs.device_taint_rules.put(DeviceTaintRule("nothing", XID))
    state.inputs.resource_claims.put(gpu_claim("one"))
    (decision,) = schedule(state, claiming("p", "one"))
    assert isinstance(decision, Placed) and devices(decision) == [("a", "gpu-0")]
    # The same rule with a NoExecute effect: the device is kept from the claim.
    state.forget("default/p")
    state.inputs.device_taint_rules.put(rule("note", Taint("example.com/note", "NoExecute")))
    (refused,) = schedule(state, claiming("p", "one"))
    assert isinstance(refused, Unschedulable)
