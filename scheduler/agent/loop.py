"""The agent's poll loop: probe, compare, patch only on change, report failures on the node.

One poll:
  1. read the node (its labels pick a static model; its annotation is what is published now);
  2. probe, encode canonically, and read the result back through the scheduler's own inventory
     parser: whatever the scheduler would reject is a failed probe, never published;
  3. when the encoded annotation equals the node's, do nothing (no write, no new
     resourceVersion, no watch event for every scheduler replica); otherwise patch it.

A failed probe leaves the node's annotation as it is: the last good topology stays in force, and
placements keep working, while a Warning Event (reason ``TopologyProbeFailed``) on the node says
what failed. The Event is sent when the failure's message is new and again every
``eventRepeatSeconds`` while it persists, not at every poll, so a broken node does not flood the
events of the cluster. An apiserver error is only logged: the next poll retries.

With ``--device-plugin`` the loop also hands every good probe to the device plugin's host
(plugin/host.py), which serves what the probe found on nodes that opted in; a plugin that cannot
serve is reported the same way, as a Warning with reason ``DevicePluginFailed``.

``poll`` is one step and returns what happened, so tests (and ``--once``) can step the agent;
``run`` repeats it until told to stop and counts completed polls and their outcomes for observers
(``wait_polls``, ``outcomes``), which lets tests wait for "two more polls happened" instead of
sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final, Protocol

import structlog

from scheduler.core.formats.gpus import encode
from scheduler.core.model.names import GPUS_ANNOTATION
from scheduler.core.resources.inventory import (
    Inventory,
    InventoryError,
    check_annotation,
    strip_inventory_prefix,
)

from .kube import NodeView
from .nvidia import ProbeError
from .probe import Probed

log = structlog.get_logger("agent")

PROBE_FAILED_REASON: Final = "TopologyProbeFailed"
PLUGIN_FAILED_REASON: Final = "DevicePluginFailed"


class NodeApi(Protocol):
    async def get_node(self, name: str) -> NodeView | None: ...

    async def set_gpus_annotation(self, name: str, value: str) -> None: ...

    async def node_event(
        self, node: NodeView, kind: str, reason: str, message: str, timestamp: str
    ) -> None: ...


class Probe(Protocol):
    async def probe(self, labels: dict[str, str]) -> Probed: ...


class Plugin(Protocol):
    async def update(self, labels: dict[str, str], inventory: Inventory) -> str | None: ...


class Outcome(enum.StrEnum):
    PATCHED = "patched"
    UNCHANGED = "unchanged"
    PROBE_FAILED = "probe-failed"
    NODE_MISSING = "node-missing"
    API_ERROR = "api-error"


class Agent:
    def __init__(
        self,
        node: str,
        prober: Probe,
        api: NodeApi,
        poll_seconds: float = 60.0,
        event_repeat_seconds: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
        plugin: Plugin | None = None,
    ) -> None:
        self.node = node
        self.prober = prober
        self.api = api
        self.poll_seconds = poll_seconds
        self.event_repeat_seconds = event_repeat_seconds
        self.clock = clock
        self.plugin = plugin
        self.polls = 0
        self.last_outcome: Outcome | None = None
        self.outcomes: Counter[Outcome] = Counter()
        # The last Warning sent per reason: its message and when, so a lasting failure is not
        # reported at every poll.
        self._reported: dict[str, tuple[str, float]] = {}
        self._polled = asyncio.Condition()

    async def poll(self) -> Outcome:
        try:
            node = await self.api.get_node(self.node)
        except Exception as exc:  # the apiserver, the network: retried at the next poll
            log.warning("cannot read node", node=self.node, error=str(exc))
            return Outcome.API_ERROR
        if node is None:
            log.warning("node not found", node=self.node)
            return Outcome.NODE_MISSING
        try:
            probed = await self.prober.probe(node.labels)
            value = encode(probed.annotation)
            try:
                inventory = check_annotation(value, self.node)
            except InventoryError as exc:
                detail = strip_inventory_prefix(str(exc), self.node)
                raise ProbeError(
                    f"{probed.source}: the scheduler would reject it: {detail}"
                ) from None
        except ProbeError as exc:
            await self._report_probe_failure(node, str(exc))
            return Outcome.PROBE_FAILED
        except Exception as exc:  # a bug or a surprise in a probe: reported, the loop goes on
            log.exception("topology probe crashed", node=self.node)
            await self._report_probe_failure(node, f"internal error: {type(exc).__name__}: {exc}")
            return Outcome.PROBE_FAILED
        self._reported.pop(PROBE_FAILED_REASON, None)
        if self.plugin is not None:
            # The plugin serves what this node has, whatever the annotation's fate below.
            problem = await self.plugin.update(node.labels, inventory)
            if problem is None:
                self._reported.pop(PLUGIN_FAILED_REASON, None)
            else:
                log.error("device plugin failed", node=self.node, error=problem)
                await self._warn(node, PLUGIN_FAILED_REASON, problem)
        if node.annotations.get(GPUS_ANNOTATION) == value:
            log.debug("topology unchanged", node=self.node, source=probed.source)
            return Outcome.UNCHANGED
        try:
            await self.api.set_gpus_annotation(self.node, value)
        except Exception as exc:
            log.warning("cannot patch node", node=self.node, error=str(exc))
            return Outcome.API_ERROR
        log.info(
            "topology published",
            node=self.node,
            source=probed.source,
            gpus=len(inventory.devices),
            vendor=inventory.vendor,
            model=inventory.model,
            first=GPUS_ANNOTATION not in node.annotations,
        )
        return Outcome.PATCHED

    async def _report_probe_failure(self, node: NodeView, message: str) -> None:
        log.error("topology probe failed", node=self.node, error=message)
        if GPUS_ANNOTATION in node.annotations:
            kept = "keeping the last published topology"
        else:
            kept = "no topology published yet"
        await self._warn(
            node, PROBE_FAILED_REASON, f"GPU topology probe failed ({kept}): {message}"
        )

    async def _warn(self, node: NodeView, reason: str, message: str) -> None:
        """A Warning Event on the node, unless this reason said the same message lately."""
        now = self.clock()
        last = self._reported.get(reason)
        if last is not None and last[0] == message and now - last[1] < self.event_repeat_seconds:
            return
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            await self.api.node_event(node, "Warning", reason, message, stamp)
        except Exception as exc:  # reported again at the next poll
            log.warning("cannot send event", node=self.node, error=str(exc))
            return
        self._reported[reason] = (message, now)

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set; a poll in progress is finished, not cut off."""
        log.info("agent started", node=self.node, poll_seconds=self.poll_seconds)
        while not stop.is_set():
            outcome = await self.poll()
            async with self._polled:
                self.polls += 1
                self.last_outcome = outcome
                self.outcomes[outcome] += 1
                self._polled.notify_all()
            with contextlib.suppress(TimeoutError):  # the interval ended without a stop
                async with asyncio.timeout(self.poll_seconds):
                    await stop.wait()
        log.info("agent stopped", node=self.node)

    async def wait_polls(self, count: int) -> Outcome | None:
        """Wait until ``count`` polls have completed; the last one's outcome."""
        async with self._polled:
            await self._polled.wait_for(lambda: self.polls >= count)
            return self.last_outcome
