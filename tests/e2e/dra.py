"""DRA on the local plane: claim pods, their claims and templates, and a scheduler's verdict.

The plane (scheduler/testing/controlplane.py) runs the resourceclaim controller, and the test
driver (scheduler/testing/dradriver.py) publishes NVIDIA-shaped ResourceSlices for KWOK nodes;
kube-scheduler (kubescheduler.py) allocates the claims of the pods that name it. ``DraScene`` is
one test's share of that: its own id, DRA-only KWOK nodes labelled ``test=<id>`` with their
slices, claims and templates labelled the same, and pods pinned to its nodes by that label.
``taint_rule`` adds a DeviceTaintRule on one of its nodes' pools. ``remove_objects`` deletes them
all (claims, slices and rules too: the garbage collector would only get to them once their pods
and nodes are gone, and a rule has no owner).

``verdict`` waits for a scheduler's decision on a pod: bound (to which node, with which devices in
which claims) or refused (its PodScheduled=False message). ``bindings_refused`` has some pods'
Bindings refused (a ValidatingAdmissionPolicy): a test stands between the claim writes and the
Binding. ``run_shape`` runs one claim shape of dra_shapes.py (its nodes, the pods scheduled
before it, then the probe) and returns the probe's verdict: with kube-scheduler, the oracle side
of the differential e2e; the same shape run with topo-scheduler must reach the same verdict.
"""

from __future__ import annotations

import contextlib
import time
import urllib.error
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.testing.controlplane import RESOURCE_API, ControlPlane
from scheduler.testing.dradriver import GPU_DRIVER, H100, V100, GpuModel, NvidiaDraDriver

NAMESPACE = "default"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
# adminAccess is allowed only in namespaces labelled so (kube-apiserver's validation); the plane
# runs no namespace controller to finish a namespace's deletion, so this one is created once and
# kept.
ADMIN_NAMESPACE = "dra-admin"
ADMIN_LABEL = "resource.kubernetes.io/admin-access"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"


TAINT_RULES = f"{RESOURCE_API}/devicetaintrules"
# How long a shape's DeviceTaintRules are given to reach both schedulers' watches before its pods
# are created (nothing on the API says a scheduler has seen a rule; a watch event takes
# milliseconds on the local plane).
RULE_SETTLE_S = 1.0


def pods_path(namespace: str = NAMESPACE) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def claims_path(namespace: str = NAMESPACE) -> str:
    return f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims"


def templates_path(namespace: str = NAMESPACE) -> str:
    return f"{RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates"


PODS = pods_path()
CLAIMS = claims_path()
TEMPLATES = templates_path()


def inventory(node: str, gpus: int = 8, stride: int = 1) -> dict[str, Any]:
    """A node inventory (``topo-scheduler.io/gpus``) of ``gpus`` GPUs with UUIDs: NVLink pairs
    (NV18 within, SYS across), as the agent publishes it. GPU ``i`` is paired with ``i ^ stride``:
    neighbours by default ((0, 1), (2, 3), ...), and with ``stride`` 4 on 8 GPUs (0, 4), (1, 5),
    ..., where the first devices in the slice's order are not NVLinked."""
    links = [
        ["X" if i == j else ("NV18" if i ^ stride == j else "SYS") for j in range(gpus)]
        for i in range(gpus)
    ]
    return {
        "vendor": "nvidia",
        "model": "NVIDIA-H100-80GB-HBM3",
        "devices": [{"index": i, "uuid": f"GPU-{node}-{i}"} for i in range(gpus)],
        "links": links,
    }


@dataclass(frozen=True)
class NodeKind:
    """A kind of node a shape runs on (``KINDS``)."""

    gpus: int
    model: GpuModel = H100
    mig: bool = False
    imex: bool = False
    shares: str = ""
    unhealthy: Mapping[int, str] = field(default_factory=dict)
    device_plugin: bool = False  # nvidia.com/gpu allocatable and no slices: not a DRA node
    stride: int = 1  # GPU i is NVLinked to GPU i ^ stride (``inventory``)


