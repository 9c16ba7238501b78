"""A bounded memo: answers remembered by key, the oldest going first once it is full.

The core keeps no process-wide state: a memo belongs to whoever passes it in (the snapshot keeps
its own, ``snapshot/memos.py``), so two snapshots, or two tests, never share an answer, and each
is bounded by its owner's choice.
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(Generic[K, V]):
    """At most ``limit`` answers by key; adding one to a full memo drops the oldest (FIFO: the
    answers are cheap to recompute, the bound is what matters)."""

    __slots__ = ("_answers", "limit")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a memo holds at least one answer, not {limit}")
        self.limit = limit
        self._answers: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self._answers.get(key)

    def put(self, key: K, value: V) -> None:
        answers = self._answers
        if key not in answers and len(answers) >= self.limit:
            del answers[next(iter(answers))]
        answers[key] = value

    def __len__(self) -> int:
        return len(self._answers)
