"""The few apiserver calls the scheduler makes, on raw responses.

kubernetes-asyncio handles configuration and authentication (kubeconfig or in-cluster); every
call here passes ``_preload_content=False`` and reads the raw body, because
- the Binding subresource answers 201 with a Status, which the generated client fails to decode
  as a V1Binding although the bind succeeded (kubernetes-client/python #825);
- pods are decoded with msgspec into small Structs, never into model objects;
- on that path the client checks no status, so every call checks it here.

Every write is one request: a bind carries the device annotations on the Binding itself, and the
apiserver copies them onto the pod in the same write.

The gang calls (PodGroups, evictions, nominated nodes) build their bodies and read their answers
with ``podgroups``; custom resources are listed and watched by their CRD's name
(``podgroups.CUSTOM_RESOURCES``, and the Topology CRDs of ``topologies.TOPOLOGY_RESOURCES`` in
the version their CRD serves), like the built-in kinds.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote

import aiohttp
import msgspec
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from scheduler.core.model.dra import RequestMapping
from scheduler.core.model.objects import PodInput

from .claims import Answer, ClaimObject, ClaimWrite, extended_status_patch
from .codec import decode_pod, reserved_for_patch, unreserved_for_patch
from .podgroups import (
    CUSTOM_RESOURCES,
    POD_GROUPS,
    UPSTREAM_POD_GROUPS,
    EvictResult,
    PodGroupPhase,
    Write,
    crd_is_established,
    eviction_body,
    eviction_result,
    initially_scheduled_patch,
    nominated_node_patch,
    pod_group_status_patch,
    serves,
)
from .topologies import TOPOLOGY_RESOURCES, served_version
from .tuning import LIST_PAGE, REQUEST_TIMEOUT_S
from .watch import Gone, HttpError

COMPONENT: Final = "topo-scheduler"


class _Target(msgspec.Struct, rename="camel"):
    name: str
    api_version: str = "v1"
    kind: str = "Node"


class _BindingMeta(msgspec.Struct):
    name: str
    uid: str
    annotations: dict[str, str]


class _Binding(msgspec.Struct, rename="camel"):
    metadata: _BindingMeta
    target: _Target
    api_version: str = "v1"
    kind: str = "Binding"


_binding_encoder = msgspec.json.Encoder()


class BindResult(msgspec.Struct, frozen=True):
    status: int  # 201, or the apiserver's error status
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status in (200, 201)


async def _body(response: Any) -> tuple[int, bytes]:
    try:
        return int(response.status), await response.read()
    finally:
        response.release()


def raise_for_status(status: int, body: bytes) -> None:
    if status == 410:
        raise Gone(body.decode(errors="replace"))
    if status >= 300:
        raise HttpError(status, body.decode(errors="replace"))


class _ObjectMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""


class ConfigMapData(msgspec.Struct, frozen=True):
    """The fields of a ConfigMap the epoch witness reads (service/witness.py)."""

    metadata: _ObjectMeta
    data: dict[str, str] = {}


_config_map_decoder = msgspec.json.Decoder(ConfigMapData)


class KubeApi:
    def __init__(
        self,
        api_client: ApiClient,
        list_page: int = LIST_PAGE,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.api_client = api_client
        self.list_page = list_page
        self.request_timeout_s = request_timeout_s
        self.core = k8s.CoreV1Api(api_client)
        self.extensions = k8s.ApiextensionsV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        # The version each Topology CRD serves, as its last read said (crd_established).
        self.served_versions: dict[str, str] = {}
        self.policy = k8s.PolicyV1Api(api_client)

    async def _call(self, method: Any, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        try:
            response = await method(
                *args, _preload_content=False, _request_timeout=self.request_timeout_s, **kwargs
            )
        except ApiException as exc:  # raised by some client versions before the body is read
            return int(exc.status or 0), (exc.body or b"") if isinstance(exc.body, bytes) else str(
                exc.body or ""
            ).encode()
        return await _body(response)

    # ---- reads -----------------------------------------------------------------------------

    async def list_pods(self, field_selector: str = "") -> bytes:
        status, body = await self._call(
            self.core.list_pod_for_all_namespaces, field_selector=field_selector
        )
        raise_for_status(status, body)
        return body

    async def list_pods_page(self, field_selector: str, token: str) -> bytes:
        """One page of ``list_page`` pods (``token``: the previous page's continue, "" first)."""
        kwargs: dict[str, Any] = {"field_selector": field_selector, "limit": self.list_page}
        if token:
            kwargs["_continue"] = token
        status, body = await self._call(self.core.list_pod_for_all_namespaces, **kwargs)
        raise_for_status(status, body)
        return body

    async def list_nodes(self) -> bytes:
        status, body = await self._call(self.core.list_node)
        raise_for_status(status, body)
        return body

    async def list_kind(self, kind: str) -> bytes:
        """LIST of namespaces, persistentvolumeclaims, persistentvolumes, poddisruptionbudgets,
        DRA's resourceclaims, deviceclasses, resourceslices and devicetaintrules, or a custom
        resource of ``podgroups.CUSTOM_RESOURCES`` by its CRD's name
        (``podgroups.scheduling.x-k8s.io``), across all namespaces."""
        status, body = await self._call(self._lister(kind))
        raise_for_status(status, body)
        return body

    async def watch_kind(
        self, kind: str, resource_version: str, timeout_s: int
    ) -> AsyncIterator[bytes]:
        return await self._watch(self._lister(kind), resource_version, timeout_s)

    async def _watch(
        self, lister: Any, resource_version: str, timeout_s: int, **selectors: str
    ) -> AsyncIterator[bytes]:
        """A WATCH from ``resource_version`` with bookmarks, read as raw lines."""
        response = await lister(
            watch=True,
            resource_version=resource_version,
            timeout_seconds=timeout_s,
            allow_watch_bookmarks=True,
            _preload_content=False,
            _request_timeout=timeout_s + 30,
            **selectors,
        )
        return _lines(response)

    def _lister(self, kind: str) -> Any:
        custom = CUSTOM_RESOURCES.get(kind) or TOPOLOGY_RESOURCES.get(kind)
        if custom is not None:
            version = self.served_versions.get(kind, custom.version)
            return functools.partial(
                self.custom.list_cluster_custom_object, custom.group, version, custom.plural
            )
        listers = {
            "namespaces": self.core.list_namespace,
            "persistentvolumeclaims": self.core.list_persistent_volume_claim_for_all_namespaces,
            "persistentvolumes": self.core.list_persistent_volume,
            "poddisruptionbudgets": self.policy.list_pod_disruption_budget_for_all_namespaces,
            # DRA (resource.k8s.io/v1), through the generic path: the codec reads raw JSON.
            "resourceclaims": functools.partial(
                self.custom.list_cluster_custom_object, "resource.k8s.io", "v1", "resourceclaims"
            ),
            "deviceclasses": functools.partial(
                self.custom.list_cluster_custom_object, "resource.k8s.io", "v1", "deviceclasses"
            ),
            "resourceslices": functools.partial(
                self.custom.list_cluster_custom_object, "resource.k8s.io", "v1", "resourceslices"
            ),
            "devicetaintrules": functools.partial(
                self.custom.list_cluster_custom_object, "resource.k8s.io", "v1", "devicetaintrules"
            ),
        }
        return listers[kind]

    async def read_pod(self, namespace: str, name: str) -> bytes | None:
        status, body = await self._call(self.core.read_namespaced_pod, name, namespace)
        if status == 404:
            return None
        raise_for_status(status, body)
        return body

    async def get_pod(self, namespace: str, name: str) -> PodInput | None:
        """The pod as the core sees it, or None when it is gone."""
        raw = await self.read_pod(namespace, name)
        return None if raw is None else decode_pod(raw)

    async def watch_pods(
        self, resource_version: str, timeout_s: int, field_selector: str = ""
    ) -> AsyncIterator[bytes]:
        return await self._watch(
            self.core.list_pod_for_all_namespaces,
            resource_version,
            timeout_s,
            field_selector=field_selector,
        )

    async def watch_nodes(self, resource_version: str, timeout_s: int) -> AsyncIterator[bytes]:
        return await self._watch(self.core.list_node, resource_version, timeout_s)

    async def crd_established(self, name: str) -> bool:
        """Whether the CRD ``name`` exists and is Established (and, for ``CUSTOM_RESOURCES``,
        serves the version the scheduler uses); a missing one is False, not an error. A built-in
        resource (the upstream PodGroup) has no CRD: whether the apiserver serves it."""
        custom = CUSTOM_RESOURCES.get(name)
        if custom is not None and custom.builtin:
            status, body = await self._call(
                self.custom.get_api_resources, custom.group, custom.version
            )
            if status == 404:
                return False
            raise_for_status(status, body)
            return serves(body, custom.plural)
        status, body = await self._call(self.extensions.read_custom_resource_definition, name)
        if status == 404:
            return False
        raise_for_status(status, body)
        if name in TOPOLOGY_RESOURCES:
            version = served_version(body, name)
            if version is None:
                return False
            self.served_versions[name] = version
        return crd_is_established(body, name)

    # ---- writes ----------------------------------------------------------------------------

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindResult:
        """POST the Binding subresource. The one call made per pod scheduled, so it skips the
        generated client: the body is encoded once by msgspec and sent on the client's own
        session with its own credentials (refreshed tokens included)."""
        body = _binding_encoder.encode(
            _Binding(
                metadata=_BindingMeta(name=name, uid=uid, annotations=annotations),
                target=_Target(name=node),
            )
        )
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/binding"
        status, raw = await self._post(path, body)
        return BindResult(status, "" if status < 300 else raw.decode(errors="replace")[:500])

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        config = self.api_client.configuration
        headers = {
            **self.api_client.default_headers,
            "Accept": "application/json",
            "Content-Type": "application/json",
        }
        await self.api_client.update_params_for_auth(headers, [], ["BearerToken"])
        session = self.api_client.rest_client.pool_manager
        async with session.post(
            f"{config.host}{path}",
            data=body,
            headers=headers,
            proxy=config.proxy or None,
            timeout=aiohttp.ClientTimeout(total=self.request_timeout_s),
        ) as response:
            return response.status, await response.read()

    async def read_config_map(self, namespace: str, name: str) -> ConfigMapData | None:
        """The ConfigMap's data and resourceVersion; None when it does not exist."""
        status, raw = await self._call(self.core.read_namespaced_config_map, name, namespace)
        if status == 404:
            return None
        raise_for_status(status, raw)
        return _config_map_decoder.decode(raw)

    async def write_config_map(
        self, namespace: str, name: str, data: dict[str, str], resource_version: str | None
    ) -> bool:
        """Create the ConfigMap with ``data`` (``resource_version`` None), or merge ``data``
        into it if it is still at ``resource_version``. False when another writer came first
        (409: it exists, or changed since) or it was deleted since it was read (404 on the
        patch): read it again. A 404 on the create is its namespace missing: an error."""
        if resource_version is None:
            body: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
                "data": data,
            }
            status, raw = await self._call(self.core.create_namespaced_config_map, namespace, body)
        else:
            patch = {"metadata": {"resourceVersion": resource_version}, "data": data}
            status, raw = await self._call(
                self.core.patch_namespaced_config_map,
                name,
                namespace,
                patch,
                _content_type="application/merge-patch+json",
            )
        if status == 409 or (status == 404 and resource_version is not None):
            return False
        raise_for_status(status, raw)
        return True

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """Merge ``annotations`` into the pod's (a gone pod is not an error: nothing to say)."""
        status, raw = await self._call(
            self.core.patch_namespaced_pod,
            name,
            namespace,
            {"metadata": {"annotations": annotations}},
            _content_type="application/merge-patch+json",
        )
        if status != 404:
            raise_for_status(status, raw)

    async def set_unschedulable(self, namespace: str, name: str, uid: str, message: str) -> Write:
        """Condition PodScheduled=False, reason Unschedulable, as kube-scheduler sets it, on the
        pod of this UID only: the UID in the patch is a precondition (it is immutable, so a pod
        recreated under the name refuses the patch; a refusal is logged by the caller). GONE:
        no pod of the name, nothing written."""
        patch = {
            "metadata": {"uid": uid},
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                    }
                ]
            },
        }
        status, raw = await self._call(
            self.core.patch_namespaced_pod_status,
            name,
            namespace,
            patch,
            _content_type="application/strategic-merge-patch+json",
        )
        return _written(status, raw)

    async def set_nominated_node(self, namespace: str, name: str, node: str | None) -> Write:
        """Set the pod's ``status.nominatedNodeName`` (a preemptor waiting for its victims), or
        clear it with None or "", as kube-scheduler does (a merge patch of the status)."""
        status, raw = await self._call(
            self.core.patch_namespaced_pod_status,
            name,
            namespace,
            nominated_node_patch(node),
            _content_type="application/merge-patch+json",
        )
        return _written(status, raw)

    async def mark_initially_scheduled(self, namespace: str, name: str, message: str) -> Write:
        """Set condition PodGroupInitiallyScheduled True on an upstream PodGroup
        (scheduling.k8s.io/v1beta1, its status subresource), as kube-scheduler does once a
        group's minimum is scheduled."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status, raw = await self._call(
            self.custom.patch_namespaced_custom_object_status,
            UPSTREAM_POD_GROUPS.group,
            UPSTREAM_POD_GROUPS.version,
            namespace,
            UPSTREAM_POD_GROUPS.plural,
            name,
            initially_scheduled_patch(message, now),
            _content_type="application/strategic-merge-patch+json",
        )
        return _written(status, raw)

    async def reserve_claims(
        self, namespace: str, claims: tuple[str, ...], pod: str, uid: str
    ) -> Write:
        """Add the pod to each ResourceClaim's ``status.reservedFor`` (a strategic merge by
        ``uid``: an entry already there is kept once), as kube-scheduler's DRA PreBind does.
        GONE when a claim does not exist."""
        for claim in claims:
            status, raw = await self._call(
                self.custom.patch_namespaced_custom_object_status,
                "resource.k8s.io",
                "v1",
                namespace,
                "resourceclaims",
                claim,
                reserved_for_patch(pod, uid),
                _content_type="application/strategic-merge-patch+json",
            )
            if _written(status, raw) is Write.GONE:
                return Write.GONE
        return Write.DONE

    async def unreserve_claims(
        self, namespace: str, claims: tuple[tuple[str, str], ...], uid: str
    ) -> None:
        """Remove the pod ``uid`` from each ResourceClaim's ``status.reservedFor`` (claims are
        (name, claim UID); the UID, when known, is the patch's precondition), as kube-scheduler's
        DRA Unreserve does when a pod's Binding is refused. A claim gone or recreated meanwhile
        (404, 409) has nothing of this pod to remove."""
        for claim, claim_uid in claims:
            status, raw = await self._call(
                self.custom.patch_namespaced_custom_object_status,
                "resource.k8s.io",
                "v1",
                namespace,
                "resourceclaims",
                claim,
                unreserved_for_patch(claim_uid, uid),
                _content_type="application/strategic-merge-patch+json",
            )
            if status not in (404, 409):
                raise_for_status(status, raw)

    # ---- DRA: the binder's claim writes (claims.py) -------------------------------------------

    _CLAIMS = ("resource.k8s.io", "v1")

    async def read_claim(self, namespace: str, name: str) -> ClaimObject | None:
        """The ResourceClaim as the apiserver has it now (raw JSON); None when it does not
        exist."""
        status, raw = await self._call(
            self.custom.get_namespaced_custom_object,
            *self._CLAIMS,
            namespace,
            "resourceclaims",
            name,
        )
        if status == 404:
            return None
        raise_for_status(status, raw)
        return _claim(raw)

    async def replace_claim(self, obj: ClaimObject, status: bool) -> ClaimWrite:
        """PUT the claim (``status``: its status subresource) as read and changed: its
        resourceVersion is the precondition (409: CONFLICT, nothing written)."""
        method = (
            self.custom.replace_namespaced_custom_object_status
            if status
            else self.custom.replace_namespaced_custom_object
        )
        metadata = obj["metadata"]
        code, raw = await self._call(
            method, *self._CLAIMS, metadata["namespace"], "resourceclaims", metadata["name"], obj
        )
        return _claim_write(code, raw)

    async def create_claim(self, obj: ClaimObject) -> ClaimWrite:
        """POST a new claim (409: one of that name exists: CONFLICT)."""
        code, raw = await self._call(
            self.custom.create_namespaced_custom_object,
            *self._CLAIMS,
            obj["metadata"]["namespace"],
            "resourceclaims",
            obj,
        )
        return _claim_write(code, raw)

    async def delete_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> Answer:
        """DELETE the claim if it is still the one read (uid and resourceVersion preconditions:
        409 CONFLICT otherwise)."""
        body = {"preconditions": {"uid": uid, "resourceVersion": resource_version}}
        code, raw = await self._call(
            self.custom.delete_namespaced_custom_object,
            *self._CLAIMS,
            namespace,
            "resourceclaims",
            name,
            body=body,
        )
        return _claim_write(code, raw).answer

    async def record_extended_claim(
        self, namespace: str, name: str, uid: str, claim: str, mappings: tuple[RequestMapping, ...]
    ) -> Write:
        """Record the pod's special claim in its ``status.extendedResourceClaimStatus`` (a
        merge patch of the pod of this UID: the UID is the precondition)."""
        patch = {"metadata": {"uid": uid}, **extended_status_patch(claim, mappings)}
        status, raw = await self._call(
            self.core.patch_namespaced_pod_status,
            name,
            namespace,
            patch,
            _content_type="application/merge-patch+json",
        )
        if status == 409:
            return Write.GONE  # the pod of that name is another one now
        return _written(status, raw)

    async def evict(
        self, namespace: str, name: str, uid: str, dry_run: bool = False
    ) -> EvictResult:
        """Evict the pod with this UID through the Eviction API (PodDisruptionBudgets decide):
        EVICTED, BLOCKED (429, the budget's message) or GONE (404, or another pod's UID);
        any other answer raises HttpError. The apiserver checks the budget before the UID, so
        while a budget allows nothing a stale UID is BLOCKED too (and GONE once it allows).
        ``dry_run``: the same answer, with nothing evicted and no budget spent."""
        status, raw = await self._call(
            self.core.create_namespaced_pod_eviction,
            name,
            namespace,
            eviction_body(namespace, name, uid, dry_run),
        )
        result = eviction_result(status, raw)
        if result is None:
            raise HttpError(status, raw.decode(errors="replace"))
        return result

    async def patch_pod_group_status(
        self, namespace: str, name: str, phase: PodGroupPhase, scheduled: int, running: int
    ) -> Write:
        """Merge ``phase``, ``scheduled`` and ``running`` into a scheduler-plugins PodGroup's
        status (its status subresource; Volcano's PodGroups are its controller's)."""
        status, raw = await self._call(
            self.custom.patch_namespaced_custom_object_status,
            POD_GROUPS.group,
            POD_GROUPS.version,
            namespace,
            POD_GROUPS.plural,
            name,
            pod_group_status_patch(phase, scheduled, running),
            _content_type="application/merge-patch+json",
        )
        return _written(status, raw)

    async def event(
        self,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        kind: str,
        timestamp: str,
    ) -> None:
        """A core/v1 Event about a pod (what `kubectl describe pod` shows)."""
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": name,
                "namespace": namespace,
                "uid": uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": timestamp,
            "lastTimestamp": timestamp,
            "count": 1,
        }
        status, raw = await self._call(self.core.create_namespaced_event, namespace, body)
        if status != 404:
            raise_for_status(status, raw)


_claim_decoder = msgspec.json.Decoder(dict[str, Any])


def _claim(raw: bytes) -> ClaimObject:
    return _claim_decoder.decode(raw)


def _claim_write(status: int, raw: bytes) -> ClaimWrite:
    if status == 404:
        return ClaimWrite(Answer.GONE)
    if status == 409:
        return ClaimWrite(Answer.CONFLICT)
    raise_for_status(status, raw)
    return ClaimWrite(Answer.DONE, _claim(raw) if raw else None)


def _written(status: int, body: bytes) -> Write:
    if status == 404:
        return Write.GONE
    raise_for_status(status, body)
    return Write.DONE


async def _lines(response: Any) -> AsyncIterator[bytes]:
    try:
        if response.status >= 300:
            body = await response.read()
            raise_for_status(int(response.status), body)
        async for line in response.content:
            yield line
    finally:
        response.release()
