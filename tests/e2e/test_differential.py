"""topo-scheduler against the real kube-scheduler: the same probe pods, the same cluster.

The oracle is kube-scheduler v1.37 (the plane's version, its default feature gates;
scheduler/testing/kubescheduler.py) with its own profile ``kube-oracle``. The cluster is KWOK GPU
nodes with zones, instance types, racks, taints, a cordon, small allocatables and background pods
bound directly (labels, host ports, cpu/memory/GPU/extended requests, required anti-affinity for
symmetry, a pod in a labelled namespace), a RuntimeClass with overhead, and a PersistentVolume
with node affinity bound to a claim.

Each probe asks for GPUs plus Kubernetes constraints, and runs alone (the cluster is the same for
every probe):

- our scheduler gets it first; it binds it to N, or reports ``PodScheduled=False Unschedulable``;
- bound to N: the probe is deleted and a copy for kube-scheduler is pinned to N (a
  ``matchFields metadata.name In [N]`` requirement added to each of its required node-affinity
  terms, or a term of its own), and kube-scheduler must bind it to N: N is feasible;
- pending: an unpinned copy must stay pending under kube-scheduler: no node is feasible.

Topology-spread probes are pinned with a volume instead: a claim bound to a PersistentVolume
whose node affinity is N's hostname. kube-scheduler honours the pod's node affinity when it
counts spread domains (``nodeAffinityPolicy: Honor``), so a node-affinity pin would shrink the
domains to N's and make every pinned copy fit; a volume restricts the node without changing the
counting.

``feasible`` documents, per probe, the nodes kube-scheduler accepts (checked against it when the
probes were written); the assertion is only the differential. A probe with an unbound claim must
stay pending under ours with a reason that names it, and is not compared (kube-scheduler would
provision or bind a volume).

v1.37's defaults have probes of their own, on two nodes tainted ``v137`` that no other probe
tolerates (and without a zone, so that no spread probe counts them): ``r1``, whose background pod
is being resized in place (its spec asks 1 cpu, its kubelet actuated 3: the node is charged 3);
``f1``, which declares the node feature ``RestartAllContainersOnContainerExits``. Pod-level
``spec.resources`` probes run on a2; the DRA probes use a ResourceClaim kube-scheduler allocated
(a device of a ResourceSlice on b3, for a seed pod it bound there: the allocation's node selector
is b3), and one nobody allocated (the only device is taken).

Every disagreement is collected and reported at the end, in one failure: a to-do list.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from scheduler.testing.controlplane import ControlPlane, ControlPlaneError
from scheduler.testing.kubescheduler import KubeScheduler

from .live import Scenario

ORACLE = "kube-oracle"
ZONE = "topology.kubernetes.io/zone"
TYPE = "node.kubernetes.io/instance-type"
HOST = "kubernetes.io/hostname"
RACK = "rack"
GPU = "nvidia.com/gpu"
FOO = "example.com/foo"

OURS_TIMEOUT_S = 30.0
ORACLE_TIMEOUT_S = 30.0


@pytest.fixture
def oracle(control_plane: ControlPlane) -> Iterator[KubeScheduler]:
    """kube-scheduler with the profile ``kube-oracle``; a missing binary or a failed start fails
    the test (never a skip)."""
    scheduler = KubeScheduler(control_plane, ORACLE)
    try:
        scheduler.start()
    except ControlPlaneError as exc:
        pytest.fail(f"cannot start kube-scheduler: {exc}", pytrace=False)
    try:
        yield scheduler
    finally:
        scheduler.stop()


# ---- the cluster -----------------------------------------------------------------------------


@dataclass
class World:
    plane: ControlPlane
    id: str
    nodes: dict[str, str] = field(default_factory=dict)  # short name -> node name

    def n(self, short: str) -> str:
        return self.nodes[short]

    def short(self, node: str) -> str:
        return node.removeprefix(f"{self.id}-")

    def ns(self, team: str) -> str:
        return f"{self.id}-team-{team}"

    @property
    def runtime_class(self) -> str:
        return f"{self.id}-kata"

    @property
    def device_class(self) -> str:
        return f"{self.id}-{NIC_CLASS}"

    def claim(self, name: str) -> str:
        return f"{self.id}-{name}"

    def pin_claim(self, node: str) -> str:
        return f"{self.id}-pin-{self.short(node)}"

    def selector(self, **labels: str) -> dict[str, Any]:
        """A label selector for this test's pods only (other tests share the plane)."""
        return {"matchLabels": {"test": self.id, **labels}}


