"""Decisions: the core's only output, a tagged union (placed / waiting / unschedulable).

A decision covers a scheduling unit: one pod, or every pending member of a gang. ``Placed`` holds
one Placement per pod; the shell reserves and binds exactly these. ``Waiting`` means "nothing is
wrong with the pod, something else must happen first" (gang members missing or in conflict);
``Unschedulable`` means no node fits now, with a reason in kube-scheduler's style.
"""

from __future__ import annotations

from msgspec import Struct, field

from .dra import Allocation, DeviceRequest, RequestMapping


class Share(Struct, frozen=True, rename="camel", omit_defaults=True):
    """The slice of one card a shared-GPU pod holds."""

    index: int
    uuid: str
    core: int
    memory_mib: int = field(name="memoryMiB")
    sgpu: int = 0
    qos: str | None = None


class ContainerDevices(Struct, frozen=True):
    """The whole GPUs one container of a placed pod gets (what the device plugin hands out)."""

    name: str
    devices: tuple[int, ...]
    uuids: tuple[str, ...]


class ClaimAllocation(Struct, frozen=True):
    """A ResourceClaim a placement allocates (issue 29): the binder writes ``allocation`` into the
    claim's status (with the pod in ``reservedFor``) before the Binding, and undoes it when the
    Binding fails or is abandoned. ``special`` marks the claim kube-scheduler would create for
    extended resources backed by a DeviceClass (the binder creates it first: ``claim`` is then
    "namespace/<generateName>", ``<pod>-extended-resources-``, its spec's ``requests`` and the
    pod's ``status.extendedResourceClaimStatus.requestMappings`` are ``requests`` and
    ``mappings``; core/dra/extended.py)."""

    claim: str  # "namespace/name"
    uid: str  # the claim's uid: the precondition of every write ("" for a special claim)
    allocation: Allocation
    special: bool = False
    requests: tuple[DeviceRequest, ...] = ()
    mappings: tuple[RequestMapping, ...] = ()


class Placement(Struct, frozen=True):
    pod: str  # "namespace/name"
    uid: str
    node: str
    devices: tuple[int, ...]  # whole GPUs by index on the node, ascending; empty for shared
    uuids: tuple[str, ...]
    shares: tuple[Share, ...] = ()
    gang: str | None = None  # "namespace/job"
    containers: tuple[ContainerDevices, ...] = ()  # the devices split per container
    # Whole GPUs per resource name the pod asks for (sorted): charged against the node's
    # allocatable once the placement is assumed.
    resources: tuple[tuple[str, int], ...] = ()
    # A gang placed by topology (issue 21): the node's domain, level name -> value from the root
    # down, and the member's rank; the assignment annotation carries both for launchers.
    topology: tuple[tuple[str, str], ...] = ()
    rank: int | None = None
    # The minimum of the pod's gang as its plan resolved it (0: no gang): what its holding and
    # its store claim record, so that nobody resolves the gang again to assume it.
    replicas: int = 0
    # The ResourceClaims this placement allocates (issue 29), sorted by claim; claims already
    # allocated by anyone are not here (the pod only joins their reservedFor).
    claims: tuple[ClaimAllocation, ...] = ()


class Placed(Struct, frozen=True, tag="placed"):
    placements: tuple[Placement, ...]
    # Members of the unit left pending this time (an elastic gang's surplus that fits nowhere
    # yet), with why: not placed, not a failure of the unit.
    waiting: tuple[str, ...] = ()
    reason: str = ""


class Waiting(Struct, frozen=True, tag="waiting"):
    pods: tuple[str, ...]
    reason: str


class Unschedulable(Struct, frozen=True, tag="unschedulable"):
    pods: tuple[str, ...]
    reason: str


Decision = Placed | Waiting | Unschedulable
