"""Mutants: each puts one fixed bug of issues 12 and 20 back into the live scheduler for a run,
so that the simulation can show it finds it (a simulation that finds none tests nothing).

A mutant is a list of patches applied to the fixed code and undone after the run: a pod book
TABLE cell set back to what it was before the fix, or a function replaced by the old body.
Production code knows nothing of them. ``applied(name)`` is the context manager soak.py uses
(``--mutant NAME`` or ``--mutant all``).

Issue 30's bugs are not fixed yet: the simulation finds them on main as it is (soak.py without
a mutant). When they are fixed, each gets its mutant here the same way.

Bugs no mutant stands for, because the world does not model what triggers them: 12.4 (node
deletion), 12.5 (store failures), 12.8-12.12 (sizes, memory, device plugin, debug endpoint),
20.5 (PodDisruptionBudgets), 20.6 (a crashing unit).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from scheduler.core.model.decisions import Placement
from scheduler.core.model.objects import PodInput
from scheduler.service import binder as binder_module
from scheduler.service.binder import Binder
from scheduler.service.intake import Intake
from scheduler.service.podbook import TABLE, Effect, Event, Stage
from scheduler.service.scheduler import Scheduler
from scheduler.service.storesync import StoreSync

S, E, F = Stage, Event, Effect

# One patch: (an object and an attribute name) or (a dict and a key), and the value to put.
Patch = tuple[Any, Any, Any]


# Rules and faults a mutant hunt leaves out unless the mutant needs them: they find issue 30's
# bugs on main within seconds, and every seed would fail with and without the mutant.
MAIN_BUGS = frozenset({"restart_gang", "etcd_restore", "slow", "flush_store", "claims"})


@dataclass(frozen=True)
class Mutant:
    bug: str
    patches: Callable[[], list[Patch]]
    needs: frozenset[str] = frozenset()  # of MAIN_BUGS, what reaches the bug
    without: frozenset[str] = frozenset()  # further rules left out (they hide it)

    def disabled(self) -> frozenset[str]:
        return (MAIN_BUGS - self.needs) | self.without


def _relist_frees_assumed() -> list[Patch]:
    """12.1: the end of a bound re-list frees a pod we bound while the LIST was in transit."""
    return [(TABLE, (S.ASSUMED, E.BOUND_MISSING), TABLE[S.BOUND, E.BOUND_MISSING])]


def _conflict_is_failure() -> list[Patch]:
    """12.2: a 409 (or 404) counts as a failed bind, without reading where the pod is bound."""
    original = Binder._read_back

    async def read_back(
        self: Binder, pod: PodInput, placement: Placement, uncertain: bool
    ) -> tuple[Event, PodInput | None]:
        if not uncertain:
            return Event.BIND_FAILED, None
        return await original(self, pod, placement, uncertain)

    return [(Binder, "_read_back", read_back)]


def _unfenced_binding() -> list[Patch]:
    """12.3: a Binding is sent whenever the replica leads, however little lease is left."""

    def may_send(self: Binder) -> bool:
        return self.leadership.leading

    return [(Binder, "may_send", may_send)]


def _no_wait_after_flush() -> list[Patch]:
    """12.3: a leader that cannot know who led before (a flushed store) decides at once."""

    def may_decide(self: Scheduler) -> bool:
        return self.accepting and self.ready_to_schedule and self.leadership.leading

    return [(Scheduler, "may_decide", may_decide)]


def _deleted_while_binding_held() -> list[Patch]:
    """12.6: a pod deleted while its Binding is in flight stays held (and recorded bound)."""
    return [
        (TABLE, (S.BINDING, E.PENDING_ENDED), (S.BINDING, ())),
        (TABLE, (S.BINDING, E.BIND_GONE), (S.ASSUMED, (F.MARK_BOUND,))),
    ]


def _reloaded_deleted_held() -> list[Patch]:
    """12.7: a reloaded reservation of a pod deleted before its turn stays held."""
    return [
        (TABLE, (S.RELOADED, E.PENDING_ENDED), (S.RELOADED, ())),
        (TABLE, (S.RELOADED, E.CHECKED_GONE), (S.RELOADED, ())),
    ]


def _others_never_uncharged() -> list[Patch]:
    """20.1: another scheduler's pod is charged when it appears bound, never uncharged."""
    return [
        (TABLE, (S.OTHER, E.BOUND_ENDED), (S.GONE, ())),
        (TABLE, (S.OTHER, E.BOUND_MISSING), (S.GONE, ())),
        (TABLE, (S.OTHER, E.REPLACED), (S.GONE, ())),
    ]


