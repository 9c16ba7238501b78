"""Raw Kubernetes JSON to the core's inputs: only the fields we read, everything else skipped."""

from __future__ import annotations

import json

import msgspec
import pytest

from scheduler.kube.codec import (
    convert_node,
    convert_pod,
    decode_node,
    decode_pod,
    reserved_for_patch,
    unreserved_for_patch,
)

RAW_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "worker-0",
        "namespace": "train",
        "uid": "0b7c-uid",
        "resourceVersion": "4711",
        "labels": {"gpu-topology": "job", "gpu-topology-replica": "2"},
        "annotations": {"hami.io/node-scheduler-policy": "spread"},
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        "ownerReferences": [{"kind": "Job", "name": "x", "uid": "y"}],
    },
    "spec": {
        "schedulerName": "topo-scheduler",
        "nodeSelector": {"pool": "a100"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "initContainers": [
            {
                "name": "log-shipper",
                "restartPolicy": "Always",
                "resources": {"limits": {"cpu": "1"}},
            }
        ],
        "containers": [
            {
                "name": "main",
                "image": "pytorch",
                "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                "resources": {"limits": {"aliyun.com/gpu": "1", "memory": "8Gi"}},
            }
        ],
    },
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
}


def test_decode_raw_pod_keeps_what_the_scheduler_reads() -> None:
    pod = decode_pod(json.dumps(RAW_POD).encode())
    assert pod.key == "train/worker-0" and pod.uid == "0b7c-uid"
    assert pod.scheduler_name == "topo-scheduler" and pod.node_name == ""
    assert pod.labels["gpu-topology-replica"] == "2"
    assert pod.containers[0].limits == {"aliyun.com/gpu": "1", "memory": "8Gi"}
    assert pod.init_containers[0].restart_policy == "Always"
    assert pod.node_selector == {"pool": "a100"}
    assert pod.tolerations[0].key == "gpu" and pod.tolerations[0].operator == "Exists"
    assert not pod.deleting


def test_yaml_numbers_are_quantities_too() -> None:
    obj = json.loads(json.dumps(RAW_POD))
    obj["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": 2, "cpu": 0.5}
    pod = convert_pod(obj)
    assert pod.containers[0].limits == {"nvidia.com/gpu": "2", "cpu": "0.5"}


def test_defaults_for_a_minimal_pod_and_node() -> None:
    pod = convert_pod({"metadata": {"name": "p"}})
    assert (pod.namespace, pod.scheduler_name, pod.phase) == (
        "default",
        "default-scheduler",
        "Pending",
    )
    node = decode_node(b'{"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "8"}}}')
    assert node.name == "n" and not node.unschedulable and node.taints == ()


def test_node_taints_and_cordon() -> None:
    node = convert_node(
        {
            "metadata": {"name": "n", "labels": {"a": "b"}},
            "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
        }
    )
    assert node.unschedulable and node.taints[0].key == "k" and node.labels == {"a": "b"}


def test_a_wrong_field_type_names_its_path() -> None:
    obj = json.loads(json.dumps(RAW_POD))
    obj["spec"]["containers"] = {"name": "not-a-list"}
    with pytest.raises(msgspec.ValidationError, match=r"\$\.spec\.containers"):
        convert_pod(obj)


def test_deletion_timestamp_marks_a_pod_as_deleting() -> None:
    obj = json.loads(json.dumps(RAW_POD))
    obj["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    assert convert_pod(obj).deleting


def test_decode_raw_node_reads_taints_and_skips_what_it_does_not_read() -> None:
    raw = {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": "gpu-7",
            "labels": {"ack.node.gpu.schedule": "topology"},
            "annotations": {"topo-scheduler.io/gpus": "{}"},
            "managedFields": [{"manager": "kubelet", "operation": "Update"}],
        },
        "spec": {
            "podCIDR": "10.0.7.0/24",
            "taints": [
                {"key": "gpu", "value": "a100", "effect": "NoSchedule", "timeAdded": None},
            ],
        },
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["pause"], "sizeBytes": 1}],
        },
    }
    node = decode_node(json.dumps(raw).encode())
    assert node.name == "gpu-7" and node.labels == {"ack.node.gpu.schedule": "topology"}
    assert [(t.key, t.value, t.effect) for t in node.taints] == [("gpu", "a100", "NoSchedule")]
    assert node.annotations["topo-scheduler.io/gpus"] == "{}"


def test_whole_floats_become_integer_quantities() -> None:
    pod = convert_pod(
        {
            "metadata": {"name": "p", "namespace": ""},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"a/gpu": 2.0}}}]},
        }
    )
    # A whole float is printed the way the apiserver canonicalises the quantity: "2", not "2.0".
    assert pod.containers[0].requests == {"a/gpu": "2"}
    assert pod.namespace == "default"


