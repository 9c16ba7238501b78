"""Where a pod's gang comes from: six sources, read as one gang.

A gang is ``namespace/name`` with a **minimum** (how many members must be placed together, all
or nothing) and a **total** (how many members to expect; 0 when the source does not say). The
members beyond the minimum are its surplus: they bind when capacity appears, and a surplus member
that does not fit is not a gang failure.

- ACK labels: the name in label ``gpu-topology``, the minimum and total in label
  ``gpu-topology-replica``.
- scheduler-plugins PodGroup: label ``scheduling.x-k8s.io/pod-group`` names the PodGroup; its
  ``spec.minMember`` is the minimum; the total is not said.
- Kueue plain pods: label ``kueue.x-k8s.io/pod-group-name``; annotation
  ``kueue.x-k8s.io/pod-group-total-count`` is both minimum and total.
- Volcano: annotation ``scheduling.k8s.io/group-name`` names a Volcano PodGroup
  (``scheduling.volcano.sh``) whose ``spec.minMember`` is the minimum.
- Koordinator: annotations ``gang.scheduling.koordinator.sh/name``, ``.../min-available`` (the
  minimum) and ``.../total-number`` (the total; default: the minimum).
- The upstream Workload API (Kubernetes v1.37, ``scheduling.k8s.io/v1beta1``): the pod's
  ``spec.schedulingGroup.podGroupName`` names a PodGroup whose
  ``spec.schedulingPolicy.gang.minCount`` is the minimum (a ``basic`` policy reads 1: each pod on
  its own); its ``spec.schedulingConstraints.topology[].key`` is a required topology
  constraint of the gang (``gangs/constraints.pod_asks``).

A pod may name several sources (a Kueue pod group that also carries ACK's labels, say): they
must name the same gang with the same sizes where both say one, else the pod stays pending with
a reason naming both. ``resolve`` reads the pod alone when it is given no PodGroups (the sizes a
PodGroup holds are then 0: unknown), and with the snapshot's PodGroups when deciding: a pod whose
PodGroup does not exist (yet) waits for it (``GangPending``).
"""

from __future__ import annotations

from collections.abc import Mapping

from msgspec import Struct

from . import names
from .objects import PodGroupInput, PodInput

# A gang larger than this is refused as malformed (a typo, not a job): it would only wait forever.
MAX_GANG_SIZE = 100_000
UPSTREAM = "schedulingGroup"  # the kind of source of the upstream Workload API's PodGroups


class GangError(ValueError):
    """The pod's gang sources are malformed or disagree: it cannot be planned as it is."""


class GangPending(GangError):
    """The pod names a PodGroup that does not exist (yet): it waits for it."""


class Source(Struct, frozen=True):
    # as reasons name it: "gpu-topology", "PodGroup", "Kueue", "Volcano", "Koordinator",
    # "schedulingGroup"
    kind: str
    name: str
    minimum: int = 0  # 0: held by a PodGroup object
    total: int = 0  # 0: not said
    group: str = ""  # the PodGroup's API group, for the sources that name one

    def says(self, minimum: int, total: int) -> str:
        if self.kind == "gpu-topology":
            return f"label {names.GANG_LABEL}={self.name} with {names.GANG_REPLICA_LABEL}={minimum}"
        if self.kind == "Kueue":
            return (
                f"label {names.KUEUE_GROUP_LABEL}={self.name} with "
                f"{names.KUEUE_TOTAL_ANNOTATION}={minimum}"
            )
        if self.kind == "Koordinator":
            return (
                f"annotation {names.KOORD_GANG_NAME_ANNOTATION}={self.name} with min-available "
                f"{minimum}, total-number {total}"
            )
        if self.kind == UPSTREAM:
            where = f"spec.schedulingGroup.podGroupName={self.name}"
            return f"{where} with minCount {minimum}" if minimum else where
        if not minimum:  # not read yet
            return f"{self.kind} {self.name}"
        return f"{self.kind} {self.name} with minMember {minimum}"


