"""The node agent's section of the config file (``agent:``), typed like the rest of it.

The agent reads the same file as the scheduler (deploy/ mounts one ConfigMap into both), so its
settings are one more section of scheduler/config.py's Config, validated by the same code: every
field is checked with its path, unknown fields are errors, all problems are reported together.
This module holds the section's Structs and its cross-field rules (``check_agent``), which
scheduler/config.py calls; it imports nothing from there, so there is no import cycle.

Files named here (``topologyFile``, ``nvidia.topoFile``) are read by the agent at every probe,
not when the config is loaded: the scheduler's pods load this file too and do not have them, and
a file that is wrong for one node model should fail only the nodes of that model, as a node Event.
"""

from __future__ import annotations

from typing import Literal

from msgspec import Struct, field

from scheduler.core.formats.gpus import GpuAnnotation, encode
from scheduler.core.resources.inventory import (
    InventoryError,
    check_annotation,
    strip_inventory_prefix,
)

NVIDIA_SMI = ("nvidia-smi",)


class NvidiaSettings(Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    # How to run nvidia-smi, as an argument list (e.g. [chroot, /host, nvidia-smi]).
    command: tuple[str, ...] = NVIDIA_SMI
    # Take the device list (UUIDs, memory, model) from NVML when pynvml imports and the driver
    # library loads; links always come from `nvidia-smi topo -m`.
    nvml: bool = True
    # Probe from files: saved outputs of `nvidia-smi topo -m` and of the --query-gpu command,
    # re-read at every poll, instead of running nvidia-smi. Without queryFile the devices come
    # from the matrix alone (indices and NUMA nodes; no UUIDs or memory).
    topo_file: str = ""
    query_file: str = ""


class StaticModel(Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    # The node model, written as the annotation's model unless the topology names one.
    name: str
    # Labels a node must carry (all of them) to be this model; empty matches every node.
    node_selector: dict[str, str] = field(default_factory=dict)
    # The annotation's content (vendor, devices, links or scores, sgpuPerCard) ...
    topology: GpuAnnotation | None = None
    # ... or a YAML/JSON file holding it.
    topology_file: str = ""


class DevicePluginSettings(Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    """``agent.devicePlugin``: the kubelet device plugin that ``agent --device-plugin`` serves.

    It serves only on nodes whose labels match ``nodeSelector`` (checked at every poll), so one
    DaemonSet can run everywhere while each node opts in once NVIDIA's plugin is off it: two
    plugins advertising the same GPUs under two resource names would hand each GPU out twice.
    """

    # Labels a node must carry (all of them) for the plugin to serve there; {} serves everywhere.
    node_selector: dict[str, str] = field(
        default_factory=lambda: {"topo-scheduler.io/device-plugin": "true"}
    )
    # The extended resource it registers; it must be one of the scheduler's nvidia resources.
    resource_name: str = "topo-scheduler.io/gpu"
    # strict: Allocate refuses devices other than the pod's assignment (the pod fails visibly);
    # adopt: accept them and publish what the container really got.
    mode: Literal["strict", "adopt"] = "strict"
    # cdi: CDI device names <cdiKind>=<UUID> (checked against the node's CDI specs before it
    # registers); env: NVIDIA_VISIBLE_DEVICES=<UUIDs> for NVIDIA's legacy container runtime.
    injection: Literal["cdi", "env"] = "cdi"
    cdi_kind: str = "nvidia.com/gpu"
    cdi_spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
    # The kubelet's folders (host paths mounted into the agent's pod).
    plugin_dir: str = "/var/lib/kubelet/device-plugins"
    socket_name: str = "topo-scheduler.sock"
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    # Budget for identifying the pod being admitted (PodResources List + one apiserver read);
    # past it the plugin answers with its own topology choice: the kubelet is waiting.
    identify_timeout_seconds: float = 2.0
    # How often the kubelet's socket and ours are looked at (a restarted kubelet deletes ours).
    socket_check_seconds: float = 1.0
    # How long a registration with the kubelet may take; a failed one is tried at the next check.
    register_timeout_seconds: float = 10.0
    # Mode adopt, GPUs accepted for a pod it could not identify: PodResources is read every
    # reportIntervalSeconds, up to reportTries times, for the container that got them.
    report_interval_seconds: float = 0.2
    report_tries: int = 50
    # Pods whose allocations are remembered for publishing (the oldest are forgotten first).
    published_pods: int = 256


class AgentConfig(Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    poll_seconds: float = 60.0
    command_timeout_seconds: float = 30.0
    # A failing probe is reported as a node Event when its message changes, and again after
    # this long while it keeps failing (Events expire after an hour by default).
    event_repeat_seconds: float = 3600.0
    nvidia: NvidiaSettings = field(default_factory=NvidiaSettings)
    # Static topologies per node model (MetaX and other vendors without a probe); the first
    # entry whose nodeSelector matches the node wins over probing NVIDIA GPUs.
    models: tuple[StaticModel, ...] = ()
    device_plugin: DevicePluginSettings = field(default_factory=DevicePluginSettings)


def check_agent(
    agent: AgentConfig, problems: list[str], nvidia_resources: list[str] | None = None
) -> None:
    """The rules a field's type cannot say, besides its range (ranges.py); each problem is
    appended with its path.

    ``nvidia_resources``: the scheduler's whole-GPU resource names for NVIDIA (the config's
    ``resources.nvidia``), which the device plugin's resource must be one of.
    """
    if not agent.nvidia.command or not agent.nvidia.command[0]:
        problems.append("agent.nvidia.command: must name a program")
    if agent.nvidia.query_file and not agent.nvidia.topo_file:
        problems.append("agent.nvidia.queryFile: needs agent.nvidia.topoFile (the links)")
    seen: dict[str, int] = {}
    for i, model in enumerate(agent.models):
        where = f"agent.models[{i}]"
        if not model.name:
            problems.append(f"{where}.name: must not be empty")
        elif model.name in seen:
            problems.append(f"{where}.name: {model.name!r} again (first at [{seen[model.name]}])")
        else:
            seen[model.name] = i
        if (model.topology is None) == (not model.topology_file):
            problems.append(f"{where}: give topology or topologyFile (one of them)")
        if model.topology is not None:
            try:
                check_annotation(encode(model.topology), model.name or "model")
            except InventoryError as exc:
                detail = strip_inventory_prefix(str(exc), model.name or "model")
                problems.append(f"{where}.topology: {detail}")
    plugin = agent.device_plugin
    where = "agent.devicePlugin"
    if "/" not in plugin.resource_name:
        problems.append(
            f"{where}.resourceName: {plugin.resource_name!r} is not an extended resource name "
            "(domain/name)"
        )
    elif (
        nvidia_resources is not None
        and plugin.resource_name not in nvidia_resources
        # Untouched defaults are not a complaint: most configs never use the device plugin.
        and plugin != DevicePluginSettings()
    ):
        problems.append(
            f"{where}.resourceName: {plugin.resource_name!r} is not in resources.nvidia, so the "
            "scheduler would not count it"
        )
    if "=" in plugin.cdi_kind or "/" not in plugin.cdi_kind:
        problems.append(f"{where}.cdiKind: {plugin.cdi_kind!r} is not a CDI kind (vendor/class)")
    if not plugin.socket_name or "/" in plugin.socket_name:
        problems.append(f"{where}.socketName: must be a file name inside pluginDir")
