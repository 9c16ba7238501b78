"""Which domains a gang goes to (issue 21): counting, BestFit, packing by rank.

The in-node oracle first: ``fit_of`` says how many members of k GPUs fit on a node of a class
with a good GPU set (rule 1's best k-set taken again and again from the free GPUs, capped by the
allocatable headroom), memoised per node class as every other rank is; ``path_fits`` sums it per
path through the hierarchy's ``DomainIndex`` (a few hundred paths, not every node). The counts
are summed up the tree of domains (``Tree``); with slices, a domain at or above the slice level
counts whole slices only (each slice must fit in one domain of the slice level).

Then ``plans`` yields the ways to split the gang's members, in rank order, among **leaf domains**
(the narrowest level above hostname, or nodes that lack the narrower labels), best first:

- required level R: the candidate domains of R that hold the gang, tightest first (Kueue's
  BestFit: least capacity left over), ties by fewest nodes, then by the values; a domain its bound
  members use comes first (sticky);
- inside a domain (and for no required level: inside the cluster), the preferred level P climbs:
  one domain of P if one holds the gang (BestFit), else one of the next wider level, and so on;
  a gang without a constraint starts at the narrowest level (compact by default);
- when no single domain holds it, ``fill`` spreads it over the fewest children, largest first,
  the last one the tightest that holds the rest (Kueue's BestFit), and each child gets the next
  consecutive ranks, recursively, so consecutive ranks share the narrowest domain possible;
- spread over the whole cluster (no domain of any level holds the gang: it needs none, and its
  preference is lost anyway), with ``topology.spillBrokenFirst`` (issue 32 item 7) the gang
  still takes as few top-level domains as largest first would, but the largest are left out
  while the next ones hold it in as many: the widest domains with the most free (the whole
  blocks and the open racks in them) stay for the gangs that need one.

The node-level plan inside each leaf domain (nodes packed, the GPU sets chosen jointly) is
gangs/planning.py's; a plan it cannot realise (a Kubernetes filter refuses, counts were per member)
is skipped for the next. Everything here is arithmetic on counts: stepped by hand in the tests.
"""

from __future__ import annotations

from collections.abc import Iterator

from msgspec import Struct

from ..snapshot.cluster import ClusterState
from ..snapshot.domains import Hierarchy, Path
from ..snapshot.nodes import Demand, NodeClass
from .constraints import Constraint


class Chunk(Struct, frozen=True):
    """``count`` consecutive members (by rank) placed on the nodes whose path is ``path``."""

    path: Path
    count: int


