"""The configuration file (configs/scheduler.yaml), typed with msgspec.

Every section is a Struct with ``forbid_unknown_fields``, so a typo is an error, not a silently
ignored setting. Errors are collected: each section, and each field inside it, is validated on its
own and every problem is reported with its field path in one ConfigError, the way a person fixing
the file wants them. Only then are the cross-field rules checked (a resource under two vendors, a
lease renewed after it expires), on the sections that were well-typed.

Settings of the running scheduler can also come from the environment (``TOPO_SCHEDULER_*``), and
command-line flags override both; see ``Config.with_overrides``.

Every tuning value (a number that trades a decision's quality, or the scheduler's speed, against
its cost or the time it waits) is a field here with today's value as its default: the core's are
CoreSettings' (``to_core``), the running scheduler's are ``run.tuning``, handed to the parts that
use them (service/scheduler.py, service/app.py); a part of state/ or kube/ keeps its default as a
parameter default, which the field here starts from. Values fixed by an outside contract (a
Kubernetes API limit, a wire format's size) stay named constants beside their use.
docs/configuration.md documents every field (a unit test checks it against these Structs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from scheduler.core.model.objects import TopologyLevel
from scheduler.core.settings import (
    DEFAULT_ACCELERATOR_LABEL,
    VENDORS,
    CoreSettings,
    FragmentationSettings,
    MemoSettings,
    PreemptionSettings,
    TopologySettings,
)
from scheduler.kube.tuning import LIST_PAGE, POOL_SIZE, REQUEST_TIMEOUT_S, WatchTiming
from scheduler.state.redis_store import RECONCILE_CHUNK, REDIS_TIMEOUT_S
from scheduler.state.sentinel import SENTINEL_TIMEOUT_S, sentinel_address, sentinel_credentials

from .agent import AgentConfig, check_agent
from .ranges import check_ranges


class ConfigError(ValueError):
    pass


class Defaults(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    gpu_policy: Literal["topology-aware", "binpack", "spread"] = "topology-aware"
    node_policy: Literal["binpack", "spread"] = "binpack"
    shared_gpu_policy: Literal["topology-aware", "binpack", "spread"] = "binpack"


class Gang(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    # How long a gang may wait (for its missing members, or for room) before its pods say so in
    # their reason and get a GangTimeout event; a PodGroup's scheduleTimeoutSeconds overrides it.
    wait_timeout_seconds: int = 600
    # A running gang that falls below its minimum (a member failed or was deleted): "report"
    # sends an event at once; "evict" also evicts its remaining members through the Eviction API
    # after staleGangGraceSeconds, unless the gang is back at its minimum by then.
    stale_gang_policy: Literal["report", "evict"] = "report"
    stale_gang_grace_seconds: int = 60


# The defaults of the core's and the watches' settings, which the fields below that fill them
# start from.
_CORE = CoreSettings()
_WATCH = WatchTiming()


class Preemption(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    # How long the GPUs freed for a preemptor stay held for it (its nomination) if it does not
    # bind: its victims may be slow to leave, or a PodDisruptionBudget may refuse one.
    hold_seconds: int = 300
    # After a search found no victims, the unit is not searched for again before this long
    # (service/preemption.py): a search weighs every pod of lower priority.
    retry_seconds: float = 30.0
    # The core's search bounds (CoreSettings.preemption, core/preemption/candidates.py).
    min_candidate_nodes: int = _CORE.preemption.min_candidate_nodes
    min_candidate_nodes_percent: int = _CORE.preemption.min_candidate_nodes_percent
    max_candidate_domains: int = _CORE.preemption.max_candidate_domains


class Lease(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    duration_seconds: float = 15.0
    renew_seconds: float = 5.0
    retry_seconds: float = 2.0


class RedisSentinel(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    # Non-empty: find the Redis master through these Sentinels (redis-py's Sentinel client);
    # the password and database then come from redisUrl (redis://:PASSWORD@ignored/0), whose
    # host is not used. README "State and HA".
    master_name: str = ""
    # host:port of each Sentinel, e.g. [redis-0.redis:26379, ...]. One that is down is skipped.
    addresses: tuple[str, ...] = ()


class Tuning(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    """The running scheduler's speed against its load and its waits (``run.tuning``); each is
    handed to the one part that uses it. docs/configuration.md says what each one trades."""

    # service/cycle.py: the most pods decided back to back before their claims go to the store
    # in one call (a backlog's store calls against how long watch events wait for a batch).
    batch_pods: int = 32
    # service/binder.py: tries of a Binding that failed for a reason worth retrying, the n-th
    # retry waiting n times bindRetrySeconds.
    bind_attempts: int = 3
    bind_retry_seconds: float = 0.5
    # service/effects.py: a failed re-read of a pod (effect CHECK) is tried again after this
    # long; an uncertain Binding (effect REBIND) is sent again after rebindSeconds.
    check_retry_seconds: float = 1.0
    rebind_seconds: float = 1.0
    # service/queue.py (kube-scheduler's podInitialBackoffSeconds, podMaxBackoffSeconds,
    # podMaxInUnschedulablePodsDuration): a failed pod's backoff doubles from the first to the
    # second; an unschedulable pod is retried after the third at the latest.
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    pod_max_unschedulable_seconds: float = 300.0
    # service/storesync.py: after a failed store write the store is reconciled with the
    # apiserver at most this often; writes queued meanwhile go at most storeWriteBatch per call.
    store_reconcile_seconds: float = 2.0
    store_write_batch: int = 1000
    # state/redis_store.py: items per fenced reconcile call; how long a Redis call may take
    # before it counts as failed.
    store_reconcile_chunk: int = RECONCILE_CHUNK
    redis_timeout_seconds: float = REDIS_TIMEOUT_S
    # state/sentinel.py: how long a Sentinel may take to answer before the next one is asked.
    sentinel_timeout_seconds: float = SENTINEL_TIMEOUT_S
    # service/inventories.py: a burst of node events within this long is one store call.
    inventory_flush_seconds: float = 0.05
    # kube/client.py: apiserver connections besides the binds in flight (bindConcurrency).
    api_connections: int = POOL_SIZE
    # kube/api.py: how long one apiserver call may take before it counts as failed.
    api_timeout_seconds: float = REQUEST_TIMEOUT_S
    # kube/api.py: pods per page of a paged LIST.
    list_page_size: int = LIST_PAGE
    # service/podgroups.py: PodGroup status patches in flight at once; passes of the status
    # writer at least this far apart; a pass every podGroupIdleSeconds without being woken.
    pod_group_patches_in_flight: int = 4
    pod_group_pass_seconds: float = 0.2
    pod_group_idle_seconds: float = 1.0
    # service/podgroups.py: the PodGroup and Topology CRDs are looked at again this often (one
    # GET each); sooner, every crdRetrySeconds, while one cannot be read.
    crd_check_seconds: float = 60.0
    crd_retry_seconds: float = 5.0
    # service/events.py: pod Events waiting to be written, at most; past it they are dropped.
    event_queue_size: int = 1000
    # service/scheduler.py: the loop wakes at least this often while idle, so its timers
    # (nominations' and stale gangs' expiry) run at most this late.
    loop_tick_seconds: float = 1.0
    # service/app.py: the shutdown's time bounds: the binds in flight, the lease's release,
    # every other step (keep their sum within the pod's terminationGracePeriodSeconds); and
    # within the drain, how long the queued pod Events may take to be written.
    shutdown_drain_seconds: float = 20.0
    shutdown_release_seconds: float = 3.0
    shutdown_step_seconds: float = 1.0
    shutdown_events_seconds: float = 5.0
    # kube/tuning.py (WatchTiming): a watch's own timeout; the backoff after a failed LIST or
    # watch, doubling up to the max; LIST items decoded between two turns of the event loop.
    watch_timeout_seconds: int = _WATCH.timeout_s
    watch_backoff_seconds: float = _WATCH.backoff_s
    watch_backoff_max_seconds: float = _WATCH.backoff_max_s
    list_decode_slice: int = _WATCH.decode_slice

    def watch_timing(self) -> WatchTiming:
        return WatchTiming(
            self.watch_timeout_seconds,
            self.watch_backoff_seconds,
            self.watch_backoff_max_seconds,
            self.list_decode_slice,
        )


class Run(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    # Empty: the embedded in-memory store (one replica only), unless redisSentinel is set.
    redis_url: str = ""
    redis_sentinel: RedisSentinel = msgspec.field(default_factory=RedisSentinel)
    redis_prefix: str = "topo-scheduler"
    # host:port of /healthz, /readyz, /metrics and /debug; port 0 picks a free port.
    http_address: str = "0.0.0.0:8080"
    # /debug answers loopback clients only unless this is true (it names pods, nodes and GPUs).
    debug_from_anywhere: bool = False
    bind_concurrency: int = 64
    lease: Lease = msgspec.field(default_factory=Lease)
    tuning: Tuning = msgspec.field(default_factory=Tuning)


class Level(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    node_label: str
    alias: str = ""


class Topology(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    # Cross-node topology (issue 21; README "Topology"): node-label keys, widest first
    # (hostname is always the last level, implied); the label of the built-in levels nvlink and
    # nvlink-domain ("" turns them off); whether gangs without a constraint prefer the fewest
    # domains.
    levels: list[Level] = msgspec.field(default_factory=list)
    accelerator_label: str = DEFAULT_ACCELERATOR_LABEL
    compact_gangs: bool = True
    # Domain plans a gang tries (each costs a node-level plan) before it gives the reason.
    max_plans: int = _CORE.topology.max_plans


def _check_topology(topology: Topology, problems: list[str]) -> None:
    seen: set[str] = set()
    for pos, level in enumerate(topology.levels):
        where = f"topology.levels[{pos}]"
        if not level.node_label:
            problems.append(f"{where}.nodeLabel: must not be empty")
        elif level.node_label == "kubernetes.io/hostname":
            problems.append(f"{where}.nodeLabel: hostname is always the last level, implied")
        for name in (level.node_label, level.alias):
            if name and name in seen:
                problems.append(f"{where}: {name} names two levels")
            seen.add(name)
    for builtin in ("nvlink", "nvlink-domain"):
        if topology.accelerator_label and builtin in seen:
            problems.append(f"topology.levels: {builtin} is a built-in level's name")


def _default_resources() -> dict[str, list[str]]:
    return {
        "nvidia": ["nvidia.com/gpu", "aliyun.com/gpu", "topo-scheduler.io/gpu"],
        "metax": ["metax-tech.com/gpu"],
    }


class Config(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    scheduler_name: str = "topo-scheduler"
    # Whole-GPU resource names per vendor.
    resources: dict[str, list[str]] = msgspec.field(default_factory=_default_resources)
    defaults: Defaults = msgspec.field(default_factory=Defaults)
    gang: Gang = msgspec.field(default_factory=Gang)
    preemption: Preemption = msgspec.field(default_factory=Preemption)
    run: Run = msgspec.field(default_factory=Run)
    # The node agent (`topo-scheduler agent`); its Structs live in scheduler/config/agent.py.
    agent: AgentConfig = msgspec.field(default_factory=AgentConfig)
    topology: Topology = msgspec.field(default_factory=Topology)
    # The fragmentation measure: the core's own Struct (core/settings.py), camelCase here.
    fragmentation: FragmentationSettings = msgspec.field(default_factory=FragmentationSettings)
    # How much a snapshot remembers between decisions: the core's own Struct, camelCase here.
    memos: MemoSettings = msgspec.field(default_factory=MemoSettings)

    def to_core(self) -> CoreSettings:
        return CoreSettings(
            gpu_resources={r: vendor for vendor, names in self.resources.items() for r in names},
            gpu_policy=self.defaults.gpu_policy,
            node_policy=self.defaults.node_policy,
            shared_gpu_policy=self.defaults.shared_gpu_policy,
            topology=TopologySettings(
                levels=tuple(TopologyLevel(lv.node_label, lv.alias) for lv in self.topology.levels),
                accelerator_label=self.topology.accelerator_label,
                compact_gangs=self.topology.compact_gangs,
                max_plans=self.topology.max_plans,
            ),
            fragmentation=self.fragmentation,
            memos=self.memos,
            preemption=PreemptionSettings(
                min_candidate_nodes=self.preemption.min_candidate_nodes,
                min_candidate_nodes_percent=self.preemption.min_candidate_nodes_percent,
                max_candidate_domains=self.preemption.max_candidate_domains,
            ),
        )

    def with_run(self, **changes: Any) -> Config:
        """A copy with some ``run`` settings replaced (flags and environment)."""
        return msgspec.structs.replace(self, run=msgspec.structs.replace(self.run, **changes))


_SECTIONS: dict[str, Any] = {
    "schedulerName": str,
    "resources": dict[str, list[str]],
    "defaults": Defaults,
    "gang": Gang,
    "preemption": Preemption,
    "run": Run,
    "agent": AgentConfig,
    "topology": Topology,
    "fragmentation": FragmentationSettings,
    "memos": MemoSettings,
}


_NULLABLE_SECTIONS = frozenset(
    {
        "resources",
        "defaults",
        "gang",
        "preemption",
        "run",
        "agent",
        "topology",
        "fragmentation",
        "memos",
    }
)


def path_of(exc: msgspec.ValidationError, section: str) -> str:
    """msgspec's "<message> - at `$.a.b`" as "<section>.a.b: <message>"."""
    text = str(exc)
    message, sep, path = text.rpartition(" - at `")
    if not sep:
        message, path = text, ""
    where = section + path.rstrip("`").removeprefix("$")
    # msgspec names the object holding an unknown field; a person wants the field's own path,
    # as for unknown top-level fields.
    if message.startswith("Object contains unknown field `"):
        return f"{where}.{message.split('`')[1]}: unknown field"
    return f"{where}: {message}"


