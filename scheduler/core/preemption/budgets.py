"""PodDisruptionBudgets as preemption weighs them: which victims an eviction would take below
their budget.

The rule is kube-scheduler's DefaultPreemption (``filterPodsWithPDBViolation``): the victims are
walked from the most important (highest priority, then oldest) down; each budget of the pod's
namespace whose selector matches it, and that has not already counted the pod
(``status.disruptedPods``), gives up one of its ``disruptionsAllowed``; a victim that takes any
of its budgets below zero is a violation. A budget with no selector, or an empty one, covers no
pod here (kube-scheduler's reading, although the disruption controller reads an empty selector as
every pod of the namespace).

A violation matters more here than in kube-scheduler, which deletes its victims: ours go through
the Eviction API, which refuses an eviction that would break a budget (429). So preemption ranks
candidates by violations first (a violating victim is a plan that will stall), and never offers a
gang whose whole eviction breaks a budget: the apiserver would evict members until the budget
ran out and refuse the rest, leaving a gang below its minimum (preemption/victims.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..model.labels import selector_matches
from ..model.objects import DisruptionBudgetInput
from ..snapshot.podindex import PodRecord


class Budgets:
    """The budgets of one snapshot, matched against victims; a pod's matches are computed once."""

    __slots__ = ("_by_namespace", "_matches")

    def __init__(self, budgets: Mapping[str, DisruptionBudgetInput]) -> None:
        self._by_namespace: dict[str, list[DisruptionBudgetInput]] = {}
        for key in sorted(budgets):
            budget = budgets[key]
            selector = budget.selector
            if selector is None or not (selector.match_labels or selector.match_expressions):
                continue
            self._by_namespace.setdefault(budget.namespace, []).append(budget)
        self._matches: dict[str, tuple[DisruptionBudgetInput, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_namespace)

    def of(self, record: PodRecord) -> tuple[DisruptionBudgetInput, ...]:
        """The budgets that would count ``record``'s eviction."""
        found = self._matches.get(record.key)
        if found is None:
            name = record.key.partition("/")[2]
            found = tuple(
                b
                for b in self._by_namespace.get(record.namespace, ())
                if record.labels
                and name not in b.disrupted
                and selector_matches(b.selector, record.labels)
            )
            self._matches[record.key] = found
        return found

    def violating(self, victims: Iterable[PodRecord]) -> list[PodRecord]:
        """The victims whose eviction, with the others', would break a budget (see above)."""
        if not self._by_namespace:
            return []
        left: dict[str, int] = {}
        out = []
        for record in by_importance(victims):
            broken = False
            for budget in self.of(record):
                allowed = left.get(budget.key, budget.allowed) - 1
                left[budget.key] = allowed
                broken = broken or allowed < 0
            if broken:
                out.append(record)
        return out

    def count(self, victims: Iterable[PodRecord]) -> int:
        return len(self.violating(victims)) if self._by_namespace else 0


def by_importance(victims: Iterable[PodRecord]) -> Sequence[PodRecord]:
    """Most important first: highest priority, then oldest, then by key (kube-scheduler's
    MoreImportantPod, with a last key so that the order never depends on the input's)."""
    out = sorted(victims, key=lambda r: r.key)
    out.sort(key=lambda r: r.created)
    out.sort(key=lambda r: r.priority, reverse=True)
    return out
