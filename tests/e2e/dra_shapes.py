"""Claim shapes and kube-scheduler v1.37.2's verdicts on them, recorded on the local plane.

Each ``Shape`` (tests/e2e/dra.py) names its nodes by kind (``KINDS``: ``a`` 8 H100 with an IMEX
channel, ``b`` 4 V100, ``m`` 2 partitionable H100 with MIG profiles, ``s`` 2 H100 shared by
memory, ``t`` 4 H100 of which 3 are tainted, ``p`` a device-plugin node), the pods scheduled before
the probe, the probe, and where kube-scheduler put the probe ("" when it refused it); a shape may add
DeviceTaintRules on its nodes' pools (``TaintRule``) before its pods. Shapes are
built so that at most one node can take the probe: agreeing on the verdict is agreeing on the node
set. test_dra_plane.py checks every verdict against kube-scheduler; the differential e2e runs
the same shapes against topo-scheduler once its core allocates claims.
"""

# ruff: noqa: E501  (a table: one shape per line reads better than wrapped calls)

from __future__ import annotations

from typing import Any

from scheduler.testing.dradriver import CHANNEL_CLASS, GPU_CLASS, GPU_DRIVER, MIG_CLASS, XID_TAINT

from .dra import PodShape, Shape, TaintRule, Use

ATTR = f"device.attributes['{GPU_DRIVER}']"
STD = "device.attributes['resource.kubernetes.io']"
CAP = f"device.capacity['{GPU_DRIVER}']"
H100 = "NVIDIA H100 80GB HBM3"
V100 = "Tesla V100-SXM2-32GB"


def exactly(
    count: int = 1,
    cls: str = GPU_CLASS,
    cel: tuple[str, ...] = (),
    all_devices: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"deviceClassName": cls, **extra}
    if all_devices:
        spec["allocationMode"] = "All"
    else:
        spec["count"] = count
    if cel:
        spec["selectors"] = [{"cel": {"expression": c}} for c in cel]
    return spec


def claim(
    *requests: tuple[str, dict[str, Any]], constraints: tuple[dict[str, Any], ...] = ()
) -> dict[str, Any]:
    """A ResourceClaimSpec of (request name, ``exactly`` spec) requests."""
    devices: dict[str, Any] = {"requests": [{"name": n, "exactly": e} for n, e in requests]}
    if constraints:
        devices["constraints"] = list(constraints)
    return {"devices": devices}


