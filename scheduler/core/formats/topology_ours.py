"""Our topology annotations on a gang's pods (issue 21):

- ``topo-scheduler.io/topology-required: <level>``: the gang's minimum in ONE domain of that level,
  or it waits;
- ``topo-scheduler.io/topology-preferred: <level>``: one domain of that level if possible, else of
  the next wider level, and so on; never a reason to wait;
- ``topo-scheduler.io/topology-slice-required: <level>`` with
  ``topo-scheduler.io/topology-slice-size: <n>``: the gang in slices of n pods by rank, each slice
  in one domain of that level.
"""

from __future__ import annotations

from ..model import names
from ..model.objects import PodInput
from .topology_ask import TopologyAsk, level_value, says, slices

SOURCE = "topo-scheduler.io"
_NAMES = (
    names.TOPOLOGY_REQUIRED_ANNOTATION,
    names.TOPOLOGY_PREFERRED_ANNOTATION,
    names.TOPOLOGY_SLICE_REQUIRED_ANNOTATION,
    names.TOPOLOGY_SLICE_SIZE_ANNOTATION,
)


def read(pod: PodInput) -> TopologyAsk | None:
    """The pod's ask (None: it carries none of our annotations); FormatError when malformed."""
    annotations = pod.annotations
    if not any(n in annotations for n in _NAMES):
        return None
    level, size = slices(
        annotations, names.TOPOLOGY_SLICE_REQUIRED_ANNOTATION, names.TOPOLOGY_SLICE_SIZE_ANNOTATION
    )
    return TopologyAsk(
        source=SOURCE,
        says=says(annotations, _NAMES),
        required=level_value(annotations, names.TOPOLOGY_REQUIRED_ANNOTATION),
        preferred=level_value(annotations, names.TOPOLOGY_PREFERRED_ANNOTATION),
        slice_level=level,
        slice_size=size,
    )
