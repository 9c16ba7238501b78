"""The watched inputs: one keyed collection type for every kind of object the filters read.

Namespaces, PersistentVolumeClaims and PersistentVolumes, PodDisruptionBudgets, DRA
ResourceSlices, DeviceClasses and ResourceClaims, PodGroups and Topology objects all arrive the
same way (a LIST,
then watch events) and are kept the same way (by key, the last one seen). ``Keyed`` is that way,
once: ``replace`` takes a LIST, ``event`` a watch event, and both say whether anything the core
reads changed, so the shell wakes waiting pods only then.

A ``Kind`` names one collection and is its typed key: ``Inputs.of(NAMESPACES)`` is a
``Keyed[NamespaceInput]``, so ``intake.replace(NAMESPACES, items)`` is checked by mypy against
the items' type without one method per kind.

Some LISTs cover only part of a collection: a PodGroup watch lists one API group's PodGroups,
a Topology watch one project's Topologies. Such a kind has a ``part`` (the API group, the
project), and ``replace(items, part)`` leaves the other parts alone.

DRA (issue 29; the seam between the core and the shell's watches): ``RESOURCE_SLICES``,
``DEVICE_TAINT_RULES``, ``DEVICE_CLASSES`` and ``RESOURCE_CLAIMS`` hold the full ``model/dra.py``
objects, as scheduler/kube/dracodec.py decodes them (a claim with its spec, ``status.allocation``,
``reservedFor`` uids, deletion, and the extended-resource annotation and controller owner). Slices,
DeviceTaintRules and classes are keyed by name (cluster-scoped), claims by "namespace/name". Every
claim's allocation, whoever made it, is in use in the snapshot (snapshot/devices.py follows the
claims through ``on_item``); what a pod says of its claims is ``PodInput.resource_claims``
(``spec.resourceClaims`` with the claim names ``status.resourceClaimStatuses`` resolves) and
``PodInput.extended_claim``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

from ..model.dra import DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice
from ..model.objects import (
    ClaimInput,
    DisruptionBudgetInput,
    NamespaceInput,
    PodGroupInput,
    TopologyInput,
    VolumeInput,
)

T = TypeVar("T")

# A watch event's type, as the apiserver names it ("ADDED", "MODIFIED", "DELETED").
DELETED = "DELETED"


class Kind(Generic[T]):
    """One kind of watched input: its name, how an item is keyed, which part of the collection
    a LIST of it covers (None: the whole), and which of a snapshot's collections holds it."""

    __slots__ = ("key", "name", "of", "part")

    def __init__(
        self,
        name: str,
        key: Callable[[T], str],
        of: Callable[[Inputs], Keyed[T]],
        part: Callable[[T], str] | None = None,
    ) -> None:
        self.name = name
        self.key = key
        self.of = of
        self.part = part

    def __repr__(self) -> str:
        return f"Kind({self.name})"


class Keyed(Mapping[str, T]):
    """The items of one kind by key: read as a Mapping, changed by put/remove/replace/event.

    ``on_change`` is called after every change (what the snapshot derives from the items, such
    as DRA's extended resources or the topology hierarchies, follows it); ``on_item`` before it,
    with the item before and after (None: absent), for what the snapshot keeps incrementally
    (the devices DRA claims hold).
    """

    __slots__ = ("_items", "kind", "on_change", "on_item")

    def __init__(self, kind: Kind[T], on_change: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self.on_change = on_change
        self.on_item: Callable[[T | None, T | None], None] | None = None
        self._items: dict[str, T] = {}

    # Mapping, with get and `in` straight from the dict (filters ask per pod and per term).
    def __getitem__(self, key: str) -> T:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: str, default: T | None = None) -> T | None:  # type: ignore[override]
        return self._items.get(key, default)

    def __repr__(self) -> str:
        return f"Keyed({self.kind.name}, {self._items!r})"

    def put(self, item: T) -> bool:
        """Add or replace ``item`` under its key. Whether it changed anything."""
        key = self.kind.key(item)
        before = self._items.get(key)
        if before == item:
            return False
        self._items[key] = item
        if self.on_item is not None:
            self.on_item(before, item)
        self._changed()
        return True

    def remove(self, key: str) -> bool:
        """Drop the item under ``key``. Whether there was one."""
        before = self._items.pop(key, None)
        if before is None:
            return False
        if self.on_item is not None:
            self.on_item(before, None)
        self._changed()
        return True

    def replace(self, items: Iterable[T], part: str | None = None) -> bool:
        """A LIST: the items become ``items`` (only those of ``part``, for a kind whose LISTs
        cover one part each). Whether anything changed."""
        listed = {self.kind.key(item): item for item in items}
        which = self.kind.part
        gone = [
            key
            for key, item in self._items.items()
            if key not in listed and (part is None or which is None or which(item) == part)
        ]
        changed = False
        for key in gone:
            changed = self.remove(key) or changed
        for item in listed.values():
            changed = self.put(item) or changed
        return changed

    def event(self, change: str, item: T) -> bool:
        """A watch event: DELETED removes the item's key, anything else puts the item. Whether
        it changed anything (a status-only update, or the deletion of an unknown item, does
        not)."""
        if change == DELETED:
            return self.remove(self.kind.key(item))
        return self.put(item)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


