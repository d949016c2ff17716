"""Benchmark: noise calibration of paper 004's analyses for d = 1000 (per-iteration target < 50 ms each).

Run: ``.venv/bin/python bench/random_checkin.py``. Prints the median and worst wall time over repeats for a
grid of (p, q) at ε = 0.015 and ε = 1, δ = 1e-6 (the paper's closed forms, per iteration), the per-iteration
δ evaluation time of Thm 4.1, and the time of one composed calibration of ``wcs`` on each accountant.
"""

from __future__ import annotations

import statistics
import time
import warnings

from ampfl.accounting import random_checkin as rc
from ampfl.accounting.random_checkin.theorem41 import binomial_weights

GRID = [(0.1, 0.001), (0.001, 0.1), (0.1, 0.1), (0.5, 0.5), (0.01, 0.9)]
TARGETS = [(0.015, 1e-6), (1.0, 1e-6)]
REPEATS = 5


def main() -> None:
    print(f"{'analysis':8s} {'p':>6s} {'q':>6s} {'eps':>6s} {'z':>12s} {'median ms':>10s} {'max ms':>8s}")
    worst: dict[str, float] = {a: 0.0 for a in rc.ANALYSES}
    for analysis in rc.ANALYSES:
        for p, q in GRID:
            for eps, delta in TARGETS:
                times = []
                for _ in range(REPEATS):
                    binomial_weights.cache_clear()  # include the binomial weights in the timing
                    start = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # Thm 4.1's "no noise needed" (refuted) warning
                        z = rc.calibrate_noise_multiplier(
                            analysis=analysis,
                            participation=p,
                            sampling_rate=q,
                            local_dataset_size=1000,
                            epsilon=eps,
                            delta=delta,
                        )
                    times.append(1e3 * (time.perf_counter() - start))
                worst[analysis] = max(worst[analysis], max(times))
                print(
                    f"{analysis:8s} {p:6g} {q:6g} {eps:6g} {z:12.6g} {statistics.median(times):10.2f} "
                    f"{max(times):8.2f}"
                )
    print("worst calibration time per analysis (ms):", {a: round(t, 2) for a, t in worst.items()})
    mech = {"participation": 0.1, "sampling_rate": 0.5, "noise_multiplier": 1.0, "epsilon": 0.5}
    for d in (1000, 100_000):
        start = time.perf_counter()
        for _ in range(20):
            rc.delta_per_iteration(analysis="paper", local_dataset_size=d, **mech)
        print(f"paper delta_per_iteration d={d}: {1e3 * (time.perf_counter() - start) / 20:.2f} ms")
    for accountant in ("rdp", "pld"):
        start = time.perf_counter()
        z = rc.calibrate_noise_multiplier(
            analysis="wcs",
            participation=0.1,
            sampling_rate=0.01,
            local_dataset_size=1000,
            epsilon=1.0,
            delta=1e-5,
            iterations=1000,
            accountant=accountant,
        )
        seconds = time.perf_counter() - start
        print(f"wcs composed calibration, T = 1000, {accountant}: z = {z:.4f}, {seconds:.2f} s")


if __name__ == "__main__":
    main()
