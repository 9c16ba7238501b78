"""``topo-scheduler.io/devices``: the whole GPUs of a bound pod, as ascending indices, e.g.
``0,3``. Written by the scheduler on the Binding, next to ``assignment``; read back by the core
from every bound pod (the apiserver is the truth after a restart or a takeover).

Every index is bounded before it becomes a bit of a mask: below ``gpus.MAX_DEVICES``, the bound
of every node's GPU indices, whether or not the pod's node is known yet (a pod event may come
before its node's). A value with an index beyond it is rejected whole (the pod's GPUs are not
tracked, with a warning naming the pod and the annotation). An index below it that the node lacks
costs nothing (its bit is never free anyway); ``topo-scheduler simulate`` warns about it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from ..model.names import DEVICES_ANNOTATION
from . import FormatError, check_size
from .gpus import MAX_DEVICES

MAX_BYTES: Final = 1024
"""64 indices below 64 with their commas take at most 190 bytes."""


def encode(indices: Iterable[int]) -> str:
    return ",".join(str(i) for i in indices)


def decode(raw: str) -> tuple[int, ...]:
    """The indices, in the order given; FormatError for a value that is not a list of GPU
    indices, or has an index not below ``MAX_DEVICES``. Empty or blank: no GPU."""
    check_size(raw, MAX_BYTES, DEVICES_ANNOTATION)
    if not raw.strip():
        return ()
    out = []
    for part in raw.split(","):
        try:
            index = int(part)
        except ValueError:
            raise FormatError(
                f"annotation {DEVICES_ANNOTATION}: {part.strip()!r} is not a GPU index"
            ) from None
        if index < 0:
            raise FormatError(f"annotation {DEVICES_ANNOTATION}: negative index {index}")
        if index >= MAX_DEVICES:
            raise FormatError(
                f"annotation {DEVICES_ANNOTATION}: index {index} is not below {MAX_DEVICES}"
            )
        out.append(index)
    return tuple(out)


def mask(indices: Iterable[int]) -> int:
    out = 0
    for i in indices:
        out |= 1 << i
    return out
