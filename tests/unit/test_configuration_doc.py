"""docs/configuration.md is the configuration reference: it documents every field of the config
file (Config's Structs, walked the way the file nests them) with its default, documents no field
that does not exist, and states each checked range as config/ranges.py checks it."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import msgspec
import yaml

from scheduler.config import Config
from scheduler.config.ranges import RANGES, Range

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
# A table row: | `path` | `default` or "required" | range | meaning |
ROW = re.compile(r"^\| `([\w.\[\]]+)` \| (`[^`]*`|required) \|([^|]*)\|", re.MULTILINE)
REQUIRED = "required"


def fields(typ: Any, prefix: str = "") -> dict[str, Any]:
    """Every field of the file under Struct ``typ``: path -> its default (REQUIRED when it has
    none). A Struct field is walked into; a list of Structs is a field and so is each field of
    its items (``path[].name``); any other value (a mapping, a union) is a field."""
    out: dict[str, Any] = {}
    for f in msgspec.structs.fields(typ):
        path = f"{prefix}{f.encode_name}"
        if f.default is not msgspec.NODEFAULT:
            default = f.default
        elif f.default_factory is not msgspec.NODEFAULT:
            default = f.default_factory()
        else:
            default = REQUIRED
        inner = f.type
        if isinstance(inner, type) and issubclass(inner, msgspec.Struct):
            out.update(fields(inner, f"{path}."))
            continue
        out[path] = default
        if typing.get_origin(inner) in (list, tuple):
            item = typing.get_args(inner)[0]
            if isinstance(item, type) and issubclass(item, msgspec.Struct):
                out.update(fields(item, f"{path}[]."))
    return out


def documented() -> dict[str, tuple[str, str]]:
    """path -> (default cell, range cell) of every table row of the page."""
    rows: dict[str, tuple[str, str]] = {}
    for path, default, allowed in ROW.findall(DOC.read_text()):
        assert path not in rows, f"{path} is documented twice"
        rows[path] = (default, allowed.strip())
    return rows


def rendered(allowed: Range) -> str:
    """A range as the page writes it: ``≥ 1``, ``> 0``, ``0..100``."""
    if allowed.high is not None:
        return f"`{allowed.low:g}..{allowed.high:g}`"
    return f"`{'>' if allowed.above else '≥'} {allowed.low:g}`"


def test_every_field_is_documented_and_nothing_else() -> None:
    assert sorted(documented()) == sorted(fields(Config))


def test_every_documented_default_is_the_structs() -> None:
    rows = documented()
    for path, default in fields(Config).items():
        cell = rows[path][0]
        if default == REQUIRED:
            assert cell == REQUIRED, path
            continue
        # The cell is YAML, as the value would be written in the file.
        written = yaml.safe_load(cell.strip("`"))
        assert written == msgspec.json.decode(msgspec.json.encode(default)), f"{path}: {cell}"


def test_every_checked_range_is_stated_as_checked() -> None:
    rows = documented()
    for path, allowed in RANGES.items():
        assert rows[path][1].startswith(rendered(allowed)), f"{path}: {rows[path][1]}"
