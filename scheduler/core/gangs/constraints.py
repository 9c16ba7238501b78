"""A gang's topology constraint, from every source its pods name (issue 21).

Sources, each read by its own module into a ``TopologyAsk`` (``formats/topology_*``):

- ours: ``topo-scheduler.io/topology-required|preferred|slice-required`` (+ ``-slice-size``);
- Kueue's podset annotations; where Kueue has chosen the domain already, its choice is final
  (``pinned``: the pods' nodeSelector holds it);
- KAI's ``kai.scheduler/topology`` + ``-required-placement|-preferred-placement`` and segments;
- Volcano's PodGroup ``spec.networkTopology`` (``volcano_ask``): ``mode: hard`` is required,
  ``soft`` preferred, up to ``highestTierAllowed`` (tier 1 = the narrowest level above hostname
  of the configured hierarchy) or ``highestTierName`` (a level's alias or key);
- the upstream PodGroup's ``schedulingConstraints.topology[].key`` (``upstream_ask``, for the
  gang source that reads it): required.

An ask names levels; ``resolve`` finds them in a hierarchy (the configured one; a KAI pod's named
Topology; for Kueue, the Kueue Topology that has the level's key, else the configured one) and
returns a ``Constraint``. Every source of every member must say the same (compared by the levels'
label keys): otherwise the gang stays pending with a reason naming both (``TopologyPending``). A
level no hierarchy has, or a Topology that does not exist, keeps the gang pending too: a hard
constraint is never silently ignored. A soft one that cannot be honoured is dropped (it is never
a reason to wait).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from msgspec import Struct

from ..formats import FormatError, topology_kai, topology_kueue, topology_ours
from ..formats.topology_ask import TopologyAsk
from ..model import names
from ..model.objects import NetworkTopologyInput, PodGroupInput, PodInput, TopologyInput
from ..settings import TopologySettings
from ..snapshot.domains import Hierarchy, configured, kueue_hierarchy, of_topology


class TopologyError(ValueError):
    """The gang's topology constraint is malformed or cannot be met as configured: it waits,
    with this as its reason."""


class TopologyPending(TopologyError):
    """Something the constraint needs is not there yet (a Topology object), or the sources
    disagree: the gang waits."""


class Constraint(Struct, frozen=True, kw_only=True):
    hierarchy: Hierarchy
    required: int | None = None  # level indices in the hierarchy
    preferred: int | None = None
    slice_level: int | None = None
    slice_size: int = 0
    pinned: bool = False  # Kueue chose the domain: only nodes and GPUs are ours to choose
    says: str = ""  # the sources, for reasons

    def agreement(self) -> tuple[object, ...]:
        """What two sources must agree on: the levels' label keys (not their names or indices:
        two hierarchies may hold the same level), the slice size, Kueue's choice."""
        levels = self.hierarchy.levels

        def label(i: int | None) -> tuple[str, bool] | None:
            return None if i is None else (levels[i].label, levels[i].prefix)

        return (
            label(self.required),
            label(self.preferred),
            label(self.slice_level),
            self.slice_size,
            self.pinned,
        )


def rank_of(pod: PodInput) -> int | None:
    """The pod's rank: the first of ``names.RANK_LABELS`` it carries as a label (else as an
    annotation) holding a non-negative integer; None when none does."""
    for key in names.RANK_LABELS:
        raw = pod.labels.get(key, pod.annotations.get(key))
        if raw is not None and raw.isdigit():
            return int(raw)
    return None


def rank_order(pods: Sequence[PodInput]) -> list[PodInput]:
    """Pods in rank order; those without a rank after them, by name."""
    return sorted(pods, key=lambda p: (rank_of(p) is None, rank_of(p) or 0, p.key))


def upstream_ask(key: str, says: str) -> TopologyAsk:
    """The upstream PodGroup's ``schedulingConstraints.topology[].key``: the gang in one domain
    of that level (its gang source calls this; ``says`` names the object and field)."""
    return TopologyAsk(source="PodGroup", says=says, required=key)


def volcano_ask(
    group: PodGroupInput, topology: NetworkTopologyInput, hierarchy: Hierarchy
) -> TopologyAsk | None:
    """A Volcano PodGroup's networkTopology as an ask on ``hierarchy`` (the configured one):
    TopologyError when a hard one names a tier the levels do not have; None for a soft one."""
    hard = topology.mode != "soft"
    where = f"Volcano PodGroup {group.namespace}/{group.name}: spec.networkTopology"
    above_host = hierarchy.levels[:-1]
    if topology.highest_tier_name is not None:
        index = hierarchy.find(topology.highest_tier_name)
        says = f"{where}.highestTierName={topology.highest_tier_name} ({topology.mode})"
        if index is None or index == hierarchy.host:
            if not hard:
                return None
            raise TopologyError(
                f"{where}.highestTierName: {topology.highest_tier_name!r} is not a level of "
                f"{hierarchy.source} ({hierarchy.known()})"
            )
    else:
        tier = topology.highest_tier_allowed if topology.highest_tier_allowed is not None else 1
        says = f"{where}.highestTierAllowed={tier} ({topology.mode})"
        if not 1 <= tier <= len(above_host):
            if not hard:
                return None
            have = ", ".join(level.name for level in reversed(above_host)) or "none"
            raise TopologyError(
                f"{where}.highestTierAllowed: tier {tier}, but {hierarchy.source} has "
                f"{len(above_host)} level(s) above hostname (tier 1 up: {have}); configure "
                "topology.levels"
            )
        index = len(above_host) - tier
    level = hierarchy.levels[index].name
    if hard:
        return TopologyAsk(source="Volcano", says=says, required=level)
    return TopologyAsk(source="Volcano", says=says, preferred=level)


