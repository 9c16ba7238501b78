"""The DRA objects the allocator reads and writes (resource.k8s.io/v1), as plain core Structs.

Only the fields allocation needs, named as in the v1 API (snake case). Quantities stay strings, as
the apiserver sends them, and are parsed by the allocator, so a malformed value becomes a reason
instead of an exception in the shell (the model's rule, model/objects.py). Node selectors and
device taints reuse the model's ``NodeSelectorTerm``, ``Taint`` and ``Toleration`` shapes; a
device taint's ``None`` effect needs no toleration, and a device toleration with an empty key and
Equal compares the value of any key (allocator.py applies DRA's rule, not the pod's).

Attribute values are ``int``, ``bool``, ``str`` or ``Version`` (a semantic version string); an
attribute or capacity name is a qualified name, ``id`` (in the driver's own domain) or
``domain/id``, written as in the slice.

Not modelled (alpha in v1.37, off by default): list-typed attributes, ``compatibilityGroups``,
``derivedAttributes``, ``nodeAllocatableResources``, ``partitionTypeAttribute``,
``skipNodeOperations``, claims reserved for a PodGroup.
"""

from __future__ import annotations

from msgspec import Struct, field

from .objects import NodeSelectorTerm, Taint, Toleration


class Version(Struct, frozen=True):
    """A ``version`` attribute: a semantic version (semver 2.0.0) string."""

    value: str


AttributeValue = int | bool | str | Version


class CapacityRequestPolicy(Struct, frozen=True):
    """How a share of a consumable capacity is rounded (DRAConsumableCapacity): to the smallest
    of ``valid_values`` at least the request, or up from ``valid_min`` by ``valid_step`` and at
    most ``valid_max``; ``default`` when the request names no amount."""

    default: str | None = None
    valid_values: tuple[str, ...] = ()
    valid_min: str | None = None
    valid_max: str | None = None
    valid_step: str | None = None


class DeviceCapacity(Struct, frozen=True):
    value: str
    request_policy: CapacityRequestPolicy | None = None


class CounterConsumption(Struct, frozen=True):
    """What a partitionable device takes from one of its pool's counter sets."""

    counter_set: str
    counters: dict[str, str] = field(default_factory=dict)


class Device(Struct, frozen=True):
    name: str
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    capacity: dict[str, DeviceCapacity] = field(default_factory=dict)
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[Taint, ...] = ()
    allow_multiple_allocations: bool = False
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    # Per-device node selection, only in a slice with ``per_device_node_selection``: at most one.
    node_name: str = ""
    node_selector: NodeSelectorTerm | None = None
    all_nodes: bool = False


class CounterSet(Struct, frozen=True):
    name: str
    counters: dict[str, str] = field(default_factory=dict)


class ResourcePool(Struct, frozen=True):
    name: str
    generation: int
    resource_slice_count: int


class ResourceSlice(Struct, frozen=True):
    """One slice of a pool. Node selection is exactly one of ``node_name``, ``node_selector``
    (the API allows a single term), ``all_nodes`` or ``per_device_node_selection``. A slice
    holds devices or shared counters, not both."""

    name: str
    driver: str
    pool: ResourcePool
    node_name: str = ""
    node_selector: NodeSelectorTerm | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()


class DeviceTaintSelector(Struct, frozen=True):
    """Which devices a DeviceTaintRule taints: those of ``driver``, in ``pool`` and named
    ``device``, each only when set ("" matches any). The empty selector matches every device."""

    driver: str = ""
    pool: str = ""
    device: str = ""


class DeviceTaintRule(Struct, frozen=True):
    """A DeviceTaintRule (GA in v1.37): one taint added to every device its selector matches,
    as if the driver had published it in the slice. A rule without a selector taints no device
    (the API's rule). Its status (the eviction controller's conditions) plays no part in
    allocation."""

    name: str
    taint: Taint
    selector: DeviceTaintSelector | None = None


