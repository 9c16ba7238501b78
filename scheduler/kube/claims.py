"""The ResourceClaim writes of the binder's PreBind and Unreserve (issue 29), as kube-scheduler's
DynamicResources plugin makes them, built on the claim's raw JSON object as the apiserver sent it.

Every write is a full replace (PUT) of the object read, so its ``metadata.resourceVersion`` is the
precondition: a write answered 409 changed nothing, and a write whose answer was lost either
landed or never will once the claim has moved past that version. The binder therefore re-reads
and tries again (kube-scheduler's RetryOnConflict) and can always tell whether a write of its
own landed: that is what makes an allocation safe to retry and to undo (service/binder.py).
Working on the raw object keeps every field this scheduler does not model (status.devices,
labels, fields of a newer API) as it was.

PreBind, per claim the placement allocates:
1. a special claim (extended resources backed by a DeviceClass, KEP-5004) that does not exist is
   created: ``<pod>-extended-resources-<5 characters>`` (kube-scheduler's generateName and the
   apiserver's generator: the base cut to 58 characters), the annotation
   ``resource.kubernetes.io/extended-resource-claim: "true"``, the pod as its controlling owner.
   The suffix is derived from the pod's UID instead of drawn at random, so a create whose answer
   was lost is repeated under the same name (409 AlreadyExists: it is ours if the pod owns it)
   rather than leaving a second claim behind;
2. the delete-protection finalizer, if missing (``with_finalizer``): an Update;
3. one UpdateStatus: ``status.allocation`` with its ``allocationTimestamp``, and the pod appended
   to ``status.reservedFor`` (``allocated_for``);
4. for a special claim, the pod's ``status.extendedResourceClaimStatus`` (a merge patch).

Unreserve undoes what PreBind wrote: the pod leaves ``reservedFor``, and when nobody else is left
in it the allocation goes too (``released_by``), then the finalizer (``without_finalizer``); a
special claim is deleted, its finalizer removed first, as kube-scheduler's Unreserve does.
(kube-scheduler leaves the allocation for a later Filter or PostFilter to clear; this scheduler
clears it at once, so the devices are free again as soon as the Binding is known to have failed.)
"""

from __future__ import annotations

import copy
import enum
import hashlib
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from scheduler.core.model.dra import EXTENDED_RESOURCE_CLAIM, DeviceResult, RequestMapping

# The finalizer whoever allocates a claim adds, so that it is not deleted while allocated.
FINALIZER: Final = "resource.kubernetes.io/delete-protection"
# The apiserver's generated names: the base cut to 63 - 5 characters, then 5 of these.
_GENERATED_BASE: Final = 58
_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"

ClaimObject = dict[str, Any]


class Answer(enum.Enum):
    DONE = "done"
    CONFLICT = "conflict"  # 409: the claim changed since it was read (or exists, on a create)
    GONE = "gone"  # 404


class ClaimWrite(msgspec.Struct, frozen=True):
    """The apiserver's answer to one claim write, with the object as written (DONE)."""

    answer: Answer
    obj: ClaimObject | None = None


def meta(obj: ClaimObject) -> dict[str, Any]:
    found = obj.get("metadata")
    return found if isinstance(found, dict) else {}


def _status(obj: ClaimObject) -> dict[str, Any]:
    found = obj.get("status")
    return found if isinstance(found, dict) else {}


def uid_of(obj: ClaimObject) -> str:
    return str(meta(obj).get("uid") or "")


def deleting(obj: ClaimObject) -> bool:
    return meta(obj).get("deletionTimestamp") is not None


def reserved_uids(obj: ClaimObject) -> list[str]:
    return [str(c.get("uid") or "") for c in _status(obj).get("reservedFor") or ()]


def allocated(obj: ClaimObject) -> bool:
    return _status(obj).get("allocation") is not None


def held_for(obj: ClaimObject, pod_uid: str) -> bool:
    """Allocated and reserved for the pod: PreBind's writes for it have landed."""
    return allocated(obj) and pod_uid in reserved_uids(obj)


def owned_by(obj: ClaimObject, pod_uid: str) -> bool:
    """The pod is the claim's controlling owner."""
    return any(
        o.get("uid") == pod_uid and o.get("controller") is True
        for o in meta(obj).get("ownerReferences") or ()
    )


def with_finalizer(obj: ClaimObject) -> ClaimObject | None:
    """The claim with the delete-protection finalizer added; None when it has it already."""
    finalizers = list(meta(obj).get("finalizers") or ())
    if FINALIZER in finalizers:
        return None
    out = copy.deepcopy(obj)
    out["metadata"]["finalizers"] = [*finalizers, FINALIZER]
    return out


