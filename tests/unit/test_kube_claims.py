"""kube/claims.py: the binder's ResourceClaim writes, built on the raw object read."""

from __future__ import annotations

from scheduler.core.model.dra import DeviceRequest, DeviceResult, ExactRequest, RequestMapping
from scheduler.kube import claims as kc
from scheduler.kube.dracodec import requests_json


def claim(**status: object) -> kc.ClaimObject:
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
        "spec": {"devices": {"requests": []}},
        "status": dict(status),
    }


def test_the_finalizer_is_added_once_and_removed() -> None:
    protected = kc.with_finalizer(claim())
    assert protected is not None and protected["metadata"]["finalizers"] == [kc.FINALIZER]
    assert protected["metadata"]["resourceVersion"] == "7"  # the precondition
    assert kc.with_finalizer(protected) is None
    bare = kc.without_finalizer(protected)
    assert bare is not None and bare["metadata"]["finalizers"] == []
    assert kc.without_finalizer(bare) is None


def test_allocated_for_sets_the_allocation_its_timestamp_and_appends_the_pod() -> None:
    shared = claim(reservedFor=[{"resource": "pods", "name": "b", "uid": "ub"}])
    out = kc.allocated_for(shared, {"devices": {"results": []}}, "a", "ua", 1_700_000_000_000)
    assert out["status"]["allocation"] == {
        "devices": {"results": []},
        "allocationTimestamp": "2023-11-14T22:13:20Z",
    }
    assert [c["uid"] for c in out["status"]["reservedFor"]] == ["ub", "ua"]
    assert kc.held_for(out, "ua") and not kc.held_for(shared, "ua")
    assert "allocation" not in shared["status"]  # the object read is left as it was


def test_released_by_clears_the_allocation_only_when_nobody_else_is_reserved() -> None:
    both = claim(
        allocation={"devices": {}},
        reservedFor=[{"uid": "ua"}, {"uid": "ub"}],
        devices=[{"device": "d"}],
    )
    one = kc.released_by(both, "ua")
    assert one is not None and one["status"]["reservedFor"] == [{"uid": "ub"}]
    assert kc.allocated(one)
    none = kc.released_by(one, "ub")
    assert none is not None and none["status"] == {}
    assert kc.released_by(none, "ub") is None


def test_the_special_claim_is_named_and_owned_as_kube_scheduler_makes_it() -> None:
    name = kc.extended_claim_name("p" * 70, "uid-1")
    assert len(name) == 63 and name.startswith("p" * 58)  # the apiserver's generator: 58 + 5
    assert name == kc.extended_claim_name("p" * 70, "uid-1")  # the same on every try
    assert name != kc.extended_claim_name("p" * 70, "uid-2")
    request = DeviceRequest(
        "container-0-request-0", exactly=ExactRequest("gpu.nvidia.com", count=2)
    )
    obj = kc.extended_claim("ns", "p", "uid-1", requests_json((request,)))
    assert obj["metadata"]["annotations"] == {
        "resource.kubernetes.io/extended-resource-claim": "true"
    }
    assert kc.owned_by(obj, "uid-1") and not kc.owned_by(obj, "uid-2")
    assert obj["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    patch = kc.extended_status_patch(name, (RequestMapping("c", "nvidia.com/gpu", "r"),))
    assert patch["status"]["extendedResourceClaimStatus"]["requestMappings"] == [
        {"containerName": "c", "resourceName": "nvidia.com/gpu", "requestName": "r"}
    ]


def test_binding_conditions_are_read_from_the_drivers_device_status() -> None:
    result = DeviceResult(
        "r", "drv", "pool", "d0", binding_conditions=("ready",), binding_failure_conditions=("bad",)
    )

    def reported(*conditions: tuple[str, str]) -> kc.ClaimObject:
        entry = {"driver": "drv", "pool": "pool", "device": "d0"}
        entry["conditions"] = [{"type": t, "status": s} for t, s in conditions]  # type: ignore[assignment]
        return claim(devices=[entry])

    assert kc.binding_state(claim(), (result,))[0] is kc.Binding.WAITING
    assert kc.binding_state(reported(("ready", "False")), (result,))[0] is kc.Binding.WAITING
    assert kc.binding_state(reported(("ready", "True")), (result,)) == (kc.Binding.READY, "")
    assert kc.binding_state(reported(("ready", "True"), ("bad", "True")), (result,))[0] is (
        kc.Binding.FAILED
    )
