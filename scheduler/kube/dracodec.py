"""msgspec codecs between resource.k8s.io/v1 JSON and the core's DRA objects (core/model/dra.py).

Decoding: ResourceSlices, DeviceTaintRules, DeviceClasses and ResourceClaims, with only the fields
allocation reads (unknown fields are skipped, as in codec.py). Quantities arrive as strings from the
apiserver and as numbers from hand-written YAML; both are kept as strings for the core's parser.
Opaque config ``parameters`` become compact JSON text. Attribute values are exactly one of int,
bool, string, version; an attribute with none of them is dropped (a newer API's type, e.g. the alpha
list types).

Encoding: ``allocation_json`` is ``status.allocation`` as kube-scheduler writes it (without
``allocationTimestamp``, which the binder adds when it writes); ``requests_json`` is a claim's
``spec.devices.requests`` (the special claim the binder creates).

The watch (scheduler/service/watches.py) decodes claims and classes with these; a claim carries
its ``reservedFor`` uids, deletion, and the extended-resource annotation and controller owner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final, TypeVar

import msgspec
from msgspec import Meta

from scheduler.core.model.dra import (
    EXACT_COUNT,
    EXTENDED_RESOURCE_CLAIM,
    AllocatedConfig,
    Allocation,
    AttributeValue,
    CapacityRequestPolicy,
    ClaimConfig,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceCapacity,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceResult,
    DeviceTaintRule,
    DeviceTaintSelector,
    ExactRequest,
    OpaqueConfig,
    ResourceClaim,
    ResourcePool,
    ResourceSlice,
    SubRequest,
    Version,
)
from scheduler.core.model.objects import NodeSelectorTerm, Requirement, Taint, Toleration

from .codec import NodeSelectorTermWire, NodeSelectorWire, ObjectMeta

Quantity = str | int | float
T = TypeVar("T")

# The v1 API's own limits (staging/src/k8s.io/api/resource/v1/types.go), enforced while decoding
# so that an object beyond them (an apiserver that did not validate it, a hand-written manifest)
# is refused whole, naming its field, before it costs memory or time: a slice of 10,000 devices,
# a device with a megabyte of attributes. The apiserver enforces them too; these are bounds on
# what this process holds, not a second validation (a name's characters are not checked).
SLICE_DEVICES: Final = 128  # ResourceSliceMaxDevices
COUNTER_SETS: Final = 8  # ResourceSliceMaxCounterSets
COUNTERS: Final = 32  # ResourceSliceMaxCountersPerCounterSet
ATTRIBUTES_AND_CAPACITIES: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
DEVICE_COUNTER_SETS: Final = 2  # ResourceSliceMaxDeviceCounterConsumptionsPerDevice
DEVICE_TAINTS: Final = 16  # DeviceTaintsMaxLength
BINDING_CONDITIONS: Final = 4  # BindingConditionsMaxSize, BindingFailureConditionsMaxSize
REQUESTS: Final = 32  # DeviceRequestsMaxSize, DeviceConstraintsMaxSize, DeviceConfigMaxSize
SUBREQUESTS: Final = 8  # FirstAvailableDeviceRequestMaxSize
SELECTORS: Final = 32  # DeviceSelectorsMaxSize
TOLERATIONS: Final = 16  # DeviceTolerationsMaxLength
RESULTS: Final = 32  # AllocationResultsMaxSize
RESERVED_FOR: Final = 256  # ResourceClaimReservedForMaxSize
CEL_TEXT: Final = 10 * 1024  # CELSelectorExpressionMaxLength
OPAQUE_PARAMETERS: Final = 10 * 1024  # OpaqueParametersMaxLength
ATTRIBUTE_TEXT: Final = 64  # DeviceAttributeMaxValueLength
# A qualified name: a domain of at most 63 characters, "/", an identifier of at most 32; a
# device, pool or counter name, a quantity or a condition type: short strings.
QUALIFIED_NAME: Final = 96
SHORT: Final = 253


def _at_most(n: int) -> Meta:
    return Meta(max_length=n)


Short = Annotated[str, _at_most(SHORT)]
QualifiedName = Annotated[str, _at_most(QUALIFIED_NAME)]
BoundedQuantity = Annotated[str, _at_most(SHORT)] | int | float


def _quantity(value: Quantity) -> str:
    return value if isinstance(value, str) else str(value)


class _Attribute(msgspec.Struct):
    int_: int | None = msgspec.field(default=None, name="int")
    bool_: bool | None = msgspec.field(default=None, name="bool")
    string: Annotated[str, _at_most(ATTRIBUTE_TEXT)] | None = None
    version: Annotated[str, _at_most(ATTRIBUTE_TEXT)] | None = None


class _Range(msgspec.Struct):
    min: BoundedQuantity | None = None
    max: BoundedQuantity | None = None
    step: BoundedQuantity | None = None


class _Policy(msgspec.Struct, rename="camel"):
    default: BoundedQuantity | None = None
    valid_values: Annotated[list[BoundedQuantity], _at_most(REQUESTS)] | None = None
    valid_range: _Range | None = None


class _Capacity(msgspec.Struct, rename="camel"):
    value: BoundedQuantity
    request_policy: _Policy | None = None


class _Counter(msgspec.Struct):
    value: BoundedQuantity


Counters = Annotated[dict[Short, _Counter], _at_most(COUNTERS)]


class _Consumption(msgspec.Struct, rename="camel"):
    counter_set: Short
    counters: Counters = msgspec.field(default_factory=dict)


class _DeviceTaint(msgspec.Struct):
    key: Short
    effect: Short
    value: Short = ""


Conditions = Annotated[list[Short], _at_most(BINDING_CONDITIONS)]


class _Device(msgspec.Struct, rename="camel"):
    name: Short
    attributes: (
        Annotated[dict[QualifiedName, _Attribute], _at_most(ATTRIBUTES_AND_CAPACITIES)] | None
    ) = None
    capacity: (
        Annotated[dict[QualifiedName, _Capacity], _at_most(ATTRIBUTES_AND_CAPACITIES)] | None
    ) = None
    consumes_counters: Annotated[list[_Consumption], _at_most(DEVICE_COUNTER_SETS)] | None = None
    taints: Annotated[list[_DeviceTaint], _at_most(DEVICE_TAINTS)] | None = None
    allow_multiple_allocations: bool | None = None
    binds_to_node: bool | None = None
    binding_conditions: Conditions | None = None
    binding_failure_conditions: Conditions | None = None
    node_name: Short | None = None
    node_selector: NodeSelectorWire | None = None
    all_nodes: bool | None = None


class _CounterSet(msgspec.Struct):
    name: Short
    counters: Counters = msgspec.field(default_factory=dict)


class _Pool(msgspec.Struct, rename="camel"):
    name: str
    generation: int = 0
    resource_slice_count: int = 1


class _SliceSpec(msgspec.Struct, rename="camel"):
    driver: str
    pool: _Pool
    node_name: str | None = None
    node_selector: NodeSelectorWire | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    devices: Annotated[list[_Device], _at_most(SLICE_DEVICES)] | None = None
    shared_counters: Annotated[list[_CounterSet], _at_most(COUNTER_SETS)] | None = None


class ResourceSliceWire(msgspec.Struct):
    metadata: ObjectMeta
    spec: _SliceSpec


class _Cel(msgspec.Struct):
    expression: Annotated[str, _at_most(CEL_TEXT)] = ""


class _Selector(msgspec.Struct):
    cel: _Cel | None = None


class _Opaque(msgspec.Struct):
    driver: Short
    parameters: Any = None


class _Config(msgspec.Struct):
    opaque: _Opaque | None = None


Selectors = Annotated[list[_Selector], _at_most(SELECTORS)]


class _ClassSpec(msgspec.Struct, rename="camel"):
    selectors: Selectors | None = None
    config: Annotated[list[_Config], _at_most(REQUESTS)] | None = None
    extended_resource_name: str | None = None


class DeviceClassWire(msgspec.Struct):
    metadata: ObjectMeta
    spec: _ClassSpec = msgspec.field(default_factory=_ClassSpec)


class _TaintSelector(msgspec.Struct):
    driver: Short | None = None
    pool: Short | None = None
    device: Short | None = None


class _TaintRuleSpec(msgspec.Struct, rename="camel"):
    taint: _DeviceTaint
    device_selector: _TaintSelector | None = None


class DeviceTaintRuleWire(msgspec.Struct):
    metadata: ObjectMeta
    spec: _TaintRuleSpec


class _Toleration(msgspec.Struct):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


Capacities = Annotated[dict[QualifiedName, BoundedQuantity], _at_most(ATTRIBUTES_AND_CAPACITIES)]
Tolerations = Annotated[list[_Toleration], _at_most(TOLERATIONS)]
RequestNames = Annotated[list[Short], _at_most(REQUESTS)]


class _CapacityRequirements(msgspec.Struct):
    requests: Capacities | None = None


class _Exact(msgspec.Struct, rename="camel"):
    device_class_name: Short = ""
    selectors: Selectors | None = None
    allocation_mode: Short = "ExactCount"
    count: int = 1
    admin_access: bool | None = None
    tolerations: Tolerations | None = None
    capacity: _CapacityRequirements | None = None


class _SubRequest(_Exact):
    name: Short = ""


class _Request(msgspec.Struct, rename="camel"):
    name: Short
    exactly: _Exact | None = None
    first_available: Annotated[list[_SubRequest], _at_most(SUBREQUESTS)] | None = None


class _Constraint(msgspec.Struct, rename="camel"):
    requests: RequestNames | None = None
    match_attribute: QualifiedName | None = None
    distinct_attribute: QualifiedName | None = None


class _ClaimConfig(msgspec.Struct):
    requests: RequestNames | None = None
    opaque: _Opaque | None = None


class _ClaimDevices(msgspec.Struct):
    requests: Annotated[list[_Request], _at_most(REQUESTS)] | None = None
    constraints: Annotated[list[_Constraint], _at_most(REQUESTS)] | None = None
    config: Annotated[list[_ClaimConfig], _at_most(REQUESTS)] | None = None


class _ClaimSpec(msgspec.Struct):
    devices: _ClaimDevices = msgspec.field(default_factory=_ClaimDevices)


class _Result(msgspec.Struct, rename="camel"):
    request: Short
    driver: Short
    pool: Short
    device: Short
    admin_access: bool | None = None
    tolerations: Tolerations | None = None
    binding_conditions: Conditions | None = None
    binding_failure_conditions: Conditions | None = None
    share_id: Short | None = msgspec.field(default=None, name="shareID")
    consumed_capacity: Capacities | None = None


class _AllocatedConfig(msgspec.Struct):
    source: Short
    requests: RequestNames | None = None
    opaque: _Opaque | None = None


class _AllocatedDevices(msgspec.Struct):
    results: Annotated[list[_Result], _at_most(RESULTS)] | None = None
    config: Annotated[list[_AllocatedConfig], _at_most(2 * REQUESTS)] | None = None


class _Allocation(msgspec.Struct, rename="camel"):
    devices: _AllocatedDevices = msgspec.field(default_factory=_AllocatedDevices)
    node_selector: NodeSelectorWire | None = None


class _Consumer(msgspec.Struct):
    uid: str = ""


class _ClaimStatus(msgspec.Struct, rename="camel"):
    allocation: _Allocation | None = None
    reserved_for: Annotated[list[_Consumer], _at_most(RESERVED_FOR)] | None = None


class _Owner(msgspec.Struct):
    uid: str = ""
    controller: bool | None = None


class _ClaimMeta(ObjectMeta, rename="camel"):
    owner_references: list[_Owner] | None = None


class ResourceClaimWire(msgspec.Struct):
    metadata: _ClaimMeta
    spec: _ClaimSpec = msgspec.field(default_factory=_ClaimSpec)
    status: _ClaimStatus = msgspec.field(default_factory=_ClaimStatus)


# ---- wire -> core -------------------------------------------------------------------------------


def _term(t: NodeSelectorTermWire) -> NodeSelectorTerm:
    def requirements(wire: list[Any] | None) -> tuple[Requirement, ...]:
        return tuple(Requirement(r.key, r.operator, tuple(r.values or ())) for r in wire or ())

    return NodeSelectorTerm(requirements(t.match_expressions), requirements(t.match_fields))


def _single_term(selector: NodeSelectorWire | None) -> NodeSelectorTerm | None:
    """A slice's or device's node selector: the API allows exactly one term."""
    if selector is None or not selector.node_selector_terms:
        return None
    return _term(selector.node_selector_terms[0])


def _attribute(wire: _Attribute) -> AttributeValue | None:
    if wire.int_ is not None:
        return wire.int_
    if wire.bool_ is not None:
        return wire.bool_
    if wire.string is not None:
        return wire.string
    if wire.version is not None:
        return Version(wire.version)
    return None


def _policy(wire: _Policy | None) -> CapacityRequestPolicy | None:
    if wire is None:
        return None
    valid = wire.valid_range or _Range()
    return CapacityRequestPolicy(
        default=None if wire.default is None else _quantity(wire.default),
        valid_values=tuple(_quantity(v) for v in wire.valid_values or ()),
        valid_min=None if valid.min is None else _quantity(valid.min),
        valid_max=None if valid.max is None else _quantity(valid.max),
        valid_step=None if valid.step is None else _quantity(valid.step),
    )


def _device(wire: _Device) -> Device:
    if len(wire.attributes or ()) + len(wire.capacity or ()) > ATTRIBUTES_AND_CAPACITIES:
        raise msgspec.ValidationError(
            f"device {wire.name}: more than {ATTRIBUTES_AND_CAPACITIES} attributes and "
            "capacities together"
        )
    attributes = {
        name: value
        for name, a in (wire.attributes or {}).items()
        if (value := _attribute(a)) is not None
    }
    return Device(
        name=wire.name,
        attributes=attributes,
        capacity={
            name: DeviceCapacity(_quantity(c.value), _policy(c.request_policy))
            for name, c in (wire.capacity or {}).items()
        },
        consumes_counters=tuple(
            CounterConsumption(
                c.counter_set, {n: _quantity(v.value) for n, v in c.counters.items()}
            )
            for c in wire.consumes_counters or ()
        ),
        taints=tuple(Taint(t.key, t.effect, t.value) for t in wire.taints or ()),
        allow_multiple_allocations=bool(wire.allow_multiple_allocations),
        binds_to_node=bool(wire.binds_to_node),
        binding_conditions=tuple(wire.binding_conditions or ()),
        binding_failure_conditions=tuple(wire.binding_failure_conditions or ()),
        node_name=wire.node_name or "",
        node_selector=_single_term(wire.node_selector),
        all_nodes=bool(wire.all_nodes),
    )


def resource_slice_from_obj(wire: ResourceSliceWire) -> ResourceSlice:
    spec = wire.spec
    return ResourceSlice(
        name=wire.metadata.name,
        driver=spec.driver,
        pool=ResourcePool(spec.pool.name, spec.pool.generation, spec.pool.resource_slice_count),
        node_name=spec.node_name or "",
        node_selector=_single_term(spec.node_selector),
        all_nodes=bool(spec.all_nodes),
        per_device_node_selection=bool(spec.per_device_node_selection),
        devices=tuple(_device(d) for d in spec.devices or ()),
        shared_counters=tuple(
            CounterSet(s.name, {n: _quantity(v.value) for n, v in s.counters.items()})
            for s in spec.shared_counters or ()
        ),
    )


def _opaque(wire: _Opaque | None) -> OpaqueConfig | None:
    if wire is None:
        return None
    text = "" if wire.parameters is None else msgspec.json.encode(wire.parameters).decode()
    if len(text) > OPAQUE_PARAMETERS:
        raise msgspec.ValidationError(
            f"opaque parameters for driver {wire.driver} longer than {OPAQUE_PARAMETERS} bytes"
        )
    return OpaqueConfig(wire.driver, text)


def _selectors(wire: list[_Selector] | None) -> tuple[str, ...]:
    # A selector without CEL keeps its place as "": the allocator refuses it, as kube-scheduler.
    return tuple(s.cel.expression if s.cel is not None else "" for s in wire or ())


def device_class_from_obj(wire: DeviceClassWire) -> DeviceClass:
    return DeviceClass(
        name=wire.metadata.name,
        selectors=_selectors(wire.spec.selectors),
        config=tuple(o for c in wire.spec.config or () if (o := _opaque(c.opaque)) is not None),
        extended_resource_name=wire.spec.extended_resource_name or "",
        created=wire.metadata.creation_timestamp,
    )


def device_taint_rule_from_obj(wire: DeviceTaintRuleWire) -> DeviceTaintRule:
    """The rule's selector and taint; its status (the eviction controller's) is not read."""
    taint = wire.spec.taint
    selector = wire.spec.device_selector
    return DeviceTaintRule(
        name=wire.metadata.name,
        taint=Taint(taint.key, taint.effect, taint.value),
        selector=None
        if selector is None
        else DeviceTaintSelector(selector.driver or "", selector.pool or "", selector.device or ""),
    )


def _toleration(wire: _Toleration) -> Toleration:
    return Toleration(wire.key, wire.operator, wire.value, wire.effect)


def _exact(wire: _Exact) -> ExactRequest:
    return ExactRequest(
        device_class_name=wire.device_class_name,
        selectors=_selectors(wire.selectors),
        allocation_mode=wire.allocation_mode,
        count=wire.count,
        admin_access=bool(wire.admin_access),
        tolerations=tuple(_toleration(t) for t in wire.tolerations or ()),
        capacity={
            n: _quantity(q) for n, q in ((wire.capacity and wire.capacity.requests) or {}).items()
        },
    )


def _allocation(wire: _Allocation) -> Allocation:
    return Allocation(
        results=tuple(
            DeviceResult(
                request=r.request,
                driver=r.driver,
                pool=r.pool,
                device=r.device,
                admin_access=bool(r.admin_access),
                tolerations=tuple(_toleration(t) for t in r.tolerations or ()),
                binding_conditions=tuple(r.binding_conditions or ()),
                binding_failure_conditions=tuple(r.binding_failure_conditions or ()),
                share_id=r.share_id or "",
                consumed_capacity={n: _quantity(q) for n, q in (r.consumed_capacity or {}).items()},
            )
            for r in wire.devices.results or ()
        ),
        config=tuple(
            AllocatedConfig(c.source, tuple(c.requests or ()), _opaque(c.opaque))
            for c in wire.devices.config or ()
        ),
        node_selector=None
        if wire.node_selector is None
        else tuple(_term(t) for t in wire.node_selector.node_selector_terms),
    )


def resource_claim_from_obj(wire: ResourceClaimWire) -> ResourceClaim:
    devices = wire.spec.devices
    return ResourceClaim(
        namespace=wire.metadata.namespace or "default",
        name=wire.metadata.name,
        uid=wire.metadata.uid,
        requests=tuple(
            DeviceRequest(
                r.name,
                exactly=None if r.exactly is None else _exact(r.exactly),
                first_available=tuple(
                    SubRequest(s.name, _exact(s)) for s in r.first_available or ()
                ),
            )
            for r in devices.requests or ()
        ),
        constraints=tuple(
            DeviceConstraint(
                tuple(c.requests or ()), c.match_attribute or "", c.distinct_attribute or ""
            )
            for c in devices.constraints or ()
        ),
        config=tuple(
            ClaimConfig(tuple(c.requests or ()), _opaque(c.opaque)) for c in devices.config or ()
        ),
        allocation=None if wire.status.allocation is None else _allocation(wire.status.allocation),
        reserved_for=tuple(c.uid for c in wire.status.reserved_for or ()),
        deleting=wire.metadata.deletion_timestamp is not None,
        extended=(wire.metadata.annotations or {}).get(EXTENDED_RESOURCE_CLAIM) == "true",
        owner=next((o.uid for o in wire.metadata.owner_references or () if o.controller), ""),
    )


_slice_decoder = msgspec.json.Decoder(ResourceSliceWire)
_class_decoder = msgspec.json.Decoder(DeviceClassWire)
_claim_decoder = msgspec.json.Decoder(ResourceClaimWire)
_rule_decoder = msgspec.json.Decoder(DeviceTaintRuleWire)


def decode_resource_slice(raw: bytes) -> ResourceSlice:
    return resource_slice_from_obj(_slice_decoder.decode(raw))


def decode_device_class(raw: bytes) -> DeviceClass:
    return device_class_from_obj(_class_decoder.decode(raw))


def decode_resource_claim(raw: bytes) -> ResourceClaim:
    return resource_claim_from_obj(_claim_decoder.decode(raw))


def decode_device_taint_rule(raw: bytes) -> DeviceTaintRule:
    return device_taint_rule_from_obj(_rule_decoder.decode(raw))


class _Named(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


_named_decoder = msgspec.json.Decoder(_Named)


def object_meta(raw: bytes) -> ObjectMeta:
    """The metadata of a DRA object whose whole may be refused (its name, namespace and
    resourceVersion)."""
    return _named_decoder.decode(raw).metadata


class Refused(msgspec.Struct, frozen=True):
    """A DRA object beyond the API's limits or malformed: which one, and why (msgspec's
    message names the field: "Expected `array` of length <= 128 - at `$.spec.devices`")."""

    kind: str
    namespace: str
    name: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where} refused: {self.reason}"


def decode_or_refuse(
    kind: str, decode: Callable[[bytes], T], raw: bytes, namespaced: bool
) -> T | Refused:
    """``decode(raw)``, or why the object is refused (its name read on its own)."""
    try:
        return decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        meta = object_meta(raw)
        namespace = (meta.namespace or "default") if namespaced else ""
        return Refused(kind, namespace, meta.name, str(exc))


def convert_resource_slice(obj: dict[str, Any]) -> ResourceSlice:
    """From a YAML-loaded dict; raises msgspec.ValidationError naming the field path."""
    return resource_slice_from_obj(msgspec.convert(obj, ResourceSliceWire, strict=False))


def convert_device_class(obj: dict[str, Any]) -> DeviceClass:
    return device_class_from_obj(msgspec.convert(obj, DeviceClassWire, strict=False))


def convert_resource_claim(obj: dict[str, Any]) -> ResourceClaim:
    return resource_claim_from_obj(msgspec.convert(obj, ResourceClaimWire, strict=False))


def convert_device_taint_rule(obj: dict[str, Any]) -> DeviceTaintRule:
    return device_taint_rule_from_obj(msgspec.convert(obj, DeviceTaintRuleWire, strict=False))


# ---- core -> wire -------------------------------------------------------------------------------


def _requirements_json(requirements: tuple[Requirement, ...]) -> list[dict[str, Any]]:
    return [{"key": r.key, "operator": r.operator, "values": list(r.values)} for r in requirements]


def _term_json(term: NodeSelectorTerm) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if term.match_expressions:
        out["matchExpressions"] = _requirements_json(term.match_expressions)
    if term.match_fields:
        out["matchFields"] = _requirements_json(term.match_fields)
    return out


def _opaque_json(opaque: OpaqueConfig) -> dict[str, Any]:
    parameters = msgspec.json.decode(opaque.parameters) if opaque.parameters else None
    return {"driver": opaque.driver, "parameters": parameters}


def _toleration_json(t: Toleration) -> dict[str, Any]:
    out: dict[str, Any] = {"operator": t.operator}
    for name, value in (("key", t.key), ("value", t.value), ("effect", t.effect)):
        if value:
            out[name] = value
    return out


def allocation_json(allocation: Allocation) -> dict[str, Any]:
    """``status.allocation`` in the v1 JSON shape (empty fields left out, as the apiserver
    would omit them)."""
    results = []
    for r in allocation.results:
        result: dict[str, Any] = {
            "request": r.request,
            "driver": r.driver,
            "pool": r.pool,
            "device": r.device,
        }
        if r.admin_access:
            result["adminAccess"] = True
        if r.tolerations:
            result["tolerations"] = [_toleration_json(t) for t in r.tolerations]
        if r.binding_conditions:
            result["bindingConditions"] = list(r.binding_conditions)
        if r.binding_failure_conditions:
            result["bindingFailureConditions"] = list(r.binding_failure_conditions)
        if r.share_id:
            result["shareID"] = r.share_id
        if r.consumed_capacity:
            result["consumedCapacity"] = dict(r.consumed_capacity)
        results.append(result)
    devices: dict[str, Any] = {"results": results}
    if allocation.config:
        devices["config"] = [
            {
                "source": c.source,
                **({"requests": list(c.requests)} if c.requests else {}),
                **({"opaque": _opaque_json(c.opaque)} if c.opaque is not None else {}),
            }
            for c in allocation.config
        ]
    out: dict[str, Any] = {"devices": devices}
    if allocation.node_selector is not None:
        out["nodeSelector"] = {
            "nodeSelectorTerms": [_term_json(t) for t in allocation.node_selector]
        }
    return out


def _exact_json(e: ExactRequest) -> dict[str, Any]:
    out: dict[str, Any] = {
        "deviceClassName": e.device_class_name,
        "allocationMode": e.allocation_mode,
    }
    if e.allocation_mode == EXACT_COUNT:
        out["count"] = e.count
    if e.selectors:
        out["selectors"] = [{"cel": {"expression": s}} for s in e.selectors]
    if e.admin_access:
        out["adminAccess"] = True
    if e.tolerations:
        out["tolerations"] = [_toleration_json(t) for t in e.tolerations]
    if e.capacity:
        out["capacity"] = {"requests": dict(e.capacity)}
    return out


def requests_json(requests: tuple[DeviceRequest, ...]) -> list[dict[str, Any]]:
    """``spec.devices.requests`` in the v1 JSON shape (the special claim the binder creates)."""
    out = []
    for r in requests:
        request: dict[str, Any] = {"name": r.name}
        if r.exactly is not None:
            request["exactly"] = _exact_json(r.exactly)
        if r.first_available:
            request["firstAvailable"] = [
                {"name": s.name, **_exact_json(s.exactly)} for s in r.first_available
            ]
        out.append(request)
    return out
