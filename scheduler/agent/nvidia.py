"""Parsers for the two nvidia-smi outputs the node agent reads.

``nvidia-smi topo -m`` prints a matrix: a header naming the columns (GPU0..GPUn-1, then NICs,
then ``CPU Affinity``, ``NUMA Affinity`` and, on newer drivers, ``GPU NUMA ID``), one row per
GPU, one row per NIC, then a ``Legend:`` and, on newer drivers, a ``NIC Legend:``. What real
outputs look like, and what the parser therefore tolerates (tests/data/nvidia-smi/ has captures):

- cells are separated by tabs, but outputs pasted from a terminal have them expanded to spaces;
  the diagonal is `` X `` with spaces around it; an empty column leaves two tabs in a row;
- NICs are columns and rows named ``NIC<k>`` (newer drivers, with a NIC Legend mapping them to
  ``mlx5_<k>``) or named after the device itself (``mlx5_0``, ``mlx4_0`` on older drivers);
- with ten or more NICs some drivers drop the separator between two NIC cells (``NIC8NIC9``,
  ``NODENODE``) or let a NIC cell run into the CPU affinity (``PH0-115``). Only the GPU cells and
  the affinity columns matter here, so GPU cells are read from the start of a row and the
  affinity columns from its end, and the NIC cells in between are never interpreted;
- a terminal's colours (ANSI escapes) may survive in a saved output.

Only the GPU x GPU block becomes links; every code must be one the scheduler's core scores
(``link_score``: NV<k>, PIX, PXB, PHB, NODE, SYS, SOC), the diagonal must be X, and the block
must be symmetric. A violation raises ProbeError naming the source and line, because a wrong
topology would steer every placement on the node.

``nvidia-smi --query-gpu=index,uuid,memory.total,pci.bus_id --format=csv,noheader,nounits`` prints
one ``0, GPU-..., 32768, 00000000:06:00.0`` line per GPU. A header line (forgotten ``noheader``)
and a `` MiB`` unit (forgotten ``nounits``) are accepted; ``[N/A]`` memory means unknown.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from scheduler.core.resources.gpusets import link_score


class ProbeError(Exception):
    """A probe's output cannot be turned into a topology; the message names source and line."""


class GpuRow(msgspec.Struct, frozen=True):
    index: int
    links: tuple[str, ...]
    numa: int | None
    line: int


class TopoMatrix(msgspec.Struct, frozen=True):
    source: str
    rows: tuple[GpuRow, ...]  # by index, 0..n-1

    @property
    def links(self) -> list[list[str]]:
        return [list(r.links) for r in self.rows]

    @property
    def size(self) -> int:
        return len(self.rows)


class QueryGpu(msgspec.Struct, frozen=True):
    index: int
    uuid: str
    memory_mib: int | None
    bus_id: str


_ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GPU_LABEL: Final = re.compile(r"GPU(\d+)$")
_GPU_COLUMN: Final = re.compile(r"GPU(\d+)")
# One cell. Known codes come first so that glued cells ("NODENODE") split; anything else is one
# whitespace-free token (affinities, N/A, garbage that the code check then reports).
_CELL: Final = re.compile(r"(?:NV|MX)\d+|PIX|PXB|PHB|NODE|SYS|SOC|X(?![^\s])|\S+")
# The columns after the NICs, in the order nvidia-smi prints them.
_TRAILING: Final = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_NUMA_COLUMN: Final = "NUMA Affinity"


def _lines(text: str) -> list[str]:
    return [_ANSI.sub("", line) for line in text.splitlines()]


def _describe_start(lines: list[str]) -> str:
    for line in lines:
        if line.strip():
            shown = line.strip()
            return f"; its first line is {shown[:80]!r}"
    return " (it is empty)"


