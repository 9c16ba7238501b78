"""An auditor of the live scheduler's invariants (issue 12), for chaos tests and benchmarks.

It reads what a running system shows, every pod from the apiserver (annotations
``topo-scheduler.io/devices`` and ``topo-scheduler.io/assignment``, node, phase, deletion) and
the store (per-GPU owners, pod records, gang records), and returns the violations of:

- ``gpu-held-twice``: a whole GPU held by two live pods (bound, not deleting, not finished);
- ``bad-assignment``: a live pod of ours bound without annotations that say which GPUs it has
  (missing, malformed, naming another node than the pod's, or fewer GPUs than it asks for);
- ``gang-partly-bound``: a gang (labels ``gpu-topology=<job>``, ``gpu-topology-replica=<N>``, or
  a Kueue or Koordinator gang: the sources that carry their size) fewer than its minimum of whose
  live members are bound while others wait;
- ``fits-but-pending``: a pending pod of ours (or a whole gang of ours, every member present)
  whose request fits the free GPUs of nodes that accept it;
- ``store-missing``: a bound pod of ours whose GPUs the store does not record as bound to it
  (its pod record, the owner of each of its GPUs, its gang's record);
- ``store-stale``: a store record for a pod that does not exist, or has finished; a GPU owner
  without the pod record that claims that GPU; a gang record none of whose members exist;
- ``store-disagrees``: a record that contradicts the apiserver (another node or other GPUs than
  the pod's annotations, ``bound`` for a pod that is not, a reservation with nothing in flight);
- ``device-held-twice``: a DRA device (driver, pool, device) in the allocations of two
  ResourceClaims each used by a bound pod that has not finished (a pod uses a claim it names, in
  ``spec.resourceClaims`` directly or through ``status.resourceClaimStatuses`` and
  ``status.extendedResourceClaimStatus``, or that is reserved for it);
- ``claim-stranded``: an allocated ResourceClaim of ours (used by a pod of ours) whose devices
  nobody runs with: reserved for no pod, or for one that does not exist, is not live, is not
  bound, or is bound to a node the allocation's ``nodeSelector`` does not reach;
- ``claim-unreserved``: a live bound pod of ours one of whose claims is not allocated or not
  reserved for it (the kubelet would not run it);
- ``snapshot-drift``: a replica's snapshot whose running sums of a node (cpu, memory and other
  requests, pod count, host ports, GPU holders: ``core/snapshot/nodesums.py``, read from its
  ``/debug/nodes``) differ from the same sums computed afresh from the LIST of every pod, ours
  and other schedulers' (a pod that left unseen and is still charged, say).

The first two and ``device-held-twice`` are safety rules: true at every moment, so a chaos test
fails if any round ever sees one (``SAFETY``). The others hold once the system has settled
(binds done, watches caught up, reconciles run): ``until_settled`` audits repeatedly until a
round finds nothing, keeping every safety violation any round saw.

What is "ours" is the pods whose ``spec.schedulerName`` is the given scheduler name; the nodes
are the ones given (a scenario's, or a benchmark's); pods are every pod of the cluster, so that
a store record is checked against the whole apiserver (the scheduler records every bound pod with
device annotations, whichever scheduler bound it). The arithmetic is the auditor's own, simpler
than the core's, and errs on the side of saying nothing: a node accepts a pod when it is not
cordoned, its labels match the pod's ``nodeSelector``, the pod tolerates its NoSchedule and
NoExecute taints and it offers the pod's GPU resource; its free GPUs are those of its inventory
(``topo-scheduler.io/gpus``, healthy devices) that no unfinished pod's annotation names, at most
its allocatable minus what unfinished pods there ask for. A gang fits when a greedy placement
(largest member first, onto the accepting node with the most free GPUs) places every member.
Shared-GPU requests and the device plugin's ``topo-scheduler.io/allocated`` are not audited.

The claims are one LIST read before the pods' (``collect``): two allocations holding one device
in that LIST held it together at that moment, whatever the pods did since, and the pods read
after only narrow the claims counted. Of a claim's results, admin access (it holds nothing)
and shares of a device that allows several allocations (``shareID``) are not counted; nor are
partitions of one device that overlap through shared counters (MIG profiles): each device name
is counted alone. A DRA-backed extended resource (a pod with ``extendedResourceClaimStatus``) is
held through the pod's special claim: its GPU count is not asked of its annotations.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from scheduler.core.formats import FormatError
from scheduler.core.formats import assignment as assignment_format
from scheduler.core.formats import devices as devices_format
from scheduler.core.formats import gpus as gpus_format
from scheduler.core.model import names
from scheduler.core.settings import CoreSettings
from scheduler.core.snapshot import nodesums
from scheduler.core.snapshot.nodesums import NodeSums
from scheduler.kube.codec import convert_pod
from scheduler.state.base import GangRecord, Owner, Record, Store

from .controlplane import ControlPlane

GPU_HELD_TWICE: Final = "gpu-held-twice"
BAD_ASSIGNMENT: Final = "bad-assignment"
GANG_PARTLY_BOUND: Final = "gang-partly-bound"
FITS_BUT_PENDING: Final = "fits-but-pending"
STORE_MISSING: Final = "store-missing"
STORE_STALE: Final = "store-stale"
STORE_DISAGREES: Final = "store-disagrees"
SNAPSHOT_DRIFT: Final = "snapshot-drift"
DEVICE_HELD_TWICE: Final = "device-held-twice"
CLAIM_STRANDED: Final = "claim-stranded"
CLAIM_UNRESERVED: Final = "claim-unreserved"

# True at every moment: one sighting is a failure, whatever later rounds see.
SAFETY: Final = frozenset({GPU_HELD_TWICE, BAD_ASSIGNMENT, DEVICE_HELD_TWICE})

CLAIMS_PATH: Final = "/apis/resource.k8s.io/v1/resourceclaims"

# The whole-GPU resource names of the default configuration.
DEFAULT_GPU_RESOURCES: Final = frozenset(CoreSettings().gpu_resources)

Pod = Mapping[str, Any]  # a pod as the apiserver's JSON


@dataclass(frozen=True, order=True)
class Violation:
    rule: str
    subject: str  # a pod (namespace/name), a GPU (node#index), a gang (namespace/job) or a UID
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.subject}: {self.detail}"


@dataclass
class View:
    """What the auditor reads: the apiserver's pods and nodes, and the store's records. A view
    without a store (``records`` None: the embedded in-memory store) skips the store rules."""

    scheduler_name: str
    pods: list[Pod]
    nodes: list[Pod]
    records: dict[str, Record] | None = None
    owners: dict[str, dict[int, Owner]] = field(default_factory=dict)
    gangs: dict[str, GangRecord] = field(default_factory=dict)
    # Replicas' snapshots (a name -> the sums of the view's nodes), for ``snapshot-drift``.
    snapshots: dict[str, dict[str, NodeSums]] = field(default_factory=dict)
    # Every ResourceClaim of the cluster, as the apiserver's JSON (none where DRA is not served).
    claims: list[Pod] = field(default_factory=list)


def audit(view: View, gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES) -> list[Violation]:
    """Every violation in ``view``, sorted by rule and subject."""
    resources = frozenset(gpu_resources)
    out: list[Violation] = []
    held = _held_gpus(view, resources, out)
    _check_gangs(view, out)
    _check_fit(view, resources, held, out)
    _check_claims(view, out)
    if view.records is not None:
        _check_store(view, out)
    if view.snapshots:
        _check_snapshots(view, resources, out)
    return sorted(set(out))


def _check_snapshots(view: View, resources: frozenset[str], out: list[Violation]) -> None:
    names = {n["metadata"]["name"] for n in view.nodes}
    settings = CoreSettings(gpu_resources=dict.fromkeys(sorted(resources), "nvidia"))
    bound = (convert_pod(dict(p)) for p in view.pods if node_of(p) in names)
    truth = nodesums.listed(bound, settings, names)
    for replica, sums in sorted(view.snapshots.items()):
        for name in sorted(names):
            drift = nodesums.differences(sums.get(name, nodesums.NodeSums()), truth[name])
            for line in drift:
                out.append(Violation(SNAPSHOT_DRIFT, f"{replica}:{name}", line))


# ---- pods -------------------------------------------------------------------------------------


def key_of(pod: Pod) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', 'default')}/{meta['name']}"


def uid_of(pod: Pod) -> str:
    return str(pod["metadata"].get("uid", ""))


def node_of(pod: Pod) -> str:
    return str(pod.get("spec", {}).get("nodeName") or "")


def finished(pod: Pod) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def live(pod: Pod) -> bool:
    """Not being deleted and not finished."""
    return not pod["metadata"].get("deletionTimestamp") and not finished(pod)


def ours(view: View, pod: Pod) -> bool:
    return bool(pod.get("spec", {}).get("schedulerName") == view.scheduler_name)


def annotations_of(pod: Pod) -> Mapping[str, str]:
    return pod["metadata"].get("annotations") or {}


def gang_of(pod: Pod) -> tuple[str, int] | None:
    """(namespace/name, minimum) of the pod's gang, from whichever source names it first (the
    core's order: ACK labels, a PodGroup, Kueue, Volcano, Koordinator); minimum 0 when it is
    unreadable or held by a PodGroup object (then the gang rules say nothing of it)."""
    labels = pod["metadata"].get("labels") or {}
    notes = annotations_of(pod)
    namespace = pod["metadata"].get("namespace", "default")
    for name, size in (
        (labels.get(names.GANG_LABEL), labels.get(names.GANG_REPLICA_LABEL)),
        (labels.get(names.POD_GROUP_LABEL), None),
        (labels.get(names.KUEUE_GROUP_LABEL), notes.get(names.KUEUE_TOTAL_ANNOTATION)),
        (notes.get(names.VOLCANO_GROUP_ANNOTATION), None),
        (notes.get(names.KOORD_GANG_NAME_ANNOTATION), notes.get(names.KOORD_GANG_MIN_ANNOTATION)),
    ):
        if name:
            try:
                minimum = int(size or "0")
            except ValueError:
                minimum = 0
            return f"{namespace}/{name}", minimum
    return None


def requests_of(pod: Pod, resources: frozenset[str]) -> dict[str, int]:
    """Whole GPUs per resource name the pod asks for, summed over its containers (limits, else
    requests)."""
    out: dict[str, int] = defaultdict(int)
    for c in pod.get("spec", {}).get("containers") or []:
        res = c.get("resources") or {}
        amounts = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        for name, value in amounts.items():
            if name in resources:
                try:
                    out[name] += int(str(value))
                except ValueError:
                    continue
    return {k: v for k, v in out.items() if v > 0}


def devices_of(pod: Pod) -> tuple[int, ...]:
    """The GPU indices the pod's devices annotation names (FormatError when malformed)."""
    return devices_format.decode(annotations_of(pod).get(names.DEVICES_ANNOTATION, ""))


