"""Cost of evaluating (and reading ε) every round vs once at the end, as a ratio (issue 17, target ≤ 1.2×).

Workload: 20 rounds of DP-DSGD with random participation (the demo's setting: digits, 100 label-skewed
clients, logistic regression, p = q = 0.5, z = 4), the run-level RDP or PLD accountant, checkpoints and
plots off. ``eval_every = 1`` and ``eval_every = 20`` run interleaved in one process; medians printed with the
machine's load. The ``none`` row runs without noise, so without a ledger: the cost of the evaluations alone,
which the accounting cannot remove. Usage: ``.venv/bin/python bench/eval_every.py [REPEATS]``.
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
from ampfl.fl.run import run_experiment

ROUNDS = 20


def _config(eval_every: int, accountant: str) -> dict[str, object]:
    """The workload; ``accountant = "none"``: the same run without noise, hence without a ledger (what
    evaluating costs by itself)."""
    return {
        "seed": 0,
        "rounds": ROUNDS,
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
        },
        "privacy": {"accountant": "rdp" if accountant == "none" else accountant},
    }


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")
    for accountant in ("none", "rdp", "pld"):
        times: dict[int, list[float]] = {1: [], ROUNDS: []}
        for _ in range(repeats):
            for every in (1, ROUNDS):
                config = parse_config(_config(every, accountant), algorithms=ALGORITHMS)
                out = Path(tempfile.mkdtemp())
                start = time.perf_counter()
                run_experiment(config, out / "run", progress=False, plots=False)
                times[every].append(time.perf_counter() - start)
                shutil.rmtree(out)
        each, once = statistics.median(times[1]), statistics.median(times[ROUNDS])
        print(
            f"{accountant}: eval_every=1 {each:.2f} s, eval_every={ROUNDS} {once:.2f} s, "
            f"ratio {each / once:.2f}x"
        )


if __name__ == "__main__":
    main()