class OpaqueConfig(Struct, frozen=True):
    """Driver configuration, passed through: ``parameters`` is the raw JSON text."""

    driver: str
    parameters: str = ""


class DeviceClass(Struct, frozen=True):
    name: str
    selectors: tuple[str, ...] = ()  # CEL expressions, all of which a device must match
    config: tuple[OpaqueConfig, ...] = ()
    extended_resource_name: str = ""
    # metadata.creationTimestamp (RFC 3339, sorts as text): when two classes back one extended
    # resource, the newer wins (kube-scheduler's extendedresourcecache).
    created: str = ""


EXACT_COUNT = "ExactCount"
ALL = "All"


class ExactRequest(Struct, frozen=True):
    """``exactly``, or one ``firstAvailable`` subrequest (whose ``admin_access`` stays False)."""

    device_class_name: str
    selectors: tuple[str, ...] = ()
    allocation_mode: str = EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    capacity: dict[str, str] = field(default_factory=dict)  # capacity.requests


class SubRequest(Struct, frozen=True):
    name: str
    exactly: ExactRequest


class DeviceRequest(Struct, frozen=True):
    """A claim's request: ``exactly`` or ``first_available`` (tried in order)."""

    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[SubRequest, ...] = ()


class DeviceConstraint(Struct, frozen=True):
    """``match_attribute`` or ``distinct_attribute`` (fully qualified) over ``requests``
    (empty: all of the claim's)."""

    requests: tuple[str, ...] = ()
    match_attribute: str = ""
    distinct_attribute: str = ""


class ClaimConfig(Struct, frozen=True):
    requests: tuple[str, ...] = ()
    opaque: OpaqueConfig | None = None


class DeviceResult(Struct, frozen=True):
    """One allocated device, as ``status.allocation.devices.results[]``."""

    request: str  # "req" or "req/sub"
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    share_id: str = ""
    consumed_capacity: dict[str, str] = field(default_factory=dict)


FROM_CLASS = "FromClass"
FROM_CLAIM = "FromClaim"


class AllocatedConfig(Struct, frozen=True):
    source: str  # FROM_CLASS or FROM_CLAIM
    requests: tuple[str, ...] = ()
    opaque: OpaqueConfig | None = None


class Allocation(Struct, frozen=True):
    """``status.allocation``: the devices, their configuration, and the nodes they are usable
    from (``node_selector`` terms ORed, as the API's NodeSelector; None: every node)."""

    results: tuple[DeviceResult, ...] = ()
    config: tuple[AllocatedConfig, ...] = ()
    node_selector: tuple[NodeSelectorTerm, ...] | None = None


class RequestMapping(Struct, frozen=True):
    """One entry of ``pod.status.extendedResourceClaimStatus.requestMappings``: which request of
    the extended-resource claim serves a container's extended resource."""

    container: str
    resource: str
    request: str


# The annotation kube-scheduler puts on the claim it creates for a pod's extended resources
# backed by a DeviceClass (KEP-5004), with value "true"; the claim's controller is the pod.
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"


class ResourceClaim(Struct, frozen=True):
    """A ResourceClaim: its spec, ``status.allocation`` (None: not allocated) and the consumers
    it is reserved for (``status.reservedFor[].uid``); ``deleting`` once it has a deletion
    timestamp. ``extended`` marks the claim created for a pod's DRA-backed extended resources
    (the ``EXTENDED_RESOURCE_CLAIM`` annotation), ``owner`` is the uid of its controller
    (metadata.ownerReferences with controller true; "" when none): for such a claim, the pod."""

    namespace: str
    name: str
    uid: str = ""
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[ClaimConfig, ...] = ()
    allocation: Allocation | None = None
    reserved_for: tuple[str, ...] = ()
    deleting: bool = False
    extended: bool = False
    owner: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def allocated(self) -> bool:
        return self.allocation is not None
