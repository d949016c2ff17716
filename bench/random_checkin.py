"""Benchmark: σ calibration of paper 004's analyses for d = 1000 (target < 50 ms each).

Run: ``.venv/bin/python bench/random_checkin.py``. Prints the median and worst wall time over repeats for a
grid of (p, q) at ε = 0.015 and ε = 1, δ = 1e-6, and the per-iteration δ evaluation time of Thm 4.1.
"""

from __future__ import annotations

import statistics
import time

from ampfl.accounting import random_checkin as rc

GRID = [(0.1, 0.001), (0.001, 0.1), (0.1, 0.1), (0.5, 0.5), (0.01, 0.9)]
TARGETS = [(0.015, 1e-6), (1.0, 1e-6)]
REPEATS = 5


def main() -> None:
    print(f"{'analysis':8s} {'p':>6s} {'q':>6s} {'eps':>6s} {'sigma':>12s} {'median ms':>10s} {'max ms':>8s}")
    worst: dict[str, float] = {a: 0.0 for a in rc.ANALYSES}
    for analysis in rc.ANALYSES:
        for p, q in GRID:
            for eps, delta in TARGETS:
                times = []
                for _ in range(REPEATS):
                    rc._binomial.cache_clear()  # include the binomial weights in the timing
                    start = time.perf_counter()
                    sigma = rc.calibrate_sigma(analysis=analysis, p=p, q=q, d=1000, epsilon=eps, delta=delta)
                    times.append(1e3 * (time.perf_counter() - start))
                worst[analysis] = max(worst[analysis], max(times))
                print(
                    f"{analysis:8s} {p:6g} {q:6g} {eps:6g} {sigma:12.6g} {statistics.median(times):10.2f} "
                    f"{max(times):8.2f}"
                )
    print("worst calibration time per analysis (ms):", {a: round(t, 2) for a, t in worst.items()})
    for d in (1000, 100_000):
        start = time.perf_counter()
        for _ in range(20):
            rc.delta_per_iteration(analysis="paper", p=0.1, q=0.5, d=d, sigma=1.0, epsilon=0.5)
        print(f"paper delta_per_iteration d={d}: {1e3 * (time.perf_counter() - start) / 20:.2f} ms")


if __name__ == "__main__":
    main()
