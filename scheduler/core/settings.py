"""The core's own settings: plain values, filled from the config file by the shell.

The core cannot import scheduler.config (the layering contract), so the config module converts its
validated file into this Struct.
"""

from __future__ import annotations

from typing import Literal

from msgspec import Struct, field

from .model.objects import TopologyLevel

GpuPolicy = Literal["topology-aware", "binpack", "spread"]
NodePolicy = Literal["binpack", "spread"]
GPU_POLICIES: tuple[GpuPolicy, ...] = ("topology-aware", "binpack", "spread")
NODE_POLICIES: tuple[NodePolicy, ...] = ("binpack", "spread")
VENDORS = ("nvidia", "metax")


def _default_resources() -> dict[str, str]:
    return {
        "nvidia.com/gpu": "nvidia",
        "aliyun.com/gpu": "nvidia",
        "topo-scheduler.io/gpu": "nvidia",
        "metax-tech.com/gpu": "metax",
    }


# NVIDIA GPU feature discovery's label naming a node's NVLink clique: "<clusterUUID>.<cliqueId>".
DEFAULT_ACCELERATOR_LABEL = "nvidia.com/gpu.clique"


class TopologySettings(Struct, frozen=True):
    """Cross-node topology (issue 21, ``snapshot/domains.py``): the configured levels, widest first
    (hostname is always the last level, implied), the label of the built-in NVLink levels (""
    turns them off), and whether gangs without a constraint still prefer the fewest domains."""

    levels: tuple[TopologyLevel, ...] = ()
    accelerator_label: str = DEFAULT_ACCELERATOR_LABEL
    compact_gangs: bool = True


class CoreSettings(Struct, frozen=True):
    # Whole-GPU resource name -> vendor whose GPUs it asks for.
    gpu_resources: dict[str, str] = field(default_factory=_default_resources)
    gpu_policy: GpuPolicy = "topology-aware"
    node_policy: NodePolicy = "binpack"
    # GPU policy for shared-GPU requests when the pod names none (or names topology-aware, which
    # means nothing for a single card): binpack keeps idle cards whole for whole-GPU pods.
    shared_gpu_policy: GpuPolicy = "binpack"
    topology: TopologySettings = field(default_factory=TopologySettings)
