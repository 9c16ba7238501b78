"""Topology objects pods may name (issue 21): Kueue's and KAI's, read like the PodGroups.

- Kueue: ``kueue.x-k8s.io`` ``Topology``, cluster-scoped, ``spec.levels[].nodeLabel``, served as
  v1beta2 by current Kueue and v1beta1 by older ones (the same shape): the version the CRD
  serves is used, v1beta2 first (``served_version``);
- KAI: ``kai.scheduler/v1alpha1`` ``Topology``, cluster-scoped, ``spec.levels[]`` with
  ``nodeLabel`` and an optional ``alias``.

Both allow 1-16 unique levels, hostname only last; an object breaking that is refused with an
error naming it and the field (the watch goes on; its pods wait, "waiting for KAI Topology x").
Their CRDs are watched while they exist, as the PodGroup CRDs are (``CustomResource``).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from scheduler.core.model.objects import TopologyInput, TopologyLevel

from .podgroups import MAX_NAME_LENGTH, CustomResource, crd_versions_served

KUEUE_GROUP: Final = "kueue.x-k8s.io"
KAI_GROUP: Final = "kai.scheduler"
KUEUE_TOPOLOGIES: Final = CustomResource(KUEUE_GROUP, "v1beta2", "topologies")
KAI_TOPOLOGIES: Final = CustomResource(KAI_GROUP, "v1alpha1", "topologies")
# By CRD name; the versions each may be served as, preferred first.
TOPOLOGY_RESOURCES: Final[dict[str, CustomResource]] = {
    r.name: r for r in (KUEUE_TOPOLOGIES, KAI_TOPOLOGIES)
}
VERSIONS: Final[dict[str, tuple[str, ...]]] = {
    KUEUE_TOPOLOGIES.name: ("v1beta2", "v1beta1"),
    KAI_TOPOLOGIES.name: ("v1alpha1",),
}
KINDS: Final = {KUEUE_GROUP: "Kueue", KAI_GROUP: "KAI"}
MAX_LEVELS: Final = 16
MAX_LABEL_LENGTH: Final = 317  # a qualified label key: 253-character prefix, "/", 63 characters
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"


class TopologyObjectError(ValueError):
    """A Topology the scheduler cannot use: ``<kind> Topology <name>: <field>: <detail>``."""

    def __init__(self, kind: str, name: str, field: str, detail: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f"{kind} Topology {name or '?'}: {field}: {detail}")


class _Level(msgspec.Struct, rename="camel"):
    node_label: str = ""
    alias: str = ""


class _Spec(msgspec.Struct):
    levels: list[_Level] = msgspec.field(default_factory=list)


class _Meta(msgspec.Struct, rename="camel"):
    name: str = ""
    resource_version: str = ""


class Topology(msgspec.Struct, rename="camel"):
    """A Topology of either project as served (the reflectors' item type)."""

    api_version: str = ""
    kind: str = ""
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)


def topology_from_obj(obj: Topology) -> TopologyInput:
    """The core's TopologyInput; TopologyObjectError naming the field when it is not usable."""
    group = obj.api_version.partition("/")[0]
    kind = KINDS.get(group, group or "?")
    name = obj.metadata.name[:MAX_NAME_LENGTH]
    if group not in KINDS:
        raise TopologyObjectError(kind, name, "apiVersion", f"{obj.api_version[:100]!r}")
    if not name:
        raise TopologyObjectError(kind, name, "metadata.name", "missing")
    levels = obj.spec.levels
    if not 1 <= len(levels) <= MAX_LEVELS:
        raise TopologyObjectError(
            kind, name, "spec.levels", f"{len(levels)} levels (1 to {MAX_LEVELS} allowed)"
        )
    seen: set[str] = set()
    out = []
    for pos, level in enumerate(levels):
        where = f"spec.levels[{pos}]"
        if not level.node_label or len(level.node_label) > MAX_LABEL_LENGTH:
            raise TopologyObjectError(kind, name, f"{where}.nodeLabel", "missing or too long")
        if level.node_label == HOSTNAME_LABEL and pos != len(levels) - 1:
            raise TopologyObjectError(kind, name, f"{where}.nodeLabel", "hostname only last")
        for text in (level.node_label, level.alias):
            if text and text in seen:
                raise TopologyObjectError(kind, name, where, f"{text} names two levels")
            seen.add(text)
        alias = level.alias[:MAX_LABEL_LENGTH] if kind == "KAI" else ""
        out.append(TopologyLevel(level.node_label, alias))
    return TopologyInput(kind, name, tuple(out))


def topology_or_error(obj: Topology) -> TopologyInput | TopologyObjectError:
    try:
        return topology_from_obj(obj)
    except TopologyObjectError as exc:
        return exc


def convert_topology(obj: dict[str, Any]) -> TopologyInput:
    """From a YAML-loaded dict (``simulate``): the same checks as a watched one."""
    try:
        return topology_from_obj(msgspec.convert(obj, Topology, strict=False))
    except msgspec.ValidationError as exc:
        name = str((obj.get("metadata") or {}).get("name", "?"))
        group = str(obj.get("apiVersion", "")).partition("/")[0]
        raise TopologyObjectError(KINDS.get(group, group), name, "object", str(exc)) from None


def served_version(body: bytes, name: str) -> str | None:
    """The version of a Topology CRD to list and watch: the first of ``VERSIONS[name]`` it
    serves, None when it serves none of them."""
    served = crd_versions_served(body)
    return next((v for v in VERSIONS.get(name, ()) if v in served), None)
