"""Facts about deploy/ that need no cluster and no kubectl (tests/e2e/test_deploy.py renders the
kustomizations and applies them to the real apiserver)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml

from scheduler.cli import build_parser
from scheduler.config import load_config
from scheduler.core.model.names import (
    ALLOCATED_ANNOTATION,
    ASSIGNMENT_ANNOTATION,
    DEVICES_ANNOTATION,
)
from tests.manifests import CLUSTER_SCOPED, NAMESPACE

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "base"
ROLES = [BASE / "scheduler-clusterrole.yaml", BASE / "agent-clusterrole.yaml"]
POLICY = BASE / "annotation-policy.yaml"


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
    for path in [*ROLES, BASE / "scheduler-role.yaml"]:
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


def test_the_namespaced_role_is_the_witness_configmap_only() -> None:
    path = BASE / "scheduler-role.yaml"
    role, binding = _one(path, "Role"), _one(path, "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "topo-scheduler", "namespace": NAMESPACE}
    ]
    named, create = role["rules"]
    assert named == {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": ["topo-scheduler-epochs"],
        "verbs": ["get", "patch"],
    }
    assert create == {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}


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


def test_namespaced_manifests_name_their_namespace() -> None:
    # base/kustomization.yaml sets no `namespace:` (kustomize <= v5.6 would put one on the
    # cluster-scoped admission policy), so every namespaced object must carry its own.
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert "namespace" not in kustomization
    assert "annotation-policy.yaml" in kustomization["resources"]
    for resource in kustomization["resources"]:
        for doc in _docs(BASE / resource):
            if doc["kind"] in CLUSTER_SCOPED:
                assert "namespace" not in doc["metadata"], (resource, doc["metadata"])
            else:
                assert doc["metadata"].get("namespace") == NAMESPACE, (resource, doc["metadata"])
    for generator in kustomization["configMapGenerator"]:
        assert generator["namespace"] == NAMESPACE, generator


def test_annotation_policy_exempts_exactly_deploys_service_accounts() -> None:
    accounts = {
        f"system:serviceaccount:{d['metadata']['namespace']}:{d['metadata']['name']}"
        for d in _docs(BASE / "serviceaccounts.yaml")
    }
    policy = _one(POLICY, "ValidatingAdmissionPolicy")
    spec = policy["spec"]
    conditions = [c["expression"] for c in spec["matchConditions"]]
    exempt = {u for e in conditions for u in re.findall(r"'(system:serviceaccount:[^']*)'", e)}
    assert exempt == accounts
    assert [e for e in conditions if "'system:masters'" in e]
    assert spec["failurePolicy"] == "Fail"
    # Pods only (the scheduler's pods/binding is a subresource), created or updated.
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == [""] and rule["resources"] == ["pods"]
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    # The prefix it guards covers every pod annotation the scheduler and the agent write.
    (touched,) = [v["expression"] for v in spec["variables"] if v["name"] == "touched"]
    (prefix,) = set(re.findall(r"startsWith\('([^']*)'\)", touched))
    for annotation in (DEVICES_ANNOTATION, ASSIGNMENT_ANNOTATION, ALLOCATED_ANNOTATION):
        assert annotation.startswith(prefix), annotation
    binding = _one(POLICY, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_every_part_of_the_annotation_policy_has_a_comment() -> None:
    # Like the RBAC rules: each list item, and each field of the two specs, says why.
    fields = (
        "failurePolicy|matchConstraints|matchConditions|variables|validations|validationActions"
    )
    lines = POLICY.read_text().splitlines()
    parts = [
        i
        for i, line in enumerate(lines)
        if re.match(r"\s*- (apiGroups|name|expression):", line) or re.match(f"  ({fields}):", line)
    ]
    assert len(parts) == 14, parts
    for i in parts:
        assert lines[i - 1].strip().startswith("#"), f"{POLICY.name}:{i + 1}: no comment"


def _start_redis(tmp_path: Path, hostname: str, sentinel_answer: str) -> list[str]:
    """deploy/redis-sentinel/start.sh's redis-server arguments, run with a redis-cli that
    answers ``sentinel_answer`` (empty: no Sentinel answers) and a redis-server that prints."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "redis-cli").write_text(
        f"#!/bin/sh\n[ -n '{sentinel_answer}' ] || exit 1\necho '{sentinel_answer}'\necho 6379\n"
    )
    (fake / "redis-server").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    for tool in fake.iterdir():
        tool.chmod(0o755)
    script = REPO / "deploy" / "redis-sentinel" / "start.sh"
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOSTNAME": hostname, "REDISCLI_AUTH": "pw"}
    done = subprocess.run(
        ["sh", str(script), "redis"], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


def test_redis_sentinel_start_asks_the_sentinels_for_the_master(tmp_path: Path) -> None:
    domain = "redis-sentinel.topo-scheduler.svc"
    # First start of the set: no Sentinel answers, pod 0 is the master, the others replicate it.
    first = _start_redis(tmp_path, "redis-sentinel-0", "")
    assert "--replicaof" not in first
    assert first[first.index("--min-replicas-to-write") + 1] == "1"
    assert first[first.index("--requirepass") + 1] == "pw"
    second = _start_redis(tmp_path, "redis-sentinel-1", "")
    assert second[second.index("--replicaof") :] == [
        "--replicaof",
        f"redis-sentinel-0.{domain}",
        "6379",
    ]
    # After a failover to pod 2, pod 0 comes back as pod 2's replica; pod 2 as the master.
    again = _start_redis(tmp_path, "redis-sentinel-0", f"redis-sentinel-2.{domain}")
    assert again[again.index("--replicaof") + 1] == f"redis-sentinel-2.{domain}"
    assert "--replicaof" not in _start_redis(
        tmp_path, "redis-sentinel-2", f"redis-sentinel-2.{domain}"
    )
