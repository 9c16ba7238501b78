"""PodGroups of scheduler-plugins and Volcano to the core's PodGroupInput (good, malformed,
oversized; single objects, LISTs, watch events and a reflector), the gang calls' bodies and
outcomes, and the deploy/ files they need (the optional CRD, the scheduler's RBAC rules)."""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from scheduler.core.model.objects import PodGroupInput
from scheduler.kube.api import KubeApi
from scheduler.kube.podgroups import (
    CUSTOM_RESOURCES,
    MAX_MEMBERS,
    MAX_OBJECT_BYTES,
    MAX_SPEC_BYTES,
    POD_GROUP_LABEL,
    POD_GROUPS,
    VOLCANO_POD_GROUPS,
    Eviction,
    PodGroup,
    PodGroupError,
    PodGroupPhase,
    Write,
    convert_pod_group,
    crd_is_established,
    decode_pod_group,
    decode_pod_group_event,
    decode_pod_group_list,
    eviction_body,
    eviction_result,
    nominated_node_patch,
    pod_group_or_error,
    pod_group_status_patch,
)
from scheduler.kube.topologies import TOPOLOGY_RESOURCES
from scheduler.kube.tuning import LIST_PAGE, REQUEST_TIMEOUT_S
from scheduler.kube.watch import HttpError, Reflector

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "deploy" / "optional" / "podgroup-crd.yaml"
ROLE_FILE = REPO / "deploy" / "base" / "scheduler-clusterrole.yaml"

PLUGINS_GROUP: dict[str, Any] = {
    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
    "kind": "PodGroup",
    "metadata": {
        "name": "llama-70b",
        "namespace": "train",
        "uid": "pg-uid-1",
        "resourceVersion": "812",
        "labels": {"training.kubeflow.org/job-name": "llama-70b"},
        "ownerReferences": [{"kind": "PyTorchJob", "name": "llama-70b", "uid": "job-uid"}],
        "managedFields": [{"manager": "training-operator", "fieldsV1": {"f:spec": {}}}],
    },
    "spec": {
        "minMember": 4,
        "minResources": {"nvidia.com/gpu": "32", "cpu": 64},
        "scheduleTimeoutSeconds": 120,
    },
    "status": {"phase": "Pending", "occupiedBy": "job-uid", "scheduleStartTime": None},
}

VOLCANO_GROUP: dict[str, Any] = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    "metadata": {"name": "mpi-job", "namespace": "hpc", "uid": "vc-uid", "resourceVersion": "9"},
    "spec": {
        "minMember": 3,
        "minTaskMember": {"launcher": 1, "worker": 2},
        "queue": "default",
        "priorityClassName": "high",
        "minResources": {"nvidia.com/gpu": "16"},
    },
    "status": {"phase": "Inqueue", "conditions": [{"type": "Scheduled", "status": "True"}]},
}


