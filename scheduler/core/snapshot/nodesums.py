"""What each node holds, summed the two ways the drift auditor compares (issue 20).

The snapshot keeps running sums per node (``NodeState``: the pods' cpu, memory and other
requests, the pod count, the host ports in use, the GPUs held), charged and uncharged as watch
events come. A sum that is never uncharged (a pod that left unseen) is drift: the scheduler then
refuses pods that would fit, or preempts for pods that are gone. ``held`` reads the snapshot's
sums; ``listed`` computes the same sums afresh from a LIST of every pod (ours or any other
scheduler's), with the same functions the snapshot charges them with (``pod_requests``,
``host_ports``), so that the two differ only when the running sums drifted.

GPUs are compared as whole GPU indices per pod where they are named (our annotation
``topo-scheduler.io/devices``; the snapshot's holding), and as a count per pod where they are
not (a pod of another scheduler asking for GPUs: the snapshot guesses which). Shared GPUs are
not compared.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from msgspec import Struct, field

from ..formats import FormatError
from ..formats import devices as devices_format
from ..model.names import DEVICES_ANNOTATION
from ..model.objects import HostPort, PodInput
from ..resources.accounting import pod_requests
from ..resources.ports import host_ports
from ..resources.requests import gpu_resource_names, kubelet_request
from ..settings import CoreSettings
from .cluster import ClusterState
from .holdings import bits


class NodeSums(Struct, frozen=True, kw_only=True):
    pods: int = 0
    # Requests in kube-scheduler's units (cpu millicores, memory bytes), GPU resources left out.
    requested: dict[str, int] = field(default_factory=dict)
    ports: tuple[str, ...] = ()  # "TCP/0.0.0.0:8080", one per use, sorted
    gpus: dict[str, tuple[int, ...]] = field(default_factory=dict)  # pod -> GPUs it is known to
    guessed: dict[str, int] = field(default_factory=dict)  # pod -> GPUs, which not known


def held(state: ClusterState, names: Collection[str] | None = None) -> dict[str, NodeSums]:
    """The snapshot's running sums of the nodes ``names`` (None: every node)."""
    out = {}
    for name in sorted(state.nodes if names is None else set(names) & state.nodes.keys()):
        node = state.nodes[name]
        ports = [
            f"{protocol}/{ip}:{port}"
            for (protocol, port), ips in node.ports.items()
            for ip, n in ips.items()
            for _ in range(n)
        ]
        gpus, guessed = {}, {}
        for key in sorted(node.pods):
            holding = state.holdings[key]
            if holding.guessed:
                guessed[key] = holding.whole.bit_count()
            elif holding.whole:
                gpus[key] = tuple(bits(holding.whole))
        out[name] = NodeSums(
            pods=node.pod_count,
            requested=dict(sorted(node.requested.items())),
            ports=tuple(sorted(ports)),
            gpus=gpus,
            guessed=guessed,
        )
    return out


def listed(
    pods: Iterable[PodInput], settings: CoreSettings, names: Collection[str]
) -> dict[str, NodeSums]:
    """The same sums computed from ``pods`` (a LIST): every pod bound to one of ``names`` and
    not finished counts, deleting or not, as the bound pods' watch counts it."""
    skip = gpu_resource_names(settings)
    count = dict.fromkeys(names, 0)
    requested: dict[str, dict[str, int]] = {n: {} for n in names}
    ports: dict[str, list[str]] = {n: [] for n in names}
    gpus: dict[str, dict[str, tuple[int, ...]]] = {n: {} for n in names}
    guessed: dict[str, dict[str, int]] = {n: {} for n in names}
    for pod in pods:
        node = pod.node_name
        if node not in count or pod.finished:
            continue
        count[node] += 1
        sums = requested[node]
        for resource, n in pod_requests(pod, skip):
            sums[resource] = sums.get(resource, 0) + n
        ports[node].extend(_port(p) for p in host_ports(pod))
        raw = pod.annotations.get(DEVICES_ANNOTATION, "").strip()
        try:
            named = devices_format.decode(raw) if raw else ()
        except FormatError:
            named = ()
        if named:
            gpus[node][pod.key] = tuple(sorted(named))
        elif not raw and (whole := sum(n for _, n in kubelet_request(pod, settings))):
            guessed[node][pod.key] = whole
    return {
        n: NodeSums(
            pods=count[n],
            requested={r: v for r, v in sorted(requested[n].items()) if v},
            ports=tuple(sorted(ports[n])),
            gpus=dict(sorted(gpus[n].items())),
            guessed=dict(sorted(guessed[n].items())),
        )
        for n in sorted(names)
    }


def differences(snapshot: NodeSums, truth: NodeSums) -> list[str]:
    """What ``snapshot`` says that ``truth`` does not, one line per field."""
    out = []
    if snapshot.pods != truth.pods:
        out.append(f"{snapshot.pods} pods, listed {truth.pods}")
    if snapshot.requested != truth.requested:
        out.append(f"requested {snapshot.requested}, listed {truth.requested}")
    if snapshot.ports != truth.ports:
        out.append(f"ports {list(snapshot.ports)}, listed {list(truth.ports)}")
    if snapshot.gpus != truth.gpus:
        out.append(f"GPU holders {snapshot.gpus}, listed {truth.gpus}")
    if snapshot.guessed != truth.guessed:
        out.append(f"GPUs of other schedulers' pods {snapshot.guessed}, listed {truth.guessed}")
    return out


def _port(p: HostPort) -> str:
    return f"{p.protocol}/{p.host_ip}:{p.port}"
