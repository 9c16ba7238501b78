"""The ``topo-scheduler.io/gpus`` annotation as the agent writes it.

The format is the one scheduler/core/inventory.py reads (README "Node inventory"); this module
only builds and encodes it. Two rules make "patch only when it changed" work:

- the encoding is canonical: fields in a fixed order, unknown values left out rather than written
  as null or 0, compact JSON, so equal inventories are equal strings and the agent can compare
  strings with what the node carries;
- everything the agent writes is first read back through the core's own parser
  (``check_annotation``), so the agent never publishes an inventory the scheduler would reject.

The Structs forbid unknown fields because they also type the static topologies that people
write by hand in the agent's config (``agent.models``): a misspelt ``memoryMib`` must be an
error there, not a silently missing value.
"""

from __future__ import annotations

from typing import Any

import msgspec

from scheduler.core.inventory import Inventory, InventoryError, read_inventory
from scheduler.core.names import GPUS_ANNOTATION
from scheduler.core.objects import NodeInput

from .nvidia import ProbeError, QueryGpu, TopoMatrix


class DeviceEntry(
    msgspec.Struct,
    rename="camel",
    omit_defaults=True,
    kw_only=True,
    forbid_unknown_fields=True,
    frozen=True,
):
    index: int
    uuid: str | None = None
    memory_mi_b: int | None = msgspec.field(default=None, name="memoryMiB")
    numa: int | None = None
    healthy: bool = True


class GpuAnnotation(
    msgspec.Struct,
    rename="camel",
    omit_defaults=True,
    kw_only=True,
    forbid_unknown_fields=True,
    frozen=True,
):
    vendor: str
    model: str | None = None
    devices: tuple[DeviceEntry, ...]
    links: tuple[tuple[str, ...], ...] | None = None
    scores: tuple[tuple[int, ...], ...] | None = None
    sgpu_per_card: int = 0


_encoder = msgspec.json.Encoder()


def encode(annotation: GpuAnnotation) -> str:
    return _encoder.encode(annotation).decode()


def check_annotation(value: str, node: str) -> Inventory:
    """Read ``value`` with the scheduler's parser; InventoryError when it would reject it."""
    inventory = read_inventory(NodeInput(name=node, annotations={GPUS_ANNOTATION: value}))
    if inventory is None:  # cannot happen: the annotation is set
        raise InventoryError(f"node {node}: annotation {GPUS_ANNOTATION}: not read")
    return inventory


def strip_inventory_prefix(message: str, node: str) -> str:
    """The core's "node X: annotation A: detail" without its prefix (the caller names both)."""
    return message.removeprefix(f"node {node}: annotation {GPUS_ANNOTATION}: ")


def from_nvidia(
    matrix: TopoMatrix,
    gpus: list[QueryGpu] | None,
    model: str | None = None,
    devices_source: str = "",
) -> GpuAnnotation:
    """Links and NUMA nodes from the matrix; uuid, memory from the device list when given.

    Without a device list only the indices are known (the scheduler then names the GPUs
    ``<node>-gpu-<index>``); with one, it must list exactly the matrix's GPUs: both come from
    the same driver, and a mismatch means one of them is stale or from another machine.
    """
    if gpus is not None:
        indices = [g.index for g in gpus]
        if indices != list(range(matrix.size)):
            raise ProbeError(
                f"{devices_source} lists GPUs {_ranges(indices)}, but {matrix.source} has "
                f"{matrix.size} GPUs (GPU0..GPU{matrix.size - 1})"
            )
    devices = []
    for row in matrix.rows:
        gpu = gpus[row.index] if gpus is not None else None
        devices.append(
            DeviceEntry(
                index=row.index,
                uuid=gpu.uuid if gpu else None,
                memory_mi_b=gpu.memory_mib if gpu else None,
                numa=row.numa,
            )
        )
    return GpuAnnotation(
        vendor="nvidia",
        model=model,
        devices=tuple(devices),
        links=tuple(row.links for row in matrix.rows),
    )


def _ranges(indices: list[int]) -> str:
    return ", ".join(str(i) for i in indices) if indices else "none"


def convert_topology(document: Any) -> GpuAnnotation:
    """A hand-written topology (YAML/JSON already loaded) as an annotation; ValidationError."""
    return msgspec.convert(document, GpuAnnotation)
