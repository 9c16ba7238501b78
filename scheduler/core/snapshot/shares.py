"""The share index: GPU nodes grouped by what a decision reads of their cards and cpu.

A share (placement/nodes.place_shared) ranks a node by its cards (which fit the request and how
busy they are), by whether any GPU pod uses it, and, with a target workload, by its shape (cpu
left and the cards' free percent): by its name only to break ties. A pod without GPUs reads the
same of a GPU node (its shape and whether it is untouched). Nodes that agree on all of it rank
the same, so a decision ranks groups, not nodes, and asks the filter chain about the names of a
group only in the order the rank gives (issue 32: the chain ran on every node for every share).

- ``CardKey`` (``NodeState.card_key``): the node's vendor, sGPU slots per card, whether any
  card reports memory (what a refused share's reason reads), whether it is untouched (no GPU
  held whole, no card shared), and per card a share could use (healthy, not held whole, not
  nominated for a preemptor) its index, memory and use (core, memory, sGPU slots, QoS; None
  when no pod shares it), and its pool (fragmentation.Pool: which classes of the target workload
  can run there). Nodes of one key are a ``CardGroup``, which keeps the cards' free
  percent (the shape's cards) and a memo of what placement derives per request from the key
  alone (which cards fit).
- within a group, the nodes by cpu left (-1: the status says nothing of cpu), one ``NameSet``
  each: the shape is (cpu left, the group's free cards).
- every node by (untouched, name) (``candidates``, snapshot/nameorder.py): the order a
  share's candidates come up in when their bounds tie (placement/nodes._walk), so a decision
  reads them from the first instead of filing every one, only those with the cpu and a card
  it asks for; and the pools its groups are of (``pools``), whose ceilings bound what any
  node still to read can rank.
- per node, what a refused pod's reason derives of it and its group (``counted``: what it has
  left of the resources pods ask for; placement/nodes.unschedulable_reason), dropped when the
  node is (a node whose records, status or cards change is refiled, so what is kept is always
  the node's as it is); ``uncounted`` names the nodes filed since. What each counted node has
  left is also kept per resource in ascending order (``by_left``), so a refused pod's count of
  the nodes short of each resource is a bisection, and only the nodes with enough of the
  scarcest resource it asks for are read one by one (issue 32: the reason walked every node).

A node is filed when ``NodeIndex.index`` files its class and leaves with ``unindex``; a record
charged to it (its cpu) refiles it (``NodeIndex.refile_shares``).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator

from ..model.names import CORES_PER_CARD
from .fragmentation import Pool, free_cards
from .nameorder import NameOrder
from .names import NameSet

# (core, memory MiB, sGPU slots, QoS) of one card's shared use.
CardUseKey = tuple[int, int, int, str | None]
# A card a share could use: (index, memory MiB, its use or None).
CardState = tuple[int, int, CardUseKey | None]
# (vendor, sGPU slots per card, any card reports memory, untouched, the usable cards by index,
# the node's pool: fragmentation.Pool)
CardKey = tuple[str, int, bool, bool, tuple[CardState, ...], Pool]


class CardGroup:
    """The nodes of one CardKey, by cpu left."""

    __slots__ = ("by_cpu", "free", "free_sum", "idle", "key", "memo", "pool", "top", "untouched")

    def __init__(self, key: CardKey) -> None:
        self.key = key
        # Read by every share for every group (attributes: a property costs a call).
        self.untouched = key[3]
        self.pool: Pool = key[5]
        cards = key[4]
        # The shape's cards (free percent, largest first) and the idle cards (what a whole-GPU
        # pod could take: the node's free GPU count).
        self.free = free_cards(CORES_PER_CARD - (u[0] if u else 0) for _, _, u in cards)
        self.idle = sum(1 for _, _, u in cards if u is None)
        self.free_sum = sum(self.free)
        # The free percent of its idlest card (0: none has any).
        self.top = self.free[0] if self.free else 0
        self.by_cpu: dict[int, NameSet] = {}
        # What placement derives per request from the key alone (the cards that fit), kept
        # while the group lives: a node whose cards change moves to another group.
        self.memo: dict[object, object] = {}


class ShareIndex:
    """GPU nodes by CardKey (per vendor) and cpu left."""

    __slots__ = (
        "_by_top",
        "_by_vendor",
        "_lefts",
        "_order",
        "_pools",
        "_read_ids",
        "_where",
        "by_left",
        "counted",
        "counted_of",
        "reads",
        "uncounted",
        "unknown",
    )

    def __init__(self) -> None:
        self._by_vendor: dict[str, dict[CardKey, CardGroup]] = {}
        # The same groups per vendor by the free percent of their idlest card (0: none free),
        # so a share passes over the groups none of whose cards has its percent free without
        # reading them (issue 32: some 1,400 groups a share at 5,000 nodes, most of them full).
        self._by_top: dict[str, dict[int, dict[CardKey, CardGroup]]] = {}
        self._where: dict[str, tuple[CardGroup, int]] = {}
        # Every node filed, in the order a share reads them.
        self._order = NameOrder()
        # Per pool (fragmentation.Pool), how many groups are of it.
        self._pools: dict[Pool, int] = {}
        # What the reason code derives per node, while the node stays where it is filed, and
        # the nodes filed that it has not derived anything of yet.
        self.counted: dict[str, object] = {}
        self.uncounted: dict[str, CardGroup] = {}
        # The resource names ``counted`` keeps what each node has left of: every name a pod
        # whose reason was counted asked for (a few: it only grows with a name no pod asked
        # for before, and is derived afresh then).
        self.counted_of: tuple[str, ...] = ()
        # Per resource (pods, then ``counted_of``'s), (what a counted node has left, its name,
        # what the reason code derived of it) in ascending order; the counted nodes whose left
        # is not known (cordoned, tainted or without a status: the filter chain is asked about
        # them), in the order counted.
        self.by_left: list[list[tuple[int, str, object]]] = []
        self.unknown: dict[str, None] = {}
        self._lefts: dict[str, tuple[int, ...]] = {}
        # What the reason code reads of counted nodes, each distinct value once, numbered
        # (``read_id``): a refused pod counts some 3,000 nodes by it, and an int hashes in
        # nanoseconds where the nested tuple it stands for took most of the count (issue 32).
        self.reads: list[object] = []
        self._read_ids: dict[object, int] = {}

    def file(self, name: str, key: CardKey, left: int) -> None:
        """File a GPU node under its CardKey (NodeState.card_key) and cpu left (after ``drop``,
        or new)."""
        groups = self._by_vendor.setdefault(key[0], {})
        group = groups.get(key)
        if group is None:
            group = groups[key] = CardGroup(key)
            tops = self._by_top.setdefault(key[0], {})
            tops.setdefault(group.top, {})[key] = group
            self._pools[key[5]] = self._pools.get(key[5], 0) + 1
        names = group.by_cpu.get(left)
        if names is None:
            names = group.by_cpu[left] = NameSet()
        names.add(name)
        self._where[name] = (group, left)
        self.uncounted[name] = group
        self._order.put(name, key[3], key[0], left, group.top)

    def drop(self, name: str) -> None:
        """The node leaves its group (before a change to its cards or cpu, or for good)."""
        found = self._where.pop(name, None)
        if found is None:
            return
        if self.counted.pop(name, None) is not None:
            self._uncount(name)
        self.uncounted.pop(name, None)
        group, left = found
        self._order.remove(name)
        names = group.by_cpu[left]
        names.names.discard(name)
        if names.names:
            return
        del group.by_cpu[left]
        if group.by_cpu:
            return
        vendor = group.key[0]
        groups = self._by_vendor[vendor]
        del groups[group.key]
        tops = self._by_top[vendor]
        del tops[group.top][group.key]
        if not tops[group.top]:
            del tops[group.top]
        pool = group.key[5]
        self._pools[pool] -= 1
        if not self._pools[pool]:
            del self._pools[pool]
        if not groups:
            del self._by_vendor[vendor]
            del self._by_top[vendor]

    def count(self, name: str, row: object, lefts: tuple[int, ...] | None) -> None:
        """What the reason code derived of an uncounted node (``row``), and what the node has
        left of pods and of each resource of ``counted_of`` (None: not known)."""
        self.counted[name] = row
        if lefts is None:
            self.unknown[name] = None
            return
        if not self.by_left:
            self.by_left = [[] for _ in lefts]
        for column, left in zip(self.by_left, lefts, strict=True):
            bisect.insort(column, (left, name, row))
        self._lefts[name] = lefts

    def read_id(self, read: object) -> int:
        """The number of ``read`` among ``reads`` (numbered now if new)."""
        found = self._read_ids.get(read)
        if found is None:
            found = self._read_ids[read] = len(self.reads)
            self.reads.append(read)
        return found

    @property
    def stale_reads(self) -> bool:
        """More values numbered than twice the nodes filed: most are of nodes as they were
        (``recount`` forgets them, and what was derived with them)."""
        return len(self.reads) > 2 * len(self._where) + 64

    def _uncount(self, name: str) -> None:
        lefts = self._lefts.pop(name, None)
        if lefts is None:
            self.unknown.pop(name, None)
            return
        for column, left in zip(self.by_left, lefts, strict=True):
            del column[bisect.bisect_left(column, (left, name))]

    def recount(self) -> None:
        """What the reason code derived of every node is forgotten (it derives it afresh)."""
        self.counted.clear()
        self.by_left = []
        self.unknown.clear()
        self._lefts.clear()
        self.reads.clear()
        self._read_ids.clear()
        self.uncounted = {name: group for name, (group, _) in self._where.items()}

    def groups(self, vendor: str | None = None, least: int = 0) -> Iterator[CardGroup]:
        """The groups of one vendor's nodes (None: every vendor's), only those with a card
        ``least`` percent free or more when ``least`` is above 0."""
        if not least:
            if vendor is not None:
                return iter(self._by_vendor.get(vendor, {}).values())
            return itertools.chain.from_iterable(g.values() for g in self._by_vendor.values())
        tops = [self._by_top.get(vendor, {})] if vendor is not None else self._by_top.values()
        return itertools.chain.from_iterable(
            groups.values() for by_top in tops for top, groups in by_top.items() if top >= least
        )

    def group_count(self, vendor: str | None = None, least: int = 0) -> int:
        """How many groups ``groups`` yields for these arguments, without reading them."""
        vendors = [self._by_top.get(vendor, {})] if vendor is not None else self._by_top.values()
        return sum(
            len(groups) for by_top in vendors for top, groups in by_top.items() if top >= least
        )

    def pools(self) -> Iterable[Pool]:
        """The pools of the nodes filed."""
        return self._pools.keys()

    def candidates(
        self, vendor: str | None, cpu: int, percent: int, budget: int
    ) -> tuple[Iterator[tuple[str, CardGroup, int]], bool]:
        """The nodes a share of ``vendor``'s cards (None: any) asking for ``cpu`` millicores and
        a card ``percent`` free could go to, as (name, group, cpu left), the touched before
        the untouched, each in name order, up to the ``budget``-th node filed in that order
        (with some that cannot: NameOrder.candidates); and whether more nodes are filed."""
        names, over = self._order.candidates(vendor, cpu, percent, budget)
        where = self._where
        return ((name, *where[name]) for name in names), over
