"""Broken domains first (issue 32 item 7): where a pod that needs no topology domain goes among
nodes its rule ranks equal.

Fragmentation is measured per node, but gangs ask one level up: a 16-pod gang required in one
NVLink clique needs 16 free nodes of one clique, and single pods scattered over many cliques
leave none (bench-topology's queued replay counts the cliques and blocks a gang class still fits
in). So, as the node measure keeps untouched nodes for what comes next, a pod without a domain
of its own is packed into the domains already used: among the nodes its rule (placement/nodes.py,
rule 2) ranks equal, the one whose domains are already broken (some GPU of them used), widest
level first, and between broken (or between whole) domains the one with the fewest free GPUs
(the fullest block, then the fullest rack of it), then the name. A whole domain is broken last,
the smallest first; a node outside every domain (without the levels' labels) breaks none and
comes first. The fewest free GPUs first is Kueue's order for pods without a topology constraint
(LeastFreeCapacity); here it is a tie-break, never above the node rule's own key.

The hierarchy is the configured one (``topology.levels`` and the built-in NVLink levels); the
counts are read off the snapshot's DomainIndex (free GPUs per node class, per path), one pass
over the paths per decision (a few hundred on bench-topology's 5,040 nodes). Pure and
deterministic: a function of the snapshot. ``topology.packDomains`` (TopologySettings) turns it
off, and it is off by itself when no node carries a level's label.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..snapshot.cluster import ClusterState
from ..snapshot.domains import Path, configured, in_use
from ..snapshot.nodes import NodeClass, NodeState


class DomainOrder:
    """The configured hierarchy's paths ranked for a pod that needs no domain: per path, each of
    its domains widest first, broken before whole, then the fewest free GPUs."""

    __slots__ = ("_index", "_keys", "_ordered", "_state")

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        hierarchy = configured(state.settings.topology)
        self._index = index = state.domain_index(hierarchy)
        # Per domain (a path's prefix): its free GPUs and its GPUs.
        free: dict[Path, list[int]] = {}
        for path, classes in index.classes.items():
            n = sum(key[3].bit_count() * count for key, count in classes.items())
            total = sum(key[2] * count for key, count in classes.items())
            for depth in range(1, len(path) + 1):
                sums = free.setdefault(path[:depth], [0, 0])
                sums[0] += n
                sums[1] += total
        # Per level, widest first: whole (1) after broken (0), then the fewest free GPUs.
        self._keys: dict[Path, tuple[tuple[int, int], ...]] = {}
        for path in index.classes:
            prefixes = (free[path[:depth]] for depth in range(1, len(path) + 1))
            self._keys[path] = tuple((int(n == total), n) for n, total in prefixes)
        self._ordered = sorted(index.classes, key=lambda path: (self._keys[path], path))

    def key(self, name: str) -> tuple[tuple[int, int], ...]:
        """The node's rank: per domain of it, widest first, whether it is whole, then its free
        GPUs (smaller first)."""
        return self._keys[self._index.where[name]]

    def nodes(self, classes: Iterable[NodeClass]) -> Iterator[tuple[NodeState, NodeClass]]:
        """The nodes of these classes (with their class), best first: by their domains' rank,
        then by name."""
        wanted = {cls.key: cls for cls in classes}
        state = self._state
        for path in self._ordered:
            if wanted.keys().isdisjoint(self._index.classes[path]):
                continue
            for name in sorted(self._index.names[path]):
                cls = state.class_of(name)
                if cls is not None and cls.key in wanted:
                    yield state.nodes[name], wanted[cls.key]


def domain_order(state: ClusterState) -> DomainOrder | None:
    """The order for a pod that needs no domain, or None when it does not apply (turned off,
    or no node carries a level's label: every domain is the cluster)."""
    settings = state.settings.topology
    if not settings.pack_domains:
        return None
    if not in_use(configured(settings), state.label_keys):
        return None
    return DomainOrder(state)
