"""NodeResourcesFit stepped by hand: the effective request (sidecars, init containers, overhead,
requests defaulting to limits) and the node check, with kube-scheduler's fit_test.go as a guide."""

from __future__ import annotations

import pytest

from scheduler.core.filters.resources import insufficient
from scheduler.core.model.objects import ContainerInput, PodInput
from scheduler.core.resources.accounting import is_checked, node_allocatable, pod_requests
from scheduler.core.resources.requests import RequestError
from tests.builders import MakeNode, MakePod, cluster, schedule


def _pod(
    *containers: ContainerInput, init: tuple[ContainerInput, ...] = (), **kw: object
) -> PodInput:
    return PodInput("default", "p", containers=containers, init_containers=init, **kw)  # type: ignore[arg-type]


def c(name: str, restart: str = "", **requests: str) -> ContainerInput:
    return ContainerInput(
        name, requests={k.replace("_", "-"): v for k, v in requests.items()}, restart_policy=restart
    )


def test_app_containers_add_up_in_kube_units() -> None:
    pod = _pod(c("a", cpu="500m", memory="1Gi"), c("b", cpu="1.5", memory="512Mi"))
    assert pod_requests(pod) == (("cpu", 2000), ("memory", 3 * 2**29))


def test_cpu_rounds_up_to_a_millicore_and_bytes_round_up() -> None:
    pod = _pod(c("a", cpu="0.0001", memory="1.5"))
    assert pod_requests(pod) == (("cpu", 1), ("memory", 2))


def test_an_init_container_larger_than_the_app_sets_the_request() -> None:
    pod = _pod(c("app", cpu="1"), init=(c("setup", cpu="3"),))
    assert pod_requests(pod) == (("cpu", 3000),)


def test_sidecars_run_beside_the_app_and_beside_later_init_containers() -> None:
    # sidecar 1 cpu, then init 2 cpu (runs with the sidecar: 3), app 1 cpu (with sidecar: 2)
    pod = _pod(
        c("app", cpu="1"),
        init=(c("proxy", "Always", cpu="1"), c("migrate", cpu="2")),
    )
    assert pod_requests(pod) == (("cpu", 3000),)
    # An init container before the sidecar does not run with it.
    pod = _pod(c("app", cpu="1"), init=(c("migrate", cpu="2"), c("proxy", "Always", cpu="1")))
    assert pod_requests(pod) == (("cpu", 2000),)


def test_overhead_is_added_and_limits_stand_in_for_missing_requests() -> None:
    limited = ContainerInput("a", limits={"cpu": "2", "example.com/fpga": "1"})
    pod = _pod(limited, overhead={"cpu": "250m"})
    assert pod_requests(pod) == (("cpu", 2250), ("example.com/fpga", 1))


def test_whole_gpu_names_are_left_to_the_gpu_rules() -> None:
    pod = _pod(ContainerInput("a", limits={"nvidia.com/gpu": "2", "cpu": "1"}))
    assert pod_requests(pod, skip=("nvidia.com/gpu",)) == (("cpu", 1000),)


def test_kube_scheduler_checks_scalar_resources_only() -> None:
    assert is_checked("cpu") and is_checked("hugepages-2Mi") and is_checked("example.com/fpga")
    assert is_checked("attachable-volumes-aws-ebs")
    assert not is_checked("storage") and not is_checked("requests.cpu")


def test_a_malformed_request_names_pod_and_field_only_when_strict() -> None:
    pod = _pod(c("main", cpu="lots"))
    with pytest.raises(
        RequestError, match=r"pod default/p: containers\[main\]\.resources\.requests\[cpu\]"
    ):
        pod_requests(pod, strict=True)
    assert pod_requests(pod) == ()


