"""The configuration file (configs/scheduler.yaml), typed with msgspec.

Every section is a Struct with ``forbid_unknown_fields``, so a typo is an error, not a silently
ignored setting. Errors are collected: each section, and each field inside it, is validated on its
own and every problem is reported with its field path in one ConfigError, the way a person fixing
the file wants them. Only then are the cross-field rules checked (a resource under two vendors, a
lease renewed after it expires), on the sections that were well-typed.

Settings of the running scheduler can also come from the environment (``TOPO_SCHEDULER_*``), and
command-line flags override both; see ``Config.with_overrides``.

Every tuning value (a number that trades a decision's quality, or the scheduler's speed, against
its cost or the time it waits) is a field of these Structs with a default: the core's are
CoreSettings' (``to_core``: the fragmentation and memos sections are the core's own Structs), the
running scheduler's are ``run.tuning`` (tuning.py). Their ranges are one table (ranges.py).
Values fixed by an outside contract (a Kubernetes API limit, a wire format's size) stay named
constants beside their use. docs/configuration.md documents every field (a unit test checks it
against these Structs).
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
    DraLimits,
    FragmentationSettings,
    MemoSettings,
    PreemptionSettings,
    TopologySettings,
)
from scheduler.state.sentinel import sentinel_address, sentinel_credentials

from .agent import AgentConfig, check_agent
from .ranges import check_ranges
from .tuning import Tuning


class ConfigError(ValueError):
    pass


class Defaults(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    gpu_policy: Literal["topology-aware", "binpack", "spread"] = "topology-aware"
    node_policy: Literal["binpack", "spread"] = "binpack"
    shared_gpu_policy: Literal["topology-aware", "binpack", "spread"] = "binpack"


class PlacementOrder(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    """The ``placement`` section: the cluster's node order. ``fragmentation`` and ``smallestFit``
    are what node policy binpack puts first (CoreSettings.binpack_order); ``spread`` is node
    policy spread, for the pods that name no policy, as ``defaults.nodePolicy: spread`` says it
    (``Config.to_core`` makes the two one). A pod's hami.io/node-scheduler-policy still wins:
    spread spreads it, binpack orders it by the binpack order (fragmentation when nodeOrder is
    spread)."""

    node_order: Literal["fragmentation", "smallestFit", "spread"] = "fragmentation"


class Gang(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    # How long a gang may wait (for its missing members, or for room) before its pods say so in
    # their reason and get a GangTimeout event; a PodGroup's scheduleTimeoutSeconds overrides it.
    wait_timeout_seconds: int = 600
    # A running gang that falls below its minimum (a member failed or was deleted): "report"
    # sends an event at once; "evict" also evicts its remaining members through the Eviction API
    # after staleGangGraceSeconds, unless the gang is back at its minimum by then.
    stale_gang_policy: Literal["report", "evict"] = "report"
    stale_gang_grace_seconds: int = 60


# The defaults of the core's settings, which the fields below that fill them start from.
_CORE = CoreSettings()


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
    # host is not used. docs/operations.md "State and HA".
    master_name: str = ""
    # host:port of each Sentinel, e.g. [redis-0.redis:26379, ...]. One that is down is skipped.
    addresses: tuple[str, ...] = ()


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
    # Cross-node topology (issue 21; docs/topology.md): node-label keys, widest first
    # (hostname is always the last level, implied); the label of the built-in levels nvlink and
    # nvlink-domain ("" turns them off); whether gangs without a constraint prefer the fewest
    # domains.
    levels: list[Level] = msgspec.field(default_factory=list)
    accelerator_label: str = DEFAULT_ACCELERATOR_LABEL
    compact_gangs: bool = True
    # Domain plans a gang tries (each costs a node-level plan) before it gives the reason.
    max_plans: int = _CORE.topology.max_plans
    # Single pods' ties go to the domains already broken (placement/domainorder.py).
    pack_domains: bool = _CORE.topology.pack_domains
    # A gang no domain holds spares the top-level domains with the most free (domainchoice.py).
    spill_broken_first: bool = _CORE.topology.spill_broken_first
    # A gang without a required level leaves the domains kept for the gangs waiting for one
    # while another plan packs it (gangs/waiting.py).
    yield_to_required: bool = _CORE.topology.yield_to_required


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
    placement: PlacementOrder = msgspec.field(default_factory=PlacementOrder)
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
    # The bounds of one DRA allocation: the core's own Struct, camelCase here.
    dra: DraLimits = msgspec.field(default_factory=DraLimits)

    def to_core(self) -> CoreSettings:
        order = self.placement.node_order
        return CoreSettings(
            gpu_resources={r: vendor for vendor, names in self.resources.items() for r in names},
            gpu_policy=self.defaults.gpu_policy,
            # Spread in either setting spreads the pods that name no policy.
            node_policy="spread" if order == "spread" else self.defaults.node_policy,
            binpack_order="fragmentation" if order == "spread" else order,
            shared_gpu_policy=self.defaults.shared_gpu_policy,
            topology=TopologySettings(
                levels=tuple(TopologyLevel(lv.node_label, lv.alias) for lv in self.topology.levels),
                accelerator_label=self.topology.accelerator_label,
                compact_gangs=self.topology.compact_gangs,
                max_plans=self.topology.max_plans,
                pack_domains=self.topology.pack_domains,
                spill_broken_first=self.topology.spill_broken_first,
                yield_to_required=self.topology.yield_to_required,
            ),
            fragmentation=self.fragmentation,
            memos=self.memos,
            dra=self.dra,
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
    "placement": PlacementOrder,
    "gang": Gang,
    "preemption": Preemption,
    "run": Run,
    "agent": AgentConfig,
    "topology": Topology,
    "fragmentation": FragmentationSettings,
    "memos": MemoSettings,
    "dra": DraLimits,
}


_NULLABLE_SECTIONS = frozenset(
    {
        "resources",
        "defaults",
        "placement",
        "gang",
        "preemption",
        "run",
        "agent",
        "topology",
        "fragmentation",
        "memos",
        "dra",
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
