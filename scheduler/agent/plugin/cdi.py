"""Checking the node's CDI specs before the plugin hands out CDI device names.

Allocate answers CDI names like ``nvidia.com/gpu=<UUID>``; the container runtime resolves them
from the CDI spec files on the node (NVIDIA's container toolkit writes them under /etc/cdi or
/var/run/cdi, naming each GPU by index and by UUID). A name the runtime cannot resolve fails the
container only at creation, long after the kubelet accepted our answer, so the plugin checks at
start-up that every GPU it will advertise has a spec entry, and refuses to register otherwise:
a node without specs then simply offers no GPUs, and says why.

A spec is YAML or JSON with ``kind`` (``vendor/class``) and ``devices[].name``; the fully
qualified device name is ``<kind>=<name>``. Nothing else in the spec matters here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

DEFAULT_SPEC_DIRS: Final = (Path("/etc/cdi"), Path("/var/run/cdi"))
_SUFFIXES: Final = {".yaml", ".yml", ".json"}


class CdiSpecError(RuntimeError):
    pass


def device_names(spec_dirs: Iterable[Path]) -> tuple[set[str], list[str]]:
    """Every fully qualified CDI device name in the folders, and the files that were unreadable."""
    names: set[str] = set()
    problems: list[str] = []
    for folder in spec_dirs:
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix not in _SUFFIXES or not path.is_file():
                continue
            try:
                spec: Any = yaml.safe_load(path.read_text())  # JSON is YAML too
                kind = spec["kind"]
                names.update(f"{kind}={d['name']}" for d in spec.get("devices") or ())
            except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
                problems.append(f"{path}: {type(exc).__name__}: {exc}")
    return names, problems


def check_specs(spec_dirs: Sequence[Path], kind: str, uuids: Sequence[str]) -> None:
    """Raise CdiSpecError naming the GPUs without a ``<kind>=<UUID>`` entry in any spec."""
    names, problems = device_names(spec_dirs)
    missing = [u for u in uuids if f"{kind}={u}" not in names]
    if not missing:
        return
    where = ", ".join(str(d) for d in spec_dirs)
    message = (
        f"no CDI spec names {', '.join(f'{kind}={u}' for u in missing)} (searched {where}); "
        "generate them with NVIDIA's container toolkit (nvidia-ctk cdi generate, with UUID "
        "device names) or run the plugin with NVIDIA_VISIBLE_DEVICES injection"
    )
    if problems:
        message += f"; unreadable specs: {'; '.join(problems)}"
    raise CdiSpecError(message)
