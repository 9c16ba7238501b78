"""The range of every numeric setting, as one table from the field's path in the file.

msgspec checks a value's type; whether it makes sense (a batch of at least one pod, a percent
of at most 100) is this table's. ``check_ranges`` walks it over the sections that were well-typed
and names each problem by its field path, as every other problem of the file is named
(``parse_config`` collects them all into one ConfigError). docs/configuration.md states the same
ranges; its test reads them from here.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Range(msgspec.Struct, frozen=True):
    """``low`` <= value (< when ``above``), and value <= ``high`` unless it is None."""

    low: float
    high: float | None = None
    above: bool = False

    def admits(self, value: float) -> bool:
        if value < self.low or (self.above and value == self.low):
            return False
        return self.high is None or value <= self.high

    def describe(self) -> str:
        """What a value must do, after "must": "be at least 1", "not be negative"..."""
        if self.high is not None:
            return f"be between {self.low:g} and {self.high:g}"
        if self.above:
            return f"be above {self.low:g}"
        return "not be negative" if self.low == 0 else f"be at least {self.low:g}"


POSITIVE = Range(0, above=True)
NOT_NEGATIVE = Range(0)
AT_LEAST_1 = Range(1)
PERCENT = Range(0, 100)

RANGES: dict[str, Range] = {
    "gang.waitTimeoutSeconds": NOT_NEGATIVE,
    "gang.staleGangGraceSeconds": NOT_NEGATIVE,
    "preemption.holdSeconds": AT_LEAST_1,
    "preemption.retrySeconds": NOT_NEGATIVE,
    "preemption.minCandidateNodes": AT_LEAST_1,
    "preemption.minCandidateNodesPercent": PERCENT,
    "preemption.maxCandidateDomains": AT_LEAST_1,
    "topology.maxPlans": AT_LEAST_1,
    "fragmentation.coveragePercent": Range(1, 100),
    "fragmentation.minPods": AT_LEAST_1,
    "fragmentation.strandedWeight": NOT_NEGATIVE,
    "fragmentation.contestWeight": NOT_NEGATIVE,
    "fragmentation.contestCapPercent": NOT_NEGATIVE,
    "fragmentation.memoShapes": AT_LEAST_1,
    "fragmentation.weightParts": AT_LEAST_1,
    "memos.asks": AT_LEAST_1,
    "memos.requests": AT_LEAST_1,
    "memos.quantities": AT_LEAST_1,
    "memos.bestSets": AT_LEAST_1,
    "dra.steps": AT_LEAST_1,
    "dra.evaluations": AT_LEAST_1,
    "dra.solutions": AT_LEAST_1,
    "run.bindConcurrency": AT_LEAST_1,
    "run.tuning.batchPods": AT_LEAST_1,
    "run.tuning.bindAttempts": AT_LEAST_1,
    "run.tuning.bindRetrySeconds": NOT_NEGATIVE,
    "run.tuning.checkRetrySeconds": POSITIVE,
    "run.tuning.rebindSeconds": POSITIVE,
    "run.tuning.bindCommitSeconds": POSITIVE,
    "run.tuning.bindingConditionsSeconds": POSITIVE,
    "run.tuning.bindingConditionsPollSeconds": POSITIVE,
    "run.tuning.podInitialBackoffSeconds": POSITIVE,
    "run.tuning.podMaxBackoffSeconds": POSITIVE,
    "run.tuning.podMaxUnschedulableSeconds": POSITIVE,
    "run.tuning.storeReconcileSeconds": NOT_NEGATIVE,
    "run.tuning.storeWriteBatch": AT_LEAST_1,
    "run.tuning.storeMarkSeconds": NOT_NEGATIVE,
    "run.tuning.storeReconcileChunk": AT_LEAST_1,
    "run.tuning.redisTimeoutSeconds": POSITIVE,
    "run.tuning.sentinelTimeoutSeconds": POSITIVE,
    "run.tuning.inventoryFlushSeconds": NOT_NEGATIVE,
    "run.tuning.apiConnections": AT_LEAST_1,
    "run.tuning.apiTimeoutSeconds": POSITIVE,
    "run.tuning.listPageSize": AT_LEAST_1,
    "run.tuning.podGroupPatchesInFlight": AT_LEAST_1,
    "run.tuning.podGroupPassSeconds": NOT_NEGATIVE,
    "run.tuning.podGroupIdleSeconds": POSITIVE,
    "run.tuning.crdCheckSeconds": POSITIVE,
    "run.tuning.crdRetrySeconds": POSITIVE,
    "run.tuning.eventQueueSize": AT_LEAST_1,
    "run.tuning.loopTickSeconds": POSITIVE,
    "run.tuning.shutdownDrainSeconds": POSITIVE,
    "run.tuning.shutdownReleaseSeconds": POSITIVE,
    "run.tuning.shutdownStepSeconds": POSITIVE,
    "run.tuning.shutdownEventsSeconds": POSITIVE,
    "run.tuning.watchTimeoutSeconds": AT_LEAST_1,
    "run.tuning.watchBackoffSeconds": POSITIVE,
    "run.tuning.watchBackoffMaxSeconds": POSITIVE,
    "run.tuning.listDecodeSlice": AT_LEAST_1,
    "agent.pollSeconds": POSITIVE,
    "agent.commandTimeoutSeconds": POSITIVE,
    "agent.eventRepeatSeconds": POSITIVE,
    "agent.devicePlugin.identifyTimeoutSeconds": POSITIVE,
    "agent.devicePlugin.socketCheckSeconds": POSITIVE,
    "agent.devicePlugin.registerTimeoutSeconds": POSITIVE,
    "agent.devicePlugin.reportIntervalSeconds": POSITIVE,
    "agent.devicePlugin.reportTries": AT_LEAST_1,
    "agent.devicePlugin.publishedPods": AT_LEAST_1,
}


def _field(value: Any, name: str) -> Any:
    """The field of Struct ``value`` whose name in the file is ``name``."""
    for f in msgspec.structs.fields(value):
        if f.encode_name == name:
            return getattr(value, f.name)
    raise KeyError(name)


def check_ranges(sections: dict[str, Any], problems: list[str]) -> None:
    """Every value of RANGES in ``sections`` (the well-typed sections by their name in the
    file) out of its range, as "<path>: must <Range.describe>"."""
    for path, allowed in RANGES.items():
        section, *rest = path.split(".")
        if section not in sections:
            continue
        value = sections[section]
        for name in rest:
            value = _field(value, name)
        if not allowed.admits(value):
            problems.append(f"{path}: must {allowed.describe()}")