def parse_topo(text: str, source: str) -> TopoMatrix:
    """The GPU x GPU block of ``nvidia-smi topo -m``; ProbeError naming ``source:line``."""
    lines = _lines(text)
    header_at = -1
    for number, line in enumerate(lines):
        tokens = line.split()
        # The header starts with GPU0; GPU0's own row does too, but carries X as its next cell.
        if tokens and tokens[0] == "GPU0" and (len(tokens) == 1 or tokens[1] != "X"):
            header_at = number
            break
    if header_at < 0:
        raise ProbeError(
            f"{source}: no `nvidia-smi topo -m` matrix: expected a header line starting with "
            f"GPU0{_describe_start(lines)}"
        )
    header = lines[header_at]
    found = [int(m) for m in _GPU_COLUMN.findall(header)]
    size = len(found)
    if found != list(range(size)):
        named = ", ".join(f"GPU{i}" for i in found)
        raise ProbeError(
            f"{source}:{header_at + 1}: the header names {named}; expected GPU0..GPU{size - 1} "
            "in order"
        )
    trailing = [name for name in _TRAILING if name in header]
    rows: dict[int, GpuRow] = {}
    for number in range(header_at + 1, len(lines)):
        line = lines[number]
        stripped = line.strip()
        if stripped.startswith(("Legend", "NIC Legend")):
            break
        tokens = stripped.split(None, 1)
        if not tokens:
            continue
        label = _GPU_LABEL.match(tokens[0])
        if label is None:
            continue  # a NIC row (NIC0, mlx5_0, ...): not a GPU, not our business
        index = int(label.group(1))
        where = f"{source}:{number + 1}"
        if index >= size:
            raise ProbeError(
                f"{where}: row GPU{index}, but the header names {size} GPUs (GPU0..GPU{size - 1})"
            )
        if index in rows:
            raise ProbeError(
                f"{where}: a second row for GPU{index} (first on line {rows[index].line})"
            )
        cells = _CELL.findall(tokens[1] if len(tokens) > 1 else "")
        if len(cells) < size:
            raise ProbeError(
                f"{where}: row GPU{index} has {len(cells)} cells, but the header names {size} GPUs"
            )
        links = tuple(c.upper() for c in cells[:size])
        for column, code in enumerate(links):
            if column == index:
                if code != "X":
                    raise ProbeError(
                        f"{where}: row GPU{index}, column GPU{column}: the diagonal must be X, "
                        f"got {code!r}"
                    )
                continue
            if code == "X":
                raise ProbeError(
                    f"{where}: row GPU{index}, column GPU{column}: X off the diagonal (a cell "
                    "missing or extra before it?)"
                )
            try:
                link_score(code)
            except ValueError as exc:
                raise ProbeError(f"{where}: row GPU{index}, column GPU{column}: {exc}") from None
        numa = None
        # Affinity columns are counted from the end of the row: the NIC cells before them may
        # be glued together, but the last cells are always the trailing columns.
        if _NUMA_COLUMN in trailing and len(cells) >= size + len(trailing):
            value = cells[len(cells) - len(trailing) + trailing.index(_NUMA_COLUMN)]
            numa = int(value) if value.isdigit() else None
        rows[index] = GpuRow(index, links, numa, number + 1)
    missing = [i for i in range(size) if i not in rows]
    if missing:
        names = ", ".join(f"GPU{i}" for i in missing)
        raise ProbeError(
            f"{source}: no row for {names} (the header on line {header_at + 1} names them)"
        )
    ordered = tuple(rows[i] for i in range(size))
    for a in ordered:
        for b in ordered[a.index + 1 :]:
            if a.links[b.index] != b.links[a.index]:
                raise ProbeError(
                    f"{source}:{a.line}: GPU{a.index} to GPU{b.index} is {a.links[b.index]}, but "
                    f"line {b.line} says GPU{b.index} to GPU{a.index} is {b.links[a.index]}"
                )
    return TopoMatrix(source, ordered)


_QUERY_FIELDS: Final = "index, uuid, memory.total, pci.bus_id"
_UNKNOWN: Final = frozenset({"[N/A]", "N/A", "[Not Supported]"})


def parse_query(text: str, source: str) -> list[QueryGpu]:
    """``nvidia-smi --query-gpu=index,uuid,memory.total,pci.bus_id --format=csv,...`` lines."""
    out: list[QueryGpu] = []
    seen: dict[int, int] = {}
    for number, raw in enumerate(_lines(text), start=1):
        if not raw.strip():
            continue
        fields = [f.strip() for f in raw.split(",")]
        where = f"{source}:{number}"
        if fields[0] == "index" and not out:
            continue  # the CSV header, when --format lacked noheader
        if len(fields) != 4:
            raise ProbeError(
                f"{where}: expected 4 comma-separated fields ({_QUERY_FIELDS}), got {len(fields)}"
            )
        index_text, uuid, memory_text, bus_id = fields
        if not index_text.isdigit():
            raise ProbeError(f"{where}: index {index_text!r} is not a whole number")
        index = int(index_text)
        if index in seen:
            raise ProbeError(f"{where}: GPU index {index} again (first on line {seen[index]})")
        seen[index] = number
        if not uuid:
            raise ProbeError(f"{where}: empty uuid")
        memory: int | None = None
        memory_text = memory_text.removesuffix("MiB").strip()
        if memory_text not in _UNKNOWN:
            if not memory_text.isdigit():
                raise ProbeError(f"{where}: memory.total {memory_text!r} is not a number of MiB")
            memory = int(memory_text)
        out.append(QueryGpu(index, uuid, memory, bus_id))
    if not out:
        raise ProbeError(f"{source}: no GPUs listed (expected lines of {_QUERY_FIELDS})")
    return sorted(out, key=lambda g: g.index)
