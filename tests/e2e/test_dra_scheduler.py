"""topo-scheduler allocates ResourceClaims on the plane (issue 29's "Done when").

The scheduler runs as a real process (the ``scenario`` fixture), the test driver publishes
NVIDIA-shaped slices for KWOK nodes, and the resourceclaim controller makes the template claims
(tests/e2e/dra.py). Here topo-scheduler writes what kube-scheduler would: the special claim of a
plain ``nvidia.com/gpu`` request on a DRA-only node, allocated with an NVLink pair; and when the
Binding fails, none of those writes stays behind. A gang whose members ask for GPUs through
claims lands, all of it, on NVLink pairs inside one NVLink clique.
"""

from __future__ import annotations

import time
from typing import Any

from scheduler.testing.dradriver import CLIQUE_LABEL, GPU_CLASS, GPU_DRIVER

from .dra import CLAIMS, EXTENDED_CLAIM, KINDS, DraScene, bindings_refused
from .dra_shapes import gpus
from .live import Scenario

PROTECTION = "resource.kubernetes.io/delete-protection"
MERGE_PATCH = "application/merge-patch+json"


def claims_of(scene: DraScene, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The claims the pod owns (its template's, its special claim) or is reserved in."""
    uid = pod["metadata"]["uid"]
    return [
        c
        for c in scene.plane.request("GET", CLAIMS)["items"]
        if any(o["uid"] == uid for o in c["metadata"].get("ownerReferences", []))
        or any(r["uid"] == uid for r in c.get("status", {}).get("reservedFor", []))
    ]


def test_a_plain_gpu_request_on_a_dra_only_node_gets_its_special_claim_with_an_nvlink_pair(
    scenario: Scenario, scene: DraScene
) -> None:
    # NVLink pairs four apart: the first two devices (kube-scheduler's first fit) are not one.
    node = scene.node("x", KINDS["x"])
    scenario.start_scheduler()
    name = scene.pod("p", scenario.name, limits={"nvidia.com/gpu": "2"})

    verdict = scene.verdict(name)

    assert verdict.node == node, verdict.message or scenario.schedulers[0].tail()
    pod = scene.get_pod(name)
    extended = pod["status"]["extendedResourceClaimStatus"]
    claim = scene.get_claim(extended["resourceClaimName"])
    # The special claim as kube-scheduler makes it: named after the pod, the pod its
    # controller, annotated, one request of the class backing nvidia.com/gpu, recorded on the
    # pod with the container's request mapping.
    assert claim["metadata"]["name"].startswith(f"{name}-extended-resources-")
    assert claim["metadata"]["annotations"][EXTENDED_CLAIM] == "true"
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "Pod",
        pod["metadata"]["uid"],
        True,
    )
    (request,) = claim["spec"]["devices"]["requests"]
    assert (request["exactly"]["deviceClassName"], request["exactly"]["count"]) == (GPU_CLASS, 2)
    assert extended["requestMappings"] == [
        {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": request["name"]}
    ]
    assert PROTECTION in claim["metadata"]["finalizers"]
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    # Allocated with an NVLink pair of the node's matrix: GPU i and GPU i ^ 4.
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {(r["request"], r["driver"], r["pool"]) for r in results} == {
        (request["name"], GPU_DRIVER, node)
    }
    first, second = sorted(int(r["device"].removeprefix("gpu-")) for r in results)
    assert second == first ^ 4, results
    scene.wait_running(name)


def test_a_failed_binding_leaves_no_claim_allocated_or_reserved_for_the_pod(
    scenario: Scenario, scene: DraScene
) -> None:
    node = scene.node("a")
    scenario.start_scheduler()
    template = scene.template("two", gpus(2))
    with bindings_refused(scene.plane, scene.full("refused")):
        name = scene.pod(
            "refused",
            scenario.name,
            templates={"gpus": template},
            limits={"nvidia.com/gpu": "2"},
        )
        log = scenario.schedulers[0]
        deadline = time.monotonic() + 60
        while not any(
            e.get("event") == "bind refused" and e.get("pod") == f"default/{name}"
            for e in log.lines()
        ):
            assert time.monotonic() < deadline, log.tail()
            time.sleep(0.2)
        # The claims were written (a Binding is sent only after them). The node cordoned, the
        # next attempt, after this one's Unreserve, cannot allocate them again: what the claims
        # hold then is what the failed Binding left.
        scene.plane.request(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"spec": {"unschedulable": True}},
            content_type=MERGE_PATCH,
        )
        message = ""
        while "node(s) were unschedulable" not in message:
            assert time.monotonic() < deadline, log.tail()
            time.sleep(0.2)
            conditions = scene.get_pod(name).get("status", {}).get("conditions") or []
            message = next(
                (c.get("message", "") for c in conditions if c["type"] == "PodScheduled"), ""
            )

        pod = scene.get_pod(name)
        assert not pod["spec"].get("nodeName")
        claims = claims_of(scene, pod)
        # The template's claim stays, neither allocated nor reserved nor protected; the
        # special claim is deleted, as kube-scheduler's Unreserve does.
        (left,) = claims
        assert left["metadata"]["annotations"].get(EXTENDED_CLAIM) is None
        assert left["status"].get("allocation") is None, left["status"]
        assert not left["status"].get("reservedFor"), left["status"]
        assert PROTECTION not in (left["metadata"].get("finalizers") or [])

    # The Binding allowed again and the node back, the pod binds with both claims.
    scene.plane.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"spec": {"unschedulable": False}},
        content_type=MERGE_PATCH,
    )
    deadline = time.monotonic() + 60
    while not scene.get_pod(name)["spec"].get("nodeName"):
        assert time.monotonic() < deadline, scenario.schedulers[0].tail()
        time.sleep(0.2)
    verdict = scene.verdict(name)
    assert verdict.node == node, verdict.message or scenario.schedulers[0].tail()
    assert sum(len(d) for d in verdict.devices.values()) == 4


