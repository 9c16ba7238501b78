"""Where a node's GPUs and topology come from, in this order:

1. ``agent.models``: the first static topology whose nodeSelector matches the node's labels
   (MetaX and any vendor without a probe; also a way to pin a known NVIDIA layout);
2. NVIDIA: ``agent.nvidia.topoFile`` (and ``queryFile``) when set: saved outputs, re-read at
   every poll ("probe from files": machines where the container cannot run nvidia-smi can have
   a host job write them; tests use it); otherwise ``nvidia-smi topo -m`` for the links and NVML
   (when importable and the driver library loads) or ``nvidia-smi --query-gpu=...`` for the
   devices.

Every failure is a ProbeError whose message says what failed and where (file and line, command
and exit status); the agent turns it into a node Event and keeps the node's last annotation.
Commands run as subprocesses with a timeout, and are killed when they overrun or when the agent
stops, so a hung driver never leaves a process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec
import structlog
import yaml

from scheduler.config import path_of
from scheduler.config.agent import AgentConfig, StaticModel
from scheduler.core.formats.gpus import GpuAnnotation

from . import nvml as nvml_mod
from .annotation import convert_topology, from_nvidia
from .nvidia import ProbeError, parse_query, parse_topo

log = structlog.get_logger("agent")

TOPO_ARGS: Final = ("topo", "-m")
QUERY_ARGS: Final = (
    "--query-gpu=index,uuid,memory.total,pci.bus_id",
    "--format=csv,noheader,nounits",
)
_OUTPUT_TAIL: Final = 300


class Probed(msgspec.Struct, frozen=True):
    annotation: GpuAnnotation
    # What it came from, for logs and error messages ("nvidia-smi", "agent.models[0] (c500)").
    source: str


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError as exc:
        raise ProbeError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _show(argv: Sequence[str]) -> str:
    return "`" + " ".join(argv) + "`"


class Prober:
    def __init__(
        self,
        config: AgentConfig,
        nvml_loader: Callable[[], Any | None] = nvml_mod.load,
    ) -> None:
        self.config = config
        self._nvml_loader = nvml_loader
        self._nvml: Any | None = None
        self._nvml_checked = False

    async def probe(self, labels: Mapping[str, str]) -> Probed:
        for i, model in enumerate(self.config.models):
            if all(labels.get(k) == v for k, v in model.node_selector.items()):
                source = f"agent.models[{i}] ({model.name})"
                return Probed(await asyncio.to_thread(_static, model), source)
        return await self.nvidia()

    async def nvidia(self) -> Probed:
        settings = self.config.nvidia
        if settings.topo_file:
            matrix = parse_topo(
                await asyncio.to_thread(_read, settings.topo_file), settings.topo_file
            )
            gpus = None
            if settings.query_file:
                text = await asyncio.to_thread(_read, settings.query_file)
                gpus = parse_query(text, settings.query_file)
            files = ", ".join(f for f in (settings.topo_file, settings.query_file) if f)
            return Probed(from_nvidia(matrix, gpus, None, settings.query_file), f"files {files}")
        topo_argv = (*settings.command, *TOPO_ARGS)
        matrix = parse_topo(await self._run(topo_argv), _show(topo_argv))
        nvml = self._nvml_module() if settings.nvml else None
        if nvml is not None:
            try:
                gpus, model = await asyncio.to_thread(nvml_mod.read_devices, nvml)
            except nvml_mod.NvmlUnavailable as exc:
                # The library imports but cannot start here: use nvidia-smi from now on.
                log.info("nvml unavailable, using nvidia-smi --query-gpu", reason=str(exc))
                self._nvml = None
            else:
                annotation = from_nvidia(matrix, gpus, model, "NVML")
                return Probed(annotation, "NVML and nvidia-smi topo -m")
        query_argv = (*settings.command, *QUERY_ARGS)
        gpus = parse_query(await self._run(query_argv), _show(query_argv))
        return Probed(from_nvidia(matrix, gpus, None, _show(query_argv)), "nvidia-smi")

    def _nvml_module(self) -> Any | None:
        if not self._nvml_checked:
            self._nvml_checked = True
            self._nvml = self._nvml_loader()
        return self._nvml

    async def _run(self, argv: Sequence[str]) -> str:
        shown = _show(argv)
        timeout = self.config.command_timeout_seconds
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise ProbeError(f"{shown}: cannot run: {exc.strerror or exc}") from None
        try:
            async with asyncio.timeout(timeout):
                out, err = await process.communicate()
        except TimeoutError:
            raise ProbeError(f"{shown}: no answer within {timeout:g} s") from None
        finally:
            # Killed on timeout and on cancellation (the agent stopping): never left behind.
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if process.returncode != 0:
            said = (err or out).decode(errors="replace").strip()[-_OUTPUT_TAIL:]
            raise ProbeError(f"{shown}: exited with status {process.returncode}: {said}")
        return out.decode(errors="replace")


def _static(model: StaticModel) -> GpuAnnotation:
    annotation = model.topology
    if annotation is None:
        annotation = _topology_file(model.topology_file)
    if annotation.model is None:
        annotation = msgspec.structs.replace(annotation, model=model.name)
    return annotation


def _topology_file(path: str) -> GpuAnnotation:
    text = _read(path)
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ProbeError(f"{path}{where}: not valid YAML or JSON: {exc}") from None
    try:
        return convert_topology(document)
    except msgspec.ValidationError as exc:
        detail = path_of(exc, "topology")
        raise ProbeError(f"{path}: {detail}") from None
