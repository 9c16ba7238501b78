"""Facts about the Helm chart (deploy/helm/topo-scheduler/) and its toolchain that need no helm
binary (tests/e2e/test_helm.py lints, renders and installs it)."""

from __future__ import annotations

import json
import re
import tomllib
import typing
from pathlib import Path
from typing import Any

import msgspec
import yaml

from scheduler.config import Config

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "topo-scheduler"


def test_chart_versions_follow_the_project() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"  # Helm 3 and Helm 4
    assert chart["appVersion"] == version and chart["version"] == version


def test_files_are_links_to_deploys_own() -> None:
    # The chart renders deploy/'s RBAC, annotation policy, PodGroup CRD and Sentinel set from
    # these links (.Files.Get reads only files in the chart; Helm follows links): no drift.
    files = sorted((CHART / "files").iterdir())
    assert [f.name for f in files] == [
        "agent-clusterrole.yaml",
        "annotation-policy.yaml",
        "podgroup-crd.yaml",
        "redis-sentinel-pdb.yaml",
        "redis-sentinel-service.yaml",
        "redis-sentinel-statefulset.yaml",
        "scheduler-clusterrole.yaml",
        "scheduler-role.yaml",
        "start.sh",
    ]
    for link in files:
        assert link.is_symlink(), link
        target = link.resolve()
        assert target.is_file() and target.is_relative_to(REPO / "deploy"), target
        assert target.name == link.name


def test_helm_version_is_the_one_go_mod_requires() -> None:
    versions = (REPO / "tools" / "helm" / "versions.env").read_text()
    (version,) = re.findall(r"^HELM_VERSION=(\S+)$", versions, re.M)
    go_mod = (REPO / "tools" / "helm" / "go.mod").read_text()
    assert re.search(rf"^require helm\.sh/helm/v4 {re.escape(version)}$", go_mod, re.M)


def _properties(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, sub in schema.get("properties", {}).items():
        out.append((f"{path}.{name}".lstrip("."), sub))
        out += _properties(sub, f"{path}.{name}")
    return out


def test_every_value_is_in_the_schema_with_a_description() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    described = dict(_properties(schema))

    def walk(value: Any, path: str) -> None:
        assert path in described, f"{path} is not in values.schema.json"
        sub = described[path]
        if not ("requests" in path or "limits" in path):  # container resources: Kubernetes'
            assert sub.get("description"), f"{path} has no description in values.schema.json"
        if isinstance(value, dict) and sub.get("properties"):
            for k, v in value.items():
                walk(v, f"{path}.{k}")

    for k, v in values.items():
        walk(v, k)


def _schema_mismatches(typ: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Where the schema's properties differ from a config Struct's fields, recursively (through
    Structs and lists of Structs; a Struct inside a union is a format of its own, not walked)."""
    fields = {f.encode_name: f.type for f in msgspec.structs.fields(typ)}
    properties = schema.get("properties", {})
    out = [f"{path}.{k}: in the schema only" for k in properties.keys() - fields.keys()]
    out += [f"{path}.{k}: not in the schema" for k in fields.keys() - properties.keys()]
    for name, sub in fields.items():
        if name not in properties:
            continue
        inner = sub
        if typing.get_origin(sub) in (list, tuple):
            inner = typing.get_args(sub)[0]
            schema_of = properties[name].get("items", {})
        else:
            schema_of = properties[name]
        if isinstance(inner, type) and issubclass(inner, msgspec.Struct):
            assert schema_of.get("additionalProperties") is False, f"{path}.{name}"
            out += _schema_mismatches(inner, schema_of, f"{path}.{name}")
    return out


def test_the_schemas_config_has_exactly_the_config_files_fields() -> None:
    # A field added to scheduler/config/ must be added to values.schema.json (and to
    # values.yaml's config, which tests/e2e/test_helm.py compares with configs/scheduler.yaml).
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert _schema_mismatches(Config, schema["properties"]["config"], "config") == []


def test_values_config_is_configs_scheduler_yaml() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    original = yaml.safe_load((REPO / "configs" / "scheduler.yaml").read_text())
    assert values["config"] == original, (
        "deploy/helm/topo-scheduler/values.yaml's config: must hold configs/scheduler.yaml's "
        "fields and defaults"
    )