def _stale_news_trusted() -> list[Patch]:
    """20.2: an event older than what the book knows (an old UID's LIST page) is taken in."""

    def older(self: Intake, pod: PodInput) -> bool:
        return False

    return [(Intake, "older", older)]


def _nothing_inherited() -> list[Patch]:
    """20.3: a new leader inherits no store record of a pod it has not seen yet."""

    def unknown(self: StoreSync, records: Any) -> list[Any]:
        return []

    return [(StoreSync, "unknown", unknown)]


def _one_read_settles() -> list[Patch]:
    """20.4: an uncertain Binding is settled by one read: still pending = failed."""
    original = binder_module.settle

    def settle(
        pod: PodInput, placement: Placement, current: PodInput | None, uncertain: bool = False
    ) -> tuple[Event, PodInput | None]:
        return original(pod, placement, current, False)

    return [(binder_module, "settle", settle)]


MUTANTS: dict[str, Mutant] = {
    "12.1-relist-frees-in-flight-bind": Mutant(
        "a bound re-list older than our bind frees it", _relist_frees_assumed
    ),
    "12.2-409-counted-as-failed": Mutant(
        "a 409 counts as a failed bind although the pod is bound", _conflict_is_failure
    ),
    "12.3-binding-not-fenced": Mutant(
        "a Binding is sent with less lease left than its timeout",
        _unfenced_binding,
        needs=frozenset({"flush_store"}),
    ),
    "12.3-no-wait-after-flush": Mutant(
        "after a FLUSHALL the new leader decides before the old one's Bindings ended",
        _no_wait_after_flush,
        needs=frozenset({"flush_store"}),
    ),
    "12.6-deleted-while-binding-held": Mutant(
        "a pod deleted while its Binding is in flight stays held", _deleted_while_binding_held
    ),
    "12.7-reloaded-deleted-held": Mutant(
        "a reloaded reservation of a pod deleted before its turn stays held",
        _reloaded_deleted_held,
    ),
    "20.1-others-never-uncharged": Mutant(
        "pods of other schedulers are never uncharged", _others_never_uncharged
    ),
    "20.2-stale-news-trusted": Mutant(
        "news older than the book's (an old UID's LIST page) is taken in", _stale_news_trusted
    ),
    "20.3-nothing-inherited": Mutant(
        "the new leader frees the old leader's last binds", _nothing_inherited
    ),
    "20.4-one-read-settles": Mutant(
        "an uncertain bind is settled by one read-back",
        _one_read_settles,
        needs=frozenset({"slow"}),
        without=frozenset({"kill", "handover"}),
    ),
}


@contextlib.contextmanager
def applied(name: str) -> Iterator[None]:
    """The mutant ``name`` in place for the block, and the fixed code back after it."""
    patches = MUTANTS[name].patches()
    saved = [(owner, key, _get(owner, key)) for owner, key, _ in patches]
    for owner, key, value in patches:
        _set(owner, key, value)
    try:
        yield
    finally:
        for owner, key, value in reversed(saved):
            _set(owner, key, value)


def _get(owner: Any, key: Any) -> Any:
    return owner[key] if isinstance(owner, dict) else getattr(owner, key)


def _set(owner: Any, key: Any, value: Any) -> None:
    if isinstance(owner, dict):
        owner[key] = value
    else:
        setattr(owner, key, value)
