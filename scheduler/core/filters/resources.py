"""NodeResourcesFit: the kubelet admits a pod only if the node's allocatable covers it.

What a pod asks and a node has, in kube-scheduler's units, is counted in
``resources/accounting.py`` (the snapshot charges bound pods with it); this filter only compares
the incoming pod's requests with what is left on a node.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..resources.accounting import PODS, Amounts


def insufficient(
    requests: Amounts,
    allocatable: Mapping[str, int],
    requested: Mapping[str, int],
    pods_on_node: int,
) -> list[str]:
    """kube-scheduler's fitsRequest: every reason the node cannot take the pod (empty: it fits)."""
    reasons = []
    if pods_on_node + 1 > allocatable.get(PODS, 0):
        reasons.append("Too many pods")
    for resource, n in requests:
        if n > allocatable.get(resource, 0) - requested.get(resource, 0):
            reasons.append(f"Insufficient {resource}")
    return reasons
