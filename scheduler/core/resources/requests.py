"""What a pod asks for, parsed once from its containers, labels and annotations.

A pod asks for either whole GPUs of one vendor (the configured resource names, summed over its
containers and sidecar init containers), or a slice of shared GPUs (Koordinator's resources and
MetaX sGPU), or nothing we schedule. A malformed request raises RequestError naming the pod and the
field; the cycle turns that into an Unschedulable decision, never an exception.
"""

from __future__ import annotations

import contextlib
import re
from decimal import Decimal, InvalidOperation
from typing import Final

import msgspec
from msgspec import Struct

from ..model import names
from ..model.gangsources import Gang, GangError, resolve
from ..model.objects import ContainerInput, PodInput
from ..settings import GPU_POLICIES, NODE_POLICIES, CoreSettings, GpuPolicy, NodePolicy
from .memo import Memo


class RequestError(ValueError):
    pass


class SharedRequest(Struct, frozen=True):
    cards: int  # how many cards the pod spreads over (koordinator.sh/gpu.shared)
    core: int  # percent of one card, per card
    memory_mib: int  # per card; 0 with memory_ratio set
    memory_ratio: int  # percent of the card's memory, per card
    sgpu: int  # sGPU instances per card
    qos: str | None  # sGPU QoS policy; None for non-sGPU sharing
    vendor: str | None  # "metax" for sGPU; None: any vendor


class PodRequest(Struct, frozen=True):
    gpus: int = 0
    # Whole GPUs per container that asks for any, in the kubelet's allocation order (sidecar
    # init containers, then app containers): the device plugin gives each its own part.
    containers: tuple[tuple[str, int], ...] = ()
    # Whole GPUs per resource name (sorted by name): what the node's allocatable must cover.
    resources: tuple[tuple[str, int], ...] = ()
    vendor: str | None = None
    shared: SharedRequest | None = None
    gang: Gang | None = None
    gpu_policy: GpuPolicy = "topology-aware"
    node_policy: NodePolicy = "binpack"

    @property
    def wants_gpus(self) -> bool:
        return self.gpus > 0 or self.shared is not None


_SUFFIX: Final[dict[str, Decimal]] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(text: str, memo: Memo[str, Decimal] | None = None) -> Decimal:
    """A Kubernetes quantity ("2", "1Gi", "500M", "1.5") as an exact Decimal. Remembered in
    ``memo`` when one is given (the snapshot's): a cluster's pods and nodes repeat a few dozen
    quantities, and every bound pod's and node's are parsed when it is listed (a Decimal each,
    about 1 us; a tenth of the time a LIST of 50,000 pods takes in)."""
    if memo is not None:
        found = memo.get(text)
        if found is None:
            found = parse_quantity(text)
            memo.put(text, found)
        return found
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from None
    return number * _SUFFIX[match.group(2)]


def parse_count(text: str, memo: Memo[str, Decimal] | None = None) -> int:
    """A quantity that counts things (GPUs, sGPU slots): a whole, non-negative number."""
    value = parse_quantity(text, memo)
    if value < 0 or value != value.to_integral_value():
        raise ValueError(f"{text!r} must be a whole, non-negative number")
    return int(value)


def _count(pod: PodInput, where: str, resource: str, text: str) -> int:
    try:
        return parse_count(text)
    except ValueError as exc:
        raise RequestError(f"pod {pod.key}: {where}[{resource}]: {exc}") from None


def _resources(c: ContainerInput) -> dict[str, str]:
    # Extended resources must have request == limit; a missing limit falls back to the request.
    merged = dict(c.requests)
    merged.update(c.limits)
    return merged


_SHARED_NAMES: Final = (
    names.SHARED_RESOURCE,
    names.CORE_RESOURCE,
    names.MEMORY_RESOURCE,
    names.MEMORY_RATIO_RESOURCE,
    names.SGPU_RESOURCE,
)


def gpu_resource_names(settings: CoreSettings) -> frozenset[str]:
    """Every resource name the GPU rules account for (whole GPUs per node, shared GPUs per card):
    the generic NodeResourcesFit filter leaves these to them."""
    return frozenset(settings.gpu_resources) | frozenset(_SHARED_NAMES)


# What the containers ask for, as _containers_ask reads it: whole GPUs per resource, shared-GPU
# amounts, shared memory in MiB, GPUs per container.
Ask = tuple[
    tuple[tuple[str, int], ...], tuple[tuple[str, int], ...], int, tuple[tuple[str, int], ...]
]
# _containers_ask's answers by what they are read from (the containers, the init containers and
# the GPU resource names, encoded): a gang's members and a Deployment's replicas share them. An
# error is never kept (it names its pod).
AskMemo = Memo[bytes, Ask]
_SPEC = msgspec.json.Encoder()


