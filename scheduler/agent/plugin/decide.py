"""The device plugin's decisions, pure: no gRPC, no I/O, no clock.

The kubelet never tells a device plugin which pod it is admitting. What we know at a call:
  - the kubelet's PodResources list: every active pod, its containers and the device IDs of our
    resource each container already got (``PodDevices``);
  - each pod's ``topo-scheduler.io/assignment`` annotation, read from the apiserver.
Admission is serialized per node and a pod enters that list just before its own admission, so
the pod being admitted is the one whose assignment names a container that has no devices yet
(``pending``), and that container is the first such one in assignment order: the kubelet
allocates container by container in spec order, and the scheduler writes ``containers`` in spec
order. When several pods look pending (a pod whose admission failed half-way, say), only those
whose pending container asks for exactly ``allocation_size`` GPUs that are all available are kept;
if that is still not exactly one, nobody is identified (``pick``). Guessing is what made HAMi
swap two pods' GPUs, so we would rather fall back to a topology choice and let Allocate's check
catch a real mismatch.

``preferred`` answers GetPreferredAllocation: the identified container's UUIDs when they are a
valid answer (right size, all available, containing ``must_include``), otherwise our own choice
with the core's rule 1 (``Topology.best_set``) over the available GPUs, so that even an
unidentified pod gets a well-connected set. It never fails: an error there fails the pod.

``check_allocation`` is Allocate's check: the kubelet's devices against the assignment. Mode
``strict`` refuses a mismatch (the pod fails visibly with the reason); ``adopt`` accepts it and the
caller records the truth. With no identified pod (PodResources or the apiserver down or slow, two
pods that both look pending, a pod with no assignment) there is nothing to compare with: ``strict``
refuses, since GPUs handed out unseen are GPUs the scheduler gives the next pod too; ``adopt``
accepts, and the caller reports the GPUs in ``topo-scheduler.io/allocated`` once the kubelet lists
the container that got them, so the scheduler counts them all the same.

Assignment format (scheduler/core/formats/assignment.py; ``containers`` is per container, in
spec order; when it is absent the pod has one GPU container and gets every UUID of ``devices``):
    {"devices": [{"index": 0, "uuid": "GPU-a"}, {"index": 3, "uuid": "GPU-b"}],
     "containers": [{"name": "main", "uuids": ["GPU-a", "GPU-b"]}], ...}
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from scheduler.core.formats import FormatError
from scheduler.core.formats import assignment as assignment_format
from scheduler.core.model.names import ASSIGNMENT_ANNOTATION
from scheduler.core.resources.inventory import Inventory


class Mode(enum.StrEnum):
    STRICT = "strict"
    ADOPT = "adopt"


class AssignmentError(ValueError):
    pass


@dataclass(frozen=True)
class ContainerGpus:
    """The GPUs one container is assigned; ``name`` is None for a pod-level (old) assignment."""

    name: str | None
    uuids: tuple[str, ...]


@dataclass(frozen=True)
class Assignment:
    containers: tuple[ContainerGpus, ...]
    per_container: bool


@dataclass(frozen=True)
class PodDevices:
    """One pod in the kubelet's PodResources list: device IDs of our resource per container."""

    namespace: str
    name: str
    devices: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class Target:
    """The container being admitted and the UUIDs the scheduler assigned it."""

    namespace: str
    name: str
    container: str | None
    uuids: tuple[str, ...]

    def describe(self) -> str:
        where = f"pod {self.namespace}/{self.name}"
        return where if self.container is None else f"{where} container {self.container}"


@dataclass(frozen=True)
class Verdict:
    accept: bool
    matches: bool | None  # None: no assignment to compare with
    message: str


# ---- the annotation ---------------------------------------------------------------------------


def read_assignment(annotations: Mapping[str, str]) -> Assignment | None:
    """The pod's assignment, None when it has none; AssignmentError when it is malformed."""
    raw = annotations.get(ASSIGNMENT_ANNOTATION)
    if raw is None:
        return None
    try:
        wire = assignment_format.decode(raw)
    except FormatError as exc:
        raise AssignmentError(str(exc)) from None
    if wire.containers is not None:
        # A container assigned no GPU is not waiting for any: leave it out.
        containers = tuple(
            ContainerGpus(c.name, tuple(c.uuids)) for c in wire.containers if c.uuids
        )
        return Assignment(containers, per_container=True)
    uuids = tuple(d.uuid for d in wire.devices)
    if not uuids:
        return Assignment((), per_container=False)
    return Assignment((ContainerGpus(None, uuids),), per_container=False)


