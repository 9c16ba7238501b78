"""policy/v1 PodDisruptionBudgets, decoded for preemption (core/preemption/budgets.py weighs them).

Only what kube-scheduler's preemption reads: the namespace, the selector, ``status
.disruptionsAllowed`` and the names in ``status.disruptedPods`` (evictions the apiserver has
already counted). A budget with no selector decodes to None, which covers no pod.
"""

from __future__ import annotations

import msgspec

from scheduler.core.model.objects import DisruptionBudgetInput

from .codec import LabelSelectorWire, ObjectMeta, _selector


class BudgetSpecWire(msgspec.Struct):
    selector: LabelSelectorWire | None = None


class BudgetStatusWire(msgspec.Struct, rename="camel"):
    disruptions_allowed: int = 0
    disrupted_pods: dict[str, str] | None = None


class PodDisruptionBudget(msgspec.Struct):
    metadata: ObjectMeta
    spec: BudgetSpecWire = msgspec.field(default_factory=BudgetSpecWire)
    status: BudgetStatusWire = msgspec.field(default_factory=BudgetStatusWire)


def budget_from_obj(budget: PodDisruptionBudget) -> DisruptionBudgetInput:
    return DisruptionBudgetInput(
        namespace=budget.metadata.namespace or "default",
        name=budget.metadata.name,
        selector=_selector(budget.spec.selector, {}),
        allowed=budget.status.disruptions_allowed,
        disrupted=frozenset(budget.status.disrupted_pods or ()),
    )
