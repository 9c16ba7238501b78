"""Choosing by interconnect: which of the device sets that satisfy a pod's claims on a node is best
connected, by the in-node rule the ``nvidia.com/gpu`` path uses (rule 1, resources/gpusets.py).

Each DRA device is mapped to a *unit*, a physical GPU:

- with the node's inventory (our agent's annotation, or HAMi's): by UUID, the driver's ``uuid``
  attribute, or ``parentUUID`` for a MIG device (NVIDIA's driver publishes both in its own domain,
  ``gpu.nvidia.com``). The unit is the GPU's index, and pairs score by the node's link matrix
  (NVLink 100 per link ... SYS 10). The inventory carries no PCI bus ids, so the driver's
  ``pciBusID`` is not used for the mapping;
- without an inventory entry: by the standard attributes, as a coarse distance. Devices with the
  same ``resource.kubernetes.io/pcieRoot`` score 40 (PXB), the same ``numaNode`` 20 (NODE), other
  located devices 10 (SYS); a MIG device's unit is its parent (``parentUUID``).

A device mapped to no unit (an IMEX channel, a NIC, a device with no location) plays no part in
the choice. Two devices of one unit (MIG slices of one GPU) score ``SAME_UNIT``, above any link.

A solution's key, lower is better: the ``firstAvailable`` subrequests chosen (earlier first,
kube-scheduler's rule), then rule 1 over all the GPU devices the solution takes on the node, for
every claim of the pod together: the highest sum of pairwise scores, then the least damage (the
sum of scores between the chosen units and the units left free), then the search's order (the
first found, which is kube-scheduler's first fit when no device maps to a unit). So k devices get
the best-connected set and a single device the worst-connected unit.

``guide`` orders one request's candidates so the search meets rule 1's best set first: through
``Topology.best_set`` (exact, memoised; the inventory's topology is the one the ``nvidia.com/gpu``
path searches) when the request's eligible devices are distinct units, and the coarse map has at
most ``GUIDE_UNITS`` units; past that, a linear grouping by PCIe root and NUMA node. The search
then compares further solutions within the budget (budget.py), which settles constraints and
several requests; the budget bounds the search, which is exponential in the worst case.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from ..model.dra import AttributeValue
from ..resources.gpusets import Topology
from ..resources.inventory import Inventory
from .inuse import DeviceId
from .pools import Candidate

PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"
NUMA_NODE: Final = "resource.kubernetes.io/numaNode"
SAME_ROOT_SCORE: Final = 40
SAME_NUMA_SCORE: Final = 20
LOCATED_SCORE: Final = 10
# Above NV18 (1,800), the most links a GPU pair can have.
SAME_UNIT: Final = 2_000
GUIDE_UNITS: Final = 16


def _attribute(attrs: Mapping[str, AttributeValue], driver: str, ident: str) -> AttributeValue:
    """The attribute ``ident`` of the driver's domain, written short or qualified."""
    found = attrs.get(ident)
    return found if found is not None else attrs.get(f"{driver}/{ident}", "")


class GpuMap:
    """Devices of one node mapped to units, and how units score as pairs."""

    __slots__ = ("_coarse", "_guide_topology", "present", "topology", "unit_of")

    def __init__(
        self,
        unit_of: dict[DeviceId, int],
        topology: Topology | None,
        coarse: Sequence[tuple[str, str]],
    ) -> None:
        self.unit_of = unit_of
        # Units some device of the node maps to: a GPU the driver does not publish (or the
        # inventory lists beyond the slices) is nobody's to take, so it is not "left free".
        self.present = frozenset(unit_of.values())
        self.topology = topology
        self._coarse = coarse  # per coarse unit: (pcieRoot, numaNode), "" when unknown
        self._guide_topology = topology

    @property
    def empty(self) -> bool:
        return not self.unit_of

    def pair(self, a: int, b: int) -> int:
        if a == b:
            return SAME_UNIT
        if self.topology is not None:
            return self.topology.scores[a][b]
        (root_a, numa_a), (root_b, numa_b) = self._coarse[a], self._coarse[b]
        if root_a and root_a == root_b:
            return SAME_ROOT_SCORE
        if numa_a and numa_a == numa_b:
            return SAME_NUMA_SCORE
        return LOCATED_SCORE

    def guide_topology(self) -> Topology:
        """The pair scores as a Topology (for its exact best-set search), built once."""
        if self._guide_topology is None:
            n = self.size
            self._guide_topology = Topology.of(
                [[0 if a == b else self.pair(a, b) for b in range(n)] for a in range(n)]
            )
        return self._guide_topology

    def location(self, device: DeviceId) -> tuple[str, str]:
        """A coarse unit's (pcieRoot, numaNode) for ``device``; ("", "") when unknown."""
        unit = self.unit_of.get(device)
        if unit is None or self.topology is not None:
            return ("", "")
        return self._coarse[unit]

    @property
    def size(self) -> int:
        return self.topology.n if self.topology is not None else len(self._coarse)