# short name: (zone, instance type, rack, GPUs, cpu, memory, pods, taints, cordoned, extra)
NODES: dict[str, tuple[Any, ...]] = {
    "a1": ("zone-a", "h100", "3", 8, "64", "256Gi", "110",
           [{"key": "maint", "value": "soon", "effect": "PreferNoSchedule"}], False, {FOO: "2"}),
    "a2": ("zone-a", "a100", "7", 8, "16", "64Gi", "110", [], False, {}),
    "b1": ("zone-b", "a100", "12", 4, "32", "128Gi", "110",
           [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}], False, {}),
    "b2": ("zone-b", "v100", "1", 8, "64", "256Gi", "110", [], True, {}),
    "b3": ("zone-b", "h100", "10", 8, "64", "256Gi", "110", [], False, {}),
    "c1": ("zone-c", "h100", "9", 8, "64", "256Gi", "1", [], False, {}),
    "c2": ("zone-c", "v100", "5", 2, "8", "32Gi", "110",
           [{"key": "gpu", "value": "shared", "effect": "NoExecute"}], False, {}),
    "c3": ("zone-c", "a100", "4", 8, "32", "128Gi", "110", [], False, {}),
    "plain": (None, None, "spare", 8, "64", "256Gi", "110", [], False, {}),
    "r1": (None, "l4", "20", 2, "4", "16Gi", "110",
           [{"key": "v137", "value": "resize", "effect": "NoSchedule"}], False, {}),
    "f1": (None, "l4", "21", 2, "8", "32Gi", "110",
           [{"key": "v137", "value": "features", "effect": "NoSchedule"}], False, {}),
}  # fmt: skip
# status.declaredFeatures (NodeDeclaredFeatures; KWOK nodes declare none of their own).
DECLARED = {"f1": ["RestartAllContainersOnContainerExits"]}
NIC_CLASS = "nic.example.com"


def create_node(world: World, short: str) -> None:
    zone, itype, rack, gpus, cpu, memory, pods, taints, cordoned, extra = NODES[short]
    name = f"{world.id}-{short}"
    labels = {HOST: name, "type": "kwok", "test": world.id, RACK: rack}
    if zone:
        labels[ZONE] = zone
    if itype:
        labels[TYPE] = itype
    inventory = {"vendor": "nvidia", "devices": [{"index": i} for i in range(gpus)]}
    capacity = {"cpu": cpu, "memory": memory, "pods": pods, GPU: str(gpus), **extra}
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if cordoned:
        spec["unschedulable"] = True
    world.plane.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {
                    "kwok.x-k8s.io/node": "fake",
                    "topo-scheduler.io/gpus": json.dumps(inventory),
                },
            },
            "spec": spec,
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                **({"declaredFeatures": DECLARED[short]} if short in DECLARED else {}),
            },
        }
    )
    world.nodes[short] = name


def container(
    name: str = "main",
    gpus: int = 1,
    cpu: str | None = None,
    memory: str | None = None,
    limits: dict[str, str] | None = None,
    ports: list[dict[str, Any]] | None = None,
    restart_always: bool = False,
) -> dict[str, Any]:
    requests: dict[str, str] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    lim: dict[str, str] = {GPU: str(gpus)} if gpus else {}
    lim.update(limits or {})
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if lim:
        resources["limits"] = lim
    c: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if ports:
        c["ports"] = ports
    if restart_always:
        c["restartPolicy"] = "Always"
    return c


def port(host_port: int, protocol: str = "TCP", host_ip: str | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {"containerPort": host_port, "hostPort": host_port, "protocol": protocol}
    if host_ip:
        p["hostIP"] = host_ip
    return p


def background_pod(
    world: World,
    name: str,
    node: str,
    labels: dict[str, str],
    containers: list[dict[str, Any]] | None = None,
    namespace: str = "default",
    affinity: dict[str, Any] | None = None,
) -> None:
    spec: dict[str, Any] = {
        "nodeName": world.n(node),
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 0,
        "containers": containers or [container("main", gpus=0)],
    }
    if affinity:
        spec["affinity"] = affinity
    world.plane.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{world.id}-{name}",
                "namespace": namespace,
                "labels": {"test": world.id, **labels},
            },
            "spec": spec,
        }
    )


def bound_claim(world: World, name: str, node_terms: list[dict[str, Any]]) -> None:
    """A PersistentVolume with node affinity bound to a claim ``name`` in default, as the
    controller-manager leaves them (no controller runs here): claimRef with the claim's UID,
    the bind annotations, both statuses Bound."""
    plane = world.plane
    claim = plane.request(
        "POST",
        "/api/v1/namespaces/default/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": name,
                "namespace": "default",
                "annotations": {
                    "pv.kubernetes.io/bind-completed": "yes",
                    "pv.kubernetes.io/bound-by-controller": "yes",
                },
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    plane.request(
        "POST",
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": name,
                "labels": {"test": world.id},
                "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"},
            },
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": f"/tmp/{name}"},
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": "default",
                    "name": name,
                    "uid": claim["metadata"]["uid"],
                },
                "nodeAffinity": {"required": {"nodeSelectorTerms": node_terms}},
            },
        },
    )
    merge = "application/merge-patch+json"
    plane.request(
        "PATCH",
        f"/api/v1/persistentvolumes/{name}/status",
        {"status": {"phase": "Bound"}},
        content_type=merge,
    )
    plane.request(
        "PATCH",
        f"/api/v1/namespaces/default/persistentvolumeclaims/{name}/status",
        {
            "status": {
                "phase": "Bound",
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"},
            }
        },
        content_type=merge,
    )


def resource_claim(world: World, name: str) -> None:
    """A ResourceClaim asking one device of the test's DeviceClass, not allocated."""
    world.plane.request(
        "POST",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "labels": {"test": world.id}},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "nic", "exactly": {"deviceClassName": world.device_class}}
                    ]
                }
            },
        },
    )