# ---- the rules --------------------------------------------------------------------------------


def _held_gpus(
    view: View, resources: frozenset[str], out: list[Violation]
) -> dict[str, dict[int, str]]:
    """node -> GPU index -> the pod holding it, over every unfinished pod on the view's nodes
    (a pod being deleted still holds its GPUs); two live holders are a violation. Also checks
    that every live bound pod of ours says which GPUs it has."""
    scope = {n["metadata"]["name"] for n in view.nodes}
    held: dict[str, dict[int, str]] = defaultdict(dict)
    live_holder: dict[tuple[str, int], str] = {}
    for pod in view.pods:
        node = node_of(pod)
        if not node or finished(pod):
            continue
        key = key_of(pod)
        if ours(view, pod) and live(pod):
            problem = _assignment_problem(pod, node, resources)
            if problem:
                out.append(Violation(BAD_ASSIGNMENT, key, problem))
        if node not in scope:
            continue
        try:
            gpus = devices_of(pod)
        except FormatError:
            continue  # a foreign pod's malformed annotation; ours is reported above
        for gpu in gpus:
            held[node].setdefault(gpu, key)
            if not live(pod):
                continue
            other = live_holder.setdefault((node, gpu), key)
            if other != key:
                out.append(
                    Violation(GPU_HELD_TWICE, f"{node}#{gpu}", f"held by {other} and by {key}")
                )
    return held


