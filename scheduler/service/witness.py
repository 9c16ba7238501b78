"""The epoch witness: what the apiserver, which outlives Redis, records of this scheduler's
elections. The ConfigMap ``topo-scheduler-epochs`` of the scheduler's namespace
(``TOPO_SCHEDULER_NAMESPACE``, which the Deployment sets to its own; default ``topo-scheduler``)
holds, under the scheduler's name, the ``holder|epoch`` of the last leader elected. Every leader
records itself there before its first decision, or does not lead (its election fails and it
gives the lease back). Writes are compare-and-swap on the resourceVersion, and a GET without a
resourceVersion is read from etcd (a quorum read), so the order of records and reads is real.

It serves three purposes (docs/operations.md "State and HA"):
- *No record is no proof.* A Redis that may have lost its last writes cannot say who led
  before, nor keep that leader's last reservations, so the new leader waits until an old
  leader's Bindings can no longer land, one lease plus run.tuning.bindCommitSeconds
  (scheduler.py's ``first_wait``), unless its history ends with the leader recorded here
  (``chained``) and that leader's own wait was over (its election marked settled in the
  store, scheduler.py's ``settle``); with no record at all (``elected`` says "new"), a new
  installation cannot be told from a witness deleted and a store flushed while an old leader's
  Bindings, its very first ones included, are in flight. A new installation pays that once.
- *A renewal counts only while the witness holds the renewer's own record* (``superseded``,
  checked by leader.py after Redis accepted the renewal). A later leader that cannot trust its
  Redis records itself before its wait: a renewal sent after that record does not
  count, and one sent before it ends before that wait does. So even an old master that still
  takes writes (a partition left it a replica, a pause) cannot keep a deposed leader leading.
- *An election skips the wait only when the witness names the leader its Redis history ends
  with* (``chained``): a deposed leader that takes the lease again on an old master finds a
  newer leader in the witness and waits out that leader's lease first.

The witness is on wherever the store is shared (app.py): it is off only by configuration, the
embedded store of a single replica, where no other leader can exist. Any failure to read or
write it (a 403 included: an authorization webhook timing out, RBAC re-applied by GitOps, as
much as a Role never granted; a 404 for a missing namespace; a timeout) means this replica
cannot confirm its epoch, and a replica that cannot confirm its epoch does not lead: the
election fails and is tried again every lease retry (``Leadership``), a renewal after which
the witness cannot be read does not count (the lease runs out), and each failure is logged and
counted in ``scheduler_witness_errors_total``. Nothing about the witness is ever "off" because
of an answer: one transient 403 in the partition the witness exists for would otherwise let two
leaders decide.
"""

from __future__ import annotations

import os
from typing import Protocol

import structlog
from prometheus_client import Counter

from scheduler.kube.api import ConfigMapData
from scheduler.kube.watch import HttpError
from scheduler.state.base import History, StoreError

log = structlog.get_logger("witness")

NAME = "topo-scheduler-epochs"
DEFAULT_NAMESPACE = "topo-scheduler"
_ATTEMPTS = 3  # compare-and-swap rounds lost to other schedulers' records before giving up
NEVER = ""  # what ``read`` says when no election of this scheduler was ever recorded


class WitnessError(StoreError):
    """The witness could not be read or written: the election does not count, nor does the
    renewal after which it was read."""


class ConfigMaps(Protocol):
    async def read_config_map(self, namespace: str, name: str) -> ConfigMapData | None: ...

    async def write_config_map(
        self, namespace: str, name: str, data: dict[str, str], resource_version: str | None
    ) -> bool: ...


class Witness:
    def __init__(
        self,
        api: ConfigMaps,
        key: str,
        namespace: str | None = None,
        errors: Counter | None = None,
    ) -> None:
        self.api = api
        self.key = key  # the scheduler's name (a valid ConfigMap key)
        self.namespace = namespace or os.environ.get("TOPO_SCHEDULER_NAMESPACE", DEFAULT_NAMESPACE)
        self.errors = errors  # scheduler_witness_errors{call,error}
        self.recorded = ""  # this replica's last record, holder|epoch

    def _failed(self, call: str, exc: Exception) -> WitnessError:
        """Log and count a failed call; the error that fails the election or the renewal."""
        error = str(exc.status) if isinstance(exc, HttpError) else type(exc).__name__
        if self.errors is not None:
            self.errors.labels(call, error).inc()
        log.warning(
            "the epoch witness cannot confirm this replica's epoch: it does not lead until it can",
            call=call,
            error=str(exc),
            namespace=self.namespace,
            configmap=NAME,
        )
        return WitnessError(f"epoch witness: {call} failed: {exc}")

    async def _current(self) -> ConfigMapData | None:
        try:
            return await self.api.read_config_map(self.namespace, NAME)
        except Exception as exc:  # a 403, a lost connection, a timeout: all the same
            raise self._failed("read", exc) from exc

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
        seen = await self._record(f"{holder}|{epoch}")
        new = not history.kept and epoch == 1 and seen == NEVER
        # Only the record this one replaced proves who led last: read apart from the write, two
        # leaders of a partitioned store, electing at once, each read the other's record after
        # or none, and both skipped the wait (sim seed 3127). No record (the ConfigMap deleted,
        # or a store that kept a history from before the witness) chains to nothing: each
        # side of a partition keeps its own history.
        chained = history.kept and seen == history.previous
        return new, chained

    async def _record(self, value: str) -> str:
        """Write ``value`` by compare-and-swap; returns the record it replaced (NEVER if none)."""
        for _ in range(_ATTEMPTS):
            current = await self._current()
            seen = NEVER if current is None else current.data.get(self.key, NEVER)
            version = None if current is None else current.metadata.resource_version
            try:
                written = await self.api.write_config_map(
                    self.namespace, NAME, {self.key: value}, version
                )
            except Exception as exc:
                raise self._failed("write", exc) from exc
            if written:
                self.recorded = value
                return seen
            # Another writer came first, or the ConfigMap is gone since it was read (the
            # write says False for both): read it again.
        raise self._failed("write", RuntimeError(f"it kept changing ({_ATTEMPTS} attempts)"))

    async def superseded(self, holder: str, epoch: int) -> bool:
        """After a renewal Redis accepted: True when the witness holds another leader's record
        than this replica's for this term; False before this term's record (the election under
        way). Raises WitnessError when the witness cannot be read, or no longer holds any
        record (the ConfigMap deleted): the renewal does not count (the lease keeps the end it
        had, as when Redis does not answer), and the next election records again."""
        if self.recorded != f"{holder}|{epoch}":
            return False
        seen = await self.read()
        if seen == NEVER:
            raise self._failed("read", LookupError("this leader's record is gone"))
        return seen != self.recorded