RAW_NODE_WITH_STATUS = {
    "kind": "Node",
    "apiVersion": "v1",
    "metadata": {"name": "gpu-8", "resourceVersion": "99"},
    "spec": {},
    "status": {
        "capacity": {"cpu": "64", "nvidia.com/gpu": "8", "topo-scheduler.io/gpu": "8"},
        "allocatable": {
            "cpu": "63500m",
            "memory": "503Gi",
            "nvidia.com/gpu": "8",
            "topo-scheduler.io/gpu": "0",
        },
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01"}],
        "nodeInfo": {"kubeletVersion": "v1.33.5"},
    },
}


def test_decode_raw_node_reads_status_allocatable() -> None:
    node = decode_node(json.dumps(RAW_NODE_WITH_STATUS).encode())
    assert node.allocatable == {
        "cpu": "63500m",
        "memory": "503Gi",
        "nvidia.com/gpu": "8",
        "topo-scheduler.io/gpu": "0",
    }


def test_allocatable_keeps_only_the_names_asked_for() -> None:
    names = {"nvidia.com/gpu", "aliyun.com/gpu", "topo-scheduler.io/gpu"}
    node = decode_node(json.dumps(RAW_NODE_WITH_STATUS).encode(), names)
    assert node.allocatable == {"nvidia.com/gpu": "8", "topo-scheduler.io/gpu": "0"}
    # A heartbeat changes the conditions only: the node reads the same.
    beat = json.loads(json.dumps(RAW_NODE_WITH_STATUS))
    beat["metadata"]["resourceVersion"] = "100"
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-02"
    beat["status"]["allocatable"]["memory"] = "502Gi"
    assert decode_node(json.dumps(beat).encode(), names) == node
    # The device plugin going down does not.
    beat["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    assert decode_node(json.dumps(beat).encode(), names) != node


def test_node_without_status_has_no_allocatable_and_capacity_stands_in_for_it() -> None:
    assert decode_node(b'{"metadata": {"name": "n"}}').allocatable is None
    assert decode_node(b'{"metadata": {"name": "n"}, "status": null}').allocatable is None
    # The apiserver defaults allocatable to capacity; YAML numbers are quantities too.
    node = convert_node(
        {"metadata": {"name": "n"}, "status": {"capacity": {"nvidia.com/gpu": 4}}},
        {"nvidia.com/gpu"},
    )
    assert node.allocatable == {"nvidia.com/gpu": "4"}
    # A status without either offers nothing (an empty dict, not None: it is checked).
    bare = decode_node(b'{"metadata": {"name": "n"}, "status": {"nodeInfo": {}}}')
    assert bare.allocatable == {}


def test_a_malformed_allocatable_string_is_kept_for_the_core_to_warn_about() -> None:
    raw = json.loads(json.dumps(RAW_NODE_WITH_STATUS))
    raw["status"]["allocatable"]["nvidia.com/gpu"] = "eight"
    assert decode_node(json.dumps(raw).encode()).allocatable is not None
    assert decode_node(json.dumps(raw).encode(), {"nvidia.com/gpu"}).allocatable == {
        "nvidia.com/gpu": "eight"
    }


def test_an_allocatable_value_of_the_wrong_type_names_its_path() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.status\.allocatable"):
        convert_node({"metadata": {"name": "n"}, "status": {"allocatable": {"a/gpu": [1]}}})


def test_a_pods_nominated_node_is_read_from_its_status() -> None:
    pod = {"metadata": {"name": "p"}, "status": {"nominatedNodeName": "n1"}}
    assert convert_pod(pod).nominated_node == "n1"
    assert convert_pod({"metadata": {"name": "p"}}).nominated_node == ""


def test_a_claims_reservation_and_its_unreserve_are_strategic_merges_by_pod_uid() -> None:
    """kube-scheduler's PreBind adds the pod to status.reservedFor; its Unreserve deletes it by
    uid, with the claim's own UID as the precondition (a recreated claim is left alone)."""
    assert reserved_for_patch("p", "pod-uid") == {
        "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}]}
    }
    assert unreserved_for_patch("claim-uid", "pod-uid") == {
        "metadata": {"uid": "claim-uid"},
        "status": {"reservedFor": [{"$patch": "delete", "uid": "pod-uid"}]},
    }
    assert unreserved_for_patch("", "pod-uid") == {
        "status": {"reservedFor": [{"$patch": "delete", "uid": "pod-uid"}]}
    }


def test_the_reason_a_pod_shows_is_its_pod_scheduled_false_message() -> None:
    """What the service compares with its own reason (effects.py's ``_shown``); not a
    scheduling input: the pod with another reason is the same object."""
    obj = json.loads(json.dumps(RAW_POD))
    assert decode_pod(json.dumps(obj).encode()).shown_reason == ""  # False, no message
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "message": "not this one"},
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3"},
    ]
    shown = decode_pod(json.dumps(obj).encode())
    assert shown.shown_reason == "0/3"
    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    scheduled = decode_pod(json.dumps(obj).encode())
    assert scheduled.shown_reason is None
    assert scheduled.same_as(shown) and shown.same_as(scheduled)