def without_finalizer(obj: ClaimObject) -> ClaimObject | None:
    """The claim without the delete-protection finalizer; None when it does not have it."""
    finalizers = list(meta(obj).get("finalizers") or ())
    if FINALIZER not in finalizers:
        return None
    out = copy.deepcopy(obj)
    out["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
    return out


def timestamp(wall_ms: int) -> str:
    """RFC 3339 in seconds, as the apiserver writes a metav1.Time."""
    return datetime.fromtimestamp(wall_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def allocated_for(
    obj: ClaimObject, allocation: dict[str, Any], pod: str, pod_uid: str, wall_ms: int
) -> ClaimObject:
    """The claim's status with ``allocation`` (its ``allocationTimestamp`` filled in) and the
    pod appended to ``reservedFor``: PreBind's one status write."""
    out = copy.deepcopy(obj)
    status = out.setdefault("status", {})
    status["allocation"] = {**allocation, "allocationTimestamp": timestamp(wall_ms)}
    reserved = [c for c in status.get("reservedFor") or () if c.get("uid") != pod_uid]
    status["reservedFor"] = [*reserved, {"resource": "pods", "name": pod, "uid": pod_uid}]
    return out


def released_by(obj: ClaimObject, pod_uid: str) -> ClaimObject | None:
    """The claim's status without the pod in ``reservedFor``, and without its allocation when
    nobody else is reserved (Unreserve of a claim this scheduler allocated); None when the pod
    is not reserved."""
    reserved = list(_status(obj).get("reservedFor") or ())
    rest = [c for c in reserved if c.get("uid") != pod_uid]
    if len(rest) == len(reserved):
        return None
    out = copy.deepcopy(obj)
    status = out["status"]
    if rest:
        status["reservedFor"] = rest
    else:
        status.pop("reservedFor", None)
        status.pop("allocation", None)
        # What drivers wrote about the devices goes with their allocation, as the resource claim
        # controller clears it.
        status.pop("devices", None)
    return out


def extended_claim_name(pod: str, pod_uid: str) -> str:
    """The special claim's name: kube-scheduler's generateName ``<pod>-extended-resources-``,
    cut as the apiserver cuts it, and 5 characters of the apiserver's alphabet drawn from the
    pod's UID (the same name on every try for this pod)."""
    base = f"{pod}-extended-resources-"[:_GENERATED_BASE]
    digest = hashlib.sha256(pod_uid.encode()).digest()
    return base + "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:5])


def extended_claim(
    namespace: str, pod: str, pod_uid: str, requests: list[dict[str, Any]]
) -> ClaimObject:
    """The special claim as kube-scheduler creates it: owned by the pod (its controller), with
    the extended-resource annotation, and the requests the core chose for the pod's node."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": extended_claim_name(pod, pod_uid),
            "namespace": namespace,
            "annotations": {EXTENDED_RESOURCE_CLAIM: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod,
                    "uid": pod_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"devices": {"requests": requests}},
    }


def extended_status_patch(claim: str, mappings: tuple[RequestMapping, ...]) -> dict[str, Any]:
    """The pod status merge patch recording its special claim (kube-scheduler's last PreBind
    write for it)."""
    return {
        "status": {
            "extendedResourceClaimStatus": {
                "resourceClaimName": claim,
                "requestMappings": [
                    {
                        "containerName": m.container,
                        "resourceName": m.resource,
                        "requestName": m.request,
                    }
                    for m in mappings
                ],
            }
        }
    }


class Binding(enum.Enum):
    """Where a claim's binding conditions stand (KEP-5007)."""

    READY = "ready"  # every condition of every device that has some is True
    WAITING = "waiting"
    FAILED = "failed"  # a binding failure condition is True


def binding_state(obj: ClaimObject, results: tuple[DeviceResult, ...]) -> tuple[Binding, str]:
    """The binding conditions of the allocated ``results`` as the drivers reported them in
    ``status.devices[]`` (matched by driver, pool, device and share), with the condition that
    failed or is awaited."""
    reported: dict[tuple[str, str, str, str], dict[str, str]] = {}
    for d in _status(obj).get("devices") or ():
        key = (d.get("driver", ""), d.get("pool", ""), d.get("device", ""), d.get("shareID", ""))
        reported[key] = {c.get("type", ""): c.get("status", "") for c in d.get("conditions") or ()}
    awaited = ""
    for r in results:
        if not r.binding_conditions:
            continue
        conditions = reported.get((r.driver, r.pool, r.device, r.share_id), {})
        for failure in r.binding_failure_conditions:
            if conditions.get(failure) == "True":
                return Binding.FAILED, f"device {r.device}: {failure}"
        for condition in r.binding_conditions:
            if conditions.get(condition) != "True" and not awaited:
                awaited = f"device {r.device}: {condition}"
    return (Binding.WAITING, awaited) if awaited else (Binding.READY, "")
