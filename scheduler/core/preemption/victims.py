"""Who a preemptor may evict, in which units, and how a set of victims is ranked
(preemption/preempt.py).

A victim is a pod bound (or assumed) to a node, ours or not, GPU or not: a ``PodRecord`` of the
snapshot, whose GPUs are its holding. Only pods of strictly lower priority than the preemptor,
not terminating already (those are counted as going, never chosen twice), and not of the
preemptor's own gang, are candidates. They come as **options**, the smallest pieces the search
adds and drops whole:

- a pod outside any gang is an option of its own;
- a gang is one option of all its bound members, on every node: evicting one member of a gang
  alone would leave the rest holding GPUs for a job that cannot run. A gang with any member of
  the preemptor's priority or above is no candidate at all (its whole would include that member);
- an elastic gang (more members bound than its minimum) also offers its surplus: each member is
  an option of one pod, and choosing more of them than the surplus means evicting the whole gang
  (``victims`` expands it). So the search keeps the gang at its minimum when that is enough,
  and never takes it below its minimum without taking all of it.

PodDisruptionBudgets (preemption/budgets.py) and refusals: a pod whose eviction the apiserver
refused (``refused``, by UID, while the shell says the refusal stands) is no candidate at all, nor
is a gang with such a member, nor a gang whose whole eviction would break a budget (the Eviction API
would stop partway and leave the gang below its minimum). A lone pod whose eviction alone breaks
a budget stays a candidate, tried after every option that breaks none, as kube-scheduler reprieves
violating victims first; the rank counts the violations of the whole set first.

Options are tried: those that break no budget on their own first, then lowest priority, then
youngest first (latest creationTimestamp, the work that loses least), then by name so that equal
ones still come in one order.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from functools import total_ordering
from typing import NamedTuple

from msgspec import Struct

from ..model.dra import ResourceClaim
from ..model.gangsources import group_minimum
from ..snapshot.cluster import ClusterState
from ..snapshot.holdings import Holding
from ..snapshot.podindex import PodRecord
from .budgets import Budgets


class Option(Struct, frozen=True):
    """A piece of a victim set: a lone pod, a whole gang, or one surplus member of a gang."""

    name: str  # "default/x", "gang default/job", "default/x (surplus of gang default/job)"
    pods: tuple[PodRecord, ...]
    priority: int
    created: str  # its youngest pod's creationTimestamp
    gang: str | None = None
    surplus: bool = False


class GangVictim(Struct):
    key: str
    members: tuple[PodRecord, ...]  # bound, not terminating, by key
    priority: int  # its highest member's
    surplus: int  # members beyond its minimum (0: not elastic, or minimum unknown)


class Pool:
    """The victim candidates of one preemptor on one snapshot."""

    def __init__(
        self,
        state: ClusterState,
        priority: int,
        own: Iterable[str],
        gang: str | None,
        refused: Collection[str] = (),
    ):
        self.state = state
        self.budgets = Budgets(state.inputs.budgets)
        # Candidates kept out by a refused eviction or a budget (keys), for the reason shown.
        self.spared: list[str] = []
        mine = set(own)
        # Terminating pods of any priority: their resources are coming free.
        self.going: list[str] = []
        self.lone: dict[str, list[PodRecord]] = {}  # node -> lone candidate pods
        members: dict[str, list[PodRecord]] = {}
        minimum: dict[str, int] = {}
        excluded: set[str] = set()  # gangs with a member the preemptor may not evict
        for record in state.index.records.values():
            if record.terminating:
                self.going.append(record.key)
                if record.gang is not None:
                    minimum[record.gang] = max(minimum.get(record.gang, 0), record.minimum)
                continue
            if record.key in mine or (gang is not None and record.gang == gang):
                continue
            if record.gang is None:
                if record.priority >= priority:
                    continue
                if record.uid in refused:
                    self.spared.append(record.key)
                else:
                    self.lone.setdefault(record.node, []).append(record)
                continue
            if record.priority >= priority:
                excluded.add(record.gang)
            members.setdefault(record.gang, []).append(record)
            minimum[record.gang] = max(minimum.get(record.gang, 0), record.minimum)
        self.going.sort()
        # uid -> the allocated claims reserved for it (claims_freed; built when first asked).
        self._by_uid: dict[str, list[ResourceClaim]] | None = None
        self.gangs: dict[str, GangVictim] = {}
        self.gang_nodes: dict[str, set[str]] = {}  # node -> candidate gangs with a member there
        for key in sorted(members.keys() - excluded):
            pods = tuple(sorted(members[key], key=lambda r: r.key))
            if self.budgets.violating(pods) or any(r.uid in refused for r in pods):
                self.spared.extend(r.key for r in pods)
                continue
            least = minimum.get(key, 0) or self._minimum_from_groups(key, pods)
            surplus = len(pods) - least if least else 0
            self.gangs[key] = GangVictim(key, pods, max(r.priority for r in pods), max(0, surplus))
            for r in pods:
                self.gang_nodes.setdefault(r.node, set()).add(key)

    def _minimum_from_groups(self, gang: str, pods: tuple[PodRecord, ...]) -> int:
        """The minimum a PodGroup says now (``group_minimum``), or the holdings'."""
        minimum = group_minimum(gang, self.state.inputs.pod_groups)
        if minimum:
            return minimum
        held = [self.state.holdings[r.key] for r in pods if r.key in self.state.holdings]
        return max((h.replicas for h in held), default=0)

    def __bool__(self) -> bool:
        return bool(self.lone or self.gangs)

    def nodes(self) -> list[str]:
        """The nodes with a candidate victim on them, by name."""
        return sorted(self.lone.keys() | self.gang_nodes.keys())

    def options(self, node: str | None) -> list[Option]:
        """The options with a pod on ``node`` (None: the whole cluster), in the order they are
        tried: lowest priority, then youngest, then by name."""
        out: list[Option] = []
        lone = self.lone.get(node, []) if node is not None else _flat(self.lone.values())
        out.extend(Option(r.key, (r,), r.priority, r.created) for r in lone)
        gangs = self.gang_nodes.get(node, set()) if node is not None else self.gangs.keys()
        for key in gangs:
            g = self.gangs[key]
            if g.surplus:
                out.extend(
                    Option(
                        f"{r.key} (surplus of gang {key})", (r,), g.priority, r.created, key, True
                    )
                    for r in g.members
                    if node is None or r.node == node
                )
            else:
                created = max(r.created for r in g.members)
                out.append(Option(f"gang {key}", g.members, g.priority, created, key))
        out.sort(key=lambda o: o.name)
        out.sort(key=lambda o: o.created, reverse=True)
        out.sort(key=lambda o: o.priority)
        if self.budgets:
            out.sort(key=lambda o: bool(self.budgets.violating(o.pods)))
        return out

    def victims(self, chosen: Iterable[Option]) -> list[PodRecord]:
        """The pods ``chosen`` evicts: a gang whose surplus options exceed its surplus goes
        whole."""
        out: dict[str, PodRecord] = {}
        surplus: dict[str, list[PodRecord]] = {}
        for option in chosen:
            if option.surplus:
                assert option.gang is not None
                surplus.setdefault(option.gang, []).extend(option.pods)
            else:
                out.update((r.key, r) for r in option.pods)
        for key, pods in surplus.items():
            gang = self.gangs[key]
            picked = gang.members if len(pods) > gang.surplus else pods
            out.update((r.key, r) for r in picked)
        return sorted(out.values(), key=lambda r: r.key)

    def claims_freed(self, victims: Iterable[PodRecord]) -> list[ResourceClaim]:
        """The allocated ResourceClaims that the victims and the terminating pods together are
        all the consumers of (``reservedFor``): their devices come free once those pods are
        gone and the resourceclaim controller clears the allocations. A claim shared with a pod
        that stays is not freed."""
        if self._by_uid is None:
            self._by_uid = {}
            for claim in self.state.inputs.resource_claims.values():
                if claim.allocation is not None:
                    for uid in claim.reserved_for:
                        self._by_uid.setdefault(uid, []).append(claim)
        if not self._by_uid:
            return []
        records = self.state.index.records
        uids = {r.uid for r in victims}
        uids.update(records[k].uid for k in self.going if k in records)
        out: dict[str, ResourceClaim] = {}
        for uid in uids:
            for claim in self._by_uid.get(uid, ()):
                if uids.issuperset(claim.reserved_for):
                    out[claim.key] = claim
        return [out[key] for key in sorted(out)]

    def units(self, victims: Sequence[PodRecord]) -> int:
        """Gangs and lone pods among ``victims``: a gang counts once, whole or surplus."""
        return len({r.gang if r.gang is not None else r.key for r in victims})

    def freed(self, victims: Iterable[PodRecord]) -> int:
        """GPUs (whole or shared cards) the victims leave with nobody on them."""
        holdings = self.state.holdings
        gone = {r.key for r in victims} | set(self.going)
        per_node: dict[str, int] = {}
        for record in victims:
            holding = holdings.get(record.key)
            if holding is not None:
                per_node[holding.node] = per_node.get(holding.node, 0) | gpu_mask(holding)
        total = 0
        for node_name, mask in per_node.items():
            node = self.state.nodes.get(node_name)
            if node is None:
                continue
            for key in node.pods:  # a card still shared with a pod that stays is not freed
                if key not in gone:
                    mask &= ~gpu_mask(holdings[key])
            total += mask.bit_count()
        return total


