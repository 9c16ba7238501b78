"""A test DRA driver: NVIDIA-shaped ResourceSlices and DeviceClasses for KWOK nodes.

KWOK nodes run no kubelet, so no DRA kubelet plugin publishes their devices. This module publishes
what NVIDIA's driver (kubernetes-sigs/dra-driver-nvidia-gpu, formerly NVIDIA/k8s-dra-driver-gpu)
would, so that kube-scheduler (the oracle) and topo-scheduler allocate claims on the local plane
(controlplane.py) exactly as on a DRA cluster. Allocation reads only API objects (slices, classes,
claims, the Node), so nothing else of a driver is needed: KWOK marks a bound pod Running without
the kubelet's NodePrepareResources, and no claim status must be written for it to run.

What is published, per node (facts: ../shared/notes/dra-facts.md section 5):

- ``gpu.nvidia.com``, pool = the node's name. Each GPU is ``gpu-<i>`` with the attributes NVIDIA
  publishes in its own domain (``type`` "gpu", ``uuid``, ``productName``, ``brand``,
  ``architecture``, and the versions ``cudaComputeCapability``, ``driverVersion``,
  ``cudaDriverVersion``), the standard ``resource.kubernetes.io/pciBusID``, ``pcieRoot`` and
  ``numaNode``, and the capacity ``memory`` in bytes. Options as NVIDIA's: ``shares``
  (ConsumableShares: ``allowMultipleAllocations`` and a ``memory`` request policy, optionally a
  ``shares`` capacity) and ``unhealthy`` (its health check's taint ``gpu.nvidia.com/xid``).

  - By default (NVIDIA's default): one slice with every GPU, no counters.
  - ``mig=True`` (NVIDIA's DynamicMIG, partitionable devices, KEP 4815): one counters-only slice
    with a CounterSet ``gpu-<i>-counter-set`` per GPU (one counter per MIG capacity, plus
    ``memory-slice-<j>`` = 1 per memory slice), then one slice per GPU holding the full GPU
    (which consumes every counter of its set) and its MIG devices
    ``gpu-<i>-mig-<profile without dots>-<profile id>-<placement start>`` (``type`` "mig",
    ``parentUUID``, ``profile``, the parent's product, version, PCI and NUMA attributes; capacity
    multiprocessors, copyEngines, decoders, encoders, jpegEngines, ofaEngines, memory and
    ``memorySlice<j>``), each consuming its profile's counters and memory slices. These abstract
    MIG devices carry no ``uuid``, as NVIDIA's do not before they exist.

- ``compute-domain.nvidia.com`` (``publish_imex``), pool = the node's name: ``channel-0``
  (``type`` "channel", ``id`` 0), the one IMEX channel the scheduler sees, and ``daemon``
  (``type`` "daemon", ``id`` 0).

Each slice names its node (``nodeName``) and is owned by the Node (an ownerReference, as the
kubelet's helper sets), so the garbage collector the plane runs deletes it with the node.

The GPUs are the node inventory's (``topo-scheduler.io/gpus``, what our agent and the e2e
fixtures publish): ``gpu-<index>`` carries the inventory device's ``uuid`` (required: it is how
topo-scheduler maps a DRA device to its place in the NVLink matrix), its ``memoryMiB`` and its
``numa`` when given. The inventory carries no PCI bus ids, so they are derived from the index
(``pci_bus_id``), two GPUs per PCIe root (``pcie_root``), and the NUMA node is the inventory's or
the GPU's half of the node.

``device_classes()`` are the chart's (deployments/helm/.../deviceclass-*.yaml): ``gpu.nvidia.com``
(full GPUs; with ``extendedResourceName: nvidia.com/gpu``, as the chart renders it for
resource.k8s.io/v1, so a plain ``nvidia.com/gpu`` request on a node whose allocatable lacks it is
a claim on this class), ``mig.nvidia.com``, ``compute-domain-default-channel.nvidia.com`` and
``compute-domain-daemon.nvidia.com``.

The builders (``gpu_slices``, ``imex_slice``, ``device_classes``) are pure and return msgspec
Structs in the v1 wire shape; ``NvidiaDraDriver`` writes them to a plane.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from .controlplane import RESOURCE_API, ControlPlane

GPU_DRIVER: Final = "gpu.nvidia.com"
IMEX_DRIVER: Final = "compute-domain.nvidia.com"
STANDARD: Final = "resource.kubernetes.io"
GPU_CLASS: Final = "gpu.nvidia.com"
MIG_CLASS: Final = "mig.nvidia.com"
CHANNEL_CLASS: Final = "compute-domain-default-channel.nvidia.com"
DAEMON_CLASS: Final = "compute-domain-daemon.nvidia.com"
EXTENDED_RESOURCE: Final = "nvidia.com/gpu"
CLIQUE_LABEL: Final = "nvidia.com/gpu.clique"  # <ClusterUUID>.<CliqueID>, set by the CD plugin
XID_TAINT: Final = f"{GPU_DRIVER}/xid"  # NVIDIA's health taint: value = the XID
API_VERSION: Final = "resource.k8s.io/v1"
MIB: Final = 1 << 20


# ---- the wire shapes (resource.k8s.io/v1) ------------------------------------------------------


class Attribute(msgspec.Struct, omit_defaults=True):
    """Exactly one of the four values is set."""

    int_: int | None = msgspec.field(default=None, name="int")
    bool_: bool | None = msgspec.field(default=None, name="bool")
    string: str | None = None
    version: str | None = None


class Range(msgspec.Struct, omit_defaults=True):
    min: str
    max: str | None = None
    step: str | None = None


class RequestPolicy(msgspec.Struct, rename="camel", omit_defaults=True):
    default: str | None = None
    valid_range: Range | None = None


class Capacity(msgspec.Struct, rename="camel", omit_defaults=True):
    value: str
    request_policy: RequestPolicy | None = None


class Counter(msgspec.Struct):
    value: str


class CounterSet(msgspec.Struct):
    name: str
    counters: dict[str, Counter]


class CounterConsumption(msgspec.Struct, rename="camel"):
    counter_set: str
    counters: dict[str, Counter]


class Taint(msgspec.Struct):
    key: str
    value: str
    effect: str


class Device(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str
    attributes: dict[str, Attribute] = msgspec.field(default_factory=dict)
    capacity: dict[str, Capacity] = msgspec.field(default_factory=dict)
    consumes_counters: list[CounterConsumption] = msgspec.field(default_factory=list)
    taints: list[Taint] = msgspec.field(default_factory=list)
    allow_multiple_allocations: bool = False


class Pool(msgspec.Struct, rename="camel"):
    name: str
    generation: int
    resource_slice_count: int


class SliceSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    driver: str
    pool: Pool
    node_name: str
    devices: list[Device] = msgspec.field(default_factory=list)
    shared_counters: list[CounterSet] = msgspec.field(default_factory=list)


class OwnerReference(msgspec.Struct, rename="camel"):
    api_version: str
    kind: str
    name: str
    uid: str


class Metadata(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str
    owner_references: list[OwnerReference] = msgspec.field(default_factory=list)


class ResourceSlice(msgspec.Struct, rename="camel"):
    metadata: Metadata
    spec: SliceSpec
    api_version: str = API_VERSION
    kind: str = "ResourceSlice"


class Cel(msgspec.Struct):
    expression: str


class Selector(msgspec.Struct):
    cel: Cel


class ClassSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    selectors: list[Selector]
    extended_resource_name: str | None = None


class DeviceClass(msgspec.Struct, rename="camel"):
    metadata: Metadata
    spec: ClassSpec
    api_version: str = API_VERSION
    kind: str = "DeviceClass"


# ---- GPU models --------------------------------------------------------------------------------


class MigProfile(msgspec.Struct, frozen=True):
    """A GPU-instance profile as NVML describes it (``nvidia-smi mig -lgip``)."""

    name: str  # "1g.10gb"
    profile_id: int
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    slices: int  # memory slices it occupies
    starts: tuple[int, ...]  # its placements' first memory slice

    def capacities(self) -> dict[str, int]:
        """Capacity name -> value, in NVIDIA's names and units (memory in bytes)."""
        return {
            "multiprocessors": self.multiprocessors,
            "copyEngines": self.copy_engines,
            "decoders": self.decoders,
            "encoders": self.encoders,
            "jpegEngines": self.jpeg_engines,
            "ofaEngines": self.ofa_engines,
            "memory": self.memory_mib * MIB,
        }


