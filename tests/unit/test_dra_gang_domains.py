"""A gang asking for devices only through ResourceClaims, planned through topology domains
(gangs/claims.py), stepped by hand: the domain counted by the class index, each member's devices
chosen by interconnect after its siblings', an IMEX channel holding the gang to one clique."""

from __future__ import annotations

from msgspec.structs import replace

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
from tests.builders import MakeNode, MakePod, cluster, schedule

DRIVER = "gpu.nvidia.com"
IMEX = "compute-domain.nvidia.com"
CHANNEL = "compute-domain-default-channel.nvidia.com"
CLIQUE = "nvidia.com/gpu.clique"
# Eight GPUs whose NVLink pairs are four apart (i and i^4): first fit would take PCIe pairs.
LINKS = [["X" if i == j else "NV4" if i ^ 4 == j else "SYS" for j in range(8)] for i in range(8)]


def node(name: str, clique: str) -> MakeNode:
    return MakeNode().Name(name).Links(LINKS).Label(CLIQUE, clique)


def dra_cluster(*nodes: tuple[str, str], channels: bool = False) -> object:
    state = cluster(*(node(name, clique) for name, clique in nodes))
    state.inputs.device_classes.put(DeviceClass(DRIVER, (f"device.driver == '{DRIVER}'",)))
    state.inputs.device_classes.put(DeviceClass(CHANNEL, (f"device.driver == '{IMEX}'",)))
    for name, _ in nodes:
        gpus = tuple(Device(f"gpu-{i}", attributes={"uuid": f"GPU-{name}-{i}"}) for i in range(8))
        state.inputs.resource_slices.put(
            ResourceSlice(f"{name}-gpus", DRIVER, ResourcePool(name, 1, 1), name, devices=gpus)
        )
        if channels:
            state.inputs.resource_slices.put(
                ResourceSlice(
                    f"{name}-imex",
                    IMEX,
                    ResourcePool(name, 1, 1),
                    name,
                    devices=(Device("channel-0"),),
                )
            )
    return state


def claim(name: str, device_class: str = DRIVER, count: int = 2) -> ResourceClaim:
    request = DeviceRequest("req", ExactRequest(device_class, count=count))
    return ResourceClaim("default", name, f"uid-{name}", (request,))


def members(state: object, n: int, imex: bool = False) -> list[PodInput]:
    out = []
    for i in range(n):
        state.inputs.resource_claims.put(claim(f"pair-{i}"))  # type: ignore[attr-defined]
        entries = [PodClaim("gpus", f"pair-{i}")]
        if imex:
            state.inputs.resource_claims.put(claim(f"ch-{i}", CHANNEL, 1))  # type: ignore[attr-defined]
            entries.append(PodClaim("imex", f"ch-{i}"))
        pod = MakePod().Name(f"w{i}").Gang("job", n).Obj()
        out.append(replace(pod, resource_claims=tuple(entries)))
    return out


def hold(state: object, name: str, node_name: str, *gpus: int) -> None:
    results = tuple(DeviceResult("gpu", DRIVER, node_name, f"gpu-{i}") for i in gpus)
    allocation = Allocation(results=results)
    state.inputs.resource_claims.put(  # type: ignore[attr-defined]
        replace(claim(name, count=len(gpus)), allocation=allocation)
    )


def placed(decision: object) -> list[tuple[str, str, tuple[int, ...]]]:
    """(pod, node, GPU indices) per member."""
    assert isinstance(decision, Placed), decision
    out = []
    for p in decision.placements:
        gpus = sorted(
            int(r.device.removeprefix("gpu-"))
            for c in p.claims
            for r in c.allocation.results
            if r.device.startswith("gpu-")
        )
        out.append((p.pod, p.node, tuple(gpus)))
    return out