def test_a_dra_gang_of_four_times_two_gpus_lands_on_nvlink_pairs_inside_one_clique(
    scenario: Scenario, scene: DraScene
) -> None:
    # Nodes whose NVLink pairs are four apart (first fit would take SYS pairs), in two NVLink
    # cliques: x1 alone in one, x2 and x3 in the other.
    cliques = {"x1": f"{scene.id}.1", "x2": f"{scene.id}.2", "x3": f"{scene.id}.2"}
    nodes = {scene.node(n, KINDS["x"], {CLIQUE_LABEL: c}) for n, c in cliques.items()}
    scenario.start_scheduler()
    template = scene.template("pair", gpus(2))
    labels = scenario.gang_labels("train", 4)
    names = [
        scene.pod(f"w{i}", scenario.name, templates={"gpus": template}, labels=labels)
        for i in range(4)
    ]

    verdicts = [scene.verdict(n) for n in names]

    held: set[tuple[str, int]] = set()
    for name, verdict in zip(names, verdicts, strict=True):
        assert verdict.node in nodes, verdict.message or scenario.schedulers[0].tail()
        (results,) = verdict.devices.values()
        devices = sorted(int(r[3].removeprefix("gpu-")) for r in results)
        assert len(devices) == 2 and devices[1] == devices[0] ^ 4, (name, results)
        for d in devices:
            assert (verdict.node, d) not in held, f"GPU {d} of {verdict.node} given twice"
            held.add((verdict.node, d))
    # The whole gang inside one clique, as the nodes' labels on the plane say.
    on_plane: dict[str, dict[str, str]] = {
        node: scene.plane.request("GET", f"/api/v1/nodes/{node}")["metadata"].get("labels", {})
        for node in {v.node for v in verdicts}
    }
    if all(CLIQUE_LABEL in node_labels for node_labels in on_plane.values()):
        assert len({node_labels[CLIQUE_LABEL] for node_labels in on_plane.values()}) == 1, on_plane