def first(*subs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A claim of one request ``gpu`` with a firstAvailable list."""
    listed = [{"name": n, **e} for n, e in subs]
    return {"devices": {"requests": [{"name": "gpu", "firstAvailable": listed}]}}


def gpus(count: int = 1, *cel: str, **extra: Any) -> dict[str, Any]:
    return claim(("gpu", exactly(count, GPU_CLASS, cel, **extra)))


def migs(count: int, profile: str = "", *cel: str) -> dict[str, Any]:
    selectors = ((f"{ATTR}.profile == '{profile}'",) if profile else ()) + cel
    return claim(("mig", exactly(count, MIG_CLASS, selectors)))


def template(spec: dict[str, Any]) -> Use:
    return Use(spec)


def pod(*specs: dict[str, Any], on: str = "", **limits: str) -> PodShape:
    """A pod with one template claim per spec; ``limits`` by resource with "_" for "/"
    (``nvidia_com_gpu="2"``)."""
    named = {k.replace("_com_", ".com/"): v for k, v in limits.items()}
    return PodShape(tuple(template(s) for s in specs), named, on)


def match(attribute: str, *requests: str) -> dict[str, Any]:
    return {"requests": list(requests), "matchAttribute": attribute}


def distinct(attribute: str, *requests: str) -> dict[str, Any]:
    return {"requests": list(requests), "distinctAttribute": attribute}


PRODUCT = f"{GPU_DRIVER}/productName"
ROOT = "resource.kubernetes.io/pcieRoot"
NUMA = "resource.kubernetes.io/numaNode"
TOLERATE_XID = {"key": XID_TAINT, "operator": "Exists"}
MAINTENANCE = TaintRule("b").key
TOLERATE_MAINTENANCE = {"key": MAINTENANCE, "operator": "Exists"}
EIGHT_SHARED = Use(gpus(8), name="shared")  # a ResourceClaim named "shared", for two pods

SHAPES: tuple[Shape, ...] = (
    # counts
    Shape("count-1", "a", pod(gpus(1)), "a"),
    Shape("count-8-all-of-a-node", "a", pod(gpus(8)), "a"),
    Shape("count-9-beyond-the-node", "a", pod(gpus(9)), ""),
    Shape("count-5-only-the-bigger-node", "ab", pod(gpus(5)), "a"),
    # allocation mode All
    Shape("all-of-b", "b", pod(gpus(0, all_devices=True)), "b"),
    Shape("all-v100s-of-two-nodes", "ab", pod(gpus(0, f"{ATTR}.productName == '{V100}'", all_devices=True)), "b"),
    Shape("all-mode-nothing-selected", "b", pod(gpus(0, f"{ATTR}.productName == '{H100}'", all_devices=True)), ""),
    # selectors on attributes and capacity
    Shape("selector-product", "ab", pod(gpus(1, f"{ATTR}.productName == '{V100}'")), "b"),
    Shape("selector-architecture", "ab", pod(gpus(2, f"{ATTR}.architecture == 'Hopper'")), "a"),
    Shape("selector-compute-capability-semver", "ab", pod(gpus(1, f"{ATTR}.cudaComputeCapability.isGreaterThan(semver('8.0.0'))")), "a"),
    Shape("selector-capacity-quantity", "ab", pod(gpus(1, f"{CAP}.memory.compareTo(quantity('40Gi')) > 0")), "a"),
    Shape("selector-capacity-too-big", "ab", pod(gpus(1, f"{CAP}.memory.compareTo(quantity('100Gi')) >= 0")), ""),
    Shape("selector-numa-4-fit", "a", pod(gpus(4, f"{STD}.numaNode == 1")), "a"),
    Shape("selector-numa-5-do-not", "a", pod(gpus(5, f"{STD}.numaNode == 1")), ""),
    Shape("selector-uuid", "ab", pod(gpus(1, f"{ATTR}.uuid.endsWith('-a-3')")), "a"),
    Shape("selector-two-selectors", "a", pod(gpus(2, f"{STD}.pcieRoot == 'pci0000:30'", f"{ATTR}.type == 'gpu'")), "a"),
    Shape("selector-missing-attribute-is-an-error", "a", pod(gpus(1, f"{ATTR}.nosuch == 'x'")), ""),
    Shape("selector-missing-class", "a", pod(claim(("gpu", exactly(1, "nosuch.nvidia.com")))), ""),
    Shape("mig-class-on-full-gpus", "a", pod(migs(1)), ""),
    # firstAvailable
    Shape("first-available-second", "a", pod(first(("v100", exactly(1, cel=(f"{ATTR}.productName == '{V100}'",))), ("any", exactly(1)))), "a"),
    Shape("first-available-fewer", "b", pod(first(("eight", exactly(8)), ("four", exactly(4)))), "b"),
    Shape("first-available-none", "b", pod(first(("eight", exactly(8)), ("six", exactly(6)))), ""),
    Shape("first-available-mig-or-full", "a", pod(first(("mig", exactly(1, MIG_CLASS)), ("full", exactly(1)))), "a"),
    # constraints
    Shape("match-pcie-root-2", "a", pod(claim(("gpu", exactly(2)), constraints=(match(ROOT),))), "a"),
    Shape("match-pcie-root-3", "a", pod(claim(("gpu", exactly(3)), constraints=(match(ROOT),))), ""),
    Shape("match-numa-4", "a", pod(claim(("gpu", exactly(4)), constraints=(match(NUMA),))), "a"),
    Shape("match-numa-5", "a", pod(claim(("gpu", exactly(5)), constraints=(match(NUMA),))), ""),
    Shape("match-product-across-requests", "ab", pod(claim(("x", exactly(3)), ("y", exactly(3)), constraints=(match(PRODUCT, "x", "y"),))), "a"),
    Shape("match-product-v100-only", "ab", pod(claim(("x", exactly(1, cel=(f"{ATTR}.architecture == 'Volta'",))), ("y", exactly(1)), constraints=(match(PRODUCT, "x", "y"),))), "b"),
    Shape("distinct-pcie-root-4", "a", pod(claim(("gpu", exactly(4)), constraints=(distinct(ROOT),))), "a"),
    Shape("distinct-pcie-root-5", "a", pod(claim(("gpu", exactly(5)), constraints=(distinct(ROOT),))), ""),
    Shape("distinct-numa-3", "a", pod(claim(("gpu", exactly(3)), constraints=(distinct(NUMA),))), ""),
    # IMEX channels (compute-domain.nvidia.com)
    Shape("gpus-and-imex-channel", "ab", pod(claim(("gpu", exactly(2)), ("channel", exactly(1, CHANNEL_CLASS)))), "a"),
    Shape("imex-channel-missing", "b", pod(claim(("channel", exactly(1, CHANNEL_CLASS)))), ""),
    Shape("two-imex-channels-one-node", "a", pod(claim(("channel", exactly(1, CHANNEL_CLASS))), claim(("channel", exactly(1, CHANNEL_CLASS)))), ""),
    # partitionable devices: MIG profiles consuming a GPU's counters
    Shape("mig-1g", "m", pod(migs(1, "1g.10gb")), "m"),
    Shape("mig-1g-14-of-2-gpus", "m", pod(migs(14, "1g.10gb")), "m"),
    Shape("mig-1g-15", "m", pod(migs(15, "1g.10gb")), ""),
    Shape("mig-two-3g-and-a-full-gpu", "m", pod(migs(2, "3g.40gb"), gpus(1)), "m"),
    Shape("mig-four-3g-and-a-full-gpu", "m", pod(migs(4, "3g.40gb"), gpus(1)), ""),
    Shape("mig-same-parent", "m", pod(claim(("mig", exactly(2, MIG_CLASS, (f"{ATTR}.profile == '3g.40gb'",))), constraints=(match(f"{GPU_DRIVER}/parentUUID"),))), "m"),
    Shape("mig-full-gpus-after-a-mig", "m", pod(gpus(2)), "", before=(pod(migs(1, "1g.10gb")),)),
    # device taints and tolerations
    Shape("taints-one-healthy", "t", pod(gpus(1)), "t"),
    Shape("taints-two-not-tolerated", "t", pod(gpus(2)), ""),
    Shape("taints-tolerated", "t", pod(gpus(4, tolerations=[TOLERATE_XID])), "t"),
    # DeviceTaintRules: their taints patched into the slices' devices
    Shape("taint-rule-pool", "b", pod(gpus(1)), "", rules=(TaintRule("b"),)),
    Shape("taint-rule-pool-other-node", "ab", pod(gpus(1)), "b", rules=(TaintRule("a"),)),
    Shape("taint-rule-one-device-4", "b", pod(gpus(4)), "", rules=(TaintRule("b", device="gpu-0"),)),
    Shape("taint-rule-one-device-3", "b", pod(gpus(3)), "b", rules=(TaintRule("b", device="gpu-0"),)),
    Shape("taint-rule-no-execute-tolerated", "b", pod(gpus(4, tolerations=[TOLERATE_MAINTENANCE])), "b", rules=(TaintRule("b", effect="NoExecute"),)),
    Shape("taint-rule-effect-none", "b", pod(gpus(4)), "b", rules=(TaintRule("b", effect="None"),)),
    Shape("taint-rule-without-selector", "b", pod(gpus(4)), "b", rules=(TaintRule("b", selector=False),)),
    Shape("taint-rule-and-driver-taints", "t", pod(gpus(4, tolerations=[TOLERATE_XID])), "", rules=(TaintRule("t", device="gpu-3"),)),
    # consumable capacity (allowMultipleAllocations, memory by request policy)
    Shape("consumable-40gi", "s", pod(gpus(1, capacity={"requests": {"memory": "40Gi"}})), "s"),
    Shape("consumable-over-the-device", "s", pod(gpus(1, capacity={"requests": {"memory": "100Gi"}})), ""),
    Shape("consumable-shared-by-two-pods", "s", pod(gpus(2, capacity={"requests": {"memory": "30Gi"}})), "s", before=(pod(gpus(2, capacity={"requests": {"memory": "30Gi"}})),)),
    Shape("consumable-what-is-left-is-short", "s", pod(gpus(1, capacity={"requests": {"memory": "40Gi"}})), "", before=(pod(gpus(2, capacity={"requests": {"memory": "40Gi"}})),)),  # 81559Mi - 40Gi < 40Gi
    Shape("consumable-default-takes-all", "s", pod(gpus(1, capacity={"requests": {"memory": "1Gi"}})), "", before=(pod(gpus(2)),)),
    # extended resources backed by the gpu.nvidia.com class
    Shape("extended-2", "a", pod(nvidia_com_gpu="2"), "a"),
    Shape("extended-9", "a", pod(nvidia_com_gpu="9"), ""),
    Shape("extended-on-v100s", "b", pod(nvidia_com_gpu="4"), "b"),
    Shape("extended-and-a-claim", "a", pod(gpus(4), nvidia_com_gpu="4"), "a"),
    Shape("extended-and-a-claim-too-many", "a", pod(gpus(4), nvidia_com_gpu="5"), ""),
    Shape("extended-device-plugin-node", "p", pod(nvidia_com_gpu="8"), "p"),
    # templates: two pods, one template each
    Shape("templates-second-pod-fits", "a", pod(gpus(2)), "a", before=(pod(gpus(6)),)),
    Shape("templates-second-pod-does-not", "a", pod(gpus(3)), "", before=(pod(gpus(6)),)),
    # a claim shared by two pods
    Shape("shared-claim-second-pod", "a", PodShape((Use(name="shared"),)), "a", before=(PodShape((EIGHT_SHARED,)),)),
    Shape("shared-claim-other-node", "ab", PodShape((Use(name="shared"),), on="b"), "", before=(PodShape((EIGHT_SHARED,), on="a"),)),
    # claims already allocated by the other scheduler: the pods before took their devices
    Shape("allocated-by-the-other", "a", pod(gpus(1)), "", before=(pod(gpus(8)),)),
    Shape("allocated-extended-by-the-other", "a", pod(gpus(1)), "a", before=(pod(nvidia_com_gpu="7"),)),
    # admin access: allocated devices stay visible to an admin claim
    Shape("admin-access-on-a-full-node", "a", PodShape((template(gpus(1, adminAccess=True)),), admin=True), "a", before=(pod(gpus(8)),)),
)  # fmt: skip
