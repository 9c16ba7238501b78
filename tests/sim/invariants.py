"""What must hold, read from the apiserver's truth (and, once the world is quiet, each replica's
snapshot). Each check returns its violations as lines of text (empty: it holds).

After every step:
- ``double_gpus``: no whole GPU held by two pods the apiserver shows bound and not finished
  (terminating pods still hold theirs: the kubelet runs them until they end);
- ``shared_gpus``: no card shared beyond its capacity by such pods, nor both held whole and
  shared;
- ``own_refusals``: no unit refused by the store for a GPU one of its own pods holds;
- ``fencing``: at most one replica's decisions reach the apiserver per epoch (issue 30): once
  a Binding of a later term has landed, one of an earlier term may land only if it was sent
  under the binder's fencing rule (issue 12 #3; ``fencing`` says why a late commit is allowed).

Once the world is quiet (no fault, every stream caught up, time passed: ``Machine.quiesce``):
- ``partial_gangs``: no gang generation the world left alone has fewer than its minimum bound;
- ``drift``: each replica's per-node sums equal those of a fresh LIST (the issue-20 auditor's
  rule, core/snapshot/nodesums.py);
- ``stale_reservations``: no ResourceClaim reserved for a pending pod (Unreserve);
- ``store_records``: the leader's store agrees with the apiserver (the issue-20 auditor's store
  rules, scheduler/testing/audit.py, for pods' records and GPU owners);
- ``liveness``: every pending pod of ours has a reason written (PodScheduled=False), and no
  pending single pod fits a node whose GPUs the apiserver shows free (a shared card is not
  free), nor a pending share pod cards whose shares leave it room.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import msgspec

from scheduler.core.formats import assignment as assignment_format
from scheduler.core.formats import devices as devices_format
from scheduler.core.formats import gpus as gpus_format
from scheduler.core.model.decisions import Share
from scheduler.core.model.names import (
    ASSIGNMENT_ANNOTATION,
    CORES_PER_CARD,
    DEVICES_ANNOTATION,
    GPUS_ANNOTATION,
)
from scheduler.core.model.objects import PodInput
from scheduler.core.resources.requests import SharedRequest, parse_request
from scheduler.core.settings import CoreSettings
from scheduler.core.snapshot import nodesums
from scheduler.state.base import Claim, Owner, Record

from .world import NAME, Landed, SimApiserver, SimReplica


def live_bound(pods: Iterable[PodInput]) -> list[PodInput]:
    return [p for p in pods if p.node_name and not p.finished]


def gpus_of(pod: PodInput) -> tuple[int, ...]:
    return devices_format.decode(pod.annotations.get(DEVICES_ANNOTATION, ""))


def double_gpus(api: SimApiserver) -> list[str]:
    holders: dict[tuple[str, int], list[str]] = defaultdict(list)
    for pod in live_bound(api.pods.values()):
        for gpu in gpus_of(pod):
            holders[pod.node_name, gpu].append(pod.name)
    return [
        f"GPU {node}/{gpu} held by {' and '.join(sorted(pods))}"
        for (node, gpu), pods in sorted(holders.items())
        if len(pods) > 1
    ]


def shares_of(pod: PodInput) -> tuple[Share, ...]:
    """The shares of cards the pod's assignment annotation says it holds."""
    raw = pod.annotations.get(ASSIGNMENT_ANNOTATION, "")
    return tuple(assignment_format.decode(raw).shares) if raw else ()


def card_capacity(api: SimApiserver) -> dict[tuple[str, int], tuple[int, int]]:
    """(node, card) -> (memory MiB, sGPU slots) of every card, read from the nodes' inventory
    annotations as the scheduler reads them (core: ``CORES_PER_CARD`` percent each)."""
    out = {}
    for node in api.nodes:
        record = gpus_format.decode(node.annotations[GPUS_ANNOTATION])
        for device in record.devices:
            out[node.name, device.index] = (device.memory_mi_b, record.sgpu_per_card)
    return out