def raw(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


def with_spec(base: dict[str, Any], **spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(base)
    obj["spec"].update(spec)
    return obj


def error_of(obj: dict[str, Any]) -> PodGroupError:
    with pytest.raises(PodGroupError) as caught:
        decode_pod_group(raw(obj))
    return caught.value


# ---- good objects -------------------------------------------------------------------------


def test_scheduler_plugins_pod_group() -> None:
    group = decode_pod_group(raw(PLUGINS_GROUP))
    assert group == PodGroupInput(
        "scheduling.x-k8s.io",
        "train",
        "llama-70b",
        min_member=4,
        schedule_timeout_seconds=120,
        uid="pg-uid-1",
        status_foreign=True,  # occupiedBy: scheduler-plugins' controller writes its status
    )
    assert group.key == "scheduling.x-k8s.io/train/llama-70b"
    assert POD_GROUP_LABEL == "scheduling.x-k8s.io/pod-group"


def test_volcano_pod_group_has_no_timeout() -> None:
    group = decode_pod_group(raw(VOLCANO_GROUP))
    # Volcano's status is always its controller's.
    assert group == PodGroupInput(
        "scheduling.volcano.sh", "hpc", "mpi-job", 3, None, "vc-uid", status_foreign=True
    )


def test_optional_fields_default() -> None:
    # scheduler-plugins omits a zero minMember and an unset timeout (omitempty); no spec at all.
    bare = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "metadata": {"name": "g"}}
    assert decode_pod_group(raw(bare)) == PodGroupInput("scheduling.x-k8s.io", "default", "g")
    empty = {**bare, "spec": {}}
    assert decode_pod_group(raw(empty)).schedule_timeout_seconds is None
    zero = with_spec(PLUGINS_GROUP, scheduleTimeoutSeconds=0)
    assert decode_pod_group(raw(zero)).schedule_timeout_seconds == 0  # as written, not defaulted


def test_any_version_of_the_two_groups() -> None:
    older = {**VOLCANO_GROUP, "apiVersion": "scheduling.volcano.sh/v1alpha1"}
    assert decode_pod_group(raw(older)).group == "scheduling.volcano.sh"


def test_from_yaml_like_simulate_reads_it() -> None:
    text = """
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: g, namespace: ns}
spec: {minMember: 2, scheduleTimeoutSeconds: 30}
"""
    group = convert_pod_group(yaml.safe_load(text))
    assert (group.min_member, group.schedule_timeout_seconds) == (2, 30)
    dated = yaml.safe_load(text)
    dated["metadata"]["creationTimestamp"] = datetime.date(2026, 1, 1)  # YAML's unquoted date
    assert decode_pod_group(msgspec.json.encode(dated)).name == "g"  # msgspec encodes dates
    with pytest.raises(PodGroupError, match="object"):
        convert_pod_group({**dated, "spec": {"minMember": object()}})


# ---- malformed ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field", "detail"),
    [
        ({"minMember": "4"}, "spec.minMember", "Expected `int`, got `str`"),
        ({"minMember": 4.5}, "spec.minMember", "Expected `int`, got `float`"),
        ({"minMember": -1}, "spec.minMember", "Expected `int` >= 0"),
        ({"minMember": MAX_MEMBERS + 1}, "spec.minMember", f"<= {MAX_MEMBERS}"),
        ({"scheduleTimeoutSeconds": -5}, "spec.scheduleTimeoutSeconds", ">= 0"),
        ({"scheduleTimeoutSeconds": 2**31}, "spec.scheduleTimeoutSeconds", "<= 2147483647"),
        ({"scheduleTimeoutSeconds": "60s"}, "spec.scheduleTimeoutSeconds", "got `str`"),
    ],
)
def test_malformed_scheduler_plugins_spec_names_object_and_field(
    spec: dict[str, Any], field: str, detail: str
) -> None:
    error = error_of(with_spec(PLUGINS_GROUP, **spec))
    assert (error.group, error.namespace, error.name, error.field) == (
        "scheduling.x-k8s.io",
        "train",
        "llama-70b",
        field,
    )
    assert detail in error.detail
    assert str(error).startswith(f"PodGroup scheduling.x-k8s.io/train/llama-70b: {field}: ")
    assert error.key == "scheduling.x-k8s.io/train/llama-70b"


def test_malformed_volcano_spec() -> None:
    error = error_of(with_spec(VOLCANO_GROUP, minMember="three"))
    assert error.key == "scheduling.volcano.sh/hpc/mpi-job" and error.field == "spec.minMember"
    # Volcano has no scheduleTimeoutSeconds: a field it does not define is skipped, not read.
    assert decode_pod_group(raw(with_spec(VOLCANO_GROUP, scheduleTimeoutSeconds=5))).min_member == 3


def test_spec_of_the_wrong_type() -> None:
    obj = {**PLUGINS_GROUP, "spec": [1, 2]}
    error = error_of(obj)
    assert error.field == "spec" and "Expected `object`, got `array`" in error.detail


@pytest.mark.parametrize(
    ("change", "field", "detail"),
    [
        ({"apiVersion": "v1"}, "apiVersion", "is not a PodGroup of"),
        ({"apiVersion": "scheduling.example.com/v1alpha1"}, "apiVersion", "is not a PodGroup of"),
        ({"apiVersion": ""}, "apiVersion", "is not a PodGroup of"),
        ({"kind": "Pod"}, "kind", "expected PodGroup, got 'Pod'"),
        ({"metadata": {"namespace": "train"}}, "metadata.name", "missing"),
        ({"metadata": {"name": "x" * 254}}, "metadata.name", "longer than 253"),
        (
            {"metadata": {"name": "g", "namespace": "n" * 64}},
            "metadata.namespace",
            "longer than 63",
        ),
    ],
)
def test_unusable_identity(change: dict[str, Any], field: str, detail: str) -> None:
    error = error_of({**PLUGINS_GROUP, **change})
    assert error.field == field and detail in error.detail
    assert len(str(error)) < 600  # long names are cut in the message


