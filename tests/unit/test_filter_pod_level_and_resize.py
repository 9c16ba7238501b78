"""Pod-level resources and in-place resize accounting (kube-scheduler v1.37), stepped by hand:
``spec.resources`` replaces the containers' sum for cpu/memory/hugepages only; a bound pod is
charged max(Σspec, Σactuated, Σallocated), init containers included, pod-level status where
reported, and an Infeasible resize drops the spec term (component-helpers v0.37.2,
resource/helpers.go)."""

from __future__ import annotations

from msgspec.structs import replace

from scheduler.core.model.objects import (
    ContainerInput,
    ContainerStatusInput,
    PodInput,
    ResizeStatus,
)
from scheduler.core.resources.accounting import pod_requests
from scheduler.core.resources.resize import bound_requests
from tests.builders import MakeNode, MakePod, cluster, schedule

GIB = 2**30


def _pod(**kw: object) -> PodInput:
    return PodInput(
        "default",
        "p",
        containers=(
            ContainerInput("a", requests={"cpu": "1", "memory": "1Gi", "example.com/nic": "1"}),
            ContainerInput("b", requests={"cpu": "2", "memory": "1Gi"}),
        ),
        **kw,  # type: ignore[arg-type]
    )


def test_pod_level_requests_replace_the_sum_only_for_their_keys() -> None:
    pod = _pod(level_requests={"cpu": "1500m"}, overhead={"cpu": "100m", "memory": "1Mi"})
    # cpu: pod level (1.5) + overhead; memory: the containers' 2Gi + overhead; the extended
    # resource stays container-summed.
    assert pod_requests(pod) == (
        ("cpu", 1600),
        ("example.com/nic", 1),
        ("memory", 2 * GIB + 2**20),
    )


def test_pod_level_keys_that_are_not_pod_level_resources_are_ignored() -> None:
    pod = _pod(level_requests={"example.com/nic": "5", "memory": "0"})
    # memory 0 at pod level replaces the sum (the key is set); the extended resource does not.
    assert pod_requests(pod) == (("cpu", 3000), ("example.com/nic", 1))


def test_a_pod_level_request_decides_fit() -> None:
    # Containers sum to 3 cpu, the pod asks 1.5 at pod level: it fits a 2-cpu node.
    node = (
        MakeNode().Name("n").GPUs(1).Allocatable({"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": 1})
    )
    state = cluster(node)
    pod = MakePod().Name("p").Req(1).Obj()
    pod = replace(
        pod,
        containers=(*pod.containers, ContainerInput("cpu", requests={"cpu": "3"})),
        level_requests={"cpu": "1500m"},
    )
    (decision,) = schedule(state, pod)
    assert decision.placements[0].node == "n"
    without = replace(pod, name="q", level_requests={})
    (refused,) = schedule(cluster(node), without)
    assert "Insufficient cpu" in refused.reason


def _resized(status: ResizeStatus, **kw: object) -> PodInput:
    return replace(_pod(**kw), node_name="n", phase="Running", resize=status)


def test_a_bound_pod_without_status_resources_is_charged_its_spec() -> None:
    assert bound_requests(_pod()) == pod_requests(_pod())


def test_a_shrink_not_yet_actuated_keeps_the_larger_actuated_amount() -> None:
    # Spec says a=1 cpu; the kubelet allocated 1 but still runs it at 4.
    status = ResizeStatus(
        containers=(ContainerStatusInput("a", actuated={"cpu": "4"}, allocated={"cpu": "1"}),)
    )
    # Σspec = 3, Σallocated = 1 + 2 (b falls back to its spec) = 3, Σactuated = 4 + 2 = 6.
    assert dict(bound_requests(_resized(status)))["cpu"] == 6000