def _check(value: Any, typ: Any, path: str, problems: list[str]) -> bool:
    """Validate ``value`` as ``typ`` field by field, so one section can report several problems.

    msgspec stops at the first error of a conversion; walking a Struct's fields ourselves (and
    converting each value on its own) lets a section with a typo and a bad value report both.
    Returns True when nothing was wrong.
    """
    if isinstance(value, dict) and isinstance(typ, type) and issubclass(typ, msgspec.Struct):
        fields = {f.encode_name: f.type for f in msgspec.structs.fields(typ)}
        ok = True
        for key, item in value.items():
            if key not in fields:
                problems.append(f"{path}.{key}: unknown field (known: {', '.join(fields)})")
                ok = False
            elif not _check(item, fields[key], f"{path}.{key}", problems):
                ok = False
        return ok
    try:
        msgspec.convert(value, typ)
    except msgspec.ValidationError as exc:
        problems.append(path_of(exc, path))
        return False
    return True


def _check_resources(value: Any, problems: list[str]) -> dict[str, list[str]] | None:
    """Each vendor's list on its own, so a problem is named ``resources.<vendor>``.

    (msgspec would say ``resources[...]``: it does not put dict keys into its paths.)
    """
    try:
        vendors = msgspec.convert(value, dict[str, Any])
    except msgspec.ValidationError as exc:
        problems.append(path_of(exc, "resources"))
        return None
    out: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    for vendor, raw in vendors.items():
        if vendor not in VENDORS:
            problems.append(f"resources.{vendor}: unknown vendor (known: {', '.join(VENDORS)})")
        try:
            names = msgspec.convert(raw, list[str])
        except msgspec.ValidationError as exc:
            problems.append(path_of(exc, f"resources.{vendor}"))
            continue
        for name in names:
            if name in seen:
                again = (
                    "listed twice" if seen[name] == vendor else f"also listed under {seen[name]}"
                )
                problems.append(f"resources.{vendor}: {name} is {again}")
            seen[name] = vendor
        out[vendor] = names
    return out