def _name(
    item: NamespaceInput | DeviceClass | ResourceSlice | DeviceTaintRule | VolumeInput,
) -> str:
    return item.name


def _key(
    item: ClaimInput | DisruptionBudgetInput | ResourceClaim | PodGroupInput | TopologyInput,
) -> str:
    return item.key


def _api_group(group: PodGroupInput) -> str:
    return group.group


def _project(topology: TopologyInput) -> str:
    return topology.kind


NAMESPACES: Kind[NamespaceInput] = Kind("Namespace", _name, lambda i: i.namespaces)
CLAIMS: Kind[ClaimInput] = Kind("PersistentVolumeClaim", _key, lambda i: i.claims)
VOLUMES: Kind[VolumeInput] = Kind("PersistentVolume", _name, lambda i: i.volumes)
BUDGETS: Kind[DisruptionBudgetInput] = Kind("PodDisruptionBudget", _key, lambda i: i.budgets)
RESOURCE_CLAIMS: Kind[ResourceClaim] = Kind("ResourceClaim", _key, lambda i: i.resource_claims)
DEVICE_CLASSES: Kind[DeviceClass] = Kind("DeviceClass", _name, lambda i: i.device_classes)
RESOURCE_SLICES: Kind[ResourceSlice] = Kind("ResourceSlice", _name, lambda i: i.resource_slices)
DEVICE_TAINT_RULES: Kind[DeviceTaintRule] = Kind(
    "DeviceTaintRule", _name, lambda i: i.device_taint_rules
)
# A PodGroup LIST covers one API group; a Topology LIST one project ("Kueue", "KAI").
POD_GROUPS: Kind[PodGroupInput] = Kind("PodGroup", _key, lambda i: i.pod_groups, _api_group)
TOPOLOGIES: Kind[TopologyInput] = Kind("Topology", _key, lambda i: i.topologies, _project)


class Inputs:
    """A snapshot's watched inputs, one collection per kind (``of`` finds one by its Kind)."""

    __slots__ = (
        "budgets",
        "claims",
        "device_classes",
        "device_taint_rules",
        "namespaces",
        "pod_groups",
        "resource_claims",
        "resource_slices",
        "topologies",
        "volumes",
    )

    def __init__(self) -> None:
        self.namespaces: Keyed[NamespaceInput] = Keyed(NAMESPACES)
        self.claims: Keyed[ClaimInput] = Keyed(CLAIMS)
        self.volumes: Keyed[VolumeInput] = Keyed(VOLUMES)
        # Which victims preemption would rather spare (core/budgets.py).
        self.budgets: Keyed[DisruptionBudgetInput] = Keyed(BUDGETS)
        # DRA (filters/dra.py, snapshot/devices.py).
        self.resource_claims: Keyed[ResourceClaim] = Keyed(RESOURCE_CLAIMS)
        self.device_classes: Keyed[DeviceClass] = Keyed(DEVICE_CLASSES)
        self.resource_slices: Keyed[ResourceSlice] = Keyed(RESOURCE_SLICES)
        self.device_taint_rules: Keyed[DeviceTaintRule] = Keyed(DEVICE_TAINT_RULES)
        # Gang sizes for the pods that name one (gangsources.py).
        self.pod_groups: Keyed[PodGroupInput] = Keyed(POD_GROUPS)
        # Kueue's and KAI's hierarchies (issue 21, topoconstraints.py).
        self.topologies: Keyed[TopologyInput] = Keyed(TOPOLOGIES)

    def of(self, kind: Kind[T]) -> Keyed[T]:
        return kind.of(self)
