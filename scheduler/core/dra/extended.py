"""The claim kube-scheduler creates for a pod's extended resources backed by a DeviceClass
(DRAExtendedResource, GA in v1.37; its plugin's extendeddynamicresources.go).

When a pod asks for an extended resource R (``nvidia.com/gpu``, or the implicit
``deviceclass.resource.kubernetes.io/<class>``) on a node whose allocatable has none of R, and a
DeviceClass backs R, the node can give R through DRA: the devices are allocated in one claim per
pod, created by the scheduler at PreBind with generateName ``<pod>-extended-resources-``, the
pod as its controller owner, and the annotation ``resource.kubernetes.io/extended-resource-claim:
"true"``; the pod's ``status.extendedResourceClaimStatus`` then names it, with the mappings from
each container's resource to the claim's request.

``special_claim`` builds that claim's spec the same way: for each backed resource (sorted by
name), a request ``container-<i>-request-<j>`` of ExactCount ``quantity`` devices of the class
for each long-lived container asking for it (i counts init containers then containers, j is the
resource's position among the container's sorted request names); init containers that are not
sidecars reuse the requests of the long-lived containers after them, and ask for the rest in one
request, the largest of theirs; requests sorted by name. Container requests are its
``resources.requests`` as the apiserver defaults them (a limit without a request is the
request).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..model.dra import (
    EXACT_COUNT,
    DeviceRequest,
    ExactRequest,
    RequestMapping,
    ResourceClaim,
)
from ..model.objects import ContainerInput, PodInput
from ..resources.requests import parse_quantity

GENERATE_NAME_SUFFIX: Final = "-extended-resources-"


def generate_name(pod: PodInput) -> str:
    return pod.name + GENERATE_NAME_SUFFIX


def _quantity(container: ContainerInput, resource: str) -> tuple[int, list[str]]:
    asked = {**container.limits, **container.requests}
    text = asked.get(resource)
    if text is None:
        return 0, []
    try:
        value = parse_quantity(text)
    except ValueError:
        return 0, []
    return (int(value) if value == int(value) else 0), sorted(asked)


def _request(
    index: int,
    container: ContainerInput,
    resource: str,
    device_class: str,
    reusable: list[DeviceRequest | None],
) -> tuple[DeviceRequest | None, list[RequestMapping]]:
    count, names = _quantity(container, resource)
    if count <= 0:
        return None, []
    mappings = []
    covered = 0
    for r in reusable:
        if r is None or r.exactly is None:
            continue
        covered += r.exactly.count
        mappings.append(RequestMapping(container.name, resource, r.name))
        if covered >= count:
            return None, mappings
    name = f"container-{index}-request-{names.index(resource)}"
    request = DeviceRequest(
        name, ExactRequest(device_class, allocation_mode=EXACT_COUNT, count=count - covered)
    )
    mappings.append(RequestMapping(container.name, resource, name))
    return request, mappings


def special_claim(
    pod: PodInput, backed: Mapping[str, str]
) -> tuple[ResourceClaim, tuple[RequestMapping, ...]] | None:
    """The extended-resource claim for the resources of ``backed`` (resource -> DeviceClass)
    the pod asks for, and its request mappings; None when it asks for none of them. The claim
    is named by its generateName until the apiserver names it."""
    containers = [*pod.init_containers, *pod.containers]
    inits = len(pod.init_containers)
    long_lived = [i for i, c in enumerate(containers) if i >= inits or c.restart_policy == "Always"]
    short_lived = [i for i in range(inits) if i not in long_lived]
    requests: list[DeviceRequest] = []
    mappings: list[RequestMapping] = []
    for resource in sorted(backed):
        device_class = backed[resource]
        lasting: list[DeviceRequest | None] = [None] * len(containers)
        lasting_mappings: list[RequestMapping] = []
        for i in long_lived:
            request, found = _request(i, containers[i], resource, device_class, [])
            lasting[i] = request
            lasting_mappings += found
        largest: DeviceRequest | None = None
        short_names: set[str] = set()
        short_mappings: list[RequestMapping] = []
        for i in short_lived:
            request, found = _request(i, containers[i], resource, device_class, lasting[i:])
            if request is not None and request.exactly is not None:
                short_names.add(request.name)
                if largest is None or (
                    largest.exactly is not None and largest.exactly.count < request.exactly.count
                ):
                    largest = request
            short_mappings += found
        if largest is not None and len(short_names) > 1:
            short_mappings = [
                RequestMapping(m.container, m.resource, largest.name)
                if m.request in short_names
                else m
                for m in short_mappings
            ]
        if largest is not None:
            requests.append(largest)
        requests += [r for r in lasting if r is not None]
        mappings += lasting_mappings + short_mappings
    if not requests:
        return None
    requests.sort(key=lambda r: r.name)
    claim = ResourceClaim(
        pod.namespace,
        generate_name(pod),
        requests=tuple(requests),
        extended=True,
        owner=pod.uid,
    )
    return claim, tuple(mappings)