def test_not_json_or_wrong_shape() -> None:
    for body in (b"{", b"[]", b'{"metadata": "x"}', b'{"apiVersion": 1}'):
        with pytest.raises(PodGroupError) as caught:
            decode_pod_group(body)
        assert caught.value.field == "object", body


# ---- oversized ----------------------------------------------------------------------------


def test_oversized_spec() -> None:
    resources = {f"example.com/r{i}": "1" for i in range(MAX_SPEC_BYTES // 20)}
    error = error_of(with_spec(PLUGINS_GROUP, minResources=resources))
    assert error.field == "spec" and f"more than the {MAX_SPEC_BYTES} allowed" in error.detail
    assert error.name == "llama-70b"


def test_oversized_object() -> None:
    obj = copy.deepcopy(PLUGINS_GROUP)
    obj["metadata"]["annotations"] = {"big": "x" * MAX_OBJECT_BYTES}
    error = error_of(obj)
    assert error.field == "object" and "bytes, more than" in error.detail


# ---- LIST, watch events, the reflector -----------------------------------------------------


def pod_group_list(*items: dict[str, Any], version: str = "1000") -> bytes:
    return raw(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroupList",
            "metadata": {"resourceVersion": version},
            "items": list(items),
        }
    )


def test_list_keeps_good_groups_and_reports_bad_ones() -> None:
    bad = copy.deepcopy(PLUGINS_GROUP)
    bad["metadata"]["name"] = "broken"
    bad["spec"]["minMember"] = -3
    listed = decode_pod_group_list(pod_group_list(PLUGINS_GROUP, bad, VOLCANO_GROUP))
    assert listed.resource_version == "1000"
    assert [g.key for g in listed.groups] == [
        "scheduling.x-k8s.io/train/llama-70b",
        "scheduling.volcano.sh/hpc/mpi-job",
    ]
    (error,) = listed.errors
    assert error.key == "scheduling.x-k8s.io/train/broken" and error.field == "spec.minMember"
    assert decode_pod_group_list(b'{"items": []}').groups == ()
    with pytest.raises(msgspec.DecodeError):
        decode_pod_group_list(b'{"items": {}}')


def test_watch_event() -> None:
    kind, group = decode_pod_group_event(raw({"type": "MODIFIED", "object": VOLCANO_GROUP}))
    assert kind == "MODIFIED" and isinstance(group, PodGroupInput) and group.min_member == 3
    bad = with_spec(VOLCANO_GROUP, minMember=None)
    kind, error = decode_pod_group_event(raw({"type": "DELETED", "object": bad}))
    assert kind == "DELETED" and isinstance(error, PodGroupError)
    assert error.key == "scheduling.volcano.sh/hpc/mpi-job"


async def test_reflector_delivers_groups_and_errors_without_breaking() -> None:
    """The wiring the service uses: Reflector(PodGroup) + pod_group_or_error. A PodGroup the
    scheduler cannot use arrives as its error; the watch goes on."""
    bad = with_spec(PLUGINS_GROUP, minMember=MAX_MEMBERS * 10)
    bad["metadata"]["name"] = "huge"
    events = [
        {"type": "ADDED", "object": bad},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "1005"}}},
        {"type": "MODIFIED", "object": with_spec(PLUGINS_GROUP, minMember=8)},
    ]
    bad["metadata"]["resourceVersion"] = "1001"
    replaced: list[list[PodGroupInput | PodGroupError]] = []
    applied: list[tuple[str, PodGroupInput | PodGroupError]] = []
    watched_from: list[str] = []
    done = asyncio.Event()

    async def list_call() -> bytes:
        return pod_group_list(PLUGINS_GROUP, VOLCANO_GROUP)

    async def lines() -> AsyncIterator[bytes]:
        for event in events:
            yield raw(event) + b"\n"
        done.set()
        await asyncio.Event().wait()  # the watch stays open

    async def watch_call(version: str, timeout: int) -> AsyncIterator[bytes]:
        watched_from.append(version)
        return lines()

    reflector: Reflector[PodGroup] = Reflector(
        "podgroups.scheduling.x-k8s.io",
        PodGroup,
        list_call,
        watch_call,
        lambda items: replaced.append([pod_group_or_error(i) for i in items]),
        lambda kind, item: applied.append((kind, pod_group_or_error(item))),
        lambda item: item.metadata.resource_version,
    )
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(done.wait(), 5)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert watched_from == ["1000"] and reflector.relists == 1
    ((first, second),) = replaced
    assert isinstance(first, PodGroupInput) and first.min_member == 4
    assert isinstance(second, PodGroupInput) and second.group == "scheduling.volcano.sh"
    (added_kind, added), (modified_kind, modified) = applied
    assert added_kind == "ADDED" and isinstance(added, PodGroupError)
    assert added.field == "spec.minMember" and added.name == "huge"
    assert modified_kind == "MODIFIED" and isinstance(modified, PodGroupInput)
    assert modified.min_member == 8
    assert reflector.resource_version == "812"  # the last object's version