def shared_gpus(api: SimApiserver) -> list[str]:
    """No card shared beyond its capacity (core percent, memory, sGPU slots) by pods the
    apiserver shows bound and not finished, nor both held whole by one of them and shared by
    another: the share half of issue 30's first invariant, read from the pods' assignment
    annotations (the shares the scheduler wrote on each Binding) as ``double_gpus`` reads the
    whole GPUs from the devices annotation. QoS is not checked: the world's shares are
    Koordinator's, which carry none."""
    capacity = card_capacity(api)
    whole: dict[tuple[str, int], list[str]] = defaultdict(list)
    shared: dict[tuple[str, int], list[tuple[str, Share]]] = defaultdict(list)
    for pod in live_bound(api.pods.values()):
        for gpu in gpus_of(pod):
            whole[pod.node_name, gpu].append(pod.name)
        for share in shares_of(pod):
            shared[pod.node_name, share.index].append((pod.name, share))
    out = []
    for (node, gpu), users in sorted(shared.items()):
        names = " and ".join(sorted(name for name, _ in users))
        if whole.get((node, gpu)):
            held = " and ".join(sorted(whole[node, gpu]))
            out.append(f"GPU {node}/{gpu} held whole by {held} and shared by {names}")
        memory, slots = capacity.get((node, gpu), (0, 0))
        core = sum(s.core for _, s in users)
        used_memory = sum(s.memory_mib for _, s in users)
        sgpu = sum(s.sgpu for _, s in users)
        if core > CORES_PER_CARD or used_memory > memory or sgpu > slots:
            each = ", ".join(
                f"{name} {s.core}% {s.memory_mib} MiB"
                for name, s in sorted(users, key=lambda u: u[0])
            )
            out.append(
                f"GPU {node}/{gpu} shared beyond its capacity ({CORES_PER_CARD}%, {memory} MiB, "
                f"{slots} sGPU): {each}"
            )
    return out


def fencing(landed: list[Landed]) -> list[str]:
    """A Binding of an earlier term that lands after a later term's is a violation unless it
    was sent under the fencing rule by the newest term's leader (no later leader elected yet,
    more lease left than the request's timeout). Such a Binding was decided and sent inside its
    sender's term, while no other replica led: one replica's decisions in one epoch. That it
    commits later (an apiserver or etcd slower than the client's timeout, its client killed)
    no client can prevent: a Binding carries no fencing token. The binder's answer is to hold
    the pod unsettled (BIND_UNKNOWN, inherited by the next leader) until something settles it,
    so the late commit gives nothing twice, which ``double_gpus`` checks (seed 41: r1's Binding
    of j1-0 committed 20 s after r1's SIGKILL, after r2's first Binding; r2 held j1-0's GPU
    meanwhile). A Binding sent once a later leader was elected is two replicas deciding at once
    (issue 30 #4, a FLUSHALL without the wait: issue 12 #3); one sent with less lease left than
    its timeout is still awaited by its client when the lease lapses and the next leader is
    elected, not yet held unsettled (issue 12 #3)."""
    out = []
    latest: Landed | None = None
    for bind in landed:
        if latest is not None and 0 <= bind.term < latest.term and not bind.fenced:
            out.append(
                f"{bind.key} bound by {bind.holder} (epoch {bind.epoch}), sent after a later "
                f"leader's election or with less lease left than its timeout, after "
                f"{latest.key} was bound by {latest.holder} (epoch {latest.epoch}), a later leader"
            )
        if latest is None or bind.term > latest.term:
            latest = bind
    return out


def own_refusals(refused: list[tuple[list[Claim], str]]) -> list[str]:
    """No unit refused by the store for a GPU one of its own pods holds (``refused``: each unit
    a store refused, with the reason it gave, which names the holder's UID). The store's
    contract (state/base.py ``reserve``): a pod of the same call may own it, as its new claim
    replaces its earlier one. A unit refused over its own holdings is a gang decided afresh
    (its members RELOADED after a failover or handover) that swaps its members' GPUs: the
    refusal asks for a reconcile, which frees the members' reservations, and a pod or gang
    waiting for GPUs may take them before the gang's next attempt, leaving it below its
    minimum with members bound (the e2e chaos failure of the SIGKILL gang swap: job11
    partly bound). The gap between the two is one turn of the scheduler, which the
    simulation's schedule does not split, so the refusal itself is what is checked."""
    out = []
    for unit, why in refused:
        mine = {claim.uid for claim in unit}
        owner = why.rpartition("pod UID ")[2]
        if "pod UID " in why and owner in mine:
            pods = ", ".join(sorted(claim.pod for claim in unit))
            out.append(f"the store refused {pods} a GPU of its own unit: {why}")
    return out


def table_gaps(replica: SimReplica) -> list[str]:
    """No event met a stage the pod book's table has no cell for (PodBook.handle logs and
    counts it, and does nothing): every pair a run reaches has a transition someone decided
    on, not a silent drop."""
    return [
        f"{replica.name}'s pod book has no transition for {event.value} in stage {stage.value}"
        f" ({count} times)"
        for (stage, event), count in sorted(
            replica.s.book.unexpected.items(), key=lambda item: (item[0][0].value, item[0][1].value)
        )
    ]


