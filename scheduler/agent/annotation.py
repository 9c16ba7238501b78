"""The ``topo-scheduler.io/gpus`` annotation as the agent builds it.

The format (its Structs, the canonical encoder, the limits) is scheduler/core/formats/gpus.py,
the one the core reads (docs/annotations.md "Node inventory"); this module builds values of it
from what the agent probed. Two rules make "patch only when it changed" work:

- the encoding is canonical (formats/gpus.py ``encode``), so equal inventories are equal strings
  and the agent can compare strings with what the node carries;
- everything the agent writes is first read back through the core's own parser
  (``check_annotation``), so the agent never publishes an inventory the scheduler would reject,
  one beyond the format's limits included.
"""

from __future__ import annotations

from typing import Any

import msgspec

from scheduler.core.formats.gpus import DeviceEntry, GpuAnnotation

from .nvidia import ProbeError, QueryGpu, TopoMatrix


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
