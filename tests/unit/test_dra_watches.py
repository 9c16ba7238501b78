"""Issue 29 item 1: DRA's ResourceSlices, DeviceTaintRules, DeviceClasses and ResourceClaims are
watched into the snapshot as model/dra.py's full objects; an object beyond the API's limits (a slice
of 10,000 devices, a device with a megabyte of attributes) is refused on its own with an error
naming it and the field, and the others go on being watched."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from structlog.testing import capture_logs

from scheduler.config.tuning import Tuning
from scheduler.core.model.dra import (
    Allocation,
    DeviceResult,
    DeviceTaintRule,
    DeviceTaintSelector,
    ResourceClaim,
)
from scheduler.core.model.objects import Taint
from scheduler.service.watches import Watches
from scheduler.state.memory import MemoryStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import Apiserver, Replica


def slice_(name: str, devices: list[dict[str, Any]], version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": version},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": name,
            "devices": devices,
        },
    }


GOOD = slice_("n1", [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-0"}}}])
MANY = slice_("n2", [{"name": f"gpu-{i}"} for i in range(10_000)])
HUGE = slice_("n3", [{"name": "gpu-0", "attributes": {"blob": {"string": "x" * (1 << 20)}}}])
RULE = {
    "metadata": {"name": "drain", "resourceVersion": "4"},
    "spec": {
        "deviceSelector": {"driver": "gpu.example.com", "pool": "n1"},
        "taint": {
            "key": "example.com/drain",
            "effect": "NoExecute",
            "timeAdded": "2026-11-27T00:00:00Z",
        },
    },
    "status": {"conditions": [{"type": "EvictionInProgress", "status": "False"}]},
}
CLASS = {
    "metadata": {"name": "gpu.example.com"},
    "spec": {"extendedResourceName": "example.com/gpu"},
}
CLAIM = {
    "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "3"},
    "spec": {
        "devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]
        }
    },
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "pu"}],
    },
}


class Api:
    """list_kind and watch_kind of KubeApi, for the DRA kinds."""

    def __init__(self) -> None:
        self.lists: dict[str, list[dict[str, Any]]] = {
            "resourceslices": [GOOD, MANY, HUGE],
            "devicetaintrules": [RULE],
            "deviceclasses": [CLASS],
            "resourceclaims": [CLAIM],
        }
        self.events: dict[str, list[dict[str, Any]]] = {}

    async def list_kind(self, kind: str) -> bytes:
        return json.dumps(
            {"metadata": {"resourceVersion": "9"}, "items": self.lists[kind]}
        ).encode()

    def __getattr__(self, name: str) -> Any:
        """The pod and node calls the required watches are built with (never called here)."""

        async def not_called(*args: Any) -> Any:
            raise AssertionError(f"{name} is not called in this test")

        return not_called

    async def watch_kind(self, kind: str, rv: str, timeout: int) -> AsyncIterator[bytes]:
        async def lines() -> AsyncIterator[bytes]:
            for event in self.events.get(kind, ()):
                yield json.dumps(event).encode()

        return lines()


async def test_dra_objects_are_watched_whole_and_an_object_beyond_the_limits_is_refused() -> None:
    clock = ManualClock(0.0)
    r = Replica(Apiserver(), MemoryStore(clock), clock)
    api = Api()
    watches = Watches(api, "topo-scheduler", r.s, Tuning())  # type: ignore[arg-type]
    slices, rules, classes, claims = watches._optional["dra"]  # stepped here, not started
    with capture_logs() as logs:
        for reflector in (slices, rules, classes, claims):
            await reflector._list()
    inputs = r.s.state.inputs
    assert list(inputs.resource_slices) == ["n1"]
    assert inputs.resource_slices["n1"].devices[0].attributes == {"uuid": "GPU-0"}
    assert inputs.device_taint_rules["drain"] == DeviceTaintRule(
        "drain",
        Taint("example.com/drain", "NoExecute"),
        DeviceTaintSelector("gpu.example.com", "n1"),
    )
    assert inputs.device_classes["gpu.example.com"].extended_resource_name == "example.com/gpu"
    claim = inputs.resource_claims["ns/c"]
    assert claim.reserved_for == ("pu",) and claim.allocation == Allocation(
        (DeviceResult("gpu", "gpu.example.com", "n1", "gpu-0"),)
    )
    refused = sorted(e["error"] for e in logs if e["event"] == "DRA object refused")
    assert refused == [
        "ResourceSlice n2 refused: Expected `array` of length <= 128 - at `$.spec.devices`",
        "ResourceSlice n3 refused: Expected `str` of length <= 64 - at "
        "`$.spec.devices[0].attributes[...].string`",
    ]
    # A slice updated beyond the limits leaves the snapshot; the watch goes on with the next.
    api.events["resourceslices"] = [
        {"type": "MODIFIED", "object": slice_("n1", MANY["spec"]["devices"], "10")},
        {"type": "ADDED", "object": slice_("n4", GOOD["spec"]["devices"], "11")},
    ]
    assert await slices._watch_once()
    assert list(inputs.resource_slices) == ["n4"] and slices.resource_version == "11"
    # A rule updated beyond the limits (a key longer than any label name) taints nothing.
    api.events["devicetaintrules"] = [
        {
            "type": "MODIFIED",
            "object": {**RULE, "spec": {"taint": {"key": "k" * 300, "effect": "NoSchedule"}}},
        },
    ]
    assert await rules._watch_once()
    assert list(inputs.device_taint_rules) == []
    # A claim deleted: gone from the snapshot.
    api.events["resourceclaims"] = [{"type": "DELETED", "object": CLAIM}]
    assert await claims._watch_once()
    assert inputs.resource_claims.get("ns/c") is None
    inputs.resource_claims.put(ResourceClaim("ns", "d"))
    assert list(inputs.resource_claims) == ["ns/d"]


def test_a_pod_with_a_claim_or_an_extended_resource_waits_for_the_dra_watches() -> None:
    clock = ManualClock(0.0)
    r = Replica(Apiserver(), MemoryStore(clock), clock)
    asked: list[str] = []
    r.s.intake.watch_needed = lambda kind: asked.append(kind) is None and False
    assert not r.s.intake.watches_ready(MakePod().Name("p").Req(1).Obj())  # nvidia.com/gpu
    assert asked == ["dra"]
    asked.clear()
    assert r.s.intake.watches_ready(MakePod().Name("q").Requests(cpu="1").Obj())
    assert asked == []
