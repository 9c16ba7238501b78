"""Priority and gang-aware preemption (issue 14): which lower-priority pods to evict so that a unit
``decide`` could not place fits, or why none.

The service (and ``simulate``) calls ``preempt(state, unit)`` after ``decide(state, unit)`` did not
place the unit. It is pure like the rest of the core: it reads the snapshot, tries victim sets
inside ``ClusterState.tentative()`` (which always rolls back) and returns a ``Preemption`` (the
victims, the preemptor's plan once they are gone, the nominations to hold meanwhile) or a
``NoPreemption`` with the reason. Evicting, events, nominatedNodeName and the store are the
shell's.

**Who may preempt.** The unit's priority is ``unit_priority`` (a gang: its highest member). A unit
with a pod whose preemptionPolicy is Never evicts nothing: it waits (kube-scheduler's rule). A
gang still waiting for members, or a pod whose request is malformed, is not a preemptor.

**Who may be evicted.** ``preemption/victims.py``: bound pods of strictly lower priority, lone pods
one by one, gangs whole (or an elastic gang's surplus down to its minimum), never one member of a
gang alone; never a pod whose eviction the apiserver refused while the shell says that refusal
stands (``refused``, UIDs: a PodDisruptionBudget the snapshot may not show yet), nor its gang. Pods
already terminating are not chosen again, and since their resources are coming free (kube-scheduler
counts them as going) every check below runs with them removed: when that alone makes room the
result is a Preemption with no victims, so the preemptor is nominated and waits.

**The one check.** A victim set is good only if the unit fits once it is gone, and that is asked
of the same core: ``decide`` on the snapshot with the victims (and the terminating pods) removed
tentatively. GPU topology, allocatable, gang planning and every Kubernetes filter count, and the
plan returned is what ``decide`` will choose once the victims have left, nothing else changing
(nominations keep others off it meanwhile). Nothing is evicted "in case": no fit, no victims.

**The search**, bounded on 5,000 nodes:

- A single pod can only use room on one node, so each node with a candidate victim is a
  candidate: its victim options (lowest priority, youngest first) are added until the pod fits,
  the shortest such prefix found by doubling then bisection; then each chosen option, the most
  valuable first (highest priority, oldest), is dropped again if the pod still fits without it
  (kube-scheduler's reprieve), so no victim is evicted that the fit does not need. Nodes are
  tried in the order of a lower bound on their candidate's rank (a node whose victims and free
  GPUs together cannot hold the pod is no candidate at all), and the search stops at the first
  node whose bound is worse than the best found, or after ``max(100, 10%)`` of the nodes, as
  kube-scheduler bounds its dry runs (``preemption/candidates.py``, with the cheap counts that spare
  a ``decide`` that could not succeed).
- A gang may span nodes, so it has one candidate: the same prefix and reprieve over the whole
  cluster's victim options. Planning a gang is ``decide``'s job; this only decides what to lift.
  An elastic preemptor counts as placed once its minimum is (``Placed`` with surplus waiting).

**The order** among candidates, each key deciding only when the ones before are equal:

0. Fewest victims whose eviction breaks a PodDisruptionBudget (preemption/budgets.py),
   kube-scheduler's first key: the Eviction API refuses those, so such a plan stalls; one that
   breaks none is always preferred, and a gang whose whole eviction breaks one is never offered
   (preemption/victims.py).
1. Fewest units evicted (a gang counts once, whole or its surplus), then fewest pods: every
   eviction costs a restart, and a gang's restart is one job's, however many pods.
2. Lowest priority, compared highest victim first: the work the cluster values least goes.
3. Fewest GPUs freed beyond the need: the preemptor should not leave idle holes behind it.
4. Youngest first (compared oldest victim first, latest creationTimestamp wins): the least
   work lost. Then the victims' names, so that the choice never depends on dict order.

Shared GPUs need no rule of their own: a preemptor wanting whole GPUs fits only once every
tenant of a card it takes is gone, and the reprieve gives back every pod (on that card or
elsewhere) the fit does not need, so all the tenants of the cards it takes are evicted and
nothing else.

**Devices** (issue 29; kube-scheduler never preempts for them: every DRA failure is unresolvable
there). A pod or gang that needs devices through ResourceClaims preempts like any: in the dry
run, the allocated claims that the victims and the terminating pods are all the consumers of
(``reservedFor``; ``Pool.claims_freed``) are lifted (``ClusterState.lift_claim``) together with
the victims, so the DynamicResources filter sees their devices free; a claim shared with a pod
that stays keeps its devices. Outside the dry run nothing is lifted: a victim's devices count as
free only once its claim's allocation is gone from the apiserver (the resourceclaim controller
clears it after the pod is gone), and until then the nominated preemptor waits (its next
preemption finds the room coming from the terminating victims and evicts nothing more).
"""