class GpuModel(msgspec.Struct, frozen=True):
    product_name: str
    architecture: str
    cuda_compute_capability: str  # semver, as NVIDIA publishes it ("9.0.0")
    memory_mib: int
    memory_slices: int = 0
    mig_profiles: tuple[MigProfile, ...] = ()
    brand: str = "Nvidia"
    driver_version: str = "570.172.8"
    cuda_driver_version: str = "12.8.0"


H100: Final = GpuModel(
    product_name="NVIDIA H100 80GB HBM3",
    architecture="Hopper",
    cuda_compute_capability="9.0.0",
    memory_mib=81559,
    memory_slices=8,
    mig_profiles=(
        MigProfile("1g.10gb", 19, 9984, 16, 1, 1, 0, 1, 0, 1, (0, 1, 2, 3, 4, 5, 6)),
        MigProfile("2g.20gb", 14, 20096, 32, 2, 2, 0, 2, 0, 2, (0, 2, 4)),
        MigProfile("3g.40gb", 9, 40448, 60, 3, 3, 0, 3, 0, 4, (0, 4)),
        MigProfile("7g.80gb", 0, 81152, 132, 8, 7, 0, 7, 1, 8, (0,)),
    ),
)
A100: Final = GpuModel(
    product_name="NVIDIA A100-SXM4-80GB",
    architecture="Ampere",
    cuda_compute_capability="8.0.0",
    memory_mib=81920,
)
V100: Final = GpuModel(
    product_name="Tesla V100-SXM2-32GB",
    architecture="Volta",
    cuda_compute_capability="7.0.0",
    memory_mib=32768,
)


