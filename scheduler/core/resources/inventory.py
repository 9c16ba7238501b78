"""A node's GPUs and topology, read from its annotations.

Our own format is the ``topo-scheduler.io/gpus`` annotation (written by the node agent); when it is
absent we read HAMi's ``hami.io/node-nvidia-register`` and ``hami.io/node-nvidia-score`` so the
scheduler works unchanged on clusters running HAMi's device plugin. A node with neither is not a
GPU node. A malformed inventory raises InventoryError whose message names the node, the annotation
and the field, and the caller excludes that node with a warning; it never crashes the core.

The wire shapes of our annotation, and the bounds every inventory must keep (at most
``MAX_DEVICES`` GPUs, indices below it, a byte limit), are in formats/gpus.py; HAMi's annotations
are held to the same bounds here. ``inventory_json`` writes an inventory back in our shape, for
the store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ..formats import FormatError, check_size
from ..formats import gpus as gpus_format
from ..formats.gpus import MAX_DEVICES
from ..model.names import GPUS_ANNOTATION, HAMI_REGISTER_ANNOTATION, HAMI_SCORE_ANNOTATION
from ..model.objects import NodeInput
from ..settings import VENDORS
from .gpusets import Topologies, Topology, link_score


class InventoryError(ValueError):
    pass


# HAMi's score annotation names both GPUs of every pair by UUID: about 200 KB for 64 GPUs. So its
# annotations get the apiserver's cap for all of an object's annotations together; the device
# bounds are checked before anything grows with them.
HAMI_MAX_BYTES = 256 * 1024


class Device(msgspec.Struct, frozen=True):
    index: int
    uuid: str
    memory_mib: int = 0
    numa: int | None = None
    healthy: bool = True


class Inventory(msgspec.Struct, frozen=True):
    vendor: str
    devices: tuple[Device, ...]  # sorted by index
    topology: Topology
    model: str | None = None
    sgpu_per_card: int = 0
    source: str = GPUS_ANNOTATION

    @property
    def healthy_mask(self) -> int:
        mask = 0
        for d in self.devices:
            if d.healthy:
                mask |= 1 << d.index
        return mask

    def device(self, index: int) -> Device:
        for d in self.devices:
            if d.index == index:
                return d
        raise KeyError(index)


def read_inventory(node: NodeInput, topologies: Topologies | None = None) -> Inventory | None:
    """The node's inventory, None for a node without GPUs, InventoryError when malformed. Its
    topology is interned in ``topologies`` when given (the snapshot's), else its own."""
    intern = topologies.intern if topologies is not None else Topology.of
    raw = node.annotations.get(GPUS_ANNOTATION)
    if raw is not None:
        return _read_ours(node.name, raw, intern)
    if HAMI_REGISTER_ANNOTATION in node.annotations:
        return _read_hami(
            node.name,
            node.annotations[HAMI_REGISTER_ANNOTATION],
            node.annotations.get(HAMI_SCORE_ANNOTATION),
            intern,
        )
    return None


def _fail(node: str, annotation: str, detail: str) -> InventoryError:
    return InventoryError(f"node {node}: annotation {annotation}: {detail}")


# Makes the Topology of a score matrix (Topologies.intern, or Topology.of).
Intern = Callable[[Sequence[Sequence[int]]], Topology]


def _read_ours(node: str, raw: str, intern: Intern) -> Inventory:
    def fail(detail: str) -> InventoryError:
        return _fail(node, GPUS_ANNOTATION, detail)

    try:
        wire = gpus_format.decode(raw)
    except FormatError as exc:
        raise InventoryError(f"node {node}: {exc}") from None
    if wire.vendor not in VENDORS:
        raise fail(f"vendor: {wire.vendor!r} is not one of {', '.join(VENDORS)}")
    if not wire.devices:
        raise fail("devices: empty")
    if wire.sgpu_per_card < 0:
        raise fail("sgpuPerCard: must not be negative")
    devices: list[Device] = []
    seen: set[int] = set()
    for pos, d in enumerate(wire.devices):
        if d.index < 0 or d.index in seen:
            what = "negative" if d.index < 0 else "duplicate"
            raise fail(f"devices[{pos}].index: {what} index {d.index}")
        if d.memory_mi_b < 0:
            raise fail(f"devices[{pos}].memoryMiB: must not be negative")
        seen.add(d.index)
        uuid = d.uuid or f"{node}-gpu-{d.index}"
        devices.append(Device(d.index, uuid, d.memory_mi_b, d.numa, d.healthy))
    devices.sort(key=lambda d: d.index)
    size = devices[-1].index + 1
    if wire.links is not None and wire.scores is not None:
        raise fail("links and scores: give one of them, not both")
    if wire.links is not None:
        scores = _scores_from_links(wire.links, fail)
    elif wire.scores is not None:
        scores = _check_matrix(wire.scores, "scores", fail)
    else:
        scores = [[0] * size for _ in range(size)]
    if len(scores) < size:
        field = "links" if wire.links is not None else "scores"
        raise fail(f"{field}: {len(scores)}x{len(scores)} matrix but device index {size - 1}")
    return Inventory(
        vendor=wire.vendor,
        devices=tuple(devices),
        topology=intern(scores),
        model=wire.model,
        sgpu_per_card=wire.sgpu_per_card,
    )


def _scores_from_links(links: list[list[str]], fail: Any) -> list[list[int]]:
    n = len(links)
    scores = [[0] * n for _ in range(n)]
    for i, row in enumerate(links):
        if len(row) != n:
            raise fail(f"links[{i}]: {len(row)} entries, expected {n}")
        for j, code in enumerate(row):
            if i == j:
                if code.strip().upper() != "X":
                    raise fail(f"links[{i}][{j}]: the diagonal must be 'X', got {code!r}")
                continue
            try:
                scores[i][j] = link_score(code)
            except ValueError as exc:
                raise fail(f"links[{i}][{j}]: {exc}") from None
    return _check_matrix(scores, "links", fail)


def _check_matrix(scores: list[list[int]], field: str, fail: Any) -> list[list[int]]:
    n = len(scores)
    for i, row in enumerate(scores):
        if len(row) != n:
            raise fail(f"{field}[{i}]: {len(row)} entries, expected {n}")
    for i in range(n):
        for j in range(i + 1, n):
            if scores[i][j] != scores[j][i]:
                raise fail(
                    f"{field}[{i}][{j}]: not symmetric "
                    f"({field}[{i}][{j}]={scores[i][j]}, {field}[{j}][{i}]={scores[j][i]})"
                )
    return [[0 if i == j else v for j, v in enumerate(row)] for i, row in enumerate(scores)]


# ---- HAMi ---------------------------------------------------------------------------------------


class _HamiDevice(msgspec.Struct):
    id: str
    index: int | None = None
    count: int = 0
    devmem: int = 0
    devcore: int = 0
    type: str = ""
    numa: int = 0
    health: bool = False
    mode: str = ""


class _HamiScore(msgspec.Struct):
    uuid: str
    score: dict[str, int] = msgspec.field(default_factory=dict)


def _read_hami(node: str, register: str, score_raw: str | None, intern: Intern) -> Inventory:
    def fail(detail: str, annotation: str = HAMI_REGISTER_ANNOTATION) -> InventoryError:
        return _fail(node, annotation, detail)

    for annotation, value_of in (
        (HAMI_REGISTER_ANNOTATION, register),
        (HAMI_SCORE_ANNOTATION, score_raw),
    ):
        try:
            check_size(value_of or "", HAMI_MAX_BYTES, annotation)
        except FormatError as exc:
            raise InventoryError(f"node {node}: {exc}") from None
    text = register.strip()
    if text.startswith("["):
        try:
            hami = msgspec.json.decode(text, type=list[_HamiDevice])
        except msgspec.ValidationError as exc:
            raise fail(gpus_format.path_message(exc)) from None
        except msgspec.DecodeError as exc:
            raise fail(f"not valid JSON ({exc})") from None
    else:
        hami = _hami_legacy(text, fail)
    if not hami:
        raise fail("no devices")
    if len(hami) > MAX_DEVICES:
        raise fail(f"{len(hami)} devices, more than the {MAX_DEVICES} allowed")
    devices: list[Device] = []
    seen: set[int] = set()
    for pos, d in enumerate(hami):
        index = pos if d.index is None else d.index
        if index < 0 or index in seen:
            raise fail(f"[{pos}].index: {'duplicate' if index in seen else 'negative'} {index}")
        if index >= MAX_DEVICES:
            raise fail(f"[{pos}].index: {index} is not below {MAX_DEVICES}")
        seen.add(index)
        devices.append(Device(index, d.id, d.devmem, d.numa, d.health))
    devices.sort(key=lambda d: d.index)
    size = devices[-1].index + 1
    scores = [[0] * size for _ in range(size)]
    if score_raw:
        by_uuid = {d.uuid: d.index for d in devices}
        try:
            entries = msgspec.json.decode(score_raw, type=list[_HamiScore])
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise fail(f"not valid ({exc})", HAMI_SCORE_ANNOTATION) from None
        given: dict[tuple[int, int], int] = {}
        for pos, entry in enumerate(entries):
            if entry.uuid not in by_uuid:
                raise fail(f"[{pos}].uuid: unknown device {entry.uuid!r}", HAMI_SCORE_ANNOTATION)
            i = by_uuid[entry.uuid]
            for other, value in entry.score.items():
                if other not in by_uuid:
                    raise fail(f"[{pos}].score: unknown device {other!r}", HAMI_SCORE_ANNOTATION)
                given[(i, by_uuid[other])] = value
        for (i, j), value in given.items():
            if i == j:
                continue
            # HAMi writes both directions; when they differ, the mean keeps the matrix symmetric.
            back = given.get((j, i), value)
            scores[i][j] = (value + back) // 2
    model = hami[0].type or None
    return Inventory(
        vendor="nvidia",
        devices=tuple(devices),
        topology=intern(scores),
        model=model,
        source=HAMI_REGISTER_ANNOTATION,
    )


def _hami_legacy(text: str, fail: Any) -> list[_HamiDevice]:
    """HAMi before 2.8: records `UUID,count,mem,core,type,numa,health[,index,mode]:`."""
    out: list[_HamiDevice] = []
    for pos, record in enumerate(r for r in text.split(":") if r.strip()):
        parts = [p.strip() for p in record.split(",")]
        if len(parts) < 7:
            raise fail(f"record {pos}: expected at least 7 comma-separated fields, got {record!r}")
        try:
            index = int(parts[7]) if len(parts) > 7 and parts[7] else None
            out.append(
                _HamiDevice(
                    id=parts[0],
                    count=int(parts[1]),
                    devmem=int(parts[2]),
                    devcore=int(parts[3]),
                    type=parts[4],
                    numa=int(parts[5]),
                    health=parts[6].lower() == "true",
                    index=index,
                    mode=parts[8] if len(parts) > 8 else "",
                )
            )
        except ValueError:
            raise fail(f"record {pos}: a number field is not an integer in {record!r}") from None
    return out


def inventory_json(inventory: Inventory) -> str:
    """The inventory in the ``topo-scheduler.io/gpus`` shape with ``scores`` and ``source``
    (what the leader stores in ``P:nodes``); read_inventory reads it back to an equal one."""
    return gpus_format.encode(
        gpus_format.StoredGpus(
            vendor=inventory.vendor,
            model=inventory.model,
            devices=[
                gpus_format.StoredDevice(d.index, d.uuid, d.memory_mib, d.numa, d.healthy)
                for d in inventory.devices
            ],
            scores=[list(row) for row in inventory.topology.scores],
            sgpu_per_card=inventory.sgpu_per_card,
            source=inventory.source,
        )
    )


def check_annotation(value: str, node: str, topologies: Topologies | None = None) -> Inventory:
    """Read ``value`` with the scheduler's parser; InventoryError when it would reject it."""
    annotated = NodeInput(name=node, annotations={GPUS_ANNOTATION: value})
    inventory = read_inventory(annotated, topologies)
    if inventory is None:  # cannot happen: the annotation is set
        raise InventoryError(f"node {node}: annotation {GPUS_ANNOTATION}: not read")
    return inventory


def strip_inventory_prefix(message: str, node: str) -> str:
    """The core's "node X: annotation A: detail" without its prefix (the caller names both)."""
    return message.removeprefix(f"node {node}: annotation {GPUS_ANNOTATION}: ")