from __future__ import annotations

from collections.abc import Collection

from msgspec import Struct

from ..cycle import Unit, decide, unit_priority
from ..gangs.members import Member
from ..gangs.planning import Size, check_gang
from ..model.decisions import Placed, Placement, Waiting
from ..resources.accounting import pod_requests
from ..resources.requests import PodRequest, RequestError, parse_request
from ..snapshot.cluster import ClusterState
from ..snapshot.nominations import Nominated
from ..snapshot.podindex import PodRecord
from .candidates import fits, in_cluster, in_domains, on_nodes
from .victims import Pool


class Victim(Struct, frozen=True, kw_only=True):
    pod: str  # namespace/name
    uid: str
    node: str
    priority: int
    gang: str | None = None  # the gang it is evicted with (whole, or its surplus)


class Preemption(Struct, frozen=True, kw_only=True, tag="preemption"):
    pods: tuple[str, ...]  # the preemptor unit's pods, by key
    priority: int  # the preemptor's (unit_priority)
    victims: tuple[Victim, ...]  # by key; empty: the room is already coming (waiting_for)
    # Where the preemptor goes once the victims (and waiting_for) are gone: decide's plan.
    placements: tuple[Placement, ...]
    # One per placement: what ClusterState.nominate should hold for it meanwhile.
    nominations: tuple[Nominated, ...]
    # Pods already terminating on the plan's nodes whose room the plan counts on.
    waiting_for: tuple[str, ...] = ()
    summary: str  # one line for events and logs
    # A gang with a required topology level: the domain its victims were chosen in (issue 21),
    # e.g. "block=b1,rack=r07"; the nominations' nodes keep later cycles to it.
    domain: str = ""


class NoPreemption(Struct, frozen=True, kw_only=True, tag="no-preemption"):
    pods: tuple[str, ...]
    reason: str  # why not, without the unit's own unschedulable reason
    # False when there was nothing to weigh (no pod of lower priority, none terminating): the
    # shell then says nothing of preemption, as for a pod that never could preempt.
    weighed: bool = True


def preempt(
    state: ClusterState, unit: Unit, refused: Collection[str] = ()
) -> Preemption | NoPreemption:
    """Victims whose eviction lets ``unit`` fit, chosen by the order above, none of them in
    ``refused`` (UIDs); or why there are none. ``state`` is left as it was."""
    keys = tuple(sorted(p.key for p in unit.pods))
    priority = unit_priority(unit)
    never = sorted(p.key for p in unit.pods if p.preemption_policy == "Never")
    if never:
        return NoPreemption(
            pods=keys,
            reason=f"preemptionPolicy Never ({', '.join(never)}): it waits for room instead of "
            "evicting pods of lower priority",
        )
    if not state.index.below(priority):
        # Known without a scan or a decide: the usual case of one priority everywhere (pods
        # terminating there do not make a preemptor of it: it waits for room like any pod).
        return NoPreemption(
            pods=keys, reason=f"no running pod of lower priority than {priority}", weighed=False
        )
    requests: list[PodRequest] = []
    for pod in unit.pods:
        try:
            requests.append(parse_request(pod, state.settings, state.memos.asks))
        except RequestError as exc:
            return NoPreemption(pods=keys, reason=f"not a preemptor: {exc}")
    now = decide(state, unit)
    if isinstance(now, Placed):
        return NoPreemption(pods=keys, reason="it fits without evicting anything")
    if isinstance(now, Waiting):
        return NoPreemption(pods=keys, reason=f"not a preemptor yet: {now.reason}")
    pool = Pool(state, priority, (p.key for p in unit.pods), unit.gang, refused)
    if pool.going:
        coming = fits(state, unit, pool, (), None)
        if coming is not None:
            return _preemption(state, unit, priority, pool, [], coming)
    if not pool:
        return NoPreemption(
            pods=keys,
            reason=f"no running pod of lower priority than {priority} to evict{_spared(pool)}",
        )
    if unit.gang is None:
        best = on_nodes(state, unit, requests[0], pool)
        where = f"no node where evicting pods of lower priority than {priority} makes room"
    else:
        size = check_gang(
            state, unit.gang, [Member(p, r) for p, r in zip(unit.pods, requests, strict=True)]
        )
        if not isinstance(size, Size):
            return NoPreemption(pods=keys, reason=f"not a preemptor: {size.reason}")
        if size.topology is not None and size.topology.hard and size.topology.constraint:
            return _in_domains(state, unit, requests, size, pool, priority, keys)
        best = in_cluster(state, unit, requests, size, pool)
        where = f"evicting every pod of lower priority than {priority} would not make room"
    if best is None:
        return NoPreemption(pods=keys, reason=where + _spared(pool))
    _, victims, placed = best
    return _preemption(state, unit, priority, pool, victims, placed)


