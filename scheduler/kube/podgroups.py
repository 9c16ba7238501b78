"""PodGroups (scheduler-plugins' and Volcano's) and what the scheduler says back about pods and
groups: the codec of the custom resources, and the small outcomes of the gang calls of ``api``.

Three PodGroup kinds name a gang's size:

- scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1`` (created by Kubeflow's training operator,
  JobSet, LeaderWorkerSet), ``spec.minMember``, also with ``spec.scheduleTimeoutSeconds``;
  deploy/optional/ has its CRD for clusters without scheduler-plugins;
- Volcano's ``scheduling.volcano.sh/v1beta1``, ``spec.minMember``;
- the upstream Workload API's ``scheduling.k8s.io/v1beta1`` (built into kube-apiserver v1.37,
  served when its GenericWorkload gate and API version are on): ``spec.schedulingPolicy.gang
  .minCount`` (a ``basic`` policy reads 1) and ``spec.schedulingConstraints.topology[].key``.

Decoding is in two steps, so that one bad PodGroup never stops a watch:

1. ``PodGroup`` (the reflector's item type) reads the object's identity and keeps ``spec`` as raw
   bytes; any object the apiserver serves decodes.
2. ``pod_group_from_obj`` checks the group, the names and the spec, strictly (JSON types as
   declared, no "3" for 3) and within bounds (``MAX_SPEC_BYTES``, ``MAX_MEMBERS``, int32 for the
   timeout, Kubernetes' name lengths), and raises ``PodGroupError`` naming the object and the
   field. ``pod_group_or_error`` returns that error instead of raising it.

``spec.minResources`` and Volcano's queue and per-task minimums are not read (they are skipped,
not validated, like every other field the scheduler does not use).

The custom resources ``KubeApi.list_kind`` / ``watch_kind`` serve are named like their CRDs,
``<plural>.<group>`` (``CUSTOM_RESOURCES``), so the same string asks whether the CRD exists
(``KubeApi.crd_established``; for the built-in upstream PodGroup, whether the apiserver serves
its API version) and lists and watches its objects.

No kubernetes-asyncio import here: everything is plain data, unit-tested without a cluster.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Final, Literal

import msgspec

from scheduler.core.model.objects import NetworkTopologyInput, PodGroupInput

SCHEDULER_PLUGINS_GROUP: Final = "scheduling.x-k8s.io"
VOLCANO_GROUP: Final = "scheduling.volcano.sh"
UPSTREAM_GROUP: Final = "scheduling.k8s.io"
# The pod label that names a pod's scheduler-plugins PodGroup (in the pod's namespace).
POD_GROUP_LABEL: Final = f"{SCHEDULER_PLUGINS_GROUP}/pod-group"

# Bounds. A PodGroup's spec is a few fields; minResources and Volcano's per-task minimums make it
# at most a few hundred bytes in practice, so 64 KiB is generous and still cheap to decode.
MAX_SPEC_BYTES: Final = 64 * 1024
# Decoding a whole object (decode_pod_group): etcd's default request limit is 1.5 MiB, so no
# object an apiserver serves is larger.
MAX_OBJECT_BYTES: Final = 1536 * 1024
# A gang larger than this is a mistake, not a training job: the scheduler refuses to plan it.
MAX_MEMBERS: Final = 100_000
INT32_MAX: Final = 2**31 - 1
MAX_NAME_LENGTH: Final = 253  # a DNS subdomain (PodGroup names)
MAX_NAMESPACE_LENGTH: Final = 63  # a DNS label


class CustomResource(msgspec.Struct, frozen=True):
    """A custom resource the scheduler lists and watches across all namespaces."""

    group: str
    version: str
    plural: str
    builtin: bool = False  # served by kube-apiserver itself (no CRD): asked by discovery

    @property
    def name(self) -> str:
        """``<plural>.<group>``: the CRD's name, and the kind ``list_kind`` / ``watch_kind``
        take."""
        return f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


POD_GROUPS: Final = CustomResource(SCHEDULER_PLUGINS_GROUP, "v1alpha1", "podgroups")
VOLCANO_POD_GROUPS: Final = CustomResource(VOLCANO_GROUP, "v1beta1", "podgroups")
UPSTREAM_POD_GROUPS: Final = CustomResource(UPSTREAM_GROUP, "v1beta1", "podgroups", builtin=True)
CUSTOM_RESOURCES: Final[dict[str, CustomResource]] = {
    r.name: r for r in (POD_GROUPS, VOLCANO_POD_GROUPS, UPSTREAM_POD_GROUPS)
}
POD_GROUP_GROUPS: Final = frozenset({SCHEDULER_PLUGINS_GROUP, VOLCANO_GROUP, UPSTREAM_GROUP})


# ---- the wire --------------------------------------------------------------------------------


class PodGroupMeta(msgspec.Struct, rename="camel"):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""


class PodGroup(msgspec.Struct, rename="camel"):
    """A PodGroup of either kind as the apiserver serves it, spec and status undecoded: the item
    type of the PodGroup reflectors (``metadata.resource_version`` is the version they advance
    to)."""

    api_version: str = ""
    kind: str = ""
    metadata: PodGroupMeta = msgspec.field(default_factory=PodGroupMeta)
    spec: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"{}"))
    status: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"{}"))


Members = Annotated[int, msgspec.Meta(ge=0, le=MAX_MEMBERS)]
Seconds = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]


class SchedulerPluginsSpec(msgspec.Struct, rename="camel"):
    min_member: Members = 0
    schedule_timeout_seconds: Seconds | None = None


class VolcanoNetworkTopology(msgspec.Struct, rename="camel"):
    """spec.networkTopology (issue 21: honoured through the configured topology levels)."""

    mode: Literal["hard", "soft"] = "hard"
    highest_tier_allowed: Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)] | None = None
    highest_tier_name: Annotated[str, msgspec.Meta(max_length=MAX_NAME_LENGTH)] | None = None


class VolcanoSpec(msgspec.Struct, rename="camel"):
    min_member: Members = 0
    network_topology: VolcanoNetworkTopology | None = None


class GangPolicyWire(msgspec.Struct, rename="camel"):
    min_count: Members = 0


class SchedulingPolicyWire(msgspec.Struct):
    basic: dict[str, Any] | None = None
    gang: GangPolicyWire | None = None


class TopologyConstraintWire(msgspec.Struct):
    key: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_LENGTH)]


class SchedulingConstraintsWire(msgspec.Struct):
    topology: list[TopologyConstraintWire] | None = None


class UpstreamSpec(msgspec.Struct, rename="camel"):
    """The upstream PodGroup's spec (scheduling.k8s.io/v1beta1): a gang policy's minCount is
    the minimum; a basic policy (each pod on its own) reads as a gang of 1."""

    scheduling_policy: SchedulingPolicyWire = msgspec.field(default_factory=SchedulingPolicyWire)
    scheduling_constraints: SchedulingConstraintsWire | None = None

    @property
    def min_member(self) -> int:
        gang = self.scheduling_policy.gang
        return gang.min_count if gang is not None else 1

    @property
    def topology_keys(self) -> tuple[str, ...]:
        constraints = self.scheduling_constraints
        if constraints is None:
            return ()
        return tuple(t.key for t in constraints.topology or ())


_SPEC_DECODERS: Final[dict[str, msgspec.json.Decoder[Any]]] = {
    SCHEDULER_PLUGINS_GROUP: msgspec.json.Decoder(SchedulerPluginsSpec),
    VOLCANO_GROUP: msgspec.json.Decoder(VolcanoSpec),
    UPSTREAM_GROUP: msgspec.json.Decoder(UpstreamSpec),
}


class PodGroupError(ValueError):
    """A PodGroup the scheduler cannot use: ``PodGroup <group>/<namespace>/<name>: <field>:
    <detail>``. ``key`` is ``PodGroupInput.key``'s form, so the pods that name the group can be
    told why they wait."""

    def __init__(self, group: str, namespace: str, name: str, field: str, detail: str) -> None:
        self.group = group
        self.namespace = namespace
        self.name = name
        self.field = field
        self.detail = detail
        super().__init__(f"PodGroup {self.key}: {field}: {detail}")

    @property
    def key(self) -> str:
        return f"{self.group or '?'}/{self.namespace or '?'}/{self.name or '?'}"


def _group_of(api_version: str) -> str:
    group, slash, _version = api_version.partition("/")
    return group if slash else ""


def pod_group_from_obj(obj: PodGroup) -> PodGroupInput:
    """The core's PodGroupInput; PodGroupError when the object is not a usable PodGroup."""
    meta = obj.metadata
    group = _group_of(obj.api_version)
    namespace = meta.namespace or "default"

    def error(field: str, detail: str) -> PodGroupError:
        return PodGroupError(
            group, namespace[:MAX_NAMESPACE_LENGTH], meta.name[:100], field, detail
        )

    if group not in POD_GROUP_GROUPS:
        known = " or ".join(sorted(POD_GROUP_GROUPS))
        raise error("apiVersion", f"{obj.api_version[:100]!r} is not a PodGroup of {known}")
    if obj.kind and obj.kind != "PodGroup":
        raise error("kind", f"expected PodGroup, got {obj.kind[:100]!r}")
    if not meta.name:
        raise error("metadata.name", "missing")
    if len(meta.name) > MAX_NAME_LENGTH:
        raise error("metadata.name", f"longer than {MAX_NAME_LENGTH} characters")
    if len(namespace) > MAX_NAMESPACE_LENGTH:
        raise error("metadata.namespace", f"longer than {MAX_NAMESPACE_LENGTH} characters")
    raw = bytes(obj.spec)
    if raw == b"null":  # "spec": null is an empty spec
        raw = b"{}"
    if len(raw) > MAX_SPEC_BYTES:
        raise error("spec", f"{len(raw)} bytes, more than the {MAX_SPEC_BYTES} allowed")
    try:
        spec = _SPEC_DECODERS[group].decode(raw)
    except msgspec.ValidationError as exc:
        field, detail = _where(exc)
        raise error(field, detail) from None
    except msgspec.DecodeError as exc:  # cannot happen for a Raw the decoder produced
        raise error("spec", str(exc)) from None
    return PodGroupInput(
        group,
        namespace,
        meta.name,
        min_member=spec.min_member,
        schedule_timeout_seconds=getattr(spec, "schedule_timeout_seconds", None),
        uid=meta.uid,
        # Volcano's controller writes its status; scheduler-plugins' may; the upstream one's
        # condition is written by the scheduler of its pods (kube-scheduler for its own).
        status_foreign=group == VOLCANO_GROUP
        or (group == SCHEDULER_PLUGINS_GROUP and observed_status(obj).foreign),
        network_topology=_network_topology(spec),
        topology_keys=getattr(spec, "topology_keys", ()),
    )