def test_a_gang_of_four_times_two_gpus_lands_on_nvlink_pairs_inside_one_clique() -> None:
    """a1 (clique 1) has one free NVLink pair, b1 (clique 2) all four. Placed one pod after the
    other, the smallest fitting node (a1) would take the first member and the gang would cross
    cliques; planned through the domains, all four take b1's NVLink pairs."""
    state = dra_cluster(("a1", "fabric.1"), ("b1", "fabric.2"))
    hold(state, "theirs", "a1", 0, 1, 2, 4, 5, 6)
    decisions = [d for d in schedule(state, *members(state, 4)) if isinstance(d, Placed)]
    (decision,) = decisions
    got = placed(decision)
    assert {n for _, n, _ in got} == {"b1"}
    assert sorted(g for _, _, g in got) == [(0, 4), (1, 5), (2, 6), (3, 7)]  # NVLink pairs
    assert all(
        dict(p.topology)["nvlink"] == "fabric.2" and p.gang == "default/job"
        for p in decision.placements
    )
    assert sorted(p.rank for p in decision.placements) == [0, 1, 2, 3]


def test_a_gang_spanning_nodes_stays_in_the_clique_that_holds_it() -> None:
    """Clique 1 holds two members (a1, a2 with one pair each), clique 2 holds four only over
    both its nodes (two pairs each): the gang takes clique 2, each node two members."""
    state = dra_cluster(
        ("a1", "fabric.1"), ("a2", "fabric.1"), ("b1", "fabric.2"), ("b2", "fabric.2")
    )
    for name in ("a1", "a2"):
        hold(state, f"held-{name}", name, 0, 1, 2, 4, 5, 6)
    for name in ("b1", "b2"):
        hold(state, f"held-{name}", name, 0, 1, 4, 5)
    (decision,) = [d for d in schedule(state, *members(state, 4)) if isinstance(d, Placed)]
    got = placed(decision)
    assert sorted(n for _, n, _ in got) == ["b1", "b1", "b2", "b2"]
    assert all(g in ((2, 6), (3, 7)) for _, _, g in got)
    # Consecutive ranks share a node.
    by_pod = {p: n for p, n, _ in got}
    assert by_pod["default/w0"] == by_pod["default/w1"] != by_pod["default/w2"]


def test_imex_channel_claims_keep_the_gang_in_one_clique_or_refuse_it() -> None:
    """One IMEX channel per node: one member per node. Clique 1 has two nodes, clique 2 three.
    Four members fit no clique: refused with the shortfall, nothing held; three take clique 2,
    each with its node's channel."""
    nodes = [("a1", "fabric.1"), ("a2", "fabric.1")]
    nodes += [("b1", "fabric.2"), ("b2", "fabric.2"), ("b3", "fabric.2")]
    state = dra_cluster(*nodes, channels=True)
    (refused,) = schedule(state, *members(state, 4, imex=True))
    assert isinstance(refused, Unschedulable)
    assert "needs 4 pods in one nvlink" in refused.reason, refused.reason
    assert "the best nvlink fits 3 (nvlink-domain=fabric,nvlink=fabric.2)" in refused.reason
    assert state.devices.in_use.exclusive == {}

    three = dra_cluster(*nodes, channels=True)
    (decision,) = [
        d for d in schedule(three, *members(three, 3, imex=True)) if isinstance(d, Placed)
    ]
    got = placed(decision)
    assert sorted(n for _, n, _ in got) == ["b1", "b2", "b3"]
    assert all(g == (0, 4) for _, _, g in got)
    channels = sorted(
        (p.node, r.device)
        for p in decision.placements
        for c in p.claims
        for r in c.allocation.results
        if r.device.startswith("channel")
    )
    assert channels == [("b1", "channel-0"), ("b2", "channel-0"), ("b3", "channel-0")]


def test_without_imex_the_same_gang_may_share_nodes_and_crosses_no_clique() -> None:
    """The same four members without channels: clique 1's two nodes hold them all (compact:
    the first clique that holds the gang, tightest first)."""
    state = dra_cluster(("a1", "fabric.1"), ("b1", "fabric.2"), ("b2", "fabric.2"))
    (decision,) = [d for d in schedule(state, *members(state, 4)) if isinstance(d, Placed)]
    got = placed(decision)
    assert {n for _, n, _ in got} == {"a1"}
    assert sorted(g for _, _, g in got) == [(0, 4), (1, 5), (2, 6), (3, 7)]
