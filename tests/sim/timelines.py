"""Schedules written by hand in the simulation's own vocabulary (``SimMachine``'s rules), for
timelines the random search has not reached within its budget yet: each proves the world can
express the timeline, and is replayed by ``soak.py --timelines`` (each one's violations, or
"holds"). When the bug is fixed, the timeline must hold.
"""

from __future__ import annotations

from collections.abc import Callable

from .machine import SimMachine


def inheritance_by_name(m: SimMachine) -> None:
    """Issue 30 bug 3: election inheritance matches store records by pod name, not UID. The
    standby (r2) saw a (uid1) bound on n1/0; its bound watch lags and its pending watch
    re-lists after a was recreated (uid2, 2 GPUs) and bound by r1 on n1/0,1, so r2's book still
    holds uid1 under the name; a rolling update makes r2 leader, which does not inherit uid2's
    record (the name is known) and binds c on n1/1."""
    m.create_pod("a", 1, False)
    m.create_pod("b", 2, False)
    m.tick(16.0)
    m.tick(2.0)
    m.lag(1, "bound", 20.0)
    m.lag(1, "pending", 5.0)
    m.recreate_pod(0, 2)
    m.tick(2.0)
    m.relist(1, "pending")
    m.create_pod("c", 1, False)
    m.tick(5.0)
    m.handover()
    m.tick(5.0)
    m.tick(5.0)
    m.safe()
    m.quiesce()


TIMELINES: dict[str, Callable[[SimMachine], None]] = {
    "30.3-inheritance-by-name": inheritance_by_name,
}


def replay(name: str) -> str | None:
    """The timeline ``name`` on a fresh world: its violation, or None when it holds."""
    machine = SimMachine()
    try:
        TIMELINES[name](machine)
    except AssertionError as exc:
        return str(exc)
    finally:
        machine.teardown()
    return None