def _spared(pool: Pool) -> str:
    """What the reason adds when budgets or refused evictions kept candidates out."""
    if not pool.spared:
        return ""
    shown = ", ".join(sorted(pool.spared)[:3])
    more = f" and {len(pool.spared) - 3} more" if len(pool.spared) > 3 else ""
    return f" (kept by a PodDisruptionBudget or a refused eviction: {shown}{more})"


def _in_domains(
    state: ClusterState,
    unit: Unit,
    requests: list[PodRequest],
    size: Size,
    pool: Pool,
    priority: int,
    keys: tuple[str, ...],
) -> Preemption | NoPreemption:
    """A gang with a required topology level: victims within one domain of it (issue 21); the
    nominations keep the gang there while they leave (cycle.decide keeps to its nominated
    nodes' domain)."""
    constraint = size.topology.constraint if size.topology else None
    if constraint is None or constraint.required is None:  # slices alone: cluster-wide
        best = in_cluster(state, unit, requests, size, pool)
        if best is None:
            return NoPreemption(
                pods=keys,
                reason=f"evicting every pod of lower priority than {priority} would not make room",
            )
        return _preemption(state, unit, priority, pool, best[1], best[2])
    found = in_domains(state, unit, requests, size, pool)
    level = constraint.hierarchy.levels[constraint.required].name
    if found is None:
        return NoPreemption(
            pods=keys,
            reason=f"no {level} where evicting pods of lower priority than {priority} makes room",
        )
    (_, victims, placed), domain = found
    where = constraint.hierarchy.describe(domain)
    return _preemption(state, unit, priority, pool, victims, placed, where)


def _preemption(
    state: ClusterState,
    unit: Unit,
    priority: int,
    pool: Pool,
    victims: list[PodRecord],
    placed: Placed,
    domain: str = "",
) -> Preemption:
    pods = {p.key: p for p in unit.pods}
    nominations = []
    for placement in placed.placements:
        pod = pods[placement.pod]
        devices = placement.devices or tuple(s.index for s in placement.shares)
        nominations.append(
            Nominated(
                pod=pod.key,
                uid=pod.uid,
                priority=priority,
                node=placement.node,
                devices=devices,
                requests=pod_requests(pod, state.gpu_names, memo=state.memos.requests),
                allocations=tuple(c.allocation for c in placement.claims),
            )
        )
    plan_nodes = {p.node for p in placed.placements}
    records = state.index.records
    waiting_for = tuple(k for k in pool.going if k in records and records[k].node in plan_nodes)
    chosen = tuple(
        Victim(pod=r.key, uid=r.uid, node=r.node, priority=r.priority, gang=r.gang) for r in victims
    )
    return Preemption(
        pods=tuple(sorted(pods)),
        priority=priority,
        victims=chosen,
        placements=placed.placements,
        nominations=tuple(nominations),
        waiting_for=waiting_for,
        summary=_summary(unit, priority, pool, victims, placed, waiting_for, domain),
        domain=domain,
    )


def _summary(
    unit: Unit,
    priority: int,
    pool: Pool,
    victims: list[PodRecord],
    placed: Placed,
    waiting_for: tuple[str, ...],
    domain: str = "",
) -> str:
    who = f"gang {unit.gang}" if unit.gang is not None else unit.pods[0].key
    nodes = ", ".join(sorted({p.node for p in placed.placements}))
    if domain:
        nodes = f"{nodes} (in {domain})"
    need = sum(len(p.devices) or len(p.shares) for p in placed.placements)
    claimed = sum(len(c.allocation.results) for p in placed.placements for c in p.claims)
    what = f"{need} GPU(s)" + (f" and {claimed} claimed device(s)" if claimed else "")
    if not victims:
        return (
            f"{who} (priority {priority}) is nominated to {nodes}: it waits for "
            f"{len(waiting_for)} terminating pod(s), evicting nothing"
        )
    gangs = sorted({r.gang for r in victims if r.gang is not None})
    names = [r.key for r in victims]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"{who} (priority {priority}) preempts {len(victims)} pod(s) "
        f"({len(gangs)} gang(s)) of priority <= {max(r.priority for r in victims)} "
        f"for {what} on {nodes}: {shown}; frees {pool.freed(victims)} GPU(s)"
    )
