"""Consumable capacity (DRAConsumableCapacity, beta and on in v1.37): what a request takes of a
device's capacities, and whether it fits.

For every capacity of the device, the amount taken is the request's amount rounded up by the
capacity's policy (``valid_values``: the smallest value at least the request; a range: at least
``valid_min``, up by whole ``valid_step``s) or, when the request names no amount, the policy's
``default`` or else the whole capacity. The amount must keep the policy (at most ``valid_max``,
on a step, one of the values) and, added to what other shares and this allocation already took,
stay within the capacity. A request naming a capacity the device lacks does not fit. Amounts are
whole numbers as kube-scheduler computes them with DRAFractionalCapacityRange off (its default in
a v1.37 binary): a range's bounds and the request round up to integers.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal

from ..model.dra import CapacityRequestPolicy, Device, DeviceCapacity
from ..resources.requests import parse_quantity


class CapacityError(ValueError):
    pass


def _q(text: str) -> Decimal:
    try:
        return parse_quantity(text)
    except ValueError as exc:
        raise CapacityError(str(exc)) from None


def _ceil(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def consumed(requested: Decimal | None, capacity: DeviceCapacity) -> Decimal:
    """The amount a request of ``requested`` (None: no amount named) takes of ``capacity``."""
    policy = capacity.request_policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return _q(policy.default)
        return _q(capacity.value)
    if policy is None:
        return requested
    if policy.valid_min is not None:
        low = _q(policy.valid_min)
        if requested < low:
            return low
        if policy.valid_step is None:
            return requested
        step, low_int = _ceil(_q(policy.valid_step)), _ceil(low)
        added = _ceil(requested) - low_int
        steps = -(-added // step) if step > 0 else 0
        return Decimal(low_int + step * steps)
    for value in policy.valid_values:
        if requested <= _q(value):
            return _q(value)
    return requested


def _violates(amount: Decimal, policy: CapacityRequestPolicy | None) -> bool:
    if policy is None:
        return False
    if policy.default is not None and amount == _q(policy.default):
        return False
    if policy.valid_min is not None:
        if policy.valid_max is not None and amount > _q(policy.valid_max):
            return True
        if policy.valid_step is not None:
            step = _ceil(_q(policy.valid_step))
            return step > 0 and (_ceil(amount) - _ceil(_q(policy.valid_min))) % step != 0
        return False
    if policy.valid_values:
        return all(amount != _q(v) for v in policy.valid_values)
    return False


def take(
    device: Device,
    requests: Mapping[str, Decimal],
    taken: Mapping[str, Decimal],
    allocating: Mapping[str, Decimal],
) -> dict[str, Decimal] | None:
    """What the request takes of each of ``device``'s capacities, or None when it does not fit
    beside ``taken`` (by other claims' shares) and ``allocating`` (by this allocation).
    CapacityError for a malformed quantity in the device's policies."""
    if any(name not in device.capacity for name in requests):
        return None
    # An exclusive device asked for no amount takes all of each capacity, which fits unless a
    # policy refuses the whole value: the common case, decided without parsing.
    exclusive = not device.allow_multiple_allocations and not taken and not allocating
    if (
        exclusive
        and not requests
        and all(c.request_policy is None for c in device.capacity.values())
    ):
        return {}
    amounts: dict[str, Decimal] = {}
    for name, cap in device.capacity.items():
        amount = consumed(requests.get(name), cap)
        if amount < 0:
            raise CapacityError(f"capacity {name}: capacity value is negative")
        if _violates(amount, cap.request_policy):
            return None
        total = amount + taken.get(name, Decimal(0)) + allocating.get(name, Decimal(0))
        if total > _q(cap.value):
            return None
        amounts[name] = amount
    return amounts


def quantity_text(value: Decimal) -> str:
    """A Decimal as a quantity string the API accepts (plain digits, no exponent)."""
    text = format(value.normalize(), "f")
    return text if text != "-0" else "0"
