"""What a pod requests and a node can give, counted as the kubelet admits pods.

The snapshot charges every bound pod's requests to its node with these functions, and the filter
(``filters/resources.py``) compares an incoming pod's with what is left; so the accounting lives
here, below both, and the filters only read it.

A pod's effective request, per resource, is what the kubelet admits it against (component-helpers'
PodRequests, which kube-scheduler uses):

    max( sum(app containers) + sum(sidecars),
         max over init containers i of (i's request + sidecars started before i) )
    + spec.overhead

where a sidecar is an init container with ``restartPolicy: Always`` (its own line is itself plus the
sidecars before it) and a container's request falls back to its limit when only the limit is set
(the apiserver defaults it so; hand-written manifests get the same here).

Units are kube-scheduler's: cpu in millicores, everything else in whole units (bytes), rounded up.
Checked resources are kube-scheduler's: cpu, memory, ephemeral-storage, and the scalar resources
(extended resources such as ``example.com/fpga``, ``hugepages-*``, ``attachable-volumes-*`` and
prefixed native ones). The node's pod count is checked too ("Too many pods"). GPU resources are
left out here: the GPU rules (``placement``) charge whole GPUs per node with their own reason
("have too little allocatable nvidia.com/gpu"), guessed devices and reservations included, and
shared GPUs (``koordinator.sh/gpu-core``, ``metax-tech.com/sgpu``...) per card.

A node object without ``status`` (a hand-written simulate manifest) is not checked, as before.
A malformed quantity is the pod's problem (RequestError naming the field) for the incoming pod; for
a pod already running, or a node, the apiserver would not have let it through: it counts as 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from decimal import ROUND_CEILING, Decimal

import msgspec

from ..model.dra import DeviceClass
from ..model.objects import ContainerInput, PodInput
from .memo import Memo
from .requests import RequestError, parse_quantity

# Resource amounts in kube-scheduler's units: cpu in millicores, every other resource in whole
# units (bytes for memory and storage), rounded up. "pods" is not a request: the pod count is.
Amounts = tuple[tuple[str, int], ...]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL = "ephemeral-storage"
PODS = "pods"
_STANDARD = (CPU, MEMORY, EPHEMERAL)
# The name a DeviceClass gives the extended resource it backs when it names none itself.
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


def is_checked(resource: str) -> bool:
    """kube-scheduler checks cpu, memory, ephemeral-storage and scalar resources."""
    if resource in _STANDARD:
        return True
    if resource.startswith(("hugepages-", "attachable-volumes-")):
        return True
    if "/" not in resource:
        return False  # an unprefixed name kube-scheduler does not track (e.g. "storage")
    return not resource.startswith("requests.")


def amount(resource: str, value: Decimal) -> int:
    """A quantity in kube-scheduler's unit for ``resource``: millicores for cpu, else whole units,
    rounded up (Quantity.MilliValue / Value)."""
    if resource == CPU:
        value = value * 1000
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def _container_requests(c: ContainerInput) -> dict[str, str]:
    merged = dict(c.limits)
    merged.update(c.requests)
    return merged


def _parse(
    pod: PodInput, where: str, values: Mapping[str, str], strict: bool, skip: Iterable[str]
) -> dict[str, int]:
    out: dict[str, int] = {}
    skipped = set(skip)
    for resource, text in values.items():
        if resource in skipped or not is_checked(resource):
            continue
        try:
            value = parse_quantity(text)
        except ValueError as exc:
            if strict:
                raise RequestError(f"pod {pod.key}: {where}[{resource}]: {exc}") from None
            continue
        if value < 0:
            if strict:
                raise RequestError(f"pod {pod.key}: {where}[{resource}]: must not be negative")
            continue
        n = amount(resource, value)
        if n:
            out[resource] = n
    return out


def parse_values(
    pod: PodInput, where: str, values: Mapping[str, str], skip: tuple[str, ...]
) -> dict[str, int]:
    """Quantities of a pod already admitted (malformed ones count as 0), in our units."""
    return _parse(pod, where, values, False, skip)


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for resource, n in more.items():
        into[resource] = into.get(resource, 0) + n


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for resource, n in other.items():
        if n > into.get(resource, 0):
            into[resource] = n


def is_pod_level(resource: str) -> bool:
    """The resources a pod-level ``spec.resources`` sets for the whole pod (PodLevelResources):
    cpu, memory and hugepages-*; the others (GPUs, ephemeral-storage...) stay per container."""
    return resource in (CPU, MEMORY) or resource.startswith("hugepages-")


# One (init) container's requests for an aggregate: where they come from (for a RequestError)
# and the quantities, or None when the container contributes nothing.
ContainerValues = Callable[[ContainerInput], tuple[str, Mapping[str, str]] | None]


def spec_values(c: ContainerInput) -> tuple[str, Mapping[str, str]] | None:
    """A container's requests as its spec asks (a missing request falls back to the limit)."""
    return "resources.requests", _container_requests(c)


