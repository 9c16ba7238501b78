"""Other schedulers' pods churning beside ours (issue 20, drift 1), on the local control plane.

Pods of ``default-scheduler`` are created already bound (``spec.nodeName``, as kube-scheduler or
the DaemonSet controller would have bound them; no other scheduler runs here), asking for cpu and
memory and no GPU:

- Job pods: each owned by a Job (an ownerReference to a real, suspended Job: the plane's garbage
  collector deletes a pod whose owner does not exist at once; no Job controller runs), which
  KWOK completes at once (phase Succeeded: they leave the bound pods' watch as a finished Job's
  pods do); then deleted, as a Job's TTL would;
- a DaemonSet-like rollout: one pod per node with a hostPort, then each replaced by its next
  version (deleted, and created again under a new name with the same port).

Every pod's creation and deletion is retried through an apiserver outage (``through_outage``,
which test_chaos.py's stream of our pods uses too). None of these pods
carries the scenario's ``test`` label: the scenario's own pod counts stay its own.
"""

from __future__ import annotations

import http.client
import time
import urllib.error
from collections.abc import Callable
from typing import Any

from scheduler.testing.controlplane import ControlPlane

PORT = 9100


class OtherSchedulers:
    def __init__(self, plane: ControlPlane, prefix: str, nodes: list[str]) -> None:
        self.plane = plane
        self.prefix = prefix
        self.nodes = nodes
        self.created = 0
        self.deleted = 0
        self.retries = 0

    def jobs(self, count: int) -> list[str]:
        """``count`` Job pods, round-robin on the nodes; KWOK completes them."""
        names = []
        owner = self._job()
        for i in range(count):
            name = f"{self.prefix}-job-{i}"
            self._create(name, self.nodes[i % len(self.nodes)], owner=owner)
            names.append(name)
        return names

    def _job(self) -> dict[str, Any]:
        """Create the Job of the Job pods (suspended, and no Job controller runs: it only owns
        them) and return the ownerReference to it."""
        name = f"{self.prefix}-job"
        path = "/apis/batch/v1/namespaces/default/jobs"
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "busybox"}],
                    }
                },
            },
        }
        self.retries += through_outage(lambda: self.plane.request("POST", path, job), 409)
        found: dict[str, Any] = {}
        # No status code means done: read it until the apiserver answers.
        self.retries += through_outage(
            lambda: found.update(self.plane.request("GET", f"{path}/{name}")), 0
        )
        uid = found["metadata"]["uid"]
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": name,
            "uid": uid,
            "controller": True,
        }

    def rollout(self, versions: int) -> None:
        """A DaemonSet's pods on every node, rolled out ``versions`` times (the last stays)."""
        for version in range(versions):
            for node in self.nodes:
                if version:
                    self.delete(f"{self.prefix}-ds-{node}-v{version - 1}")
                self._create(f"{self.prefix}-ds-{node}-v{version}", node, port=PORT)

    def delete(self, name: str) -> None:
        path = f"/api/v1/namespaces/default/pods/{name}"
        self.retries += through_outage(lambda: self.plane.delete(path), 404)
        self.deleted += 1

    def _create(
        self, name: str, node: str, owner: dict[str, Any] | None = None, port: int = 0
    ) -> None:
        container: dict[str, Any] = {
            "name": "main",
            "image": "busybox",
            "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
        }
        if port:
            container["ports"] = [{"containerPort": port, "hostPort": port}]
        metadata: dict[str, Any] = {"name": name, "namespace": "default"}
        if owner is not None:
            metadata["ownerReferences"] = [owner]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {
                "schedulerName": "default-scheduler",
                "nodeName": node,
                "containers": [container],
            },
        }
        self.retries += through_outage(lambda: self.plane.apply(pod), 409)
        self.created += 1


def through_outage(call: Callable[[], Any], done: int) -> int:
    """``call`` until it answers, for 60 s at most; ``done`` (409 for a create, 404 for a
    delete) means an earlier try landed unseen. Returns how many tries failed."""
    deadline = time.monotonic() + 60
    failed = 0
    while True:
        try:
            call()
            return failed
        except urllib.error.HTTPError as exc:
            if exc.code == done:
                return failed
            if time.monotonic() > deadline:
                raise
        except (OSError, http.client.HTTPException):
            if time.monotonic() > deadline:
                raise
        failed += 1
        time.sleep(0.1)
