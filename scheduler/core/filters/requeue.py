"""Which waiting pods an event may help (kube-scheduler's queueing hints, for a pod added to a
node): a pod found unschedulable is retried when a pod appears bound only if that pod could
satisfy one of its required pod-affinity terms, or count for one of its DoNotSchedule topology
spread constraints. Anti-affinity cannot be helped by a pod arriving, nor can resources.
Otherwise every bind in a backlog would send every waiting pod back to the queue.
"""

from __future__ import annotations

from ..model.labels import selector_matches
from ..model.objects import PodAffinityTerm, PodInput


def helped_by_added(waiting: PodInput, added: PodInput) -> bool:
    """Whether ``added`` appearing on a node may make ``waiting`` schedulable."""
    affinity = waiting.affinity
    if affinity is not None and any(_in_term(t, waiting, added) for t in affinity.pod_required):
        return True
    return any(
        c.when_unsatisfiable == "DoNotSchedule"
        and added.namespace == waiting.namespace
        and selector_matches(c.label_selector, added.labels)
        for c in waiting.spread
    )


def _in_term(term: PodAffinityTerm, waiting: PodInput, added: PodInput) -> bool:
    if term.namespace_selector is None:
        namespaces = term.namespaces or (waiting.namespace,)
        if added.namespace not in namespaces:
            return False
    # A namespace selector is not evaluated here: a retry it did not need costs one attempt.
    return selector_matches(term.label_selector, added.labels)
