"""Preemption through devices (issue 29 item 6), stepped by hand: a preemptor whose claims need
devices evicts the pods whose claims hold them; the dry run counts a victim's devices free, the
snapshot only once its claim's allocation is gone; a claim shared with a pod that stays is never
freed."""

from __future__ import annotations

from msgspec.structs import replace

from scheduler.core.cycle import Unit, decide, group_units
from scheduler.core.model.decisions import Placed, Unschedulable
from scheduler.core.model.dra import (
    Allocation,
    Device,
    DeviceClass,
    DeviceRequest,
    DeviceResult,
    ExactRequest,
    ResourceClaim,
    ResourcePool,
    ResourceSlice,
)
from scheduler.core.model.objects import PodClaim, PodInput
from scheduler.core.preemption.preempt import NoPreemption, Preemption, preempt
from scheduler.core.snapshot.cluster import ClusterState
from tests.builders import MakeNode, MakePod, cluster

DRIVER = "gpu.nvidia.com"
HIGH, LOW = 1000, 1
# Eight GPUs whose NVLink pairs are four apart (i and i^4).
LINKS = [["X" if i == j else "NV4" if i ^ 4 == j else "SYS" for j in range(8)] for i in range(8)]


def claim(name: str, count: int, held: tuple[int, ...] = (), *consumers: str) -> ResourceClaim:
    request = DeviceRequest("gpu", ExactRequest(DRIVER, count=count))
    out = ResourceClaim("default", name, f"uid-{name}", (request,))
    if held:
        results = tuple(DeviceResult("gpu", DRIVER, "a", f"gpu-{i}") for i in held)
        out = replace(
            out,
            allocation=Allocation(results=results),
            reserved_for=tuple(f"uid-default-{c}" for c in consumers),
        )
    return out


def with_claims(pod: MakePod, *claims: str) -> PodInput:
    obj = pod.Obj()
    return replace(obj, resource_claims=tuple(PodClaim(f"c{i}", c) for i, c in enumerate(claims)))


def node_a(*running: PodInput, claims: tuple[ResourceClaim, ...] = ()) -> ClusterState:
    state: ClusterState = cluster(MakeNode().Name("a").Links(LINKS), running=running)
    state.inputs.device_classes.put(DeviceClass(DRIVER, (f"device.driver == '{DRIVER}'",)))
    gpus = tuple(Device(f"gpu-{i}", attributes={"uuid": f"GPU-a-{i}"}) for i in range(8))
    state.inputs.resource_slices.put(
        ResourceSlice("a-gpus", DRIVER, ResourcePool("a", 1, 1), "a", devices=gpus)
    )
    for c in claims:
        state.inputs.resource_claims.put(c)
    return state


def unit_of(pod: PodInput) -> Unit:
    (unit,) = group_units([pod])
    return unit


def in_use(state: ClusterState) -> dict[object, object]:
    return dict(state.devices.in_use.exclusive)


def preemptor(state: ClusterState) -> PodInput:
    state.inputs.resource_claims.put(claim("mine", 2))
    return with_claims(MakePod().Name("high").Priority(HIGH), "mine")


