"""What a bound pod is charged on its node while it is resized in place (kube-scheduler v1.37).

A pod's spec may ask for more or less than its kubelet has given it: an in-place resize (GA since
v1.35) changes the spec first, the kubelet allocates (``allocatedResources``) and then actuates
(``resources``, read back from the cgroups). Until all three agree, the node is charged the
largest, so that neither a shrink not yet done nor a growth already done is given away.
v1.37's rule (component-helpers' ``AggregateContainerRequests`` with status resources):

    max( Σspec, Σactuated, Σallocated )   per resource

where each Σ runs the sidecar/init formula of ``accounting.aggregate`` over all containers, plain
init containers included, and per container

- spec: its requests;
- allocated: ``allocatedResources``, else its spec;
- actuated: ``resources.requests``, else ``allocatedResources``, else its spec.

When the pod-level status is reported (``status.allocatedResources`` and
``status.resources.requests``, InPlacePodLevelResourcesVerticalScaling) those two are Σallocated
and Σactuated as they are. A pod-level ``spec.resources`` then counts as the largest of itself and
the pod-level status lists. A resize the kubelet found Infeasible (condition PodResizePending,
reason Infeasible) will never happen: the spec term is dropped, and so are the fallbacks to it.
Overhead is added last, as for a pending pod. A pod the kubelet reported nothing for is charged
its spec (``accounting.pod_requests``). Quantities the apiserver let through but that do not parse
count as 0, as elsewhere for bound pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..model.objects import ContainerInput, ContainerStatusInput, PodInput
from .accounting import (
    Amounts,
    ContainerValues,
    RequestsMemo,
    aggregate,
    apply_pod_level,
    finish,
    pod_requests,
    spec_values,
)
from .accounting import parse_values as parse


def bound_requests(
    pod: PodInput, skip: Iterable[str] = (), memo: RequestsMemo | None = None
) -> Amounts:
    """What ``pod``, bound to a node, is charged there of every checked resource but ``skip``
    (``memo``: the caller's answers by spec, for a pod the kubelet reported nothing for)."""
    status = pod.resize
    if status is None:
        return pod_requests(pod, skip, memo=memo)
    skip = tuple(skip)
    infeasible = status.infeasible
    by_name = {c.name: c for c in status.containers}

    def allocated(c: ContainerInput) -> tuple[str, Mapping[str, str]] | None:
        cs = by_name.get(c.name)
        if cs is not None and cs.allocated is not None:
            return "allocatedResources", cs.allocated
        return None if infeasible else spec_values(c)

    def actuated(c: ContainerInput) -> tuple[str, Mapping[str, str]] | None:
        cs: ContainerStatusInput | None = by_name.get(c.name)
        if cs is not None and cs.actuated is not None:
            return "resources.requests", cs.actuated
        return allocated(c)

    terms: list[dict[str, int]] = []
    if not infeasible:
        terms.append(_sum(pod, spec_values, skip))
    if status.pod_allocated is not None and status.pod_actuated is not None:
        terms.append(parse(pod, "status.allocatedResources", status.pod_allocated, skip))
        terms.append(parse(pod, "status.resources.requests", status.pod_actuated, skip))
    else:
        terms.append(_sum(pod, allocated, skip))
        terms.append(_sum(pod, actuated, skip))
    total = _largest(terms)
    if pod.level_requests:
        level = [] if infeasible else [parse(pod, "spec.resources", pod.level_requests, skip)]
        if status.pod_actuated is not None:
            level.append(parse(pod, "status.resources", status.pod_actuated, skip))
            if status.pod_allocated is not None:
                level.append(parse(pod, "status.allocatedResources", status.pod_allocated, skip))
        apply_pod_level(total, _largest(level, keys=() if infeasible else pod.level_requests))
    return finish(pod, total, False, skip)


def _sum(pod: PodInput, values: ContainerValues, skip: tuple[str, ...]) -> dict[str, int]:
    return aggregate(pod, values, False, skip)


def _largest(terms: list[dict[str, int]], keys: Iterable[str] = ()) -> dict[str, int]:
    """Per resource, the largest of ``terms``; ``keys`` are kept even where every term is 0
    (a pod-level 0 still replaces the containers' sum)."""
    out: dict[str, int] = dict.fromkeys(keys, 0)
    for term in terms:
        for resource, n in term.items():
            if n > out.get(resource, 0):
                out[resource] = n
    return out
