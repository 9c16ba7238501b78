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
free GPUs per domain are the snapshot's DomainIndex's, kept as nodes change class, and the
best node of a class is found walking down the domains that hold it, best first. Pure and
deterministic: a function of the snapshot. ``topology.packDomains`` (TopologySettings) turns it
off, and it is off by itself when no node carries a level's label.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Set

from ..snapshot.cluster import ClusterState
from ..snapshot.domains import Path, configured, in_use
from ..snapshot.nodes import ClassKey, NodeClass, NodeState


class DomainOrder:
    """The configured hierarchy's domains ranked for a pod that needs no domain: each of a
    node's domains widest first, broken before whole, then the fewest free GPUs. Read off the
    DomainIndex's sums per domain, as they stand (nothing is summed per decision)."""

    __slots__ = ("_index", "_state")

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._index = state.domain_index(configured(state.settings.topology))

    def _rank(self, domain: Path) -> tuple[int, int, Path]:
        free, gpus, _ = self._index.sums[domain]
        return int(free == gpus), free, domain

    def tiers(self, wanted: Set[ClassKey]) -> Iterator[list[str]]:
        """The nodes of the classes ``wanted``, a tier at a time, best first. A node ranks by
        its domains, widest first: whether each is whole, then its free GPUs (smaller first);
        a node whose path ends above a level comes before the nodes below it. Nodes of one
        rank are one tier, sorted by name across their domains (the domains of a rank are not
        ordered among themselves). Walked lazily from the top, the domains of one rank at a
        level together: a pod usually stops in the first tier, having read a domain or a few
        per level, not every node."""
        return self._tiers([()], wanted)

    def _tiers(self, group: list[Path], wanted: Set[ClassKey]) -> Iterator[list[str]]:
        index = self._index
        # The nodes whose path ends in one of these domains: their rank is the group's.
        here: list[str] = []
        for domain in group:
            classes = index.classes.get(domain)
            if classes is not None and not wanted.isdisjoint(classes):
                here += index.names[domain]
        if here:
            yield sorted(here)
        within = index.within
        kids: dict[tuple[int, int], list[Path]] = {}
        for domain in group:
            for kid in index.children.get(domain, ()):
                if not wanted.isdisjoint(within[kid]):
                    kids.setdefault(self._rank(kid)[:2], []).append(kid)
        for rank in sorted(kids):
            yield from self._tiers(kids[rank], wanted)

    def nodes(self, classes: Iterable[NodeClass]) -> Iterator[tuple[NodeState, NodeClass]]:
        """The nodes of these classes (with their class), best first: by their domains' rank,
        then by name. Walked from the top: at each level only the domains holding one of the
        classes, best first (a few hundred domains on bench-topology's 5,040 nodes, of which
        usually one per level is entered)."""
        wanted = {cls.key: cls for cls in classes}
        return self._walk((), wanted)

    def _walk(
        self, domain: Path, wanted: dict[ClassKey, NodeClass]
    ) -> Iterator[tuple[NodeState, NodeClass]]:
        index, state = self._index, self._state
        # Nodes whose path ends here (without the next level's label) break no narrower domain.
        here = index.classes.get(domain)
        if here is not None and not wanted.keys().isdisjoint(here):
            for name in sorted(index.names[domain]):
                cls = state.class_of(name)
                if cls is not None and cls.key in wanted:
                    yield state.nodes[name], wanted[cls.key]
        within = index.within
        kids = [
            d for d in index.children.get(domain, ()) if not wanted.keys().isdisjoint(within[d])
        ]
        for kid in sorted(kids, key=self._rank):
            yield from self._walk(kid, wanted)


def domain_order(state: ClusterState) -> DomainOrder | None:
    """The order for a pod that needs no domain, or None when it does not apply (turned off,
    or no node carries a level's label: every domain is the cluster)."""
    settings = state.settings.topology
    if not settings.pack_domains:
        return None
    if not in_use(configured(settings), state.label_keys):
        return None
    return DomainOrder(state)
