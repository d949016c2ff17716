"""Torch threads for the simulator: time the same runs at 1 and 2 threads, interleaved, and print ratios.

Usage: .venv/bin/python bench/threads.py [repeats]. Workloads: digits DP-FedAvg (logistic regression, K = 100)
and an MLP (K = 10). Results and the default rule: docs/performance.md.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

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


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    workloads = {
        "logreg K=100 (dp_fedavg)": load_config(ROOT / "examples" / "digits_dp_fedavg.toml"),
        "mlp K=10 (fedavg)": parse_config(_cnn_config()),
    }
    print(f"load average: {os.getloadavg()}")
    for name, config in workloads.items():
        times: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(repeats):
            for threads in (1, 2):
                torch.set_num_threads(threads)
                out = Path(tempfile.mkdtemp())
                start = time.perf_counter()
                cpu0 = time.process_time()
                run_experiment(config, out / "run", progress=False)
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
                times[threads].append(wall)
                shutil.rmtree(out)
                print(f"  {name}: threads={threads} wall {wall:.2f} s cpu {cpu:.2f} s")
        one, two = statistics.median(times[1]), statistics.median(times[2])
        print(f"{name}: median wall 1 thread {one:.2f} s, 2 threads {two:.2f} s, ratio 2/1 = {two / one:.2f}")


if __name__ == "__main__":
    main()