def _assignment_problem(pod: Pod, node: str, resources: frozenset[str]) -> str:
    annotations = annotations_of(pod)
    # DRA-backed extended resources are held through the pod's special claim, not annotated.
    dra = bool(pod.get("status", {}).get("extendedResourceClaimStatus"))
    asked = 0 if dra else sum(requests_of(pod, resources).values())
    raw = annotations.get(names.DEVICES_ANNOTATION)
    if raw is None:
        return f"bound to {node} without annotation {names.DEVICES_ANNOTATION}" if asked else ""
    try:
        gpus = devices_of(pod)
        record = assignment_format.decode(annotations.get(names.ASSIGNMENT_ANNOTATION, ""))
    except FormatError as exc:
        return str(exc)
    if record.node != node:
        return f"bound to {node}, but its assignment names node {record.node!r}"
    if sorted(d.index for d in record.devices) != sorted(gpus):
        return f"devices {list(gpus)} but assignment devices {[d.index for d in record.devices]}"
    if len(set(gpus)) != len(gpus) or len(gpus) < asked:
        return f"asks for {asked} GPUs, annotated with {list(gpus)}"
    return ""


def _check_gangs(view: View, out: list[Violation]) -> None:
    members: dict[str, list[Pod]] = defaultdict(list)
    for pod in view.pods:
        membership = gang_of(pod)
        if membership is not None and ours(view, pod) and live(pod):
            members[membership[0]].append(pod)
    for gang, pods in sorted(members.items()):
        bound = sorted(key_of(p) for p in pods if node_of(p))
        waiting = sorted(key_of(p) for p in pods if not node_of(p))
        minimum = max((gang_of(p) or ("", 0))[1] for p in pods)
        # Members beyond the minimum (an elastic gang's surplus) may wait; the minimum may not.
        if bound and waiting and len(bound) < minimum:
            out.append(Violation(GANG_PARTLY_BOUND, gang, f"bound: {bound}; not bound: {waiting}"))


