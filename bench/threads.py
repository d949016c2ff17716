"""Torch threads for the simulator: time the same runs at 1 and 2 threads, interleaved, and print ratios.

Usage: .venv/bin/python bench/threads.py [repeats] [--rounds N] (N: every workload's rounds). Workloads:
digits DP-FedAvg (logistic regression, K = 100) and an MLP (K = 10). Results and the default rule:
docs/performance.md.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ampfl.fl.config import load_config, parse_config
from ampfl.fl.run.experiment import run_experiment

ROOT = Path(__file__).resolve().parents[1]


def _cnn_config() -> dict:
    return {
        "seed": 0,
        "rounds": 5,
        "eval_every": 5,
        "checkpoint_every": 0,
        "dataset": {"name": "digits"},
        "partition": {"scheme": "iid", "num_clients": 10},
        "model": {"name": "mlp"},
        "algorithm": {"name": "fedavg", "num_local_steps": 5, "batch_size": 16, "learning_rate": 0.05},
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else None
    values = [a for i, a in enumerate(argv) if not a.startswith("--") and argv[i - 1 : i] != ["--rounds"]]
    repeats = int(values[0]) if values else 3
    workloads = {
        "logreg K=100 (dp_fedavg)": load_config(ROOT / "examples" / "digits_dp_fedavg.toml"),
        "mlp K=10 (fedavg)": parse_config(_cnn_config()),
    }
    if rounds is not None:
        workloads = {
            name: c.model_copy(update={"rounds": rounds, "eval_every": rounds, "checkpoint_every": 0})
            for name, c in workloads.items()
        }
    print(f"load average: {os.getloadavg()}")
    for name, config in workloads.items():
        times: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(repeats):
            for threads in (1, 2):
                # run_experiment sets torch's threads from [engine] threads (and restores the caller's)
                engine = config.engine.model_copy(update={"threads": threads})
                out = Path(tempfile.mkdtemp())
                start = time.perf_counter()
                cpu0 = time.process_time()
                run_experiment(config.model_copy(update={"engine": engine}), out / "run", progress=False)
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
                times[threads].append(wall)
                shutil.rmtree(out)
                print(f"  {name}: threads={threads} wall {wall:.2f} s cpu {cpu:.2f} s")
        one, two = statistics.median(times[1]), statistics.median(times[2])
        print(f"{name}: median wall 1 thread {one:.2f} s, 2 threads {two:.2f} s, ratio 2/1 = {two / one:.2f}")


if __name__ == "__main__":
    main()