class Rank(NamedTuple):
    """A victim set's rank, smallest best: the order preemption/preempt.py documents."""

    violations: int  # victims whose eviction breaks a PodDisruptionBudget (preemption/budgets.py)
    units: int
    pods: int
    priorities: tuple[int, ...]  # highest first
    freed: int
    youngest: tuple[Later, ...]  # oldest first, each compared latest-first
    keys: tuple[str, ...]


@total_ordering
class Later:
    """A creationTimestamp ordered latest first (a younger victim ranks better)."""

    __slots__ = ("created",)

    def __init__(self, created: str) -> None:
        self.created = created

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Later) and self.created == other.created

    def __hash__(self) -> int:
        return hash(self.created)

    def __lt__(self, other: Later) -> bool:
        return self.created > other.created


def rank(pool: Pool, victims: Sequence[PodRecord]) -> Rank:
    return Rank(
        violations=pool.budgets.count(victims),
        units=pool.units(victims),
        pods=len(victims),
        priorities=tuple(sorted((r.priority for r in victims), reverse=True)),
        freed=pool.freed(victims),
        youngest=tuple(Later(c) for c in sorted(r.created for r in victims)),
        keys=tuple(r.key for r in victims),
    )


def gpu_mask(holding: Holding) -> int:
    mask = holding.whole
    for share in holding.shares:
        mask |= 1 << share.index
    return mask


def _flat(groups: Iterable[list[PodRecord]]) -> list[PodRecord]:
    return [r for group in groups for r in group]