def dra_on_b3(world: World) -> None:
    """A DRA driver's ResourceSlice with one device on b3, the DeviceClass, and two claims:
    ``nic-b3``, which kube-scheduler allocates (for a seed pod it binds to b3: a real allocation,
    node selector and all), and ``nic-free``, which nobody allocates (the one device is taken)."""
    plane = world.plane
    plane.request(
        "POST",
        "/apis/resource.k8s.io/v1/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": world.device_class},
            "spec": {},
        },
    )
    plane.request(
        "POST",
        "/apis/resource.k8s.io/v1/resourceslices",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{world.id}-b3-nics"},
            "spec": {
                "driver": NIC_CLASS,
                "pool": {"name": world.n("b3"), "generation": 1, "resourceSliceCount": 1},
                "nodeName": world.n("b3"),
                "devices": [{"name": "nic-0"}],
            },
        },
    )
    resource_claim(world, world.claim("nic-b3"))
    resource_claim(world, world.claim("nic-free"))
    seed = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{world.id}-nic-seed",
            "namespace": "default",
            "labels": {"test": world.id, "app": "nic-seed"},
        },
        "spec": {
            "schedulerName": ORACLE,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"test": world.id, HOST: world.n("b3")},
            "containers": [container("main", gpus=0)],
            "resourceClaims": [{"name": "nic", "resourceClaimName": world.claim("nic-b3")}],
        },
    }
    plane.apply(seed)


async def wait_allocated(world: World, name: str) -> None:
    path = f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{name}"
    deadline = time.monotonic() + ORACLE_TIMEOUT_S
    while not world.plane.request("GET", path).get("status", {}).get("allocation"):
        if time.monotonic() > deadline:
            raise AssertionError(f"kube-scheduler did not allocate ResourceClaim {name}")
        await asyncio.sleep(0.2)


def resize_in_place(world: World, name: str, actuated: dict[str, str]) -> None:
    """What a kubelet reports while it resizes a Running pod: its container ``main`` runs (and
    was allocated) with ``actuated``, whatever the spec asks now."""
    path = pod_path("default", f"{world.id}-{name}")
    pod = world.plane.request("GET", path)
    statuses = pod["status"]["containerStatuses"]
    for status in statuses:
        if status["name"] == "main":
            status["resources"] = {"requests": actuated}
            status["allocatedResources"] = actuated
    world.plane.request(
        "PATCH",
        f"{path}/status",
        {"status": {"containerStatuses": statuses}},
        content_type="application/merge-patch+json",
    )


