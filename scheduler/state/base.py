"""The store interface and its value types.

Semantics shared by every implementation (tests/integration/test_store_contract.py runs the same
tests against both):

- Lease: ``acquire`` gives the lease to a holder that finds it free or already holds it, and a
  new holder gets a strictly greater epoch than any before it (of the history the store kept:
  ``kept_history`` says whether it kept all of it). ``renew`` extends only the lease
  the caller holds at that epoch. Every write below takes (holder, epoch) and raises Fenced when
  the lease is not held by exactly that pair at the moment of the write: a leader that could not
  renew stops committing at once, whatever its own clock says.
- ``reserve`` is all or nothing: every whole GPU must be unowned (or owned by a pod of the same
  call, whose earlier claim the new one replaces: a gang decided afresh after a failover may swap
  its members' GPUs) and every shared card must have room for the claim, else nothing is written
  and Conflict says why.
  ``reserve_each`` takes several such units (a pod's claim, or a gang's members' claims) in one
  call: each is all or nothing on its own, judged in order against the store as the units
  before it left it; a refused unit writes nothing and the others are still written. The reason
  per unit replaces Conflict; only a failed fence (Fenced) refuses the whole call. ``reserve``
  is ``reserve_each`` with one unit.
- ``mark_bound`` records that the apiserver accepted the binds; ``release`` frees pods' claims.
- Per-GPU owner (``owners``): every whole GPU held is owned by one pod, with the pod's gang and
  the epoch of the leader that wrote the ownership (by ``reserve`` or ``reconcile``).
- Gang records (``gangs``): a gang (``namespace/job``) has a record exactly while some pod record
  carries it, written in the same atomic call as the change to its members, stamped with that
  call's epoch. Its members are those pods' UIDs and its state follows from them: ``reserved``
  while any member is only reserved, else ``bound`` when the members are at least the gang's
  replica count (the largest ``Claim.replicas`` among them; 0 = unknown, no check), else
  ``partial`` (all bound, but a member was released, finished or never re-planned). So a gang
  turns ``bound`` in the ``mark_bound`` that binds its last member, and its record goes with the
  ``release`` that frees its last member.
- Node inventories (``nodes``): node name -> inventory JSON (the ``topo-scheduler.io/gpus``
  shape, with ``scores``), written by the leader, fenced like every write: ``update_nodes`` on
  node events, and ``reconcile`` given ``nodes`` replaces them all (nodes not given are dropped).
- ``reconcile`` makes the store equal to the apiserver's truth: bound pods missing from the store
  are added; records with no pod behind them are freed; the reservations of the ``pending``
  UIDs are kept (the caller names them: our own binds in flight, and right after an election
  every pod still unbound, since a previous leader may have been binding them when it died).
  Any other reservation is freed, whichever epoch wrote it. Every gang record is then rebuilt from
  the pod records (bound members' gangs come from the truth's claims). Nominations (below) are
  not pod records: ``reconcile`` leaves them alone. The caller sends no ``mark_bound`` or
  ``release`` until its ``reconcile`` returns: ``truth`` and ``pending`` are what it knew when it
  began, and RedisStore's reconcile is several calls, so such a write could land inside it and
  be undone (a pending UID's record marked bound meanwhile would be freed); memory's is one.
- Nominations (``nominations``; issue 14's preemption): while a preemptor's victims terminate, the
  GPUs freed for it (whole GPU indices on one node; none when it needs only cpu/memory) and the
  DRA allocations its plan gives its claims are held for it by a ``Nomination``, at most one per
  preemptor UID. ``nominate`` writes one, fenced like
  every write, replacing any earlier nomination of the same UID; ``drop_nominations`` removes
  those of the UIDs given (the preemptor bound, was deleted, or was given up; unknown UIDs are
  ignored). A nomination carries its own ``expires_ms`` (unix milliseconds, chosen by the caller:
  the store computes no expiry) and is live while ``now_ms < expires_ms`` for the ``now_ms`` the
  caller passes: ``nominations(now_ms)`` never returns an expired one, and every ``nominate`` (and
  a ``drop_nominations`` given ``now_ms``) deletes the expired ones in the same atomic call
  (RedisStore: up to ``chunk`` of them per call, earliest expiry first, so the call's work stays
  bounded). So the store holds at most one per preemptor, and expired ones only until the next
  such write. A nomination already expired when written deletes the preemptor's earlier one and
  is not kept. The store only remembers nominations: it never refuses a ``reserve`` because of one
  (which pods may take nominated GPUs is the core's decision, made from ``nominations``). They
  survive a new leader's ``acquire`` and ``reconcile`` (a new leader reads them at takeover), but
  not a FLUSHALL of Redis (nor a new MemoryStore, i.e. a restart of the one replica): that is
  accepted, the service derives them again.
"""

