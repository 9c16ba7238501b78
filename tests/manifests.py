"""Facts about deploy/ that the manifest tests (unit: the files; e2e: what the apiserver takes)
share."""

from __future__ import annotations

NAMESPACE = "topo-scheduler"
# Kinds without a namespace: every other object in deploy/ must name NAMESPACE.
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)