@dataclass
class _Node:
    name: str
    labels: Mapping[str, str]
    taints: list[Mapping[str, Any]]
    cordoned: bool
    free: dict[str, int]  # resource -> free GPUs for a pod asking for it


def _nodes(view: View, resources: frozenset[str], held: dict[str, dict[int, str]]) -> list[_Node]:
    asked: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod in view.pods:
        if node_of(pod) and not finished(pod):
            for name, n in requests_of(pod, resources).items():
                asked[node_of(pod)][name] += n
    out = []
    for node in view.nodes:
        meta = node["metadata"]
        name = meta["name"]
        try:
            inventory = gpus_format.decode(
                (meta.get("annotations") or {}).get(names.GPUS_ANNOTATION, "")
            )
            healthy = {d.index for d in inventory.devices if d.healthy}
        except FormatError:
            healthy = set()
        free_gpus = len(healthy - set(held.get(name, {})))
        allocatable = node.get("status", {}).get("allocatable") or {}
        free = {}
        for resource in resources:
            try:
                offered = int(str(allocatable.get(resource, "0")))
            except ValueError:
                offered = 0
            if offered > 0:
                free[resource] = max(0, min(free_gpus, offered - asked[name][resource]))
        spec = node.get("spec", {})
        out.append(
            _Node(
                name,
                meta.get("labels") or {},
                list(spec.get("taints") or []),
                bool(spec.get("unschedulable")),
                free,
            )
        )
    return out


