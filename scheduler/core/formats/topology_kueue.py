"""Kueue's Topology-Aware Scheduling annotations on a PodTemplate (so on every pod of a podset),
read with Kueue's meanings (issue 21):

- ``kueue.x-k8s.io/podset-required-topology: <level key>``: all pods in one domain of it;
- ``kueue.x-k8s.io/podset-preferred-topology: <level key>``: that level if possible, then wider;
- ``kueue.x-k8s.io/podset-slice-required-topology`` with ``kueue.x-k8s.io/podset-slice-size``:
  slices of n pods, each in one domain of that level.

Where Kueue has chosen the domain already (the pod's ``kueue.x-k8s.io/topology`` scheduling gate
removed, and the domain's level labels merged into its ``spec.nodeSelector`` by Kueue's
TopologyUngater), its choice is final: the ask is ``pinned`` and the nodeSelector keeps every pod
in its domain; the scheduler chooses only nodes and GPUs inside it.
"""

from __future__ import annotations

from ..model import names
from ..model.objects import PodInput
from .topology_ask import TopologyAsk, level_value, says, slices

SOURCE = "Kueue"
_NAMES = (
    names.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION,
    names.KUEUE_PREFERRED_TOPOLOGY_ANNOTATION,
    names.KUEUE_SLICE_TOPOLOGY_ANNOTATION,
    names.KUEUE_SLICE_SIZE_ANNOTATION,
)


def read(pod: PodInput) -> TopologyAsk | None:
    """The pod's ask (None: no Kueue topology annotation); FormatError when malformed."""
    annotations = pod.annotations
    if not any(n in annotations for n in _NAMES):
        return None
    level, size = slices(
        annotations, names.KUEUE_SLICE_TOPOLOGY_ANNOTATION, names.KUEUE_SLICE_SIZE_ANNOTATION
    )
    required = level_value(annotations, names.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION)
    preferred = level_value(annotations, names.KUEUE_PREFERRED_TOPOLOGY_ANNOTATION)
    asked = {lv for lv in (required, preferred, level) if lv is not None}
    # Kueue's ungater writes the chosen domain's level labels; the asked level's own label
    # among them is the sign (a user's nodeSelector on another key is not Kueue's choice).
    pinned = names.KUEUE_TOPOLOGY_GATE not in pod.scheduling_gates and any(
        key in asked for key in pod.node_selector
    )
    return TopologyAsk(
        source=SOURCE,
        says=says(annotations, _NAMES),
        required=required,
        preferred=preferred,
        slice_level=level,
        slice_size=size,
        pinned=pinned,
    )
