"""Selector matching, as apimachinery's labels and nodeaffinity packages define it.

- A label selector (``LabelSelector``) matches when every matchLabels pair and every
  matchExpressions requirement holds (In, NotIn, Exists, DoesNotExist). An empty selector matches
  every set of labels; a missing one (None) matches none.
- A node selector term (``NodeSelectorTerm``) matches when all its matchExpressions (also Gt and Lt,
  comparing whole numbers) and matchFields (only ``metadata.name``, with In and NotIn) hold; a term
  with neither matches no node. Terms are ORed.
- NotIn and DoesNotExist hold for a missing key, as in Kubernetes.

Malformed selectors cannot reach here: the apiserver validates them, and the shell's decoder
rejects an unknown operator before the core sees the pod (``parse_operator``'s callers).
"""

from __future__ import annotations

from collections.abc import Mapping

from .objects import LabelSelector, NodeSelectorTerm, Requirement

LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
NODE_OPERATORS = LABEL_OPERATORS | {"Gt", "Lt"}


def requirement_holds(req: Requirement, labels: Mapping[str, str]) -> bool:
    op = req.operator
    if op == "In":
        value = labels.get(req.key)
        return value is not None and value in req.values
    if op == "NotIn":
        value = labels.get(req.key)
        return value is None or value not in req.values
    if op == "Exists":
        return req.key in labels
    if op == "DoesNotExist":
        return req.key not in labels
    if op in ("Gt", "Lt"):
        value = labels.get(req.key)
        if value is None or len(req.values) != 1:
            return False
        try:
            have, want = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    return all(requirement_holds(r, labels) for r in selector.match_expressions)


def term_matches(term: NodeSelectorTerm, name: str, labels: Mapping[str, str]) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False
    for req in term.match_fields:
        # metadata.name is the only field the API allows; anything else matches nothing.
        if req.key != "metadata.name" or not requirement_holds(req, {req.key: name}):
            return False
    return all(requirement_holds(r, labels) for r in term.match_expressions)


def terms_match(terms: tuple[NodeSelectorTerm, ...], name: str, labels: Mapping[str, str]) -> bool:
    """Required node affinity (or a PersistentVolume's): any term matches."""
    return any(term_matches(t, name, labels) for t in terms)