def test_a_growth_in_the_spec_is_charged_before_the_kubelet_allocates_it() -> None:
    pod = _resized(ResizeStatus(containers=(ContainerStatusInput("a", actuated={"cpu": "1"}),)))
    pod = replace(
        pod,
        containers=(
            ContainerInput("a", requests={"cpu": "5", "memory": "1Gi"}),
            pod.containers[1],
        ),
    )
    assert dict(bound_requests(pod))["cpu"] == 7000


def test_the_maximum_is_over_sums_not_per_container() -> None:
    # v1.37 takes max(Σspec, Σactuated, Σallocated); per container it would be max(2,1)+max(2,3)=5.
    pod = PodInput(
        "default",
        "p",
        node_name="n",
        containers=(
            ContainerInput("a", requests={"cpu": "2"}),
            ContainerInput("b", requests={"cpu": "2"}),
        ),
        resize=ResizeStatus(
            containers=(
                ContainerStatusInput("a", actuated={"cpu": "1"}),
                ContainerStatusInput("b", actuated={"cpu": "3"}),
            )
        ),
    )
    assert bound_requests(pod) == (("cpu", 4000),)


def test_plain_init_containers_count_with_their_status() -> None:
    pod = PodInput(
        "default",
        "p",
        node_name="n",
        containers=(ContainerInput("app", requests={"cpu": "1"}),),
        init_containers=(ContainerInput("setup", requests={"cpu": "2"}),),
        resize=ResizeStatus(containers=(ContainerStatusInput("setup", allocated={"cpu": "6"}),)),
    )
    assert bound_requests(pod) == (("cpu", 6000),)


def test_an_infeasible_resize_drops_the_spec_term() -> None:
    # The spec asks 8 cpu for a, which the node can never give: charged what runs (1 + 2).
    pod = replace(
        _resized(
            ResizeStatus(
                containers=(
                    ContainerStatusInput("a", actuated={"cpu": "1"}, allocated={"cpu": "1"}),
                    ContainerStatusInput("b", actuated={"cpu": "2"}, allocated={"cpu": "2"}),
                ),
                infeasible=True,
            )
        ),
        containers=(
            ContainerInput("a", requests={"cpu": "8"}),
            ContainerInput("b", requests={"cpu": "2"}),
        ),
    )
    assert bound_requests(pod) == (("cpu", 3000),)
    feasible = replace(pod, resize=replace(pod.resize, infeasible=False))  # type: ignore[arg-type]
    assert bound_requests(feasible) == (("cpu", 10000),)


def test_pod_level_status_lists_stand_for_the_container_sums() -> None:
    status = ResizeStatus(
        containers=(ContainerStatusInput("a", actuated={"cpu": "9"}),),
        pod_actuated={"cpu": "2", "memory": "3Gi"},
        pod_allocated={"cpu": "4"},
    )
    # Σactuated/Σallocated are the pod-level lists (the container entry is not summed).
    charged = dict(bound_requests(_resized(status)))
    assert charged["cpu"] == 4000 and charged["memory"] == 3 * GIB


def test_a_resized_pod_level_request_counts_its_status_too() -> None:
    status = ResizeStatus(pod_actuated={"cpu": "5"}, pod_allocated={"cpu": "2"})
    charged = dict(bound_requests(_resized(status, level_requests={"cpu": "2"})))
    assert charged["cpu"] == 5000


def test_a_resized_bound_pod_keeps_its_node_charged_at_the_larger_amount() -> None:
    node = (
        MakeNode()
        .Name("n")
        .GPUs(2)
        .Allocatable({"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 2})
    )
    running = replace(
        MakePod().Name("old").Req(1).Requests(cpu="2").Bound("n", "0").Obj(),
        resize=ResizeStatus(containers=(ContainerStatusInput("c1", actuated={"cpu": "7"}),)),
    )
    state = cluster(node, running=(running,))
    assert state.nodes["n"].requested["cpu"] == 7000
    (decision,) = schedule(state, MakePod().Name("new").Req(1).Requests(cpu="2"))
    assert "Insufficient cpu" in decision.reason
