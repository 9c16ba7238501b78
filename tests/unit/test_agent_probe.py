"""Where the agent's topology comes from: static models by node labels, saved outputs, a real
nvidia-smi stand-in run as a subprocess (the ``agent.nvidia.command`` override), and NVML through
a stand-in module with pynvml's functions. Failures are ProbeErrors naming what failed, and a
command that hangs is killed, never left behind."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from scheduler.agent.nvidia import ProbeError
from scheduler.agent.probe import Prober
from scheduler.config import ConfigError, parse_config
from scheduler.config.agent import AgentConfig, NvidiaSettings
from scheduler.core.formats.gpus import encode
from scheduler.core.resources.inventory import check_annotation
from tests.topologies import METAX8

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"
DGX1_TOPO = DATA / "dgx1-v100.topo.txt"
DGX1_QUERY = DATA / "dgx1-v100.query.csv"

METAX_TOPOLOGY: dict[str, Any] = {
    "vendor": "metax",
    "devices": [{"index": i, "memoryMiB": 65536, "numa": i // 4} for i in range(8)],
    "links": METAX8,
    "sgpuPerCard": 16,
}


def agent_config(data: dict[str, Any]) -> AgentConfig:
    return parse_config({"agent": data}).agent


def no_nvml() -> None:
    return None


# ---- the config section ------------------------------------------------------------------------


def test_defaults() -> None:
    config = parse_config({}).agent
    assert config == AgentConfig()
    assert config.poll_seconds == 60.0 and config.nvidia.command == ("nvidia-smi",)
    assert config.nvidia.nvml and config.models == ()
    assert parse_config({"agent": None}).agent == AgentConfig()  # all commented out


def test_every_problem_has_its_path() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(
            {
                "agent": {
                    "pollSeconds": 0,
                    "eventRepeatSeconds": -1,
                    "nvidia": {"queryFile": "q.csv", "command": []},
                    "models": [
                        {"name": "c500", "topology": {**METAX_TOPOLOGY, "links": [["X"]]}},
                        {"name": "c500", "topologyFile": "f.yaml", "topology": METAX_TOPOLOGY},
                        {"name": "empty"},
                    ],
                }
            },
            "config c.yaml",
        )
    text = str(exc.value)
    assert text.startswith("config c.yaml: 8 problems:")
    for problem in [
        "agent.pollSeconds: must be above 0",
        "agent.eventRepeatSeconds: must be above 0",
        "agent.nvidia.command: must name a program",
        "agent.nvidia.queryFile: needs agent.nvidia.topoFile (the links)",
        "agent.models[0].topology: links: 1x1 matrix but device index 7",
        "agent.models[1].name: 'c500' again (first at [0])",
        "agent.models[1]: give topology or topologyFile (one of them)",
        "agent.models[2]: give topology or topologyFile (one of them)",
    ]:
        assert f"  - {problem}" in text, problem


def test_typos_are_rejected_with_their_path() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(
            {
                "agent": {
                    "pollSecs": 5,
                    "nvidia": {"topofile": "x"},
                    "models": [
                        {
                            "name": "m",
                            "topology": {
                                "vendor": "metax",
                                "devices": [{"index": 0, "memoryMib": 1}],
                            },
                        }
                    ],
                }
            }
        )
    text = str(exc.value)
    assert "agent.pollSecs: unknown field" in text
    assert (
        "agent.nvidia.topofile: unknown field (known: command, nvml, topoFile, queryFile)" in text
    )
    assert "agent.models[0].topology.devices[0].memoryMib: unknown field" in text


# ---- static models -----------------------------------------------------------------------------


async def test_first_matching_model_wins_and_names_the_model(tmp_path: Path) -> None:
    (tmp_path / "c500.yaml").write_text(yaml.safe_dump(METAX_TOPOLOGY))
    config = agent_config(
        {
            "models": [
                {
                    "name": "metax-c500-file",
                    "nodeSelector": {"gpu": "c500", "src": "file"},
                    "topologyFile": str(tmp_path / "c500.yaml"),
                },
                {"name": "metax-c500", "nodeSelector": {"gpu": "c500"}, "topology": METAX_TOPOLOGY},
            ]
        }
    )
    prober = Prober(config, no_nvml)
    inline = await prober.probe({"gpu": "c500"})
    assert inline.source == "agent.models[1] (metax-c500)"
    from_file = await prober.probe({"gpu": "c500", "src": "file"})
    assert from_file.source == "agent.models[0] (metax-c500-file)"
    for probed, model in ((inline, "metax-c500"), (from_file, "metax-c500-file")):
        inventory = check_annotation(encode(probed.annotation), "mx-1")
        assert inventory.vendor == "metax" and inventory.model == model
        assert inventory.sgpu_per_card == 16 and len(inventory.devices) == 8
        assert inventory.topology.scores[0][1] == 100 and inventory.topology.scores[0][4] == 50


async def test_a_model_that_names_itself_keeps_its_name() -> None:
    config = agent_config(
        {"models": [{"name": "c500", "topology": {**METAX_TOPOLOGY, "model": "MXC500"}}]}
    )
    probed = await Prober(config, no_nvml).probe({})
    assert probed.annotation.model == "MXC500"


@pytest.mark.parametrize(
    "content,error",
    [
        (None, "cannot read"),
        ("vendor: metax\ndevices: [\n", ":3: not valid YAML or JSON"),
        (
            "vendor: metax\ndevices: [{index: x}]\n",
            ": topology.devices[0].index: Expected `int`, got `str`",
        ),
        (
            "vendor: metax\ndevices: [{index: 0, memoryMib: 1}]\n",
            ": topology.devices[0].memoryMib: unknown field",
        ),
    ],
)
async def test_a_bad_topology_file_fails_the_probe_naming_the_file(
    tmp_path: Path, content: str | None, error: str
) -> None:
    path = tmp_path / "model.yaml"
    if content is not None:
        path.write_text(content)
    config = agent_config({"models": [{"name": "m", "topologyFile": str(path)}]})
    with pytest.raises(ProbeError) as exc:
        await Prober(config, no_nvml).probe({})
    assert str(exc.value).startswith(str(path))
    assert error in str(exc.value)


# ---- saved outputs -----------------------------------------------------------------------------


async def test_probe_from_files_is_re_read_every_time(tmp_path: Path) -> None:
    topo = tmp_path / "topo.txt"
    topo.write_text(DGX1_TOPO.read_text())
    config = agent_config({"nvidia": {"topoFile": str(topo), "queryFile": str(DGX1_QUERY)}})
    prober = Prober(config, no_nvml)
    probed = await prober.probe({})
    assert probed.source == f"files {topo}, {DGX1_QUERY}"
    assert probed.annotation.devices[0].uuid == "GPU-3f1c2a10-0d6e-4b7a-9c41-5e2a8b7d0001"
    topo.write_text("garbage\n")
    with pytest.raises(ProbeError, match=rf"^{topo}: no `nvidia-smi topo -m` matrix"):
        await prober.probe({})
    topo.unlink()
    with pytest.raises(ProbeError, match=rf"^{topo}: cannot read: No such file"):
        await prober.probe({})


# ---- nvidia-smi as a subprocess ----------------------------------------------------------------

FAKE_SMI = """
import os, sys, time
args = sys.argv[1:]
data = os.environ["FAKE_SMI_DATA"]
if os.environ.get("FAKE_SMI_PIDFILE"):
    with open(os.environ["FAKE_SMI_PIDFILE"], "w") as f:
        f.write(str(os.getpid()))
