"""DRA on the local plane: claim pods, their claims and templates, and kube-scheduler's verdict.

The plane (scheduler/testing/controlplane.py) runs the resourceclaim controller, and the test
driver (scheduler/testing/dradriver.py) publishes NVIDIA-shaped ResourceSlices for KWOK nodes;
kube-scheduler (kubescheduler.py) allocates the claims of the pods that name it. ``DraScene`` is
one test's share of that: its own id, DRA-only KWOK nodes labelled ``test=<id>`` with their
slices, claims and templates labelled the same, and pods pinned to its nodes by that label.
``remove_objects`` deletes them all (claims and slices too: the garbage collector would only get
to them once their pods and nodes are gone).

``verdict`` waits for kube-scheduler's decision on a pod: bound (to which node, with which
devices in which claims) or refused (its PodScheduled=False message). It is the oracle side of
the differential e2e: the same shape run against topo-scheduler must reach the same verdict.
"""

from __future__ import annotations

import time
import urllib.error
import uuid
from dataclasses import dataclass, field
from typing import Any

from scheduler.testing.controlplane import RESOURCE_API, ControlPlane
from scheduler.testing.dradriver import H100, GpuModel, NvidiaDraDriver

NAMESPACE = "default"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
CLAIMS = f"{RESOURCE_API}/namespaces/{NAMESPACE}/resourceclaims"
TEMPLATES = f"{RESOURCE_API}/namespaces/{NAMESPACE}/resourceclaimtemplates"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"