def test_pods_of_one_spec_share_an_answer_and_each_error_names_its_own_pod() -> None:
    a = _pod(c("main", cpu="1", memory="1Gi"))
    b = PodInput("other", "q", containers=a.containers)
    assert pod_requests(a, skip={"nvidia.com/gpu"}) == pod_requests(b, skip=("nvidia.com/gpu",))
    # Another skip, or another spec, is another answer.
    assert pod_requests(a, skip=("memory",)) == (("cpu", 1000),)
    assert pod_requests(_pod(c("main", cpu="2"))) == (("cpu", 2000),)
    bad = _pod(c("main", cpu="lots"))
    assert pod_requests(bad) == ()  # kept: the same spec, not strict
    for pod in (bad, PodInput("other", "q", containers=bad.containers)):
        with pytest.raises(RequestError, match=f"pod {pod.key}: "):
            pod_requests(pod, strict=True)


def test_fits_request_reports_every_short_resource_and_the_pod_count() -> None:
    alloc = node_allocatable({"cpu": "4", "memory": "8Gi", "pods": "3", "example.com/fpga": "1"})
    used = {"cpu": 3500, "memory": 2**33}
    wants = (("cpu", 1000), ("example.com/fpga", 2), ("memory", 1))
    assert insufficient(wants, alloc, used, pods_on_node=3) == [
        "Too many pods",
        "Insufficient cpu",
        "Insufficient example.com/fpga",
        "Insufficient memory",
    ]
    assert insufficient((("cpu", 500),), alloc, used, pods_on_node=2) == []


def test_a_pod_asking_nothing_still_needs_a_pod_slot() -> None:
    alloc = node_allocatable({"cpu": "4", "pods": "1"})
    assert insufficient((), alloc, {}, pods_on_node=1) == ["Too many pods"]
    assert insufficient((), alloc, {}, pods_on_node=0) == []


# ---- through the core: every pod on a node counts, ours or not ------------------------------


def _node(name: str, cpu: str) -> MakeNode:
    return (
        MakeNode()
        .Name(name)
        .GPUs(8)
        .Allocatable({"nvidia.com/gpu": 8, "cpu": cpu, "memory": "64Gi"})
    )


def test_a_gpu_pod_goes_where_the_cpu_is_even_if_another_node_ranks_first() -> None:
    small, big = _node("a-small", "16"), _node("b-big", "96")
    pod = (
        MakePod()
        .Name("train")
        .ContainerWith(
            "main", requests={"cpu": "48", "memory": "400Mi"}, limits={"nvidia.com/gpu": "2"}
        )
    )
    (decision,) = schedule(cluster(small, big), pod)
    assert decision.placements[0].node == "b-big"


def test_pods_of_other_schedulers_without_gpus_use_up_cpu() -> None:
    busy = MakePod().Name("web").Requests(cpu="90").Bound("b-big")
    state = cluster(_node("a-small", "16"), _node("b-big", "96"), running=(busy,))
    pod = (
        MakePod()
        .Name("train")
        .ContainerWith("main", requests={"cpu": "48"}, limits={"nvidia.com/gpu": "1"})
    )
    (decision,) = schedule(state, pod)
    assert decision.reason == ("0/2 nodes are available: 2 Insufficient cpu.")


def test_a_finished_pod_gives_its_cpu_back() -> None:
    busy = MakePod().Name("web").Requests(cpu="90").Bound("b-big")
    state = cluster(_node("b-big", "96"), running=(busy,))
    state.add_bound_pod(
        MakePod().Name("web").Requests(cpu="90").Bound("b-big").Phase("Succeeded").Obj()
    )
    pod = (
        MakePod()
        .Name("train")
        .ContainerWith("main", requests={"cpu": "48"}, limits={"nvidia.com/gpu": "1"})
    )
    (decision,) = schedule(state, pod)
    assert decision.placements[0].node == "b-big"
    assert state.nodes["b-big"].requested == {"cpu": 48000}
    assert len(state.index) == 1


def test_assumed_placements_count_before_they_are_bound() -> None:
    state = cluster(_node("only", "64"))
    first = (
        MakePod()
        .Name("a")
        .ContainerWith("m", requests={"cpu": "40"}, limits={"nvidia.com/gpu": "1"})
    )
    second = (
        MakePod()
        .Name("b")
        .ContainerWith("m", requests={"cpu": "40"}, limits={"nvidia.com/gpu": "1"})
    )
    placed, refused = schedule(state, first, second)
    assert placed.placements[0].node == "only"
    assert refused.reason == "0/1 nodes are available: 1 Insufficient cpu."
