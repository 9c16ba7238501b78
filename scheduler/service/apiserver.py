"""What the service needs from the apiserver, in one place: the Protocols the running parts are
written against (scheduler.kube.api.KubeApi with the codec implements them; the tests' fake
apiserver does too)."""

from __future__ import annotations

from typing import Protocol

from scheduler.core.model.dra import RequestMapping
from scheduler.core.model.objects import PodInput
from scheduler.kube.api import BindResult
from scheduler.kube.claims import Answer, ClaimObject, ClaimWrite
from scheduler.kube.podgroups import EvictResult, Write


class Cluster(Protocol):
    """What the loop needs from the apiserver (scheduler.kube.api.KubeApi + the codec)."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindResult: ...

    async def get_pod(self, namespace: str, name: str) -> PodInput | None: ...

    async def set_unschedulable(
        self, namespace: str, name: str, uid: str, message: str
    ) -> Write: ...

    async def evict(
        self, namespace: str, name: str, uid: str, dry_run: bool = False
    ) -> EvictResult: ...

    async def set_nominated_node(self, namespace: str, name: str, node: str | None) -> Write: ...

    async def reserve_claims(
        self, namespace: str, claims: tuple[str, ...], pod: str, uid: str
    ) -> Write: ...

    async def unreserve_claims(
        self, namespace: str, claims: tuple[tuple[str, str], ...], uid: str
    ) -> None: ...

    # DRA allocation (binder.py's PreBind and Unreserve; kube/claims.py builds the objects).
    async def read_claim(self, namespace: str, name: str) -> ClaimObject | None: ...

    async def replace_claim(self, obj: ClaimObject, status: bool) -> ClaimWrite: ...

    async def create_claim(self, obj: ClaimObject) -> ClaimWrite: ...

    async def delete_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> Answer: ...

    async def record_extended_claim(
        self, namespace: str, name: str, uid: str, claim: str, mappings: tuple[RequestMapping, ...]
    ) -> Write: ...

    async def event(
        self,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        kind: str,
        timestamp: str,
    ) -> None: ...


class Evictor(Protocol):
    """What stale gangs need: evictions."""

    async def evict(self, namespace: str, name: str, uid: str) -> EvictResult: ...
