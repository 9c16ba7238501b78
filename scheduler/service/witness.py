"""The epoch witness: what the apiserver remembers of this scheduler's elections.

A Redis that may have lost its last writes (new, flushed, restarted from disk, or a replica
promoted over its master: the store's ``kept_history`` is False) cannot say who led before, so
the new leader waits one lease before its first decision (README "State and HA"). Only a new
installation, which nobody ever led, need not wait, and Redis cannot tell it from a flushed one:
the apiserver, which outlives Redis, can. Every leader records its epoch in the ConfigMap
``topo-scheduler-epochs`` of the scheduler's namespace (``TOPO_SCHEDULER_NAMESPACE``, which the
Deployment sets to its own; default ``topo-scheduler``), under its scheduler name, before its
first decision. A leader elected at epoch 1 of a store without history skips the wait only when
the apiserver answers that this key was never written and its own record then succeeds.

Any doubt means waiting: an apiserver that does not answer, a ConfigMap that cannot be read (no
permission: deploy/'s Role grants it) or written. Writes are compare-and-swap on the
resourceVersion, so two leaders' records never overwrite each other's key unseen.
"""

from __future__ import annotations

import os
from typing import Protocol

import structlog

from scheduler.kube.api import ConfigMapData

log = structlog.get_logger("witness")

NAME = "topo-scheduler-epochs"
DEFAULT_NAMESPACE = "topo-scheduler"
_ATTEMPTS = 3  # compare-and-swap rounds lost to other schedulers' records before giving up


class ConfigMaps(Protocol):
    async def read_config_map(self, namespace: str, name: str) -> ConfigMapData | None: ...

    async def write_config_map(
        self, namespace: str, name: str, data: dict[str, str], resource_version: str | None
    ) -> bool: ...


class Witness:
    def __init__(self, api: ConfigMaps, key: str, namespace: str | None = None) -> None:
        self.api = api
        self.key = key  # the scheduler's name (a valid ConfigMap key)
        self.namespace = namespace or os.environ.get("TOPO_SCHEDULER_NAMESPACE", DEFAULT_NAMESPACE)

    async def never_led(self) -> bool:
        """True only when the apiserver says no leader of this scheduler was ever recorded."""
        try:
            current = await self.api.read_config_map(self.namespace, NAME)
        except Exception as exc:  # HttpError (403 without deploy/'s Role), a lost connection
            log.warning("epoch witness unreadable", namespace=self.namespace, error=str(exc))
            return False
        return current is None or self.key not in current.data

    async def record(self, epoch: int) -> bool:
        """Write ``epoch`` under this scheduler's key; False (logged) when it could not."""
        try:
            for _ in range(_ATTEMPTS):
                current = await self.api.read_config_map(self.namespace, NAME)
                version = None if current is None else current.metadata.resource_version
                if await self.api.write_config_map(
                    self.namespace, NAME, {self.key: str(epoch)}, version
                ):
                    return True
        except Exception as exc:
            log.warning("epoch witness not recorded", namespace=self.namespace, error=str(exc))
            return False
        log.warning("epoch witness not recorded: it kept changing", namespace=self.namespace)
        return False
