"""A claim's constraints across its requests: ``matchAttribute`` and ``distinctAttribute``.

A constraint covers the requests it names (a request name covers all of its subrequests; none
named: every request). Each device chosen for a covered request must have the attribute: the first
fixes the value every later one must equal (matchAttribute), or no two may have equal values
(distinctAttribute). Values are equal when of one type and equal (versions as strings). The
attribute name is fully qualified; a device whose driver is its domain may carry it short.
Constraints are monotonic, so the search stops a branch at the first violation; ``add`` and
``remove`` keep each constraint's state as the search moves.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..model.dra import AttributeValue, DeviceConstraint, Version

_Value = tuple[str, object]


def lookup(attrs: Mapping[str, AttributeValue], driver: str, name: str) -> _Value | None:
    """The attribute ``name`` (fully qualified) of a device of ``driver``, as (type, value)."""
    value = attrs.get(name)
    if value is None:
        domain, slash, ident = name.partition("/")
        if slash and domain == driver:
            value = attrs.get(ident)
    if value is None:
        return None
    if isinstance(value, Version):
        return ("version", value.value)
    return (type(value).__name__, value)


class Constraint:
    """One constraint's state during a search."""

    __slots__ = ("attribute", "distinct", "requests", "values")

    def __init__(self, spec: DeviceConstraint) -> None:
        self.requests = frozenset(spec.requests)
        self.distinct = bool(spec.distinct_attribute)
        self.attribute = spec.distinct_attribute or spec.match_attribute
        self.values: list[_Value] = []

    def covers(self, request: str, subrequest: str) -> bool:
        if not self.requests:
            return True
        return request in self.requests or f"{request}/{subrequest}" in self.requests

    def add(self, attrs: Mapping[str, AttributeValue], driver: str) -> bool:
        """Take one more device; False (and no change) when the constraint would break."""
        value = lookup(attrs, driver, self.attribute)
        if value is None:
            return False
        if self.distinct:
            if value in self.values:
                return False
        elif self.values and self.values[0] != value:
            return False
        self.values.append(value)
        return True

    def remove(self) -> None:
        self.values.pop()