def _network_topology(spec: object) -> NetworkTopologyInput | None:
    found = getattr(spec, "network_topology", None)
    if found is None:
        return None
    return NetworkTopologyInput(found.mode, found.highest_tier_allowed, found.highest_tier_name)


# ---- status: who writes it -------------------------------------------------------------------

# The phases topo-scheduler writes (service/podgroups.py). scheduler-plugins' controller
# (pkg/controllers/podgroup_controller.go) writes Pending, Scheduling, Running, Failed and
# Finished; "Scheduling" is its alone, and PreScheduling, Scheduled and Unknown are older
# versions' (Scheduled is ours again since scheduler-plugins dropped it, PR 574).
OUR_PHASES: Final = frozenset({"", "Pending", "Scheduled", "Running", "Finished", "Failed"})


class _StatusCondition(msgspec.Struct):
    type: str = ""
    status: str = ""


class _GroupStatus(msgspec.Struct, rename="camel"):
    """A scheduler-plugins PodGroup's status, leniently: unknown fields are skipped and a field
    of the wrong type makes the whole status someone else's (``observed_status``)."""

    phase: str | None = None
    scheduled: int | None = None
    running: int | None = None
    conditions: list[_StatusCondition] | None = None  # the upstream PodGroup's
    occupied_by: str | None = None
    succeeded: int | None = None
    failed: int | None = None
    schedule_start_time: str | None = None


