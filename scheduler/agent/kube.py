"""The apiserver calls the node agent makes, and nothing else (its RBAC is exactly these):

- ``GET /api/v1/nodes/{node}`` (nodes get): the node's labels (which static model it is) and
  its current annotation, compared with what the probe found;
- ``PATCH /api/v1/nodes/{node}`` (nodes patch), a JSON merge patch of that one annotation, only
  when it differs. A merge patch touches no other annotation or label, and needs no
  resourceVersion: the agent is the annotation's only writer;
- ``POST /api/v1/namespaces/default/events`` (events create): a Warning about the node when its
  probe fails. Node events live in the ``default`` namespace, as the kubelet's do, and
  ``kubectl describe node`` shows them.

With ``--device-plugin``, two more, for the pod being admitted on this node:

- ``GET /api/v1/namespaces/{ns}/pods/{pod}`` (pods get): its ``topo-scheduler.io/assignment``;
- ``PATCH`` of the same pod (pods patch), a JSON merge patch of ``topo-scheduler.io/allocated``
  alone: the GPUs its containers really got, which the scheduler takes as the truth.

Requests go through KubeApi's raw path (no model objects, status checked here), as the
scheduler's do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

from scheduler.core.model.names import ALLOCATED_ANNOTATION, GPUS_ANNOTATION
from scheduler.kube.api import COMPONENT, KubeApi, raise_for_status
from scheduler.kube.codec import Node

FIELD_MANAGER: Final = "topo-scheduler-agent"
EVENT_NAMESPACE: Final = "default"


class NodeView(msgspec.Struct, frozen=True):
    name: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]


class AgentApi(KubeApi):
    async def get_node(self, name: str) -> NodeView | None:
        status, body = await self._call(self.core.read_node, name)
        if status == 404:
            return None
        raise_for_status(status, body)
        meta = msgspec.json.decode(body, type=Node).metadata
        return NodeView(meta.name, meta.uid, meta.labels or {}, meta.annotations or {})

    async def set_gpus_annotation(self, name: str, value: str) -> None:
        patch = {"metadata": {"annotations": {GPUS_ANNOTATION: value}}}
        status, body = await self._call(
            self.core.patch_node,
            name,
            patch,
            field_manager=FIELD_MANAGER,
            _content_type="application/merge-patch+json",
        )
        raise_for_status(status, body)

    async def pod_annotations(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The device plugin's reader: the pod's annotations, or None when it is gone or has
        finished (Succeeded or Failed): the kubelet may still list a finished pod in PodResources,
        without devices (kubernetes issue 119423), but never admits it again, so it must not
        look like a pod waiting for its GPUs."""
        pod = await self.get_pod(namespace, name)
        return None if pod is None or pod.finished else pod.annotations

    async def publish_allocated(self, namespace: str, name: str, value: str) -> None:
        """The device plugin's report of what the pod's containers got."""
        await self.annotate_pod(namespace, name, {ALLOCATED_ANNOTATION: value})

    async def node_event(
        self, node: NodeView, kind: str, reason: str, message: str, timestamp: str
    ) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{node.name}.", "namespace": EVENT_NAMESPACE},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node.name,
                "uid": node.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": f"{COMPONENT}-agent", "host": node.name},
            "reportingComponent": f"{COMPONENT}-agent",
            "reportingInstance": node.name,
            "firstTimestamp": timestamp,
            "lastTimestamp": timestamp,
            "count": 1,
        }
        status, raw = await self._call(self.core.create_namespaced_event, EVENT_NAMESPACE, body)
        raise_for_status(status, raw)
