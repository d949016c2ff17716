"""Benchmark: wall time of ``ampfl`` commands end to end (issues 10 part 8 and 32), each in a fresh process.

Targets: under 0.3 s for ``ampfl --version`` and ``ampfl account poisson --help`` (issue 10); ``ampfl account
poisson … --json`` (the default accountant, PLD) at most 3× ``ampfl --version`` (issue 32). The row "eager
figure registry" emulates the start-up before issue 10 part 8 (the parser imported every figure module to list
the names, and with them numpy, scipy and dp-accounting); ``python -c pass`` is the interpreter's floor and
``python -c 'import numpy'`` the floor of any command that computes.

The commands run interleaved (one of each per repeat, after one warm-up round that also fills the bytecode
cache), so a change of the machine's load hits them alike; the table gives the median and best wall time and
the median's ratio to ``ampfl --version``, with the 1-minute load average. Bytecode is cached in a temporary
folder (``PYTHONPYCACHEPREFIX``), as in an installed package, whatever ``PYTHONDONTWRITEBYTECODE`` says;
``--no-bytecode`` compiles every module at every start instead.

Run: ``.venv/bin/python bench/startup.py [REPEATS] [--no-bytecode]``. For a per-module breakdown:
``.venv/bin/python -X importtime -m ampfl.cli account poisson --noise-multiplier 1 --rate 0.01 --steps 1000
--delta 1e-5 --json``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_EAGER = (
    "import ampfl.accounting._checks\n"
    "from ampfl.reproduce import FIGURES, figure_function\n"
    "for name in FIGURES: figure_function(name)\n"
    "from ampfl.cli import main\n"
    "main(['--version'])\n"
)
_POISSON = ["--rate", "0.01", "--steps", "1000", "--delta", "1e-5", "--json"]
VERSION = "ampfl --version"


def _commands() -> list[tuple[str, list[str]]]:
    script = Path(sys.executable).with_name("ampfl")
    ampfl = [str(script)] if script.exists() else [sys.executable, "-m", "ampfl.cli"]
    return [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("python -c 'import numpy'", [sys.executable, "-c", "import numpy"]),
        (VERSION, [*ampfl, "--version"]),
        ("ampfl account poisson --help", [*ampfl, "account", "poisson", "--help"]),
        (
            "account poisson --json (auto: pld)",
            [*ampfl, "account", "poisson", "--noise-multiplier", "1", *_POISSON],
        ),
        (
            "account poisson --accountant rdp --json",
            [*ampfl, "account", "poisson", "--noise-multiplier", "1", "--accountant", "rdp", *_POISSON],
        ),
        (
            "calibrate poisson --json (auto: pld)",
            [*ampfl, "calibrate", "poisson", "--epsilon", "2", *_POISSON],
        ),
        ("ampfl reproduce --help", [*ampfl, "reproduce", "--help"]),
        ("eager figure registry + --version", [sys.executable, "-c", _EAGER]),
    ]


def _run(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False, env=env)
    elapsed = 1e3 * (time.perf_counter() - start)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    repeats = int(args[0]) if args else 7
    env = dict(os.environ)
    cache = tempfile.TemporaryDirectory(prefix="ampfl-bench-pycache-")
    if "--no-bytecode" in sys.argv:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache.name
    commands = _commands()
    times: dict[str, list[float]] = {label: [] for label, _ in commands}
    for _, argv in commands:  # warm-up: the file cache and the bytecode cache
        _run(argv, env)
    load = os.getloadavg()[0]
    for _ in range(repeats):
        for label, argv in commands:
            times[label].append(_run(argv, env))
    cache.cleanup()
    bytecode = "compiled at every start" if "--no-bytecode" in sys.argv else "cached"
    print(
        f"{repeats} repeats, interleaved, fresh process each (bytecode {bytecode}); load average (1 min) "
        f"{load:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    print(f"  {'command':<40} {'median ms':>10} {'best ms':>9} {'/ --version':>12}")
    version = statistics.median(times[VERSION])
    for label, _ in commands:
        med = statistics.median(times[label])
        print(f"  {label:<40} {med:10.1f} {min(times[label]):9.1f} {med / version:11.2f}x")


if __name__ == "__main__":
    main()
