"""Target check: ampfl's PLD ε of the Poisson-subsampled Gaussian against the exact ε.

The reference ("exact") is dp-accounting's pessimistic PLD (connect-the-dots) at a 20× finer value
discretisation, which converges to the exact ε from above. The ratio printed is ampfl's ε (default
accountant, ``PLDAccountant()``: 1e-4 grid, refined for small ε) over it, and the same on the plain 1e-4
grid (``refine=False``, the behaviour before the refinement). Both are pessimistic (upper bounds on
the exact ε, so never below it); ``--optimistic`` also prints the fine optimistic ε (a lower bound on the
exact value; slow: Privacy Buckets).

    PYTHONPATH=src python bench/pld_poisson_accuracy.py [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

from dp_accounting.pld import privacy_loss_distribution as pld_lib

from ampfl.accounting.accountants.pld import PLD_DISCRETIZATION, PLDAccountant
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent

FINE = PLD_DISCRETIZATION / 20


def reference(rate: float, z: float, steps: int, delta: float, pessimistic: bool) -> float:
    one = pld_lib.from_gaussian_mechanism(
        standard_deviation=z,
        sensitivity=1.0,
        sampling_prob=rate,
        pessimistic_estimate=pessimistic,
        value_discretization_interval=FINE,
    )
    return float(one.self_compose(steps).get_epsilon_for_delta(delta))


def grid(quick: bool) -> list[tuple[float, float, int, float]]:
    if quick:
        return [(0.001, 2.6731, 100, 1e-5), (0.01, 1.0, 100, 1e-5), (0.1, 2.0, 10, 1e-12)]
    cases = list(itertools.product((0.001, 0.01, 0.1), (1.0, 5.0), (100,), (1e-3, 1e-5, 1e-12)))
    cases += [(0.001, 1.0, 10, 1e-8), (0.1, 1.0, 10, 1e-3), (0.01, 2.0, 1000, 1e-5), (0.1, 5.0, 1000, 1e-12)]
    small_eps = [(0.001, 2.6731, 100, 1e-5), (0.001, 5.0, 10, 1e-3), (0.0001, 3.0, 1000, 1e-5)]
    return [*small_eps, *cases]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three settings only")
    parser.add_argument("--optimistic", action="store_true", help="also the fine optimistic lower bound")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}; fine interval {FINE:g}")
    print(
        "| q | z | T | δ | ε ampfl | ε reference | ampfl ÷ reference | 1e-4 grid ÷ reference "
        "| fine optimistic |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    t0 = time.perf_counter()
    for rate, z, steps, delta in grid(args.quick):
        event = PoissonSampledEvent(sampling_rate=rate, event=GaussianEvent(noise_multiplier=z))
        ours = PLDAccountant().compose(event, steps).get_epsilon(delta)
        plain = PLDAccountant(refine=False).compose(event, steps).get_epsilon(delta)
        ref = reference(rate, z, steps, delta, pessimistic=True)
        opt = f"{reference(rate, z, steps, delta, pessimistic=False):.5g}" if args.optimistic else "—"
        ratio = ours / ref if ref > 0 else float("inf") if ours > 0 else 1.0
        worst = max(worst, abs(ratio - 1.0))
        print(
            f"| {rate:g} | {z:g} | {steps} | {delta:g} | {ours:.5g} | {ref:.5g} | {ratio:.4f} | "
            f"{plain / ref if ref > 0 else 1.0:.4f} | {opt} |",
            flush=True,
        )
    print(f"worst |ampfl ÷ reference − 1| {worst:.4f}; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
