"""NodeDeclaredFeatures (kube-scheduler v1.37, GA): a pod that relies on a node feature only
runs on a node that declares it in ``status.declaredFeatures``.

The features a pod needs are inferred from its spec as component-helpers' ``nodedeclaredfeatures``
registry does for scheduling (the other registered features infer nothing at scheduling time):

- ``RestartAllContainersOnContainerExits``: a container or init container has a
  ``restartPolicyRules`` rule whose action is ``RestartAllContainers``;
- ``UserNamespacesHostNetworkSupport``: ``hostNetwork: true`` with ``hostUsers: false``;
- ``VolumeBindMountOptions``: a volume mount sets ``bindMountOptions``.

A node that lacks one is refused with kube-scheduler's reason (UnschedulableAndUnresolvable: no
preemption can help). A pod that needs none (nearly all) skips the filter, as kube-scheduler's
PreFilter does.
"""

from __future__ import annotations

from ..model.objects import NodeInput, PodInput

FEATURES = "node(s) didn't match Pod's required features"
RESTART_ALL_CONTAINERS = "RestartAllContainersOnContainerExits"
USER_NAMESPACES_HOST_NETWORK = "UserNamespacesHostNetworkSupport"
VOLUME_BIND_MOUNT_OPTIONS = "VolumeBindMountOptions"


def required_features(pod: PodInput) -> frozenset[str]:
    """The node features ``pod`` needs to run (empty for nearly every pod)."""
    out = set()
    if "RestartAllContainers" in pod.restart_rule_actions:
        out.add(RESTART_ALL_CONTAINERS)
    if pod.host_network and pod.host_users is False:
        out.add(USER_NAMESPACES_HOST_NETWORK)
    if pod.bind_mount_options:
        out.add(VOLUME_BIND_MOUNT_OPTIONS)
    return frozenset(out)


def missing_features(required: frozenset[str], node: NodeInput) -> str | None:
    """kube-scheduler's reason when ``node`` does not declare every feature in ``required``."""
    if required and not required.issubset(node.declared_features):
        return FEATURES
    return None
