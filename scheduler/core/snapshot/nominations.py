"""The nominations part of the snapshot (issue 14's preemption, ``preemption/preempt.py``).

While a preemptor's victims terminate, the GPUs (and the cpu, memory... on the node) planned for
it are held for it. A nomination is not a holding: no pod holds it, the store never sees it as a
claim. It is charged to its node as a mask of GPUs that ``NodeState.free_mask`` leaves out (and
shared placement skips), plus the preemptor's requests, so every pod is kept off it by the
ordinary rules and the class index stays right. The DRA devices its plan allocates to its claims
(issue 29's preemption through devices) are charged to the snapshot's devices in use
(``Devices.nominate``) as a claim's allocation is: once the victims' claims let them go, nobody
bound by the nomination can take them first, which would make the preemptor evict again.
``decide`` lifts, inside a tentative scope, the nominations that do not bind the unit it decides
(``lifted``): its own, and those of lower priority than it (kube-scheduler's rule for nominated
pods).
"""

from __future__ import annotations

from collections.abc import Iterable

from msgspec import Struct

from ..model.dra import Allocation
from ..resources.accounting import Amounts


class Nominated(Struct, frozen=True, kw_only=True):
    """What is held on a node for a preemptor while its victims terminate."""

    pod: str  # the preemptor's namespace/name
    uid: str = ""
    priority: int  # its spec.priority: pods of this priority or lower cannot take what it holds
    node: str  # the node nominated for it (its status.nominatedNodeName)
    devices: tuple[int, ...] = ()  # whole GPUs (or shared cards) held for it, by index
    requests: Amounts = ()  # its cpu, memory... (resources.accounting's units), held on the node
    # The allocations its plan gives its claims (Placement.claims): their DRA devices are held.
    allocations: tuple[Allocation, ...] = ()

    def overlaps(self, other: Nominated) -> bool:
        """Whether the two hold a GPU of one node or a DRA device in common."""
        if other.node == self.node and set(other.devices) & set(self.devices):
            return True
        mine = {(r.driver, r.pool, r.device) for a in self.allocations for r in a.results}
        return any(
            (r.driver, r.pool, r.device) in mine for a in other.allocations for r in a.results
        )


class Nominations:
    """Nominations by preemptor pod key (``by_pod``), and which are on each node (also nodes
    not known yet: charged when the node arrives)."""

    __slots__ = ("by_pod", "on_node")

    def __init__(self) -> None:
        self.by_pod: dict[str, Nominated] = {}
        self.on_node: dict[str, set[str]] = {}

    def add(self, nomination: Nominated) -> None:
        """A preemptor's nomination, where it has none."""
        self.by_pod[nomination.pod] = nomination
        self.on_node.setdefault(nomination.node, set()).add(nomination.pod)

    def remove(self, nomination: Nominated) -> None:
        del self.by_pod[nomination.pod]
        keys = self.on_node[nomination.node]
        keys.discard(nomination.pod)
        if not keys:
            del self.on_node[nomination.node]

    def on(self, node: str) -> Iterable[str]:
        """The preemptors nominated on ``node``."""
        return self.on_node.get(node, ())

    def mask_on(self, node: str) -> int:
        """The GPUs held on ``node`` for its preemptors, as a mask."""
        mask = 0
        for key in self.on_node.get(node, ()):
            for index in self.by_pod[key].devices:
                mask |= 1 << index
        return mask

    def lifted(self, pods: Iterable[str], priority: int) -> list[str]:
        """The nominations that do not bind a unit of these pods and this priority (sorted): its
        own, and those of lower priority. A pod of equal or lower priority stays off a
        nomination; a higher one ignores it, as kube-scheduler treats nominated pods."""
        mine = set(pods)
        return sorted(key for key, n in self.by_pod.items() if key in mine or n.priority < priority)

    def sizes(self) -> dict[str, int]:
        return {
            "nominations": len(self.by_pod),
            "nominated_on": sum(len(keys) for keys in self.on_node.values()),
        }