_status_decoder = msgspec.json.Decoder(_GroupStatus)


class ObservedStatus(msgspec.Struct, frozen=True):
    """What a PodGroup's status says: the three fields topo-scheduler writes, and whether
    anything in it shows that another controller writes it (``foreign``)."""

    phase: str = ""
    scheduled: int = 0
    running: int = 0
    foreign: bool = False
    # The upstream PodGroup's condition PodGroupInitiallyScheduled is True (terminal).
    initially_scheduled: bool = False


def observed_status(obj: PodGroup) -> ObservedStatus:
    """The status as read. It is foreign (scheduler-plugins' controller, or another tool, writes
    it) when it holds what topo-scheduler never writes: ``occupiedBy``, ``succeeded``,
    ``failed``, ``scheduleStartTime``, or a phase outside ``OUR_PHASES``; a status that does
    not decode is foreign too. Absent and null fields are 0 / empty (Go's omitempty)."""
    raw = bytes(obj.status)
    if len(raw) > MAX_SPEC_BYTES:
        return ObservedStatus(foreign=True)
    try:
        status = _status_decoder.decode(raw)
    except msgspec.DecodeError:  # "status": null is an empty status
        if raw.strip() == b"null":
            return ObservedStatus()
        return ObservedStatus(foreign=True)
    phase = status.phase or ""
    foreign = bool(
        status.occupied_by
        or status.succeeded
        or status.failed
        or status.schedule_start_time
        or phase not in OUR_PHASES
    )
    initially = any(
        c.type == INITIALLY_SCHEDULED and c.status == "True" for c in status.conditions or ()
    )
    return ObservedStatus(phase, status.scheduled or 0, status.running or 0, foreign, initially)


