"""Read v1 Node and v1 Pod objects (and namespaces, claims, volumes, PodGroups, Kueue's and
KAI's Topology objects, and DRA's ResourceSlices, DeviceTaintRules, DeviceClasses, ResourceClaims
and ResourceClaimTemplates) from YAML or JSON files.

A file may hold several YAML documents, or a ``kind: List`` with ``items``. Every document is
composed separately so its start line is known: an error names the file and line, and for an
object that does not decode, the field path inside it. Objects of other kinds are counted and
skipped. JSON is YAML, so one reader serves both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from scheduler.core.model.dra import DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice
from scheduler.core.model.objects import (
    ClaimInput,
    NamespaceInput,
    NodeInput,
    PodGroupInput,
    PodInput,
    TopologyInput,
    VolumeInput,
)
from scheduler.kube.codec import (
    Claim,
    Namespace,
    Volume,
    claim_from_obj,
    convert_node,
    convert_pod,
    namespace_from_obj,
    volume_from_obj,
)
from scheduler.kube.dracodec import (
    convert_device_class,
    convert_device_taint_rule,
    convert_resource_claim,
    convert_resource_slice,
)
from scheduler.kube.podgroups import POD_GROUP_GROUPS, PodGroupError, convert_pod_group
from scheduler.kube.topologies import KINDS as TOPOLOGY_GROUPS
from scheduler.kube.topologies import TopologyObjectError, convert_topology

T = TypeVar("T")

try:
    _Base: Any = yaml.CSafeLoader
except AttributeError:  # PyYAML without libyaml
    _Base = yaml.SafeLoader


class _Loader(_Base):  # type: ignore[misc]
    """SafeLoader that keeps YAML 1.1 timestamps as text.

    Hand-written manifests often leave ``creationTimestamp: 2026-01-01T00:00:00Z`` unquoted;
    SafeLoader would make it a datetime, which the codec (typed like the JSON the apiserver sends)
    rejects. The apiserver's own YAML reader keeps it a string, and so do we.
    """


def _timestamp_as_text(loader: Any, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


# add_constructor copies the class's table first, so yaml's own loaders are left untouched.
_Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)


class LoadError(Exception):
    """Unreadable input: the CLI exits 2 with this message."""


class Loaded(msgspec.Struct):
    nodes: list[NodeInput] = msgspec.field(default_factory=list)
    pods: list[PodInput] = msgspec.field(default_factory=list)
    namespaces: list[NamespaceInput] = msgspec.field(default_factory=list)
    claims: list[ClaimInput] = msgspec.field(default_factory=list)
    volumes: list[VolumeInput] = msgspec.field(default_factory=list)
    # DRA: ResourceClaims (allocated or not, as written), DeviceClasses, ResourceSlices and the
    # DeviceTaintRules that taint their devices.
    resource_claims: list[ResourceClaim] = msgspec.field(default_factory=list)
    device_classes: list[DeviceClass] = msgspec.field(default_factory=list)
    resource_slices: list[ResourceSlice] = msgspec.field(default_factory=list)
    device_taint_rules: list[DeviceTaintRule] = msgspec.field(default_factory=list)
    # ResourceClaimTemplates, each as the claim it stamps out (named as the template).
    claim_templates: list[ResourceClaim] = msgspec.field(default_factory=list)
    # PodGroups of scheduler-plugins (scheduling.x-k8s.io) and Volcano (scheduling.volcano.sh).
    pod_groups: list[PodGroupInput] = msgspec.field(default_factory=list)
    # Kueue's (kueue.x-k8s.io) and KAI's (kai.scheduler) Topology objects.
    topologies: list[TopologyInput] = msgspec.field(default_factory=list)
    skipped: dict[str, int] = msgspec.field(default_factory=dict)


def load_files(paths: list[str]) -> Loaded:
    out = Loaded()
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise LoadError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise LoadError(f"{path}: not a text file") from None
        _load_text(path, text, out)
    return out


def _load_text(path: str, text: str, out: Loaded) -> None:
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1
            doc = loader.construct_document(node)
            _add(path, line, doc, out)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = exc.problem or str(exc)
        raise LoadError(f"{path}{where}: YAML error: {problem}") from None
    except yaml.YAMLError as exc:
        raise LoadError(f"{path}: YAML error: {exc}") from None
    finally:
        loader.dispose()


def _add(path: str, line: int, doc: Any, out: Loaded) -> None:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise LoadError(f"{path}:{line}: expected a Kubernetes object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if kind == "List" or (isinstance(kind, str) and kind.endswith("List") and "items" in doc):
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise LoadError(f"{path}:{line}: items: expected a list")
        for pos, item in enumerate(items):
            _add_object(path, line, f"items[{pos}].", item, out)
        return
    _add_object(path, line, "", doc, out)


def _add_object(path: str, line: int, prefix: str, obj: Any, out: Loaded) -> None:
    if not isinstance(obj, dict):
        raise LoadError(f"{path}:{line}: {prefix or 'document'}: expected an object")
    kind = obj.get("kind")
    if kind == "PodGroup":
        _add_grouped(
            "PodGroup", POD_GROUP_GROUPS, convert_pod_group, PodGroupError, out.pod_groups,
            f"{path}:{line}: {prefix}", obj, out,
        )  # fmt: skip
        return
    if kind == "Topology":
        _add_grouped(
            "Topology", TOPOLOGY_GROUPS, convert_topology, TopologyObjectError, out.topologies,
            f"{path}:{line}: {prefix}", obj, out,
        )  # fmt: skip
        return
    try:
        if kind == "Node":
            out.nodes.append(convert_node(obj))
        elif kind == "Pod":
            out.pods.append(convert_pod(obj))
        elif kind == "Namespace":
            out.namespaces.append(namespace_from_obj(msgspec.convert(obj, Namespace, strict=False)))
        elif kind == "PersistentVolumeClaim":
            out.claims.append(claim_from_obj(msgspec.convert(obj, Claim, strict=False)))
        elif kind == "PersistentVolume":
            out.volumes.append(volume_from_obj(msgspec.convert(obj, Volume, strict=False)))
        elif kind == "ResourceClaim":
            out.resource_claims.append(convert_resource_claim(obj))
        elif kind == "DeviceClass":
            out.device_classes.append(convert_device_class(obj))
        elif kind == "ResourceSlice":
            out.resource_slices.append(convert_resource_slice(obj))
        elif kind == "DeviceTaintRule":
            out.device_taint_rules.append(convert_device_taint_rule(obj))
        elif kind == "ResourceClaimTemplate":
            spec = obj.get("spec") or {}
            template = {"metadata": obj.get("metadata") or {}, "spec": spec.get("spec") or {}}
            out.claim_templates.append(convert_resource_claim(template))
        else:
            name = str(kind) if kind else "(no kind)"
            out.skipped[name] = out.skipped.get(name, 0) + 1
            return
    except msgspec.ValidationError as exc:
        text = str(exc)
        message, sep, field = text.rpartition(" - at `")
        field = field.rstrip("`")
        if field.startswith("key` in `"):  # msgspec's wording for a bad map key
            field, message = field.removeprefix("key` in `"), f"a key: {message}"
        field = _name_keys(obj, field.removeprefix("$"), message) if sep else ""
        field = field.removeprefix(".")
        where = f"{prefix}{field}: " if field else prefix
        raise LoadError(f"{path}:{line}: {kind} {where}{message if sep else text}") from None
    by_kind: dict[str, list[Any]] = {
        "Node": out.nodes,
        "Pod": out.pods,
        "Namespace": out.namespaces,
        "PersistentVolumeClaim": out.claims,
        "PersistentVolume": out.volumes,
        "ResourceClaim": out.resource_claims,
        "DeviceClass": out.device_classes,
        "ResourceSlice": out.resource_slices,
        "DeviceTaintRule": out.device_taint_rules,
        "ResourceClaimTemplate": out.claim_templates,
    }
    if not by_kind[str(kind)][-1].name:
        raise LoadError(f"{path}:{line}: {kind} {prefix}metadata.name: missing")


def _add_grouped(
    kind: str,
    groups: Collection[str],
    convert: Callable[[dict[str, Any]], T],
    errors: type[Exception],
    into: list[T],
    where: str,
    obj: dict[str, Any],
    out: Loaded,
) -> None:
    """An object of a kind several projects define (PodGroup, Topology): one of the API groups
    the scheduler reads is checked as the live scheduler checks a watched one; another project's
    is counted as skipped."""
    api_version = obj.get("apiVersion")
    group = api_version.partition("/")[0] if isinstance(api_version, str) else ""
    if group not in groups:
        name = f"{kind} ({api_version})"
        out.skipped[name] = out.skipped.get(name, 0) + 1
        return
    try:
        into.append(convert(obj))
    except errors as exc:
        raise LoadError(f"{where}{exc}") from None


_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_JSON_TYPE = {bool: "bool", int: "int", float: "float", str: "str", list: "array", dict: "object"}


def _name_keys(obj: Any, path: str, message: str) -> str:
    """msgspec's path with its ``[...]`` (a map key it does not name) replaced by the key.

    Walks the object along the path; at a ``[...]`` it takes the first key whose value has the
    type msgspec complained about ("got `int`"): msgspec checks a map in order and stops at its
    first bad value, so ``metadata.labels[...]`` becomes ``metadata.labels[gpu-topology-replica]``.
    When no key can be found the path stays as it was.
    """
    got = message.rpartition("got `")[2].rstrip("`")
    out: list[str] = []
    node: Any = obj
    segments = list(_SEGMENT.finditer(path))
    for pos, seg in enumerate(segments):
        name, index = seg.group(1), seg.group(2)
        if name is not None:
            out.append(f".{name}")
            node = node.get(name) if isinstance(node, dict) else None
        elif index != "...":
            out.append(f"[{index}]")
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) else None
        else:
            last = pos == len(segments) - 1
            keys = [
                k
                for k, v in (node.items() if isinstance(node, dict) else ())
                if last and _JSON_TYPE.get(type(v), "null" if v is None else "") == got
            ]
            if not keys:
                return path
            out.append(f"[{keys[0]}]")
    return "".join(out)
