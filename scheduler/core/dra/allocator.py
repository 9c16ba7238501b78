"""The structured allocator: devices for a pod's unallocated claims on one node, with
kube-scheduler v1.37's semantics (its default "incubating" allocator) and our choice among the
solutions by interconnect (choice.py).

``allocate`` takes the claims in order (the pod's, in ``spec.resourceClaims`` order), the device
classes, the slices, what is in use, the node, the selector cache and the node's GPU inventory,
and answers one ``Allocation`` per claim, or a reason.

The rules (kube-scheduler's; the module docstrings beside this one give the details):

- pools (pools.py): incomplete or invalid pools are not used; ``All`` meeting one is an error;
- per claim, per request in order: ``exactly`` takes ``count`` devices (ExactCount) or every
  matching device of the node (All); ``first_available`` tries its subrequests in order, and the
  first that leads to a solution for everything after it wins (results named ``req/sub``);
- a device is a candidate when not in use (held by any claim, or chosen in this attempt; with
  ``admin_access`` only "not chosen for the same claim" counts, and admin access takes nothing),
  it matches the class's selectors then the request's (CEL, cel.py), its capacity fits
  (capacity.py), its pool's counters can still pay for it, its NoSchedule/NoExecute taints are
  tolerated by the request, and the claim's constraints (constraints.py) still hold. A device
  that allows multiple allocations is never in use: every share takes capacity, and its counters
  are charged by the first share only;
- at most 32 results per claim ("exceeds the claim limit of 32" when the minimum already does);
- the result: per claim, its devices (with the request's tolerations, the device's binding
  conditions, a share id and consumed capacity for a share), each used class's config then the
  claim's matching config, and the node selector (the node's name when any device is node-local
  or binds to the node; else the slices' selectors ANDed; else None, usable anywhere).

The search is kube-scheduler's depth-first search over combinations, in pool, slice and device
order, cut at the first violation. Unlike kube-scheduler, which stops at the first solution, it
goes on comparing solutions by choice.py's key, with each request's candidates ordered so that
rule 1's best set comes first; it stops when the search is exhausted, when no device maps to a GPU
(then the first solution is kube-scheduler's), or when the budget (budget.py) says so. A budget
spent before any solution refuses the node ("timed out trying to allocate devices"). Share ids
are derived from the claim and device (uuid5), not random, so the core stays deterministic.

Failures are values, never exceptions: ``error`` marks what kube-scheduler treats as an Error of
the cycle (a missing class, a CEL error, All on an incomplete pool, the 32 limit, the budget),
otherwise the node is unschedulable for the claims ("cannot allocate all claims", or "invalid
resource pools were encountered" when an invalid pool was skipped).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Final

from msgspec import Struct

from ..model.dra import (
    ALL,
    EXACT_COUNT,
    FROM_CLAIM,
    FROM_CLASS,
    AllocatedConfig,
    Allocation,
    DeviceClass,
    DeviceResult,
    ExactRequest,
    ResourceClaim,
    ResourceSlice,
)
from ..model.objects import NodeSelectorTerm, Requirement, Taint, Toleration
from ..resources.inventory import Inventory
from ..resources.requests import parse_quantity
from ..settings import DraLimits
from . import capacity as capacity_rules
from .budget import Budget
from .cel import Selectors
from .choice import GpuMap, busy_units, guide, map_devices, rank
from .constraints import Constraint
from .inuse import DeviceId, InUse
from .pools import Candidate, Pool, gather_pools

RESULTS_MAX: Final = 32
NO_SOLUTION: Final = "cannot allocate all claims"
INVALID_POOLS: Final = "invalid resource pools were encountered"
_SHARE_NAMESPACE: Final = uuid.UUID("5f0c6a52-3f7e-4f0b-9d3c-1b2f7b0c9a11")


class Outcome(Struct, frozen=True):
    """One allocation per claim (in order), or a ``reason``; ``error`` when kube-scheduler
    would fail the cycle with an Error rather than find the node unschedulable."""

    allocations: tuple[Allocation, ...] = ()
    reason: str = ""
    error: bool = False

    @property
    def ok(self) -> bool:
        return not self.reason


class _Fatal(Exception):
    """A failure kube-scheduler reports as an Error; its text is the reason."""


class _OutOfBudget(Exception):
    pass


class _Request:
    """One ``exactly`` or subrequest, ready for the search."""

    __slots__ = (
        "admin_access",
        "all_devices",
        "capacity",
        "class_",
        "count",
        "name",
        "spec",
        "subrequest",
    )

    def __init__(self, name: str, subrequest: str, spec: ExactRequest, class_: DeviceClass) -> None:
        self.name = name
        self.subrequest = subrequest
        self.spec = spec
        self.class_ = class_
        self.admin_access = spec.admin_access
        self.count = spec.count
        self.all_devices: list[Candidate] | None = None
        self.capacity: dict[str, Decimal] = {}

    @property
    def result_name(self) -> str:
        return f"{self.name}/{self.subrequest}" if self.subrequest else self.name


class _Chosen:
    __slots__ = ("candidate", "consumed", "request")

    def __init__(
        self, candidate: Candidate, request: _Request, consumed: dict[str, Decimal] | None
    ) -> None:
        self.candidate = candidate
        self.request = request
        self.consumed = consumed


def allocate(
    claims: Sequence[ResourceClaim],
    classes: Mapping[str, DeviceClass],
    slices: Iterable[ResourceSlice],
    in_use: InUse,
    node: str,
    labels: Mapping[str, str],
    selectors: Selectors,
    inventory: Inventory | None = None,
    limits: DraLimits | None = None,
) -> Outcome:
    """Allocate ``claims`` (none allocated yet) together on ``node``; see the module doc.

    ``slices`` must hold every slice of each pool that reaches the node (pools.py judges a pool
    short on the node by all of its slices); more is harmless but costs a pass over them.
    ``in_use`` holds the allocations of every claim, ours in flight included. ``selectors`` is
    the caller's, kept across calls for its memo; ``inventory`` is the node's GPU inventory, for
    the choice by interconnect (None: by device locations, or first fit)."""
    return allocate_pools(
        claims,
        classes,
        gather_pools(slices, node, labels),
        in_use,
        node,
        selectors,
        inventory,
        limits,
    )


def allocate_pools(
    claims: Sequence[ResourceClaim],
    classes: Mapping[str, DeviceClass],
    pools: list[Pool],
    in_use: InUse,
    node: str,
    selectors: Selectors,
    inventory: Inventory | None = None,
    limits: DraLimits | None = None,
) -> Outcome:
    """``allocate`` over the node's pools as pools.gather_pools gathered them (the snapshot
    keeps them per node)."""
    search = _Search(claims, classes, pools, in_use, node, selectors, inventory)
    return search.run(Budget(limits or DraLimits()))


class _Search:
    def __init__(
        self,
        claims: Sequence[ResourceClaim],
        classes: Mapping[str, DeviceClass],
        pools: list[Pool],
        in_use: InUse,
        node: str,
        selectors: Selectors,
        inventory: Inventory | None,
    ) -> None:
        self.claims = claims
        self.classes = classes
        self.pools = pools
        self.pool_of = {(p.driver, p.name): p for p in pools}
        self.in_use = in_use
        self.node = node
        self.selectors = selectors
        self.usable = [c for p in pools if not p.incomplete and not p.invalid for c in p.devices]
        self.gpus: GpuMap = map_devices(self.usable, inventory)
        self.busy = busy_units(
            self.gpus,
            [c.id for c in self.usable if c.id in in_use.exclusive or c.id in in_use.shared],
        )
        self.requests: list[list[list[_Request]]] = []  # claim -> request -> subrequests
        self.constraints: list[list[Constraint]] = []
        self.results: list[list[_Chosen]] = [[] for _ in claims]
        self.choices: list[list[int]] = [[0] * len(c.requests) for c in claims]
        self.allocating: dict[DeviceId, set[int]] = {}  # device -> claims holding it
        self.shares: dict[DeviceId, dict[str, Decimal]] = {}  # capacity taken by new shares
        self.share_count: dict[DeviceId, int] = {}
        self.counters = _counters_in_use(pools, in_use)
        self.matches: dict[tuple[int, DeviceId], bool] = {}  # (request, device) -> verdict
        self.budget = Budget(DraLimits())
        self.best: tuple[tuple[object, ...], list[list[_Chosen]], list[list[int]]] | None = None
        self.found = 0
        self.single = sum(len(c.requests) for c in claims) == 1
        self.optimal: frozenset[DeviceId] | None = None

    # ---- the run ----------------------------------------------------------------------------

    def run(self, budget: Budget) -> Outcome:
        self.budget = budget
        try:
            self._prepare()
            self._claim(0)
        except _OutOfBudget:
            pass  # the best solution so far stands; without one, the node is refused below
        except RecursionError:
            # A few frames per device: only claims asking for hundreds of devices get here.
            if self.best is None:
                return Outcome(reason=f"node {self.node}: too many devices to search", error=True)
        except _Fatal as exc:
            # After a solution, an error met while looking for a better one ends the looking.
            if self.best is None:
                return Outcome(reason=str(exc), error=True)
        if self.best is None:
            if budget.exhausted:
                return Outcome(
                    reason=(
                        f"node {self.node}: timed out trying to allocate devices (the search "
                        f"budget of {budget.limits.steps} devices and "
                        f"{budget.limits.evaluations} selector evaluations is spent)"
                    ),
                    error=True,
                )
            if any(p.invalid for p in self.pools):
                return Outcome(reason=INVALID_POOLS)
            return Outcome(reason=NO_SOLUTION)
        _, results, choices = self.best
        return Outcome(
            allocations=tuple(
                self._allocation(i, claim, results[i], choices[i])
                for i, claim in enumerate(self.claims)
            )
        )

    def _prepare(self) -> None:
        for claim in self.claims:
            per_claim: list[list[_Request]] = []
            least = 0
            for request in claim.requests:
                if request.exactly is not None:
                    subs = [self._request(claim, request.name, "", request.exactly)]
                elif request.first_available:
                    subs = [
                        self._request(claim, request.name, s.name, s.exactly)
                        for s in request.first_available
                    ]
                else:
                    raise _Fatal(f"claim {claim.key}, request {request.name}: no device request")
                fewest = min(self._size(r) for r in subs)
                if fewest > RESULTS_MAX - least:
                    raise _Fatal(
                        f"claim {claim.key}, request {request.name}: adding {fewest} devices "
                        f"exceeds the claim limit of {RESULTS_MAX}, with {least} already "
                        "accounted for"
                    )
                least += fewest
                per_claim.append(subs)
            self.requests.append(per_claim)
            constraints = []
            for i, spec in enumerate(claim.constraints):
                if not spec.match_attribute and not spec.distinct_attribute:
                    raise _Fatal(
                        f"claim {claim.key}, constraint #{i}: empty constraint (unsupported "
                        "constraint type?)"
                    )
                constraints.append(Constraint(spec))
            self.constraints.append(constraints)

    def _request(self, claim: ResourceClaim, name: str, sub: str, spec: ExactRequest) -> _Request:
        where = f"claim {claim.key}, request {f'{name}/{sub}' if sub else name}"
        for i, expression in enumerate(spec.selectors):
            if not expression:
                raise _Fatal(f"{where}, selector #{i}: CEL expression empty")
        class_ = self.classes.get(spec.device_class_name)
        if class_ is None:
            raise _Fatal(
                f"{where}: could not retrieve device class {spec.device_class_name}: "
                f'deviceclass.resource.k8s.io "{spec.device_class_name}" not found'
            )
        request = _Request(name, sub, spec, class_)
        for cap_name, amount in spec.capacity.items():
            try:
                request.capacity[cap_name] = parse_quantity(amount)
            except ValueError as exc:
                raise _Fatal(f"{where}: capacity {cap_name}: {exc}") from None
        if spec.allocation_mode == ALL:
            request.all_devices = self._all_devices(len(self.requests), request, where)
        elif spec.allocation_mode != EXACT_COUNT:
            raise _Fatal(f"{where}: unsupported count mode {spec.allocation_mode}")
        return request

    def _all_devices(self, ci: int, request: _Request, where: str) -> list[Candidate]:
        devices: list[Candidate] = []
        for pool in self.pools:
            if pool.incomplete:
                raise _Fatal(
                    f"{where}: asks for all devices, but resource pool {pool.label} is "
                    "currently being updated"
                )
            if pool.invalid:
                raise _Fatal(
                    f"{where}: asks for all devices, but resource pool {pool.label} is "
                    "currently invalid"
                )
            for c in pool.devices:
                if self._selectable(ci, request, c, strict=True) and (
                    self._capacity(ci, c, request, {}, {}) is not None
                ):
                    devices.append(c)
        return devices

    @staticmethod
    def _size(request: _Request) -> int:
        if request.all_devices is not None:
            return len(request.all_devices)
        return request.count

    # ---- the depth-first search -------------------------------------------------------------

    def _claim(self, ci: int) -> bool:
        if ci == len(self.claims):
            return self._solution()
        return self._next_request(ci, 0)

    def _next_request(self, ci: int, ri: int) -> bool:
        if ri == len(self.requests[ci]):
            return self._claim(ci + 1)
        for si, request in enumerate(self.requests[ci][ri]):
            self.choices[ci][ri] = si
            before = self.found
            if self._slot(ci, ri, request, 0, self._order(ci, request), 0):
                return True
            if self.found > before:
                # Later subrequests can only rank below one that led to a solution.
                return False
        return False

    def _order(self, ci: int, request: _Request) -> list[Candidate]:
        if request.all_devices is not None or self.gpus.empty:
            return self.usable
        eligible = []
        for c in self.usable:
            # Ordering is search work too: it is paid from the same budget.
            if not self.budget.spend_step():
                raise _OutOfBudget
            if not self._held(ci, request, c.id) and self._selectable(ci, request, c, strict=False):
                eligible.append(c)
        order, best = guide(self.gpus, self.usable, eligible, request.count)
        # With one request in all, the guided set is the optimum when rule 1's damage in
        # best_set (over the eligible units) is the damage the key counts (over the units
        # present and not busy): the first solution taking it ends the search.
        self.optimal = None
        if best is not None and self.single:
            units = {self.gpus.unit_of[c.id] for c in eligible}
            if units == self.gpus.present - self.busy:
                self.optimal = best
        return order

    def _slot(
        self, ci: int, ri: int, request: _Request, di: int, order: list[Candidate], start: int
    ) -> bool:
        size = self._size(request)
        if request.all_devices is not None and size == 0:
            return False
        if di == size:
            return self._next_request(ci, ri + 1)
        if size - di > RESULTS_MAX - len(self.results[ci]):
            return False
        if request.all_devices is not None:
            undo = self._take(ci, request, request.all_devices[di], must=True)
            if undo is None:
                return False
            stop = self._slot(ci, ri, request, di + 1, order, 0)
            undo()
            return stop
        # Too few candidates left for the request's remaining devices: no need to look.
        for pos in range(start, len(order) - (size - di) + 1):
            if not self.budget.spend_step():
                raise _OutOfBudget
            candidate = order[pos]
            if self._held(ci, request, candidate.id):
                continue
            if not self._selectable(ci, request, candidate, strict=True):
                continue
            undo = self._take(ci, request, candidate, must=False)
            if undo is None:
                continue
            stop = self._slot(ci, ri, request, di + 1, order, pos + 1)
            undo()
            if stop:
                return True
        return False

    def _solution(self) -> bool:
        self.found += 1
        chosen = [ch.candidate.id for per_claim in self.results for ch in per_claim]
        key: tuple[object, ...] = (
            tuple(tuple(c) for c in self.choices),
            rank(self.gpus, chosen, self.busy),
            self.found,
        )
        if self.best is None or key < self.best[0]:
            self.best = (
                key,
                [list(r) for r in self.results],
                [list(c) for c in self.choices],
            )
        if self.gpus.empty or not any(d in self.gpus.unit_of for d in chosen):
            return True
        if self.optimal is not None and self.optimal == frozenset(chosen):
            return True
        return not self.budget.spend_solution()

    # ---- one device -------------------------------------------------------------------------

    def _held(self, ci: int, request: _Request, device: DeviceId) -> bool:
        holders = self.allocating.get(device)
        if request.admin_access:
            return holders is not None and ci in holders
        return device in self.in_use.exclusive or bool(holders)

    def _selectable(self, ci: int, request: _Request, c: Candidate, strict: bool) -> bool:
        """Whether the class's and the request's selectors match ``c``. A CEL error is fatal
        when ``strict``; otherwise (ordering a request's candidates) it reads as no match, and
        the search meets it in its turn."""
        memo = (id(request), c.id)
        found = self.matches.get(memo)
        if found is not None:
            return found
        claim = self.claims[ci]
        for owner, exprs in (
            (f"class {request.class_.name}", request.class_.selectors),
            (f"claim {claim.key}", request.spec.selectors),
        ):
            for i, expression in enumerate(exprs):
                compile_error = self.selectors.compile_error(expression)
                if compile_error is not None:
                    raise _Fatal(f"{owner}: selector #{i}: CEL compile error: {compile_error}")
                verdict = self.selectors.matches(
                    expression,
                    c.key,
                    c.device.attributes,
                    c.device.capacity,
                    c.device.allow_multiple_allocations,
                    self.budget,
                )
                if self.budget.exhausted:
                    raise _OutOfBudget
                if isinstance(verdict, str):
                    if not strict:
                        return False
                    raise _Fatal(
                        f"{owner}: selector #{i} on device {'/'.join(c.id)}: CEL runtime "
                        f"error: {verdict}"
                    )
                if not verdict:
                    self.matches[memo] = False
                    return False
        self.matches[memo] = True
        return True

    def _capacity(
        self,
        ci: int,
        c: Candidate,
        request: _Request,
        taken: Mapping[str, Decimal],
        allocating: Mapping[str, Decimal],
    ) -> dict[str, Decimal] | None:
        try:
            return capacity_rules.take(c.device, request.capacity, taken, allocating)
        except capacity_rules.CapacityError as exc:
            raise _Fatal(
                f"claim {self.claims[ci].key}, request {request.result_name}: checking capacity "
                f"for device {'/'.join(c.id)}: {exc}"
            ) from None

    def _take(
        self, ci: int, request: _Request, c: Candidate, must: bool
    ) -> Callable[[], None] | None:
        """Choose ``c`` for the request: the undo, or None when it cannot be taken."""
        device = c.id
        multiple = c.device.allow_multiple_allocations
        if self._held(ci, request, device):
            return None
        amounts = self._capacity(
            ci, c, request, self.in_use.shared.get(device, {}), self.shares.get(device, {})
        )
        if amounts is None:
            return None
        shared_before = multiple and (device in self.in_use.shared or device in self.share_count)
        charged = not shared_before and bool(c.device.consumes_counters)
        pool_key = (c.driver, c.pool)
        if charged and not _charge(self.counters, self._pool(pool_key), c, 1):
            return None
        if any(
            t.effect in ("NoSchedule", "NoExecute")
            and not any(_tolerates(tol, t) for tol in request.spec.tolerations)
            for t in c.device.taints
        ):
            if charged:
                _charge(self.counters, self._pool(pool_key), c, -1)
            return None
        added: list[Constraint] = []
        for constraint in self.constraints[ci]:
            if not constraint.covers(request.name, request.subrequest):
                continue
            if not constraint.add(c.device.attributes, c.driver):
                for done in added:
                    done.remove()
                if charged:
                    _charge(self.counters, self._pool(pool_key), c, -1)
                if must:
                    raise _Fatal(
                        f"claim {self.claims[ci].key}, request {request.result_name}: cannot add "
                        f"device {'/'.join(device)} because a claim constraint would not be "
                        "satisfied"
                    )
                return None
            added.append(constraint)
        if not multiple:
            self.allocating.setdefault(device, set()).add(ci)
        else:
            share = self.shares.setdefault(device, {})
            for name, amount in amounts.items():
                share[name] = share.get(name, Decimal(0)) + amount
            self.share_count[device] = self.share_count.get(device, 0) + 1
        self.results[ci].append(_Chosen(c, request, amounts if multiple else None))

        def undo() -> None:
            self.results[ci].pop()
            if not multiple:
                holders = self.allocating[device]
                holders.discard(ci)
                if not holders:
                    del self.allocating[device]
            else:
                share = self.shares[device]
                for name, amount in amounts.items():
                    share[name] -= amount
                self.share_count[device] -= 1
                if not self.share_count[device]:
                    del self.share_count[device], self.shares[device]
            for done in reversed(added):
                done.remove()
            if charged:
                _charge(self.counters, self._pool(pool_key), c, -1)

        return undo

    def _pool(self, key: tuple[str, str]) -> Pool:
        return self.pool_of[key]

    # ---- the result -------------------------------------------------------------------------

    def _allocation(
        self, ci: int, claim: ResourceClaim, chosen: list[_Chosen], choices: list[int]
    ) -> Allocation:
        # Each request's devices in pool, slice and device order, whatever order found them.
        requests = {id(ch.request): n for n, ch in reversed(list(enumerate(chosen)))}
        place = {c.id: n for n, c in enumerate(self.usable)}
        chosen = sorted(chosen, key=lambda ch: (requests[id(ch.request)], place[ch.candidate.id]))
        results = []
        for pos, ch in enumerate(chosen):
            c, request = ch.candidate, ch.request
            share = ""
            consumed: dict[str, str] = {}
            if ch.consumed is not None:
                share = str(
                    uuid.uuid5(
                        _SHARE_NAMESPACE,
                        f"{claim.uid or claim.key}/{request.result_name}/{'/'.join(c.id)}/{pos}",
                    )
                )
                consumed = {k: capacity_rules.quantity_text(v) for k, v in ch.consumed.items()}
            results.append(
                DeviceResult(
                    request=request.result_name,
                    driver=c.driver,
                    pool=c.pool,
                    device=c.device.name,
                    admin_access=request.admin_access,
                    tolerations=request.spec.tolerations,
                    binding_conditions=c.device.binding_conditions,
                    binding_failure_conditions=c.device.binding_failure_conditions,
                    share_id=share,
                    consumed_capacity=consumed,
                )
            )
        chosen_requests = [self.requests[ci][ri][si] for ri, si in enumerate(choices)]
        return Allocation(
            results=tuple(results),
            config=_config(claim, chosen_requests),
            node_selector=_node_selector(chosen, self.node),
        )


def _tolerates(toleration: Toleration, taint: Taint) -> bool:
    """A device toleration's rule, which differs from a pod's in one case: an empty key with
    Equal compares the value of any key."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.operator in ("", "Equal") and toleration.value == taint.value


def _counters_in_use(pools: list[Pool], in_use: InUse) -> dict[tuple[str, str, str, str], Decimal]:
    """(driver, pool, counter set, counter) -> amount taken by devices allocated anywhere."""
    used: dict[tuple[str, str, str, str], Decimal] = {}
    for pool in pools:
        for name, uses in pool.consumption.items():
            device = (pool.driver, pool.name, name)
            if device not in in_use.exclusive and device not in in_use.shared:
                continue
            for counter_set, counter, amount in uses:
                key = (pool.driver, pool.name, counter_set, counter)
                used[key] = used.get(key, Decimal(0)) + amount
    return used


def _charge(
    used: dict[tuple[str, str, str, str], Decimal], pool: Pool, c: Candidate, sign: int
) -> bool:
    """Charge (sign 1) or refund (-1) ``c``'s counters; False (nothing charged) when the pool's
    counter sets cannot pay."""
    amounts = [
        ((pool.driver, pool.name, counter_set, counter), amount)
        for counter_set, counter, amount in pool.consumption[c.device.name]
    ]
    if sign > 0:
        for (driver, name, counter_set, counter), amount in amounts:
            available = pool.counters[counter_set][counter]
            if used.get((driver, name, counter_set, counter), Decimal(0)) + amount > available:
                return False
    for key, amount in amounts:
        used[key] = used.get(key, Decimal(0)) + sign * amount
    return True


def _config(claim: ResourceClaim, chosen: list[_Request]) -> tuple[AllocatedConfig, ...]:
    names = {r.name for r in chosen} | {r.result_name for r in chosen}
    out: list[AllocatedConfig] = []
    by_class: dict[str, list[int]] = {}
    for request in chosen:
        positions = by_class.get(request.class_.name)
        if positions is not None:
            for p in positions:
                out[p] = AllocatedConfig(
                    FROM_CLASS, (*out[p].requests, request.result_name), out[p].opaque
                )
            continue
        by_class[request.class_.name] = []
        for opaque in request.class_.config:
            by_class[request.class_.name].append(len(out))
            out.append(AllocatedConfig(FROM_CLASS, (request.result_name,), opaque))
    for config in claim.config:
        if not config.requests or any(r in names for r in config.requests):
            out.append(AllocatedConfig(FROM_CLAIM, config.requests, config.opaque))

    def covers_all(requests: tuple[str, ...]) -> bool:
        return all(r.name in requests or r.result_name in requests for r in chosen)

    return tuple(
        AllocatedConfig(c.source, (), c.opaque) if c.requests and covers_all(c.requests) else c
        for c in out
    )


def _node_selector(chosen: list[_Chosen], node: str) -> tuple[NodeSelectorTerm, ...] | None:
    fields: list[Requirement] = []
    expressions: list[Requirement] = []
    for ch in chosen:
        c = ch.candidate
        if c.node_name or c.device.binds_to_node:
            return (NodeSelectorTerm(match_fields=(Requirement("metadata.name", "In", (node,)),)),)
        if c.node_selector is not None:
            for r in c.node_selector.match_fields:
                if r not in fields:
                    fields.append(r)
            for r in c.node_selector.match_expressions:
                if r not in expressions:
                    expressions.append(r)
    if not fields and not expressions:
        return None
    return (NodeSelectorTerm(match_expressions=tuple(expressions), match_fields=tuple(fields)),)