# ---- KubeApi: custom resources and the gang calls, on a recording fake client --------------


class FakeResponse:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        pass


class Recorder:
    """Any client method: records (name, args, kwargs) and answers the next queued response."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.answers: list[FakeResponse] = []

    def __getattr__(self, method: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> FakeResponse:
            self.calls.append((method, args, kwargs))
            return self.answers.pop(0)

        return call


def fake_api() -> tuple[KubeApi, Recorder]:
    recorder = Recorder()
    api = KubeApi.__new__(KubeApi)
    api.core = api.custom = api.extensions = api.policy = recorder
    api.served_versions = {}
    api.request_timeout_s = REQUEST_TIMEOUT_S
    api.list_page = LIST_PAGE
    return api, recorder


async def test_list_and_watch_custom_resources_by_crd_name() -> None:
    api, rec = fake_api()
    rec.answers = [FakeResponse(200, {"items": []}), FakeResponse(200, b"")]
    assert await api.list_kind("podgroups.scheduling.volcano.sh") == b'{"items": []}'
    await api.watch_kind("podgroups.scheduling.x-k8s.io", "77", 60)
    (lst, lst_args, _), (watch, watch_args, watch_kwargs) = rec.calls
    assert lst == watch == "list_cluster_custom_object"
    assert lst_args == ("scheduling.volcano.sh", "v1beta1", "podgroups")
    assert watch_args == ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
    assert watch_kwargs["watch"] is True and watch_kwargs["resource_version"] == "77"
    assert watch_kwargs["allow_watch_bookmarks"] is True and watch_kwargs["timeout_seconds"] == 60
    assert set(CUSTOM_RESOURCES) == {
        POD_GROUPS.name,
        VOLCANO_POD_GROUPS.name,
        "podgroups.scheduling.k8s.io",
    }
    with pytest.raises(KeyError):
        await api.list_kind("podgroups.example.com")


def crd(established: str = "True", versions: tuple[tuple[str, bool], ...] = ()) -> Any:
    return {
        "spec": {"versions": [{"name": n, "served": s} for n, s in versions]},
        "status": {"conditions": [{"type": "Established", "status": established}]},
    }


async def test_crd_established() -> None:
    api, rec = fake_api()
    rec.answers = [
        FakeResponse(200, crd("True", (("v1alpha1", True),))),
        FakeResponse(200, crd("False", (("v1alpha1", True),))),
        FakeResponse(404, {"kind": "Status", "code": 404}),
        FakeResponse(403, {"kind": "Status", "code": 403, "message": "forbidden"}),
    ]
    assert await api.crd_established(POD_GROUPS.name) is True
    assert await api.crd_established(POD_GROUPS.name) is False
    assert await api.crd_established(VOLCANO_POD_GROUPS.name) is False
    with pytest.raises(HttpError, match="403"):
        await api.crd_established(VOLCANO_POD_GROUPS.name)
    assert [c[1] for c in rec.calls] == [(POD_GROUPS.name,)] * 2 + [(VOLCANO_POD_GROUPS.name,)] * 2


def test_crd_established_needs_the_served_version() -> None:
    name = POD_GROUPS.name
    assert crd_is_established(raw(crd("True", (("v1alpha1", True),))), name)
    assert not crd_is_established(raw(crd("True", (("v1alpha1", False),))), name)
    assert not crd_is_established(raw(crd("True", (("v1beta1", True),))), name)
    assert not crd_is_established(b"{}", name)
    assert crd_is_established(raw(crd("True")), "other.example.com")  # any version


async def test_evict_outcomes() -> None:
    api, rec = fake_api()
    pdb = "Cannot evict pod as it would violate the pod's disruption budget."
    uid = "Precondition failed: UID in precondition: a, UID in object meta: b"
    uid_133 = (
        'Operation cannot be fulfilled on Pod "p": the UID in the precondition (a) does not '
        "match the UID in record (b). The object might have been deleted and then recreated"
    )
    rec.answers = [
        FakeResponse(201, {"kind": "Status", "status": "Success"}),
        FakeResponse(429, {"kind": "Status", "code": 429, "message": pdb}),
        FakeResponse(404, {"kind": "Status", "code": 404, "message": 'pods "p" not found'}),
        FakeResponse(409, {"kind": "Status", "code": 409, "message": uid}),
        FakeResponse(409, {"kind": "Status", "code": 409, "message": uid_133}),
        FakeResponse(409, {"kind": "Status", "code": 409, "message": "the object was modified"}),
        FakeResponse(500, {"kind": "Status", "code": 500, "message": "more than one PDB"}),
    ]
    evicted = await api.evict("ns", "p", "a")
    assert (evicted.outcome, evicted.status) == (Eviction.EVICTED, 201)
    blocked = await api.evict("ns", "p", "a")
    assert (blocked.outcome, blocked.message) == (Eviction.BLOCKED, pdb)
    assert (await api.evict("ns", "p", "a")).outcome is Eviction.GONE
    assert (await api.evict("ns", "p", "a")).outcome is Eviction.GONE
    stale = await api.evict("ns", "p", "a")
    assert (stale.outcome, stale.status, stale.message) == (Eviction.GONE, 409, uid_133)
    with pytest.raises(HttpError, match="409"):
        await api.evict("ns", "p", "a")
    with pytest.raises(HttpError, match="500"):
        await api.evict("ns", "p", "a")
    method, args, _ = rec.calls[0]
    assert method == "create_namespaced_pod_eviction"
    assert args == ("p", "ns", eviction_body("ns", "p", "a"))
    assert args[2]["deleteOptions"] == {"preconditions": {"uid": "a"}}
    assert args[2]["apiVersion"] == "policy/v1" and args[2]["kind"] == "Eviction"


def test_eviction_result_reads_any_body() -> None:
    blocked = eviction_result(429, b"not json")
    assert blocked is not None and blocked.message == "not json"
    assert eviction_result(403, b"{}") is None


async def test_set_nominated_node() -> None:
    api, rec = fake_api()
    rec.answers = [FakeResponse(200, {}), FakeResponse(200, {}), FakeResponse(404, {})]
    assert await api.set_nominated_node("ns", "p", "node-a") is Write.DONE
    assert await api.set_nominated_node("ns", "p", None) is Write.DONE
    assert await api.set_nominated_node("ns", "gone", "") is Write.GONE
    bodies = [c[1][2] for c in rec.calls]
    assert bodies[0] == {"status": {"nominatedNodeName": "node-a"}}
    assert bodies[1] == bodies[2] == {"status": {"nominatedNodeName": None}}  # null removes it
    assert nominated_node_patch("") == nominated_node_patch(None)
    assert all(c[0] == "patch_namespaced_pod_status" for c in rec.calls)
    assert all(c[2]["_content_type"] == "application/merge-patch+json" for c in rec.calls)
    rec.answers = [FakeResponse(403, {"message": "forbidden"})]
    with pytest.raises(HttpError, match="403"):
        await api.set_nominated_node("ns", "p", "node-a")


async def test_patch_pod_group_status() -> None:
    api, rec = fake_api()
    rec.answers = [FakeResponse(200, {}), FakeResponse(404, {})]
    done = await api.patch_pod_group_status("ns", "g", PodGroupPhase.SCHEDULED, 4, 1)
    assert done is Write.DONE
    gone = await api.patch_pod_group_status("ns", "g", PodGroupPhase.RUNNING, 4, 4)
    assert gone is Write.GONE
    method, args, kwargs = rec.calls[0]
    assert method == "patch_namespaced_custom_object_status"
    assert args == (
        "scheduling.x-k8s.io",
        "v1alpha1",
        "ns",
        "podgroups",
        "g",
        {"status": {"phase": "Scheduled", "scheduled": 4, "running": 1}},
    )
    assert kwargs["_content_type"] == "application/merge-patch+json"


def test_pod_group_status_patch_bounds() -> None:
    assert pod_group_status_patch(PodGroupPhase("Running"), 0, 0)["status"]["phase"] == "Running"
    with pytest.raises(ValueError):
        pod_group_status_patch(PodGroupPhase.RUNNING, -1, 0)
    with pytest.raises(ValueError):
        pod_group_status_patch(PodGroupPhase.RUNNING, 0, 2**31)
    with pytest.raises(ValueError):
        PodGroupPhase("Inqueue")  # Volcano's phase: not one scheduler-plugins knows


# ---- deploy/: the optional CRD and the scheduler's rules -----------------------------------


def test_optional_crd_matches_what_the_decoder_reads() -> None:
    (doc,) = [d for d in yaml.safe_load_all(CRD_FILE.read_text()) if d]
    text = CRD_FILE.read_text()
    assert text.startswith("#") and "only if scheduler-plugins is not installed" in text
    spec = doc["spec"]
    assert doc["metadata"]["name"] == POD_GROUPS.name
    assert spec["group"] == POD_GROUPS.group and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "PodGroup" and spec["names"]["plural"] == POD_GROUPS.plural
    (version,) = spec["versions"]
    assert version["name"] == POD_GROUPS.version and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["type"] == "object"
    fields = schema["properties"]["spec"]["properties"]
    assert set(fields) == {"minMember", "minResources", "scheduleTimeoutSeconds"}
    for name in ("minMember", "scheduleTimeoutSeconds"):
        assert fields[name]["type"] == "integer" and fields[name]["format"] == "int32"
        assert fields[name]["minimum"] == 0
    status = schema["properties"]["status"]["properties"]
    assert set(status) == {
        "phase",
        "occupiedBy",
        "scheduled",
        "running",
        "succeeded",
        "failed",
        "scheduleStartTime",
    }
    # Structural: every object and value has a type (int-or-string quantities excepted).
    quantity = fields["minResources"]["additionalProperties"]
    assert quantity["x-kubernetes-int-or-string"] is True
    # Optional: not part of deploy/'s kustomizations.
    for kustomization in REPO.glob("deploy/**/kustomization.yaml"):
        assert "podgroup-crd" not in kustomization.read_text(), kustomization


def test_scheduler_role_allows_the_gang_calls_and_no_more() -> None:
    (role,) = [d for d in yaml.safe_load_all(ROLE_FILE.read_text()) if d["kind"] == "ClusterRole"]
    rules = {
        (group, resource): rule
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rules[("", "pods/eviction")]["verbs"] == ["create"]
    assert rules[("", "pods/status")]["verbs"] == ["patch"]
    for group in ("scheduling.x-k8s.io", "scheduling.volcano.sh"):
        assert rules[(group, "podgroups")]["verbs"] == ["get", "list", "watch"]
    assert rules[("scheduling.x-k8s.io", "podgroups/status")]["verbs"] == ["patch"]
    assert ("scheduling.volcano.sh", "podgroups/status") not in rules
    crds = rules[("apiextensions.k8s.io", "customresourcedefinitions")]
    with_crds = {name for name, r in CUSTOM_RESOURCES.items() if not r.builtin}
    crd_names = with_crds | set(TOPOLOGY_RESOURCES)
    assert crds["verbs"] == ["get"] and set(crds["resourceNames"]) == crd_names
    for group in ("kueue.x-k8s.io", "kai.scheduler"):
        assert rules[(group, "topologies")]["verbs"] == ["get", "list", "watch"]
    # The budgets are only read (preemption ranks by them), and the scheduler never deletes pods.
    assert rules[("policy", "poddisruptionbudgets")]["verbs"] == ["list", "watch"]
    assert rules[("scheduling.k8s.io", "podgroups")]["verbs"] == ["get", "list", "watch"]
    assert rules[("scheduling.k8s.io", "podgroups/status")]["verbs"] == ["patch"]
    assert "delete" not in rules[("", "pods")]["verbs"]


def test_pod_group_or_error_never_raises() -> None:
    obj = msgspec.json.decode(raw({"apiVersion": "v1", "kind": "Pod"}), type=PodGroup)
    result = pod_group_or_error(obj)
    assert isinstance(result, PodGroupError) and result.key == "?/default/?"


async def test_topology_crds_are_read_in_the_version_they_serve() -> None:
    api, rec = fake_api()
    name = "topologies.kueue.x-k8s.io"
    rec.answers = [
        FakeResponse(200, crd("True", (("v1beta1", True), ("v1beta2", False)))),
        FakeResponse(200, {"items": []}),
        FakeResponse(200, crd("True", (("v1alpha9", True),))),
    ]
    assert await api.crd_established(name)
    await api.list_kind(name)
    assert rec.calls[1][1] == ("kueue.x-k8s.io", "v1beta1", "topologies")
    assert not await api.crd_established("topologies.kai.scheduler")


UPSTREAM_GROUP: dict[str, Any] = {
    "apiVersion": "scheduling.k8s.io/v1beta1",
    "kind": "PodGroup",
    "metadata": {"name": "trainer", "namespace": "ml", "uid": "up-uid", "resourceVersion": "3"},
    "spec": {
        "workloadRef": {"workloadName": "trainer", "templateName": "workers"},
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
        "disruptionMode": "Single",
    },
}


def test_an_upstream_pod_group_gives_min_count_and_topology_keys() -> None:
    group = decode_pod_group(raw(UPSTREAM_GROUP))
    assert group.key == "scheduling.k8s.io/ml/trainer"
    assert group.min_member == 4
    assert group.topology_keys == ("topology.kubernetes.io/zone",)
    basic = with_spec(UPSTREAM_GROUP, schedulingPolicy={"basic": {}}, schedulingConstraints=None)
    group = decode_pod_group(raw(basic))
    assert group.min_member == 1 and group.topology_keys == ()


def test_an_upstream_min_count_of_the_wrong_type_names_the_field() -> None:
    bad = with_spec(UPSTREAM_GROUP, schedulingPolicy={"gang": {"minCount": "4"}})
    error = error_of(bad)
    assert error.field == "spec.schedulingPolicy.gang.minCount"


async def test_the_upstream_pod_group_is_watched_while_the_apiserver_serves_it() -> None:
    api, rec = fake_api()
    served = {"resources": [{"name": "podgroups"}, {"name": "workloads"}]}
    rec.answers = [FakeResponse(200, served), FakeResponse(404, b""), FakeResponse(200, {})]
    assert await api.crd_established("podgroups.scheduling.k8s.io")
    assert not await api.crd_established("podgroups.scheduling.k8s.io")
    assert not await api.crd_established("podgroups.scheduling.k8s.io")
    assert [(name, args) for name, args, _ in rec.calls] == [
        ("get_api_resources", ("scheduling.k8s.io", "v1beta1"))
    ] * 3


def test_a_built_in_list_item_gets_the_resource_api_version() -> None:
    from scheduler.kube.podgroups import UPSTREAM_POD_GROUPS, listed_as

    item = copy.deepcopy(UPSTREAM_GROUP)
    del item["apiVersion"], item["kind"]
    bare = msgspec.json.decode(raw(item), type=PodGroup)
    assert isinstance(pod_group_or_error(bare), PodGroupError)
    group = pod_group_or_error(listed_as(bare, UPSTREAM_POD_GROUPS))
    assert not isinstance(group, PodGroupError) and group.min_member == 4