def partial_gangs(api: SimApiserver, minimums: dict[str, int], disturbed: set[str]) -> list[str]:
    """``minimums``: each gang generation's minimum (a generation: the pods created together,
    named ``<generation>-<i>``); ``disturbed``: generations a member of which the world deleted
    or finished (they may legitimately be below their minimum)."""
    bound: dict[str, int] = defaultdict(int)
    for pod in live_bound(api.pods.values()):
        generation = pod.name.rpartition("-")[0]
        if generation in minimums and not pod.deleting:
            bound[generation] += 1
    return [
        f"gang {g} has {bound[g]} of its minimum {m} bound"
        for g, m in sorted(minimums.items())
        if g not in disturbed and 0 < bound[g] < m
    ]


def drift(api: SimApiserver, replica: SimReplica) -> list[str]:
    names = [n.name for n in api.nodes]
    truth = nodesums.listed(live_bound(api.pods.values()), CoreSettings(), names)
    held = without_nominations(nodesums.held(replica.s.state, names), replica)
    out = []
    for name in names:
        for line in nodesums.differences(held.get(name, nodesums.NodeSums()), truth[name]):
            out.append(f"{replica.name}'s snapshot of {name}: {line}")
    return out


def without_nominations(
    held: dict[str, nodesums.NodeSums], replica: SimReplica
) -> dict[str, nodesums.NodeSums]:
    """The snapshot's sums less what it holds for preemptors waiting for their victims: a
    nomination is charged to its node as one pod with its requests (``ClusterState.nominate``,
    as kube-scheduler adds nominated pods when it filters), which no LIST shows. Left in, every
    high-priority pod waiting for its victims read as drift (create_high)."""
    out = dict(held)
    for nomination in replica.s.state.nominations.values():
        sums = out.get(nomination.node)
        if sums is None:
            continue
        requested = dict(sums.requested)
        for resource, n in nomination.requests:
            left = requested.get(resource, 0) - n
            if left:
                requested[resource] = left
            else:
                requested.pop(resource, None)
        out[nomination.node] = msgspec.structs.replace(
            sums, pods=sums.pods - 1, requested=requested
        )
    return out


def liveness(api: SimApiserver, gangs: set[str]) -> list[str]:
    # A card shared is not free for a whole-GPU pod; what its shares leave, a share can use.
    whole: set[tuple[str, int]] = set()
    used: dict[tuple[str, int], tuple[int, int]] = {}  # (node, card) -> core, memory shared
    for pod in live_bound(api.pods.values()):
        whole.update((pod.node_name, gpu) for gpu in gpus_of(pod))
        for share in shares_of(pod):
            core, memory = used.get((pod.node_name, share.index), (0, 0))
            used[pod.node_name, share.index] = (core + share.core, memory + share.memory_mib)
    free = dict(api.gpus)
    for node, _ in whole | used.keys():
        if node in free:
            free[node] -= 1
    # Preemptors waiting for their victims (status.nominatedNodeName): their GPUs are held for
    # them against every pod of their priority or lower (counted whole, though some may still
    # be their victims': the check errs on the side of silence).
    nominees = [
        p
        for p in api.pods.values()
        if p.nominated_node and not p.node_name and not p.deleting and not p.finished
    ]
    out = []
    for key, pod in sorted(api.pods.items()):
        if pod.scheduler_name != NAME or pod.node_name or pod.deleting or pod.finished:
            continue
        left = dict(free)
        for n in nominees:
            if n.key != key and n.priority >= pod.priority and n.nominated_node in left:
                left[n.nominated_node] -= requested_gpus(n)
        most = max(left.values(), default=0)
        if pod.shown_reason is None:
            out.append(f"{pod.name} is pending with no reason written")
        gang = pod.name.rpartition("-")[0] in gangs
        shared = parse_request(pod, CoreSettings()).shared
        if shared is not None:
            crowded = {n.nominated_node for n in nominees if n.key != key}
            roomy = _share_room(api, shared, whole, used, crowded)
            if roomy:
                out.append(f"{pod.name} is pending though {roomy} has room for its share")
        elif not gang and requested_gpus(pod) <= most:
            out.append(f"{pod.name} is pending though a node has {most} GPUs free")
    return out


def _share_room(
    api: SimApiserver,
    shared: SharedRequest,
    whole: set[tuple[str, int]],
    used: dict[tuple[str, int], tuple[int, int]],
    crowded: set[str],
) -> str:
    """The first node with ``shared.cards`` cards not held whole whose shares leave room for
    ``shared`` ("": none). Nodes a preemptor is nominated for are left out (which of their
    cards it is to get is not shown: the check errs on the side of silence)."""
    capacity = card_capacity(api)
    for node in sorted({n for n, _ in capacity} - crowded):
        fits = [
            card
            for (n, card), (memory, _) in capacity.items()
            if n == node
            and (n, card) not in whole
            and used.get((n, card), (0, 0))[0] + shared.core <= CORES_PER_CARD
            and used.get((n, card), (0, 0))[1] + shared.memory_mib <= memory
        ]
        if len(fits) >= shared.cards:
            return node
    return ""