# The nodes of the claim shapes, by the letter a shape names them with.
KINDS: dict[str, NodeKind] = {
    "a": NodeKind(8, imex=True),  # 8 H100, 4 PCIe roots, 2 NUMA nodes, an IMEX channel
    "b": NodeKind(4, V100),  # 4 V100 32 GB
    "m": NodeKind(2, mig=True),  # 2 H100, partitionable (MIG profiles, counters)
    "s": NodeKind(2, shares="memory"),  # 2 H100 shared by memory (consumable capacity)
    "t": NodeKind(4, unhealthy={0: "79", 1: "79", 2: "79"}),  # 4 H100, 3 tainted (XID 79)
    "p": NodeKind(8, device_plugin=True),  # 8 nvidia.com/gpu from a device plugin
    "x": NodeKind(8, stride=4),  # 8 H100, NVLink pairs (0, 4), (1, 5), ...: not first in order
}


@dataclass
class Verdict:
    """A scheduler's decision on one pod."""

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
        self.namespaces = {NAMESPACE}

    def full(self, name: str) -> str:
        return f"{self.id}-{name}"

    # ---- objects -----------------------------------------------------------------------------

    def node(
        self, name: str, kind: NodeKind = KINDS["a"], labels: Mapping[str, str] | None = None
    ) -> str:
        """A KWOK node of ``kind`` with its inventory and, unless it is a device-plugin node,
        no ``nvidia.com/gpu`` allocatable and the driver's slices for the same GPUs; ``labels``
        besides the scene's (a clique's); returns its full name."""
        full = self.full(name)
        inv = inventory(full, kind.gpus, kind.stride)
        resource = "nvidia.com/gpu" if kind.device_plugin else None
        self.plane.create_gpu_node(
            full, inv, gpus=kind.gpus, resource=resource, labels={**self.labels, **(labels or {})}
        )
        if not kind.device_plugin:
            self.driver.publish_gpus(full, inv, kind.model, kind.mig, kind.shares, kind.unhealthy)
        if kind.imex:
            self.driver.publish_imex(full)
        return full

    def admin_namespace(self) -> str:
        """The namespace where claims may ask for admin access (created when missing)."""
        try:
            self.plane.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ADMIN_NAMESPACE, "labels": {ADMIN_LABEL: "true"}},
                }
            )
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise
        self.namespaces.add(ADMIN_NAMESPACE)
        return ADMIN_NAMESPACE

    def template(self, name: str, spec: dict[str, Any], namespace: str = NAMESPACE) -> str:
        """A ResourceClaimTemplate whose claims have ``spec`` (a ResourceClaimSpec)."""
        full = self.full(name)
        meta = {"name": full, "namespace": namespace, "labels": self.labels}
        self.plane.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": meta,
                "spec": {"spec": spec},
            }
        )
        return full

    def claim(self, name: str, spec: dict[str, Any], namespace: str = NAMESPACE) -> str:
        """A ResourceClaim with ``spec``."""
        full = self.full(name)
        meta = {"name": full, "namespace": namespace, "labels": self.labels}
        self.plane.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": meta,
                "spec": spec,
            }
        )
        return full

    def taint_rule(self, name: str, selector: dict[str, str] | None, taint: dict[str, str]) -> str:
        """A DeviceTaintRule adding ``taint`` to the devices ``selector`` picks (its driver,
        pool and device; None: no selector, which picks none)."""
        full = self.full(name)
        spec: dict[str, Any] = {"taint": taint}
        if selector is not None:
            spec["deviceSelector"] = selector
        self.plane.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": full, "labels": self.labels},
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
        namespace: str = NAMESPACE,
        labels: dict[str, str] | None = None,
    ) -> str:
        """A pod of ``scheduler`` pinned to this scene's nodes: ``claims`` and ``templates`` map
        the pod's claim names to ResourceClaims and ResourceClaimTemplates (full names); its one
        container uses them all and asks for ``limits``; ``labels`` besides the scene's (a
        gang's)."""
        full = self.full(name)
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
        meta = {"name": full, "namespace": namespace, "labels": {**self.labels, **(labels or {})}}
        self.plane.apply({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        return full

    def get_pod(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        pod: dict[str, Any] = self.plane.request("GET", f"{pods_path(namespace)}/{name}")
        return pod

    def get_claim(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        claim: dict[str, Any] = self.plane.request("GET", f"{claims_path(namespace)}/{name}")
        return claim

    @staticmethod
    def pod_claims(pod: dict[str, Any]) -> list[str]:
        """The names of the claims a pod uses: its own, those the resourceclaim controller made
        from its templates, and kube-scheduler's extended-resource claim."""
        refs = pod["spec"].get("resourceClaims", [])
        names = [r["resourceClaimName"] for r in refs if r.get("resourceClaimName")]
        status = pod.get("status", {})
        made = status.get("resourceClaimStatuses", [])
        names += [s["resourceClaimName"] for s in made if s.get("resourceClaimName")]
        extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        return names + ([extended] if extended else [])

    def delete_pod(self, name: str, namespace: str = NAMESPACE) -> None:
        self._delete(f"{pods_path(namespace)}/{name}?gracePeriodSeconds=0")

    def remove_objects(self) -> None:
        """Delete this scene's pods, claims, templates, DeviceTaintRules, nodes and the nodes'
        slices."""
        selector = f"labelSelector=test%3D{self.id}"
        self._delete(f"{TAINT_RULES}?{selector}")
        for ns in sorted(self.namespaces):
            self._delete(f"{pods_path(ns)}?{selector}&gracePeriodSeconds=0")
            for path in (claims_path(ns), templates_path(ns)):
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

    def verdict(self, pod: str, namespace: str = NAMESPACE, timeout_s: float = 30.0) -> Verdict:
        """Wait until the pod is bound with every claim allocated and reserved for it, or until
        it carries a PodScheduled=False condition; AssertionError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            last = self.get_pod(pod, namespace)
            node = last["spec"].get("nodeName", "")
            if node:
                devices = self._reserved_devices(last, namespace)
                if devices is not None:
                    return Verdict(node, devices=devices)
            else:
                for c in last.get("status", {}).get("conditions", []) or []:
                    message = str(c.get("message", ""))
                    if c["type"] != "PodScheduled" or c["status"] != "False" or not message:
                        continue
                    # Not a verdict: the pod waits for the resourceclaim controller, which
                    # topo-scheduler says on the pod (kube-scheduler's PreEnqueue keeps the pod
                    # out of its queue without a word); it is tried again once the claim is in.
                    if "to be created" not in message:
                        return Verdict("", message=message)
            time.sleep(0.2)
        status = last.get("status")
        raise AssertionError(f"no verdict on pod {pod} after {timeout_s:.0f} s: {status}")

    def _reserved_devices(
        self, pod: dict[str, Any], namespace: str
    ) -> dict[str, list[tuple[str, str, str, str]]] | None:
        """Claim name -> allocated devices, once every claim of the pod is allocated and
        reserved for it; None before."""
        out = {}
        for name in self.pod_claims(pod):
            try:
                claim = self.get_claim(name, namespace)
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

    def wait_running(self, pod: str, namespace: str = NAMESPACE, timeout_s: float = 30.0) -> None:
        """Until KWOK, the kubelet's stand-in, reports the pod Running (it prepares no claims:
        nothing but the scheduler's writes is needed for a DRA pod to run)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.get_pod(pod, namespace).get("status", {}).get("phase") == "Running":
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


# ---- Bindings refused ---------------------------------------------------------------------------


@contextlib.contextmanager
def bindings_refused(plane: ControlPlane, prefix: str) -> Iterator[None]:
    """A ValidatingAdmissionPolicy refusing every Binding of a pod whose name starts with
    ``prefix``, in force (checked with a pod of its own) until the block ends."""
    name = f"refuse-{prefix}"
    plane.request(
        "POST",
        f"{ADMISSION}/validatingadmissionpolicies",
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": f"!object.metadata.name.startsWith('{prefix}')",
                        "message": "this test refuses the Binding",
                        "reason": "Forbidden",
                    }
                ],
            },
        },
    )
    plane.request(
        "POST",
        f"{ADMISSION}/validatingadmissionpolicybindings",
        {
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    )
    try:
        _wait_refusing(plane, prefix)
        yield
    finally:
        plane.delete(f"{ADMISSION}/validatingadmissionpolicybindings/{name}")
        plane.delete(f"{ADMISSION}/validatingadmissionpolicies/{name}")


def _wait_refusing(plane: ControlPlane, prefix: str, timeout_s: float = 30.0) -> None:
    """Until a Binding of a pod named ``prefix``-check is refused (the apiserver loads a new
    policy a moment after it is created)."""
    pods = "/api/v1/namespaces/default/pods"
    deadline = time.monotonic() + timeout_s
    check = 0
    try:
        while time.monotonic() < deadline:
            name = f"{prefix}-check-{check}"
            plane.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name},
                    "spec": {
                        "schedulerName": "nobody",
                        "containers": [{"name": "main", "image": "busybox"}],
                    },
                }
            )
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name},
                "target": {"kind": "Node", "name": "nowhere"},
            }
            try:
                plane.request("POST", f"{pods}/{name}/binding", binding)
            except Exception as exc:  # the refusal: HTTP 403 with the policy's message
                if "403" in str(exc):
                    return
                raise
            check += 1  # bound (to no node): the policy is not in force yet
            time.sleep(0.2)
        raise AssertionError(f"the Binding policy for {prefix} never took effect")
    finally:
        for i in range(check + 1):
            plane.delete(f"{pods}/{prefix}-check-{i}?gracePeriodSeconds=0")