class Gang(Struct, frozen=True):
    key: str  # "namespace/name"
    minimum: int  # members placed together, all or nothing; 0: unknown (a PodGroup not read)
    total: int = 0  # members expected; 0: not said
    sources: tuple[str, ...] = ()  # the kinds of source the pod names, in the table's order
    # How long its members may wait before a GangTimeout (a PodGroup's scheduleTimeoutSeconds);
    # None: the config's gang.waitTimeoutSeconds.
    timeout_s: int | None = None


def pod_sources(pod: PodInput) -> tuple[Source, ...]:
    """The gang sources a pod names, as the pod says them; GangError when one is malformed."""
    out: list[Source] = []
    labels, annotations = pod.labels, pod.annotations
    job = labels.get(names.GANG_LABEL)
    raw = labels.get(names.GANG_REPLICA_LABEL)
    if job is not None or raw is not None:
        if not job:
            raise GangError(
                f"pod {pod.key}: label {names.GANG_REPLICA_LABEL} is set but {names.GANG_LABEL} "
                "(the job name) is missing or empty"
            )
        if raw is None:
            raise GangError(
                f"pod {pod.key}: label {names.GANG_LABEL}={job} needs {names.GANG_REPLICA_LABEL} "
                "(the number of replicas)"
            )
        n = _size(pod, f"label {names.GANG_REPLICA_LABEL}", raw)
        out.append(Source("gpu-topology", job, n, n))
    group = labels.get(names.POD_GROUP_LABEL)
    if group is not None:
        _name(pod, f"label {names.POD_GROUP_LABEL}", group)
        out.append(Source("PodGroup", group, group=names.POD_GROUP_API))
    kueue = labels.get(names.KUEUE_GROUP_LABEL)
    if kueue is not None:
        _name(pod, f"label {names.KUEUE_GROUP_LABEL}", kueue)
        whose = f"label {names.KUEUE_GROUP_LABEL}={kueue}"
        n = _needed(pod, whose, annotations, names.KUEUE_TOTAL_ANNOTATION)
        out.append(Source("Kueue", kueue, n, n))
    volcano = annotations.get(names.VOLCANO_GROUP_ANNOTATION)
    if volcano is not None:
        _name(pod, f"annotation {names.VOLCANO_GROUP_ANNOTATION}", volcano)
        out.append(Source("Volcano", volcano, group=names.VOLCANO_POD_GROUP_API))
    koord = annotations.get(names.KOORD_GANG_NAME_ANNOTATION)
    if koord is not None:
        _name(pod, f"annotation {names.KOORD_GANG_NAME_ANNOTATION}", koord)
        whose = f"annotation {names.KOORD_GANG_NAME_ANNOTATION}={koord}"
        minimum = _needed(pod, whose, annotations, names.KOORD_GANG_MIN_ANNOTATION)
        total = minimum
        raw = annotations.get(names.KOORD_GANG_TOTAL_ANNOTATION)
        if raw is not None:
            total = _size(pod, f"annotation {names.KOORD_GANG_TOTAL_ANNOTATION}", raw)
            if total < minimum:
                raise GangError(
                    f"pod {pod.key}: annotation {names.KOORD_GANG_TOTAL_ANNOTATION}: {total} is "
                    f"below {names.KOORD_GANG_MIN_ANNOTATION} ({minimum})"
                )
        out.append(Source("Koordinator", koord, minimum, total))
    if pod.scheduling_group:
        out.append(Source(UPSTREAM, pod.scheduling_group, group=names.UPSTREAM_POD_GROUP_API))
    return tuple(out)


def gang_key(pod: PodInput) -> str | None:
    """The key of the gang the pod names first (None: no gang, or malformed sources: deciding
    the pod reports those)."""
    try:
        sources = pod_sources(pod)
    except GangError:
        return None
    return f"{pod.namespace}/{sources[0].name}" if sources else None


