"""A node as the fragmentation measure sees it: its cpu left and its cards' free percent.

The measure itself (``snapshot/fragmentation.py``) works on shapes alone, so the snapshot's
profile can build targets with it; reading a shape off a ``NodeState`` is placement's (it is kept
on the node until a charge changes it).
"""

from __future__ import annotations

from ..model.names import CORES_PER_CARD
from ..snapshot.fragmentation import Shape, free_cards
from ..snapshot.nodes import NodeState


def shape_of(node: NodeState) -> Shape:
    """The node as the measure sees it (kept on the node until a charge changes it)."""
    if node.frag_shape is None:
        node.frag_shape = _shape(node)
    return node.frag_shape


def untouched(node: NodeState) -> int:
    """1 for a GPU node no GPU pod uses (every card idle), else 0: among nodes the measure ranks
    equal, placement keeps an untouched node for whatever comes next (bench-frag: any finer
    order of the ties, by free GPUs or cpu or the exact gain, leaves more GPUs idle)."""
    return int(not node.whole and not node.cards)


def _shape(node: NodeState) -> Shape:
    inv = node.inventory
    assert inv is not None
    taken = node.whole | node.nominated
    free = []
    for device in inv.devices:
        if not device.healthy or taken >> device.index & 1:
            continue
        use = node.cards.get(device.index)
        free.append(CORES_PER_CARD - use.core if use is not None else CORES_PER_CARD)
    return (node.cpu_left(), free_cards(free))
