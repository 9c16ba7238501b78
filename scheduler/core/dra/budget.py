"""The allocator's bounds: deterministic work budgets instead of kube-scheduler's clock.

kube-scheduler bounds one node's Filter by a 10 s timeout (DRASchedulerFilterTimeout) and each
CEL evaluation by a cost limit. The core reads no clock, so it counts instead: the devices the
search tries (``steps``) and the selector evaluations it makes (``evaluations``, memo hits free).
A budget is spent by one ``allocate`` call (one pod on one node). Running out before any solution
is found refuses the node with a reason ("timed out trying to allocate devices", as there);
running out after one is found ends the search for a better-connected one (choice.py) and keeps
the best found so far. The same input always gives the same answer. The bounds are the
``dra`` settings (core/settings.py ``DraLimits``, docs/configuration.md).
"""

from __future__ import annotations

from ..settings import DraLimits


class Budget:
    """What is left of a ``DraLimits`` during one allocation."""

    __slots__ = ("evaluations", "exhausted", "limits", "solutions", "steps")

    def __init__(self, limits: DraLimits) -> None:
        self.limits = limits
        self.steps = limits.steps
        self.evaluations = limits.evaluations
        self.solutions = limits.solutions
        self.exhausted = False

    def spend_step(self) -> bool:
        if self.steps <= 0:
            self.exhausted = True
            return False
        self.steps -= 1
        return True

    def spend_evaluation(self) -> bool:
        if self.evaluations <= 0:
            self.exhausted = True
            return False
        self.evaluations -= 1
        return True

    def spend_solution(self) -> bool:
        """Count one complete solution; False once enough have been compared."""
        self.solutions -= 1
        return self.solutions > 0
