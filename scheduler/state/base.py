"""The store interface and its value types.

Semantics shared by every implementation (tests/integration/test_store_contract.py runs the same
tests against both):

- Lease: ``acquire`` gives the lease to a holder that finds it free or already holds it, and a
  new holder gets a strictly greater epoch than any before it. ``renew`` extends only the lease
  the caller holds at that epoch. Every write below takes (holder, epoch) and raises Fenced when
  the lease is not held by exactly that pair at the moment of the write: a leader that could not
  renew stops committing at once, whatever its own clock says.
- ``reserve`` is all or nothing: every whole GPU must be unowned (or owned by the same pod) and
  every shared card must have room for the claim, else nothing is written and Conflict says why.
- ``mark_bound`` records that the apiserver accepted the binds; ``release`` frees pods' claims.
- ``reconcile`` makes the store equal to the apiserver's truth: bound pods missing from the store
  are added; records with no pod behind them are freed; reservations of pods that still exist
  unbound (``pending`` UIDs: a previous leader may have been binding them when it died) and of
  the current epoch (our own binds in flight) are kept.
"""

from __future__ import annotations

from typing import Protocol

from msgspec import Struct


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


class Claim(Struct, frozen=True):
    """What one pod holds or is about to hold."""

    uid: str
    pod: str  # namespace/name
    node: str
    devices: tuple[int, ...] = ()
    shares: tuple[ShareClaim, ...] = ()
    gang: str = ""


class Record(Struct, frozen=True):
    claim: Claim
    state: str  # "reserved" | "bound"
    epoch: int


class ReconcileReport(Struct, frozen=True):
    added: int
    freed: int
    kept: int
    conflicts: tuple[str, ...] = ()


class Store(Protocol):
    async def acquire(self, holder: str, ttl_ms: int) -> int | None:
        """The epoch if ``holder`` now holds the lease, else None."""
        ...

    async def renew(self, holder: str, epoch: int, ttl_ms: int) -> bool: ...

    async def release_lease(self, holder: str, epoch: int) -> None: ...

    async def reserve(self, holder: str, epoch: int, claims: list[Claim]) -> None:
        """All or nothing; raises Conflict or Fenced."""
        ...

    async def mark_bound(self, holder: str, epoch: int, uids: list[str]) -> None: ...

    async def release(self, holder: str, epoch: int, uids: list[str]) -> None: ...

    async def reconcile(
        self, holder: str, epoch: int, truth: list[Claim], pending: list[str]
    ) -> ReconcileReport: ...

    async def records(self) -> dict[str, Record]:
        """Every pod record by UID (for reconciliation checks, debugging and tests)."""
        ...

    async def close(self) -> None: ...
