"""msgspec codecs from raw Kubernetes JSON (or YAML-loaded dicts) to the core's inputs.

The Structs mirror v1 Node and v1 Pod but declare only the fields the scheduler reads; msgspec
skips the rest cheaply (a real pod has hundreds of fields). They are not strict about unknown
fields on purpose, unlike the config file. Quantities arrive as strings from the apiserver but as
numbers from hand-written YAML (``nvidia.com/gpu: 1``), so both are accepted and kept as strings
for the core's quantity parser, which reports malformed values per pod (and, for a node's
status.allocatable, per node, with a warning). Of a node's status only allocatable (or capacity,
which the apiserver copies into a missing allocatable) is read; heartbeats and conditions are not.

No kubernetes-asyncio import here: the hot path never builds client model objects.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import msgspec

from scheduler.core.objects import ContainerInput, NodeInput, PodInput, Taint, Toleration

Quantity = str | int | float


class ObjectMeta(msgspec.Struct, rename="camel"):
    name: str = ""
    namespace: str = "default"
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    deletion_timestamp: str | None = None
    creation_timestamp: str = ""


class TaintWire(msgspec.Struct):
    key: str
    effect: str
    value: str = ""


class NodeSpecWire(msgspec.Struct):
    unschedulable: bool = False
    taints: list[TaintWire] | None = None


class NodeStatusWire(msgspec.Struct):
    # Only these two of a node's status; conditions, images and heartbeats are skipped.
    allocatable: dict[str, Quantity] | None = None
    capacity: dict[str, Quantity] | None = None


class Node(msgspec.Struct):
    metadata: ObjectMeta
    spec: NodeSpecWire = msgspec.field(default_factory=NodeSpecWire)
    status: NodeStatusWire | None = None


class Resources(msgspec.Struct):
    limits: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None


class ContainerWire(msgspec.Struct, rename="camel"):
    name: str = ""
    resources: Resources = msgspec.field(default_factory=Resources)
    restart_policy: str = ""


class TolerationWire(msgspec.Struct):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class PodSpecWire(msgspec.Struct, rename="camel"):
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    node_selector: dict[str, str] | None = None
    tolerations: list[TolerationWire] | None = None
    containers: list[ContainerWire] = msgspec.field(default_factory=list)
    init_containers: list[ContainerWire] | None = None


class PodStatusWire(msgspec.Struct):
    phase: str = "Pending"


class Pod(msgspec.Struct):
    metadata: ObjectMeta
    spec: PodSpecWire = msgspec.field(default_factory=PodSpecWire)
    status: PodStatusWire = msgspec.field(default_factory=PodStatusWire)


def _quantities(values: dict[str, Quantity] | None) -> dict[str, str]:
    if not values:
        return {}
    return {k: v if isinstance(v, str) else _number(v) for k, v in values.items()}


def _number(v: int | float) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _container(c: ContainerWire) -> ContainerInput:
    return ContainerInput(
        c.name,
        limits=_quantities(c.resources.limits),
        requests=_quantities(c.resources.requests),
        restart_policy=c.restart_policy,
    )


def node_from_obj(node: Node, resources: Collection[str] | None = None) -> NodeInput:
    """``resources``: keep only these names of status.allocatable (the whole-GPU resources, the
    only ones the core reads), so that a NodeInput changes when they change and not otherwise."""
    return NodeInput(
        node.metadata.name,
        labels=dict(node.metadata.labels or {}),
        annotations=dict(node.metadata.annotations or {}),
        unschedulable=node.spec.unschedulable,
        taints=tuple(Taint(t.key, t.effect, t.value) for t in node.spec.taints or ()),
        allocatable=_allocatable(node.status, resources),
    )


def _allocatable(
    status: NodeStatusWire | None, resources: Collection[str] | None
) -> dict[str, str] | None:
    if status is None:
        return None
    # The apiserver defaults a missing allocatable to the capacity; hand-written YAML gets the same.
    values = status.allocatable if status.allocatable is not None else status.capacity
    quantities = _quantities(values)
    if resources is None:
        return quantities
    return {k: v for k, v in quantities.items() if k in resources}


def pod_from_obj(pod: Pod) -> PodInput:
    spec = pod.spec
    return PodInput(
        pod.metadata.namespace or "default",
        pod.metadata.name,
        uid=pod.metadata.uid,
        scheduler_name=spec.scheduler_name,
        node_name=spec.node_name,
        phase=pod.status.phase,
        labels=dict(pod.metadata.labels or {}),
        annotations=dict(pod.metadata.annotations or {}),
        containers=tuple(_container(c) for c in spec.containers),
        init_containers=tuple(_container(c) for c in spec.init_containers or ()),
        node_selector=dict(spec.node_selector or {}),
        tolerations=tuple(
            Toleration(t.key, t.operator, t.value, t.effect) for t in spec.tolerations or ()
        ),
        deleting=pod.metadata.deletion_timestamp is not None,
        created=pod.metadata.creation_timestamp,
    )


_pod_decoder = msgspec.json.Decoder(Pod)
_node_decoder = msgspec.json.Decoder(Node)


def decode_pod(raw: bytes) -> PodInput:
    return pod_from_obj(_pod_decoder.decode(raw))


def decode_node(raw: bytes, resources: Collection[str] | None = None) -> NodeInput:
    return node_from_obj(_node_decoder.decode(raw), resources)


def convert_pod(obj: dict[str, Any]) -> PodInput:
    """From a YAML-loaded dict; raises msgspec.ValidationError naming the field path."""
    return pod_from_obj(msgspec.convert(obj, Pod, strict=False))


def convert_node(obj: dict[str, Any], resources: Collection[str] | None = None) -> NodeInput:
    return node_from_obj(msgspec.convert(obj, Node, strict=False), resources)