def _tolerated(pod: Pod, taint: Mapping[str, Any]) -> bool:
    for t in pod.get("spec", {}).get("tolerations") or []:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _accepts(node: _Node, pod: Pod) -> bool:
    if node.cordoned:
        return False
    selector = pod.get("spec", {}).get("nodeSelector") or {}
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return False
    return all(
        _tolerated(pod, t) for t in node.taints if t.get("effect") in ("NoSchedule", "NoExecute")
    )


def _check_fit(
    view: View,
    resources: frozenset[str],
    held: dict[str, dict[int, str]],
    out: list[Violation],
) -> None:
    nodes = _nodes(view, resources, held)
    gangs: dict[str, list[Pod]] = defaultdict(list)
    for pod in view.pods:
        if not ours(view, pod) or not live(pod):
            continue
        membership = gang_of(pod)
        if membership is not None:
            gangs[membership[0]].append(pod)
            continue
        if node_of(pod) or pod.get("spec", {}).get("schedulingGates"):
            continue
        placed = _place([pod], nodes, resources)
        if placed:
            out.append(Violation(FITS_BUT_PENDING, key_of(pod), f"fits on {placed[0]}"))
    for gang, members in sorted(gangs.items()):
        replicas = max((gang_of(p) or ("", 0))[1] for p in members)
        if len(members) != replicas or any(node_of(p) for p in members):
            continue  # incomplete (it waits), or partly bound (the gang rule says so)
        if any(p.get("spec", {}).get("schedulingGates") for p in members):
            continue
        placed = _place(members, nodes, resources)
        if placed:
            out.append(
                Violation(FITS_BUT_PENDING, gang, f"{len(members)} members fit on {sorted(placed)}")
            )


def _place(pods: list[Pod], nodes: list[_Node], resources: frozenset[str]) -> list[str]:
    """A greedy placement of every pod (largest first, each onto the accepting node with the
    most GPUs left): the nodes used, one per pod, or [] when it fails (or a pod asks for no
    whole GPU, or for two kinds)."""
    wants: list[tuple[int, str, Pod]] = []
    for pod in pods:
        asked = requests_of(pod, resources)
        if len(asked) != 1:
            return []
        ((resource, n),) = asked.items()
        wants.append((n, resource, pod))
    left = {node.name: dict(node.free) for node in nodes}
    used = []
    for n, resource, pod in sorted(wants, key=lambda w: -w[0]):
        candidates = [
            node for node in nodes if _accepts(node, pod) and left[node.name].get(resource, 0) >= n
        ]
        if not candidates:
            return []
        best = max(candidates, key=lambda node: (left[node.name][resource], node.name))
        left[best.name][resource] -= n
        used.append(best.name)
    return used


# ---- DRA: ResourceClaims -----------------------------------------------------------------------


def claim_names_of(pod: Pod) -> list[str]:
    """The ResourceClaims (by name, in the pod's namespace) the pod uses: those it names, those
    the resource claim controller made from its templates, its special claim."""
    refs = pod.get("spec", {}).get("resourceClaims") or []
    out = [str(r["resourceClaimName"]) for r in refs if r.get("resourceClaimName")]
    status = pod.get("status", {})
    made = status.get("resourceClaimStatuses") or []
    out += [str(s["resourceClaimName"]) for s in made if s.get("resourceClaimName")]
    special = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    return out + ([str(special)] if special else [])


def _allocation(claim: Pod) -> Mapping[str, Any] | None:
    found = (claim.get("status") or {}).get("allocation")
    return found if isinstance(found, Mapping) else None


def _reserved(claim: Pod) -> list[str]:
    return [str(r.get("uid", "")) for r in (claim.get("status") or {}).get("reservedFor") or []]


def _held_devices(allocation: Mapping[str, Any]) -> set[str]:
    """The devices an allocation holds alone, as driver/pool/device: not admin access, not a
    share of a device that allows several allocations."""
    return {
        f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
        for r in (allocation.get("devices") or {}).get("results") or []
        if not r.get("adminAccess") and not r.get("shareID")
    }


