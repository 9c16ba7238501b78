"""Consumable capacity: how a request is rounded by a device's policy (core/dra/capacity.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from scheduler.core.dra.capacity import consumed, take
from scheduler.core.model.dra import CapacityRequestPolicy, Device, DeviceCapacity

GI = 2**30


@pytest.mark.parametrize(
    ("requested", "policy", "expected"),
    [
        (None, None, 80 * GI),  # nothing named: the whole capacity
        (None, CapacityRequestPolicy(default="1Gi"), GI),
        (5 * GI, None, 5 * GI),
        (5 * GI, CapacityRequestPolicy(valid_values=("4Gi", "8Gi", "16Gi")), 8 * GI),
        (20 * GI, CapacityRequestPolicy(valid_values=("4Gi", "8Gi", "16Gi")), 20 * GI),
        (GI // 2, CapacityRequestPolicy(valid_min="1Gi", valid_step="1Gi"), GI),
        (3 * GI + 1, CapacityRequestPolicy(valid_min="1Gi", valid_step="1Gi"), 4 * GI),
        (3 * GI + 1, CapacityRequestPolicy(valid_min="1Gi"), 3 * GI + 1),
        # Without fractional ranges (off in v1.37) a range works in whole units: 0.5 is 1.
        (Decimal("0.5"), CapacityRequestPolicy(valid_min="0", valid_step="1"), 1),
    ],
)
def test_a_request_is_rounded_by_the_policy(
    requested: int | Decimal | None, policy: CapacityRequestPolicy | None, expected: int
) -> None:
    amount = None if requested is None else Decimal(requested)
    assert consumed(amount, DeviceCapacity("80Gi", policy)) == expected


def test_a_share_must_keep_the_policy_and_fit_beside_the_others() -> None:
    policy = CapacityRequestPolicy(valid_min="1Gi", valid_max="4Gi", valid_step="1Gi")
    device = Device("d", capacity={"memory": DeviceCapacity("8Gi", policy)})
    assert take(device, {"memory": Decimal(3 * GI)}, {}, {}) == {"memory": 3 * GI}
    assert take(device, {"memory": Decimal(5 * GI)}, {}, {}) is None  # above max
    taken = {"memory": Decimal(6 * GI)}
    assert take(device, {"memory": Decimal(2 * GI)}, taken, {}) == {"memory": 2 * GI}
    assert take(device, {"memory": Decimal(2 * GI)}, taken, {"memory": Decimal(GI)}) is None
    assert take(device, {"cores": Decimal(1)}, {}, {}) is None  # a capacity it lacks
