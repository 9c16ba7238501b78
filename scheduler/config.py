"""The configuration file (configs/scheduler.yaml), typed with msgspec.

Every section is a Struct with ``forbid_unknown_fields``, so a typo is an error, not a silently
ignored setting. Errors are collected: each section is validated on its own and every problem is
reported with its field path in one ConfigError, the way a person fixing the file wants them.

Settings of the running scheduler can also come from the environment (``TOPO_SCHEDULER_*``), and
command-line flags override both; see ``Config.with_overrides``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from scheduler.core.settings import VENDORS, CoreSettings


class ConfigError(ValueError):
    pass


class Defaults(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    gpu_policy: Literal["topology-aware", "binpack", "spread"] = "topology-aware"
    node_policy: Literal["binpack", "spread"] = "binpack"
    shared_gpu_policy: Literal["topology-aware", "binpack", "spread"] = "binpack"


class Gang(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    # How long a gang may wait for its missing members before its pods say so in their reason.
    wait_timeout_seconds: int = 600


class Lease(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    duration_seconds: float = 15.0
    renew_seconds: float = 5.0
    retry_seconds: float = 2.0


class Run(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    # Empty: the embedded in-memory store (one replica only).
    redis_url: str = ""
    redis_prefix: str = "topo-scheduler"
    # host:port of /healthz, /readyz, /metrics and /debug; port 0 picks a free port.
    http_address: str = "0.0.0.0:8080"
    bind_concurrency: int = 16
    lease: Lease = msgspec.field(default_factory=Lease)


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
    run: Run = msgspec.field(default_factory=Run)

    def to_core(self) -> CoreSettings:
        return CoreSettings(
            gpu_resources={r: vendor for vendor, names in self.resources.items() for r in names},
            gpu_policy=self.defaults.gpu_policy,
            node_policy=self.defaults.node_policy,
            shared_gpu_policy=self.defaults.shared_gpu_policy,
        )

    def with_run(self, **changes: Any) -> Config:
        """A copy with some ``run`` settings replaced (flags and environment)."""
        return msgspec.structs.replace(self, run=msgspec.structs.replace(self.run, **changes))


_SECTIONS: dict[str, Any] = {
    "schedulerName": str,
    "resources": dict[str, list[str]],
    "defaults": Defaults,
    "gang": Gang,
    "run": Run,
}


def _path_of(exc: msgspec.ValidationError, section: str) -> str:
    text = str(exc)
    message, sep, path = text.rpartition(" - at `")
    if not sep:
        return f"{section}: {text}"
    sub = path.rstrip("`").removeprefix("$")
    return f"{section}{sub}: {message}"


def parse_config(data: Any, source: str = "config") -> Config:
    """Validate a loaded document; raises ConfigError listing every problem with its path."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(data).__name__}")
    problems: list[str] = []
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _SECTIONS:
            problems.append(f"{key}: unknown field (known: {', '.join(_SECTIONS)})")
            continue
        try:
            values[key] = msgspec.convert(value, _SECTIONS[key])
        except msgspec.ValidationError as exc:
            problems.append(_path_of(exc, key))
    resources = values.get("resources")
    if isinstance(resources, dict):
        seen: dict[str, str] = {}
        for vendor, names in resources.items():
            if vendor not in VENDORS:
                problems.append(f"resources.{vendor}: unknown vendor (known: {', '.join(VENDORS)})")
            for name in names:
                if name in seen:
                    problems.append(
                        f"resources.{vendor}: {name} is already listed under {seen[name]}"
                    )
                seen[name] = vendor
    run = values.get("run")
    if isinstance(run, Run):
        if run.bind_concurrency < 1:
            problems.append("run.bindConcurrency: must be at least 1")
        lease = run.lease
        if not 0 < lease.renew_seconds < lease.duration_seconds:
            problems.append("run.lease.renewSeconds: must be above 0 and below durationSeconds")
        if ":" not in run.http_address:
            problems.append(f"run.httpAddress: {run.http_address!r} is not host:port")
    gang = values.get("gang")
    if isinstance(gang, Gang) and gang.wait_timeout_seconds < 0:
        problems.append("gang.waitTimeoutSeconds: must not be negative")
    if "schedulerName" in values and not values["schedulerName"]:
        problems.append("schedulerName: must not be empty")
    if problems:
        noun = "problem" if len(problems) == 1 else "problems"
        listed = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"{source}: {len(problems)} {noun}:\n{listed}")
    return msgspec.convert(data, Config)


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
