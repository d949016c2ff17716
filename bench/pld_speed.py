"""Speed targets: PLD calibration for 1000 Poisson steps (< 2 s) and 1000 random check-in rounds with
d = 1000 (< 5 s), next to dp-accounting's own calibration calls.

ampfl: :func:`ampfl.accounting.calibrate.calibrate` on the PLD accountant (coarse-to-fine: a 10× coarser
pessimistic grid brackets the noise, the default 1e-4 grid finishes and verifies it; the PLDs through the
vectorised kernels of ``ampfl.accounting.accountants.pld_fast``), and
``random_checkin.calibrate_noise_multiplier(analysis="wcs", iterations=1000)`` for random check-in.
dp-accounting: ``mechanism_calibration.calibrate_dp_mechanism`` with its ``PLDAccountant`` (default 1e-4
grid), given the bracket [z/2, 2z] around ampfl's answer (an advantage: ampfl searches from z = 1). For the
Poisson rows it calibrates the same mechanism; dp-accounting has no random check-in event, so its row there
calibrates the inner event, T × Poisson(q)-subsampled Gaussian (the ``ols`` pair, same cost class; the
``wcs`` pair mixes it with the identity at weight 1 − p). Wall seconds; the machine load is printed, and each
ratio comes from the same run.

    PYTHONPATH=src python bench/pld_speed.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from functools import partial

from dp_accounting import dp_event, mechanism_calibration
from dp_accounting.pld import pld_privacy_accountant

from ampfl.accounting import random_checkin
from ampfl.accounting.accountants import PLDAccountant
from ampfl.accounting.calibrate import calibrate
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent

POISSON = [  # (q, target ε, δ), T = 1000
    (0.01, 1.0, 1e-5),
    (0.001, 0.1, 1e-6),
    (0.1, 8.0, 1e-5),
]
CHECKIN = [  # (p, q, target ε, δ), T = 1000, d = 1000
    (0.1, 0.01, 1.0, 1e-5),
    (0.5, 0.001, 0.5, 1e-6),
]
STEPS = 1000
LOCAL = 1000


def timed(fn: Callable[[], float], repeat: int) -> tuple[float, float]:
    """(result, best wall seconds over ``repeat`` runs)."""
    best, out = float("inf"), 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


def dp_accounting_calibrate(rate: float, z_guess: float, eps: float, delta: float) -> float:
    return float(
        mechanism_calibration.calibrate_dp_mechanism(
            pld_privacy_accountant.PLDAccountant,
            lambda z: dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(rate, dp_event.GaussianDpEvent(z)), STEPS
            ),
            eps,
            delta,
            mechanism_calibration.ExplicitBracketInterval(0.5 * z_guess, 2.0 * z_guess),
        )
    )


def poisson_event(rate: float, z: float) -> PoissonSampledEvent:
    return PoissonSampledEvent(sampling_rate=rate, event=GaussianEvent(noise_multiplier=z))


def ampfl_poisson(rate: float, eps: float, delta: float) -> float:
    return calibrate(
        partial(poisson_event, rate), target_epsilon=eps, target_delta=delta, accountant="pld", count=STEPS
    )


def ampfl_checkin(p: float, rate: float, eps: float, delta: float) -> float:
    return random_checkin.calibrate_noise_multiplier(
        analysis="wcs",
        participation=p,
        sampling_rate=rate,
        local_dataset_size=LOCAL,
        epsilon=eps,
        delta=delta,
        iterations=STEPS,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per call (the best time is kept)")
    args = parser.parse_args(argv)
    print(f"load average at start {os.getloadavg()[0]:.1f} (2-core machine)")
    print(
        "| mechanism | q | ε | δ | z ampfl | ε at z (check) | ampfl s | z dp-acc. | dp-acc. s "
        "| ampfl ÷ dp-acc. | load |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows: list[tuple[str, float, float, float, Callable[[], float], Callable[[float], float]]] = []
    for rate, eps, delta in POISSON:
        rows.append(
            (
                f"Poisson, T = {STEPS}",
                rate,
                eps,
                delta,
                partial(ampfl_poisson, rate, eps, delta),
                lambda z, rate=rate, delta=delta: (
                    PLDAccountant().compose(poisson_event(rate, z), STEPS).get_epsilon(delta)
                ),
            )
        )
    for p, rate, eps, delta in CHECKIN:
        rows.append(
            (
                f"random check-in wcs, T = {STEPS}, d = {LOCAL}, p = {p:g} (dp-acc.: inner Poisson(q) event)",
                rate,
                eps,
                delta,
                partial(ampfl_checkin, p, rate, eps, delta),
                lambda z, p=p, rate=rate, delta=delta: random_checkin.epsilon_composed(
                    analysis="wcs",
                    participation=p,
                    sampling_rate=rate,
                    local_dataset_size=LOCAL,
                    noise_multiplier=z,
                    delta=delta,
                    iterations=STEPS,
                ),
            )
        )
    for name, rate, eps, delta, ours, check in rows:
        z, t_ours = timed(ours, args.repeat)
        z_ref, t_ref = timed(partial(dp_accounting_calibrate, rate, z, eps, delta), args.repeat)
        print(
            f"| {name} | {rate:g} | {eps:g} | {delta:g} | {z:.4f} | {check(z):.4f} | {t_ours:.2f} | "
            f"{z_ref:.4f} | {t_ref:.2f} | {t_ours / t_ref:.2f} | {os.getloadavg()[0]:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
