"""The device list from NVML (nvidia-ml-py's ``pynvml``), when it can be had.

NVML gives what the --query-gpu command gives (index, UUID, total memory, PCI bus id) plus the
product name, without a process per poll. It does not replace ``nvidia-smi topo -m`` for the
links: NVML's NVLink API reports, per link, the PCI id of the far end, which on NVSwitch systems
(DGX A100/H100) is the switch, not a GPU, and turning that into GPU pairs needs per-generation
rules the matrix already applies. The links therefore always come from the matrix, whose parser
is tested on real captures; NVML only names the devices.

NVML counts GPUs the way nvidia-smi does (PCI bus order), so its index i is the matrix's GPUi.

Two failure kinds: the library cannot start (no driver library in the container, driver not
loaded) means NVML is not available here, and the agent uses nvidia-smi's query instead
(``NvmlUnavailable``); an error after it started is a failed probe (``ProbeError``).

The module object is passed in, so tests can hand in a stand-in with the same functions; the
real one is imported by ``load()`` only when the optional ``nvml`` extra is installed.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

from .nvidia import ProbeError, QueryGpu

MIB = 1024 * 1024


class NvmlUnavailable(Exception):
    pass


def load() -> Any | None:
    """The pynvml module, or None when nvidia-ml-py is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def _text(value: Any) -> str:
    # nvidia-ml-py returns str since 11.515; older releases return bytes.
    return value.decode() if isinstance(value, bytes) else str(value)


def read_devices(nvml: Any) -> tuple[list[QueryGpu], str | None]:
    """The GPUs and their common product name (None when they differ). Blocking: use a thread."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(str(exc)) from None
    try:
        gpus: list[QueryGpu] = []
        names: set[str] = set()
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            pci = nvml.nvmlDeviceGetPciInfo(handle)
            gpus.append(
                QueryGpu(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    memory_mib=int(memory.total) // MIB,
                    bus_id=_text(pci.busId),
                )
            )
            names.add(_text(nvml.nvmlDeviceGetName(handle)))
    except nvml.NVMLError as exc:
        raise ProbeError(f"NVML: {exc}") from None
    finally:
        # Nothing is left to release when shutdown fails; the error that matters was raised.
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
    # "Tesla V100-SXM2-32GB" -> "Tesla-V100-SXM2-32GB", the form GPU feature discovery labels use.
    model = names.pop().replace(" ", "-") if len(names) == 1 else None
    return gpus, model
