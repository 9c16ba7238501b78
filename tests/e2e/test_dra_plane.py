"""The plane does DRA end to end (issue 29 item 8), with the real kube-scheduler as the allocator.

kube-controller-manager's resourceclaim controller turns a pod's ResourceClaimTemplate into a
claim, the test driver's NVIDIA-shaped slices announce the KWOK nodes' GPUs, kube-scheduler
allocates and binds, and KWOK runs the pod without a kubelet. The same plane is the oracle of the
differential e2e (tests/e2e/dra.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler.testing.controlplane import ControlPlane
from scheduler.testing.dradriver import GPU_CLASS, GPU_DRIVER
from scheduler.testing.kubescheduler import KubeScheduler

from .dra import CLAIMS, EXTENDED_CLAIM, POD_CLAIM_NAME, TEMPLATES, DraScene, Shape, run_shape
from .dra_shapes import SHAPES


@pytest.fixture(scope="module")
def oracle(control_plane: ControlPlane) -> Iterator[KubeScheduler]:
    with KubeScheduler(control_plane, "kube-dra") as scheduler:
        yield scheduler


def gpus(count: int, device_class: str = GPU_CLASS) -> dict[str, object]:
    return {
        "devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": count}}
            ]
        }
    }


def test_template_claim_is_created_by_the_controller_and_allocated_by_kube_scheduler(
    scene: DraScene, oracle: KubeScheduler
) -> None:
    node = scene.node("dra-a")
    template = scene.template("two-gpus", gpus(2))
    pod = scene.pod("p", oracle.name, templates={"gpus": template})

    verdict = scene.verdict(pod)

    assert verdict.node == node, verdict.message or oracle.tail()
    created = scene.get_pod(pod)
    statuses = created["status"]["resourceClaimStatuses"]
    assert [s["name"] for s in statuses] == ["gpus"]
    claim = scene.get_claim(statuses[0]["resourceClaimName"])
    # The resourceclaim controller's claim: owned by the pod, named after its claim.
    assert claim["metadata"]["annotations"][POD_CLAIM_NAME] == "gpus"
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "Pod",
        created["metadata"]["uid"],
        True,
    )
    stored = scene.plane.request("GET", f"{TEMPLATES}/{template}")
    assert claim["spec"] == stored["spec"]["spec"]  # the template's, with the API's defaults
    # kube-scheduler's allocation: two whole GPUs of the node's pool, from the driver's slice.
    (results,) = verdict.devices.values()
    assert [(r[0], r[1], r[2]) for r in results] == [("gpu", GPU_DRIVER, node)] * 2
    assert all(r[3].startswith("gpu-") and "-mig-" not in r[3] for r in results)
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    scene.wait_running(pod)

    # The pod gone, the controller un-reserves and deallocates the claim and the garbage
    # collector deletes it.
    scene.delete_pod(pod)
    scene.wait_gone(f"{CLAIMS}/{claim['metadata']['name']}")


def test_plain_gpu_request_on_a_dra_only_node_gets_its_extended_resource_claim(
    scene: DraScene, oracle: KubeScheduler
) -> None:
    node = scene.node("dra-b")
    pod = scene.pod("p", oracle.name, limits={"nvidia.com/gpu": "1"})

    verdict = scene.verdict(pod)

    assert verdict.node == node, verdict.message or oracle.tail()
    created = scene.get_pod(pod)
    extended = created["status"]["extendedResourceClaimStatus"]
    claim = scene.get_claim(extended["resourceClaimName"])
    assert claim["metadata"]["annotations"][EXTENDED_CLAIM] == "true"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == GPU_CLASS
    assert request["exactly"]["count"] == 1
    assert extended["requestMappings"] == [
        {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": request["name"]}
    ]
    (results,) = verdict.devices.values()
    assert [(r[0], r[1], r[2]) for r in results] == [(request["name"], GPU_DRIVER, node)]
    scene.wait_running(pod)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_kube_scheduler_reaches_the_recorded_verdict(
    scene: DraScene, oracle: KubeScheduler, shape: Shape
) -> None:
    """The claim shapes of dra_shapes.py, each on its own nodes: kube-scheduler still places
    the probe where it did when the shape was recorded (or still refuses it)."""
    verdict = run_shape(scene, oracle.name, shape)
    expected = scene.full(shape.expect) if shape.expect else ""
    assert verdict.node == expected, f"{shape.name}: {verdict}"
