"""The order a share's search reads the GPU nodes in, as bitsets: touched before untouched,
each by name, only the nodes that could take the share.

placement/nodes._walk reads the nodes in the order their keys tie in (a node some GPU pod uses
before an untouched one, then by name) and stops at the first that ranks at the highest
ceiling with a name the chain accepts. On a full cluster that first node comes late: of the
thousand nodes read before it in bench-core's share-heavy workload, six in ten were short of
the cpu the share asks for and two in ten had no card with its percent free (issue 32: each
read and passed over in turn, the slowest 2% of shares spent some 2.4 ms so).

Here every node filed has a bit, its name's rank among the nodes filed when the bits were last
numbered, and the nodes are kept as sets of bits (Python ints): the touched, the untouched, per
vendor, per bucket of cpu left and per bucket of its idlest card's free percent. A share ANDs
the buckets at or above its own (``candidates``) and reads only the bits left, in order: a
superset of the nodes the walk would not pass over for their cpu or cards (a bucket holds
nodes a little short of what it stands for, which the walk passes over as before). Filing a
node flips its bit in the four sets it is in, whatever its cpu or cards moved by; a name not
numbered yet (a new node) has every bit renumbered when the order is next read, as do the
holes nodes gone for good leave once they outnumber the nodes.

The walk's budget counts every node of the order, read or not (``candidates`` stops at the
budget's node), so a share files its candidates exactly when it did when it read them all.
"""

from __future__ import annotations

from collections.abc import Iterator

# A node's place in the sets: (untouched, vendor, cpu bucket, card bucket).
_Place = tuple[bool, str, int, int]

# The idlest card's free percent in buckets of this many percent.
_CARD_STEP = 5


def cpu_bucket(left: int) -> int:
    """0 for a node whose cpu left is not known (every share may go there), else 1 and up in
    half octaves of 125 millicores: nodes with ``left`` or more are in its bucket or above."""
    if left < 0:
        return 0
    units = left // 125
    width = units.bit_length()
    if width < 2:
        return 1 + width
    return 2 * width - 1 + ((units >> (width - 2)) & 1)


def card_bucket(percent: int) -> int:
    return percent // _CARD_STEP


class NameOrder:
    """The GPU nodes filed, as bitsets over their names' ranks."""

    __slots__ = (
        "_bit",
        "_cards",
        "_cpu",
        "_names",
        "_places",
        "_renumber",
        "_touched",
        "_untouched",
        "_vendors",
    )

    def __init__(self) -> None:
        self._places: dict[str, _Place] = {}
        self._bit: dict[str, int] = {}
        self._names: list[str] = []
        self._renumber = False
        self._touched = 0
        self._untouched = 0
        self._vendors: dict[str, int] = {}
        self._cpu: list[int] = []
        self._cards: list[int] = []

    def put(self, name: str, untouched: bool, vendor: str, left: int, top: int) -> None:
        """File ``name`` (again) by whether it is untouched, its vendor, its cpu left and its
        idlest card's free percent (``top``)."""
        place = (untouched, vendor, cpu_bucket(left), card_bucket(top))
        before = self._places.get(name)
        if before == place:
            return
        self._places[name] = place
        if self._renumber:
            return
        bit = self._bit.get(name)
        if bit is None:
            self._renumber = True
            return
        if before is not None:
            self._flip(before, 1 << bit)
        self._flip(place, 1 << bit)

    def remove(self, name: str) -> None:
        before = self._places.pop(name, None)
        if before is None or self._renumber:
            return
        self._flip(before, 1 << self._bit[name])
        # Numbered and gone (every node filed has a bit while nothing is to renumber).
        holes = len(self._bit) - len(self._places)
        if holes > len(self._places) + 64:
            self._renumber = True

    def _flip(self, place: _Place, bit: int) -> None:
        untouched, vendor, cpu, cards = place
        if untouched:
            self._untouched ^= bit
        else:
            self._touched ^= bit
        self._vendors[vendor] = self._vendors.get(vendor, 0) ^ bit
        for buckets, at in ((self._cpu, cpu), (self._cards, cards)):
            if at >= len(buckets):
                buckets.extend([0] * (at + 1 - len(buckets)))
            buckets[at] ^= bit

    def _number(self) -> None:
        """Rank every node filed by name, and build the sets afresh."""
        self._names = sorted(self._places)
        self._bit = {name: bit for bit, name in enumerate(self._names)}
        self._touched = self._untouched = 0
        self._vendors, self._cpu, self._cards = {}, [], []
        for bit, name in enumerate(self._names):
            self._flip(self._places[name], 1 << bit)
        self._renumber = False

    def candidates(
        self, vendor: str | None, cpu: int, percent: int, budget: int
    ) -> tuple[Iterator[str], bool]:
        """The names of the nodes of ``vendor`` (None: any) with ``cpu`` millicores left or
        more (or not known) and an idlest card ``percent`` free or more, or a little less
        (their buckets'), touched first, each by name, up to the ``budget``-th node of the
        whole order; and whether the order holds more nodes than ``budget``."""
        if self._renumber:
            self._number()
        touched, untouched = self._touched, self._untouched
        allowed = self._cpu[0] if self._cpu else 0
        for mask in self._cpu[max(1, cpu_bucket(cpu)) :]:
            allowed |= mask
        if percent > 0:
            cards = 0
            for mask in self._cards[card_bucket(percent) :]:
                cards |= mask
            allowed &= cards
        if vendor is not None:
            allowed &= self._vendors.get(vendor, 0)
        held = touched.bit_count()
        over = held + untouched.bit_count() > budget
        if held > budget:
            phases = [(touched & _below(touched, budget)) & allowed]
        elif over:
            phases = [touched & allowed, (untouched & _below(untouched, budget - held)) & allowed]
        else:
            phases = [touched & allowed, untouched & allowed]
        return _names_of(phases, self._names), over


def _below(mask: int, count: int) -> int:
    """The bits below the (``count`` + 1)-th lowest bit set in ``mask`` (it has more)."""
    low, high = 0, mask.bit_length()
    # The least width whose bits of ``mask`` number more than ``count``.
    while low < high:
        middle = (low + high) // 2
        if (mask & ((1 << middle) - 1)).bit_count() > count:
            high = middle
        else:
            low = middle + 1
    return (1 << (low - 1)) - 1


def _names_of(phases: list[int], names: list[str]) -> Iterator[str]:
    for mask in phases:
        # The bits lowest first, as the characters of the binary numeral read backwards.
        digits = bin(mask)[:1:-1]
        at = digits.find("1")
        while at >= 0:
            yield names[at]
            at = digits.find("1", at + 1)
