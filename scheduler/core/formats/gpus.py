"""``topo-scheduler.io/gpus``: a node's GPUs and their topology (docs/annotations.md, "Node
inventory").

Three shapes of the same JSON object:

- ``GpusRecord`` is what the core reads: unknown fields are tolerated (newer agents may add some,
  and the store's copy carries ``source``), absent values take their defaults.
- ``GpuAnnotation`` is what the node agent writes. Its encoding is canonical (fields in a fixed
  order, unknown values left out, compact JSON), so equal inventories are equal strings and the
  agent can compare strings with what the node carries. It forbids unknown fields because it also
  types the static topologies people write by hand in the agent's config (``agent.models``): a
  misspelt ``memoryMib`` must be an error there, not a silently missing value.
- ``StoredGpus`` is the copy the leader keeps in the store (``P:nodes``): every field written, the
  topology as ``scores``, and ``source`` naming the annotation it was read from.

Limits: ``MAX_BYTES`` before decoding, then ``MAX_DEVICES`` devices with indices below it and
matrices of at most ``MAX_DEVICES`` rows (``check_bounds``), before anything is built from them.
"""

from __future__ import annotations

from typing import Final

import msgspec

from ..model.names import GPUS_ANNOTATION
from . import FormatError, check_size

MAX_DEVICES: Final = 64
"""GPUs per node, and the bound (exclusive) of every GPU index (the package docstring says why)."""

MAX_BYTES: Final = 64 * 1024
"""A 64-GPU inventory with NVLink codes and UUIDs is about 35 KB."""


class GpusDevice(msgspec.Struct, rename="camel"):
    index: int
    uuid: str | None = None
    memory_mi_b: int = msgspec.field(default=0, name="memoryMiB")
    numa: int | None = None
    healthy: bool = True


class GpusRecord(msgspec.Struct, rename="camel"):
    vendor: str
    devices: list[GpusDevice]
    model: str | None = None
    links: list[list[str]] | None = None
    scores: list[list[int]] | None = None
    sgpu_per_card: int = 0


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


class StoredDevice(msgspec.Struct):
    index: int
    uuid: str
    memory_mib: int = msgspec.field(default=0, name="memoryMiB")
    numa: int | None = None
    healthy: bool = True


class StoredGpus(msgspec.Struct):
    vendor: str
    model: str | None
    devices: list[StoredDevice]
    scores: list[list[int]]
    sgpu_per_card: int = msgspec.field(name="sgpuPerCard")
    source: str


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(GpusRecord)


def encode(value: GpuAnnotation | StoredGpus) -> str:
    return _encoder.encode(value).decode()


def decode(raw: str) -> GpusRecord:
    """The record, bounded (``check_bounds``); FormatError naming the field when it is not."""
    check_size(raw, MAX_BYTES, GPUS_ANNOTATION)
    try:
        record = _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise FormatError(f"annotation {GPUS_ANNOTATION}: {path_message(exc)}") from None
    except msgspec.DecodeError as exc:
        raise FormatError(f"annotation {GPUS_ANNOTATION}: not valid JSON ({exc})") from None
    check_bounds(record)
    return record


def check_bounds(record: GpusRecord) -> None:
    def fail(detail: str) -> FormatError:
        return FormatError(f"annotation {GPUS_ANNOTATION}: {detail}")

    if len(record.devices) > MAX_DEVICES:
        raise fail(f"devices: {len(record.devices)} devices, more than the {MAX_DEVICES} allowed")
    for pos, d in enumerate(record.devices):
        if d.index >= MAX_DEVICES:
            raise fail(f"devices[{pos}].index: {d.index} is not below {MAX_DEVICES}")
    for field, matrix in (("links", record.links), ("scores", record.scores)):
        if matrix is not None and len(matrix) > MAX_DEVICES:
            raise fail(f"{field}: {len(matrix)} rows, more than the {MAX_DEVICES} allowed")


def path_message(exc: msgspec.ValidationError) -> str:
    """msgspec says 'Expected `int`, got `str` - at `$.devices[0].index`'; put the path first."""
    text = str(exc)
    message, sep, path = text.rpartition(" - at `")
    if not sep:
        return text
    return f"{path.rstrip('`').removeprefix('$.')}: {message}"