def inventory(node: str, gpus: int = 8) -> dict[str, Any]:
    """A node inventory (``topo-scheduler.io/gpus``) of ``gpus`` GPUs with UUIDs: an NVLink
    pair per two GPUs (NV18 within, SYS across), as the agent publishes it."""
    links = [
        ["X" if i == j else ("NV18" if i // 2 == j // 2 else "SYS") for j in range(gpus)]
        for i in range(gpus)
    ]
    return {
        "vendor": "nvidia",
        "model": "NVIDIA-H100-80GB-HBM3",
        "devices": [{"index": i, "uuid": f"GPU-{node}-{i}"} for i in range(gpus)],
        "links": links,
    }


@dataclass
class Verdict:
    """kube-scheduler's decision on one pod."""

    node: str  # "" when refused
    message: str = ""  # the PodScheduled=False message when refused
    # claim name -> its allocation's results (request, driver, pool, device)
    devices: dict[str, list[tuple[str, str, str, str]]] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return bool(self.node)


class DraScene:
    def __init__(self, plane: ControlPlane, driver: NvidiaDraDriver) -> None:
        self.plane = plane
        self.driver = driver
        self.id = uuid.uuid4().hex[:8]
        self.labels = {"test": self.id}

    # ---- objects -----------------------------------------------------------------------------

    def node(
        self,
        name: str,
        gpus: int = 8,
        model: GpuModel = H100,
        mig: bool = False,
        imex: bool = False,
        labels: dict[str, str] | None = None,
    ) -> str:
        """A DRA-only KWOK node (no ``nvidia.com/gpu`` allocatable) with its inventory and the
        driver's slices for the same GPUs; returns its full name."""
        full = f"{self.id}-{name}"
        inv = inventory(full, gpus)
        self.plane.create_gpu_node(
            full, inv, resource=None, labels={**self.labels, **(labels or {})}
        )
        self.driver.publish_gpus(full, inv, model, mig)
        if imex:
            self.driver.publish_imex(full)
        return full

    def template(self, name: str, spec: dict[str, Any]) -> str:
        """A ResourceClaimTemplate whose claims have ``spec`` (a ResourceClaimSpec)."""
        full = f"{self.id}-{name}"
        self.plane.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": full, "namespace": NAMESPACE, "labels": self.labels},
                "spec": {"spec": spec},
            }
        )
        return full

    def claim(self, name: str, spec: dict[str, Any]) -> str:
        """A ResourceClaim with ``spec``."""
        full = f"{self.id}-{name}"
        self.plane.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": full, "namespace": NAMESPACE, "labels": self.labels},
                "spec": spec,
            }
        )
        return full

    def pod(
        self,
        name: str,
        scheduler: str,
        claims: dict[str, str] | None = None,
        templates: dict[str, str] | None = None,
        limits: dict[str, str] | None = None,
        node_selector: dict[str, str] | None = None,
    ) -> str:
        """A pod of ``scheduler`` pinned to this scene's nodes: ``claims`` and ``templates`` map
        the pod's claim names to ResourceClaims and ResourceClaimTemplates (full names); its one
        container uses them all and asks for ``limits``."""
        full = f"{self.id}-{name}"
        refs = [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
        refs += [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
        resources: dict[str, Any] = {"limits": limits or {}}
        if refs:
            resources["claims"] = [{"name": r["name"]} for r in refs]
        spec: dict[str, Any] = {
            "schedulerName": scheduler,
            "nodeSelector": {**self.labels, **(node_selector or {})},
            "containers": [{"name": "main", "image": "busybox", "resources": resources}],
        }
        if refs:
            spec["resourceClaims"] = refs
        self.plane.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": full, "namespace": NAMESPACE, "labels": self.labels},
                "spec": spec,
            }
        )
        return full

    def get_pod(self, name: str) -> dict[str, Any]:
        pod: dict[str, Any] = self.plane.request("GET", f"{PODS}/{name}")
        return pod

    def get_claim(self, name: str) -> dict[str, Any]:
        claim: dict[str, Any] = self.plane.request("GET", f"{CLAIMS}/{name}")
        return claim

    def pod_claims(self, pod: dict[str, Any]) -> list[str]:
        """The names of the claims a pod uses: its own, those the resourceclaim controller made
        from its templates, and kube-scheduler's extended-resource claim."""
        names = [
            r["resourceClaimName"]
            for r in pod["spec"].get("resourceClaims", [])
            if r.get("resourceClaimName")
        ]
        status = pod.get("status", {})
        names += [
            s["resourceClaimName"]
            for s in status.get("resourceClaimStatuses", [])
            if s.get("resourceClaimName")
        ]
        extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        return names + ([extended] if extended else [])

    def delete_pod(self, name: str) -> None:
        self._delete(f"{PODS}/{name}?gracePeriodSeconds=0")

    def remove_objects(self) -> None:
        """Delete this scene's pods, claims, templates, nodes and the nodes' slices."""
        selector = f"labelSelector=test%3D{self.id}"
        self._delete(f"{PODS}?{selector}&gracePeriodSeconds=0")
        for path in (CLAIMS, TEMPLATES):
            self._delete(f"{path}?{selector}")
        nodes = self.plane.request("GET", f"/api/v1/nodes?{selector}")["items"]
        for node in nodes:
            self.driver.unpublish(node["metadata"]["name"])
        self._delete(f"/api/v1/nodes?{selector}")

    def _delete(self, path: str) -> None:
        try:
            self.plane.delete(path)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

    # ---- waiting -----------------------------------------------------------------------------

    def verdict(self, pod: str, timeout_s: float = 30.0) -> Verdict:
        """Wait until the pod is bound with every claim allocated and reserved for it, or until
        it carries a PodScheduled=False condition; AssertionError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            last = self.get_pod(pod)
            node = last["spec"].get("nodeName", "")
            if node:
                devices = self._reserved_devices(last)
                if devices is not None:
                    return Verdict(node, devices=devices)
            else:
                for c in last.get("status", {}).get("conditions", []) or []:
                    if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
                        return Verdict("", message=str(c["message"]))
            time.sleep(0.2)
        raise AssertionError(
            f"no verdict on pod {pod} after {timeout_s:.0f} s: {last.get('status')}"
        )

    def _reserved_devices(
        self, pod: dict[str, Any]
    ) -> dict[str, list[tuple[str, str, str, str]]] | None:
        """Claim name -> allocated devices, once every claim of the pod is allocated and
        reserved for it; None before."""
        out = {}
        for name in self.pod_claims(pod):
            try:
                claim = self.get_claim(name)
            except urllib.error.HTTPError:
                return None
            status = claim.get("status", {})
            reserved = {r["uid"] for r in status.get("reservedFor", [])}
            allocation = status.get("allocation")
            if allocation is None or pod["metadata"]["uid"] not in reserved:
                return None
            out[name] = [
                (r["request"], r["driver"], r["pool"], r["device"])
                for r in allocation["devices"]["results"]
            ]
        return out

    def wait_running(self, pod: str, timeout_s: float = 30.0) -> None:
        """Until KWOK, the kubelet's stand-in, reports the pod Running (it prepares no claims:
        nothing but kube-scheduler's writes is needed for a DRA pod to run)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.get_pod(pod).get("status", {}).get("phase") == "Running":
                return
            time.sleep(0.2)
        raise AssertionError(f"pod {pod} not Running after {timeout_s:.0f} s")

    def wait_gone(self, path: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.plane.request("GET", path)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return
                raise
            time.sleep(0.2)
        raise AssertionError(f"{path} still exists after {timeout_s:.0f} s")
