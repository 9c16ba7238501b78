"""A set of node names with the smallest one at hand: what a node class or a share group holds."""

from __future__ import annotations

import heapq


class NameSet:
    """Node names, the smallest at hand (a lazily cleaned heap: a name that left stays in the
    heap until it reaches the top, and the heap is rebuilt when it holds too many such)."""

    __slots__ = ("_heap", "names")

    def __init__(self) -> None:
        self.names: set[str] = set()
        self._heap: list[str] = []

    def add(self, name: str) -> None:
        self.names.add(name)
        heapq.heappush(self._heap, name)
        if len(self._heap) > 2 * len(self.names) + 64:
            self._heap = sorted(self.names)

    def first(self) -> str:
        heap = self._heap
        while heap[0] not in self.names:
            heapq.heappop(heap)
        return heap[0]

    def in_order(self) -> list[str]:
        return sorted(self.names)