from __future__ import annotations

from typing import Protocol

from msgspec import Struct

from scheduler.core.model.decisions import ClaimAllocation
from scheduler.core.model.dra import Allocation


class StoreError(Exception):
    pass


class Fenced(StoreError):
    """The caller does not hold the lease at that epoch: it must stop writing."""


class Conflict(StoreError):
    """A reservation collided with what the store already holds; nothing was written."""


class Unavailable(StoreError):
    """The store cannot be reached; nothing is known to have been written."""


class ShareClaim(Struct, frozen=True, array_like=True):
    index: int
    core: int
    memory_mib: int
    sgpu: int
    qos: str
    # Capacity of the card, so the store can check the sum without knowing inventories.
    cap_memory_mib: int
    cap_sgpu: int


class History(Struct, frozen=True):
    """What ``kept_history`` says of the store's past: whether it kept every write since the
    last election it recorded, and that election's ``holder|epoch``."""

    kept: bool
    previous: str = ""
    # Whether that election's leader marked it settled (``mark_settled``): its wait for the
    # Bindings of a leader it could not know was over, or it had none to wait for.
    settled: bool = False


class Claim(Struct, frozen=True):
    """What one pod holds or is about to hold."""

    uid: str
    pod: str  # namespace/name
    node: str
    devices: tuple[int, ...] = ()
    shares: tuple[ShareClaim, ...] = ()
    gang: str = ""
    replicas: int = 0  # the gang's replica count; 0 without a gang or when unknown
    # Whole GPUs per resource name (sorted) that the pod's node's allocatable is charged with:
    # a reservation reloaded by the next leader counts against the allocatable too. Absent in
    # claims written before it existed (decoded as ()).
    resources: tuple[tuple[str, int], ...] = ()
    # The ResourceClaims the placement allocates (issue 29), as the binder writes them: a
    # reservation reloaded by the next leader holds their devices too while the previous
    # leader's claim writes may still land (the book's unsettled stage). The store checks no
    # device of them: the apiserver's claims are the truth of DRA devices, and the snapshot is
    # what keeps a device from being given twice. Absent in claims written before it existed.
    claims: tuple[ClaimAllocation, ...] = ()


class Record(Struct, frozen=True):
    claim: Claim
    state: str  # "reserved" | "bound"
    epoch: int


class Owner(Struct, frozen=True):
    """Who holds one whole GPU."""

    uid: str
    gang: str
    epoch: int


class GangRecord(Struct, frozen=True):
    state: str  # "reserved" | "bound" | "partial"
    epoch: int
    members: tuple[str, ...]  # pod UIDs, sorted
    replicas: int = 0


class Nomination(Struct, frozen=True, kw_only=True):
    """Resources held for a preemptor while its victims terminate (see the module docstring)."""

    uid: str  # the preemptor's pod UID: at most one nomination per UID
    pod: str  # the preemptor's namespace/name
    priority: int  # the preemptor's spec.priority
    node: str  # the node nominated for it (its status.nominatedNodeName)
    devices: tuple[int, ...] = ()  # whole GPU indices held for it; () when it needs no whole GPU
    victims: tuple[str, ...] = ()  # the UIDs of the pods evicted for it
    # The allocations the plan gives its ResourceClaims (issue 29): the next leader holds their
    # DRA devices for it too. Absent in nominations written before it existed (decoded as ()).
    allocations: tuple[Allocation, ...] = ()
    created_ms: int  # unix milliseconds
    expires_ms: int  # unix milliseconds; live while now_ms < expires_ms


class ReconcileReport(Struct, frozen=True):
    added: int
    freed: int
    kept: int
    conflicts: tuple[str, ...] = ()


