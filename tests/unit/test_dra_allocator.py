"""The structured allocator, stepped by hand: kube-scheduler v1.37's rules (core/dra/allocator.py).

Without a GPU inventory or device locations no device maps to a GPU, so the allocator answers
kube-scheduler's first fit; these tests pin that behaviour. The choice by interconnect is in
test_dra_choice.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.dra.allocator import INVALID_POOLS, NO_SOLUTION, Outcome, allocate
from scheduler.core.dra.cel import Selectors
from scheduler.core.dra.inuse import InUse, in_use_from
from scheduler.core.model.dra import (
    ALL,
    FROM_CLAIM,
    FROM_CLASS,
    AllocatedConfig,
    Allocation,
    AttributeValue,
    CapacityRequestPolicy,
    ClaimConfig,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceCapacity,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceResult,
    ExactRequest,
    OpaqueConfig,
    ResourceClaim,
    ResourcePool,
    ResourceSlice,
    SubRequest,
)
from scheduler.core.model.objects import NodeSelectorTerm, Requirement, Taint, Toleration
from scheduler.core.settings import DraLimits

DRIVER = "gpu.example.com"
GPU_CLASS = DeviceClass(
    "gpu",
    selectors=(f"device.driver == '{DRIVER}'",),
    config=(OpaqueConfig(DRIVER, '{"sharing":"none"}'),),
)
CLASSES = {GPU_CLASS.name: GPU_CLASS}


def gpu(name: str, **attributes: AttributeValue) -> Device:
    return Device(name, attributes={"model": "a100", **attributes})


def node_slice(
    node: str = "n1",
    devices: Sequence[Device] = (),
    generation: int = 1,
    count: int = 1,
    name: str = "",
    pool: str = "",
    counters: Sequence[CounterSet] = (),
    **selection: object,
) -> ResourceSlice:
    placement: dict[str, object] = selection or {"node_name": node}
    return ResourceSlice(
        name or f"{node}-slice",
        DRIVER,
        ResourcePool(pool or node, generation, count),
        devices=tuple(devices),
        shared_counters=tuple(counters),
        **placement,  # type: ignore[arg-type]
    )


def gpus(n: int, node: str = "n1") -> ResourceSlice:
    return node_slice(node, [gpu(f"gpu-{i}") for i in range(n)])


def claim(*requests: DeviceRequest, name: str = "c", **spec: object) -> ResourceClaim:
    return ResourceClaim("default", name, uid=f"uid-{name}", requests=requests, **spec)  # type: ignore[arg-type]


def exactly(name: str = "req", count: int = 1, **fields: object) -> DeviceRequest:
    return DeviceRequest(name, exactly=ExactRequest("gpu", count=count, **fields))  # type: ignore[arg-type]


def run(
    claims: Sequence[ResourceClaim],
    slices: Sequence[ResourceSlice],
    in_use: InUse | None = None,
    node: str = "n1",
    labels: dict[str, str] | None = None,
    classes: dict[str, DeviceClass] | None = None,
    limits: DraLimits | None = None,
) -> Outcome:
    return allocate(
        claims,
        CLASSES if classes is None else classes,
        slices,
        in_use or InUse(),
        node,
        labels or {},
        Selectors(),
        limits=limits,
    )


def devices(outcome: Outcome, index: int = 0) -> list[str]:
    assert outcome.ok, outcome.reason
    return [r.device for r in outcome.allocations[index].results]


def allocated(c: ResourceClaim, outcome: Outcome, index: int = 0) -> ResourceClaim:
    return ResourceClaim(
        c.namespace, c.name, c.uid, c.requests, allocation=outcome.allocations[index]
    )


# ---- counts, modes, in use --------------------------------------------------------------


def test_exact_count_takes_the_first_devices_in_slice_order() -> None:
    outcome = run([claim(exactly(count=2))], [gpus(4)])
    assert devices(outcome) == ["gpu-0", "gpu-1"]
    result = outcome.allocations[0].results[0]
    assert (result.request, result.driver, result.pool) == ("req", DRIVER, "n1")
    # A node-local device pins the claim to the node.
    assert outcome.allocations[0].node_selector == (
        NodeSelectorTerm(match_fields=(Requirement("metadata.name", "In", ("n1",)),)),
    )


def test_too_few_devices_is_unschedulable_not_an_error() -> None:
    outcome = run([claim(exactly(count=5))], [gpus(4)])
    assert (outcome.reason, outcome.error) == (NO_SOLUTION, False)
    assert run([claim(exactly())], [gpus(4, node="n2")]).reason == NO_SOLUTION


def test_devices_held_by_any_claim_are_in_use() -> None:
    first = claim(exactly(count=3), name="first")
    outcome = run([first], [gpus(4)])
    in_use = in_use_from([allocated(first, outcome)])
    assert devices(run([claim(exactly())], [gpus(4)], in_use)) == ["gpu-3"]
    assert run([claim(exactly(count=2))], [gpus(4)], in_use).reason == NO_SOLUTION


def test_claims_of_one_pod_do_not_share_devices() -> None:
    outcome = run([claim(exactly(count=2), name="a"), claim(exactly(count=2), name="b")], [gpus(4)])
    assert devices(outcome, 0) == ["gpu-0", "gpu-1"]
    assert devices(outcome, 1) == ["gpu-2", "gpu-3"]


def test_all_takes_every_matching_device_and_fails_on_one_in_use() -> None:
    every = claim(exactly(allocation_mode=ALL))
    assert devices(run([every], [gpus(3)])) == ["gpu-0", "gpu-1", "gpu-2"]
    held = in_use_from([allocated(claim(exactly()), run([claim(exactly())], [gpus(3)]))])
    assert run([every], [gpus(3)], held).reason == NO_SOLUTION
    # No device at all: no solution either.
    assert run([every], [gpus(0)]).reason == NO_SOLUTION


def test_admin_access_takes_devices_in_use_and_holds_none() -> None:
    everything = run([claim(exactly(count=2))], [gpus(2)])
    held = in_use_from([allocated(claim(exactly(count=2)), everything)])
    admin = claim(exactly(count=2, admin_access=True))
    outcome = run([admin], [gpus(2)], held)
    assert devices(outcome) == ["gpu-0", "gpu-1"]
    assert all(r.admin_access for r in outcome.allocations[0].results)
    # Its allocation holds nothing.
    assert in_use_from([allocated(admin, outcome)]).exclusive == {}


# ---- pools -------------------------------------------------------------------------------


def test_only_the_newest_generation_counts_and_an_incomplete_pool_is_unused() -> None:
    old = node_slice(devices=[gpu("old")], generation=1, name="a")
    new = node_slice(devices=[gpu("new")], generation=2, name="b")
    assert devices(run([claim(exactly())], [old, new])) == ["new"]
    # Two slices announced, one published: the pool is incomplete.
    partial = node_slice(devices=[gpu("gpu-0")], count=2)
    assert run([claim(exactly())], [partial]).reason == NO_SOLUTION
    outcome = run([claim(exactly(allocation_mode=ALL))], [partial])
    assert outcome.error
    assert outcome.reason == (
        f"claim default/c, request req: asks for all devices, but resource pool {DRIVER}/n1 is "
        "currently being updated"
    )


def test_a_newer_generation_elsewhere_makes_the_nodes_slices_obsolete() -> None:
    here = node_slice(devices=[gpu("gpu-0")], generation=1, pool="shared", count=2, name="a")
    there = node_slice("n2", [gpu("gpu-9")], generation=2, pool="shared", count=2, name="b")
    assert run([claim(exactly())], [here, there]).reason == NO_SOLUTION


def test_an_invalid_pool_is_skipped_and_named_when_nothing_fits() -> None:
    broken = node_slice(devices=[gpu("same"), gpu("same")])
    assert run([claim(exactly())], [broken]).reason == INVALID_POOLS
    good = node_slice(devices=[gpu("ok")], pool="other", name="z")
    assert devices(run([claim(exactly())], [broken, good])) == ["ok"]


def test_network_attached_devices_carry_their_node_selector() -> None:
    rack = NodeSelectorTerm(match_expressions=(Requirement("rack", "In", ("r1",)),))
    attached = node_slice(devices=[gpu("net-0")], pool="fabric", node_selector=rack)
    outcome = run([claim(exactly())], [attached], labels={"rack": "r1"})
    assert outcome.allocations[0].node_selector == (rack,)
    assert run([claim(exactly())], [attached], labels={"rack": "r2"}).reason == NO_SOLUTION
    everywhere = node_slice(devices=[gpu("any-0")], pool="global", all_nodes=True)
    assert run([claim(exactly())], [everywhere]).allocations[0].node_selector is None


def test_per_device_node_selection() -> None:
    mixed = node_slice(
        devices=[
            Device("elsewhere", node_name="n2"),
            Device("here", node_name="n1"),
            Device("anywhere", all_nodes=True),
        ],
        pool="mixed",
        per_device_node_selection=True,
    )
    outcome = run([claim(exactly(count=2))], [mixed])
    assert devices(outcome) == ["here", "anywhere"]
    assert outcome.allocations[0].node_selector is not None


def test_pools_with_binding_conditions_come_last() -> None:
    bound = node_slice(
        devices=[Device("b-0", binding_conditions=("Attached",))], pool="a-bound", name="x"
    )
    plain = node_slice(devices=[gpu("p-0")], pool="z-plain", name="y")
    assert devices(run([claim(exactly())], [bound, plain])) == ["p-0"]
    outcome = run([claim(exactly(count=2))], [bound, plain])
    assert devices(outcome) == ["p-0", "b-0"]
    assert outcome.allocations[0].results[1].binding_conditions == ("Attached",)


# ---- selectors, classes, limits -----------------------------------------------------------


def test_selectors_of_class_and_request_both_apply() -> None:
    slice_ = node_slice(devices=[gpu("gpu-0", model="t4"), gpu("gpu-1", model="a100")])
    picky = claim(exactly(selectors=(f"device.attributes['{DRIVER}'].model == 'a100'",)))
    assert devices(run([picky], [slice_])) == ["gpu-1"]


def test_cel_errors_and_missing_classes_are_errors_with_kubernetes_wording() -> None:
    bad = claim(exactly(selectors=("device.attributes[",)))
    outcome = run([bad], [gpus(1)])
    assert outcome.error
    assert outcome.reason.startswith("claim default/c: selector #0: CEL compile error: ")
    missing = claim(exactly(selectors=(f"device.attributes['{DRIVER}'].nope == 1",)))
    outcome = run([missing], [gpus(1)])
    assert outcome.error
    assert outcome.reason.startswith(
        f"claim default/c: selector #0 on device {DRIVER}/n1/gpu-0: CEL runtime error: "
    )
    outcome = run([claim(exactly())], [gpus(1)], classes={})
    assert outcome.error
    assert outcome.reason == (
        "claim default/c, request req: could not retrieve device class gpu: "
        'deviceclass.resource.k8s.io "gpu" not found'
    )


def test_the_claim_limit_of_32_results() -> None:
    outcome = run([claim(exactly(count=33))], [gpus(40)])
    assert outcome.error and "exceeds the claim limit of 32" in outcome.reason


def test_a_spent_budget_refuses_the_node() -> None:
    outcome = run([claim(exactly(count=3))], [gpus(8)], limits=DraLimits(steps=2))
    assert outcome.error and "timed out trying to allocate devices" in outcome.reason


# ---- firstAvailable and constraints --------------------------------------------------------


def first_available(*subs: tuple[str, int, tuple[str, ...]]) -> DeviceRequest:
    return DeviceRequest(
        "req",
        first_available=tuple(
            SubRequest(name, ExactRequest("gpu", selectors=selectors, count=count))
            for name, count, selectors in subs
        ),
    )


def test_first_available_takes_the_first_subrequest_that_fits_everything() -> None:
    big = first_available(("eight", 8, ()), ("two", 2, ()), ("one", 1, ()))
    outcome = run([claim(big)], [gpus(4)])
    assert devices(outcome) == ["gpu-0", "gpu-1"]
    assert {r.request for r in outcome.allocations[0].results} == {"req/two"}
    # A later request decides: "two" would leave nothing for "rest".
    rest = exactly("rest", count=2)
    outcome = run([claim(big, rest)], [gpus(3)])
    assert [r.request for r in outcome.allocations[0].results] == ["req/one", "rest", "rest"]


def test_match_attribute_keeps_devices_on_one_value() -> None:
    slice_ = node_slice(
        devices=[gpu("a0", nvlink="a"), gpu("b0", nvlink="b"), gpu("b1", nvlink="b")]
    )
    same = claim(
        exactly(count=2), constraints=(DeviceConstraint(match_attribute=f"{DRIVER}/nvlink"),)
    )
    assert devices(run([same], [slice_])) == ["b0", "b1"]
    # A device without the attribute breaks the constraint.
    lacking = node_slice(devices=[gpu("x"), gpu("y")])
    assert run([same], [lacking]).reason == NO_SOLUTION


def test_match_attribute_on_all_devices_is_an_error_when_it_breaks() -> None:
    slice_ = node_slice(devices=[gpu("a0", nvlink="a"), gpu("b0", nvlink="b")])
    every = claim(
        exactly(allocation_mode=ALL),
        constraints=(DeviceConstraint(match_attribute=f"{DRIVER}/nvlink"),),
    )
    outcome = run([every], [slice_])
    assert outcome.error and "a claim constraint would not be satisfied" in outcome.reason


def test_distinct_attribute_across_requests() -> None:
    slice_ = node_slice(
        devices=[gpu("a0", numa=0), gpu("a1", numa=0), gpu("b0", numa=1), gpu("b1", numa=1)]
    )
    spread = claim(
        exactly("x"),
        exactly("y"),
        constraints=(DeviceConstraint(requests=("x", "y"), distinct_attribute=f"{DRIVER}/numa"),),
    )
    assert devices(run([spread], [slice_])) == ["a0", "b0"]


# ---- taints, counters, consumable capacity --------------------------------------------------


def test_taints_need_tolerations_but_effect_none_does_not() -> None:
    sick = Taint("health", "NoSchedule", "bad")
    noted = Taint("note", "None")
    slice_ = node_slice(devices=[Device("sick", taints=(sick,)), Device("noted", taints=(noted,))])
    assert devices(run([claim(exactly())], [slice_])) == ["noted"]
    tolerant = exactly(tolerations=(Toleration("health", "Equal", "bad", "NoSchedule"),))
    outcome = run([claim(tolerant)], [slice_])
    assert devices(outcome) == ["sick"]
    assert outcome.allocations[0].results[0].tolerations == (
        Toleration("health", "Equal", "bad", "NoSchedule"),
    )


def partitioned(node: str = "n1") -> list[ResourceSlice]:
    """One GPU of 4 memory slices, published as the whole GPU and two halves."""
    counters = node_slice(
        node, name="counters", count=2, counters=[CounterSet("gpu-0-counters", {"memory": "4"})]
    )

    def part(name: str, slices: int) -> Device:
        return Device(
            name, consumes_counters=(CounterConsumption("gpu-0-counters", {"memory": str(slices)}),)
        )

    devices_ = node_slice(
        node,
        [part("gpu-0", 4), part("gpu-0-half-0", 2), part("gpu-0-half-1", 2)],
        name="devices",
        count=2,
    )
    return [counters, devices_]


def test_shared_counters_partition_a_device() -> None:
    outcome = run([claim(exactly(count=2))], partitioned())
    assert devices(outcome) == ["gpu-0-half-0", "gpu-0-half-1"]
    whole = claim(exactly(), name="whole")
    held = in_use_from([allocated(whole, run([whole], partitioned()))])
    assert run([claim(exactly())], partitioned(), held).reason == NO_SOLUTION
    half = claim(exactly(selectors=(f"device.attributes['{DRIVER}'].?x.orValue(1) == 1",)))
    one_half = run([half], partitioned(), held)
    assert one_half.reason == NO_SOLUTION


def shared_nic() -> ResourceSlice:
    policy = CapacityRequestPolicy(default="1Gi", valid_min="1Gi", valid_step="1Gi")
    nic = Device(
        "nic-0",
        capacity={"bandwidth": DeviceCapacity("10Gi", policy)},
        allow_multiple_allocations=True,
    )
    return node_slice(devices=[nic])


def test_consumable_capacity_shares_one_device() -> None:
    want = exactly(capacity={"bandwidth": "1.5Gi"})
    outcome = run([claim(want)], [shared_nic()])
    result = outcome.allocations[0].results[0]
    assert result.consumed_capacity == {"bandwidth": str(2 * 2**30)}
    assert result.share_id  # deterministic, from the claim and the device
    assert run([claim(want)], [shared_nic()]).allocations[0].results[0].share_id == result.share_id
    # Two requests of one claim can share the device too; the default takes 1Gi each.
    outcome = run([claim(exactly("a"), exactly("b"))], [shared_nic()])
    assert devices(outcome) == ["nic-0", "nic-0"]
    # What other claims' shares took counts.
    heavy = claim(exactly(capacity={"bandwidth": "9Gi"}), name="heavy")
    held = in_use_from([allocated(heavy, run([heavy], [shared_nic()]))])
    assert devices(run([claim(exactly())], [shared_nic()], held)) == ["nic-0"]
    assert run([claim(want)], [shared_nic()], held).reason == NO_SOLUTION
    # A capacity the device lacks does not fit.
    assert run([claim(exactly(capacity={"memory": "1"}))], [shared_nic()]).reason == NO_SOLUTION


def test_capacity_requests_on_an_exclusive_device_must_fit() -> None:
    slice_ = node_slice(
        devices=[
            Device("small", capacity={"memory": DeviceCapacity("40Gi")}),
            Device("large", capacity={"memory": DeviceCapacity("80Gi")}),
        ]
    )
    outcome = run([claim(exactly(capacity={"memory": "60Gi"}))], [slice_])
    assert devices(outcome) == ["large"]
    assert outcome.allocations[0].results[0].share_id == ""


# ---- the result -------------------------------------------------------------------------------


def test_class_and_claim_config_are_carried_into_the_result() -> None:
    spec = OpaqueConfig(DRIVER, '{"mode":"mps"}')
    c = claim(
        exactly("a"),
        exactly("b"),
        config=(ClaimConfig(("a",), spec), ClaimConfig(("a", "b"), spec)),
    )
    outcome = run([c], [gpus(2)])
    assert outcome.allocations[0].config == (
        # One class config for both requests: it covers all, so its request list is cleared.
        AllocatedConfig(FROM_CLASS, (), GPU_CLASS.config[0]),
        AllocatedConfig(FROM_CLAIM, ("a",), spec),
        AllocatedConfig(FROM_CLAIM, (), spec),
    )


def test_the_allocation_has_the_v1_shape() -> None:
    outcome = run([claim(exactly())], [gpus(1)])
    assert outcome.allocations[0] == Allocation(
        results=(DeviceResult("req", DRIVER, "n1", "gpu-0"),),
        config=outcome.allocations[0].config,
        node_selector=outcome.allocations[0].node_selector,
    )


def test_a_huge_slice_gets_a_bounded_refusal() -> None:
    huge = node_slice(devices=[gpu(f"gpu-{i}") for i in range(10_000)])
    picky = claim(exactly(selectors=(f"device.attributes['{DRIVER}'].model == 'h200'",)))
    outcome = run([picky], [huge], limits=DraLimits(evaluations=500))
    assert outcome.error and "timed out trying to allocate devices" in outcome.reason
    # Within the budget, a device far down the slice is found.
    last = node_slice(devices=[*huge.devices[:2000], gpu("wanted", model="h200")])
    assert devices(run([picky], [last])) == ["wanted"]


def test_a_device_toleration_with_no_key_compares_values() -> None:
    slice_ = node_slice(devices=[Device("sick", taints=(Taint("health", "NoExecute", "xid"),))])
    any_key = exactly(tolerations=(Toleration("", "Equal", "xid", ""),))
    assert devices(run([claim(any_key)], [slice_])) == ["sick"]
    other_value = exactly(tolerations=(Toleration("", "Equal", "ecc", ""),))
    assert run([claim(other_value)], [slice_]).reason == NO_SOLUTION


def test_a_malformed_counter_makes_the_pool_invalid_not_the_allocator_fail() -> None:
    counters, devices_ = partitioned()
    broken = Device(
        "gpu-0", consumes_counters=(CounterConsumption("gpu-0-counters", {"memory": "lots"}),)
    )
    bad = ResourceSlice(devices_.name, DRIVER, devices_.pool, node_name="n1", devices=(broken,))
    held = InUse()
    held.exclusive[(DRIVER, "n1", "gpu-0")] = 1
    assert run([claim(exactly())], [counters, bad], held).reason == INVALID_POOLS


def test_first_available_moves_on_when_a_subrequest_overflows_the_claim_limit() -> None:
    request = first_available(("many", 20, ()), ("few", 2, ()))
    c = claim(exactly("first", count=20), request)
    outcome = run([c], [gpus(40)])
    assert [r.request for r in outcome.allocations[0].results][-2:] == ["req/few", "req/few"]
    assert len(outcome.allocations[0].results) == 22


def test_counters_held_through_a_slice_of_another_node_count() -> None:
    """A pool shared by two nodes (per-device node selection): a device of node n2 allocated
    elsewhere takes counters node n1's device needs."""
    shared = CounterSet("link", {"lanes": "4"})

    def lanes(name: str, node: str) -> Device:
        return Device(
            name,
            node_name=node,
            consumes_counters=(CounterConsumption("link", {"lanes": "3"}),),
        )

    fabric = [
        node_slice(name="counters", pool="fabric", count=2, counters=[shared], all_nodes=True),
        node_slice(
            name="devices",
            pool="fabric",
            count=2,
            devices=[lanes("on-n1", "n1"), lanes("on-n2", "n2")],
            per_device_node_selection=True,
        ),
    ]
    assert devices(run([claim(exactly())], fabric)) == ["on-n1"]
    held = InUse()
    held.exclusive[(DRIVER, "fabric", "on-n2")] = 1
    assert run([claim(exactly())], fabric, held).reason == NO_SOLUTION