def stale_reservations(api: SimApiserver) -> list[str]:
    """A ResourceClaim reserved for a pod that exists, is pending and has a reason written (no
    Binding of it in flight once the world is quiet): kube-scheduler's Unreserve removes the
    pod from ``reservedFor`` when its Binding is refused or abandoned (issue 30, 1). A pod that
    no longer exists is the resource claim controller's to remove, which is not modelled."""
    out = []
    for key, claim in sorted(api.claims.items()):
        for uid in claim.reserved_for:
            pod = next((p for p in api.pods.values() if p.uid == uid), None)
            if pod is None or pod.node_name or pod.deleting:
                continue
            if pod.shown_reason is not None:
                out.append(f"{key} is reserved for {pod.name}, which is pending")
    return out


def requested_gpus(pod: PodInput) -> int:
    return sum(int(c.limits.get("nvidia.com/gpu", "0")) for c in pod.containers)


def store_records(
    api: SimApiserver, records: dict[str, Record], owners: dict[str, dict[int, Owner]]
) -> list[str]:
    """The leader's store (``records`` by pod UID, ``owners``: node -> GPU -> owner) against the
    apiserver, by the issue-20 auditor's store rules (audit.py ``_check_store``) and no stricter:
    every live bound pod of ours is recorded bound on its node and GPUs, and owns each of them
    (store-missing); no record of a pod that does not exist or has finished, nor a bound record
    on another node than its pod's, nor a reservation of a pending pod of ours once nothing is
    in flight (store-stale, store-disagrees); no GPU owner without a record claiming that GPU.
    A store write skipped and never made up for (30.7b: a mark, a release) is seen only here:
    the snapshots and the apiserver are right, and every reader of a stale record errs towards
    holding, so no other invariant sees it. Gang records are not checked (the auditor's rule
    reads gangs by their source's labels, which the sim's PodGroup gangs do not carry)."""
    out = []
    by_uid = {p.uid: p for p in api.pods.values()}
    for pod in sorted(api.pods.values(), key=lambda p: p.key):
        if pod.scheduler_name != NAME or not pod.node_name or pod.deleting or pod.finished:
            continue
        gpus = gpus_of(pod)
        if not gpus:
            continue
        record = records.get(pod.uid)
        where = f"{pod.name} bound to {pod.node_name} GPUs {sorted(gpus)}"
        if record is None:
            out.append(f"store: {where}, no record")
            continue
        if record.state != "bound":
            out.append(f"store: {where}, recorded {record.state}")
        if record.claim.node != pod.node_name or sorted(record.claim.devices) != sorted(gpus):
            out.append(
                f"store: {where}, recorded on {record.claim.node} "
                f"GPUs {sorted(record.claim.devices)}"
            )
        for gpu in gpus:
            owner = owners.get(pod.node_name, {}).get(gpu)
            if owner is None or owner.uid != pod.uid:
                holder = "no owner" if owner is None else f"owned by {_named(owner.uid, by_uid)}"
                out.append(f"store: GPU {pod.node_name}/{gpu} held by {pod.name}, {holder}")
    for uid, record in sorted(records.items()):
        found = by_uid.get(uid)
        what = f"{record.claim.pod} ({uid}) recorded {record.state} on {record.claim.node}"
        if found is None or found.finished:
            gone = "does not exist" if found is None else "has finished"
            out.append(f"store: {what}, the pod {gone}")
        elif record.state == "bound" and found.node_name != record.claim.node:
            out.append(f"store: {what}, the pod is on {found.node_name or 'no node'}")
        elif record.state != "bound" and found.scheduler_name == NAME and not found.node_name:
            out.append(f"store: {what}, the pod is pending with nothing in flight")
    for node, held in sorted(owners.items()):
        for gpu, owner in sorted(held.items()):
            claimed = records.get(owner.uid)
            if claimed is None or claimed.claim.node != node or gpu not in claimed.claim.devices:
                out.append(
                    f"store: GPU {node}/{gpu} owned by {_named(owner.uid, by_uid)}, "
                    "no record claiming it"
                )
    return out


def _named(uid: str, by_uid: dict[str, PodInput]) -> str:
    pod = by_uid.get(uid)
    return f"{pod.name} ({uid})" if pod is not None else f"UID {uid} (no such pod)"