# ---- builders ----------------------------------------------------------------------------------


def _string(value: str) -> Attribute:
    return Attribute(string=value)


def _quantity(value: int) -> str:
    """Bytes as the apiserver prints a BinarySI quantity (``81559Mi``), else plain."""
    return f"{value // MIB}Mi" if value >= MIB and value % MIB == 0 else str(value)


def pci_bus_id(index: int) -> str:
    """The derived PCI bus id of GPU ``index`` (lower case, 4-digit domain, as the DRA helper
    writes it): sixteen GPUs per PCI domain, the two of a pair on buses 0x_8 and 0x_c behind
    their root port (``pcie_root``)."""
    domain, slot = divmod(index, 16)
    return f"{domain:04x}:{0x18 + 0x10 * (slot // 2) + 4 * (slot % 2):02x}:00.0"


def pcie_root(index: int) -> str:
    """Two GPUs per PCIe root: the root of GPU ``index``'s pair."""
    domain, slot = divmod(index, 16)
    return f"pci{domain:04x}:{0x10 + 0x10 * (slot // 2):02x}"


def _owner(node: str, uid: str) -> list[OwnerReference]:
    return [OwnerReference("v1", "Node", node, uid)] if uid else []


def _inventory_gpus(
    node: str, inventory: Mapping[str, Any]
) -> list[tuple[int, str, int | None, int | None]]:
    """(index, uuid, memoryMiB, numa) per inventory device, by index; ValueError without a uuid."""
    out = []
    for device in inventory["devices"]:
        uuid = device.get("uuid")
        if not uuid:
            raise ValueError(
                f"node {node}: inventory device {device['index']} has no uuid, which DRA devices "
                "are mapped to the inventory by"
            )
        out.append((int(device["index"]), str(uuid), device.get("memoryMiB"), device.get("numa")))
    return sorted(out)


