"""Tentative changes and their undo, as KAI's statement.go: every change the snapshot makes
inside a ``tentative()`` scope is logged as a typed operation that knows how to revert itself,
and the scope reverts them all, newest first, when it closes.

Gang planning places members inside a scope to see what the previous ones took, then returns a
decision and leaves the snapshot exactly as it was. Scopes nest; the log exists only while the
outermost one is open, so nothing grows between decisions. Reverting an operation goes through
the snapshot's ordinary methods (``Target``), with logging off: what they change besides (node
classes, gang members, the nominated GPUs) follows as it does for any change.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from msgspec import Struct

from ..model.dra import Allocation, ResourceClaim
from .holdings import Holding
from .nominations import Nominated
from .podindex import PodRecord


class Target(Protocol):
    """What the operations revert through (ClusterState)."""

    def hold(self, holding: Holding) -> str | None: ...

    def release(self, holding: Holding) -> None: ...

    def unhold(self, holding: Holding) -> None: ...

    def put_record(self, record: PodRecord) -> None: ...

    def drop_record(self, key: str) -> None: ...

    def nominate(self, nomination: Nominated) -> None: ...

    def unnominate(self, pod: str) -> None: ...

    def assume_claims(self, pod: str, claims: tuple[tuple[str, Allocation], ...]) -> None: ...

    def lift_claim(self, claim: ResourceClaim, lifted: bool = True) -> None: ...


class Held(Struct, frozen=True):
    """A holding was charged (or waits for its node): undone by taking it back."""

    holding: Holding

    def undo(self, target: Target) -> None:
        target.unhold(self.holding)


class Released(Struct, frozen=True):
    """A holding was released: undone by holding it again."""

    holding: Holding

    def undo(self, target: Target) -> None:
        target.hold(self.holding)


class Recorded(Struct, frozen=True):
    """A pod's record was put or dropped: ``before`` is what it was (None: no record)."""

    key: str
    before: PodRecord | None

    def undo(self, target: Target) -> None:
        if self.before is not None:
            target.put_record(self.before)
        else:
            target.drop_record(self.key)


class Renominated(Struct, frozen=True):
    """A preemptor's nomination was given or lifted: ``before`` is what it was (None: none)."""

    pod: str
    before: Nominated | None

    def undo(self, target: Target) -> None:
        if self.before is not None:
            target.nominate(self.before)
        else:
            target.unnominate(self.pod)


class ClaimsAssumed(Struct, frozen=True):
    """The DRA allocations a pod's placement makes were assumed or dropped: ``before`` is what
    the pod had assumed (snapshot/devices.py)."""

    pod: str
    before: tuple[tuple[str, Allocation], ...]

    def undo(self, target: Target) -> None:
        target.assume_claims(self.pod, self.before)


class ClaimLifted(Struct, frozen=True):
    """A claim's written allocation was lifted (counted as gone) or counted again."""

    claim: ResourceClaim
    lifted: bool

    def undo(self, target: Target) -> None:
        target.lift_claim(self.claim, not self.lifted)


Operation = Held | Released | Recorded | Renominated | ClaimsAssumed | ClaimLifted


class UndoLog:
    """The open scope's operations (None outside one)."""

    __slots__ = ("_ops", "_reverting")

    def __init__(self) -> None:
        self._ops: list[Operation] | None = None
        self._reverting = False

    @property
    def open(self) -> bool:
        """Inside a tentative scope."""
        return self._ops is not None

    @property
    def reverting(self) -> bool:
        """A scope's operations are being undone: a change restores a state logged, exactly."""
        return self._reverting

    def __len__(self) -> int:
        return len(self._ops) if self._ops is not None else 0

    def log(self, op: Operation) -> None:
        """Log a change made inside a scope (outside one, or while reverting: nothing)."""
        if self._ops is not None and not self._reverting:
            self._ops.append(op)

    @contextmanager
    def scope(self, target: Target) -> Iterator[None]:
        """A scope whose changes are reverted on exit, whatever happens in it."""
        outer = self._ops is None
        if self._ops is None:
            self._ops = []
        ops = self._ops
        mark = len(ops)
        try:
            yield
        finally:
            self._reverting = True
            try:
                while len(ops) > mark:
                    ops.pop().undo(target)
            finally:
                self._reverting = False
            if outer:
                self._ops = None