def fit_of(cls: NodeClass, k: int, demand: Demand) -> int:
    """How many members of k GPUs (each asking ``demand`` of allocatable) fit on a node of the
    class, each with rule 1's best set of what the previous ones left (memoised)."""
    memo_key = ("fit", k, demand)
    found = cls.memo.get(memo_key)
    if found is not None:
        return found  # type: ignore[return-value]
    topology, _vendor, _total, free, headroom = cls.key
    count = 0
    if k > 0:
        while free.bit_count() >= k:
            choice = topology.best_set(free, k)
            if choice is None:
                break
            free &= ~choice.mask
            count += 1
    if headroom is not None:
        for index, n in demand:
            count = min(count, headroom[index] // n)
    cls.memo[memo_key] = count
    return count


def path_fits(
    state: ClusterState, hierarchy: Hierarchy, vendor: str, k: int, demand: Demand
) -> list[tuple[Path, int, int]]:
    """(path, members that fit on its nodes, its nodes where one fits), where one fits."""
    out = []
    classes = state.classes
    for path, counts in state.domain_index(hierarchy).classes.items():
        fit = nodes = 0
        for key, count in counts.items():
            if key[1] != vendor:
                continue
            each = fit_of(classes[key], k, demand)
            if each:
                fit += each * count
                nodes += count
        if fit:
            out.append((path, fit, nodes))
    return out


class Tree:
    """Per domain (a path prefix): its capacity in members and its nodes."""

    def __init__(
        self,
        hierarchy: Hierarchy,
        fits: list[tuple[Path, int, int]],
        constraint: Constraint | None,
        broken_first: bool = False,
    ) -> None:
        self.hierarchy = hierarchy
        self.broken_first = broken_first
        self.slice_level = constraint.slice_level if constraint else None
        self.slice_size = constraint.slice_size if constraint and constraint.slice_level else 1
        self.fit: dict[Path, int] = {}
        self.nodes: dict[Path, int] = {}  # nodes under the domain where a member fits
        self.children: dict[Path, list[Path]] = {}
        self.loose: dict[Path, int] = {}  # members fitting on its nodes without the next label
        # Level by level from the longest paths up: each domain adds itself to its parent once.
        by_length: dict[int, dict[Path, int]] = {}
        fit, count = self.fit, self.nodes
        for path, members, nodes in fits:
            self.loose[path] = members
            fit[path] = members
            count[path] = nodes
            by_length.setdefault(len(path), {})[path] = members
        for length in range(max(by_length, default=0), 0, -1):
            parents = by_length.setdefault(length - 1, {})
            for path in by_length.get(length, {}):
                parent = path[:-1]
                if parent in fit:
                    fit[parent] += fit[path]
                    count[parent] += count[path]
                else:
                    fit[parent] = fit[path]
                    count[parent] = count[path]
                parents[parent] = 0
                self.children.setdefault(parent, []).append(path)
        self.depths = by_length
        # Capacity: members, or whole slices' members at and above the slice level.
        self.cap: dict[Path, int] = dict(self.fit)
        if self.slice_level is not None:
            size = self.slice_size
            for prefix in sorted(self.fit, key=len, reverse=True):
                depth = len(prefix) - 1  # the level index of a domain of this path
                if depth > self.slice_level:
                    continue
                if depth == self.slice_level:
                    self.cap[prefix] = self.fit[prefix] // size * size
                else:
                    self.cap[prefix] = sum(self.cap[c] for c in self.children.get(prefix, ()))

    def at(self, depth: int, under: Path = ()) -> list[Path]:
        """The domains of level ``depth`` under ``under``."""
        domains = self.depths.get(depth + 1, {})
        if not under:
            return list(domains)
        return [p for p in domains if p[: len(under)] == under]

    def best_fit(self, domains: list[Path], n: int) -> list[Path]:
        """Those that hold n, tightest first, then fewest nodes, then by values."""
        holding = [p for p in domains if self.cap[p] >= n]
        return sorted(holding, key=lambda p: (self.cap[p] - n, self.nodes[p], p))

    def fill(self, domain: Path, n: int) -> list[Chunk] | None:
        """n consecutive members inside ``domain``: one child if one holds them (BestFit), else
        the fewest children, largest first and the last the tightest; None if they do not fit."""
        if self.cap.get(domain, 0) < n:
            return None
        children = sorted(self.children.get(domain, ()))
        loose = self.loose.get(domain, 0)
        if len(domain) >= self.hierarchy.host or (not children):
            return [Chunk(domain, n)]
        unit = (
            self.slice_size
            if self.slice_level is not None and len(domain) <= self.slice_level
            else 1
        )
        whole = self.best_fit(children, n)
        if whole:
            return self.fill(whole[0], n)
        # Several children: largest first (Kueue's BestFit: the fewest children); the last one
        # the tightest that holds the rest.
        order = sorted(children, key=lambda p: (-self.cap[p], self.nodes[p], p))
        if self.broken_first and not domain:
            # Spread over the cluster: as many top-level domains as largest first takes, but
            # the largest left out while the next ones still hold n in as many, so the domains
            # with the most free (whole blocks, the open racks in them) stay for the gangs that
            # need one. Inside a domain nothing changes (the fewest children, largest first).
            takes = [self.cap[p] // unit * unit for p in order]
            k, total = 0, 0
            while k < len(takes) and total < n:
                total += takes[k]
                k += 1
            skip = 0
            while len(order) - skip > k and sum(takes[skip + 1 : skip + 1 + k]) >= n:
                skip += 1
            order = order[skip:]
        chosen: list[tuple[Path, int]] = []
        left = n
        for pos, child in enumerate(order):
            if left <= 0:
                break
            tight = self.best_fit(order[pos:], left)
            if tight:
                chosen.append((tight[0], left))
                left = 0
                break
            take = self.cap[child] // unit * unit
            if take:
                chosen.append((child, take))
                left -= take
        out: list[Chunk] = []
        for child, count in chosen:
            part = self.fill(child, count)
            if part is None:
                return None
            out.extend(part)
        if left > 0:
            # What the children cannot hold goes to the domain's nodes without their label
            # (never for slices above the slice level: those nodes are in no slice domain).
            if unit > 1 or loose < left:
                return None
            out.append(Chunk(domain, left))
        return out


def plans(
    tree: Tree, constraint: Constraint | None, n: int, compact: bool, sticky: Path
) -> Iterator[list[Chunk]]:
    """The splits of n members over leaf domains, best first (see the module's docstring).
    ``sticky`` is the path the gang's bound members share (empty: none bound)."""
    required = constraint.required if constraint else None
    if required is not None and required < tree.hierarchy.host:
        candidates = tree.best_fit(tree.at(required), n)
        stick = sticky[: required + 1]
        if len(stick) == required + 1:
            candidates = [p for p in candidates if p == stick]
        for domain in candidates:
            yield from _within(tree, domain, constraint, n, compact, sticky)
        return
    yield from _within(tree, (), constraint, n, compact, sticky)


def _within(
    tree: Tree, scope: Path, constraint: Constraint | None, n: int, compact: bool, sticky: Path
) -> Iterator[list[Chunk]]:
    """Inside ``scope``: one domain of the preferred level (or, compact, the narrowest) if one
    holds the gang, climbing to wider levels; then the scope itself, spread."""
    preferred = constraint.preferred if constraint else None
    start = preferred
    if start is None and compact and (constraint is None or constraint.slice_level is None):
        start = tree.hierarchy.host - 1
    if start is not None:
        for level in range(min(start, tree.hierarchy.host - 1), len(scope) - 1, -1):
            domains = tree.best_fit(tree.at(level, scope), n)
            mine = sticky[: level + 1]
            domains.sort(key=lambda p: p != mine)  # stable: the bound members' domain first
            for domain in domains[:2]:
                plan = tree.fill(domain, n)
                if plan is not None:
                    yield plan
    plan = tree.fill(scope, n)
    if plan is not None:
        yield plan


def shortfall(tree: Tree, constraint: Constraint, n: int) -> str:
    """Why no domain of the required level (or of the slice level) holds the gang: ``needs 16
    pods in one rack; the best rack fits 12 (rack=r07), 4 racks fit 8 or more``."""
    hierarchy = tree.hierarchy
    parts = []
    if constraint.required is not None:
        level = hierarchy.levels[constraint.required]
        domains = tree.at(constraint.required)
        what = f"needs {n} pods in one {level.name}"
        if constraint.slice_level is not None:
            inner = hierarchy.levels[constraint.slice_level].name
            what += f", in slices of {constraint.slice_size} each in one {inner}"
        parts.append(what)
        parts.append(_best(tree, domains, level.name, n))
    elif constraint.slice_level is not None:
        level = hierarchy.levels[constraint.slice_level]
        parts.append(
            f"needs {n} pods in slices of {constraint.slice_size}, each in one {level.name}"
        )
        total = tree.cap.get((), 0)
        parts.append(f"{total} pods fit in whole slices")
    return "; ".join(parts)


def _best(tree: Tree, domains: list[Path], name: str, n: int) -> str:
    plural = f"{name}s" if "/" not in name and "." not in name else f"domains of {name}"
    if not domains:
        return f"no {name} fits one"
    best = min(domains, key=lambda p: (-tree.cap[p], p))
    half = max(1, n // 2)
    many = sum(1 for p in domains if tree.cap[p] >= half)
    return (
        f"the best {name} fits {tree.cap[best]} ({tree.hierarchy.describe(best)}), "
        f"{many} {plural if many != 1 else name} fit {half} or more"
    )