# ---- claim shapes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Use:
    """One claim of a pod: a new claim with ``spec``, through a ResourceClaimTemplate (the
    resourceclaim controller makes it) or, with ``name``, as a ResourceClaim of that name; or,
    with ``name`` and no ``spec``, the claim of that name an earlier pod of the shape made (a
    shared claim)."""

    spec: dict[str, Any] | None = None
    name: str = ""


@dataclass(frozen=True)
class PodShape:
    uses: tuple[Use, ...] = ()
    limits: Mapping[str, str] = field(default_factory=dict)
    on: str = ""  # pinned to the node of this kind (kubernetes.io/hostname)
    admin: bool = False  # in the admin-access namespace


@dataclass(frozen=True)
class TaintRule:
    """A DeviceTaintRule on the GPU pool of the shape's node of kind ``on``: every device of it,
    or only ``device``; ``selector`` False makes a rule without a device selector (it taints
    nothing)."""

    on: str
    key: str = "example.com/maintenance"
    effect: str = "NoSchedule"
    device: str = ""
    selector: bool = True


@dataclass(frozen=True)
class Shape:
    """Nodes (kinds of ``KINDS``, one node each), DeviceTaintRules on their devices, pods
    scheduled first (each must bind), the probe pod, and the verdict kube-scheduler v1.37.2
    reached on the plane: the kind of the node the probe went to, or "" when it was refused."""

    name: str
    nodes: str
    probe: PodShape
    expect: str
    before: tuple[PodShape, ...] = ()
    rules: tuple[TaintRule, ...] = ()


