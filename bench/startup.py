"""Benchmark: wall time of ``ampfl`` start-up (issue 10 part 8), each command in a fresh process.

Target: under 0.3 s for ``ampfl --version`` and ``ampfl account poisson --help``. The row "eager figure
registry" emulates the start-up before part 8 (the parser imported every figure module to list the names,
and with them numpy, scipy and dp-accounting), so the ratio is measured on the same machine in one run.
``python -c pass`` is the interpreter's own floor.

Run: ``.venv/bin/python bench/startup.py [REPEATS]``. Prints the median and best wall time in ms.
For a per-module breakdown: ``.venv/bin/python -X importtime -c "from ampfl.cli import build_parser;
build_parser()"``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

_EAGER = (
    "import ampfl.accounting._checks\n"
    "from ampfl.reproduce import FIGURES, figure_function\n"
    "for name in FIGURES: figure_function(name)\n"
    "from ampfl.cli import main\n"
    "main(['--version'])\n"
)


def _commands() -> list[tuple[str, list[str]]]:
    script = Path(sys.executable).with_name("ampfl")
    ampfl = [str(script)] if script.exists() else [sys.executable, "-m", "ampfl.cli"]
    return [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("ampfl --version", [*ampfl, "--version"]),
        ("ampfl account poisson --help", [*ampfl, "account", "poisson", "--help"]),
        ("ampfl reproduce --help", [*ampfl, "reproduce", "--help"]),
        ("eager figure registry + --version", [sys.executable, "-c", _EAGER]),
    ]


def _time(argv: list[str], repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, check=False)
        times.append(1e3 * (time.perf_counter() - start))
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    times = times[1:]  # the first run warms the file cache
    return statistics.median(times), min(times)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    print(f"{repeats} repeats, fresh process each; wall time in ms (median / best)")
    results = {}
    for label, argv in _commands():
        med, best = _time(argv, repeats)
        results[label] = med
        print(f"  {label:<36} {med:8.1f} / {best:8.1f}")
    eager = results["eager figure registry + --version"]
    for label in ("ampfl --version", "ampfl account poisson --help"):
        print(f"  speed-up of {label!r} over the eager registry: {eager / results[label]:.1f}x")


if __name__ == "__main__":
    main()
