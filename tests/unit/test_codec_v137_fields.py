"""The v1.34-v1.37 fields the codec reads: pod-level resources, the kubelet's resize status,
DRA claims (and ResourceClaims, DeviceClasses), declared features and what infers them, and
the pod's upstream scheduling group."""

from __future__ import annotations

import json

from scheduler.core.model.objects import (
    ContainerStatusInput,
    NodeSelectorTerm,
    PodClaim,
    Requirement,
)
from scheduler.kube.codec import decode_node, decode_pod
from scheduler.kube.dracodec import convert_device_class, convert_resource_claim


def test_a_pod_of_v1_37_decodes_every_field_the_new_rules_read() -> None:
    raw = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u1"},
        "spec": {
            "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "4"}},
            "hostNetwork": True,
            "hostUsers": False,
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {"cpu": "1"}},
                    "restartPolicyRules": [
                        {"action": "RestartAllContainers", "exitCodes": {"operator": "In"}}
                    ],
                    "volumeMounts": [{"name": "v", "bindMountOptions": ["ro"]}],
                }
            ],
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
                {"name": "nic", "resourceClaimName": "shared-nic"},
                {"name": "later", "resourceClaimTemplateName": "t2"},
            ],
            "schedulingGroup": {"podGroupName": "workers"},
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "main",
                    "resources": {"requests": {"cpu": "3"}},
                    "allocatedResources": {"cpu": 2},
                }
            ],
            "resources": {"requests": {"cpu": "3"}},
            "allocatedResources": {"cpu": "2"},
            "conditions": [{"type": "PodResizePending", "reason": "Infeasible"}],
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x7"}],
            "extendedResourceClaimStatus": {
                "requestMappings": [],
                "resourceClaimName": "p-extended-resources-k2",
            },
        },
    }
    pod = decode_pod(json.dumps(raw).encode())
    assert pod.level_requests == {"cpu": "2"}
    assert pod.resize is not None and pod.resize.infeasible
    assert pod.resize.containers == (ContainerStatusInput("main", {"cpu": "3"}, {"cpu": "2"}),)
    assert pod.resize.pod_actuated == {"cpu": "3"} and pod.resize.pod_allocated == {"cpu": "2"}
    assert pod.resource_claims == (
        PodClaim("gpu", "p-gpu-x7", "gpu-template"),
        PodClaim("nic", "shared-nic"),
        PodClaim("later", "", "t2"),
    )
    assert pod.restart_rule_actions == ("RestartAllContainers",)
    assert pod.host_network and pod.host_users is False and pod.bind_mount_options
    assert pod.scheduling_group == "workers"
    assert pod.extended_claim == "p-extended-resources-k2"


def test_a_pending_pod_has_no_resize_status() -> None:
    raw = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    pod = decode_pod(json.dumps(raw).encode())
    assert pod.resize is None and pod.resource_claims == () and pod.scheduling_group == ""
    assert pod.extended_claim == ""


def test_declared_features_of_a_node() -> None:
    raw = {"metadata": {"name": "n"}, "status": {"declaredFeatures": ["VolumeBindMountOptions"]}}
    assert decode_node(json.dumps(raw).encode()).declared_features == ("VolumeBindMountOptions",)


NODE = ["n1"]


def test_resource_claims_and_device_classes() -> None:
    got = convert_resource_claim(
        {
            "metadata": {
                "name": "nic",
                "namespace": "ml",
                "uid": "c1",
                "deletionTimestamp": "2026-11-27T00:00:00Z",
                "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                "ownerReferences": [
                    {"kind": "Job", "uid": "j1"},
                    {"kind": "Pod", "uid": "u1", "controller": True},
                ],
            },
            "status": {
                "allocation": {
                    "devices": {"results": []},
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                                ]
                            }
                        ]
                    },
                },
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}],
            },
        }
    )
    assert got.key == "ml/nic" and got.allocation is not None and got.reserved_for == ("u1",)
    assert got.allocation.node_selector == (
        NodeSelectorTerm(match_fields=(Requirement("metadata.name", "In", ("n1",)),)),
    )
    assert got.deleting and got.extended and got.owner == "u1"
    unallocated = convert_resource_claim({"metadata": {"name": "x"}})
    assert unallocated.allocation is None and not unallocated.deleting
    assert not unallocated.extended and unallocated.owner == ""
    dc = convert_device_class(
        {
            "metadata": {"name": "gpu.example.com", "creationTimestamp": "2026-11-01T00:00:00Z"},
            "spec": {"extendedResourceName": "example.com/gpu"},
        }
    )
    assert dc.extended_resource_name == "example.com/gpu" and dc.created.startswith("2026-11-01")
