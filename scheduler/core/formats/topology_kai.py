"""KAI-Scheduler's topology annotations on a pod (issue 21), with KAI's meanings:

- ``kai.scheduler/topology: <Topology name>``: the ``kai.scheduler/v1alpha1`` Topology whose
  levels the others name (by label key or alias); required with any of them;
- ``kai.scheduler/topology-required-placement: <level>``: the widest level the job may span;
- ``kai.scheduler/topology-preferred-placement: <level>``: the level it should stay within;
- ``kai.scheduler/segment-size: <n>`` with ``kai.scheduler/segment-topology-required-placement``:
  segments of n pods by rank, each in one domain of that level.
"""

from __future__ import annotations

from ..model import names
from ..model.objects import PodInput
from . import FormatError
from .topology_ask import TopologyAsk, level_value, says, slices

SOURCE = "KAI"
_NAMES = (
    names.KAI_TOPOLOGY_ANNOTATION,
    names.KAI_REQUIRED_ANNOTATION,
    names.KAI_PREFERRED_ANNOTATION,
    names.KAI_SEGMENT_SIZE_ANNOTATION,
    names.KAI_SEGMENT_REQUIRED_ANNOTATION,
)


def read(pod: PodInput) -> TopologyAsk | None:
    """The pod's ask (None: no KAI topology annotation); FormatError when malformed."""
    annotations = pod.annotations
    if not any(n in annotations for n in _NAMES):
        return None
    topology = level_value(annotations, names.KAI_TOPOLOGY_ANNOTATION)
    level, size = slices(
        annotations, names.KAI_SEGMENT_REQUIRED_ANNOTATION, names.KAI_SEGMENT_SIZE_ANNOTATION
    )
    required = level_value(annotations, names.KAI_REQUIRED_ANNOTATION)
    preferred = level_value(annotations, names.KAI_PREFERRED_ANNOTATION)
    if topology is None:
        raise FormatError(
            f"annotation {names.KAI_TOPOLOGY_ANNOTATION} is missing: it names the Topology whose "
            "levels the other kai.scheduler/ topology annotations name"
        )
    return TopologyAsk(
        source=SOURCE,
        says=says(annotations, _NAMES),
        required=required,
        preferred=preferred,
        slice_level=level,
        slice_size=size,
        topology=topology,
    )
