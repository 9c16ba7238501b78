"""Topology domains between nodes (issue 21): the levels nodes are grouped by, and which domain of
each level a node is in.

A **hierarchy** is an ordered list of levels, widest first, hostname last. Each level is a
node-label key, named by its alias when it has one (``block``), else by the key. The configured
hierarchy is ``topology.levels`` followed by the built-in NVLink levels when
``topology.acceleratorLabel`` is set: ``nvlink-domain`` (the label's value up to its last ``.``:
GPU feature discovery writes ``<clusterUUID>.<cliqueId>``, the UUID naming one NVLink fabric) and
``nvlink`` (the whole value: the same clique id appears under different UUIDs, so only the whole
value names a clique). A Kueue or KAI ``Topology`` object is a hierarchy of its own, which a pod
may name (KAI) or whose level keys a pod's annotation names (Kueue).

A **domain** of level i is the tuple of the node's values of levels 0..i, from the root down: two
blocks may both have a ``rack-1``, and they are two racks. A node without a level's label belongs
to no domain at that level or below (its path stops there). The hostname level's value is the
node's name.
"""

from __future__ import annotations

from collections.abc import Mapping

from msgspec import Struct

from ..model.objects import NodeInput, TopologyInput
from ..settings import TopologySettings

HOSTNAME_LABEL = "kubernetes.io/hostname"
NVLINK = "nvlink"
NVLINK_DOMAIN = "nvlink-domain"

# A path: a node's values from the root down, as far as it has the levels' labels.
Path = tuple[str, ...]


class Level(Struct, frozen=True):
    label: str  # the node-label key
    alias: str = ""
    prefix: bool = False  # the value up to its last "." (nvlink-domain)

    @property
    def name(self) -> str:
        """How reasons and the assignment annotation name the level."""
        return self.alias or self.label

    def value(self, node: NodeInput) -> str | None:
        if self.label == HOSTNAME_LABEL:
            return node.name
        raw = node.labels.get(self.label)
        if not raw:
            return None
        if self.prefix:
            head, dot, _ = raw.rpartition(".")
            return head if dot else raw
        return raw


class Hierarchy(Struct, frozen=True):
    source: str  # "the config", "Kueue Topology <name>", "KAI Topology <name>"
    levels: tuple[Level, ...]  # widest first; the hostname level last

    @property
    def host(self) -> int:
        """The hostname level's index (the last)."""
        return len(self.levels) - 1

    def find(self, name: str) -> int | None:
        """The index of the level named ``name`` (an alias, or a label key), None if unknown. A
        label key the built-in levels share names the whole value's level (nvlink)."""
        for i, level in enumerate(self.levels):
            if level.alias == name:
                return i
        for i, level in enumerate(self.levels):
            if level.label == name and not level.prefix:
                return i
        return None

    def known(self) -> str:
        return ", ".join(level.name for level in self.levels)

    def path(self, node: NodeInput) -> Path:
        """The node's values of the levels above hostname, from the root down, up to the first
        level whose label it lacks."""
        out: list[str] = []
        for level in self.levels[:-1]:
            value = level.value(node)
            if value is None:
                break
            out.append(value)
        return tuple(out)

    def describe(self, path: Path) -> str:
        """``block=b1,rack=r07``: a domain as reasons print it."""
        return ",".join(f"{level.name}={v}" for level, v in zip(self.levels, path, strict=False))

    def labels(self, path: Path) -> dict[str, str]:
        """The domain as the assignment annotation's ``topology``: level name -> value."""
        return {level.name: v for level, v in zip(self.levels, path, strict=False)}


def configured(settings: TopologySettings) -> Hierarchy:
    """The config's hierarchy: its levels, the built-in NVLink levels, hostname."""
    levels = [Level(level.node_label, level.alias) for level in settings.levels]
    if settings.accelerator_label:
        levels.append(Level(settings.accelerator_label, NVLINK_DOMAIN, prefix=True))
        levels.append(Level(settings.accelerator_label, NVLINK))
    levels.append(Level(HOSTNAME_LABEL))
    return Hierarchy("the config", tuple(levels))


def of_topology(topology: TopologyInput) -> Hierarchy:
    """A Kueue or KAI Topology's hierarchy: its levels, and hostname after them when it does not
    end with it (both projects allow hostname only as the last level)."""
    levels = [Level(level.node_label, level.alias) for level in topology.levels]
    if not levels or levels[-1].label != HOSTNAME_LABEL:
        levels.append(Level(HOSTNAME_LABEL))
    return Hierarchy(f"{topology.kind} Topology {topology.name}", tuple(levels))


def kueue_hierarchy(label: str, topologies: Mapping[str, TopologyInput]) -> Hierarchy | None:
    """The hierarchy of the first Kueue Topology (by name) with a level of this label key: a
    Kueue pod names a level by key, its Topology through its ResourceFlavor (which the scheduler
    does not read)."""
    for key in sorted(topologies):
        topology = topologies[key]
        if topology.kind == "Kueue" and any(lv.node_label == label for lv in topology.levels):
            return of_topology(topology)
    return None


def in_use(hierarchy: Hierarchy, label_keys: Mapping[str, int]) -> bool:
    """True when some node carries the label of a level above hostname (``label_keys`` counts
    the nodes per label key, ClusterState.label_keys): otherwise every domain is the cluster."""
    return any(label_keys.get(level.label, 0) for level in hierarchy.levels[:-1])
