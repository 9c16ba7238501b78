"""``topo-scheduler.io/allocated``: the GPUs each container of a pod really got, written by the
node's device plugin after the kubelet allocated, e.g.
``{"containers": [{"name": "main", "uuids": ["GPU-..."]}]}``. Where it disagrees with the
assignment (device plugin mode ``adopt``), the core takes it as the truth. A container the plugin
could not match to an assignment (mode ``adopt``) is reported all the same: the GPUs are taken,
whoever the scheduler meant them for.
"""

from __future__ import annotations

from typing import Final

import msgspec

from ..model.names import ALLOCATED_ANNOTATION
from . import FormatError, check_size
from .gpus import MAX_DEVICES

MAX_BYTES: Final = 32 * 1024
"""64 UUIDs of 40 characters, with container names, are under 4 KB."""


class AllocatedContainer(msgspec.Struct, frozen=True):
    name: str
    uuids: list[str]


class AllocatedRecord(msgspec.Struct, frozen=True):
    containers: list[AllocatedContainer]


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AllocatedRecord)


def encode(record: AllocatedRecord) -> str:
    return _encoder.encode(record).decode()


def decode(raw: str) -> AllocatedRecord:
    check_size(raw, MAX_BYTES, ALLOCATED_ANNOTATION)
    try:
        record = _decoder.decode(raw)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise FormatError(f"annotation {ALLOCATED_ANNOTATION}: {exc}") from None
    uuids = sum(len(c.uuids) for c in record.containers)
    if uuids > MAX_DEVICES:
        raise FormatError(
            f"annotation {ALLOCATED_ANNOTATION}: containers: {uuids} GPUs, more than the "
            f"{MAX_DEVICES} a node may have"
        )
    return record
