"""bench-smoke: every benchmark's quick mode, one after the other, so none breaks silently.

A benchmark is run by hand, rarely, and does not fail on its figures: when the core, the service,
the control plane or a dependency moves under it, nothing said so (bench-scale stopped at KWOK's
start for as long as nobody ran it). So each bench has a ``--quick`` mode, the same code path end
to end on small sizes, that prints its table and exits non-zero when it breaks; this runs them
all (``make bench-smoke``, which ``.ci/run`` calls after ``make test``).

A quick run passes when it exits 0 and printed its table: a line the full run's table has too
(``Bench.table``), so a bench that ends early without an error still fails here. No figure is
checked: the goals belong to the full runs on a quiet machine. Each run has a time limit; past it
the run gets SIGINT, so that its ``finally`` blocks stop what it started, then SIGKILL.

Prints each bench's output as it comes, then one line per bench: its result and its seconds.
Exit status 1 when any failed (all are run regardless).

Usage: python -m benchmarks.smoke [--only bench-core,bench-frag]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIMIT_S = 600.0  # per bench; the slowest quick mode takes about a minute
GRACE_S = 60.0  # after SIGINT, for its finally blocks to stop the plane


@dataclass(frozen=True)
class Bench:
    target: str  # the make target of the full run
    module: str  # benchmarks.<module>, run with --quick
    table: str  # a line with this in it is the table's, printed by a run that got through


BENCHES = (
    Bench("bench-core", "bench_core", "goal single p99"),
    Bench("bench-frag", "bench_frag", "| topo-scheduler | 100% |"),
    Bench("bench-topology", "bench_topology", "  mean CPU per decision"),
    Bench("bench-takeover", "bench_takeover", "takeover:"),
    Bench("bench-soak", "bench_soak", "snapshot drift at the end"),
    Bench("bench-live", "bench_live", "failover (lease"),
    Bench("bench-scale", "bench_scale", "failover, topo-scheduler with Redis"),
    Bench("bench-failover", "bench_failover", "longest gap"),
    Bench("dashboard-png", "dashboard", "dashboard drawn into"),
)


@dataclass
class Outcome:
    bench: Bench
    seconds: float
    problem: str  # "" when it passed


def run(bench: Bench) -> Outcome:
    """One quick run, its output passed through as it comes."""
    print(f"\n==> {bench.target}: python -m benchmarks.{bench.module} --quick", flush=True)
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", f"benchmarks.{bench.module}", "--quick"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a SIGINT of its own, not the terminal's
    )
    timer = threading.Timer(LIMIT_S, _stop, (proc,))
    timer.start()
    tabled = False
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        tabled = tabled or bench.table in line
    code = proc.wait()
    timer.cancel()
    seconds = time.monotonic() - began
    if seconds >= LIMIT_S:
        problem = f"stopped after the {LIMIT_S:.0f} s limit"
    elif code != 0:
        problem = f"exit status {code}"
    elif not tabled:
        problem = f"no line of its table ({bench.table.strip()!r}) was printed"
    else:
        problem = ""
    return Outcome(bench, seconds, problem)


def _stop(proc: subprocess.Popen[str]) -> None:
    """SIGINT (its ``finally`` blocks stop what it started), then SIGKILL to the group."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated make targets (default: all)")
    args = parser.parse_args()
    benches: tuple[Bench, ...] = BENCHES
    if args.only:
        wanted = args.only.split(",")
        unknown = set(wanted) - {b.target for b in BENCHES}
        if unknown:
            parser.error(f"--only: unknown {', '.join(sorted(unknown))}")
        benches = tuple(b for b in BENCHES if b.target in wanted)
    began = time.monotonic()
    outcomes = [run(b) for b in benches]
    print(f"\nbench-smoke: {len(outcomes)} quick modes in {time.monotonic() - began:.0f} s")
    for o in outcomes:
        print(f"  {o.bench.target:<16} {o.seconds:>6.1f} s  {o.problem or 'ok'}")
    failed = sum(1 for o in outcomes if o.problem)
    # The plain closing line CI reads for a count (".ci/run" ends with this run).
    print(f"bench-smoke: {len(outcomes) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
