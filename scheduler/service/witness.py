"""The epoch witness: what the apiserver, which outlives Redis, records of this scheduler's
elections. The ConfigMap ``topo-scheduler-epochs`` of the scheduler's namespace
(``TOPO_SCHEDULER_NAMESPACE``, which the Deployment sets to its own; default ``topo-scheduler``)
holds, under the scheduler's name, the ``holder|epoch`` of the last leader elected. Every leader
records itself there before its first decision, or does not lead (its election fails and it
gives the lease back). Writes are compare-and-swap on the resourceVersion, and a GET without a
resourceVersion is read from etcd (a quorum read), so the order of records and reads is real.

It serves three purposes (docs/operations.md "State and HA"):
- *A new installation starts at once.* A Redis that may have lost its last writes cannot say who
  led before, so the new leader waits one lease before its first decision; but at epoch 1 with a
  witness that never heard of this scheduler, nobody ever led: no wait.
- *A renewal counts only while the witness holds the renewer's own record* (``superseded``,
  checked by leader.py after Redis accepted the renewal). A later leader that cannot trust its
  Redis records itself before its one-lease wait: a renewal sent after that record does not
  count, and one sent before it ends before that wait does. So even an old master that still
  takes writes (a partition left it a replica, a pause) cannot keep a deposed leader leading.
- *An election skips the wait only when the witness names the leader its Redis history ends
  with* (``chained``): a deposed leader that takes the lease again on an old master finds a
  newer leader in the witness and waits out that leader's lease first.

Without permission to read or write it (403: deploy/'s Role grants it), or without its
namespace, the witness is off: no shortcut, no fence, the rules without it. Any other failure to
read or write it fails the election.
"""

from __future__ import annotations

import os
from typing import Protocol

import structlog

from scheduler.kube.api import ConfigMapData
from scheduler.kube.watch import HttpError
from scheduler.state.base import History, StoreError

log = structlog.get_logger("witness")

NAME = "topo-scheduler-epochs"
DEFAULT_NAMESPACE = "topo-scheduler"
_ATTEMPTS = 3  # compare-and-swap rounds lost to other schedulers' records before giving up
NEVER = ""  # what ``read`` says when no election of this scheduler was ever recorded


class WitnessError(StoreError):
    """The witness could not be read or written: the election does not count."""


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
        self.off = False  # no permission: the witness plays no part
        self.recorded = ""  # this replica's last record, holder|epoch

    async def _current(self) -> ConfigMapData | None:
        try:
            return await self.api.read_config_map(self.namespace, NAME)
        except HttpError as exc:
            if exc.status == 403:
                if not self.off:
                    log.warning(
                        "no permission to read the epoch witness: it plays no part",
                        namespace=self.namespace,
                    )
                self.off = True
                return None
            raise WitnessError(f"epoch witness unreadable: {exc}") from exc
        except Exception as exc:  # a lost connection, a timeout
            raise WitnessError(f"epoch witness unreadable: {exc}") from exc

    async def read(self) -> str:
        """The last election recorded (``holder|epoch``), or NEVER."""
        current = await self._current()
        return NEVER if current is None else current.data.get(self.key, NEVER)

    async def elected(self, holder: str, epoch: int, history: History) -> tuple[bool, bool]:
        """Called at an election, before the first decision; records it. Returns (new
        installation, chained): whether nobody ever led (epoch 1 of a store without history,
        and no record), and whether the store's history ends with the recorded leader.
        Raises WitnessError when the witness cannot be read or written."""
        self.recorded = ""  # a new term: no record of it yet
        seen = await self.read()
        if self.off:
            return False, history.kept
        new = not history.kept and epoch == 1 and seen == NEVER
        chained = history.kept and seen in (NEVER, history.previous)
        await self._record(f"{holder}|{epoch}")
        return new, chained

    async def _record(self, value: str) -> None:
        for _ in range(_ATTEMPTS):
            current = await self._current()
            if self.off:
                return
            version = None if current is None else current.metadata.resource_version
            try:
                written = await self.api.write_config_map(
                    self.namespace, NAME, {self.key: value}, version
                )
            except HttpError as exc:
                if exc.status not in (403, 404):
                    raise WitnessError(f"epoch witness not written: {exc}") from exc
                # No permission, or no such namespace: no witness can be kept here.
                log.warning("cannot write the epoch witness: it plays no part", error=str(exc))
                self.off = True
                return
            except Exception as exc:
                raise WitnessError(f"epoch witness not written: {exc}") from exc
            if written:
                self.recorded = value
                return
        raise WitnessError("epoch witness not written: it kept changing")

    async def superseded(self, holder: str, epoch: int) -> bool:
        """After a renewal Redis accepted: True when the witness holds another leader's record
        than this replica's for this term; False before this term's record (the election under
        way). Raises WitnessError when the witness cannot be read: the renewal does not count
        (the lease keeps the end it had, as when Redis does not answer)."""
        if self.off or self.recorded != f"{holder}|{epoch}":
            return False
        seen = await self.read()
        return not self.off and seen not in (NEVER, self.recorded)
