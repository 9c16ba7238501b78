"""`make bench-smoke` covers every benchmark: each bench target of the Makefile is in
benchmarks/smoke.py's list, runs the module the list names, and that module has a --quick mode.
A bench added without a quick mode, or left out of the smoke, fails here."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.smoke import BENCHES

REPO = Path(__file__).resolve().parents[2]


def recipes() -> dict[str, str]:
    """Each Makefile target's recipe (its tab-indented lines), by target."""
    out: dict[str, str] = {}
    target = ""
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith("\t") and target:
            out[target] += line + "\n"
        elif match := re.match(r"^([\w-]+):", line):
            target = match.group(1)
            out[target] = ""
        else:
            target = ""
    return out


def test_every_bench_target_is_in_the_smoke_run() -> None:
    targets = {t for t in recipes() if t.startswith("bench-") and t != "bench-smoke"}
    assert targets | {"dashboard-png"} == {b.target for b in BENCHES}


def test_each_smoke_entry_runs_the_targets_module_and_it_has_a_quick_mode() -> None:
    made = recipes()
    for bench in BENCHES:
        assert f"-m benchmarks.{bench.module}" in made[bench.target], bench.target
        source = (REPO / "benchmarks" / f"{bench.module}.py").read_text()
        assert '"--quick"' in source, bench.module


def test_ci_runs_the_smoke_after_the_tests() -> None:
    lines = [ln for ln in (REPO / ".ci" / "run").read_text().splitlines() if ln.startswith("make")]
    assert lines == ["make test", "make bench-smoke"]