def _expression_matches(values: Mapping[str, str], expression: Mapping[str, Any]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator", "")
    wanted = [str(v) for v in expression.get("values") or []]
    value = values.get(key)
    if operator == "In":
        return value in wanted
    if operator == "NotIn":
        return value not in wanted
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(wanted) == 1:
        try:
            left, right = int(value), int(wanted[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def _reaches(allocation: Mapping[str, Any], node: Pod) -> bool:
    """The allocation's ``nodeSelector`` (none: every node) selects the node: one of its terms,
    each of whose label expressions and ``metadata.name`` fields match."""
    selector = allocation.get("nodeSelector")
    if not selector:
        return True
    meta = node["metadata"]
    labels = meta.get("labels") or {}
    fields = {"metadata.name": meta["name"]}
    return any(
        all(_expression_matches(labels, e) for e in term.get("matchExpressions") or [])
        and all(_expression_matches(fields, e) for e in term.get("matchFields") or [])
        for term in selector.get("nodeSelectorTerms") or []
    )


def _check_claims(view: View, out: list[Violation]) -> None:
    if not view.claims:
        return
    by_uid = {uid_of(p): p for p in view.pods if uid_of(p)}
    nodes = {n["metadata"]["name"]: n for n in view.nodes}
    # claim namespace/name -> the pods using it by name
    users: dict[str, list[Pod]] = defaultdict(list)
    for pod in view.pods:
        for name in claim_names_of(pod):
            users[f"{pod['metadata'].get('namespace', 'default')}/{name}"].append(pod)
    claims = {key_of(c): c for c in view.claims}
    holder: dict[str, str] = {}  # device -> the first claim with a running pod holding it
    for key, claim in sorted(claims.items()):
        allocation = _allocation(claim)
        if allocation is None:
            continue
        pods = users.get(key, []) + [by_uid[u] for u in _reserved(claim) if u in by_uid]
        if any(node_of(p) and not finished(p) for p in pods):
            for device in sorted(_held_devices(allocation)):
                other = holder.setdefault(device, key)
                if other != key:
                    out.append(Violation(DEVICE_HELD_TWICE, device, f"in claims {other} and {key}"))
        if any(ours(view, p) for p in pods):
            problem = _stranded(claim, allocation, by_uid, nodes)
            if problem:
                out.append(Violation(CLAIM_STRANDED, key, problem))
    for pod in view.pods:
        if not ours(view, pod) or not live(pod) or not node_of(pod):
            continue
        namespace = pod["metadata"].get("namespace", "default")
        for name in claim_names_of(pod):
            found = claims.get(f"{namespace}/{name}")
            if found is None or _allocation(found) is None:
                out.append(Violation(CLAIM_UNRESERVED, key_of(pod), f"claim {name} not allocated"))
            elif uid_of(pod) not in _reserved(found):
                out.append(
                    Violation(CLAIM_UNRESERVED, key_of(pod), f"claim {name} not reserved for it")
                )


def _stranded(
    claim: Pod, allocation: Mapping[str, Any], by_uid: Mapping[str, Pod], nodes: Mapping[str, Pod]
) -> str:
    """Why an allocated claim's devices serve nobody ("" when every pod reserved runs with it).
    A node outside the view is taken to be reached."""
    reserved = _reserved(claim)
    if not reserved:
        return "allocated, reserved for no pod"
    for uid in reserved:
        pod = by_uid.get(uid)
        if pod is None or not live(pod):
            return f"reserved for pod UID {uid}, which " + (
                "does not exist" if pod is None else "is not live"
            )
        node = node_of(pod)
        if not node:
            return f"reserved for {key_of(pod)}, which is not bound"
        if node in nodes and not _reaches(allocation, nodes[node]):
            return f"reserved for {key_of(pod)}, bound to {node}, which the allocation misses"
    return ""


def _check_store(view: View, out: list[Violation]) -> None:
    records = view.records or {}
    by_uid = {uid_of(p): p for p in view.pods if uid_of(p)}
    scope = {n["metadata"]["name"] for n in view.nodes}
    bound_gangs: dict[str, list[str]] = defaultdict(list)
    partly: set[str] = set()
    # Every bound pod of ours: its record, its GPUs' owners, its gang's record.
    for pod in view.pods:
        node = node_of(pod)
        if not ours(view, pod) or not live(pod):
            continue
        membership = gang_of(pod)
        if membership is not None:
            if node:
                bound_gangs[membership[0]].append(uid_of(pod))
            else:
                partly.add(membership[0])
        if not node:
            continue
        try:
            gpus = devices_of(pod)
        except FormatError:
            continue  # reported as bad-assignment
        if not gpus:
            continue
        key, uid = key_of(pod), uid_of(pod)
        record = records.get(uid)
        if record is None:
            out.append(
                Violation(STORE_MISSING, key, f"bound to {node} GPUs {list(gpus)}, no record")
            )
            continue
        if record.state != "bound":
            out.append(Violation(STORE_DISAGREES, key, f"bound, but recorded {record.state}"))
        if record.claim.node != node or sorted(record.claim.devices) != sorted(gpus):
            out.append(
                Violation(
                    STORE_DISAGREES,
                    key,
                    f"bound to {node} GPUs {sorted(gpus)}, recorded on {record.claim.node} "
                    f"GPUs {sorted(record.claim.devices)}",
                )
            )
        owners = view.owners.get(node, {})
        for gpu in gpus:
            owner = owners.get(gpu)
            if owner is None or owner.uid != uid:
                who = "no owner" if owner is None else f"owner UID {owner.uid}"
                out.append(Violation(STORE_MISSING, key, f"GPU {gpu} on {node}: {who}"))
    for gang, uids in sorted(bound_gangs.items()):
        if gang in partly:
            continue
        record_g = view.gangs.get(gang)
        if record_g is None:
            out.append(Violation(STORE_MISSING, gang, f"bound gang of {len(uids)}, no record"))
        elif record_g.state != "bound" or sorted(record_g.members) != sorted(uids):
            out.append(
                Violation(
                    STORE_DISAGREES,
                    gang,
                    f"bound members {sorted(uids)}, recorded {record_g.state} "
                    f"{sorted(record_g.members)}",
                )
            )
    # Every record: a pod behind it that agrees.
    for uid, record in sorted(records.items()):
        found = by_uid.get(uid)
        subject = record.claim.pod or uid
        if found is None or finished(found):
            gone = "does not exist" if found is None else "has finished"
            out.append(Violation(STORE_STALE, subject, f"recorded {record.state}, the pod {gone}"))
        elif record.state == "bound" and node_of(found) != record.claim.node:
            where = node_of(found) or "no node"
            out.append(
                Violation(
                    STORE_DISAGREES, subject, f"recorded bound on {record.claim.node}, on {where}"
                )
            )
        elif record.state != "bound" and ours(view, found) and not node_of(found):
            out.append(
                Violation(
                    STORE_DISAGREES,
                    subject,
                    f"recorded {record.state} on {record.claim.node} with nothing in flight",
                )
            )
    for node in sorted(set(view.owners) & scope):
        for gpu, owner in sorted(view.owners[node].items()):
            claim = records.get(owner.uid)
            if claim is None or claim.claim.node != node or gpu not in claim.claim.devices:
                out.append(
                    Violation(
                        STORE_STALE,
                        f"{node}#{gpu}",
                        f"owner UID {owner.uid} has no record claiming this GPU",
                    )
                )
    for gang, record_g in sorted(view.gangs.items()):
        if not any(u in by_uid and not finished(by_uid[u]) for u in record_g.members):
            out.append(
                Violation(
                    STORE_STALE, gang, f"gang record {record_g.state}, none of its members exist"
                )
            )


# ---- reading a running system -----------------------------------------------------------------


async def collect(
    plane: ControlPlane,
    scheduler_name: str,
    node_labels: Mapping[str, str],
    store: Store | None = None,
    snapshots: Mapping[str, int] | None = None,
) -> View:
    """Read a view: the nodes carrying ``node_labels``, (with a store) the owners of their GPUs,
    the pod records and the gang records, then every pod of the cluster. These are several
    reads, not one snapshot: a round that falls in the middle of the scheduler's writes can see
    a disagreement that the next round does not (``until_settled`` waits for a round with
    none). The apiserver's pods are one LIST, so what the safety rules read is consistent.
    ``snapshots``: replicas (a name -> the port of their HTTP server on this machine) whose
    ``/debug/nodes`` is read too, before the LIST; so is every ResourceClaim (module doc)."""
    selector = urllib.parse.quote(",".join(f"{k}={v}" for k, v in sorted(node_labels.items())))
    node_list = await asyncio.to_thread(
        plane.request, "GET", f"/api/v1/nodes?labelSelector={selector}"
    )
    nodes = list(node_list.get("items", []))
    records: dict[str, Record] | None = None
    owners: dict[str, dict[int, Owner]] = {}
    gangs: dict[str, GangRecord] = {}
    if store is not None:
        for node in nodes:
            owners[node["metadata"]["name"]] = await store.owners(node["metadata"]["name"])
        records = await store.records()
        gangs = await store.gangs()
    names = {n["metadata"]["name"] for n in nodes}
    read: dict[str, dict[str, NodeSums]] = {}
    for replica, port in sorted((snapshots or {}).items()):
        sums = await asyncio.to_thread(_node_sums, port)
        read[replica] = {n: s for n, s in sums.items() if n in names}
    claims = await asyncio.to_thread(_claims, plane)
    pods = await asyncio.to_thread(plane.request, "GET", "/api/v1/pods")
    items = list(pods.get("items", []))
    return View(scheduler_name, items, nodes, records, owners, gangs, read, claims)


def _claims(plane: ControlPlane) -> list[Pod]:
    """Every ResourceClaim, or none where the apiserver does not serve DRA."""
    try:
        listed = plane.request("GET", CLAIMS_PATH)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise
    return list(listed.get("items", []))


def _node_sums(port: int) -> dict[str, NodeSums]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/nodes", timeout=10) as answer:
        return msgspec.json.decode(answer.read(), type=dict[str, NodeSums])


@dataclass
class Settled:
    """What ``until_settled`` saw: the last round's violations (empty when it settled), every
    safety violation of any round, how many rounds and how long, and every violation any round
    saw (``seen``: those that healed show how the system got there)."""

    violations: list[Violation]
    safety: list[Violation]
    rounds: int
    seconds: float
    seen: list[Violation] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.violations and not self.safety

    def report(self) -> str:
        lines = [f"after {self.rounds} audits in {self.seconds:.1f} s:"]
        lines += [f"  ever seen: {v}" for v in self.safety]
        lines += [f"  still: {v}" for v in self.violations]
        return "\n".join(lines)


async def until_settled(
    read: Callable[[], Awaitable[View]],
    timeout_s: float = 45.0,
    interval_s: float = 0.5,
    gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES,
) -> Settled:
    """Audit a view from ``read()`` until one has no violation, at most ``timeout_s``. A read
    that fails (the apiserver or the store restarting) counts as a round with no answer."""
    started = time.monotonic()
    seen: set[Violation] = set()
    violations: list[Violation] = [Violation("unread", "-", "no view read yet")]
    rounds = 0
    while True:
        rounds += 1
        try:
            violations = audit(await read(), gpu_resources)
        except Exception as exc:  # the system is down for a moment: try again
            violations = [Violation("unread", "-", repr(exc))]
        seen.update(violations)
        elapsed = time.monotonic() - started
        if not violations or elapsed >= timeout_s:
            safety = sorted(v for v in seen if v.rule in SAFETY)
            return Settled(violations, safety, rounds, elapsed, sorted(seen))
        await asyncio.sleep(interval_s)