def test_a_preemptor_needing_devices_evicts_the_pod_whose_claim_holds_them() -> None:
    """Six GPUs held by a low-priority pod's claim, two by a high one's: a pod asking for an
    NVLink pair fits only once the low pod's claim lets go. Its devices count free only in the
    dry run: the snapshot is left as it was, and after the eviction the preemptor waits for the
    claim's allocation to go, evicting nothing more, then lands on an NVLink pair."""
    low = with_claims(MakePod().Name("low").Priority(LOW).Bound("a"), "theirs")
    keep = with_claims(MakePod().Name("keep").Priority(HIGH).Bound("a"), "kept")
    theirs = claim("theirs", 6, (0, 1, 2, 4, 5, 6), "low")
    kept = claim("kept", 2, (3, 7), "keep")
    state = node_a(low, keep, claims=(theirs, kept))
    pod = preemptor(state)
    refused = decide(state, unit_of(pod))
    assert isinstance(refused, Unschedulable) and "cannot allocate all claims" in refused.reason
    before = in_use(state)

    result = preempt(state, unit_of(pod))
    assert isinstance(result, Preemption), result
    assert [v.pod for v in result.victims] == ["default/low"]
    (placement,) = result.placements
    (allocated,) = placement.claims
    pair = sorted(int(r.device.removeprefix("gpu-")) for r in allocated.allocation.results)
    assert placement.node == "a" and pair[1] == pair[0] ^ 4  # an NVLink pair of the freed six
    assert "and 2 claimed device(s)" in result.summary
    assert in_use(state) == before  # the dry run lifted nothing for good

    # Evicted: the pod terminates, its claim still allocated. Its devices are not free yet,
    # and preempting again evicts nothing: the room is coming.
    going = node_a(replace(low, deleting=True), keep, claims=(theirs, kept, claim("mine", 2)))
    assert not isinstance(decide(going, unit_of(pod)), Placed)
    again = preempt(going, unit_of(pod))
    assert isinstance(again, Preemption) and again.victims == ()
    assert again.waiting_for == ("default/low",)

    # The claim's allocation cleared (the pod gone): the devices are free for the preemptor.
    gone = node_a(keep, claims=(claim("theirs", 6), kept, claim("mine", 2)))
    placed = decide(gone, unit_of(pod))
    assert isinstance(placed, Placed), placed
    (claims,) = [p.claims for p in placed.placements]
    assert sorted(r.device for r in claims[0].allocation.results) in (
        [f"gpu-{i}", f"gpu-{i + 4}"] for i in (0, 1, 2)
    )


def test_a_claim_shared_with_a_pod_that_stays_is_never_freed() -> None:
    """The low pod's devices are in a claim a high-priority pod shares: evicting it frees
    nothing, so there is no preemption."""
    low = with_claims(MakePod().Name("low").Priority(LOW).Bound("a"), "shared")
    keep = with_claims(MakePod().Name("keep").Priority(HIGH).Bound("a"), "shared")
    shared = claim("shared", 8, tuple(range(8)), "low", "keep")
    state = node_a(low, keep, claims=(shared,))
    pod = preemptor(state)
    result = preempt(state, unit_of(pod))
    assert isinstance(result, NoPreemption), result
    assert "no node where evicting pods of lower priority than 1000 makes room" in result.reason


def test_a_gang_needing_devices_evicts_a_lone_pod_for_them() -> None:
    """A gang of two members of an NVLink pair each, on a node where a low pod's claim holds
    six GPUs: the low pod goes, the gang gets two pairs."""
    low = with_claims(MakePod().Name("low").Priority(LOW).Bound("a"), "theirs")
    state = node_a(low, claims=(claim("theirs", 6, (0, 1, 2, 4, 5, 6), "low"),))
    members = []
    for i in range(2):
        state.inputs.resource_claims.put(claim(f"pair-{i}", 2))
        members.append(
            with_claims(MakePod().Name(f"w{i}").Priority(HIGH).Gang("job", 2), f"pair-{i}")
        )
    (unit,) = group_units(members)
    assert not isinstance(decide(state, unit), Placed)
    result = preempt(state, unit)
    assert isinstance(result, Preemption), result
    assert [v.pod for v in result.victims] == ["default/low"]
    pairs = sorted(
        tuple(
            sorted(
                int(r.device.removeprefix("gpu-")) for c in p.claims for r in c.allocation.results
            )
        )
        for p in result.placements
    )
    assert len(pairs) == 2 and all(b == a ^ 4 for a, b in pairs)