def run_shape(scene: DraScene, scheduler: str, shape: Shape, timeout_s: float = 30.0) -> Verdict:
    """Create the shape's nodes, schedule its ``before`` pods one at a time (each must be bound),
    then the probe; returns the probe's verdict."""
    for kind in shape.nodes:
        scene.node(kind, KINDS[kind])
    for i, rule in enumerate(shape.rules):
        selector = {"driver": GPU_DRIVER, "pool": scene.full(rule.on)}
        if rule.device:
            selector["device"] = rule.device
        taint = {"key": rule.key, "effect": rule.effect}
        scene.taint_rule(f"rule-{i}", selector if rule.selector else None, taint)
    if shape.rules:
        time.sleep(RULE_SETTLE_S)
    for i, before in enumerate(shape.before):
        first = _run_pod(scene, scheduler, f"before-{i}", before, timeout_s)
        assert first.feasible, f"{shape.name}: pod before-{i} refused: {first.message}"
    return _run_pod(scene, scheduler, "probe", shape.probe, timeout_s)


def _run_pod(
    scene: DraScene, scheduler: str, name: str, pod: PodShape, timeout_s: float
) -> Verdict:
    namespace = scene.admin_namespace() if pod.admin else NAMESPACE
    claims: dict[str, str] = {}
    templates: dict[str, str] = {}
    for i, use in enumerate(pod.uses):
        key = f"c{i}"
        if use.spec is None:
            claims[key] = scene.full(use.name)
        elif use.name:
            claims[key] = scene.claim(use.name, use.spec, namespace)
        else:
            templates[key] = scene.template(f"{name}-{key}", use.spec, namespace)
    selector = {"kubernetes.io/hostname": scene.full(pod.on)} if pod.on else None
    full = scene.pod(
        name, scheduler, claims, templates, dict(pod.limits), selector, namespace=namespace
    )
    return scene.verdict(full, namespace, timeout_s)
