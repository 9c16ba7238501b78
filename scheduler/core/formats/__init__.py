"""The public annotation formats, one module each: their Structs, encoder, decoder and limits.

| annotation | module | written by | read by |
|---|---|---|---|
| ``topo-scheduler.io/gpus`` | ``gpus`` | node agent or a person | core (resources/inventory.py) |
| ``topo-scheduler.io/devices`` | ``devices`` | the scheduler, at bind | core |
| ``topo-scheduler.io/assignment`` | ``assignment`` | the scheduler, at bind | core, device plugin |
| ``topo-scheduler.io/allocated`` | ``allocated`` | the device plugin | core |

Everything here is input from the cluster, so every decoder is bounded before it does any work
that grows with a number inside the value (a GPU index becomes ``1 << index`` and an inventory of
``n`` devices an ``n x n`` score matrix):

- ``MAX_DEVICES`` (gpus.py): a node has at most 64 GPUs and every GPU index is below 64. The
  largest machines one kubelet runs today carry 8 to 16 GPUs (DGX/HGX: 8, 16-GPU PCIe and OAM
  boxes, MetaX C500 x 16), so 64 is four times that; it keeps a node's GPU mask within one
  machine word, its score matrix at 4,096 entries and the best-set search's memo small, and
  refuses the index of 10,000 that would build a 10,000 x 10,000 matrix.
- A byte limit per annotation (``MAX_BYTES`` in each module), a few times the largest valid
  value on a 64-GPU node, checked before decoding. The apiserver caps all of an object's
  annotations together at 256 KiB; these limits keep one oversized value from costing more than
  a valid one would.

A value beyond a limit raises FormatError, a ValueError whose message starts with
``annotation <name>: ``: the caller prefixes the pod or node it came from, as for any malformed
value, and goes on (a node is excluded from GPU scheduling, a pod's GPUs are not tracked).
"""

from __future__ import annotations


class FormatError(ValueError):
    """A malformed or oversized annotation value: ``annotation <name>: <detail>``."""


def check_size(raw: str, limit: int, annotation: str) -> None:
    """FormatError when ``raw`` is more than ``limit`` bytes in UTF-8 (decided without encoding
    a huge value: a string's length in characters is at most its length in bytes)."""
    if len(raw) > limit or len(raw.encode()) > limit:
        raise FormatError(
            f"annotation {annotation}: {len(raw.encode())} bytes, more than the {limit} allowed"
        )
