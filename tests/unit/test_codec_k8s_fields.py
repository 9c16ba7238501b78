"""The codec reads every field the Kubernetes filters need, from the apiserver's raw JSON."""

from __future__ import annotations

import json

from scheduler.core.model.objects import (
    HostPort,
    LabelSelector,
    NodeSelectorTerm,
    PodAffinityTerm,
    Requirement,
    SpreadConstraint,
)
from scheduler.kube.codec import (
    claim_from_obj,
    convert_node,
    decode_pod,
    volume_from_obj,
)

POD = {
    "metadata": {"name": "w-0", "namespace": "ml", "labels": {"job": "j1", "rev": "7"}},
    "spec": {
        "schedulerName": "topo-scheduler",
        "priority": 1000,
        "preemptionPolicy": "Never",
        "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
        "overhead": {"cpu": "250m"},
        "containers": [
            {
                "name": "main",
                "resources": {"requests": {"cpu": "48", "memory": "400Gi"}},
                "ports": [
                    {"containerPort": 80},
                    {"containerPort": 9100, "hostPort": 9100},
                    {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                ],
            }
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "dataset"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "tmp", "emptyDir": {}},
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "node.kubernetes.io/instance-type",
                                    "operator": "In",
                                    "values": ["p4d.24xlarge"],
                                }
                            ],
                            "matchFields": [
                                {"key": "metadata.name", "operator": "NotIn", "values": ["bad"]}
                            ],
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
                    }
                ],
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"job": "j1"}},
                        "matchLabelKeys": ["rev"],
                        "namespaceSelector": {},
                    }
                ]
            },
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"job": "j1"}},
                "matchLabelKeys": ["rev", "absent"],
                "minDomains": 3,
            }
        ],
    },
}


def test_every_filter_field_is_read_from_raw_json() -> None:
    pod = decode_pod(json.dumps(POD).encode())
    assert pod.priority == 1000 and pod.preemption_policy == "Never"
    assert pod.scheduling_gates == ("kueue.x-k8s.io/admission",)
    assert pod.overhead == {"cpu": "250m"}
    assert pod.containers[0].requests == {"cpu": "48", "memory": "400Gi"}
    # Only ports with a hostPort, with the API's defaults.
    assert pod.containers[0].host_ports == (
        HostPort(9100, "TCP", "0.0.0.0"),
        HostPort(53, "UDP", "10.0.0.1"),
    )
    assert pod.claims == ("dataset", "w-0-scratch")
    affinity = pod.affinity
    assert affinity is not None
    assert affinity.node_required == (
        NodeSelectorTerm(
            match_expressions=(
                Requirement("node.kubernetes.io/instance-type", "In", ("p4d.24xlarge",)),
            ),
            match_fields=(Requirement("metadata.name", "NotIn", ("bad",)),),
        ),
    )
    assert affinity.node_preferred[0].weight == 10
    # matchLabelKeys folded into the selector with the pod's own value; an empty
    # namespaceSelector (every namespace) is kept, not dropped.
    assert affinity.anti_required == (
        PodAffinityTerm(
            topology_key="kubernetes.io/hostname",
            label_selector=LabelSelector(
                match_labels={"job": "j1"}, match_expressions=(Requirement("rev", "In", ("7",)),)
            ),
            namespace_selector=LabelSelector(),
        ),
    )
    assert pod.spread == (
        SpreadConstraint(
            max_skew=1,
            topology_key="zone",
            when_unsatisfiable="DoNotSchedule",
            label_selector=LabelSelector(
                match_labels={"job": "j1"}, match_expressions=(Requirement("rev", "In", ("7",)),)
            ),
            min_domains=3,
        ),
    )


def test_a_plain_pod_has_no_filter_fields() -> None:
    pod = decode_pod(b'{"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}')
    assert pod.affinity is None and pod.spread == () and pod.claims == ()
    assert pod.priority == 0 and pod.scheduling_gates == ()


def test_node_allocatable_keeps_every_resource() -> None:
    node = convert_node(
        {
            "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "pods": 110}},
        }
    )
    assert node.allocatable == {"cpu": "96", "memory": "768Gi", "pods": "110"}


def test_claims_and_volumes() -> None:
    import msgspec

    from scheduler.kube.codec import Claim, Volume

    claim = claim_from_obj(
        msgspec.convert(
            {
                "metadata": {"name": "dataset", "namespace": "ml"},
                "spec": {"volumeName": "pv-1"},
                "status": {"phase": "Bound"},
            },
            Claim,
        )
    )
    assert (claim.key, claim.volume_name, claim.phase, claim.deleting) == (
        "ml/dataset",
        "pv-1",
        "Bound",
        False,
    )
    volume = volume_from_obj(
        msgspec.convert(
            {
                "metadata": {"name": "pv-1"},
                "spec": {
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "In", "values": ["a"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
            },
            Volume,
        )
    )
    assert volume.node_required == (
        NodeSelectorTerm(match_expressions=(Requirement("zone", "In", ("a",)),)),
    )
