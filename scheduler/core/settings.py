"""The core's own settings: plain values, filled from the config file by the shell.

The core cannot import scheduler.config (the layering contract), so the config module converts its
validated file into this Struct; ``simulate --config`` does the same, so both run the same core.
Every tuning value of the core (what trades a decision's quality against its cost) is a field
here with today's value as its default; the core reads them from the snapshot's settings, never
from a module constant. docs/configuration.md says what each one trades; the config module
checks their ranges (the core trusts them).
"""

from __future__ import annotations

from typing import Literal

from msgspec import Struct, field

from .model.objects import TopologyLevel

GpuPolicy = Literal["topology-aware", "binpack", "spread"]
NodePolicy = Literal["binpack", "spread"]
# What node policy binpack puts first (the config file's placement.nodeOrder, minus spread, which
# is a node policy of its own): the fragmentation the pod would remove (rule 6), or the smallest
# fitting node alone (rules 2 and 4 as the seeds' HAMi rule states them, the measure unused).
BinpackOrder = Literal["fragmentation", "smallestFit"]
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
    turns them off), whether gangs without a constraint still prefer the fewest domains, how
    many domain plans a gang tries (gangs/indomains.py; each costs a node-level plan) before it
    gives the reason, whether a single pod's ties go to the broken domains first
    (placement/domainorder.py), and whether a gang that no domain holds, spread over the
    cluster, leaves the top-level domains with the most free out while the rest hold it
    (gangs/domainchoice.py's ``Tree.fill``), and whether a gang without a required level
    leaves out, while it can, the domains kept for the gangs that wait for a required one
    (gangs/waiting.py)."""

    levels: tuple[TopologyLevel, ...] = ()
    accelerator_label: str = DEFAULT_ACCELERATOR_LABEL
    compact_gangs: bool = True
    max_plans: int = 8
    pack_domains: bool = True
    spill_broken_first: bool = True
    yield_to_required: bool = True


class FragmentationSettings(Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """The fragmentation measure (snapshot/fragmentation.py), which placement ranks by at every
    cluster size (placement/nodes.py). All of it is the core's, so this Struct is also the config
    file's ``fragmentation`` section as it stands (camelCase there)."""

    # Percent of the pods held that the target workload's request classes cover.
    coverage_percent: int = 95
    # Held GPU pods below which there is no target workload (the other rules decide alone).
    min_pods: int = 32
    # The parts the target workload's weights are counted in (1000: per mille). Whole percent
    # (100) merged the rare classes a pinned workload splits into (each pin its own class) and
    # left two of them a percent apart or equal: bench-frag --pin 33 left 0.7 points more of
    # openb's GPUs idle at 100% arrived.
    weight_parts: int = 1000
    # A stranded GPU percent counts this many times the whole workload's weight.
    stranded_weight: int = 4
    # A fed free GPU percent of a contested pool (the classes pinned to some pools ask of it:
    # their GPU demand spread over the pools they run in, against its share of the GPUs, in
    # percent, at most ``contest_cap_percent``) counts this many times the workload's weight
    # times that contest as room kept for them, which a placement there loses. 0: no contest,
    # and bench-frag --pin 33 left a point more of openb's GPUs idle than FGD at 100% arrived,
    # 3.4 to 3.6 more than with it (the stranded term sent cpu-light pods that could run
    # anywhere to the cpu-poor pools the pinned pods wait for).
    contest_weight: int = 4
    contest_cap_percent: int = 100
    # Node shapes (and placement ranks) remembered per target; a full memo drops its older half.
    memo_shapes: int = 1 << 16
    # The node labels that say which pool of GPUs a node is (model, product, family, instance
    # type): a class carries its pods' node selectors and required node affinity on these
    # labels (with its GPU vendor and its tolerations), and a node counts for a class as FGD
    # counts it only where the class can run. Affinity on any other label (a hostname, a zone)
    # does not make classes apart: such pods weigh as if they could run on every node.
    pool_labels: tuple[str, ...] = (
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.family",
        "node.kubernetes.io/instance-type",
    )


class MemoSettings(Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """How much a snapshot remembers between decisions (snapshot/memos.py): bounds that trade
    memory for CPU, never an answer (a memo that starts over only computes again). All of it
    is the core's, so this Struct is also the config file's ``memos`` section as it stands."""

    # Specs whose containers' asks are remembered (a gang's members and a Deployment's replicas
    # share one spec).
    asks: int = 1024
    # Specs whose effective requests are remembered.
    requests: int = 1024
    # Parsed Kubernetes quantities (every node's allocatable, every bound pod's GPU counts).
    quantities: int = 4096
    # Best GPU sets remembered per topology matrix (free mask and size): an 8-GPU matrix never
    # gets near it (256 masks x 8 sizes); a 16-GPU one could reach 65,536 masks per size, and
    # this keeps it at a few MB.
    best_sets: int = 20_000


class DraLimits(Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """The bounds of one DRA allocation (one pod's claims on one node; dra/budget.py): counted
    work instead of kube-scheduler's 10 s filter timeout, since the core reads no clock. Spending
    either default in full takes about half a second of Python on the development machine (2
    cores, shared); a typical claim on an 8-GPU node spends a few dozen steps and, once the
    memo is warm, no evaluation. The core's own Struct, also the config file's ``dra`` section."""

    # Devices tried by the depth-first search (each a candidate check of one slot), and
    # candidates considered while ordering a request's candidates.
    steps: int = 100_000
    # Selector evaluations that miss the memo.
    evaluations: int = 20_000
    # Complete solutions compared for the interconnect choice once one is found.
    solutions: int = 512


class PreemptionSettings(Struct, frozen=True):
    """How widely preemption searches (preemption/candidates.py): kube-scheduler's
    DefaultPreemption bounds (minCandidateNodesAbsolute, minCandidateNodesPercentage) on the
    nodes a single pod's candidates are tried on, and the domains a gang with a required topology
    level is tried in."""

    min_candidate_nodes: int = 100
    min_candidate_nodes_percent: int = 10
    max_candidate_domains: int = 16


class CoreSettings(Struct, frozen=True):
    # Whole-GPU resource name -> vendor whose GPUs it asks for.
    gpu_resources: dict[str, str] = field(default_factory=_default_resources)
    gpu_policy: GpuPolicy = "topology-aware"
    # Node policy of pods that name none (hami.io/node-scheduler-policy).
    node_policy: NodePolicy = "binpack"
    # How node policy binpack orders nodes (placement/nodes.py, ``ranked_by``).
    binpack_order: BinpackOrder = "fragmentation"
    # GPU policy for shared-GPU requests when the pod names none (or names topology-aware, which
    # means nothing for a single card): binpack keeps idle cards whole for whole-GPU pods.
    shared_gpu_policy: GpuPolicy = "binpack"
    topology: TopologySettings = field(default_factory=TopologySettings)
    fragmentation: FragmentationSettings = field(default_factory=FragmentationSettings)
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    memos: MemoSettings = field(default_factory=MemoSettings)
    dra: DraLimits = field(default_factory=DraLimits)
