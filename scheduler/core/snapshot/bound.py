"""What a bound pod holds, read from its annotations (ours, or the device plugin's report), or
guessed for a pod another scheduler bound: the holdings ``ClusterState.add_bound_pod`` charges."""

from __future__ import annotations

import msgspec

from ..formats import allocated as allocated_format
from ..formats import assignment as assignment_format
from ..formats import devices as devices_format
from ..model.decisions import Share
from ..model.names import ALLOCATED_ANNOTATION, ASSIGNMENT_ANNOTATION, DEVICES_ANNOTATION
from ..model.objects import PodInput
from ..resources.requests import kubelet_request
from ..settings import CoreSettings
from .holdings import Holding
from .memos import Memos
from .nodes import NodeState


def annotated_holding(
    pod: PodInput,
    gang_key: str | None,
    replicas: int,
    settings: CoreSettings,
    previous: Holding | None,
    memos: Memos,
) -> Holding | None:
    """What the pod's assignment and devices annotations say it holds (None: no GPUs); a pod
    without them is ``unannotated`` (``previous``: what it is held as now). A pod being deleted
    is held ``terminating`` (holdings.py). Raises ValueError for a malformed annotation."""
    raw_assignment = pod.annotations.get(ASSIGNMENT_ANNOTATION)
    raw_devices = pod.annotations.get(DEVICES_ANNOTATION)
    shares: tuple[Share, ...] = ()
    if raw_assignment:
        shares = tuple(assignment_format.decode(raw_assignment).shares)
    whole = 0
    if raw_devices is not None and raw_devices.strip():
        whole = devices_format.mask(devices_format.decode(raw_devices))
    elif not shares:
        return unannotated(pod, gang_key, replicas, settings, previous, memos)
    resources = kubelet_request(pod, settings, memos.quantities)
    return Holding(
        pod.key,
        pod.node_name,
        whole,
        shares,
        gang_key,
        replicas,
        pod.uid,
        resources,
        terminating=pod.deleting,
        shown=True,
    )


def allocated_mask(pod: PodInput, state: NodeState | None) -> int | None:
    """The GPUs the node's device plugin reports the pod's containers really got, as a mask
    (None when it has not reported, or the node's inventory is not known yet: then the
    assignment stands until the next event for this pod)."""
    raw = pod.annotations.get(ALLOCATED_ANNOTATION)
    if not raw or state is None or state.inventory is None:
        return None
    record = allocated_format.decode(raw)
    by_uuid = {d.uuid: d.index for d in state.inventory.devices}
    mask = 0
    for pos, container in enumerate(record.containers):
        for uuid in container.uuids:
            if uuid not in by_uuid:
                raise ValueError(
                    f"annotation {ALLOCATED_ANNOTATION}: containers[{pos}].uuids: "
                    f"{uuid!r} is not a GPU of node {pod.node_name}"
                )
            mask |= 1 << by_uuid[uuid]
    return mask


def unannotated(
    pod: PodInput,
    gang: str | None,
    replicas: int,
    settings: CoreSettings,
    previous: Holding | None,
    memos: Memos,
) -> Holding | None:
    """A bound pod with GPUs but none of our annotations (bound by another scheduler).

    What the kubelet admitted it against is real whatever it looks like to us (a request
    parse_request refuses, a node or inventory not known yet), so it is charged in full to
    the node's allocatable. Which GPUs the node gave it is not known: its mask is guessed
    (rule 1 over the free GPUs, ``guess``, in ``hold`` and again whenever the node changes), so
    the count stays right, which is what keeps us from over-committing the node. A pod already
    held keeps its guess while that still fits.
    """
    resources = kubelet_request(pod, settings, memos.quantities)
    if not resources:
        return None
    whole = 0
    if previous is not None and previous.guessed and previous.node == pod.node_name:
        whole = previous.whole
    return Holding(
        pod.key,
        pod.node_name,
        whole,
        (),
        gang,
        replicas,
        pod.uid,
        resources,
        guessed=True,
        terminating=pod.deleting,
        shown=True,
    )


def guess(state: NodeState, holding: Holding, settings: CoreSettings) -> Holding:
    """A guessed holding's mask on ``state`` (charged with everything else on it): its own
    while that still fits, else rule 1's best set of its GPUs of the node's vendor among
    the free ones (as many as are free, if fewer: each is in use by someone)."""
    inv = state.inventory
    whole = 0
    if inv is not None:
        need = gpus_needed(state, holding, settings)
        devices = 0
        for d in inv.devices:
            devices |= 1 << d.index
        taken = state.whole | state.shared_mask
        mine = holding.whole
        if mine.bit_count() == need and not mine & ~devices and not mine & taken:
            whole = mine
        else:
            free = state.free_mask
            k = min(need, free.bit_count())
            choice = inv.topology.best_set(free, k) if k else None
            whole = choice.mask if choice is not None else 0
    if whole == holding.whole:
        return holding
    return msgspec.structs.replace(holding, whole=whole)


def gpus_needed(state: NodeState, holding: Holding, settings: CoreSettings) -> int:
    """How many of the node's GPUs a guessed holding asks for (of the node's vendor)."""
    if state.inventory is None:
        return 0
    vendor, gpu_resources = state.inventory.vendor, settings.gpu_resources
    return sum(n for r, n in holding.resources if gpu_resources.get(r) == vendor)


def short(state: NodeState, holding: Holding, settings: CoreSettings) -> bool:
    """A guessed holding with fewer GPUs than it asks for: when it was guessed, others held
    the rest of the node's (a transient over-commit: another scheduler's pod bound beside
    one we assumed, or an etcd restore bringing a pod back). The kubelet admitted it all the
    same, so it uses GPUs the mask leaves out: the first ones freed (``ClusterState.release``)."""
    return holding.guessed and holding.whole.bit_count() < gpus_needed(state, holding, settings)