def _gpu_attributes(model: GpuModel, index: int, numa: int) -> dict[str, Attribute]:
    """The attributes a full GPU and its MIG devices share (NVIDIA's CommonAttributesMig)."""
    return {
        "productName": _string(model.product_name),
        "brand": _string(model.brand),
        "architecture": _string(model.architecture),
        "cudaComputeCapability": Attribute(version=model.cuda_compute_capability),
        "driverVersion": Attribute(version=model.driver_version),
        "cudaDriverVersion": Attribute(version=model.cuda_driver_version),
        f"{STANDARD}/pciBusID": _string(pci_bus_id(index)),
        f"{STANDARD}/pcieRoot": _string(pcie_root(index)),
        f"{STANDARD}/numaNode": Attribute(int_=numa),
    }


def _counters(values: Mapping[str, int], memory_slices: range) -> dict[str, Counter]:
    """Capacities as counters (camelCase -> dns-case names, as NVIDIA derives them), plus one
    ``memory-slice-<j>`` counter per memory slice."""
    counters = {_dns_name(k): Counter(_quantity(v)) for k, v in values.items()}
    counters.update({f"memory-slice-{j}": Counter("1") for j in memory_slices})
    return counters


def _dns_name(camel: str) -> str:
    return "".join(f"-{c.lower()}" if c.isupper() else c for c in camel)


def _max_capacities(model: GpuModel) -> dict[str, int]:
    """The full GPU's capacity in the partitionable layout: each MIG capacity's largest value."""
    out: dict[str, int] = {}
    for profile in model.mig_profiles:
        for name, value in profile.capacities().items():
            out[name] = max(out.get(name, 0), value)
    return out


def _shared_capacity(memory: int, shares: str) -> dict[str, Capacity]:
    """A full GPU's capacity under NVIDIA's ConsumableShares option (``gpu_slices``)."""
    top = _quantity(memory)
    if not shares:
        return {"memory": Capacity(top)}
    if shares == "memory":
        return {"memory": Capacity(top, RequestPolicy(top, Range("1Mi", top, "1Mi")))}
    if not shares.isdigit() or int(shares) < 1:
        raise ValueError(f"shares: {shares!r} is neither 'memory' nor a positive number")
    return {
        "memory": Capacity(top, RequestPolicy("0", Range("0", top, "1Mi"))),
        "shares": Capacity(shares, RequestPolicy("1", Range("1", shares, "1"))),
    }


def _xid_taint(xid: str | None) -> list[Taint]:
    return [Taint(XID_TAINT, xid, "NoSchedule")] if xid else []