def build_world(plane: ControlPlane, test_id: str) -> World:
    world = World(plane, test_id)
    for team in ("a", "b"):
        plane.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": world.ns(team), "labels": {"team": team, "diff": test_id}},
            }
        )
    for short in NODES:
        create_node(world, short)
    plane.request(
        "POST",
        "/apis/node.k8s.io/v1/runtimeclasses",
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": world.runtime_class},
            "handler": "runc",
            "overhead": {"podFixed": {"cpu": "2", "memory": "1Gi"}},
        },
    )
    # a1: a web pod with host port 8080/TCP on every address; one of two example.com/foo used.
    background_pod(
        world, "web-1", "a1", {"app": "web", "group": "g1"},
        [container("main", gpus=0, cpu="2", ports=[port(8080)])],
    )  # fmt: skip
    background_pod(
        world, "foo-user", "a1", {"app": "foo"}, [container("main", gpus=0, limits={FOO: "1"})]
    )
    background_pod(world, "s1", "a1", {"app": "spread", "version": "v1"})
    # a2: a database using 12 of 16 cpus and 48 of 64Gi, ports 5432/TCP on 127.0.0.1, 9000/UDP.
    background_pod(
        world, "db", "a2", {"app": "db"},
        [container("main", gpus=0, cpu="12", memory="48Gi",
                   ports=[port(5432, host_ip="127.0.0.1"), port(9000, "UDP")])],
    )  # fmt: skip
    background_pod(world, "s3", "a2", {"app": "spread", "version": "v1"})
    # b1 (tainted): a cache in namespace team-a; a guard that keeps app=etl out of its zone.
    background_pod(world, "cache", "b1", {"app": "cache"}, namespace=world.ns("a"))
    background_pod(
        world, "zone-guard", "b1", {"app": "guard"},
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": world.selector(app="etl"), "topologyKey": ZONE}]}},
    )  # fmt: skip
    # b3: another web pod, a loner that keeps app=batch (of its namespace) off its node.
    background_pod(world, "web-2", "b3", {"app": "web", "group": "g2"})
    background_pod(
        world, "loner", "b3", {"app": "loner"},
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": world.selector(app="batch"), "topologyKey": HOST}]}},
    )  # fmt: skip
    background_pod(world, "s2", "b3", {"app": "spread", "version": "v1"})
    # c1: its only pod slot taken. c3: 6 of its 8 GPUs used by a pod the scheduler never saw.
    background_pod(world, "filler", "c1", {"app": "filler"})
    background_pod(world, "gpu-hog", "c3", {"app": "hog"}, [container("main", gpus=6)])
    # Volumes: a claim bound to a volume in zone-c, a claim bound to nothing, and one pinning
    # claim per node (the spread probes' kube-scheduler copies).
    bound_claim(
        world,
        world.claim("data"),
        [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-c"]}]}],
    )
    for node in world.nodes.values():
        bound_claim(
            world,
            world.pin_claim(node),
            [{"matchExpressions": [{"key": HOST, "operator": "In", "values": [node]}]}],
        )
    # r1: a pod asking 1 cpu, resized in place to 3 (resize_in_place, once it runs).
    background_pod(world, "resized", "r1", {"app": "resized"}, [container("main", 0, cpu="1")])
    dra_on_b3(world)
    plane.request(
        "POST",
        "/api/v1/namespaces/default/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": world.claim("unbound"), "namespace": "default"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": f"{test_id}-none",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    return world


async def wait_background_running(world: World) -> None:
    """KWOK runs the background pods; both schedulers start with them Running."""
    deadline = time.monotonic() + 60
    pending: list[str] = []
    while time.monotonic() < deadline:
        listed = world.plane.request("GET", f"/api/v1/pods?labelSelector=test%3D{world.id}")
        pending = [
            p["metadata"]["name"]
            for p in listed["items"]
            if p.get("status", {}).get("phase") != "Running"
        ]
        if not pending:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"background pods not Running: {pending}")


# ---- the probes ------------------------------------------------------------------------------


@dataclass
class Probe:
    name: str
    spec: dict[str, Any]  # pod spec fields; nodeSelector test=<id> and schedulerName are added
    feasible: tuple[str, ...]  # short names of the nodes kube-scheduler accepts
    labels: dict[str, str] = field(default_factory=dict)
    namespace: str = "default"
    unbound_claim: bool = False

    @property
    def spread(self) -> bool:
        return bool(self.spec.get("topologySpreadConstraints"))


BASE = ("a1", "a2", "b3", "c3", "plain")  # where a plain 1-GPU pod fits


def probes(w: World) -> list[Probe]:
    def on(short: str) -> dict[str, Any]:
        """Required node affinity: only this node (matchFields take exactly one value)."""
        field_req = {"key": "metadata.name", "operator": "In", "values": [w.n(short)]}
        return required([{"matchFields": [field_req]}])

    def required(terms: list[dict[str, Any]]) -> dict[str, Any]:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}  # fmt: skip

    def expr(key: str, op: str, *values: str) -> dict[str, Any]:
        e: dict[str, Any] = {"key": key, "operator": op}
        if values:
            e["values"] = list(values)
        return e

    def exprs(*e: dict[str, Any]) -> dict[str, Any]:
        return required([{"matchExpressions": list(e)}])

    def main(**kw: Any) -> list[dict[str, Any]]:
        return [container("main", **kw)]

    def tol(key: str, value: str | None, effect: str | None) -> dict[str, Any]:
        t: dict[str, Any] = {"key": key, "operator": "Equal" if value else "Exists"}
        if value:
            t["value"] = value
        if effect:
            t["effect"] = effect
        return t

    def pod_term(
        topology: str, app: str, **extra: Any
    ) -> dict[str, Any]:  # a required pod (anti-)affinity term
        return {"labelSelector": w.selector(app=app), "topologyKey": topology, **extra}

    def affinity(*terms: dict[str, Any], anti: bool = False, **more: Any) -> dict[str, Any]:
        kind = "podAntiAffinity" if anti else "podAffinity"
        return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}, **more}

    def spread(topology: str, skew: int, **extra: Any) -> list[dict[str, Any]]:
        return [{
            "maxSkew": skew, "topologyKey": topology, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": w.selector(app="spread"), **extra}]  # fmt: skip

    def vol(claim: str) -> list[dict[str, Any]]:
        return [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]

    def claim(name: str) -> list[dict[str, Any]]:
        return [{"name": "nic", "resourceClaimName": name}]

    def restart_all() -> dict[str, Any]:
        """A container whose exit with code 42 restarts the whole pod in place."""
        rule = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
        return {**container("main"), "restartPolicy": "Never", "restartPolicyRules": [rule]}

    resize = tol("v137", "resize", "NoSchedule")
    features = tol("v137", "features", "NoSchedule")
    dedicated = tol("dedicated", "ml", "NoSchedule")
    shared = tol("gpu", "shared", "NoExecute")
    C = container
    P = Probe
    return [
        # ---- resources: GPUs, cpu, memory, pods, extended resources -----------------------
        P("plain-gpu", {"containers": main()}, BASE),
        P("gpus-4", {"containers": main(gpus=4)}, ("a1", "a2", "b3", "plain")),
        P("gpus-4-on-c3", {"containers": main(gpus=4), "affinity": on("c3")}, ()),
        P("gpus-2-on-c3", {"containers": main(gpus=2), "affinity": on("c3")}, ("c3",)),
        P("gpus-16", {"containers": main(gpus=16)}, ()),
        P("cpu-6-on-a2", {"containers": main(cpu="6"), "affinity": on("a2")}, ()),
        P("cpu-3-on-a2", {"containers": main(cpu="3"), "affinity": on("a2")}, ("a2",)),
        P("mem-20gi-on-a2", {"containers": main(memory="20Gi"), "affinity": on("a2")}, ()),
        P("cpu-40", {"containers": main(cpu="40")}, ("a1", "b3", "plain")),
        P("cpu-1000", {"containers": main(cpu="1000")}, ()),
        P("pods-full-c1", {"containers": main(), "affinity": on("c1")}, ()),
        P("foo-1", {"containers": main(limits={FOO: "1"})}, ("a1",)),
        P("foo-2", {"containers": main(limits={FOO: "2"})}, ()),
        P("bar-1", {"containers": main(limits={"example.com/bar": "1"})}, ()),
        # init containers, sidecars (restartPolicy Always) and overhead: 4 cpus free on a2
        P("init-6-on-a2", {"containers": main(cpu="1"), "affinity": on("a2"),
                           "initContainers": [C("init", gpus=0, cpu="6")]}, ()),
        P("init-3-main-3-on-a2", {"containers": main(cpu="3"), "affinity": on("a2"),
                                  "initContainers": [C("init", gpus=0, cpu="3")]}, ("a2",)),
        P("sidecar-2-main-3-on-a2", {
            "containers": main(cpu="3"), "affinity": on("a2"),
            "initContainers": [C("side", gpus=0, cpu="2", restart_always=True)]}, ()),
        P("sidecar-1-main-2-on-a2", {
            "containers": main(cpu="2"), "affinity": on("a2"),
            "initContainers": [C("side", gpus=0, cpu="1", restart_always=True)]}, ("a2",)),
        P("sidecar-then-init-on-a2", {
            "containers": main(cpu="1"), "affinity": on("a2"),
            "initContainers": [C("side", gpus=0, cpu="1", restart_always=True),
                               C("init", gpus=0, cpu="3500m")]}, ()),
        P("init-then-sidecar-on-a2", {
            "containers": main(cpu="1"), "affinity": on("a2"),
            "initContainers": [C("init", gpus=0, cpu="3500m"),
                               C("side", gpus=0, cpu="1", restart_always=True)]}, ("a2",)),
        P("overhead-2-main-3-on-a2", {"containers": main(cpu="3"), "affinity": on("a2"),
                                      "runtimeClassName": w.runtime_class}, ()),
        P("overhead-2-main-1-on-a2", {"containers": main(cpu="1"), "affinity": on("a2"),
                                      "runtimeClassName": w.runtime_class}, ("a2",)),
        # ---- node affinity, nodeSelector ------------------------------------------------------
        P("rack-gt-8", {"containers": main(), "affinity": exprs(expr(RACK, "Gt", "8"))},
          ("b3",)),
        P("rack-lt-4", {"containers": main(), "affinity": exprs(expr(RACK, "Lt", "4"))},
          ("a1",)),
        P("type-v100", {"containers": main(), "affinity": exprs(expr(TYPE, "In", "v100"))},
          ()),
        P("type-v100-tolerates-shared", {
            "containers": main(), "affinity": exprs(expr(TYPE, "In", "v100")),
            "tolerations": [shared]}, ("c2",)),
        P("type-notin-a100-h100", {
            "containers": main(), "affinity": exprs(expr(TYPE, "NotIn", "a100", "h100"))},
          ("plain",)),
        P("type-does-not-exist", {
            "containers": main(), "affinity": exprs(expr(TYPE, "DoesNotExist"))}, ("plain",)),
        P("rack-gt-0-no-type", {"containers": main(), "affinity": exprs(
            expr(RACK, "Gt", "0"), expr(TYPE, "DoesNotExist"))}, ()),
        P("zone-exists-rack-lt-5", {"containers": main(), "affinity": exprs(
            expr(ZONE, "Exists"), expr(RACK, "Lt", "5"))}, ("a1", "c3")),
        P("two-terms-or", {"containers": main(), "affinity": required([
            {"matchExpressions": [expr(ZONE, "In", "zone-x")]},
            {"matchFields": [expr("metadata.name", "In", w.n("b3"))]}])}, ("b3",)),
        P("name-notin", {"containers": main(), "affinity": required([{"matchFields": [
            expr("metadata.name", "NotIn", w.n(s)) for s in ("a1", "a2", "b3", "c3")]}])},
          ("plain",)),
        P("selector-h100", {"containers": main(), "nodeSelector": {TYPE: "h100"}},
          ("a1", "b3")),
        P("selector-tpu", {"containers": main(), "nodeSelector": {TYPE: "tpu"}}, ()),
        P("preferred-only", {"containers": main(), "affinity": {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
                "matchExpressions": [expr(ZONE, "In", "zone-x")]}}]}}}, BASE),
        # ---- taints, tolerations, cordon ------------------------------------------------------
        P("tainted-b1", {"containers": main(), "affinity": on("b1")}, ()),
        P("tolerates-dedicated", {"containers": main(), "affinity": on("b1"),
                                  "tolerations": [dedicated]}, ("b1",)),
        P("tolerates-dedicated-exists", {"containers": main(), "affinity": on("b1"),
                                         "tolerations": [tol("dedicated", None, None)]},
          ("b1",)),
        P("tolerates-wrong-value", {"containers": main(), "affinity": on("b1"),
                                    "tolerations": [tol("dedicated", "other", "NoSchedule")]},
          ()),
        P("tolerates-wrong-effect", {"containers": main(), "affinity": on("b1"),
                                     "tolerations": [tol("dedicated", "ml", "NoExecute")]}, ()),
        P("cordoned-b2", {"containers": main(), "affinity": on("b2")}, ()),
        P("tolerates-unschedulable", {
            "containers": main(), "affinity": on("b2"),
            "tolerations": [tol("node.kubernetes.io/unschedulable", None, "NoSchedule")]},
          ("b2",)),
        # ---- host ports -----------------------------------------------------------------------
        P("port-8080-tcp-on-a1", {"containers": main(ports=[port(8080)]),
                                  "affinity": on("a1")}, ()),
        P("port-8080-udp-on-a1", {"containers": main(ports=[port(8080, "UDP")]),
                                  "affinity": on("a1")}, ("a1",)),
        P("port-8080-sidecar-on-a1", {
            "containers": main(), "affinity": on("a1"),
            "initContainers": [C("side", gpus=0, restart_always=True, ports=[port(8080)])]}, ()),
        P("port-5432-other-ip-on-a2", {
            "containers": main(ports=[port(5432, host_ip="127.0.0.2")]), "affinity": on("a2")},
          ("a2",)),
        P("port-5432-any-ip-on-a2", {"containers": main(ports=[port(5432)]),
                                     "affinity": on("a2")}, ()),
        P("port-5432-same-ip-on-a2", {
            "containers": main(ports=[port(5432, host_ip="127.0.0.1")]), "affinity": on("a2")},
          ()),
        P("port-9000-udp-on-a2", {"containers": main(ports=[port(9000, "UDP")]),
                                  "affinity": on("a2")}, ()),
        P("port-9000-tcp-on-a2", {"containers": main(ports=[port(9000)]),
                                  "affinity": on("a2")}, ("a2",)),
        # ---- inter-pod affinity and anti-affinity ---------------------------------------------
        P("with-web-host", {"containers": main(), "affinity": affinity(pod_term(HOST, "web"))},
          ("a1", "b3")),
        P("with-web-host-a100", {"containers": main(), "nodeSelector": {TYPE: "a100"},
                                 "affinity": affinity(pod_term(HOST, "web"))}, ()),
        P("with-web-zone-a100", {"containers": main(), "nodeSelector": {TYPE: "a100"},
                                 "affinity": affinity(pod_term(ZONE, "web"))}, ("a2",)),
        P("without-web-zone", {"containers": main(),
                               "affinity": affinity(pod_term(ZONE, "web"), anti=True)},
          ("c3", "plain")),
        P("without-web-host", {"containers": main(),
                               "affinity": affinity(pod_term(HOST, "web"), anti=True)},
          ("a2", "c3", "plain")),
        P("symmetry-batch-on-b3", {"containers": main(), "affinity": on("b3")}, (),
          labels={"app": "batch"}),
        P("symmetry-batch-other-ns-on-b3", {"containers": main(), "affinity": on("b3")},
          ("b3",), labels={"app": "batch"}, namespace=w.ns("b")),
        P("symmetry-etl-zone-b", {"containers": main(), "nodeSelector": {ZONE: "zone-b"}}, (),
          labels={"app": "etl"}),
        P("with-cache-namespaces", {"containers": main(), "affinity": affinity(
            pod_term(ZONE, "cache", namespaces=[w.ns("a")]))}, ("b3",)),
        P("with-cache-ns-selector", {"containers": main(), "affinity": affinity(
            pod_term(ZONE, "cache", namespaceSelector={"matchLabels": {"team": "a"}}))},
          ("b3",)),
        P("with-cache-ns-selector-b", {"containers": main(), "affinity": affinity(
            pod_term(ZONE, "cache", namespaceSelector={"matchLabels": {"team": "b"}}))}, ()),
        P("with-cache-all-ns-host", {"containers": main(), "tolerations": [dedicated],
                                     "affinity": affinity(
                                         pod_term(HOST, "cache", namespaceSelector={}))},
          ("b1",)),
        P("with-cache-own-ns", {"containers": main(),
                                "affinity": affinity(pod_term(ZONE, "cache"))}, ()),
        P("with-cache-from-team-b", {"containers": main(), "affinity": affinity(
            pod_term(ZONE, "cache", namespaceSelector={"matchLabels": {"team": "a"}}))},
          ("b3",), namespace=w.ns("b")),
        P("with-self-first", {"containers": main(),
                              "affinity": affinity(pod_term(HOST, "fresh"))}, BASE,
          labels={"app": "fresh"}),
        P("with-self-other-ns", {"containers": main(), "affinity": affinity(
            pod_term(HOST, "fresh", namespaces=[w.ns("b")]))}, (), labels={"app": "fresh"}),
        P("with-web-match-label-keys", {"containers": main(), "affinity": affinity(
            pod_term(HOST, "web", matchLabelKeys=["group"]))}, ("a1",),
          labels={"group": "g1"}),
        P("with-web-mismatch-label-keys", {"containers": main(), "affinity": affinity(
            pod_term(HOST, "web", mismatchLabelKeys=["group"]))}, ("b3",),
          labels={"group": "g1"}),
        # ---- topology spread (zone-a 2 spread pods, zone-b 1, zone-c 0) ----------------------
        P("spread-zone-skew-1", {"containers": main(),
                                 "topologySpreadConstraints": spread(ZONE, 1)}, ("c3",),
          labels={"app": "spread", "version": "v1"}),
        P("spread-zone-skew-2", {"containers": main(),
                                 "topologySpreadConstraints": spread(ZONE, 2)}, ("b3", "c3"),
          labels={"app": "spread", "version": "v1"}),
        P("spread-zone-match-label-keys", {
            "containers": main(),
            "topologySpreadConstraints": spread(ZONE, 1, matchLabelKeys=["version"])},
          ("a1", "a2", "b3", "c3"), labels={"app": "spread", "version": "v2"}),
        P("spread-zone-ab-skew-1", {
            "containers": main(), "affinity": exprs(expr(ZONE, "NotIn", "zone-c")),
            "topologySpreadConstraints": spread(ZONE, 1)}, ("b3",),
          labels={"app": "spread", "version": "v1"}),
        P("spread-zone-ab-min-domains-3", {
            "containers": main(), "affinity": exprs(expr(ZONE, "NotIn", "zone-c")),
            "topologySpreadConstraints": spread(ZONE, 1, minDomains=3)}, (),
          labels={"app": "spread", "version": "v1"}),
        P("spread-host-zone-a-min-domains-2", {
            "containers": main(), "nodeSelector": {ZONE: "zone-a"},
            "topologySpreadConstraints": spread(HOST, 1, minDomains=2)}, ("a1", "a2"),
          labels={"app": "spread", "version": "v1"}),
        P("spread-host-zone-a-min-domains-3", {
            "containers": main(), "nodeSelector": {ZONE: "zone-a"},
            "topologySpreadConstraints": spread(HOST, 1, minDomains=3)}, (),
          labels={"app": "spread", "version": "v1"}),
        P("spread-schedule-anyway", {"containers": main(), "topologySpreadConstraints": [
            {**spread(ZONE, 1)[0], "whenUnsatisfiable": "ScheduleAnyway"}]}, BASE,
          labels={"app": "spread", "version": "v1"}),
        # ---- v1.37: pod-level resources (a2: 4 cpus, 16Gi free) -------------------------------
        P("pod-level-cpu-3-on-a2", {"containers": main(), "affinity": on("a2"),
                                    "resources": {"requests": {"cpu": "3"}}}, ("a2",)),
        P("pod-level-cpu-5-on-a2", {"containers": main(), "affinity": on("a2"),
                                    "resources": {"requests": {"cpu": "5"}}}, ()),
        P("pod-level-mem-20gi-on-a2", {
            "containers": main(memory="1Gi"), "affinity": on("a2"),
            "resources": {"requests": {"memory": "20Gi"}}}, ()),
        # ---- v1.37: a bound pod resized in place (r1: 4 cpus, the resized pod runs at 3) -------
        P("resized-cpu-1-on-r1", {"containers": main(cpu="1"), "tolerations": [resize]},
          ("r1",)),
        P("resized-cpu-2-on-r1", {"containers": main(cpu="2"), "affinity": on("r1"),
                                  "tolerations": [resize]}, ()),
        # ---- v1.37: DRA (an allocated claim for b3; one nobody allocated) ----------------------
        P("claim-allocated-for-b3", {"containers": main(),
                                     "resourceClaims": claim(w.claim("nic-b3"))}, ("b3",)),
        P("claim-allocated-for-b3-on-a1", {
            "containers": main(), "affinity": on("a1"),
            "resourceClaims": claim(w.claim("nic-b3"))}, ()),
        P("claim-unallocated", {"containers": main(),
                                "resourceClaims": claim(w.claim("nic-free"))}, ()),
        # ---- v1.37: NodeDeclaredFeatures (f1 declares RestartAllContainersOnContainerExits) -----
        P("restart-all-on-f1", {"containers": [restart_all()], "tolerations": [features]},
          ("f1",)),
        P("restart-all-undeclared", {"containers": [restart_all()]}, ()),
        # ---- volumes --------------------------------------------------------------------------
        P("claim-zone-c", {"containers": main(), "volumes": vol(w.claim("data"))}, ("c3",)),
        P("claim-zone-c-h100", {"containers": main(), "volumes": vol(w.claim("data")),
                                "nodeSelector": {TYPE: "h100"}}, ()),
        P("claim-zone-c-tolerates-shared", {
            "containers": main(), "volumes": vol(w.claim("data")), "tolerations": [shared],
            "nodeSelector": {TYPE: "v100"}}, ("c2",)),
        P("claim-missing", {"containers": main(), "volumes": vol(w.claim("missing"))}, ()),
        P("claim-unbound", {"containers": main(), "volumes": vol(w.claim("unbound"))}, (),
          unbound_claim=True),
    ]  # fmt: skip


