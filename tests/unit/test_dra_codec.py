"""resource.k8s.io/v1 JSON to the core's DRA objects and back (scheduler/kube/dracodec.py)."""

from __future__ import annotations

import json
from typing import Any

from scheduler.core.dra.allocator import allocate
from scheduler.core.dra.cel import Selectors
from scheduler.core.dra.inuse import InUse
from scheduler.core.model.dra import (
    ALL,
    CapacityRequestPolicy,
    CounterConsumption,
    DeviceCapacity,
    OpaqueConfig,
    Version,
)
from scheduler.core.model.objects import Taint, Toleration
from scheduler.kube.dracodec import (
    allocation_json,
    convert_device_class,
    convert_resource_claim,
    convert_resource_slice,
    decode_device_class,
    decode_resource_claim,
    decode_resource_slice,
)

SLICE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-a-gpu.nvidia.com-x7k2p", "uid": "u1"},
    "spec": {
        "driver": "gpu.nvidia.com",
        "nodeName": "node-a",
        "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 1},
        "devices": [
            {
                "name": "gpu-0",
                "attributes": {
                    "type": {"string": "gpu"},
                    "uuid": {"string": "GPU-4f1c"},
                    "driverVersion": {"version": "550.54.15"},
                    "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"},
                    "resource.kubernetes.io/numaNode": {"int": 0},
                    "ha": {"bool": True},
                    "future": {"ints": [1, 2]},
                },
                "capacity": {
                    "memory": {"value": "80Gi"},
                    "shares": {
                        "value": 10,
                        "requestPolicy": {
                            "default": "1",
                            "validRange": {"min": "1", "max": "10", "step": "1"},
                        },
                    },
                },
                "consumesCounters": [
                    {"counterSet": "gpu-0-counter-set", "counters": {"memory": {"value": "80Gi"}}}
                ],
                "taints": [{"key": "health", "value": "xid", "effect": "NoSchedule"}],
                "allowMultipleAllocations": True,
            }
        ],
    },
}

CLASS: dict[str, Any] = {
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
        "config": [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"kind": "GpuConfig"}}}],
        "extendedResourceName": "nvidia.com/gpu",
    },
}

CLAIM: dict[str, Any] = {
    "metadata": {"name": "pair", "namespace": "ml", "uid": "c1"},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpus",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 2,
                        "tolerations": [{"key": "health", "operator": "Exists"}],
                        "capacity": {"requests": {"shares": 2}},
                    },
                },
                {
                    "name": "nic",
                    "firstAvailable": [
                        {"name": "fast", "deviceClassName": "nic", "allocationMode": "All"},
                        {"name": "slow", "deviceClassName": "nic"},
                    ],
                },
            ],
            "constraints": [{"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/clique"}],
            "config": [{"requests": ["gpus"], "opaque": {"driver": "d", "parameters": {"a": 1}}}],
        }
    },
}


def test_a_slice_decodes_with_every_field_allocation_reads() -> None:
    # (An attribute of a type the core does not know, an alpha list, is dropped.)
    s = decode_resource_slice(json.dumps(SLICE).encode())
    assert (s.driver, s.node_name, s.pool.generation) == ("gpu.nvidia.com", "node-a", 3)
    d = s.devices[0]
    assert d.attributes == {
        "type": "gpu",
        "uuid": "GPU-4f1c",
        "driverVersion": Version("550.54.15"),
        "resource.kubernetes.io/pciBusID": "0000:3b:00.0",
        "resource.kubernetes.io/numaNode": 0,
        "ha": True,
    }
    assert d.capacity["memory"] == DeviceCapacity("80Gi")
    assert d.capacity["shares"] == DeviceCapacity(
        "10", CapacityRequestPolicy(default="1", valid_min="1", valid_max="10", valid_step="1")
    )
    assert d.consumes_counters == (CounterConsumption("gpu-0-counter-set", {"memory": "80Gi"}),)
    assert d.taints == (Taint("health", "NoSchedule", "xid"),)
    assert d.allow_multiple_allocations
    assert convert_resource_slice(SLICE) == s


def test_a_class_and_a_claim_decode() -> None:
    c = decode_device_class(json.dumps(CLASS).encode())
    assert c.selectors == ("device.driver == 'gpu.nvidia.com'",)
    assert c.config == (OpaqueConfig("gpu.nvidia.com", '{"kind":"GpuConfig"}'),)
    assert c.extended_resource_name == "nvidia.com/gpu"
    assert convert_device_class(CLASS) == c
    claim = decode_resource_claim(json.dumps(CLAIM).encode())
    assert claim.key == "ml/pair"
    gpus, nic = claim.requests
    assert gpus.exactly is not None and gpus.exactly.count == 2
    assert gpus.exactly.tolerations == (Toleration("health", "Exists"),)
    assert gpus.exactly.capacity == {"shares": "2"}
    assert [s.name for s in nic.first_available] == ["fast", "slow"]
    assert nic.first_available[0].exactly.allocation_mode == ALL
    assert claim.constraints[0].match_attribute == "gpu.nvidia.com/clique"
    assert claim.config[0].opaque == OpaqueConfig("d", '{"a":1}')
    assert convert_resource_claim(CLAIM).requests == claim.requests


def test_an_allocation_round_trips_through_the_status_json() -> None:
    raw = json.loads(json.dumps(SLICE))
    del raw["spec"]["devices"][0]["consumesCounters"]  # its counter set is in no slice
    slice_ = decode_resource_slice(json.dumps(raw).encode())
    device_class = decode_device_class(json.dumps(CLASS).encode())
    spec = dict(CLAIM["spec"]["devices"])
    spec["requests"] = [CLAIM["spec"]["devices"]["requests"][0]]
    spec["constraints"] = []
    one = {**CLAIM, "spec": {"devices": spec}}
    one["spec"]["devices"]["requests"][0]["exactly"]["count"] = 1
    claim = convert_resource_claim(one)
    outcome = allocate(
        [claim], {device_class.name: device_class}, [slice_], InUse(), "node-a", {}, Selectors()
    )
    assert outcome.ok, outcome.reason
    status = allocation_json(outcome.allocations[0])
    result = status["devices"]["results"][0]
    assert result["device"] == "gpu-0" and result["consumedCapacity"] == {
        "memory": "85899345920",
        "shares": "2",
    }
    assert result["tolerations"] == [{"key": "health", "operator": "Exists"}]
    assert status["devices"]["config"][0] == {
        "source": "FromClass",
        "opaque": {"driver": "gpu.nvidia.com", "parameters": {"kind": "GpuConfig"}},
    }
    assert status["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        ]
    }
    back = convert_resource_claim({**one, "status": {"allocation": status}})
    assert back.allocation == outcome.allocations[0]