def resolve(pod: PodInput, pod_groups: Mapping[str, PodGroupInput] | None = None) -> Gang | None:
    """The pod's gang, every source it names agreeing; None without one.

    Without ``pod_groups`` only what the pod says is read (a PodGroup's minimum is 0); with
    them, a PodGroup the pod names must exist (else GangPending) and its minMember counts.
    GangError when the sources are malformed or disagree.
    """
    sources = pod_sources(pod)
    if not sources:
        return None
    for other in sources[1:]:
        if other.name != sources[0].name:
            raise GangError(
                f"pod {pod.key}: gang sources name different gangs: "
                f"{sources[0].says(sources[0].minimum, sources[0].total)}; "
                f"{other.says(other.minimum, other.total)}"
            )
    sized: list[tuple[Source, int, int]] = []
    timeout: int | None = None
    for source in sources:
        minimum, total = source.minimum, source.total
        if source.group and pod_groups is not None:
            group = pod_groups.get(f"{source.group}/{pod.namespace}/{source.name}")
            if group is None:
                kind = "PodGroup" if source.kind == UPSTREAM else source.kind
                raise GangPending(
                    f"pod {pod.key}: waiting for {kind} {pod.namespace}/{source.name} "
                    f"({source.group}) to exist"
                )
            if group.min_member < 1 or group.min_member > MAX_GANG_SIZE:
                upstream = source.kind == UPSTREAM
                kind = "PodGroup" if upstream else source.kind
                field = "spec.schedulingPolicy.gang.minCount" if upstream else "spec.minMember"
                raise GangError(
                    f"{kind} {group.namespace}/{group.name}: {field} "
                    f"{group.min_member} must be between 1 and {MAX_GANG_SIZE}"
                )
            minimum = group.min_member
            if group.schedule_timeout_seconds is not None:
                timeout = group.schedule_timeout_seconds
        sized.append((source, minimum, total))
    first, first_min, first_total = sized[0]
    for other, minimum, total in sized[1:]:
        differ = (first_min and minimum and first_min != minimum) or (
            first_total and total and first_total != total
        )
        if differ:
            raise GangError(
                f"pod {pod.key}: gang sources disagree on the gang's size: "
                f"{first.says(first_min, first_total)}; {other.says(minimum, total)}"
            )
    minimum = max(m for _, m, _ in sized)
    total = max(t for _, _, t in sized)
    return Gang(
        key=f"{pod.namespace}/{first.name}",
        minimum=minimum,
        total=total,
        sources=tuple(s.kind for s in sources),
        timeout_s=timeout,
    )


def best_known(pod: PodInput, pod_groups: Mapping[str, PodGroupInput]) -> Gang | None:
    """The pod's gang as far as it is known, never raising: for a bound pod's holding, which
    is charged whatever its labels say (a missing PodGroup leaves the minimum unknown, 0)."""
    try:
        return resolve(pod, pod_groups)
    except GangPending:
        pass
    except GangError:
        return None
    try:
        return resolve(pod)
    except GangError:
        return None


def group_minimum(gang: str, pod_groups: Mapping[str, PodGroupInput]) -> int:
    """The minimum of the PodGroup that holds gang ``gang``'s size ("namespace/name") as it
    is now (0: no PodGroup holds it), for its bound members. A PodGroup's minimum changes under
    members bound already: a job scaled down lowers minMember, and the upstream PodGroup is
    replaced with a new minCount; kube-scheduler's coscheduling reads minMember at every cycle.
    Their holdings keep the minimum they were charged with, which then disagreed with the
    pending members' for good (the gang waited beside free GPUs, below its minimum: soak seed
    5963). A size a pod's own labels or annotations say changes with the pod, in its event."""
    for api in (names.POD_GROUP_API, names.VOLCANO_POD_GROUP_API, names.UPSTREAM_POD_GROUP_API):
        group = pod_groups.get(f"{api}/{gang}")
        if group is not None and 1 <= group.min_member <= MAX_GANG_SIZE:
            return group.min_member
    return 0


def _name(pod: PodInput, where: str, value: str) -> None:
    if not value:
        raise GangError(f"pod {pod.key}: {where} is empty")


def _needed(pod: PodInput, whose: str, annotations: Mapping[str, str], name: str) -> int:
    """The size in annotation ``name``, which the source ``whose`` needs."""
    raw = annotations.get(name)
    if raw is None:
        raise GangError(f"pod {pod.key}: {whose} needs annotation {name}")
    return _size(pod, f"annotation {name}", raw)


def _size(pod: PodInput, where: str, raw: str) -> int:
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1 or n > MAX_GANG_SIZE:
        raise GangError(
            f"pod {pod.key}: {where}: {raw!r} must be a positive integer (at most {MAX_GANG_SIZE})"
        )
    return n