if os.environ.get("FAKE_SMI_MODE") == "hang":
    time.sleep(600)
if os.environ.get("FAKE_SMI_MODE") == "broken":
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    sys.exit(9)
if args == ["topo", "-m"]:
    sys.stdout.write(open(os.path.join(data, "dgx1-v100.topo.txt")).read())
elif args == ["--query-gpu=index,uuid,memory.total,pci.bus_id", "--format=csv,noheader,nounits"]:
    sys.stdout.write(open(os.path.join(data, "dgx1-v100.query.csv")).read())
else:
    sys.exit("unexpected arguments: %r" % args)
"""


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AgentConfig:
    script = tmp_path / "nvidia-smi.py"
    script.write_text(FAKE_SMI)
    monkeypatch.setenv("FAKE_SMI_DATA", str(DATA))
    return AgentConfig(
        command_timeout_seconds=30,
        nvidia=NvidiaSettings(command=(sys.executable, str(script))),
    )


async def test_nvidia_smi_gives_links_and_devices(fake_smi: AgentConfig) -> None:
    probed = await Prober(fake_smi, no_nvml).probe({"any": "label"})
    assert probed.source == "nvidia-smi"
    inventory = check_annotation(encode(probed.annotation), "dgx")
    assert inventory.devices[5].uuid == "GPU-3f1c2a10-0d6e-4b7a-9c41-5e2a8b7d0006"
    assert inventory.topology.scores[0][3] == 200


async def test_a_failing_nvidia_smi_is_reported_with_its_output(
    fake_smi: AgentConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SMI_MODE", "broken")
    with pytest.raises(ProbeError) as exc:
        await Prober(fake_smi, no_nvml).probe({})
    message = str(exc.value)
    assert message.endswith(
        "topo -m`: exited with status 9: NVIDIA-SMI has failed because it couldn't communicate "
        "with the NVIDIA driver."
    )


async def test_a_missing_nvidia_smi_is_reported() -> None:
    config = AgentConfig(nvidia=NvidiaSettings(command=("/nonexistent/nvidia-smi",)))
    with pytest.raises(
        ProbeError, match=r"^`/nonexistent/nvidia-smi topo -m`: cannot run: No such"
    ):
        await Prober(config, no_nvml).probe({})


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_hung_nvidia_smi_is_killed_at_the_timeout(tmp_path: Path) -> None:
    # A shell that records its pid and becomes `sleep`: it starts in milliseconds, so the pid is
    # written long before the timeout however loaded the machine is.
    pidfile = tmp_path / "pid"
    hang = ("sh", "-c", f'echo $$ > "{pidfile}"; exec sleep 600', "nvidia-smi")
    config = AgentConfig(command_timeout_seconds=1, nvidia=NvidiaSettings(command=hang))
    with pytest.raises(ProbeError, match=r"topo -m`: no answer within 1 s$"):
        await Prober(config, no_nvml).probe({})
    assert _gone(int(pidfile.read_text()))


async def test_a_probe_cancelled_mid_command_kills_the_command(
    fake_smi: AgentConfig, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_SMI_MODE", "hang")
    pidfile = tmp_path / "pid"
    monkeypatch.setenv("FAKE_SMI_PIDFILE", str(pidfile))
    task = asyncio.create_task(Prober(fake_smi, no_nvml).probe({}))
    while not pidfile.exists() or not pidfile.read_text():
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _gone(int(pidfile.read_text()))


# ---- NVML ------------------------------------------------------------------------------------


class FakeNvml:
    """pynvml's surface as the agent uses it, for a machine with the DGX-1's eight GPUs."""

    class NVMLError(Exception):
        pass

    def __init__(self, fail_init: bool = False, fail_device: int | None = None) -> None:
        self.fail_init = fail_init
        self.fail_device = fail_device
        self.initialised = 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError("NVML Shared Library Not Found")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return 8

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index == self.fail_device:
            raise self.NVMLError("GPU is lost")
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-nvml-{handle}".encode()  # old nvidia-ml-py releases return bytes

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "Tesla V100-SXM2-32GB"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return msgspec.defstruct("Memory", [("total", int)])(32 * 1024**3)

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        return msgspec.defstruct("Pci", [("busId", str)])(f"00000000:{handle:02X}:00.0")


async def test_nvml_names_the_devices_and_the_matrix_gives_the_links(fake_smi: AgentConfig) -> None:
    nvml = FakeNvml()
    probed = await Prober(fake_smi, lambda: nvml).probe({})
    assert probed.source == "NVML and nvidia-smi topo -m"
    inventory = check_annotation(encode(probed.annotation), "dgx")
    assert inventory.model == "Tesla-V100-SXM2-32GB"
    assert [d.uuid for d in inventory.devices] == [f"GPU-nvml-{i}" for i in range(8)]
    assert inventory.devices[0].memory_mib == 32768
    assert inventory.topology.scores[0][3] == 200
    assert nvml.initialised == 0  # shut down after every probe


async def test_nvml_that_cannot_start_falls_back_to_nvidia_smi(fake_smi: AgentConfig) -> None:
    prober = Prober(fake_smi, lambda: FakeNvml(fail_init=True))
    probed = await prober.probe({})
    assert probed.source == "nvidia-smi"
    assert probed.annotation.devices[0].uuid == "GPU-3f1c2a10-0d6e-4b7a-9c41-5e2a8b7d0001"
    assert (await prober.probe({})).source == "nvidia-smi"


async def test_an_nvml_error_after_start_fails_the_probe(fake_smi: AgentConfig) -> None:
    nvml = FakeNvml(fail_device=3)
    with pytest.raises(ProbeError, match=r"^NVML: GPU is lost$"):
        await Prober(fake_smi, lambda: nvml).probe({})
    assert nvml.initialised == 0


async def test_nvml_can_be_turned_off(fake_smi: AgentConfig) -> None:
    config = msgspec.structs.replace(
        fake_smi, nvidia=msgspec.structs.replace(fake_smi.nvidia, nvml=False)
    )
    probed = await Prober(config, lambda: FakeNvml()).probe({})
    assert probed.source == "nvidia-smi"
