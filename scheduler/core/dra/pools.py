"""Which devices one node can use: ResourceSlices gathered into pools, as kube-scheduler does.

A slice reaches the node when its ``node_name`` is the node, it has ``all_nodes``, its
``node_selector`` matches the node, or it has ``per_device_node_selection`` (then each device's
own ``node_name``/``node_selector``/``all_nodes`` decides, device by device).

A pool is (driver, pool name). Only the highest generation of the slices reaching the node counts.
When they are as many as ``resource_slice_count`` the pool is complete; when fewer, all of the
pool's slices decide: a newer generation anywhere makes the node's slices obsolete (the pool is
ignored), and fewer slices of the generation than the count make it incomplete (its devices are
not used, and a request for ``All`` devices is an error). A pool
is invalid with duplicate device names, or a device consuming a counter set or counter the pool
does not define (or defines twice). Pools are ordered by (driver, name), those with devices
needing binding conditions last; slices by name; devices keep their order in the slice. That
order is kube-scheduler's only preference (its search is first-fit), and the first-fit fallback
of ours.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from msgspec import Struct

from ..model.dra import CounterSet, Device, ResourceSlice
from ..model.labels import term_matches
from ..model.objects import NodeSelectorTerm
from ..resources.requests import parse_quantity


class Candidate(Struct, frozen=True):
    """A device this node can use, with where it comes from.

    ``node_name``/``node_selector`` say which nodes the device is usable from (both empty:
    every node); ``key`` is its identity for the selector memo."""

    driver: str
    pool: str
    slice: str
    generation: int
    device: Device
    node_name: str = ""
    node_selector: NodeSelectorTerm | None = None

    @property
    def id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device.name)

    @property
    def key(self) -> tuple[str, str, str, int, str]:
        return (self.driver, self.pool, self.slice, self.generation, self.device.name)


class Pool(Struct, frozen=True):
    driver: str
    name: str
    generation: int
    devices: tuple[Candidate, ...]  # reaching this node, in allocation order
    # counter set -> counter -> value, from every slice of the generation
    counters: dict[str, dict[str, Decimal]]
    # device name -> (counter set, counter, amount) it consumes, for every device of the
    # generation, reaching the node or not: counters are shared across the pool. Empty when the
    # pool is invalid.
    consumption: dict[str, tuple[tuple[str, str, Decimal], ...]]
    incomplete: bool = False
    invalid: str = ""  # why the pool is invalid, "" when it is not

    @property
    def label(self) -> str:
        return f"{self.driver}/{self.name}"


def gather_pools(
    slices: Iterable[ResourceSlice], node: str, labels: Mapping[str, str]
) -> list[Pool]:
    """The pools with a slice reaching ``node``, in allocation order.

    ``slices`` must hold every slice of those pools (the snapshot indexes them by pool): a pool
    whose reaching slices fall short of its count is judged by all of its slices."""
    by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in slices:
        by_pool.setdefault((s.driver, s.pool.name), []).append(s)
    pools: list[Pool] = []
    for (driver, name), members in by_pool.items():
        reaching = [s for s in members if _slice_reaches(s, node, labels)]
        if not reaching:
            continue
        generation = max(s.pool.generation for s in reaching)
        reaching = [s for s in reaching if s.pool.generation == generation]
        expected = reaching[0].pool.resource_slice_count
        current = [s for s in members if s.pool.generation == generation]
        if len(reaching) != expected:
            # Short on this node: a newer generation elsewhere makes these slices obsolete;
            # otherwise the pool is complete only if all of its slices are there.
            if any(s.pool.generation > generation for s in members):
                continue
            if len(current) != expected:
                pools.append(Pool(driver, name, generation, (), {}, {}, incomplete=True))
                continue
        devices: list[Candidate] = []
        for s in sorted(reaching, key=lambda s: s.name):
            for d in s.devices:
                candidate = _candidate(s, d, node, labels)
                if candidate is not None:
                    devices.append(candidate)
        counters, invalid = _counters(current)
        if not invalid:
            invalid = _check_devices(current, counters)
        pools.append(
            Pool(
                driver=driver,
                name=name,
                generation=generation,
                devices=tuple(devices),
                counters=counters,
                consumption={} if invalid else _consumption(current),
                invalid=invalid,
            )
        )
    pools.sort(key=lambda p: (_needs_binding(p), p.driver, p.name))
    return pools


def _consumption(current: list[ResourceSlice]) -> dict[str, tuple[tuple[str, str, Decimal], ...]]:
    """What each device consumes, parsed (``_check_devices`` has checked every amount)."""
    return {
        d.name: tuple(
            (use.counter_set, counter, parse_quantity(amount))
            for use in d.consumes_counters
            for counter, amount in use.counters.items()
        )
        for s in current
        for d in s.devices
        if d.consumes_counters
    }


def _needs_binding(pool: Pool) -> bool:
    return any(c.device.binding_conditions for c in pool.devices)


def _slice_reaches(s: ResourceSlice, node: str, labels: Mapping[str, str]) -> bool:
    if s.node_name:
        return s.node_name == node
    if s.all_nodes:
        return True
    if s.node_selector is not None:
        return term_matches(s.node_selector, node, labels)
    if s.per_device_node_selection:
        return any(_candidate(s, d, node, labels) is not None for d in s.devices)
    return False


def _candidate(
    s: ResourceSlice, d: Device, node: str, labels: Mapping[str, str]
) -> Candidate | None:
    if not s.per_device_node_selection:
        return Candidate(
            s.driver, s.pool.name, s.name, s.pool.generation, d, s.node_name, s.node_selector
        )
    if d.node_name:
        return (
            Candidate(s.driver, s.pool.name, s.name, s.pool.generation, d, node_name=d.node_name)
            if d.node_name == node
            else None
        )
    if d.node_selector is not None:
        if not term_matches(d.node_selector, node, labels):
            return None
        return Candidate(
            s.driver, s.pool.name, s.name, s.pool.generation, d, node_selector=d.node_selector
        )
    if not d.all_nodes:
        return None
    return Candidate(s.driver, s.pool.name, s.name, s.pool.generation, d)


def _counters(current: list[ResourceSlice]) -> tuple[dict[str, dict[str, Decimal]], str]:
    counters: dict[str, dict[str, Decimal]] = {}
    for s in current:
        for cs in s.shared_counters:
            if cs.name in counters:
                return counters, f"counter set {cs.name} is defined twice"
            parsed = _parse_set(cs)
            if isinstance(parsed, str):
                return counters, parsed
            counters[cs.name] = parsed
    return counters, ""


def _parse_set(cs: CounterSet) -> dict[str, Decimal] | str:
    out: dict[str, Decimal] = {}
    for name, value in cs.counters.items():
        try:
            out[name] = parse_quantity(value)
        except ValueError as exc:
            return f"counter set {cs.name}, counter {name}: {exc}"
    return out


def _check_devices(current: list[ResourceSlice], counters: dict[str, dict[str, Decimal]]) -> str:
    seen: set[str] = set()
    for s in current:
        for d in s.devices:
            if d.name in seen:
                return f"duplicate device name {d.name}"
            seen.add(d.name)
            for use in d.consumes_counters:
                available = counters.get(use.counter_set)
                if available is None:
                    return f"device {d.name}: counter set {use.counter_set} is not defined"
                for counter, value in use.counters.items():
                    if counter not in available:
                        return (
                            f"device {d.name}: counter {counter} is not defined in counter set "
                            f"{use.counter_set}"
                        )
                    try:
                        parse_quantity(value)
                    except ValueError as exc:
                        return f"device {d.name}: counter {counter}: {exc}"
            for name, cap in d.capacity.items():
                try:
                    parse_quantity(cap.value)
                except ValueError as exc:
                    return f"device {d.name}: capacity {name}: {exc}"
    return ""
