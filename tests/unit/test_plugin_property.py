"""Property: any admission order of bound pods gives every container exactly its assignment.

Hypothesis draws pods (one or two GPU containers, sometimes a container without GPUs, old
pod-level or per-container assignments), a disjoint assignment of the node's 8 GPUs to them, and
an admission order; the test kubelet admits them one at a time against our plugin. No GPU may go
to two containers, and with the kubelet filling shortfalls arbitrarily (from the end of the
list), any wrong preference would show as a strict refusal or a wrong set.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.testing.kubelet import Container, Pod
from tests.plugin_node import UUIDS, bounded, gpu_node


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[tuple[Pod, dict[str, list[str]], bool]], list[int]]:
    gpus = draw(st.permutations(UUIDS))
    budget = draw(st.integers(min_value=1, max_value=8))
    pods: list[tuple[Pod, dict[str, list[str]], bool]] = []
    used = 0
    while used < budget:
        size = draw(st.integers(min_value=1, max_value=min(4, budget - used)))
        split = draw(st.integers(min_value=0, max_value=size - 1)) if size > 1 else 0
        sizes = [s for s in (size - split, split) if s]
        names = [f"c{i}" for i in range(len(sizes))]
        containers = [Container(n, s) for n, s in zip(names, sizes, strict=True)]
        if draw(st.booleans()):
            containers.insert(draw(st.integers(0, len(containers))), Container("no-gpu", 0))
        assigned: dict[str, list[str]] = {}
        for n, s in zip(names, sizes, strict=True):
            assigned[n] = list(gpus[used : used + s])
            used += s
        old_style = len(sizes) == 1 and draw(st.booleans())
        pods.append((Pod("ns", f"p{len(pods)}", tuple(containers)), assigned, old_style))
    order = draw(st.permutations(range(len(pods))))
    return pods, list(order)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(workload=workloads())
async def test_any_admission_order_gives_each_container_its_assignment(
    workload: tuple[list[tuple[Pod, dict[str, list[str]], bool]], list[int]],
) -> None:
    pods, order = workload
    async with gpu_node() as node:
        for p, assigned, old_style in pods:  # all bound before any admission
            if old_style:
                node.annotations.bind(p, devices=next(iter(assigned.values())))
            else:
                node.annotations.bind(p, assigned)
        for i in order:
            p, assigned, _ = pods[i]
            got = await bounded(node.kubelet.admit(p))
            assert {n: list(ids) for n, ids in got.items()} == assigned
        given_out = [u for ids in node.kubelet.allocated.values() for u in ids]
        assert len(given_out) == len(set(given_out))
        assert all(r.matches for r in node.plugin.allocations)
