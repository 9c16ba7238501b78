"""The scheduling queue, after kube-scheduler's: active, backoff and unschedulable pods.

- active: pods ready for a scheduling attempt, in kube-scheduler's PrioritySort order: higher
  ``spec.priority`` first, then older ``creationTimestamp``, then the order they became ready;
  with one tier above priority: a member of a gang being completed (some of its members bound
  or assumed, fewer than its minimum) goes before every other pod (docs/gangs.md, "Queue
  order"). Its GPUs are what a previous leader held for it (a hold a store failover may have
  lost, sim seed 549); any pod taking them first, of its priority (seed 549) or of a higher one
  that then fits without preempting (seeds 909, 3118), would leave the gang partial for good,
  the cross-gang deadlock the gangs rule out. A higher priority still wins by preemption, as it
  would against the hold itself: it evicts a whole unit (the gang, or another) if it no longer
  fits; and a lower-priority member never takes GPUs nominated for a higher preemptor.
  The tier is read from the snapshot at the pod's turn, not frozen at enqueue: the injected
  ``completing`` says whether a gang is being completed, and every pop first re-reads it for
  the gangs whose bound members changed since (``gangs_changed``, ``regang``; after a
  failover the bound pods' LIST may arrive after the pending members were queued);
- backoff: pods whose last attempt failed for a reason that may pass by itself (a store conflict,
  an apiserver error); they wait ``initial_backoff_s`` (1 s by default), doubling per attempt up
  to ``max_backoff_s`` (10 s);
- unschedulable: pods the core found no place for; they wait for a cluster event that could help
  (a node added or changed, GPUs freed, a gang member arrived) and at the latest
  ``max_unschedulable_s`` (5 minutes). A pod whose attempt was under way when a cluster event
  moved every waiting pod (``on_cluster_event``) goes to backoff instead: its decision was
  taken on a snapshot from before the event, which moved nobody for it (kube-scheduler's
  moveRequestCycle). An attempt awaits the store (its reservation, a preemption's nominations,
  which wait seconds on a slow or unreachable store): GPUs freed meanwhile left the pod
  unschedulable beside them, with the reason of the snapshot before, for the 5 minutes
  (issue 30, sim seed 1541).

The three are settings (run.tuning.podInitialBackoffSeconds, podMaxBackoffSeconds,
podMaxUnschedulableSeconds), as kube-scheduler's are.

The queue holds pod keys only; the pods themselves live in the pod book, so an update never
leaves a stale copy here. A pod moves in it only by the book's effects (effects.py); the loop
pops, and a cluster event (a node, a budget changed) retries every waiting pod. It is
synchronous and reads time only through the injected clock, so tests step it by hand.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable


class SchedulingQueue:
    def __init__(
        self,
        clock: Callable[[], float],
        *,
        initial_backoff_s: float,
        max_backoff_s: float,
        max_unschedulable_s: float,
        completing: Callable[[str], bool] | None = None,
        gangs_changed: Callable[[], set[str]] | None = None,
    ) -> None:
        self._clock = clock
        # Whether a gang is being completed, and which gangs' bound members changed since the
        # last call (module doc); None: no gang ever is, or changes.
        self._completing = completing
        self._gangs_changed = gangs_changed
        self._initial_backoff_s = initial_backoff_s
        self._max_backoff_s = max_backoff_s
        self._max_unschedulable_s = max_unschedulable_s
        self._seq = 0
        # (tier, -priority, created, seq, key) heap; tier 0: a gang being completed (module doc)
        self._active: list[tuple[int, int, str, int, str]] = []
        self._rank: dict[str, tuple[int, str]] = {}  # key -> (-priority, created) while queued
        self._gang: dict[str, str] = {}  # key -> its gang while queued
        self._members: dict[str, set[str]] = {}  # gang -> its queued keys
        self._first: set[str] = set()  # the active keys whose live entry is in tier 0
        self._in_active: dict[str, int] = {}  # key -> seq of its live heap entry
        self._backoff: dict[str, float] = {}  # key -> time it may be retried
        self._unschedulable: dict[str, float] = {}  # key -> time it is retried at the latest
        self._attempts: dict[str, int] = {}
        self._last_attempt: dict[str, float] = {}
        # Attempts begun (pops), the attempt each pod under way was taken in, and the attempts
        # begun when a cluster event last moved every waiting pod (module doc).
        self._cycles = 0
        self._taken_in: dict[str, int] = {}
        self._moved_at = 0

    # ---- arrivals --------------------------------------------------------------------------

    def add(self, key: str, priority: int = 0, created: str = "", gang: str | None = None) -> None:
        """A pending pod appeared or changed: make it ready now, unless it is backing off."""
        self._rank[key] = (-priority, created)
        self._join(key, gang)
        if key in self._in_active or key in self._backoff:
            return
        self._unschedulable.pop(key, None)
        self._push(key)

    def delete(self, key: str) -> None:
        self._in_active.pop(key, None)  # its heap entry goes stale and is skipped
        self._backoff.pop(key, None)
        self._unschedulable.pop(key, None)
        self._attempts.pop(key, None)
        self._last_attempt.pop(key, None)
        self._rank.pop(key, None)
        self._taken_in.pop(key, None)
        self._join(key, None)
        self._first.discard(key)
        self._compact()

    def _join(self, key: str, gang: str | None) -> None:
        """Index ``key`` under its gang (None: under none), for ``regang``."""
        old = self._gang.pop(key, None)
        if old is not None:
            keys = self._members[old]
            keys.discard(key)
            if not keys:
                del self._members[old]
        if gang is not None:
            self._gang[key] = gang
            self._members.setdefault(gang, set()).add(key)

    def regang(self) -> None:
        """The gangs whose bound members changed: their active members whose tier changed
        with it take their new place (a new heap entry; the old one goes stale). Every pop
        does it first; a standby's loop, which pops nothing, does it too, so the changes
        taken stay few and its queue is in order when it leads."""
        if self._gangs_changed is None:
            return
        for gang in self._gangs_changed():
            for key in list(self._members.get(gang, ())):
                if key in self._in_active and (self._tier(key) == 0) != (key in self._first):
                    self._push(key)
        self._compact()

    def _tier(self, key: str) -> int:
        gang = self._gang.get(key)
        first = gang is not None and self._completing is not None and self._completing(gang)
        return 0 if first else 1

    def _compact(self) -> None:
        """Drop the heap's stale entries once they outnumber the live ones: a queue that is
        never popped (a standby's) stays as large as its pods, not as all pods ever seen; one
        with no live entry left is emptied."""
        if not self._in_active:
            self._active.clear()
        elif len(self._active) > 2 * len(self._in_active) + 64:
            self._active = [e for e in self._active if self._in_active.get(e[4]) == e[3]]
            heapq.heapify(self._active)

    def sizes(self) -> dict[str, int]:
        """The size of every per-pod structure (for tests and the soak benchmark)."""
        return {
            "heap": len(self._active),
            "active": len(self._in_active),
            "backoff": len(self._backoff),
            "unschedulable": len(self._unschedulable),
            "attempts": len(self._attempts),
            "last_attempt": len(self._last_attempt),
            "rank": len(self._rank),
            "gang": len(self._gang),
            "first": len(self._first),
            "taken": len(self._taken_in),
        }

    def done(self, key: str) -> None:
        """The pod was scheduled: forget its attempts."""
        self.delete(key)

    # ---- after an attempt ------------------------------------------------------------------

    def backoff(
        self, key: str, priority: int | None = None, created: str = "", gang: str | None = None
    ) -> float:
        """The attempt failed transiently: retry after the pod's backoff. Returns the delay.
        ``priority`` (with ``created`` and ``gang``) restores the pod's rank when it left the
        queue in between (assumed, then its bind failed)."""
        if priority is not None:
            self._rank[key] = (-priority, created)
            self._join(key, gang)
        delay = self._record_attempt(key)
        self._in_active.pop(key, None)
        self._first.discard(key)
        self._unschedulable.pop(key, None)
        self._taken_in.pop(key, None)
        self._backoff[key] = self._clock() + delay
        self._compact()
        return delay

    def unschedulable(self, key: str, retry_by: float | None = None) -> None:
        """No place now: wait for a cluster event, or ``max_unschedulable_s`` at most (less when
        ``retry_by``, a clock time, comes sooner: a gang's wait timeout changes its reason). An
        attempt during which a cluster event moved every waiting pod backs off instead."""
        taken = self._taken_in.pop(key, None)
        if taken is not None and taken <= self._moved_at:
            self.backoff(key)
            return
        self._record_attempt(key)
        self._in_active.pop(key, None)
        self._first.discard(key)
        self._backoff.pop(key, None)
        self._compact()
        latest = self._clock() + self._max_unschedulable_s
        self._unschedulable[key] = latest if retry_by is None else min(latest, retry_by)

    def activate(self, key: str) -> None:
        """Ready now, backoff or not: what it waited for has happened (a preemptor whose last
        victim left: its GPUs are held for it, and nobody else may take them meanwhile)."""
        if key in self._in_active or not (key in self._backoff or key in self._unschedulable):
            return
        self._backoff.pop(key, None)
        self._unschedulable.pop(key, None)
        self._push(key)

    def waiting(self) -> list[str]:
        """The pods waiting for a cluster event (unschedulable)."""
        return list(self._unschedulable)

    def retry(self, keys: list[str]) -> None:
        """These unschedulable pods may fit now: to active, or backoff while it runs."""
        now = self._clock()
        for key in keys:
            if self._unschedulable.pop(key, None) is None:
                continue
            ready = self._last_attempt.get(key, now) + self._delay(key)
            if ready <= now:
                self._push(key)
            else:
                self._backoff[key] = ready

    def on_cluster_event(self) -> int:
        """Something changed that could help: every unschedulable pod moves to the active queue,
        or to backoff while its backoff since its last attempt has not run out (kube-scheduler's
        MoveAllToActiveOrBackoffQueue). Returns how many moved."""
        now = self._clock()
        self._moved_at = self._cycles  # the attempts under way miss it (module doc)
        moved = list(self._unschedulable)
        self._unschedulable.clear()
        for key in moved:
            ready = self._last_attempt.get(key, now) + self._delay(key)
            if ready <= now:
                self._push(key)
            else:
                self._backoff[key] = ready
        return len(moved)

    def _delay(self, key: str) -> float:
        attempts = max(1, self._attempts.get(key, 1))
        return float(min(self._max_backoff_s, self._initial_backoff_s * 2 ** (attempts - 1)))

    def _record_attempt(self, key: str) -> float:
        self._attempts[key] = self._attempts.get(key, 0) + 1
        self._last_attempt[key] = self._clock()
        return self._delay(key)

    # ---- taking work -----------------------------------------------------------------------

    def flush(self) -> None:
        """Move pods whose backoff ran out, or that waited too long as unschedulable, to active."""
        now = self._clock()
        for key, ready in sorted(self._backoff.items(), key=lambda item: item[1]):
            if ready <= now:
                del self._backoff[key]
                self._push(key)
        for key, latest in list(self._unschedulable.items()):
            if latest <= now:
                del self._unschedulable[key]
                self._push(key)

    def pop(self) -> str | None:
        self.flush()
        self.regang()
        while self._active:
            _, _, _, seq, key = heapq.heappop(self._active)
            if self._in_active.get(key) == seq:
                del self._in_active[key]
                self._first.discard(key)
                self._cycles += 1
                self._taken_in[key] = self._cycles
                return key
        return None

    def take(self, key: str) -> bool:
        """Remove ``key`` from wherever it waits (a gang member decided with another). True if
        it was queued."""
        queued = key in self._in_active or key in self._backoff or key in self._unschedulable
        self._taken_in[key] = self._cycles  # the attempt under way: the pop's
        self._in_active.pop(key, None)
        self._first.discard(key)
        self._backoff.pop(key, None)
        self._unschedulable.pop(key, None)
        self._compact()
        return queued

    def next_wakeup(self) -> float | None:
        """The clock time at which flush() will next have something to move, if any."""
        times = list(self._backoff.values())
        times += self._unschedulable.values()
        return min(times) if times else None

    def counts(self) -> dict[str, int]:
        return {
            "active": len(self._in_active),
            "backoff": len(self._backoff),
            "unschedulable": len(self._unschedulable),
        }

    def attempts(self, key: str) -> int:
        return self._attempts.get(key, 0)

    def _push(self, key: str) -> None:
        """Into the active heap, in its tier as the snapshot says now (module doc); entries of
        equal rank (creationTimestamp has whole seconds) keep the order in which they became
        ready, by sequence number."""
        self._seq += 1
        self._in_active[key] = self._seq
        priority, created = self._rank.get(key, (0, ""))
        tier = self._tier(key)
        if tier == 0:
            self._first.add(key)
        else:
            self._first.discard(key)
        heapq.heappush(self._active, (tier, priority, created, self._seq, key))
