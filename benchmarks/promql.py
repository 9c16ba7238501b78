"""The few PromQL forms the Grafana dashboard uses, evaluated over recorded /metrics scrapes.

There is no Prometheus or Grafana on our machines; benchmarks/dashboard.py scrapes a real run's
replicas and draws each panel from these evaluations, so that docs/operations.md's picture shows
what the dashboard's own queries give. Only what the dashboard needs is understood:

- ``sum [by (labels)] (rate(M[...]))`` and ``histogram_quantile(q, sum by (le[, labels])
  (rate(M_bucket[...])))``, the rate taken over ``window`` seconds of scrapes of each replica
  (a counter that went down restarted: its new value is the increase);
- ``sum|max [by (labels)] (M)`` of gauges, each replica's latest scrape at that time (a replica
  no longer scraped, e.g. killed, drops out after ``stale`` seconds, as in Prometheus).

Anything else raises ValueError, so a dashboard query this module cannot draw is noticed.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]

_QUANTILE = re.compile(
    r"histogram_quantile\(([0-9.]+), sum by \(([^)]*)\) \(rate\((\w+)\[[^\]]+\]\)\)\)$"
)
_AGGREGATE = re.compile(r"(sum|max) (?:by \(([^)]*)\) )?\((rate\()?(\w+)(?:\[[^\]]+\]\))?\)$")
_AGGREGATE_BARE = re.compile(r"(sum|max)\((rate\()?(\w+)(?:\[[^\]]+\]\))?\)$")


@dataclass(frozen=True)
class Scrape:
    """One /metrics answer of one replica at time ``t`` (seconds)."""

    t: float
    replica: str
    samples: dict[tuple[str, Labels], float]


def parse(t: float, replica: str, text: str) -> Scrape:
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return Scrape(t, replica, samples)


class Series:
    """Scrapes of every replica, by time."""

    def __init__(self, scrapes: Iterable[Scrape], window: float = 30.0, stale: float = 10.0):
        self.by_replica: dict[str, list[Scrape]] = defaultdict(list)
        for s in sorted(scrapes, key=lambda s: s.t):
            self.by_replica[s.replica].append(s)
        self.window = window
        self.stale = stale

    def _at(self, scrapes: list[Scrape], t: float) -> int | None:
        """The index of the last scrape at or before ``t``, if it is not stale."""
        found = None
        for i, s in enumerate(scrapes):
            if s.t > t:
                break
            found = i
        if found is None or t - scrapes[found].t > self.stale:
            return None
        return found

    def _rates(self, name: str, t: float) -> dict[tuple[str, Labels], float]:
        """Per replica and label set: the counter's increase over the window before ``t``, per
        second."""
        out: dict[tuple[str, Labels], float] = {}
        for replica, scrapes in self.by_replica.items():
            end = self._at(scrapes, t)
            if end is None:
                continue
            span = [s for s in scrapes[: end + 1] if s.t >= t - self.window]
            if len(span) < 2:
                continue
            seconds = span[-1].t - span[0].t
            keys = {k for s in span for k in s.samples if k[0] == name}
            for key in keys:
                increase = 0.0
                for a, b in itertools.pairwise(span):
                    before, after = a.samples.get(key, 0.0), b.samples.get(key, 0.0)
                    increase += after - before if after >= before else after
                out[(replica, key[1])] = increase / seconds
        return out

    def _latest(self, name: str, t: float) -> dict[tuple[str, Labels], float]:
        out: dict[tuple[str, Labels], float] = {}
        for replica, scrapes in self.by_replica.items():
            at = self._at(scrapes, t)
            if at is None:
                continue
            for (sample, labels), value in scrapes[at].samples.items():
                if sample == name:
                    out[(replica, labels)] = value
        return out

    def evaluate(self, expr: str, t: float) -> dict[Labels, float]:
        """The expression's value at ``t``: one number per output label set."""
        m = _QUANTILE.match(expr)
        if m:
            q, by, name = float(m.group(1)), _names(m.group(2)), m.group(3)
            grouped = _group(self._rates(name, t), by)
            return _quantiles(q, grouped)
        m = _AGGREGATE.match(expr)
        if m:
            op, by, rate, name = m.group(1), _names(m.group(2) or ""), m.group(3), m.group(4)
        else:
            m = _AGGREGATE_BARE.match(expr)
            if not m:
                raise ValueError(f"not a form benchmarks/promql.py evaluates: {expr}")
            op, by, rate, name = m.group(1), (), m.group(2), m.group(3)
        values = self._rates(name, t) if rate else self._latest(name, t)
        grouped = _group(values, by)
        fold = sum if op == "sum" else max
        return {labels: fold(vs) for labels, vs in grouped.items()}


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _group(
    values: dict[tuple[str, Labels], float], by: tuple[str, ...]
) -> dict[Labels, list[float]]:
    out: dict[Labels, list[float]] = defaultdict(list)
    for (_, labels), value in values.items():
        kept = tuple((k, v) for k, v in labels if k in by)
        out[kept].append(value)
    return out


def _quantiles(q: float, grouped: dict[Labels, list[float]]) -> dict[Labels, float]:
    """Prometheus' histogram_quantile: linear within the bucket the rank falls in; the bucket
    counts are cumulative (le), summed over replicas by ``grouped``."""
    series: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
    for labels, values in grouped.items():
        le = dict(labels)["le"]
        rest = tuple((k, v) for k, v in labels if k != "le")
        series[rest].append((float(le), sum(values)))
    out: dict[Labels, float] = {}
    for labels, buckets in series.items():
        buckets.sort()
        total = buckets[-1][1]
        if total <= 0 or not math.isinf(buckets[-1][0]):
            continue  # no observations in the window: no value (a gap in the panel)
        rank = q * total
        lower, below = 0.0, 0.0
        for upper, count in buckets:
            if count >= rank:
                if math.isinf(upper):
                    out[labels] = lower  # in the +Inf bucket: the highest finite bound
                else:
                    width = count - below
                    out[labels] = lower + (upper - lower) * ((rank - below) / width if width else 1)
                break
            lower, below = upper, count
    return out
