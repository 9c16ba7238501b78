"""py-spy on a running contender, and the top lines of what it saw (``--profile`` of bench-live).

``Profiler(pid, out)`` samples the process (``py-spy record --format raw``: one collapsed stack
per line with its sample count) until ``stop()``; ``summary(out)`` reads those stacks back and
returns the functions with the most samples, by self time and by inclusive time, as the
closing notes quote them. py-spy is a development dependency (pyproject's ``dev`` extra).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path


class Profiler:
    """py-spy sampling ``pid`` without pausing it, until ``stop()`` or for ``seconds``."""

    def __init__(self, pid: int, out: Path, rate: int = 250, seconds: int | None = None) -> None:
        self.out = out
        spy = Path(sys.executable).with_name("py-spy")
        args = [str(spy), "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
        if seconds is not None:
            args += ["--duration", str(seconds)]
        self.proc = subprocess.Popen(
            [*args, "--nonblocking", "--output", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=(out.parent / (out.name + ".log")).open("wb"),
            start_new_session=True,
        )

    def stop(self) -> None:
        """Stop sampling and let py-spy write its file (before the process it samples ends)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _frame(text: str) -> str:
    """``function (path/to/module.py:123)`` -> ``function (module.py)``: lines merged."""
    name, _, where = text.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({Path(path).name})" if path else name


def summary(path: Path, top: int = 15) -> list[str]:
    """The ``top`` functions by self samples and by inclusive samples, as percentages."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if not total:
        return [f"{path.name}: no samples"]
    lines = [f"{path.name}: {total} samples", "  self:"]
    lines += [f"    {n / total:6.1%}  {f}" for f, n in own.most_common(top)]
    lines.append("  inclusive:")
    lines += [f"    {n / total:6.1%}  {f}" for f, n in inclusive.most_common(top)]
    return lines