def parse_config(data: Any, source: str = "config") -> Config:
    """Validate a loaded document; raises ConfigError listing every problem with its path."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(data).__name__}")
    # A section whose every field is commented out loads as null: it means "all defaults".
    data = {k: v for k, v in data.items() if not (v is None and k in _NULLABLE_SECTIONS)}
    problems: list[str] = []
    values: dict[str, Any] = {}
    resources: dict[str, list[str]] | None = _default_resources()
    for key, value in data.items():
        if key not in _SECTIONS:
            problems.append(f"{key}: unknown field (known: {', '.join(_SECTIONS)})")
            continue
        if key == "resources":
            resources = _check_resources(value, problems)
            continue
        if _check(value, _SECTIONS[key], key, problems):
            values[key] = msgspec.convert(value, _SECTIONS[key])
    check_ranges(values, problems)
    run = values.get("run")
    if isinstance(run, Run):
        lease = run.lease
        if not 0 < lease.renew_seconds < lease.duration_seconds:
            problems.append("run.lease.renewSeconds: must be above 0 and below durationSeconds")
        if ":" not in run.http_address:
            problems.append(f"run.httpAddress: {run.http_address!r} is not host:port")
        tuning = run.tuning
        if tuning.pod_max_backoff_seconds < tuning.pod_initial_backoff_seconds:
            problems.append(
                "run.tuning.podMaxBackoffSeconds: must not be below podInitialBackoffSeconds"
            )
        if tuning.watch_backoff_max_seconds < tuning.watch_backoff_seconds:
            problems.append(
                "run.tuning.watchBackoffMaxSeconds: must not be below watchBackoffSeconds"
            )
        problems += sentinel_problems(run)
    agent = values.get("agent")
    if isinstance(agent, AgentConfig):
        # A broken resources section is reported on its own; do not judge the agent by it.
        nvidia = None if resources is None else resources.get("nvidia", [])
        check_agent(agent, problems, nvidia)
    topology = values.get("topology")
    if isinstance(topology, Topology):
        _check_topology(topology, problems)
    if "schedulerName" in values and not values["schedulerName"]:
        problems.append("schedulerName: must not be empty")
    if problems:
        noun = "problem" if len(problems) == 1 else "problems"
        listed = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"{source}: {len(problems)} {noun}:\n{listed}")
    return msgspec.convert(data, Config)


def sentinel_problems(run: Run) -> list[str]:
    """What is wrong with ``run.redisSentinel`` (and the ``redisUrl`` that goes with it); also
    checked after the environment and flags have overridden the file."""
    sentinel = run.redis_sentinel
    if not sentinel.master_name:
        if sentinel.addresses:
            return ["run.redisSentinel.masterName: must be set when addresses are given"]
        return []
    problems = []
    if not sentinel.addresses:
        problems.append("run.redisSentinel.addresses: must list at least one Sentinel host:port")
    for i, address in enumerate(sentinel.addresses):
        try:
            sentinel_address(address)
        except ValueError as exc:
            problems.append(f"run.redisSentinel.addresses[{i}]: {exc}")
    if run.redis_url:
        try:
            sentinel_credentials(run.redis_url)
        except ValueError as exc:
            problems.append(f"run.redisUrl: {exc}")
    return problems


def load_config(path: str | Path | None) -> Config:
    """The config at ``path``, or the defaults when None."""
    if path is None:
        return Config()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"config {path}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config {path}{where}: not valid YAML: {exc}") from None
    return parse_config(data, f"config {path}")
