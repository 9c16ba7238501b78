"""`topo-scheduler simulate` with topology (issue 21): the config's levels, node labels and a KAI
Topology in the input; placements carry their domain and rank, the table groups them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.cli import main

CONFIG = """
topology:
  levels:
    - {nodeLabel: example.com/block, alias: block}
    - {nodeLabel: example.com/rack, alias: rack}
"""


def node(name: str, block: str, rack: str) -> str:
    devices = ", ".join(f'{{"index": {i}}}' for i in range(4))
    return f"""
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels:
    example.com/block: {block}
    example.com/rack: {rack}
    nvidia.com/gpu.clique: uuid-{block}.{rack}
  annotations:
    topo-scheduler.io/gpus: '{{"vendor": "nvidia", "devices": [{devices}]}}'
"""


KAI_TOPOLOGY = """
apiVersion: kai.scheduler/v1alpha1
kind: Topology
metadata:
  name: dc
spec:
  levels:
  - {nodeLabel: example.com/block, alias: b}
  - {nodeLabel: example.com/rack, alias: r}
"""


def member(i: int) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: w-{i}
  labels:
    gpu-topology: w
    gpu-topology-replica: "2"
    batch.kubernetes.io/job-completion-index: "{i}"
  annotations:
    kai.scheduler/topology: dc
    kai.scheduler/topology-required-placement: r
spec:
  schedulerName: topo-scheduler
  containers:
  - name: main
    resources:
      limits:
        nvidia.com/gpu: 4
"""


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    (tmp_path / "config.yaml").write_text(CONFIG)
    docs = [node("a", "b1", "r1"), node("b", "b1", "r2"), node("c", "b1", "r2"), KAI_TOPOLOGY]
    docs += [member(i) for i in range(2)]
    (tmp_path / "in.yaml").write_text("\n---\n".join(docs))
    code = main(
        ["simulate", "--config", str(tmp_path / "config.yaml"), *args, str(tmp_path / "in.yaml")]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_json_placements_gain_topology_and_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(run(tmp_path, capsys, "-o", "json"))
    got = {p["pod"]: p for p in document["placements"]}
    # Rack r1 has one node: the KAI Topology's required rack (alias r) is r2, both nodes.
    assert {p["node"] for p in got.values()} == {"b", "c"}
    assert got["default/w-0"]["topology"] == {"b": "b1", "r": "r2"}
    assert (got["default/w-0"]["rank"], got["default/w-1"]["rank"]) == (0, 1)
    assert document["summary"]["objectsIgnored"] == 0  # the Topology was read, not skipped


def test_table_groups_the_gang_by_domain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(tmp_path, capsys)
    section = out[out.index("GANGS BY DOMAIN") :]
    assert "  gang default/w: 2 pods in 1 domain(s)\n    b=b1,r=r2\n" in section
    assert "      rank 0  default/w-0  b  GPU 0,1,2,3" in section