def nominated_for_pair() -> tuple[ClusterState, PodInput, Preemption]:
    """A low pod's claim holds the NVLink pair 0/4, a high one's the other six GPUs: the
    preemptor of a pair evicts the low pod and is nominated for its pair. The victim then goes
    and its claim's allocation is cleared."""
    low = with_claims(MakePod().Name("low").Priority(LOW).Bound("a"), "theirs")
    keep = with_claims(MakePod().Name("keep").Priority(HIGH).Bound("a"), "kept")
    kept = claim("kept", 6, (1, 2, 3, 5, 6, 7), "keep")
    state = node_a(low, keep, claims=(claim("theirs", 2, (0, 4), "low"), kept))
    pod = preemptor(state)
    result = preempt(state, unit_of(pod))
    assert isinstance(result, Preemption), result
    assert [v.pod for v in result.victims] == ["default/low"]
    (nomination,) = result.nominations
    assert [sorted(r.device for r in a.results) for a in nomination.allocations] == [
        ["gpu-0", "gpu-4"]
    ]
    state.nominate(nomination)
    state.remove_pod("default/low")
    state.inputs.resource_claims.put(claim("theirs", 2))
    return state, pod, result


def rival(state: ClusterState, name: str, priority: int) -> PodInput:
    state.inputs.resource_claims.put(claim(f"{name}-pair", 2))
    return with_claims(MakePod().Name(name).Priority(priority), f"{name}-pair")


def test_a_nomination_holds_the_devices_its_plan_allocates() -> None:
    """The victim's claim let its pair go: while the nomination stands, a pod of lower (or
    equal) priority needing the pair is refused (it would make the preemptor evict again);
    the preemptor gets it, and so may a pod of higher priority. Deciding lifts the nomination
    only in its scope: the devices stay held after each decision."""
    state, pod, _ = nominated_for_pair()
    held = in_use(state)
    for name, priority in (("lower", HIGH - 1), ("equal", HIGH)):
        refused = decide(state, unit_of(rival(state, name, priority)))
        assert isinstance(refused, Unschedulable), refused
        assert "cannot allocate all claims" in refused.reason
        assert in_use(state) == held
    assert held[(DRIVER, "a", "gpu-0")] == held[(DRIVER, "a", "gpu-4")] == 1

    placed = decide(state, unit_of(pod))
    assert isinstance(placed, Placed), placed
    (placement,) = placed.placements
    assert sorted(r.device for c in placement.claims for r in c.allocation.results) == [
        "gpu-0",
        "gpu-4",
    ]
    assert in_use(state) == held

    higher = decide(state, unit_of(rival(state, "higher", HIGH + 1)))
    assert isinstance(higher, Placed), higher
    assert in_use(state) == held

    # Placed, the preemptor's nomination is used up: its claim's allocation holds the pair now.
    state.apply(placement, pod)
    assert "default/high" not in state.nominations
    assert in_use(state) == held
    state.forget("default/high")
    assert in_use(state) == {d: n for d, n in held.items() if d[2] not in ("gpu-0", "gpu-4")}


def test_a_nomination_ended_or_undone_lets_its_devices_go() -> None:
    """Unnominated (it expired, an eviction was refused), the pair is anyone's; a tentative
    scope that nominates (or unnominates) leaves the devices in use as they were."""
    state, _, result = nominated_for_pair()
    held = in_use(state)
    with state.tentative():
        state.unnominate("default/high")
        assert isinstance(decide(state, unit_of(rival(state, "lower", LOW))), Placed)
    assert in_use(state) == held
    state.unnominate("default/high")
    free = in_use(state)
    assert (DRIVER, "a", "gpu-0") not in free and (DRIVER, "a", "gpu-4") not in free
    assert state.sizes()["dra_nominated"] == 0
    with state.tentative():
        state.nominate(result.nominations[0])
        assert in_use(state) == held
    assert in_use(state) == free
    assert isinstance(decide(state, unit_of(rival(state, "lower", LOW))), Placed)