def _where(exc: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec's ``Expected `int` >= 0 - at `$.minMember``` as ("spec.minMember", "Expected
    `int` >= 0")."""
    detail, sep, path = str(exc).rpartition(" - at `$")
    if not sep:
        return "spec", str(exc)
    return "spec" + path.rstrip("`"), detail


def pod_group_or_error(obj: PodGroup) -> PodGroupInput | PodGroupError:
    """``pod_group_from_obj``, its error returned rather than raised (a reflector's convert)."""
    try:
        return pod_group_from_obj(obj)
    except PodGroupError as exc:
        return exc


_pod_group_decoder = msgspec.json.Decoder(PodGroup)


def decode_pod_group(raw: bytes) -> PodGroupInput:
    """One PodGroup's JSON (a GET's body, a file); PodGroupError when it is malformed,
    oversized or not a usable PodGroup."""
    if len(raw) > MAX_OBJECT_BYTES:
        raise PodGroupError("", "", "", "object", f"{len(raw)} bytes, more than {MAX_OBJECT_BYTES}")
    try:
        obj = _pod_group_decoder.decode(raw)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise PodGroupError("", "", "", "object", str(exc)) from None
    return pod_group_from_obj(obj)


def convert_pod_group(obj: dict[str, Any]) -> PodGroupInput:
    """From a YAML-loaded dict (``simulate``): the same checks as the apiserver's JSON."""
    try:
        raw = msgspec.json.encode(obj)
    except (TypeError, msgspec.EncodeError) as exc:  # e.g. a YAML date where text belongs
        raise PodGroupError("", "", "", "object", str(exc)) from None
    return decode_pod_group(raw)


class _ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""


class _RawList(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[PodGroup] = msgspec.field(default_factory=list)


class PodGroupList(msgspec.Struct, frozen=True):
    """A LIST response: the usable groups, the unusable ones' errors, the list's version."""

    resource_version: str
    groups: tuple[PodGroupInput, ...]
    errors: tuple[PodGroupError, ...]


_list_decoder = msgspec.json.Decoder(_RawList)


def decode_pod_group_list(raw: bytes) -> PodGroupList:
    """A PodGroupList (either kind). A malformed body raises msgspec.DecodeError, as the
    reflectors' LIST does; one unusable PodGroup is an entry of ``errors``."""
    listed = _list_decoder.decode(raw)
    groups: list[PodGroupInput] = []
    errors: list[PodGroupError] = []
    for item in listed.items:
        decoded = pod_group_or_error(item)
        if isinstance(decoded, PodGroupError):
            errors.append(decoded)
        else:
            groups.append(decoded)
    return PodGroupList(listed.metadata.resource_version, tuple(groups), tuple(errors))


class _WatchEvent(msgspec.Struct):
    type: str
    object: PodGroup


_event_decoder = msgspec.json.Decoder(_WatchEvent)


def decode_pod_group_event(line: bytes) -> tuple[str, PodGroupInput | PodGroupError]:
    """One watch line: (ADDED / MODIFIED / DELETED, the group or its error). BOOKMARK and ERROR
    events are the reflector's business (``watch.Reflector``), not this function's."""
    event = _event_decoder.decode(line)
    return event.type, pod_group_or_error(event.object)


# ---- writes: request bodies and outcomes -----------------------------------------------------


class PodGroupPhase(enum.StrEnum):
    """scheduler-plugins' PodGroup phases (``status.phase``), old and current."""

    PENDING = "Pending"
    PRE_SCHEDULING = "PreScheduling"
    SCHEDULING = "Scheduling"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    UNKNOWN = "Unknown"
    FINISHED = "Finished"
    FAILED = "Failed"


def pod_group_status_patch(phase: PodGroupPhase, scheduled: int, running: int) -> dict[str, Any]:
    """The merge patch of ``podgroups/status`` (other status fields are left as they are)."""
    if not 0 <= scheduled <= INT32_MAX or not 0 <= running <= INT32_MAX:
        raise ValueError(f"scheduled={scheduled} running={running}: counts are int32, >= 0")
    return {
        "status": {"phase": PodGroupPhase(phase).value, "scheduled": scheduled, "running": running}
    }


INITIALLY_SCHEDULED: Final = "PodGroupInitiallyScheduled"


def initially_scheduled_patch(message: str, now: str) -> dict[str, Any]:
    """The strategic merge patch (conditions merge by type) of an upstream PodGroup's status
    that sets PodGroupInitiallyScheduled True, reason Scheduled, as kube-scheduler writes it."""
    condition = {
        "type": INITIALLY_SCHEDULED,
        "status": "True",
        "reason": "Scheduled",
        "message": message,
        "lastTransitionTime": now,
    }
    return {"status": {"conditions": [condition]}}


def nominated_node_patch(node: str | None) -> dict[str, Any]:
    """The merge patch of ``pods/status`` that sets ``status.nominatedNodeName``, or removes it
    (null) for None or an empty name, as kube-scheduler clears it."""
    return {"status": {"nominatedNodeName": node or None}}


def eviction_body(namespace: str, name: str, uid: str, dry_run: bool = False) -> dict[str, Any]:
    """A policy/v1 Eviction of exactly this pod: the UID precondition keeps a pod recreated under
    the same name from being evicted in its predecessor's place. ``dry_run``: the apiserver
    answers as it would (the budgets checked) and changes nothing (``dryRun: [All]``)."""
    options: dict[str, Any] = {"preconditions": {"uid": uid}}
    if dry_run:
        options["dryRun"] = ["All"]
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": options,
    }


class Write(enum.Enum):
    """The outcome of a status patch; failures other than a missing object raise HttpError."""

    DONE = "done"
    GONE = "gone"  # 404: the object (or, for a PodGroup, its CRD) is not there


class Eviction(enum.Enum):
    EVICTED = "evicted"  # the apiserver accepted it: the pod is being deleted (gracefully)
    BLOCKED = "blocked"  # 429: a PodDisruptionBudget allows no disruption now; retry later
    GONE = "gone"  # 404, or the pod by that name has another UID: nothing to evict


class EvictResult(msgspec.Struct, frozen=True):
    outcome: Eviction
    status: int  # the apiserver's HTTP status
    message: str = ""  # the apiserver's reason (a PDB's, for BLOCKED)


class _Status(msgspec.Struct):
    message: str = ""


# The apiserver's words when a delete precondition on the UID fails (a 409): the pod by that name
# is a newer one. kube-apiserver 1.33 says "the UID in the precondition (..) does not match the
# UID in record (..)"; older ones "Precondition failed: UID in precondition: .., UID in object
# meta: ..". Other 409s (a resourceVersion conflict while the budget is updated) are errors.
_UID_PRECONDITION: Final = ("UID in the precondition", "UID in precondition")


def eviction_result(status: int, body: bytes) -> EvictResult | None:
    """The outcome of an Eviction answer, or None when it is an error to raise."""
    message = _message(body)
    if status in (200, 201):
        return EvictResult(Eviction.EVICTED, status)
    if status == 429:
        return EvictResult(Eviction.BLOCKED, status, message)
    if status == 404 or (status == 409 and any(p in message for p in _UID_PRECONDITION)):
        return EvictResult(Eviction.GONE, status, message)
    return None


def _message(body: bytes) -> str:
    try:
        return msgspec.json.decode(body, type=_Status).message[:500]
    except msgspec.DecodeError:
        return body.decode(errors="replace")[:500]


class _Condition(msgspec.Struct):
    type: str = ""
    status: str = ""


class _CrdVersion(msgspec.Struct):
    name: str = ""
    served: bool = False


class _CrdSpec(msgspec.Struct):
    versions: list[_CrdVersion] = msgspec.field(default_factory=list)


class _CrdStatus(msgspec.Struct):
    conditions: list[_Condition] = msgspec.field(default_factory=list)


class _Crd(msgspec.Struct):
    spec: _CrdSpec = msgspec.field(default_factory=_CrdSpec)
    status: _CrdStatus = msgspec.field(default_factory=_CrdStatus)


def crd_versions_served(body: bytes) -> set[str]:
    """The versions a CRD read says it serves."""
    crd = msgspec.json.decode(body, type=_Crd)
    return {v.name for v in crd.spec.versions if v.served}


def crd_is_established(body: bytes, name: str) -> bool:
    """A CRD read: condition Established is True, and, for a custom resource of
    ``CUSTOM_RESOURCES``, the version the scheduler asks for is served."""
    crd = msgspec.json.decode(body, type=_Crd)
    established = any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
    resource = CUSTOM_RESOURCES.get(name)
    if resource is None:
        return established
    served = any(v.name == resource.version and v.served for v in crd.spec.versions)
    return established and served


class _ApiResource(msgspec.Struct):
    name: str = ""


class _ApiResourceList(msgspec.Struct, rename="camel"):
    resources: list[_ApiResource] = msgspec.field(default_factory=list)


def serves(body: bytes, plural: str) -> bool:
    """Whether a discovery document (``GET /apis/<group>/<version>``) lists ``plural``."""
    try:
        listed = msgspec.json.decode(body, type=_ApiResourceList)
    except msgspec.DecodeError:
        return False
    return any(r.name == plural for r in listed.resources)


def listed_as(obj: PodGroup, resource: CustomResource) -> PodGroup:
    """An item of ``resource``'s LIST: a built-in API (the upstream PodGroup) leaves out its
    items' apiVersion and kind, which are the resource's (custom resources keep them)."""
    if obj.api_version:
        return obj
    return msgspec.structs.replace(obj, api_version=resource.api_version, kind="PodGroup")