def parse_request(pod: PodInput, settings: CoreSettings, asks: AskMemo | None = None) -> PodRequest:
    """Parse what ``pod`` asks for; raises RequestError with a reason naming pod and field.
    What its containers ask for is remembered in ``asks`` when given (the snapshot's)."""
    if asks is None:
        ask = _containers_ask(pod, settings)
    else:
        key = _SPEC.encode((pod.containers, pod.init_containers, settings.gpu_resources))
        found = asks.get(key)
        if found is None:
            found = _containers_ask(pod, settings)
            asks.put(key, found)
        ask = found
    whole = dict(ask[0])
    shared = dict(ask[1])
    memory_mib = ask[2]
    vendors = sorted({settings.gpu_resources[r] for r in whole})
    if len(vendors) > 1:
        raise RequestError(
            f"pod {pod.key}: resources: asks for GPUs of several vendors "
            f"({', '.join(sorted(whole))})"
        )
    gpu_policy, node_policy = _policies(pod, settings)
    shared_req = None
    if any(shared.values()):
        if whole:
            raise RequestError(
                f"pod {pod.key}: resources: asks for whole GPUs ({', '.join(sorted(whole))}) and "
                "shared GPUs at once; use one or the other"
            )
        shared_req = _shared(pod, shared, memory_mib)
        if names.GPU_POLICY_ANNOTATION not in pod.annotations or gpu_policy == "topology-aware":
            gpu_policy = settings.shared_gpu_policy
    return PodRequest(
        gpus=sum(whole.values()),
        containers=ask[3],
        resources=tuple(sorted(whole.items())),
        vendor=vendors[0] if vendors else None,
        shared=shared_req,
        gang=parse_gang(pod),
        gpu_policy=gpu_policy,
        node_policy=node_policy,
    )


def _containers_ask(pod: PodInput, settings: CoreSettings) -> Ask:
    """What the containers ask for (RequestError naming pod and field when malformed)."""
    whole: dict[str, int] = {}
    shared: dict[str, int] = {}
    memory_mib = 0
    # Sidecars first: the kubelet starts, and so allocates devices for, init containers before
    # the app containers, and the device plugin expects the containers in that order.
    active = []
    for init in pod.init_containers:
        res = _resources(init)
        gpu_names = [r for r in res if r in settings.gpu_resources or r in _SHARED_NAMES]
        if init.restart_policy == "Always":
            active.append(init)  # a sidecar runs beside the app and holds its GPUs
        elif gpu_names:
            raise RequestError(
                f"pod {pod.key}: initContainers[{init.name}] requests {gpu_names[0]}: GPUs on "
                "plain init containers are not supported (their devices cannot be tracked); "
                "move them to a regular or sidecar container"
            )
    active += pod.containers
    per_container: list[tuple[str, int]] = []
    for c in active:
        where = f"containers[{c.name}].resources.limits"
        mine = 0
        for resource, text in _resources(c).items():
            if resource in settings.gpu_resources:
                n = _count(pod, where, resource, text)
                whole[resource] = whole.get(resource, 0) + n
                mine += n
            elif resource == names.MEMORY_RESOURCE:
                try:
                    size = parse_quantity(text)
                except ValueError as exc:
                    raise RequestError(f"pod {pod.key}: {where}[{resource}]: {exc}") from None
                if size <= 0:
                    raise RequestError(f"pod {pod.key}: {where}[{resource}]: must be positive")
                memory_mib += int((size / 2**20).to_integral_value(rounding="ROUND_CEILING"))
                shared[resource] = 1
            elif resource in _SHARED_NAMES:
                shared[resource] = shared.get(resource, 0) + _count(pod, where, resource, text)
        if mine:
            per_container.append((c.name, mine))
    positive = tuple((r, n) for r, n in whole.items() if n > 0)
    return positive, tuple(shared.items()), memory_mib, tuple(per_container)


def kubelet_request(
    pod: PodInput, settings: CoreSettings, quantities: Memo[str, Decimal] | None = None
) -> tuple[tuple[str, int], ...]:
    """Whole GPUs per resource name (sorted by name) that the kubelet admits ``pod`` against:
    its effective request, computed as the kubelet computes it, whatever parse_request thinks of
    the pod (plain init containers with GPUs, several vendors, whole and shared at once).

    Per resource: the larger of (a) the app containers plus the sidecars, and (b) the largest
    plain init container plus the sidecars started before it (a sidecar's own line is itself plus
    the sidecars before it). A quantity the apiserver would not have let through (not a whole,
    non-negative number) counts as 0. ``quantities``: the caller's memo of parsed quantities.
    """
    gpu_resources = settings.gpu_resources
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    for init in pod.init_containers:
        mine = _whole_counts(init, gpu_resources, quantities)
        if init.restart_policy == "Always":
            for resource, n in mine.items():
                sidecars[resource] = sidecars.get(resource, 0) + n
            line = sidecars
        else:
            line = dict(sidecars)
            for resource, n in mine.items():
                line[resource] = line.get(resource, 0) + n
        for resource, n in line.items():
            if n > peak.get(resource, 0):
                peak[resource] = n
    total = dict(sidecars)
    for c in pod.containers:
        for resource, n in _whole_counts(c, gpu_resources, quantities).items():
            total[resource] = total.get(resource, 0) + n
    for resource, n in peak.items():
        if n > total.get(resource, 0):
            total[resource] = n
    return tuple(sorted((r, n) for r, n in total.items() if n > 0))