def aggregate(
    pod: PodInput, values: ContainerValues, strict: bool, skip: tuple[str, ...]
) -> dict[str, int]:
    """The containers' effective request (component-helpers' aggregate, sidecar formula):
    app containers plus sidecars, or the largest plain init container's line if larger."""
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    for init in pod.init_containers:
        mine = _values(pod, f"initContainers[{init.name}]", values(init), strict, skip)
        if init.restart_policy == "Always":
            _add(total, mine)
            _add(sidecars, mine)
            line = dict(sidecars)
        else:
            line = dict(sidecars)
            _add(line, mine)
        _max(peak, line)
    for c in pod.containers:
        _add(total, _values(pod, f"containers[{c.name}]", values(c), strict, skip))
    _max(total, peak)
    return total


def _values(
    pod: PodInput,
    container: str,
    found: tuple[str, Mapping[str, str]] | None,
    strict: bool,
    skip: tuple[str, ...],
) -> dict[str, int]:
    if found is None:
        return {}
    field, values = found
    return _parse(pod, f"{container}.{field}", values, strict, skip)


def apply_pod_level(total: dict[str, int], level: Mapping[str, int]) -> None:
    """PodLevelResources: each pod-level resource replaces the containers' sum for its key."""
    for resource, n in level.items():
        if is_pod_level(resource):
            total[resource] = n


def finish(pod: PodInput, total: dict[str, int], strict: bool, skip: tuple[str, ...]) -> Amounts:
    """Add ``spec.overhead`` and return the sums as Amounts (sorted by name, zeros dropped)."""
    _add(total, _parse(pod, "overhead", pod.overhead, strict, skip))
    return tuple(sorted((r, n) for r, n in total.items() if n > 0))


# pod_requests' answers by what they are computed from (the spec's containers, init containers,
# overhead and pod-level requests, encoded; the skipped names; strictness): the members of a gang,
# a Deployment's replicas and the same pod applied, rolled back and applied again share one spec,
# so one parse serves them all. An answer is a tuple, immutable; an error is never kept (it names
# its pod).
RequestsMemo = Memo[tuple[bytes, frozenset[str], bool], Amounts]
_SPEC = msgspec.json.Encoder()


def pod_requests(
    pod: PodInput,
    skip: Iterable[str] = (),
    strict: bool = False,
    memo: RequestsMemo | None = None,
) -> Amounts:
    """The pod's effective request of every checked resource but ``skip`` (sorted by name), as
    its spec asks (an incoming pod; a bound one is charged by ``resize.bound_requests``).

    ``strict``: a malformed quantity raises RequestError naming pod and field (the incoming pod);
    otherwise it counts as 0 (a pod already admitted by the apiserver). ``memo``: the caller's
    (the snapshot's) answers by spec.
    """
    skipped = skip if isinstance(skip, frozenset) else frozenset(skip)
    if memo is None:
        return _pod_requests(pod, tuple(skipped), strict)
    spec = (pod.containers, pod.init_containers, pod.overhead, pod.level_requests)
    key = (_SPEC.encode(spec), skipped, strict)
    found = memo.get(key)
    if found is None:
        found = _pod_requests(pod, tuple(skipped), strict)
        memo.put(key, found)
    return found


def _pod_requests(pod: PodInput, skip: tuple[str, ...], strict: bool) -> Amounts:
    total = aggregate(pod, spec_values, strict, skip)
    if pod.level_requests:
        level = _parse(pod, "spec.resources.requests", pod.level_requests, strict, skip)
        apply_pod_level(total, _with_zeros(pod.level_requests, level))
    return finish(pod, total, strict, skip)


def _with_zeros(values: Mapping[str, str], parsed: Mapping[str, int]) -> dict[str, int]:
    """``parsed`` with the keys _parse dropped as zero put back (a pod-level 0 replaces too);
    malformed ones (dropped when not strict) stay out."""
    out = dict(parsed)
    for resource, text in values.items():
        if resource not in out:
            with contextlib.suppress(ValueError):
                if parse_quantity(text) == 0:
                    out[resource] = 0
    return out


def node_allocatable(
    values: Mapping[str, str],
    skip: Iterable[str] = (),
    quantities: Memo[str, Decimal] | None = None,
) -> dict[str, int]:
    """A node's allocatable of every checked resource and of pods (malformed values count 0);
    ``quantities``: the caller's memo of parsed quantities."""
    out: dict[str, int] = {}
    skipped = set(skip)
    for resource, text in values.items():
        if resource in skipped or (resource != PODS and not is_checked(resource)):
            continue
        with contextlib.suppress(ValueError):
            value = parse_quantity(text, quantities)
            if value > 0:
                out[resource] = amount(resource, value)
    return out


def extended_resources(classes: Iterable[DeviceClass]) -> dict[str, str]:
    """Extended resource name -> the DeviceClass that backs it: each class's
    ``extendedResourceName`` and its implicit ``deviceclass.resource.kubernetes.io/<class>``
    (when several declare the same resource, the newest class, then the smallest name, as
    kube-scheduler's extendedresourcecache)."""
    out: dict[str, str] = {}
    newest_first = sorted(classes, key=lambda c: c.name)
    newest_first.sort(key=lambda c: c.created, reverse=True)
    for c in newest_first:
        out.setdefault(IMPLICIT_PREFIX + c.name, c.name)
        if c.extended_resource_name:
            out.setdefault(c.extended_resource_name, c.name)
    return out
