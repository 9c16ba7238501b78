"""Which devices are taken already: by every allocated claim, whoever allocated it.

A result with ``admin_access`` takes nothing (admin access watches a device, it does not hold
it). A result with a ``share_id`` is one share of a device that allows multiple allocations: it
takes its ``consumed_capacity``, not the device. Every other result holds its device alone.

The snapshot will keep this incrementally (claims added, changed, cleared); ``in_use_from``
builds it from a list of claims, which is what the tests and the simulator need.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from ..model.dra import ResourceClaim
from ..resources.requests import parse_quantity

DeviceId = tuple[str, str, str]  # (driver, pool, device)


class InUse:
    """Devices held exclusively, and the capacity taken from shared devices."""

    __slots__ = ("exclusive", "shared")

    def __init__(self) -> None:
        self.exclusive: set[DeviceId] = set()
        # device -> capacity name -> amount consumed by its shares
        self.shared: dict[DeviceId, dict[str, Decimal]] = {}

    def add_claim(self, claim: ResourceClaim) -> None:
        """Count the claim's allocation (nothing when it has none). Malformed consumed
        capacities are counted as the whole of nothing: they cannot come from an allocator."""
        if claim.allocation is None:
            return
        for r in claim.allocation.results:
            if r.admin_access:
                continue
            device = (r.driver, r.pool, r.device)
            if not r.share_id:
                self.exclusive.add(device)
                continue
            taken = self.shared.setdefault(device, {})
            for name, amount in r.consumed_capacity.items():
                try:
                    value = parse_quantity(amount)
                except ValueError:
                    continue
                taken[name] = taken.get(name, Decimal(0)) + value


def in_use_from(claims: Iterable[ResourceClaim]) -> InUse:
    state = InUse()
    for claim in claims:
        state.add_claim(claim)
    return state