# ---- pods of either scheduler ----------------------------------------------------------------


def pod_object(
    w: World, probe: Probe, scheduler: str, name: str, pin: str | None = None
) -> dict[str, Any]:
    spec = copy.deepcopy(probe.spec)
    spec["schedulerName"] = scheduler
    spec["terminationGracePeriodSeconds"] = 0
    spec["nodeSelector"] = {**spec.get("nodeSelector", {}), "test": w.id}
    if pin is not None and probe.spread:
        # A volume pin: node affinity would change how kube-scheduler counts spread domains.
        spec.setdefault("volumes", []).append(
            {"name": "pin", "persistentVolumeClaim": {"claimName": w.pin_claim(pin)}}
        )
    elif pin is not None:
        field_req = {"key": "metadata.name", "operator": "In", "values": [pin]}
        node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        req = node_affinity.setdefault(
            "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": []}
        )
        terms = req["nodeSelectorTerms"]
        for term in terms:
            term.setdefault("matchFields", []).append(field_req)
        if not terms:
            terms.append({"matchFields": [field_req]})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": probe.namespace,
            "labels": {"test": w.id, "diff-probe": probe.name, **probe.labels},
        },
        "spec": spec,
    }


def create(plane: ControlPlane, obj: dict[str, Any]) -> None:
    """Create an object; a refusal fails with the apiserver's message."""
    try:
        plane.apply(obj)
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        raise AssertionError(f"creating {obj['metadata']['name']}: {exc.code} {detail}") from None


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def get_pod(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        pod: dict[str, Any] = plane.request("GET", pod_path(namespace, name))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return pod


def unschedulable_message(pod: dict[str, Any]) -> str | None:
    for c in pod.get("status", {}).get("conditions") or []:
        if (
            c["type"] == "PodScheduled"
            and c["status"] == "False"
            and c["reason"] == "Unschedulable"
        ):
            return str(c.get("message", ""))
    return None


@dataclass
class Outcome:
    node: str | None = None  # bound to
    reason: str | None = None  # PodScheduled=False Unschedulable message
    timed_out: bool = False

    def describe(self, w: World) -> str:
        if self.node:
            return f"bound to {w.short(self.node)}"
        if self.reason is not None:
            return f"pending: {self.reason}"
        return "no answer (neither bound nor Unschedulable)"


async def outcome(plane: ControlPlane, namespace: str, name: str, timeout: float) -> Outcome:
    """Wait until the pod is bound or reported Unschedulable."""
    deadline = time.monotonic() + timeout
    while True:
        pod = get_pod(plane, namespace, name)
        if pod is not None:
            if pod["spec"].get("nodeName"):
                return Outcome(node=pod["spec"]["nodeName"])
            message = unschedulable_message(pod)
            if message is not None:
                return Outcome(reason=message)
        if time.monotonic() > deadline:
            return Outcome(timed_out=True)
        await asyncio.sleep(0.1)


async def delete_and_wait(plane: ControlPlane, namespace: str, name: str) -> None:
    path = pod_path(namespace, name)
    try:
        plane.request("DELETE", f"{path}?gracePeriodSeconds=0")
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
    deadline = time.monotonic() + 30
    while get_pod(plane, namespace, name) is not None:
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {namespace}/{name} not gone 30 s after its deletion")
        await asyncio.sleep(0.05)


async def judge(w: World, probe: Probe, scenario: Scenario) -> str | None:
    """Run one probe under ours, then its copy under kube-scheduler; the disagreement, if any."""
    plane = w.plane
    ours_name = f"{w.id}-{probe.name}"
    oracle_name = f"{ours_name}-k"
    feasible = ", ".join(probe.feasible) or "none"
    create(plane, pod_object(w, probe, scenario.name, ours_name))
    try:
        ours = await outcome(plane, probe.namespace, ours_name, OURS_TIMEOUT_S)
    finally:
        await delete_and_wait(plane, probe.namespace, ours_name)
    if ours.timed_out:
        return f"{probe.name}: ours gave no answer in {OURS_TIMEOUT_S:.0f} s (feasible: {feasible})"
    if probe.unbound_claim:
        if ours.reason is not None and "unbound PersistentVolumeClaim" in ours.reason:
            return None
        return (
            f"{probe.name}: ours {ours.describe(w)}; expected pending with a reason naming the "
            "unbound PersistentVolumeClaim (not compared with kube-scheduler)"
        )
    create(plane, pod_object(w, probe, ORACLE, oracle_name, pin=ours.node))
    try:
        theirs = await outcome(plane, probe.namespace, oracle_name, ORACLE_TIMEOUT_S)
    finally:
        await delete_and_wait(plane, probe.namespace, oracle_name)
    if ours.node is not None:
        if theirs.node == ours.node:
            return None
        return (
            f"{probe.name}: ours bound it to {w.short(ours.node)}; kube-scheduler pinned there: "
            f"{theirs.describe(w)} (feasible: {feasible})"
        )
    if theirs.node is None and not theirs.timed_out:
        return None
    return (
        f"{probe.name}: ours left it pending ({ours.reason}); kube-scheduler: "
        f"{theirs.describe(w)} "
        f"(feasible: {feasible})"
    )


async def test_kube_scheduler_agrees_with_ours_on_every_probe(
    control_plane: ControlPlane, scenario: Scenario, oracle: KubeScheduler
) -> None:
    world = build_world(control_plane, scenario.id)
    await wait_allocated(world, world.claim("nic-b3"))
    await wait_background_running(world)
    resize_in_place(world, "resized", {"cpu": "3"})
    ours = scenario.start_scheduler()
    disagreements: list[str] = []
    silent = 0  # probes in a row ours gave no answer for
    try:
        for probe in probes(world):
            disagreement = await judge(world, probe, scenario)
            if disagreement:
                disagreements.append(disagreement)
            silent = silent + 1 if disagreement and "ours gave no answer" in disagreement else 0
            if silent == 3:
                pytest.fail(
                    "our scheduler answered none of the last 3 probes; so far:\n"
                    + "\n".join(disagreements)
                    + f"\n{ours.tail()}"
                )
            if ours.proc.poll() is not None:
                pytest.fail(f"our scheduler exited during {probe.name}:\n{ours.tail()}")
            if not oracle.alive():
                pytest.fail(f"kube-scheduler exited during {probe.name}:\n{oracle.tail()}")
            # Our scheduler watches bound and pending pods on separate streams: let it see the
            # deletions before the next probe arrives.
            await asyncio.sleep(0.3)
    finally:
        listed = control_plane.request(
            "GET", f"/api/v1/pods?labelSelector=test%3D{world.id},diff-probe"
        )
        for pod in listed["items"]:
            meta = pod["metadata"]
            await delete_and_wait(control_plane, meta["namespace"], meta["name"])
    total = len(probes(world))
    assert not disagreements, (
        f"{len(disagreements)} of {total} probes disagree with kube-scheduler "
        f"(nodes {', '.join(NODES)}):\n" + "\n".join(disagreements)
    )