def map_devices(candidates: Iterable[Candidate], inventory: Inventory | None) -> GpuMap:
    """The node's devices mapped to the inventory's GPUs when any of them carries a known UUID,
    else to coarse units by their standard attributes."""
    devices = list(candidates)
    if inventory is not None:
        by_uuid = {d.uuid: d.index for d in inventory.devices}
        unit_of: dict[DeviceId, int] = {}
        for c in devices:
            attrs = c.device.attributes
            uuid = _attribute(attrs, c.driver, "parentUUID") or _attribute(attrs, c.driver, "uuid")
            if isinstance(uuid, str) and uuid in by_uuid:
                unit_of[c.id] = by_uuid[uuid]
        if unit_of:
            return GpuMap(unit_of, inventory.topology, ())
    units: dict[str, int] = {}
    coarse: list[tuple[str, str]] = []
    unit_of = {}
    for c in devices:
        attrs = c.device.attributes
        root = attrs.get(PCIE_ROOT, "")
        numa = attrs.get(NUMA_NODE, "")
        if root == "" and numa == "":
            continue
        parent = _attribute(attrs, c.driver, "parentUUID")
        name = f"{c.driver}/{c.pool}/{parent}" if parent else "/".join(c.id)
        if name not in units:
            units[name] = len(coarse)
            coarse.append((str(root), str(numa)))
        unit_of[c.id] = units[name]
    return GpuMap(unit_of, None, coarse)


def rank(gpus: GpuMap, chosen: Sequence[DeviceId], busy: set[int]) -> tuple[int, int]:
    """Rule 1's two keys for the devices ``chosen``: (-internal score, damage). Damage counts the
    units left free: present, not chosen, and not ``busy`` (holding a device in use)."""
    units = [gpus.unit_of[d] for d in chosen if d in gpus.unit_of]
    internal = 0
    for pos, a in enumerate(units):
        for b in units[pos + 1 :]:
            internal += gpus.pair(a, b)
    distinct = set(units)
    left = [f for f in gpus.present if f not in distinct and f not in busy]
    damage = sum(gpus.pair(a, f) for a in distinct for f in left)
    return (-internal, damage)


def guide(
    gpus: GpuMap, order: Sequence[Candidate], eligible: Sequence[Candidate], k: int
) -> tuple[list[Candidate], frozenset[DeviceId] | None]:
    """``order`` with a good ``k`` of ``eligible`` moved to the front: rule 1's best set
    (``Topology.best_set``, exact) for an inventory's GPUs or a small coarse map, else the
    grouping of ``_coarse_pick``; ``order`` unchanged when no two eligible devices map to
    distinct units (MIG slices of one GPU: the order already groups them).

    With the order, the best set when it is exact over every eligible device (all of them
    mapped): a solution taking exactly it cannot be beaten on rule 1 by one from ``eligible``."""
    units = [gpus.unit_of.get(c.id) for c in eligible]
    mapped = [u for u in units if u is not None]
    if k <= 0 or not mapped or len(mapped) != len(set(mapped)):
        return list(order), None
    exact: frozenset[DeviceId] | None = None
    if gpus.topology is None and gpus.size > GUIDE_UNITS:
        first = _coarse_pick(
            gpus, [c for c, u in zip(eligible, units, strict=True) if u is not None], k
        )
    else:
        free = 0
        for u in mapped:
            free |= 1 << u
        best = gpus.guide_topology().best_set(free, min(k, len(mapped)))
        if best is None:
            return list(order), None
        first = {
            c.id
            for c, u in zip(eligible, units, strict=True)
            if u is not None and best.mask >> u & 1
        }
        if len(mapped) == len(eligible):
            exact = frozenset(first)
    return [c for c in order if c.id in first] + [c for c in order if c.id not in first], exact


def _coarse_pick(gpus: GpuMap, located: Sequence[Candidate], k: int) -> set[DeviceId]:
    """A linear-time stand-in for rule 1 on many coarse units (each device its own unit): for
    k > 1 the smallest PCIe root holding k (else the NUMA node holding k, its roots largest
    first; else the largest NUMA nodes); for one device, one on the least populated root of the
    least populated NUMA node."""
    roots: dict[str, list[Candidate]] = {}
    numas: dict[str, list[Candidate]] = {}
    for c in located:
        root, numa = gpus.location(c.id)
        roots.setdefault(root or f"device:{c.id}", []).append(c)
        numas.setdefault(numa or f"device:{c.id}", []).append(c)

    def where(c: Candidate) -> tuple[str, str]:
        root, numa = gpus.location(c.id)
        return root or f"device:{c.id}", numa or f"device:{c.id}"

    if k == 1:
        lonely = min(located, key=lambda c: (len(numas[where(c)[1]]), len(roots[where(c)[0]])))
        return {lonely.id}
    fitting = [group for group in roots.values() if len(group) >= k]
    if fitting:
        return {c.id for c in min(fitting, key=len)[:k]}
    pool = next((g for g in sorted(numas.values(), key=len) if len(g) >= k), None)
    ranked = (
        sorted(pool, key=lambda c: -len(roots[where(c)[0]]))
        if pool is not None
        else [c for g in sorted(numas.values(), key=lambda g: -len(g)) for c in g]
    )
    return {c.id for c in ranked[:k]}


def busy_units(gpus: GpuMap, in_use: Iterable[DeviceId]) -> set[int]:
    return {gpus.unit_of[d] for d in in_use if d in gpus.unit_of}
