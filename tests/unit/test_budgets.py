"""PodDisruptionBudgets as preemption weighs them (core/preemption/budgets.py: kube-scheduler's
filterPodsWithPDBViolation), and their decoding from policy/v1 JSON (kube/budgets.py)."""

from __future__ import annotations

import msgspec

from scheduler.core.model.objects import DisruptionBudgetInput, LabelSelector, Requirement
from scheduler.core.preemption.budgets import Budgets
from scheduler.core.snapshot.podindex import PodRecord
from scheduler.kube.budgets import PodDisruptionBudget, budget_from_obj
from scheduler.kube.podgroups import eviction_body


def record(name: str, priority: int = 0, created: str = "", ns: str = "default") -> PodRecord:
    return PodRecord(
        key=f"{ns}/{name}",
        namespace=ns,
        node="n",
        labels={"app": "web"},
        priority=priority,
        created=created,
    )


def web(allowed: int, disrupted: frozenset[str] = frozenset(), ns: str = "default") -> Budgets:
    b = DisruptionBudgetInput(
        namespace=ns,
        name="web",
        selector=LabelSelector(match_labels={"app": "web"}),
        allowed=allowed,
        disrupted=disrupted,
    )
    return Budgets({b.key: b})


def test_the_victims_beyond_the_budget_violate_it_least_important_first() -> None:
    pods = [record("a", 5, "2026-01-01"), record("b", 1), record("c", 5, "2026-01-02")]
    # Most important first: a (5, older), c (5), b (1): the budget of one lets a go.
    assert [r.key for r in web(1).violating(pods)] == ["default/c", "default/b"]
    assert web(3).count(pods) == 0
    assert web(0).count(pods) == 3


def test_pods_the_apiserver_already_counted_and_other_namespaces_take_nothing() -> None:
    pods = [record("a"), record("b")]
    assert web(1, frozenset({"a"})).count(pods) == 0  # a is in disruptedPods
    assert web(0, ns="other").count(pods) == 0


def test_a_budget_without_a_selector_or_with_an_empty_one_covers_no_pod() -> None:
    pods = [record("a")]
    for selector in (None, LabelSelector()):
        b = DisruptionBudgetInput(namespace="default", name="x", selector=selector, allowed=0)
        assert not Budgets({b.key: b}) and Budgets({b.key: b}).count(pods) == 0
    expr = LabelSelector(match_expressions=(Requirement("app", "In", ("web",)),))
    b = DisruptionBudgetInput(namespace="default", name="x", selector=expr, allowed=0)
    assert Budgets({b.key: b}).count(pods) == 1


def test_a_budget_decodes_from_policy_v1() -> None:
    raw = {
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "9"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": 2},
        "status": {"disruptionsAllowed": 1, "disruptedPods": {"web-0": "2026-01-01T00:00:00Z"}},
    }
    budget = budget_from_obj(msgspec.convert(raw, PodDisruptionBudget))
    assert budget == DisruptionBudgetInput(
        namespace="shop",
        name="web",
        selector=LabelSelector(match_labels={"app": "web"}),
        allowed=1,
        disrupted=frozenset({"web-0"}),
    )
    bare = budget_from_obj(msgspec.convert({"metadata": {"name": "x"}}, PodDisruptionBudget))
    assert (bare.selector, bare.allowed) == (None, 0)


def test_a_dry_run_eviction_asks_the_apiserver_to_change_nothing() -> None:
    assert eviction_body("ns", "p", "u", dry_run=True)["deleteOptions"] == {
        "preconditions": {"uid": "u"},
        "dryRun": ["All"],
    }
    assert "dryRun" not in eviction_body("ns", "p", "u")["deleteOptions"]
