"""Benchmark: what ``make demo`` costs with the privacy–utility frontier (issue 30 item 3), fresh processes.

Rows, interleaved (one of each per repeat, so a change of the machine's load hits them alike):

- ``table only``: the demo's six ε = 2 runs alone (``run_demo(epsilons=[2])``: the demo before the frontier);
- ``demo``: ``ampfl demo`` (the table plus the frontier: 2 algorithms × 2 accountings × the grid, the table's
  runs reused at ε = 2);
- ``accounting-demo``: ``ampfl reproduce accounting-demo``, the second command of ``make demo``.

``make demo`` (target: under ~3 minutes on 2 cores) is ``demo`` + ``accounting-demo``. The table gives the
median wall and CPU time (user + system of the child, ``getrusage``) per row, the medians' ratio to ``table
only``, and the 1-minute load average before each repeat.

Run: ``.venv/bin/python bench/demo.py [REPEATS]`` (default 3).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def _rows(out: Path) -> dict[str, list[str]]:
    table = (
        "from ampfl.fl.demo import run_demo; "
        f"run_demo({str(out / 'table')!r}, progress=False, epsilons=[2.0])"
    )
    return {
        "table only": [sys.executable, "-c", table],
        "demo": [str(BIN / "ampfl"), "demo", "--out", str(out / "demo"), "--no-progress", "--json"],
        "accounting-demo": [str(BIN / "ampfl"), "reproduce", "accounting-demo", "--out", str(out / "acc")],
    }


def _timed(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(repeats: int = 3) -> None:
    with tempfile.TemporaryDirectory() as folder:
        rows = _rows(Path(folder))
        wall: dict[str, list[float]] = {name: [] for name in rows}
        cpu: dict[str, list[float]] = {name: [] for name in rows}
        loads = []
        for repeat in range(repeats):
            loads.append(os.getloadavg()[0])
            for name, argv in rows.items():
                w, c = _timed(argv)
                wall[name].append(w)
                cpu[name].append(c)
                print(f"repeat {repeat + 1}: {name}: {w:.1f} s wall, {c:.1f} s CPU", file=sys.stderr)
        base_wall, base_cpu = statistics.median(wall["table only"]), statistics.median(cpu["table only"])
        print(
            f"load (1 min) before each repeat: {', '.join(f'{x:.1f}' for x in loads)}; {os.cpu_count()} CPUs"
        )
        print("| row | median wall (s) | ratio | median CPU (s) | ratio |")
        print("|---|---|---|---|---|")
        for name in rows:
            w, c = statistics.median(wall[name]), statistics.median(cpu[name])
            print(f"| {name} | {w:.1f} | {w / base_wall:.2f}x | {c:.1f} | {c / base_cpu:.2f}x |")
        make = [a + b for a, b in zip(wall["demo"], wall["accounting-demo"], strict=True)]
        median, worst = statistics.median(make), max(make)
        print(f"make demo (demo + accounting-demo): median {median:.1f} s wall, max {worst:.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