class ReservesUnits:
    """``reserve``, the one-unit case of ``reserve_each``, for both stores (one rule)."""

    async def reserve_each(
        self, holder: str, epoch: int, units: list[list[Claim]]
    ) -> list[str | None]:
        raise NotImplementedError

    async def reserve(self, holder: str, epoch: int, claims: list[Claim]) -> None:
        (problem,) = await self.reserve_each(holder, epoch, [claims])
        if problem is not None:
            raise Conflict(problem)


class Store(Protocol):
    async def acquire(self, holder: str, ttl_ms: int) -> int | None:
        """The epoch if ``holder`` now holds the lease, else None."""
        ...

    async def renew(self, holder: str, epoch: int, ttl_ms: int) -> bool: ...

    async def release_lease(self, holder: str, epoch: int) -> None: ...

    async def kept_history(self, holder: str, epoch: int) -> History:
        """Fenced, once per election. ``kept``: True when the store provably kept every write
        since the last election it recorded (the same Redis process has served them all), False
        when it may have lost some (new or flushed, restarted, or a replica promoted over a
        master that had writes it never replicated); the caller then treats the previous leader
        as unknown (docs/operations.md "State and HA"). ``previous``: that election's
        ``holder|epoch`` ("" without one); ``settled``: whether that election was marked
        settled. Records this election (the serving process, ``holder|epoch``, not settled) for
        the next one."""
        ...

    async def mark_settled(self, holder: str, epoch: int) -> None:
        """Fenced: marks this election (the one ``kept_history`` recorded last) settled, once its
        leader no longer waits for Bindings a leader before it may have in flight, so that the
        next election's ``History.settled`` says it may chain to it. An election never marked
        (its leader lost the lease while it waited) leaves its wait to the next one."""
        ...

    async def reserve(self, holder: str, epoch: int, claims: list[Claim]) -> None:
        """All or nothing; raises Conflict or Fenced. ``reserve_each`` with one unit."""
        ...

    async def reserve_each(
        self, holder: str, epoch: int, units: list[list[Claim]]
    ) -> list[str | None]:
        """Reserve several independent units in one fenced call.

        Each unit is all or nothing exactly as ``reserve``. Units are judged in order, each
        against the store as the units before it in the same call left it (so a unit colliding
        with an earlier one is refused, the earlier one written). Returns, per unit, None when
        it was written, else the conflict reason (the text ``reserve`` puts in Conflict), and
        nothing of that unit is written. Raises Fenced for the whole call, with nothing
        written, when the lease is not held by (holder, epoch)."""
        ...

    async def mark_bound(self, holder: str, epoch: int, uids: list[str]) -> None: ...

    async def release(self, holder: str, epoch: int, uids: list[str]) -> None: ...

    async def reconcile(
        self,
        holder: str,
        epoch: int,
        truth: list[Claim],
        pending: list[str],
        nodes: dict[str, str] | None = None,
    ) -> ReconcileReport:
        """``nodes`` (name -> inventory JSON), when given, become the stored inventories."""
        ...

    async def update_nodes(
        self, holder: str, epoch: int, put: dict[str, str], drop: list[str]
    ) -> None:
        """Write changed node inventories and drop deleted nodes, in one fenced call."""
        ...

    async def nominate(self, holder: str, epoch: int, nomination: Nomination, now_ms: int) -> None:
        """Write (or replace) the nomination of ``nomination.uid`` and delete every nomination
        expired at ``now_ms``, in one fenced call."""
        ...

    async def drop_nominations(
        self, holder: str, epoch: int, uids: list[str], now_ms: int | None = None
    ) -> None:
        """Delete the nominations of these preemptor UIDs (and, given ``now_ms``, every expired
        one), in one fenced call."""
        ...

    async def nominations(self, now_ms: int) -> dict[str, Nomination]:
        """The nominations live at ``now_ms`` by preemptor UID (a new leader's takeover, /debug)."""
        ...

    async def records(self) -> dict[str, Record]:
        """Every pod record by UID (for reconciliation checks, debugging and tests)."""
        ...

    async def gangs(self) -> dict[str, GangRecord]:
        """Every gang record by gang key (``namespace/job``)."""
        ...

    async def owners(self, node: str) -> dict[int, Owner]:
        """The owners of a node's whole GPUs by GPU index."""
        ...

    async def nodes(self) -> dict[str, str]:
        """The stored node inventories: node name -> inventory JSON."""
        ...

    async def close(self) -> None: ...
