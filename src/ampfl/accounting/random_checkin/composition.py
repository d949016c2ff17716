"""Composition of T iterations of 004 Algorithm 1 (paper 004, arXiv:2205.01556v1).

``wcs``, ``ols`` and ``cs`` are events (:func:`~ampfl.accounting.random_checkin.analyses.analysis_event`)
composed T times on ampfl's accountants (``"pld"``, the default and tightest, or ``"rdp"``):

* ``wcs``: T × :class:`~ampfl.accounting.events.RandomCheckInEvent`, dominated by
  PublicParticipation(p, PoissonSampled(q, Gaussian(z))). Participation is public and data-independent, so
  the PLD accountant's δ_T(ε) = Σ_m Bin(m; T, p) δ_m(ε) is exact for the revealed mechanism;
* ``ols``: T × PoissonSampled(q, Gaussian(z)); ``cs``: T × PoissonSampled(pq, Gaussian(z)) (a lower bound).

``paper`` has no event (Thm 4.1 is a per-iteration closed form for one dataset): its T-fold guarantee is the
optimal composition theorem (Kairouz, Oh & Viswanath 2015, Thm 3.3) of the per-iteration (ε₀, δ₀) pairs,
optimised over ε₀. Like Thm 4.1 itself it is refuted (docs/audit.md) and only reported, labelled.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import optimize

from ampfl.accounting._checks import NumericalError, check_delta, check_int, check_nonnegative
from ampfl.accounting.accountants import Accountant, composed, delta_after, epsilon_after
from ampfl.accounting.random_checkin.analyses import analysis_event, check_analysis, check_noisy_mechanism
from ampfl.accounting.random_checkin.per_iteration import smallest_epsilon
from ampfl.accounting.random_checkin.theorem41 import paper_log_delta
from ampfl.accounting.subsampling import optimal_composition_log_delta

__all__ = ["composed_accountant", "delta_composed", "epsilon_composed", "paper_composed"]


def composed_accountant(
    *,
    analysis: str,
    participation: float,
    sampling_rate: float,
    noise_multiplier: float,
    iterations: int,
    local_dataset_size: int = 0,
    accountant: str = "pld",
) -> Accountant:
    """A fresh ``accountant`` that composed ``iterations`` × the event of ``analysis`` (wcs, ols or cs)."""
    event = analysis_event(
        analysis,
        participation=participation,
        sampling_rate=sampling_rate,
        noise_multiplier=noise_multiplier,
        local_dataset_size=local_dataset_size,
    )
    return composed(event, check_int("iterations", iterations, minimum=1), accountant)


def epsilon_composed(
    *,
    analysis: str,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    iterations: int,
    delta: float,
    accountant: str = "pld",
) -> float:
    """ε after ``iterations`` iterations at total ``delta`` (methods: ``COMPOSITION_METHODS``).

    ``accountant`` (``"pld"`` or ``"rdp"``) composes wcs/ols/cs; ``paper`` always uses optimal composition.
    """
    name, target = check_analysis(analysis), check_delta("delta", delta)
    mechanism = (participation, sampling_rate, local_dataset_size, noise_multiplier)
    return _composed_guarantee(name, mechanism, iterations, accountant, delta=target)


def delta_composed(
    *,
    analysis: str,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    iterations: int,
    epsilon: float,
    accountant: str = "pld",
) -> float:
    """δ after ``iterations`` iterations at total ``epsilon`` (same methods as :func:`epsilon_composed`)."""
    name, target = check_analysis(analysis), check_nonnegative("epsilon", epsilon)
    mechanism = (participation, sampling_rate, local_dataset_size, noise_multiplier)
    return _composed_guarantee(name, mechanism, iterations, accountant, epsilon=target)


def _composed_guarantee(
    name: str,
    mechanism: tuple[float, float, int, float],
    iterations: int,
    accountant: str,
    *,
    delta: float | None = None,
    epsilon: float | None = None,
) -> float:
    """ε at the checked ``delta``, or δ at the checked ``epsilon`` (the one given), of ``iterations``
    iterations of the checked analysis ``name`` of the mechanism (p, q, d, z): the accountant's composition
    for wcs/ols/cs, the optimal composition of Thm 4.1's per-iteration profile for ``paper``."""
    t = check_int("iterations", iterations, minimum=1)
    if name == "paper":
        p, q, d, z = check_noisy_mechanism(*mechanism)
        return paper_composed(lambda e0: paper_log_delta(p, q, d, z, e0)[0], t, delta=delta, epsilon=epsilon)
    p, q, d, z = mechanism  # analysis_event checks them
    event = analysis_event(name, participation=p, sampling_rate=q, noise_multiplier=z, local_dataset_size=d)
    if delta is not None:
        return epsilon_after(event, t, delta, accountant)
    assert epsilon is not None
    return delta_after(event, t, epsilon, accountant)


def paper_composed(
    log_delta0: Callable[[float], float],
    iterations: int,
    *,
    delta: float | None = None,
    epsilon: float | None = None,
) -> float:
    """ε_T(δ) (given ``delta``) or δ_T(ε) (given ``epsilon``) of ``iterations`` (ε₀, δ₀(ε₀))-DP mechanisms.

    Optimal composition (KOV 2015 Thm 3.3) of the per-iteration profile ``log_delta0``: ε₀ ↦ log δ₀, best
    ε₀ on a log grid in [1e-5, 50] refined by a bounded scalar search.

    Raises:
        NumericalError: when no ε₀ meets the target δ.
    """
    t = iterations

    def objective(log_e0: float) -> float:
        e0 = math.exp(log_e0)
        d0 = math.exp(log_delta0(e0))
        if epsilon is not None:  # minimise δ_T(ε)
            return math.exp(optimal_composition_log_delta(epsilon0=e0, delta0=d0, count=t, epsilon=epsilon))
        assert delta is not None
        if -math.expm1(t * math.log1p(-d0)) >= delta:
            return math.inf
        # at ε = T·ε₀ the randomised-response part vanishes, leaving 1 − (1 − δ₀)^T < δ: feasible.
        return smallest_epsilon(
            lambda e: optimal_composition_log_delta(epsilon0=e0, delta0=d0, count=t, epsilon=e),
            math.log(delta),
            feasible=t * e0,
        )

    grid = np.linspace(math.log(1e-5), math.log(50.0), 36)
    values = [objective(float(g)) for g in grid]
    best = int(np.argmin(values))
    lo, hi = float(grid[max(best - 1, 0)]), float(grid[min(best + 1, len(grid) - 1)])
    result = optimize.minimize_scalar(
        lambda x: min(objective(x), 1e300), bounds=(lo, hi), method="bounded", options={"xatol": 1e-4}
    )
    value = min(float(values[best]), float(result.fun))
    if not math.isfinite(value):
        raise NumericalError("paper composition: no per-iteration epsilon0 meets the target delta.")
    return min(value, 1.0) if epsilon is not None else value
