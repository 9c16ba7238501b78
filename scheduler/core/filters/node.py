"""Filters that read one node and the incoming pod: kube-scheduler's NodeUnschedulable,
TaintToleration, NodeAffinity and NodePorts, each a function returning its reason or None.

- NodeUnschedulable: a cordoned node takes only pods that tolerate the
  ``node.kubernetes.io/unschedulable:NoSchedule`` taint.
- TaintToleration: the first NoSchedule/NoExecute taint (in the node's order) that no toleration
  tolerates is the reason, named as kube-scheduler names it.
- NodeAffinity: ``spec.nodeSelector`` and the required terms of ``nodeAffinity`` must both match
  (terms ORed, requirements ANDed, ``matchFields`` on ``metadata.name``). The preferred terms'
  weights add up to a score (``affinity_score``) that ranks nodes.
- NodePorts: a host port conflicts with one in use on the node for the same protocol and port when
  either side's hostIP is 0.0.0.0 (or empty) or both are the same IP.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..model.labels import term_matches, terms_match
from ..model.objects import HostPort, NodeInput, PodInput, Taint, Toleration

UNSCHEDULABLE = "node(s) were unschedulable"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
PORTS = "node(s) didn't have free ports for the requested pod ports"

_CORDON_TAINT = Taint("node.kubernetes.io/unschedulable", "NoSchedule")


def unschedulable(node: NodeInput, tolerations: tuple[Toleration, ...]) -> str | None:
    if node.unschedulable and not any(t.tolerates(_CORDON_TAINT) for t in tolerations):
        return UNSCHEDULABLE
    return None


def untolerated_taint(node: NodeInput, tolerations: tuple[Toleration, ...]) -> str | None:
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    return None


def affinity_matches(pod: PodInput, node: NodeInput) -> bool:
    """nodeSelector and required node affinity (also what topology spread's Honor policy uses)."""
    labels = node.labels
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            return False
    affinity = pod.affinity
    if affinity is None or affinity.node_required is None:
        return True
    return terms_match(affinity.node_required, node.name, labels)


def node_affinity(pod: PodInput, node: NodeInput) -> str | None:
    return None if affinity_matches(pod, node) else NODE_AFFINITY


def affinity_score(pod: PodInput, node: NodeInput) -> int:
    """The summed weights of the preferred node-affinity terms the node matches."""
    affinity = pod.affinity
    if affinity is None:
        return 0
    return sum(
        p.weight for p in affinity.node_preferred if term_matches(p.term, node.name, node.labels)
    )


_ANY_IPS = ("", "0.0.0.0")


def port_conflict(
    wanted: tuple[HostPort, ...], used: Mapping[tuple[str, int], dict[str, int]]
) -> str | None:
    for p in wanted:
        ips = used.get((p.protocol, p.port))
        if not ips:
            continue
        if p.host_ip in _ANY_IPS or any(ip in _ANY_IPS for ip in ips) or p.host_ip in ips:
            return PORTS
    return None
