"""benchmarks/promql.py, which draws docs/operations.md's dashboard picture from recorded scrapes:
the figures it gives for the dashboard's query forms, computed here by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.promql import Scrape, Series

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "helm" / "topo-scheduler" / "dashboards" / "topo-scheduler.json"


def counter(t: float, replica: str, value: float) -> Scrape:
    return Scrape(t, replica, {("c_total", (("result", "ok"),)): value})


def test_rate_sums_replicas_and_survives_a_restart() -> None:
    series = Series(
        [
            counter(0, "a", 0),
            counter(10, "a", 20),
            counter(20, "a", 40),
            counter(0, "b", 100),
            counter(10, "b", 20),  # restarted: 20 since
            counter(20, "b", 30),
        ],
        window=30,
    )
    by_result = series.evaluate("sum by (result) (rate(c_total[$__rate_interval]))", 20)
    assert by_result == {(("result", "ok"),): pytest.approx(40 / 20 + 30 / 20)}
    assert series.evaluate("sum(rate(c_total[$__rate_interval]))", 20) == {(): pytest.approx(3.5)}


def test_gauges_take_each_replicas_latest_scrape_and_drop_a_stale_one() -> None:
    gauge = "g"
    series = Series(
        [
            Scrape(0, "a", {(gauge, (("q", "x"),)): 3.0}),
            Scrape(0, "b", {(gauge, (("q", "x"),)): 5.0}),
            Scrape(20, "a", {(gauge, (("q", "x"),)): 4.0}),  # b is no longer scraped
        ],
        stale=10,
    )
    assert series.evaluate("max by (q) (g)", 0) == {(("q", "x"),): 5.0}
    assert series.evaluate("max by (q) (g)", 20) == {(("q", "x"),): 4.0}
    assert series.evaluate("sum(g)", 0) == {(): 8.0}


def test_histogram_quantile_interpolates_in_the_bucket_of_the_rank() -> None:
    def buckets(t: float, small: float, mid: float, total: float) -> Scrape:
        name = "h_bucket"
        return Scrape(
            t,
            "a",
            {
                (name, (("le", "0.1"),)): small,
                (name, (("le", "1.0"),)): mid,
                (name, (("le", "+Inf"),)): total,
            },
        )

    series = Series([buckets(0, 0, 0, 0), buckets(10, 5, 10, 10)], window=30)
    p50 = "histogram_quantile(0.5, sum by (le) (rate(h_bucket[$__rate_interval])))"
    p99 = "histogram_quantile(0.99, sum by (le) (rate(h_bucket[$__rate_interval])))"
    assert series.evaluate(p50, 10) == {(): pytest.approx(0.1)}
    assert series.evaluate(p99, 10) == {(): pytest.approx(0.1 + 0.9 * (9.9 - 5) / 5)}
    # No observation in the window: no value.
    assert series.evaluate(p50, 0) == {}


def test_every_dashboard_query_is_a_form_it_evaluates() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 17
    for expr in exprs:
        Series([]).evaluate(expr, 0)  # raises ValueError for a form it does not know
    with pytest.raises(ValueError):
        Series([]).evaluate("avg(rate(c_total[5m]))", 0)
