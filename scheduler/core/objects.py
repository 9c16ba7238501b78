"""Kubernetes-shaped inputs of the core, holding only the fields the scheduler reads.

The shell (scheduler/kube's msgspec codecs, or the simulator's YAML reader) turns raw Node and Pod
objects into these Structs; the core never sees a Kubernetes client type. Quantities stay strings,
as the apiserver sends them, and are parsed in ``requests`` so that a malformed value becomes a
reason on that one pod instead of an exception in the shell.
"""

from __future__ import annotations

from msgspec import Struct, field


class Taint(Struct, frozen=True):
    key: str
    effect: str
    value: str = ""


class Toleration(Struct, frozen=True):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes semantics: empty effect matches all effects, Exists ignores the value."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


class NodeInput(Struct, frozen=True):
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    # status.allocatable as quantity strings, parsed by the core (which reads only the
    # configured whole-GPU resource names; the shell may drop the others). None when the object
    # carries no status at all (a hand-written manifest): then allocatable is not checked. A
    # status without allocatable (nor capacity, which the apiserver copies into it) offers
    # nothing, as for kube-scheduler.
    allocatable: dict[str, str] | None = None


class ContainerInput(Struct, frozen=True):
    name: str
    limits: dict[str, str] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=dict)
    # Only meaningful on init containers: "Always" marks a sidecar, which runs beside the app.
    restart_policy: str = ""


class PodInput(Struct, frozen=True):
    namespace: str
    name: str
    uid: str = ""
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    phase: str = "Pending"
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    containers: tuple[ContainerInput, ...] = ()
    init_containers: tuple[ContainerInput, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    deleting: bool = False
    # metadata.creationTimestamp (RFC 3339, sorts as text): the queue's FIFO order, as in
    # kube-scheduler's default queue sort.
    created: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")
