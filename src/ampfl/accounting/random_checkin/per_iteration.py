"""Per-iteration δ(ε) and ε(δ) of 004 Algorithm 1 under each analysis, as printed (closed forms).

Paper 004 (arXiv:2205.01556v1), one iteration, noise multiplier z = σ/C:

* ``paper``: Thm 4.1 (Eq. 5–7), :mod:`~ampfl.accounting.random_checkin.theorem41`. Not a DP bound.
* ``wcs``: Thm 5.2 (Eq. 10–11) as printed: δ = pq·δ_G(ε″), ε″ = ε′ + log c̄₂. Algebra gives
  ε″ = log(1 + (e^ε − 1)/q), so δ_WCS = p·δ_OLS. Sound: revealing each client's participation can only help
  the adversary; given it, client 1's iteration is a q-subsampled Gaussian (other clients fixed by joint
  convexity), whose profile is at most q·δ_G(log(1 + (e^ε − 1)/q)) in both directions.
* ``ols``: Thm 5.1 (Eq. 8–9): δ = q·δ_G(log(1 + (e^ε − 1)/q)); sound, weaker than wcs.
* ``cs``: Cor. 5.3: δ = pq·δ_G(log(1 + (e^ε − 1)/(pq))). The corollary prints q in Eq. 12–13, but its text
  says the rate is pq; we use pq. A lower bound for random check-in (the exact δ of the dataset a = 0).

δ_G is the exact Gaussian profile (004 Thm 2.4, Balle–Wang),
:func:`ampfl.accounting.gaussian.gaussian_log_delta`; the ols/cs form is
:func:`ampfl.accounting.subsampling.subsampled_gaussian_log_delta` (one implementation).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ampfl.accounting._checks import check_delta, check_nonnegative
from ampfl.accounting._numerics import epsilon_from_delta_curve
from ampfl.accounting.gaussian import gaussian_log_delta
from ampfl.accounting.random_checkin.analyses import check_analysis, check_noisy_mechanism
from ampfl.accounting.random_checkin.theorem41 import coefficients, paper_log_delta
from ampfl.accounting.subsampling import subsampled_gaussian_log_delta

__all__ = [
    "delta_per_iteration",
    "epsilon_per_iteration",
    "log_delta",
    "log_delta_per_iteration",
    "smallest_epsilon",
]


def log_delta(analysis: str, p: float, q: float, d: int, z: float, eps: float) -> float:
    """log δ(ε) of one iteration under ``analysis`` for validated inputs (−inf when δ underflows)."""
    if analysis == "paper":
        return paper_log_delta(p, q, d, z, eps)[0]
    if analysis == "wcs":  # Thm 5.2 as printed: pq·δ_G(ε″), ε″ = ε′ + log c̄₂ = log α′c̄₂
        return math.log(p) + math.log(q) + gaussian_log_delta(sigma=z, epsilon=coefficients(p, q, eps)[2])
    rate = q if analysis == "ols" else p * q
    return subsampled_gaussian_log_delta(sampling_rate=rate, noise_multiplier=z, epsilon=eps)


def log_delta_per_iteration(
    *,
    analysis: str,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    epsilon: float,
) -> float:
    """log δ(ε) of one iteration under ``analysis`` (see the module docstring); −inf when δ underflows."""
    name = check_analysis(analysis)
    p, q, d, z = check_noisy_mechanism(participation, sampling_rate, local_dataset_size, noise_multiplier)
    return log_delta(name, p, q, d, z, check_nonnegative("epsilon", epsilon))


def delta_per_iteration(
    *,
    analysis: str,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    epsilon: float,
) -> float:
    """δ(ε) of one iteration of 004 Algorithm 1 under ``analysis`` (``paper``, ``wcs``, ``ols``, ``cs``).

    Args:
        analysis: one of ``ANALYSES``; ``RECOMMENDED_ANALYSIS`` (``wcs``) is the sound default.
        participation: client participation probability p in (0, 1].
        sampling_rate: local record sampling probability q in (0, 1].
        local_dataset_size: records d of the client besides x′ (≥ 0; only ``paper`` uses it).
        noise_multiplier: z = noise std / clip norm (> 0).
        epsilon: ε ≥ 0 in nats.
    """
    return math.exp(
        log_delta_per_iteration(
            analysis=analysis,
            participation=participation,
            sampling_rate=sampling_rate,
            local_dataset_size=local_dataset_size,
            noise_multiplier=noise_multiplier,
            epsilon=epsilon,
        )
    )


def epsilon_per_iteration(
    *,
    analysis: str,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    delta: float,
) -> float:
    """Smallest ε (to 1e-9 relative, rounded up) with δ(ε) ≤ ``delta`` for one iteration."""
    name = check_analysis(analysis)
    p, q, d, z = check_noisy_mechanism(participation, sampling_rate, local_dataset_size, noise_multiplier)
    target = math.log(check_delta("delta", delta))
    return smallest_epsilon(lambda e: log_delta(name, p, q, d, z, e), target)


def smallest_epsilon(f: Callable[[float], float], target: float, *, feasible: float | None = None) -> float:
    """Smallest ε (bisection to 1e-9 relative, rounded up) with f(ε) ≤ target, for f: ε ↦ log δ decreasing.

    ``feasible``, when given, is an ε known to meet the target (no bracket expansion needed; checked).

    Raises:
        NumericalError: when no ε up to 1e6 (or ``feasible``) meets the target.
    """
    return epsilon_from_delta_curve(
        f,
        target,
        start=1.0 if feasible is None else feasible,
        expand=feasible is None,
        max_epsilon=1e6,
        rtol=1e-9,
        name="epsilon",
    )