def pod_asks(
    pod: PodInput,
    pod_groups: Mapping[str, PodGroupInput],
    settings: TopologySettings,
) -> list[TopologyAsk]:
    """Every ask the pod carries or names; TopologyError when one is malformed."""
    out: list[TopologyAsk] = []
    for reader in (topology_ours, topology_kueue, topology_kai):
        try:
            ask = reader.read(pod)
        except FormatError as exc:
            raise TopologyError(f"pod {pod.key}: {exc}") from None
        if ask is not None:
            out.append(ask)
    if pod.scheduling_group:
        where = f"PodGroup {pod.namespace}/{pod.scheduling_group} ({names.UPSTREAM_POD_GROUP_API})"
        group = pod_groups.get(
            f"{names.UPSTREAM_POD_GROUP_API}/{pod.namespace}/{pod.scheduling_group}"
        )
        for i, key in enumerate(group.topology_keys if group is not None else ()):
            says = f"{where}: spec.schedulingConstraints.topology[{i}].key={key}"
            out.append(upstream_ask(key, says))
    volcano = pod.annotations.get(names.VOLCANO_GROUP_ANNOTATION)
    if volcano:
        group = pod_groups.get(f"{names.VOLCANO_POD_GROUP_API}/{pod.namespace}/{volcano}")
        if group is not None and group.network_topology is not None:
            ask = volcano_ask(group, group.network_topology, configured(settings))
            if ask is not None:
                out.append(ask)
    return out


def resolve(
    ask: TopologyAsk,
    settings: TopologySettings,
    topologies: Mapping[str, TopologyInput],
) -> Constraint:
    """The ask's levels found in its hierarchy; TopologyError naming the field when one is not
    there, TopologyPending when its Topology does not exist (yet)."""
    hierarchy = configured(settings)
    if ask.topology is not None:
        topology = topologies.get(f"{ask.source}/{ask.topology}")
        if topology is None:
            raise TopologyPending(f"{ask.says}: waiting for {ask.source} Topology {ask.topology}")
        hierarchy = of_topology(topology)
    elif ask.source == topology_kueue.SOURCE:
        key = ask.required or ask.preferred or ask.slice_level
        assert key is not None
        hierarchy = kueue_hierarchy(key, topologies) or hierarchy

    def find(name: str | None) -> int | None:
        if name is None:
            return None
        index = hierarchy.find(name)
        if index is None:
            raise TopologyError(
                f"{ask.says}: {name!r} is not a level of {hierarchy.source} ({hierarchy.known()})"
            )
        return index

    required, preferred, slice_level = (
        find(ask.required),
        find(ask.preferred),
        find(ask.slice_level),
    )
    if required is not None and preferred is not None and preferred < required:
        raise TopologyError(f"{ask.says}: the preferred level is wider than the required one")
    top = required if required is not None else preferred
    if slice_level is not None and top is not None and slice_level < top:
        raise TopologyError(f"{ask.says}: the slice level is wider than the gang's level")
    if slice_level is not None and slice_level == hierarchy.host:
        raise TopologyError(
            f"{ask.says}: slices of the hostname level are not supported (a level above it is)"
        )
    return Constraint(
        hierarchy=hierarchy,
        required=required,
        preferred=preferred,
        slice_level=slice_level,
        slice_size=ask.slice_size,
        pinned=ask.pinned,
        says=ask.says,
    )


def pod_constraint(
    pod: PodInput,
    pod_groups: Mapping[str, PodGroupInput],
    settings: TopologySettings,
    topologies: Mapping[str, TopologyInput],
) -> Constraint | None:
    """The pod's constraint, its sources agreeing (None: it asks for none)."""
    found: Constraint | None = None
    for ask in pod_asks(pod, pod_groups, settings):
        constraint = resolve(ask, settings, topologies)
        if found is None:
            found = constraint
        elif constraint.agreement() != found.agreement():
            raise TopologyPending(
                f"pod {pod.key}: topology sources disagree: {found.says}; {constraint.says}"
            )
    return found


def gang_constraint(
    pods: Sequence[PodInput],
    pod_groups: Mapping[str, PodGroupInput],
    settings: TopologySettings,
    topologies: Mapping[str, TopologyInput],
) -> Constraint | None:
    """The constraint every member agrees on (None: none asks for one);
    TopologyError/TopologyPending with the reason otherwise."""
    first: tuple[PodInput, Constraint | None] | None = None
    for pod in sorted(pods, key=lambda p: p.key):
        constraint = pod_constraint(pod, pod_groups, settings, topologies)
        if first is None:
            first = (pod, constraint)
            continue
        other = first[1]
        if (other.agreement() if other else None) != (
            constraint.agreement() if constraint else None
        ):
            theirs = other.says if other else "no topology constraint"
            mine = constraint.says if constraint else "no topology constraint"
            raise TopologyPending(
                f"members disagree on topology: pod {first[0].key}: {theirs}; pod {pod.key}: {mine}"
            )
    return first[1] if first else None
