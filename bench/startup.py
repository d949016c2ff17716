"""Benchmark: wall time of ``ampfl`` commands end to end, each in a fresh process.

Targets: under 0.3 s for ``ampfl --version`` and ``ampfl account poisson --help``; ``ampfl account poisson …
--json`` (the default accountant, PLD) at most 3× ``ampfl --version``. The row "eager figure registry"
emulates the start-up of a parser that imports every figure module to list the names (and with them numpy,
scipy and dp-accounting); ``python -c pass`` is the interpreter's floor and
``python -c 'import numpy'`` the floor of any command that computes.

The commands run interleaved (one of each per repeat, after one warm-up round that also fills the bytecode
cache), so a change of the machine's load hits them alike; the table gives the median and best wall time and
the median's ratio to ``ampfl --version``, with the 1-minute load average. ``account``, ``calibrate`` and
``plan`` let OpenBLAS's idle worker threads sleep at once (``OPENBLAS_THREAD_TIMEOUT=4``, set by the CLI
unless already set: :func:`ampfl.cli._idle_blas_threads_sleep`); the row "import numpy, idle BLAS threads
asleep" is numpy's import under the same setting, the floor of those commands. Bytecode is cached in a
temporary folder (``PYTHONPYCACHEPREFIX``), as in an installed package, whatever ``PYTHONDONTWRITEBYTECODE``
says; ``--no-bytecode`` compiles every module at every start instead.

``--baseline DIR`` adds rows for the source tree ``DIR/src`` (e.g. an older commit: ``git archive COMMIT src |
tar -x -C DIR``), run as ``python -m ampfl.cli`` with ``PYTHONPATH=DIR/src``, interleaved with the others.

Run: ``.venv/bin/python bench/startup.py [REPEATS] [--no-bytecode] [--baseline DIR]``. Under load the CPU
time of each process (user + system, its children's ``getrusage``) is the steadier measure; both are printed.
For a per-module breakdown: ``.venv/bin/python -X importtime -m ampfl.cli account poisson
--noise-multiplier 1 --rate 0.01 --steps 1000 --delta 1e-5 --json``.
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

_EAGER = (
    "import ampfl.accounting._checks\n"
    "from ampfl.reproduce import FIGURES, figure_function\n"
    "for name in FIGURES: figure_function(name)\n"
    "from ampfl.cli import main\n"
    "main(['--version'])\n"
)
_POISSON = ["--rate", "0.01", "--steps", "1000", "--delta", "1e-5", "--json"]
VERSION = "ampfl --version"


def _commands(baseline: str | None) -> list[tuple[str, list[str], str | None]]:
    script = Path(sys.executable).with_name("ampfl")
    ampfl = [str(script)] if script.exists() else [sys.executable, "-m", "ampfl.cli"]
    rows = [(label, argv, None) for label, argv in _ours(ampfl)]
    if baseline is not None:
        src = str(Path(baseline) / "src")
        base = [sys.executable, "-m", "ampfl.cli"]
        rows += [
            ("baseline: --version", [*base, "--version"], src),
            (
                "baseline: account poisson --json",
                [*base, "account", "poisson", "--noise-multiplier", "1", *_POISSON],
                src,
            ),
            (
                "baseline: account poisson rdp --json",
                [*base, "account", "poisson", "--noise-multiplier", "1", "--accountant", "rdp", *_POISSON],
                src,
            ),
            (
                "baseline: calibrate poisson --json",
                [*base, "calibrate", "poisson", "--epsilon", "2", *_POISSON],
                src,
            ),
        ]
    return rows


#: Environment of a row, on top of the bench's.
_ENV = {"import numpy, idle BLAS threads asleep": {"OPENBLAS_THREAD_TIMEOUT": "4"}}


def _ours(ampfl: list[str]) -> list[tuple[str, list[str]]]:
    return [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("python -c 'import numpy'", [sys.executable, "-c", "import numpy"]),
        ("import numpy, idle BLAS threads asleep", [sys.executable, "-c", "import numpy"]),
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


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str], env: dict[str, str], src: str | None, label: str = "") -> tuple[float, float]:
    """(wall ms, CPU ms) of one run."""
    env = {**env, **_ENV.get(label, {})}
    if src is not None:
        env = {**env, "PYTHONPATH": src}
    cpu, start = _cpu(), time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False, env=env)
    elapsed = 1e3 * (time.perf_counter() - start), 1e3 * (_cpu() - cpu)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    baseline = argv[argv.index("--baseline") + 1] if "--baseline" in argv else None
    args = [a for a in argv if not a.startswith("--") and a != baseline]
    repeats = int(args[0]) if args else 7
    env = dict(os.environ)
    cache = tempfile.TemporaryDirectory(prefix="ampfl-bench-pycache-")
    if "--no-bytecode" in argv:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache.name
    commands = _commands(baseline)
    times: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in commands}
    for label, command, src in commands:  # warm-up: the file cache and the bytecode cache
        _run(command, env, src, label)
    load = os.getloadavg()[0]
    for _ in range(repeats):
        for label, command, src in commands:
            times[label].append(_run(command, env, src, label))
    cache.cleanup()
    bytecode = "compiled at every start" if "--no-bytecode" in argv else "cached"
    print(
        f"{repeats} repeats, interleaved, fresh process each (bytecode {bytecode}); load average (1 min) "
        f"{load:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    print(
        f"  {'command':<40} {'wall ms':>8} {'best':>7} {'/ --version':>11} {'CPU ms':>8} {'/ --version':>11}"
    )

    def medians(label: str) -> tuple[float, float, float]:
        walls, cpus = [w for w, _ in times[label]], [c for _, c in times[label]]
        return statistics.median(walls), min(walls), statistics.median(cpus)

    for label, _, src in commands:
        wall, best, cpu = medians(label)
        # a baseline row's ratios are to the baseline's own --version (the same interpreter start)
        ref_wall, _, ref_cpu = medians(VERSION if src is None else "baseline: --version")
        ratios = f"{wall / ref_wall:10.2f}x {cpu:8.1f} {cpu / ref_cpu:10.2f}x"
        print(f"  {label:<40} {wall:8.1f} {best:7.1f} {ratios}")


if __name__ == "__main__":
    main()