def gpu_slices(
    node: str,
    inventory: Mapping[str, Any],
    model: GpuModel = H100,
    mig: bool = False,
    node_uid: str = "",
    generation: int = 1,
    shares: str = "",
    unhealthy: Mapping[int, str] | None = None,
) -> list[ResourceSlice]:
    """The ``gpu.nvidia.com`` slices of ``node`` for the GPUs of its ``inventory`` (the module
    docstring says what they hold); ``mig`` publishes the partitionable layout of a model with
    MIG profiles.

    ``shares`` is NVIDIA's ConsumableShares option for full GPUs (``--consumable-shares``):
    "memory" makes each GPU allocatable many times, every claim taking some of its ``memory``
    (by default all of it, in steps of 1Mi); a number N also adds a ``shares`` capacity of N,
    each claim taking one by default and no memory. ``unhealthy`` taints GPUs, index -> XID, as
    NVIDIA's health check does (``gpu.nvidia.com/xid``, NoSchedule)."""
    if mig and not model.mig_profiles:
        raise ValueError(f"{model.product_name} has no MIG profiles")
    if mig and shares:
        raise ValueError("consumable shares are published here for full GPUs only")
    sick = unhealthy or {}
    gpus = _inventory_gpus(node, inventory)
    owners = _owner(node, node_uid)

    def numa_of(index: int, numa: int | None) -> int:
        return numa if numa is not None else index * 2 // max(len(gpus), 1)

    if not mig:
        devices = []
        for index, uuid, memory_mib, numa in gpus:
            attributes = {
                "type": _string("gpu"),
                "uuid": _string(uuid),
                **_gpu_attributes(model, index, numa_of(index, numa)),
            }
            memory = (memory_mib or model.memory_mib) * MIB
            devices.append(
                Device(
                    f"gpu-{index}",
                    attributes,
                    _shared_capacity(memory, shares),
                    taints=_xid_taint(sick.get(index)),
                    allow_multiple_allocations=bool(shares),
                )
            )
        pool = Pool(node, generation, 1)
        spec = SliceSpec(GPU_DRIVER, pool, node, devices=devices)
        return [ResourceSlice(Metadata(f"{node}-{GPU_DRIVER}-0", owners), spec)]

    pool = Pool(node, generation, 1 + len(gpus))
    full = _max_capacities(model)
    every_slice = range(model.memory_slices)
    counter_sets = [
        CounterSet(f"gpu-{index}-counter-set", _counters(full, every_slice)) for index, *_ in gpus
    ]
    slices = [
        ResourceSlice(
            Metadata(f"{node}-{GPU_DRIVER}-0", owners),
            SliceSpec(GPU_DRIVER, pool, node, shared_counters=counter_sets),
        )
    ]
    for index, uuid, _memory, numa in gpus:
        common = _gpu_attributes(model, index, numa_of(index, numa))
        counter_set = f"gpu-{index}-counter-set"
        devices = [
            Device(
                f"gpu-{index}",
                {"type": _string("gpu"), "uuid": _string(uuid), **common},
                {k: Capacity(_quantity(v)) for k, v in full.items()},
                [CounterConsumption(counter_set, _counters(full, every_slice))],
                taints=_xid_taint(sick.get(index)),
            )
        ]
        for profile in model.mig_profiles:
            for start in profile.starts:
                occupied = range(start, start + profile.slices)
                capacity = {k: Capacity(_quantity(v)) for k, v in profile.capacities().items()}
                capacity.update({f"memorySlice{j}": Capacity("1") for j in occupied})
                attributes = {
                    "type": _string("mig"),
                    "parentUUID": _string(uuid),
                    "profile": _string(profile.name),
                    **common,
                }
                name = (
                    f"gpu-{index}-mig-{profile.name.replace('.', '')}-{profile.profile_id}-{start}"
                )
                consumes = CounterConsumption(
                    counter_set, _counters(profile.capacities(), occupied)
                )
                devices.append(Device(name, attributes, capacity, [consumes]))
        slices.append(
            ResourceSlice(
                Metadata(f"{node}-{GPU_DRIVER}-{index + 1}", owners),
                SliceSpec(GPU_DRIVER, pool, node, devices=devices),
            )
        )
    return slices


def imex_slice(node: str, node_uid: str = "", generation: int = 1) -> ResourceSlice:
    """The ``compute-domain.nvidia.com`` slice of ``node``: ``channel-0`` and ``daemon``."""
    devices = [
        Device("channel-0", {"type": _string("channel"), "id": Attribute(int_=0)}),
        Device("daemon", {"type": _string("daemon"), "id": Attribute(int_=0)}),
    ]
    spec = SliceSpec(IMEX_DRIVER, Pool(node, generation, 1), node, devices=devices)
    return ResourceSlice(Metadata(f"{node}-{IMEX_DRIVER}-0", _owner(node, node_uid)), spec)


