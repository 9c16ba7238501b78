"""What one source asks of a gang's topology, before its levels are resolved (issue 21).

Each source has its own module, which reads its annotations (or object) into a ``TopologyAsk``:
ours (``topology_ours``), Kueue's (``topology_kueue``), KAI's (``topology_kai``); Volcano's
PodGroup ``spec.networkTopology`` and the upstream PodGroup's ``schedulingConstraints`` are read by
``core/gangs/constraints.py`` from their objects. ``core/gangs/constraints.py`` resolves the level
names against a hierarchy and checks that the sources agree.
"""

from __future__ import annotations

from collections.abc import Mapping

from msgspec import Struct

from . import FormatError


class TopologyAsk(Struct, frozen=True, kw_only=True):
    source: str  # as reasons name it: "topo-scheduler.io", "Kueue", "KAI", "Volcano", "PodGroup"
    says: str  # the fields it was read from, for reasons: "annotation x=rack"
    required: str | None = None  # a level (key or alias): the gang in ONE domain of it, or wait
    preferred: str | None = None  # one domain of it if possible, else climb; never a wait
    slice_level: str | None = None  # slices of ``slice_size`` pods by rank, each in one domain
    slice_size: int = 0
    topology: str | None = None  # the Topology object whose levels these are (KAI's)
    # Kueue has chosen the domain already (its gate removed, the domain's labels in the pod's
    # nodeSelector): the nodeSelector holds it, and nothing is chosen above the nodes.
    pinned: bool = False


def level_value(annotations: Mapping[str, str], name: str) -> str | None:
    """A level named by annotation ``name`` (None: absent); FormatError when it is empty."""
    value = annotations.get(name)
    if value is None:
        return None
    if not value.strip():
        raise FormatError(f"annotation {name}: empty (a topology level's label key or alias)")
    return value.strip()


def slice_size(annotations: Mapping[str, str], name: str) -> int:
    """The slice size in annotation ``name``; FormatError unless it is a positive integer."""
    raw = annotations.get(name, "")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1 or n > 100_000:
        raise FormatError(f"annotation {name}: {raw!r} must be a positive integer")
    return n


def says(annotations: Mapping[str, str], names: tuple[str, ...]) -> str:
    """``annotation a=x, annotation b=y`` for the names the pod carries."""
    return ", ".join(f"annotation {n}={annotations[n]}" for n in names if n in annotations)


def slices(
    annotations: Mapping[str, str], level_name: str, size_name: str
) -> tuple[str | None, int]:
    """A slice level and size, both or neither; FormatError naming the one that is missing."""
    level = level_value(annotations, level_name)
    if level is None and size_name not in annotations:
        return None, 0
    if level is None:
        raise FormatError(f"annotation {size_name} needs annotation {level_name}")
    if size_name not in annotations:
        raise FormatError(f"annotation {level_name} needs annotation {size_name}")
    return level, slice_size(annotations, size_name)