# ---- identifying the container being admitted -----------------------------------------------


def pending(assignment: Assignment, pod: PodDevices) -> ContainerGpus | None:
    """The first assigned container of ``pod`` that has no devices yet, or None."""
    if assignment.per_container:
        for container in assignment.containers:
            if not pod.devices.get(container.name or ""):
                return container
        return None
    if not assignment.containers or any(pod.devices.values()):
        return None
    return assignment.containers[0]


def pick(
    candidates: Sequence[Target], size: int, available: AbstractSet[str] | None
) -> Target | None:
    """The one pod being admitted among the pending ones, or None when it is not certain.

    A single candidate is returned even if its UUIDs do not fit the request: Allocate must see
    it to refuse a stale or foreign assignment, and ``preferred`` checks the fit itself.
    """
    if len(candidates) == 1:
        return candidates[0]
    fitting = [
        t
        for t in candidates
        if len(t.uuids) == size and (available is None or set(t.uuids) <= available)
    ]
    return fitting[0] if len(fitting) == 1 else None


# ---- GetPreferredAllocation ------------------------------------------------------------------


def fits(
    uuids: Sequence[str], size: int, available: Sequence[str], must_include: Sequence[str]
) -> bool:
    chosen = set(uuids)
    return (
        len(chosen) == len(uuids) == size
        and chosen.issubset(available)
        and chosen.issuperset(must_include)
    )


def preferred(
    size: int,
    available: Sequence[str],
    must_include: Sequence[str],
    target: Target | None,
    inventory: Inventory | None,
) -> tuple[list[str], str]:
    """The answer for one container, and where it came from ("assignment" or "topology")."""
    if target is not None and fits(target.uuids, size, available, must_include):
        return list(target.uuids), "assignment"
    return topology_choice(size, available, must_include, inventory), "topology"


def topology_choice(
    size: int, available: Sequence[str], must_include: Sequence[str], inventory: Inventory | None
) -> list[str]:
    """``must_include`` plus the best-connected set of the rest (rule 1), then any others."""
    avail = list(dict.fromkeys(available))
    avail_set = set(avail)
    chosen = [u for u in dict.fromkeys(must_include) if u in avail_set][: max(size, 0)]
    need = size - len(chosen)
    if need <= 0:
        return chosen
    rest = [u for u in avail if u not in set(chosen)]
    if inventory is not None:
        index_of = {d.uuid: d.index for d in inventory.devices}
        uuid_of = {d.index: d.uuid for d in inventory.devices}
        free = 0
        for u in rest:
            i = index_of.get(u)
            if i is not None and i < inventory.topology.n:
                free |= 1 << i
        best = inventory.topology.best_set(free, need)
        if best is not None:
            return chosen + [uuid_of[i] for i in best.indices]
    # Devices the inventory does not know (or too few known): a stable, if arbitrary, choice.
    return chosen + sorted(rest)[:need]


# ---- Allocate ----------------------------------------------------------------------------


def check_allocation(
    devices: Sequence[str], target: Target | None, mode: Mode, why: str = ""
) -> Verdict:
    if target is None:
        message = f"no pod identified for {', '.join(devices) or 'no GPU'}" + (
            f" ({why})" if why else ""
        )
        if mode is Mode.STRICT:
            return Verdict(
                False,
                None,
                f"{message}: device plugin mode strict refuses GPUs it cannot match to an "
                "assignment",
            )
        return Verdict(
            True, None, f"{message} (device plugin mode adopt: accepted, reported when listed)"
        )
    if len(devices) == len(target.uuids) and set(devices) == set(target.uuids):
        return Verdict(True, True, "")
    message = (
        f"{target.describe()}: the kubelet allocated {', '.join(devices) or 'no GPU'} "
        f"but the scheduler assigned {', '.join(target.uuids)}"
    )
    if mode is Mode.STRICT:
        return Verdict(False, False, f"{message} (device plugin mode strict: refused)")
    return Verdict(True, False, f"{message} (device plugin mode adopt: accepted)")
