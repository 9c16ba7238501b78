"""Which devices are taken already: by every allocated claim, whoever allocated it.

A result with ``admin_access`` takes nothing (admin access watches a device, it does not hold
it). A result with a ``share_id`` is one share of a device that allows multiple allocations: it
takes its ``consumed_capacity``, not the device. Every other result holds its device alone.

Kept incrementally: ``charge(allocation, +1)`` when a claim's allocation appears (or one of ours
is assumed), ``charge(allocation, -1)`` when it is cleared, changed or forgotten. A device is
counted once per allocation holding it, so two claims holding one device (two schedulers racing
on the same nodes) keep it in use until both let it go. ``in_use_from`` builds it from a list of
claims, which is what the tests need.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from ..model.dra import Allocation, ResourceClaim
from ..resources.requests import parse_quantity

DeviceId = tuple[str, str, str]  # (driver, pool, device)


class InUse:
    """Devices held exclusively (with how many allocations hold each), and the capacity taken
    from shared devices. The allocator reads ``exclusive`` as a set (``in``) and ``shared``."""

    __slots__ = ("_shares", "exclusive", "shared")

    def __init__(self) -> None:
        self.exclusive: dict[DeviceId, int] = {}
        # device -> capacity name -> amount consumed by its shares; a device is here while any
        # share holds it (its counters are charged once, by the first share: allocator.py)
        self.shared: dict[DeviceId, dict[str, Decimal]] = {}
        self._shares: dict[DeviceId, int] = {}

    def add_claim(self, claim: ResourceClaim) -> None:
        """Count the claim's allocation (nothing when it has none)."""
        if claim.allocation is not None:
            self.charge(claim.allocation, +1)

    def charge(self, allocation: Allocation, sign: int) -> None:
        """Count (sign 1) or uncount (-1) what ``allocation`` takes. Malformed consumed
        capacities count as nothing: they cannot come from an allocator."""
        for r in allocation.results:
            if r.admin_access:
                continue
            device = (r.driver, r.pool, r.device)
            if not r.share_id:
                held = self.exclusive.get(device, 0) + sign
                if held > 0:
                    self.exclusive[device] = held
                else:
                    self.exclusive.pop(device, None)
                continue
            shares = self._shares.get(device, 0) + sign
            if shares <= 0:
                self._shares.pop(device, None)
                self.shared.pop(device, None)
                continue
            self._shares[device] = shares
            taken = self.shared.setdefault(device, {})
            for name, amount in r.consumed_capacity.items():
                try:
                    value = parse_quantity(amount)
                except ValueError:
                    continue
                left = taken.get(name, Decimal(0)) + sign * value
                if left > 0:
                    taken[name] = left
                else:
                    taken.pop(name, None)


def in_use_from(claims: Iterable[ResourceClaim]) -> InUse:
    state = InUse()
    for claim in claims:
        state.add_claim(claim)
    return state
