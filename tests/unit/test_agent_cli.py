"""`topo-scheduler agent --print` on captured outputs, and the command line's errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
import yaml

from scheduler.cli import build_parser, main
from scheduler.config import load_config, parse_config
from scheduler.config.agent import AgentConfig
from scheduler.core.resources.inventory import check_annotation

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"
REPO = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["agent", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.topo.txt")))
def test_print_writes_the_annotation_value_and_nothing_else(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code, out, err = run(capsys, "--print", "--topo-file", str(DATA / name))
    assert (code, err) == (0, "")
    assert out.endswith("\n") and out.count("\n") == 1
    value = out.strip()
    doc = json.loads(value)
    # Matrix only: indices (and NUMA nodes where the output has them), no UUIDs or memory.
    assert all(set(d) <= {"index", "numa"} for d in doc["devices"])
    inventory = check_annotation(value, "node")
    assert len(inventory.devices) == len(doc["links"])


def test_print_with_query_file_and_node_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "--print",
        "--node",
        "dgx-7",
        "--topo-file",
        str(DATA / "asus-esc8000a-e12-nics.topo.txt"),
        "--query-file",
        str(DATA / "asus-esc8000a-e12.query.csv"),
    )
    assert code == 0
    doc = json.loads(out)
    assert doc == {
        "vendor": "nvidia",
        "devices": [
            {
                "index": i,
                "uuid": f"GPU-7a0e5c3b-1f2d-4e6a-8b9c-0d1e2f3a000{i + 1}",
                "memoryMiB": 49140,
                "numa": i // 2,
            }
            for i in range(4)
        ],
        "links": [
            ["X", "NODE", "SYS", "SYS"],
            ["NODE", "X", "SYS", "SYS"],
            ["SYS", "SYS", "X", "NODE"],
            ["SYS", "SYS", "NODE", "X"],
        ],
    }


def test_malformed_capture_exits_2_naming_file_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = (DATA / "h100-sxm5-8gpu.topo.txt").read_text().splitlines()
    lines[5] = lines[5].replace("NV18", "NV81", 1)
    bad = tmp_path / "bad.txt"
    bad.write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, "--print", "--topo-file", str(bad))
    assert (code, out) == (2, "")
    assert err == (
        f"topo-scheduler agent: {bad}:6: row GPU4, column GPU0: link count out of range in 'NV81'\n"
    )


def test_mismatched_query_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys,
        "--print",
        "--topo-file",
        str(DATA / "asus-esc8000a-e12-nics.topo.txt"),
        "--query-file",
        str(DATA / "dgx1-v100.query.csv"),
    )
    assert code == 2
    assert "dgx1-v100.query.csv lists GPUs 0, 1, 2, 3, 4, 5, 6, 7, but " in err


def test_flag_errors(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run(capsys, "--print", "--query-file", "q.csv")
    assert (code, err) == (2, "topo-scheduler agent: --query-file needs --topo-file\n")
    monkeypatch.delenv("NODE_NAME", raising=False)
    code, _, err = run(capsys, "--once")
    assert (code, err) == (2, "topo-scheduler agent: --node is required (or set NODE_NAME)\n")
    with pytest.raises(SystemExit):
        main(["agent", "--print", "--once"])


def test_config_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("agent:\n  pollSeconds: -1\n")
    code, _, err = run(capsys, "--print", "--config", str(config), "--topo-file", "x")
    assert code == 2
    assert err == (
        f"topo-scheduler agent: config {config}: 1 problem:\n"
        "  - agent.pollSeconds: must be above 0\n"
    )


def test_flags_override_the_configs_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"agent:\n  nvidia:\n    topoFile: {DATA / 'dgx1-v100.topo.txt'}\n"
        f"    queryFile: {DATA / 'dgx1-v100.query.csv'}\n"
    )
    code, out, _ = run(capsys, "--print", "--config", str(config))
    assert code == 0 and len(json.loads(out)["devices"]) == 8 and "uuid" in out
    # --topo-file names the outputs to read: the config's query file does not pair with it.
    asus = DATA / "asus-esc8000a-e12-nics.topo.txt"
    code, out, _ = run(capsys, "--print", "--config", str(config), "--topo-file", str(asus))
    assert code == 0 and len(json.loads(out)["devices"]) == 4 and "uuid" not in out


def test_the_installed_command_prints(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "topo-scheduler"
    result = subprocess.run(
        [str(exe), "agent", "--print", "--topo-file", str(DATA / "dgx1-v100.topo.txt")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["links"][0] == [
        "X",
        "NV1",
        "NV1",
        "NV2",
        "NV2",
        "SYS",
        "SYS",
        "SYS",
    ]


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    # --print configures structlog for its process; keep other tests' defaults.
    yield
    structlog.reset_defaults()


def test_deploys_daemonset_arguments_parse_and_name_the_mounted_config() -> None:
    docs = yaml.safe_load_all((REPO / "deploy" / "base" / "agent-daemonset.yaml").read_text())
    daemonset = next(d for d in docs if d and d["kind"] == "DaemonSet")
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    assert args.command == "agent" and not args.print and not args.once
    assert args.node == "$(NODE_NAME)"  # the kubelet expands it from the env var
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    mount = container["volumeMounts"][0]["mountPath"]
    assert args.config == f"{mount}/scheduler.yaml"
    # The file the ConfigMap is made from is a valid config for the agent too.
    agent = load_config(REPO / "deploy" / "base" / "scheduler.yaml").agent
    assert agent == AgentConfig()
    # The device plugin runs, and finds the kubelet's sockets and the CDI specs where the
    # config says they are: each is a host path mounted at the same place.
    assert args.device_plugin
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    host_mounts = {
        m["mountPath"]: (volumes[m["name"]]["hostPath"]["path"], m.get("readOnly", False))
        for m in container["volumeMounts"]
        if "hostPath" in volumes[m["name"]]
    }
    plugin = agent.device_plugin
    assert host_mounts == {
        plugin.plugin_dir: (plugin.plugin_dir, False),  # it creates its socket there
        str(Path(plugin.pod_resources_socket).parent): (
            str(Path(plugin.pod_resources_socket).parent),
            True,
        ),
        **{d: (d, True) for d in plugin.cdi_spec_dirs},
    }


def test_docs_examples_are_valid_configs() -> None:
    text = (REPO / "docs" / "agent.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        config = parse_config(yaml.safe_load(block), "docs/agent.md")
        assert config.agent != AgentConfig() or "agent:" not in block