def device_classes(extended_resource: bool = True) -> list[DeviceClass]:
    """The DeviceClasses NVIDIA's chart installs; ``gpu.nvidia.com`` backs ``nvidia.com/gpu``
    unless ``extended_resource`` is False."""

    def of(driver: str, rest: str) -> list[Selector]:
        return [Selector(Cel(f"device.driver == '{driver}' && {rest}"))]

    def attr(driver: str, name: str) -> str:
        return f"device.attributes['{driver}'].{name}"

    return [
        DeviceClass(
            Metadata(GPU_CLASS),
            ClassSpec(
                of(GPU_DRIVER, f"{attr(GPU_DRIVER, 'type')} == 'gpu'"),
                EXTENDED_RESOURCE if extended_resource else None,
            ),
        ),
        DeviceClass(
            Metadata(MIG_CLASS), ClassSpec(of(GPU_DRIVER, f"{attr(GPU_DRIVER, 'type')} == 'mig'"))
        ),
        DeviceClass(
            Metadata(CHANNEL_CLASS),
            ClassSpec(
                of(
                    IMEX_DRIVER,
                    f"{attr(IMEX_DRIVER, 'type')} == 'channel' && {attr(IMEX_DRIVER, 'id')} == 0",
                )
            ),
        ),
        DeviceClass(
            Metadata(DAEMON_CLASS),
            ClassSpec(of(IMEX_DRIVER, f"{attr(IMEX_DRIVER, 'type')} == 'daemon'")),
        ),
    ]


def to_json(obj: ResourceSlice | DeviceClass) -> dict[str, Any]:
    """The object as the JSON the apiserver takes."""
    built: dict[str, Any] = msgspec.to_builtins(obj)
    return built


# ---- the driver on a plane ---------------------------------------------------------------------


class NvidiaDraDriver:
    """Publishes the builders' objects on ``plane`` (admin identity), like NVIDIA's kubelet
    plugins and chart would on real nodes."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def install_classes(self, extended_resource: bool = True) -> None:
        """Create (or replace) the chart's DeviceClasses."""
        for device_class in device_classes(extended_resource):
            self.plane.apply_or_replace(to_json(device_class))

    def remove_classes(self) -> None:
        for device_class in device_classes():
            self._delete(f"{RESOURCE_API}/deviceclasses/{device_class.metadata.name}")

    def publish_gpus(
        self,
        node: str,
        inventory: Mapping[str, Any],
        model: GpuModel = H100,
        mig: bool = False,
        shares: str = "",
        unhealthy: Mapping[int, str] | None = None,
    ) -> list[str]:
        """Publish ``node``'s GPU slices (``gpu_slices``; replacing any it had); returns their
        names."""
        self.unpublish(node, GPU_DRIVER)
        uid = self._node_uid(node)
        slices = gpu_slices(node, inventory, model, mig, uid, shares=shares, unhealthy=unhealthy)
        return self._create(slices)

    def publish_imex(self, node: str) -> list[str]:
        """Publish ``node``'s IMEX channel slice (replacing any it had)."""
        self.unpublish(node, IMEX_DRIVER)
        return self._create([imex_slice(node, node_uid=self._node_uid(node))])

    def unpublish(self, node: str, driver: str | None = None) -> None:
        """Delete ``node``'s slices (of ``driver``, or of both drivers)."""
        for name in self.slices(node, driver):
            self._delete(f"{RESOURCE_API}/resourceslices/{name}")

    def slices(self, node: str, driver: str | None = None) -> list[str]:
        """The names of ``node``'s slices (of ``driver``, or of both drivers)."""
        selector = urllib.parse.quote(f"spec.nodeName={node}")
        listed = self.plane.request(
            "GET", f"{RESOURCE_API}/resourceslices?fieldSelector={selector}"
        )
        drivers: Sequence[str] = (driver,) if driver else (GPU_DRIVER, IMEX_DRIVER)
        return [s["metadata"]["name"] for s in listed["items"] if s["spec"]["driver"] in drivers]

    def _node_uid(self, node: str) -> str:
        return str(self.plane.request("GET", f"/api/v1/nodes/{node}")["metadata"]["uid"])

    def _create(self, slices: list[ResourceSlice]) -> list[str]:
        for s in slices:
            self.plane.apply(to_json(s))
        return [s.metadata.name for s in slices]

    def _delete(self, path: str) -> None:
        try:
            self.plane.delete(path)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
