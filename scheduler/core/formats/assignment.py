"""``topo-scheduler.io/assignment``: where the scheduler placed a pod, written on the Binding,
e.g. ``{"node": "dgx", "devices": [{"index": 0, "uuid": "GPU-a"}], "shares": [],
"gang": null, "containers": [{"name": "main", "devices": [0], "uuids": ["GPU-a"]}]}``.

A gang member placed through topology domains (issue 21) also carries ``"topology"``, its node's
domain as level name (alias or label key) -> value from the widest level down, and ``"rank"``,
its rank in the gang, so launchers can build their rings from it; both are absent otherwise.

``containers`` is per container that asks for whole GPUs, in spec order (what the device plugin
hands each container); it is absent (None) in annotations written before it existed, and readers
then give the pod's one GPU container every UUID of ``devices``. Readers tolerate unknown fields
and a missing ``node`` or per-container ``devices`` (the device plugin needs the UUIDs only).
``assignment_annotations`` writes it together with ``topo-scheduler.io/devices``.
"""

from __future__ import annotations

from typing import Final

import msgspec

from ..model.decisions import Placement, Share
from ..model.names import ASSIGNMENT_ANNOTATION, DEVICES_ANNOTATION
from . import FormatError, check_size
from . import devices as devices_format
from .gpus import MAX_DEVICES

MAX_BYTES: Final = 32 * 1024
"""64 devices with UUIDs, the same per container, and shares: under 10 KB."""


class AssignmentDevice(msgspec.Struct, frozen=True):
    index: int
    uuid: str


class AssignmentContainer(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    devices: list[int] = msgspec.field(default_factory=list)
    uuids: list[str]


class AssignmentRecord(msgspec.Struct, frozen=True, rename="camel", omit_defaults=False):
    node: str = ""
    devices: list[AssignmentDevice] = msgspec.field(default_factory=list)
    shares: list[Share] = msgspec.field(default_factory=list)
    gang: str | None = None
    containers: list[AssignmentContainer] | None = None
    topology: dict[str, str] | msgspec.UnsetType = msgspec.UNSET
    rank: int | msgspec.UnsetType = msgspec.UNSET


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AssignmentRecord)


def encode(record: AssignmentRecord) -> str:
    return _encoder.encode(record).decode()


def decode(raw: str) -> AssignmentRecord:
    """The record; FormatError when malformed, oversized, or a GPU index is out of bounds."""
    check_size(raw, MAX_BYTES, ASSIGNMENT_ANNOTATION)
    try:
        record = _decoder.decode(raw)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise FormatError(f"annotation {ASSIGNMENT_ANNOTATION}: {exc}") from None
    indices = [("devices", d.index) for d in record.devices]
    indices += [("shares", s.index) for s in record.shares]
    for field, index in indices:
        if not 0 <= index < MAX_DEVICES:
            raise FormatError(
                f"annotation {ASSIGNMENT_ANNOTATION}: {field}: index {index} is not in "
                f"0..{MAX_DEVICES - 1}"
            )
    return record


def assignment_annotations(placement: Placement) -> dict[str, str]:
    """The annotations the shell writes on the Binding for this placement."""
    record = AssignmentRecord(
        node=placement.node,
        devices=[
            AssignmentDevice(i, u) for i, u in zip(placement.devices, placement.uuids, strict=True)
        ],
        shares=list(placement.shares),
        gang=placement.gang,
        containers=[
            AssignmentContainer(name=c.name, devices=list(c.devices), uuids=list(c.uuids))
            for c in placement.containers
        ],
    )
    if placement.topology:
        record = msgspec.structs.replace(record, topology=dict(placement.topology))
    if placement.rank is not None:
        record = msgspec.structs.replace(record, rank=placement.rank)
    return {
        DEVICES_ANNOTATION: devices_format.encode(placement.devices),
        ASSIGNMENT_ANNOTATION: encode(record),
    }
