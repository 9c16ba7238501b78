"""Annotation, label and resource names: public contracts shared with users and other tools."""

from __future__ import annotations

from typing import Final

# Node inventory written by our node agent (or by hand).
GPUS_ANNOTATION: Final = "topo-scheduler.io/gpus"
# HAMi's device plugin inventory, read when ours is absent.
HAMI_REGISTER_ANNOTATION: Final = "hami.io/node-nvidia-register"
HAMI_SCORE_ANNOTATION: Final = "hami.io/node-nvidia-score"

# Written by this scheduler at bind time.
DEVICES_ANNOTATION: Final = "topo-scheduler.io/devices"
ASSIGNMENT_ANNOTATION: Final = "topo-scheduler.io/assignment"
# Written by our device plugin after the kubelet allocated: the GPUs each container really got.
# Where it disagrees with the assignment (device plugin mode `adopt`), it is the truth.
ALLOCATED_ANNOTATION: Final = "topo-scheduler.io/allocated"

# Pod policies (HAMi's names, so pods written for HAMi work unchanged).
GPU_POLICY_ANNOTATION: Final = "hami.io/gpu-scheduler-policy"
NODE_POLICY_ANNOTATION: Final = "hami.io/node-scheduler-policy"

# Gang labels (Alibaba ACK's names).
GANG_LABEL: Final = "gpu-topology"
GANG_REPLICA_LABEL: Final = "gpu-topology-replica"
# Other gang sources read as the same gang (core/model/gangsources.py).
# scheduler-plugins' coscheduling: the pod's PodGroup (its spec.minMember is the gang's minimum).
POD_GROUP_API: Final = "scheduling.x-k8s.io"
POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
# Kueue's plain pod groups: all members together; Kueue gates them until it admits the group.
KUEUE_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"
# Volcano: the pod names a Volcano PodGroup (scheduling.volcano.sh), whose minMember counts.
VOLCANO_POD_GROUP_API: Final = "scheduling.volcano.sh"
# The upstream Workload API's PodGroup (scheduling.k8s.io/v1beta1 in v1.37), which a pod names
# in spec.schedulingGroup.podGroupName.
UPSTREAM_POD_GROUP_API: Final = "scheduling.k8s.io"
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
# Koordinator's gang annotations (no object behind them).
KOORD_GANG_NAME_ANNOTATION: Final = "gang.scheduling.koordinator.sh/name"
KOORD_GANG_MIN_ANNOTATION: Final = "gang.scheduling.koordinator.sh/min-available"
KOORD_GANG_TOTAL_ANNOTATION: Final = "gang.scheduling.koordinator.sh/total-number"

# Shared GPUs (Koordinator and MetaX sGPU).
SHARED_RESOURCE: Final = "koordinator.sh/gpu.shared"
CORE_RESOURCE: Final = "koordinator.sh/gpu-core"
MEMORY_RESOURCE: Final = "koordinator.sh/gpu-memory"
MEMORY_RATIO_RESOURCE: Final = "koordinator.sh/gpu-memory-ratio"
SGPU_RESOURCE: Final = "metax-tech.com/sgpu"
SGPU_QOS_ANNOTATION: Final = "metax-tech.com/sgpu-qos-policy"
SGPU_QOS_POLICIES: Final = ("fixed-share", "best-effort", "burst-share")
# An sGPU pod without a QoS annotation gets the least demanding policy.
DEFAULT_SGPU_QOS: Final = "best-effort"

CORES_PER_CARD: Final = 100

# Cross-node topology constraints (issue 21, core/gangs/constraints.py). A level is named by its
# node-label key or its alias. Ours:
TOPOLOGY_REQUIRED_ANNOTATION: Final = "topo-scheduler.io/topology-required"
TOPOLOGY_PREFERRED_ANNOTATION: Final = "topo-scheduler.io/topology-preferred"
TOPOLOGY_SLICE_REQUIRED_ANNOTATION: Final = "topo-scheduler.io/topology-slice-required"
TOPOLOGY_SLICE_SIZE_ANNOTATION: Final = "topo-scheduler.io/topology-slice-size"
# Kueue's (on the PodTemplate, so on every pod); its gate until it has chosen the domain.
KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_SLICE_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE_ANNOTATION: Final = "kueue.x-k8s.io/podset-slice-size"
KUEUE_TOPOLOGY_GATE: Final = "kueue.x-k8s.io/topology"
# KAI's: the Topology the levels belong to, and the levels.
KAI_TOPOLOGY_ANNOTATION: Final = "kai.scheduler/topology"
KAI_REQUIRED_ANNOTATION: Final = "kai.scheduler/topology-required-placement"
KAI_PREFERRED_ANNOTATION: Final = "kai.scheduler/topology-preferred-placement"
KAI_SEGMENT_SIZE_ANNOTATION: Final = "kai.scheduler/segment-size"
KAI_SEGMENT_REQUIRED_ANNOTATION: Final = "kai.scheduler/segment-topology-required-placement"
# A gang member's rank, the first of these a pod carries (label, else annotation); by name
# when none.
RANK_LABELS: Final = (
    "batch.kubernetes.io/job-completion-index",
    "training.kubeflow.org/replica-index",
    "leaderworkerset.sigs.k8s.io/worker-index",
    "jobset.sigs.k8s.io/job-index",
    "apps.kubernetes.io/pod-index",
)
