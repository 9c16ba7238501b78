"""Facts about deploy/ that need no cluster and no kubectl (tests/e2e/test_deploy.py renders the
kustomizations and applies them to the real apiserver)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from scheduler.cli import build_parser
from scheduler.config import load_config

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "base"
ROLES = [BASE / "scheduler-clusterrole.yaml", BASE / "agent-clusterrole.yaml"]


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _one(path: Path, kind: str) -> dict[str, Any]:
    (doc,) = [d for d in _docs(path) if d["kind"] == kind]
    return doc


def test_configmap_source_is_configs_scheduler_yaml() -> None:
    # kustomize reads no file outside deploy/base/, so the ConfigMap is generated from a copy.
    copy, original = BASE / "scheduler.yaml", REPO / "configs" / "scheduler.yaml"
    assert copy.read_bytes() == original.read_bytes(), (
        "deploy/base/scheduler.yaml must equal configs/scheduler.yaml: "
        "cp configs/scheduler.yaml deploy/base/scheduler.yaml"
    )
    assert load_config(copy) == load_config(original)


def test_every_rbac_rule_has_a_comment() -> None:
    for path in ROLES:
        lines = path.read_text().splitlines()
        rules = [i for i, line in enumerate(lines) if re.match(r"\s*- apiGroups:", line)]
        assert rules, path
        for i in rules:
            assert lines[i - 1].strip().startswith("#"), (
                f"{path.name}:{i + 1}: rule without comment"
            )


def test_roles_are_bound_to_deploys_service_accounts() -> None:
    accounts = {d["metadata"]["name"] for d in _docs(BASE / "serviceaccounts.yaml")}
    for path in ROLES:
        role = _one(path, "ClusterRole")
        binding = _one(path, "ClusterRoleBinding")
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        (subject,) = binding["subjects"]
        assert subject["kind"] == "ServiceAccount" and subject["namespace"] == "topo-scheduler"
        assert subject["name"] in accounts
        # Least privilege: no wildcards, nothing that reads or writes secrets.
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
            assert "secrets" not in rule["resources"], rule


def test_image_tag_is_the_project_version() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    assert image["name"] == "topo-scheduler" and image["newTag"] == version


def test_scheduler_container_arguments_parse_and_name_the_mounted_config() -> None:
    deployment = _one(BASE / "scheduler-deployment.yaml", "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "run" and args.kubeconfig is None  # in-cluster configuration
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert args.config == f"{mount['mountPath']}/scheduler.yaml"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert volume["configMap"]["name"] == generator["name"]
    assert generator["files"] == ["scheduler.yaml"]