def _whole_counts(
    c: ContainerInput, gpu_resources: dict[str, str], quantities: Memo[str, Decimal] | None
) -> dict[str, int]:
    out: dict[str, int] = {}
    for resource, text in _resources(c).items():
        if resource not in gpu_resources:
            continue
        with contextlib.suppress(ValueError):  # the apiserver would not have let it through
            n = parse_count(text, quantities)
            if n:
                out[resource] = n
    return out


def _shared(pod: PodInput, shared: dict[str, int], memory_mib: int) -> SharedRequest:
    sgpu = shared.get(names.SGPU_RESOURCE, 0)
    cards = shared.get(names.SHARED_RESOURCE, 0) or 1
    core = shared.get(names.CORE_RESOURCE, 0)
    ratio = shared.get(names.MEMORY_RATIO_RESOURCE, 0)
    where = f"pod {pod.key}: resources"
    if memory_mib and ratio:
        raise RequestError(
            f"{where}: set one of {names.MEMORY_RESOURCE} and {names.MEMORY_RATIO_RESOURCE}"
        )
    if sgpu and cards > 1:
        raise RequestError(
            f"{where}[{names.SGPU_RESOURCE}]: MetaX sGPU serves one card per pod, but "
            f"{names.SHARED_RESOURCE} asks for {cards}"
        )
    if not (core or memory_mib or ratio or sgpu):
        raise RequestError(
            f"{where}[{names.SHARED_RESOURCE}]: a shared GPU needs {names.CORE_RESOURCE}, "
            f"{names.MEMORY_RESOURCE}, {names.MEMORY_RATIO_RESOURCE} or {names.SGPU_RESOURCE}"
        )
    # Koordinator's amounts are totals over the pod's cards; each card carries an equal part.
    for label, amount in (
        (names.CORE_RESOURCE, core),
        (names.MEMORY_RATIO_RESOURCE, ratio),
        (names.MEMORY_RESOURCE, memory_mib),
    ):
        if amount % cards:
            raise RequestError(
                f"{where}[{label}]: {amount} does not divide evenly over {cards} shared GPUs"
            )
    if core // cards > names.CORES_PER_CARD or ratio // cards > 100:
        label = names.CORE_RESOURCE if core // cards > 100 else names.MEMORY_RATIO_RESOURCE
        raise RequestError(f"{where}[{label}]: more than 100 percent of one card")
    qos: str | None = None
    if sgpu:
        qos = pod.annotations.get(names.SGPU_QOS_ANNOTATION, names.DEFAULT_SGPU_QOS)
        if qos not in names.SGPU_QOS_POLICIES:
            raise RequestError(
                f"pod {pod.key}: annotation {names.SGPU_QOS_ANNOTATION}: {qos!r} is not one of "
                f"{', '.join(names.SGPU_QOS_POLICIES)}"
            )
    return SharedRequest(
        cards=cards,
        core=core // cards,
        memory_mib=memory_mib // cards,
        memory_ratio=ratio // cards,
        sgpu=sgpu,
        qos=qos,
        vendor="metax" if sgpu else None,
    )


def _policies(pod: PodInput, settings: CoreSettings) -> tuple[GpuPolicy, NodePolicy]:
    gpu_policy: GpuPolicy = settings.gpu_policy
    node_policy: NodePolicy = settings.node_policy
    raw = pod.annotations.get(names.GPU_POLICY_ANNOTATION)
    if raw is not None:
        for p in GPU_POLICIES:
            if raw == p:
                gpu_policy = p
                break
        else:
            raise RequestError(
                f"pod {pod.key}: annotation {names.GPU_POLICY_ANNOTATION}: {raw!r} is not one of "
                f"{', '.join(GPU_POLICIES)}"
            )
    raw = pod.annotations.get(names.NODE_POLICY_ANNOTATION)
    if raw is not None:
        for q in NODE_POLICIES:
            if raw == q:
                node_policy = q
                break
        else:
            raise RequestError(
                f"pod {pod.key}: annotation {names.NODE_POLICY_ANNOTATION}: {raw!r} is not one "
                f"of {', '.join(NODE_POLICIES)}"
            )
    return gpu_policy, node_policy


def parse_gang(pod: PodInput) -> Gang | None:
    """The pod's gang as the pod alone says it (model/gangsources.resolve without PodGroups: the
    minimum a PodGroup holds reads 0); RequestError when its sources are malformed or disagree."""
    try:
        return resolve(pod)
    except GangError as exc:
        raise RequestError(str(exc)) from None
