"""The scheduling queue, stepped by hand with a fake clock."""

from __future__ import annotations

from scheduler.config.tuning import Tuning
from scheduler.service.queue import SchedulingQueue
from tests.clock import ManualClock

DEFAULTS = Tuning()
MAX_WAIT_S = DEFAULTS.pod_max_unschedulable_seconds


def queue(clock: ManualClock) -> SchedulingQueue:
    """A queue with the default backoffs (run.tuning)."""
    return SchedulingQueue(
        clock,
        initial_backoff_s=DEFAULTS.pod_initial_backoff_seconds,
        max_backoff_s=DEFAULTS.pod_max_backoff_seconds,
        max_unschedulable_s=MAX_WAIT_S,
    )


def test_fifo_and_no_duplicates() -> None:
    q = queue(ManualClock(100.0))
    for key in ("a", "b", "a", "c"):
        q.add(key)
    assert [q.pop(), q.pop(), q.pop(), q.pop()] == ["a", "b", "c", None]


def test_backoff_doubles_up_to_the_maximum() -> None:
    clock = ManualClock(100.0)
    q = queue(clock)
    q.add("p")
    delays = []
    for _ in range(6):
        assert q.pop() == "p"
        delays.append(q.backoff("p"))
        assert q.pop() is None  # still backing off
        clock.now += delays[-1]
    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert DEFAULTS.pod_initial_backoff_seconds == 1.0 and DEFAULTS.pod_max_backoff_seconds == 10.0
    assert q.pop() == "p"


def test_unschedulable_waits_for_an_event_or_five_minutes() -> None:
    clock = ManualClock(100.0)
    q = queue(clock)
    q.add("p")
    assert q.pop() == "p"
    q.unschedulable("p")
    clock.now += 60
    assert q.pop() is None
    assert q.counts() == {"active": 0, "backoff": 0, "unschedulable": 1}
    assert q.next_wakeup() == 100.0 + MAX_WAIT_S
    clock.now = 100.0 + MAX_WAIT_S
    assert q.pop() == "p"


def test_unschedulable_with_a_sooner_deadline_is_retried_then() -> None:
    clock = ManualClock(100.0)
    q = queue(clock)
    q.add("member")
    q.add("late")
    assert [q.pop(), q.pop()] == ["member", "late"]
    q.unschedulable("member", retry_by=130.0)  # a gang's wait timeout runs out at 130
    q.unschedulable("late", retry_by=100.0 + 2 * MAX_WAIT_S)  # capped
    assert q.next_wakeup() == 130.0
    clock.now = 129.0
    assert q.pop() is None
    clock.now = 130.0
    assert q.pop() == "member"
    assert q.next_wakeup() == 100.0 + MAX_WAIT_S


def test_cluster_event_moves_unschedulable_pods_respecting_backoff() -> None:
    clock = ManualClock(100.0)
    q = queue(clock)
    q.add("often")
    for _ in range(3):
        assert q.pop() == "often"
        q.unschedulable("often")
        clock.now += MAX_WAIT_S
    assert q.pop() == "often"
    q.unschedulable("often")  # the fourth failed attempt: its backoff is now 8 s
    q.add("once")
    assert q.pop() == "once"
    q.unschedulable("once")  # one failed attempt: backoff 1 s
    clock.now += 1.5
    assert q.on_cluster_event() == 2
    assert q.counts() == {"active": 1, "backoff": 1, "unschedulable": 0}
    assert q.pop() == "once"
    assert q.pop() is None
    clock.now += 6  # 7.5 s after its last attempt
    assert q.pop() is None
    clock.now += 0.5
    assert q.pop() == "often"


def test_delete_and_take_remove_a_pod_wherever_it_waits() -> None:
    clock = ManualClock(100.0)
    q = queue(clock)
    q.add("a")
    q.add("b")
    q.delete("a")
    assert q.take("b") is True
    assert q.take("b") is False
    assert q.pop() is None
    q.add("c")
    assert q.pop() == "c"
    q.backoff("c")
    q.done("c")
    assert q.counts() == {"active": 0, "backoff": 0, "unschedulable": 0}
    assert q.attempts("c") == 0


def test_a_pod_whose_bind_failed_keeps_its_priority() -> None:
    clock = ManualClock()
    q = queue(clock)
    q.add("high", 100, "2026-01-01T00:00:00Z")
    q.add("low", 0, "2026-01-01T00:00:00Z")
    assert q.pop() == "high"
    q.done("high")  # assumed; then its bind fails and it backs off with its rank
    q.backoff("high", 100, "2026-01-01T00:00:00Z")
    clock.now += 60
    assert q.pop() == "high"
    assert q.pop() == "low"


def test_activate_skips_the_backoff_of_a_queued_pod_only() -> None:
    q = queue(ManualClock(100.0))
    q.add("p")
    assert q.pop() == "p"
    q.backoff("p")
    q.add("u")
    assert q.pop() == "u"
    q.unschedulable("u")
    assert q.pop() is None
    q.activate("p")
    q.activate("u")
    q.activate("gone")  # not queued: nothing happens
    assert [q.pop(), q.pop(), q.pop()] == ["p", "u", None]
    assert q.counts() == {"active": 0, "backoff": 0, "unschedulable": 0}


def test_a_gang_being_completed_goes_first() -> None:
    """Sim seeds 549, 909, 3118 (queue.py): the tier is read at the pod's turn. j's bound
    members change after its member was queued; the change is taken at the next pop, and j-1
    goes before the older a of its priority and before h of a higher one."""
    bound: set[str] = set()
    changed: set[str] = set()

    def take() -> set[str]:
        taken = set(changed)
        changed.clear()
        return taken

    q = SchedulingQueue(
        ManualClock(100.0),
        initial_backoff_s=DEFAULTS.pod_initial_backoff_seconds,
        max_backoff_s=DEFAULTS.pod_max_backoff_seconds,
        max_unschedulable_s=MAX_WAIT_S,
        completing=lambda gang: gang in bound,
        gangs_changed=take,
    )
    q.add("a", 0, "2026-01-01T00:00:00Z")
    q.add("j-1", 0, "2026-01-01T00:01:00Z", gang="j")
    q.add("h", 5, "2026-01-01T00:02:00Z")
    bound.add("j")
    changed.add("j")
    assert [q.pop(), q.pop(), q.pop()] == ["j-1", "h", "a"]
    q.add("j-1", 0, "2026-01-01T00:01:00Z", gang="j")
    q.add("a", 0, "2026-01-01T00:00:00Z")
    q.add("h", 5, "2026-01-01T00:02:00Z")
    bound.clear()  # the gang is complete (or lost its bound members): plain PrioritySort
    changed.add("j")
    assert [q.pop(), q.pop(), q.pop(), q.pop()] == ["h", "a", "j-1", None]
