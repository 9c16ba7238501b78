"""`topo-scheduler simulate` with PodGroup manifests (scheduler-plugins' and Volcano's): the gang
they name is placed as one unit, as in `run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"

NODES = "\n---\n".join(
    f"""
apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations:
    topo-scheduler.io/gpus: '{{"vendor": "nvidia", "devices": [{devices}]}}'
"""
    for name, devices in (
        ("big", ", ".join(f'{{"index": {i}}}' for i in range(8))),
        ("small", ", ".join(f'{{"index": {i}}}' for i in range(4))),
    )
)


def pod_group(name: str, min_member: object, api: str = "scheduling.x-k8s.io/v1alpha1") -> str:
    return f"""
apiVersion: {api}
kind: PodGroup
metadata:
  name: {name}
spec:
  minMember: {min_member}
"""


def member(name: str, gpus: int, meta: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
{meta}
spec:
  schedulerName: topo-scheduler
  containers:
  - name: main
    resources:
      limits:
        nvidia.com/gpu: {gpus}
"""


PG_LABEL = "  labels:\n    scheduling.x-k8s.io/pod-group: job"
VOLCANO = "  annotations:\n    scheduling.k8s.io/group-name: job"


def simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], *docs: str) -> tuple[int, str]:
    path = tmp_path / "in.yaml"
    path.write_text("\n---\n".join(docs))
    code = main(["simulate", "-o", "json", str(path)])
    out, err = capsys.readouterr()
    return code, out if code == 0 else err


def test_a_pod_group_gang_is_placed_as_one_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two members of 4 GPUs: one alone would take the smallest node that fits (4 GPUs); as a
    # gang of minMember 2 they go together, on the 8-GPU node.
    code, out = simulate(
        tmp_path,
        capsys,
        NODES,
        pod_group("job", 2),
        member("w0", 4, PG_LABEL),
        member("w1", 4, PG_LABEL),
    )
    assert code == 0
    doc = json.loads(out)
    placed = {p["pod"]: (p["node"], p["gang"]) for p in doc["placements"]}
    assert placed == {"default/w0": ("big", "default/job"), "default/w1": ("big", "default/job")}
    assert doc["pending"] == [] and doc["summary"]["objectsIgnored"] == 0


def test_a_volcano_pod_group_gang_is_placed_as_one_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    volcano = pod_group("job", 2, api="scheduling.volcano.sh/v1beta1")
    code, out = simulate(
        tmp_path, capsys, NODES, volcano, member("w0", 4, VOLCANO), member("w1", 4, VOLCANO)
    )
    assert code == 0
    assert {p["node"] for p in json.loads(out)["placements"]} == {"big"}


def test_without_its_pod_group_the_gang_waits_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = simulate(tmp_path, capsys, NODES, member("w0", 4, PG_LABEL))
    assert code == 0
    (pending,) = json.loads(out)["pending"]
    assert "waiting for PodGroup default/job (scheduling.x-k8s.io) to exist" in pending["reason"]


def test_an_elastic_pod_group_places_its_minimum_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    members = [member(f"w{i}", 4, PG_LABEL) for i in range(4)]
    code, out = simulate(tmp_path, capsys, NODES, pod_group("job", 2), *members)
    assert code == 0
    doc = json.loads(out)
    # 12 GPUs for 4 x 4: three placed (the minimum of 2, then one surplus), one waits.
    assert len(doc["placements"]) == 3
    (pending,) = doc["pending"]
    assert "beyond its minimum of 2" in pending["reason"]


def test_a_malformed_pod_group_names_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = simulate(tmp_path, capsys, NODES, pod_group("job", '"2"'))
    assert code == 2
    # NODES is two documents of 8 lines plus the separator's blank lines; the PodGroup's first
    # line is the one after its leading blank line.
    lines = (tmp_path / "in.yaml").read_text().splitlines()
    line = lines.index("kind: PodGroup")  # 0-based index of the line after "apiVersion"
    assert f"in.yaml:{line}: PodGroup scheduling.x-k8s.io/default/job: spec.minMember: " in err
    assert "Expected `int`, got `str`" in err


def test_pod_groups_of_other_api_groups_are_skipped_and_a_duplicate_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = pod_group("job", 2, api="example.com/v1")
    code, out = simulate(
        tmp_path,
        capsys,
        NODES,
        other,
        pod_group("job", 3),
        pod_group("job", 2),
        member("w0", 4, PG_LABEL),
        member("w1", 4, PG_LABEL),
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["summary"]["objectsIgnored"] == 1 and len(doc["placements"]) == 2
    assert doc["warnings"] == [
        "PodGroup scheduling.x-k8s.io/default/job: defined twice; the last definition wins"
    ]


def test_the_example_workload(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "simulate",
            "-o",
            "json",
            str(EXAMPLES / "dgx1-v100.yaml"),
            str(EXAMPLES / "workload-podgroup.yaml"),
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["pending"] == []
    nodes: dict[str, set[str]] = {}
    for p in doc["placements"]:
        nodes.setdefault(p["gang"], set()).add(p["node"])
    assert {gang: len(n) for gang, n in nodes.items()} == {
        "default/llama-finetune": 1,
        "default/mpi-allreduce": 1,
    }
