"""Benchmark: what ``make demo`` costs with the privacy–utility frontier, fresh processes.

Rows, interleaved (one of each per repeat, so a change of the machine's load hits them alike):

- ``table only``: the demo's six ε = 2 runs alone (``run_demo(epsilons=[2])``: the demo before the frontier);
- ``demo``: ``ampfl demo`` (the table plus the frontier: 2 algorithms × 2 accountings × the grid, the table's
  runs reused at ε = 2);
- ``accounting-demo``: ``ampfl reproduce accounting-demo``, the second command of ``make demo``.

``make demo`` (target: under ~3 minutes on 2 cores) is ``demo`` + ``accounting-demo``. The table gives the
median wall and CPU time (user + system of the child, ``getrusage``) per row, the medians' ratio to ``table
only``, and the 1-minute load average before each repeat.

Run: ``.venv/bin/python bench/demo.py [REPEATS] [--src DIR]`` (default 3 repeats). ``--src DIR`` runs the
source tree ``DIR/src`` instead of the installed one (``git archive HEAD src | tar -x -C DIR``: a committed
snapshot, steady while others edit the working tree).
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

CLI = [sys.executable, "-m", "ampfl.cli"]


def _rows(out: Path) -> dict[str, list[str]]:
    table = (
        "from ampfl.fl.demo.amplification import run_demo; "
        f"run_demo({str(out / 'table')!r}, progress=False, epsilons=[2.0])"
    )
    return {
        "table only": [sys.executable, "-c", table],
        "demo": [*CLI, "demo", "--out", str(out / "demo"), "--no-progress", "--json"],
        "accounting-demo": [*CLI, "reproduce", "accounting-demo", "--out", str(out / "acc")],
    }


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(repeats: int = 3, src: str | None = None) -> None:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(Path(src, "src").resolve())
    with tempfile.TemporaryDirectory() as folder:
        rows = _rows(Path(folder))
        wall: dict[str, list[float]] = {name: [] for name in rows}
        cpu: dict[str, list[float]] = {name: [] for name in rows}
        loads = []
        for repeat in range(repeats):
            loads.append(os.getloadavg()[0])
            for name, argv in rows.items():
                w, c = _timed(argv, env)
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
    args = sys.argv[1:]
    source = None
    if "--src" in args:
        at = args.index("--src")
        source = args[at + 1]
        del args[at : at + 2]
    main(int(args[0]) if args else 3, source)
