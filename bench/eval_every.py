"""Cost of evaluating (and reading ε) every round vs once at the end, as a ratio (target ≤ 1.2×).

Workload: 20 rounds (``--rounds N``: N; the target holds at 200) of DP-DSGD with random participation
(the demo's setting: digits, 100 label-skewed clients, logistic regression, p = q = 0.5, z = 4, the local
dataset size declared public as 16), the run-level RDP or PLD accountant, checkpoints and plots off.
``eval_every = 1`` and ``eval_every = N`` run interleaved in one process; medians of wall and CPU time (every
thread of the process: the steadier one when other work loads the machine) printed with the machine's load.
The ``none`` row runs without noise, so without a ledger: the cost of the evaluations alone, which the
accounting cannot remove. ``--setup``: instead, the CPU time of a 1-round DP-FedAvg run with a fixed-size
cohort (10 of 100 clients without replacement, replace-one, RDP: the set-up cost). Usage:
``.venv/bin/python bench/eval_every.py [REPEATS] [--rounds N] [--accountants none,rdp,pld] [--setup]``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.config import parse_config
from ampfl.fl.run.experiment import run_experiment

ROUNDS = 20


def _config(eval_every: int, accountant: str, rounds: int | None = None) -> dict[str, object]:
    """The workload (``rounds`` default: the module's ``ROUNDS`` when called, so a caller may set it);
    ``accountant = "none"``: the same run without noise, hence without a ledger (what
    evaluating costs by itself)."""
    return {
        "seed": 0,
        "rounds": ROUNDS if rounds is None else rounds,
        "eval_every": eval_every,
        "checkpoint_every": 0,
        "dataset": {"name": "digits"},
        "partition": {"scheme": "label_skew", "num_clients": 100, "labels_per_client": 2},
        "model": {"name": "logreg"},
        "algorithm": {
            "name": "dp_dsgd_rp",
            "noise_multiplier": 0.0 if accountant == "none" else 4.0,
            "participation": 0.5,
            "sampling_rate": 0.5,
            "local_dataset_size": 16,  # a public constant (the digits partition's size)
        },
        "privacy": {"accountant": "rdp" if accountant == "none" else accountant},
    }


def _setup(repeats: int) -> None:
    """CPU (all threads) and wall time of a 1-round fixed-size-cohort DP run: mostly its set-up."""
    config = {
        **_config(1, "rdp", 1),
        "algorithm": {
            "name": "dp_fedavg",
            "noise_multiplier": 1.0,
            "client_sampling": "fixed",
            "cohort_size": 10,
        },
        "privacy": {"accountant": "auto"},
    }
    cpu, wall = [], []
    for _ in range(repeats + 1):  # the first run pays the imports
        out = Path(tempfile.mkdtemp())
        start, cpu_start = time.perf_counter(), time.process_time()
        run_experiment(parse_config(config, algorithms=ALGORITHMS), out / "run", progress=False, plots=False)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
        shutil.rmtree(out)
    print(
        f"1-round fixed-cohort DP run: first {cpu[0]:.2f} CPU-s ({wall[0]:.2f} s wall, imports included), "
        f"then median {statistics.median(cpu[1:]):.2f} CPU-s ({statistics.median(wall[1:]):.2f} s wall); "
        f"dp-accounting imported: {'dp_accounting' in sys.modules}; load {os.getloadavg()[0]:.2f}"
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else ROUNDS
    kinds = (
        argv[argv.index("--accountants") + 1].split(",")
        if "--accountants" in argv
        else ["none", "rdp", "pld"]
    )
    flags = {"--rounds", "--accountants"}
    values = [a for i, a in enumerate(argv) if a not in flags and (i == 0 or argv[i - 1] not in flags)]
    values = [a for a in values if not a.startswith("--")]
    repeats = int(values[0]) if values else 3
    if "--setup" in argv:
        _setup(repeats)
        return
    print(f"{rounds} rounds, {repeats} repeats; load average (1 min): {os.getloadavg()[0]:.2f}")
    for accountant in kinds:
        times: dict[int, list[float]] = {1: [], rounds: []}
        cpu: dict[int, list[float]] = {1: [], rounds: []}
        for _ in range(repeats):
            for every in (1, rounds):
                config = parse_config(_config(every, accountant, rounds), algorithms=ALGORITHMS)
                out = Path(tempfile.mkdtemp())
                start, cpu_start = time.perf_counter(), time.process_time()
                run_experiment(config, out / "run", progress=False, plots=False)
                times[every].append(time.perf_counter() - start)
                cpu[every].append(time.process_time() - cpu_start)  # every thread of the process
                shutil.rmtree(out)
        each, once = statistics.median(times[1]), statistics.median(times[rounds])
        each_cpu, once_cpu = statistics.median(cpu[1]), statistics.median(cpu[rounds])
        print(
            f"{accountant}: eval_every=1 {each:.2f} s, eval_every={rounds} {once:.2f} s, "
            f"ratio {each / once:.2f}x; CPU {each_cpu:.2f} / {once_cpu:.2f} s, "
            f"ratio {each_cpu / once_cpu:.2f}x (load {os.getloadavg()[0]:.2f})"
        )


if __name__ == "__main__":
    main()
