"""Random participation with local sampling (paper 004): per-iteration δ(ε), σ calibration, composition.

Paper 004: B. Hasırcıoğlu & D. Gündüz, "Privacy Amplification via Random Participation in Federated
Learning", arXiv:2205.01556v1. Mechanism (Algorithm 1, Eq. 4): in each iteration every client joins with
probability p; a joining client includes each of its records with probability q (both Poisson, independent);
each record's gradient is clipped to L2 norm C; the server releases Σ (clipped gradients) + N(0, σ² I_m).
Unit of privacy: one record. Neighbouring relation: add/remove one record x′ at one client (client 1 holds d
other records). Both directions are needed for add/remove DP; the paper's proof treats only "with x′ vs
without" (A.1, "without loss of generality").

Symbols (public names in brackets): p [participation probability], q [local sampling probability],
d [records of client 1 besides x′], σ = ``sigma`` [noise_std, absolute], C = ``clip`` [clip_norm], ε in nats.
Everything depends on σ only through σ/C (the noise multiplier); kernels work with C = 1, s = σ/C.

The four analyses (``ANALYSES``):
    ``paper``  Thm 4.1 as printed (Eq. 5–7): ε′ = log(1 + (e^ε − 1)/(pq)),
               c̄₁ = (1 − e^{ε−ε′})(1 − p)/(1 − pq), c̄₂ = p(1 − q)/(1 − pq)·(1 − e^{ε−ε′}) + e^{ε−ε′},
               z* the root of Eq. 7 and δ by Eq. 6. Eq. 6 equals the Eq. 28 integral
               pq∫[ξ₂ − α′c̄₁ξ₀ − α′c̄₂ξ₁]₊, the exact δ of ONE explicit dataset (every other record of
               client 1 has x′'s gradient, "a = 1"). The reduction to that dataset (A.1, Eq. 27) is unproven
               and fails: at p = 1 the dataset a = 0 attains the larger OLS value, and in 004 Section 6.2
               Thm 4.1 needs no noise at all. Provenance: [V] for the formula, [X] as a DP bound. Not
               recommended; see docs/accounting.md.
    ``wcs``    Thm 5.2 (Eq. 10–11): δ = pq·δ_G(ε″), ε″ = ε′ + log c̄₂. Algebra gives
               ε″ = log(1 + (e^ε − 1)/q), so δ_WCS = p · δ_OLS. Sound: reveal each client's participation
               (post-processing can only help the adversary); given it, client 1's round is a q-subsampled
               Gaussian (others fixed by joint convexity), so the exact profile of the revealed mechanism is
               p·δ_{q-subsampled Gaussian}(ε) ≤ p·q·δ_G(ε″) in both directions. ``RECOMMENDED_ANALYSIS``.
               Provenance: [V].
    ``ols``    Thm 5.1 (Eq. 8–9): δ = q·δ_G(log(1 + (e^ε − 1)/q)); sound (weaker than wcs). [V]
    ``cs``     Cor. 5.3: δ = pq·δ_G(log(1 + (e^ε − 1)/(pq))). The corollary prints q in Eq. 12–13 but its
               text says the rate is pq; we use pq. It describes another mechanism (central shuffling) and
               is a LOWER bound for random check-in (the exact δ of the dataset a = 0), never an upper bound.

The ``paper`` kernels (Eq. 5–7 in log space, the Eq. 28 quadrature, the σ → 0 limit) live in
:mod:`ampfl.accounting.random_checkin_theorem41`; its public names are re-exported here.

Composition over T iterations: ``ols``/``cs`` by dp-accounting's PLD of the Poisson-subsampled Gaussian;
``wcs`` exactly as δ_T(ε) = Σ_m Bin(m; T, p) δ_m(ε) (participation is public and data-independent), with the
mixture PLD of :func:`ampfl.accounting.subsampling.participation_mixture_pld`; ``paper`` by the optimal
composition theorem (Kairouz–Oh–Viswanath 2015) of per-iteration (ε₀, δ₀) pairs, optimised over ε₀.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize

from ampfl.accounting._checks import (
    NumericalError,
    check_choice,
    check_delta,
    check_int,
    check_nonnegative,
    check_positive,
    check_probability,
)
from ampfl.accounting.calibrate import calibrate_decreasing
from ampfl.accounting.gaussian import analytic_gaussian_sigma, gaussian_log_delta
from ampfl.accounting.random_checkin_theorem41 import (
    PaperTerms,
    _coefficients,
    _log_inverse_amp,
    _paper_log_delta,
    _paper_noiseless_log_delta,
    _validate,
    eq28_delta,
    paper_noiseless_delta,
    paper_terms,
)
from ampfl.accounting.random_checkin_theorem41 import _binomial as _binomial  # re-exported for bench/tests
from ampfl.accounting.subsampling import (
    composed_event,
    optimal_composition_log_delta,
    participation_mixture_pld,
    pld_delta,
    pld_epsilon,
    poisson_gaussian_event,
    subsampled_gaussian_pld,
)

ANALYSES: tuple[str, ...] = ("paper", "wcs", "ols", "cs")
#: Default analysis: the smallest of the published bounds that is provably an upper bound (see module doc).
RECOMMENDED_ANALYSIS: str = "wcs"
#: How :func:`epsilon_composed` / :func:`delta_composed` compose T iterations, per analysis.
COMPOSITION_METHODS: dict[str, str] = {
    "paper": "optimal composition (Kairouz-Oh-Viswanath 2015, Thm 3.3) of per-iteration (eps0, delta0), "
    "optimised over eps0",
    "wcs": "exact binomial mixture sum_m Bin(m; T, p) delta_m(eps) of dp-accounting PLDs "
    "(q-subsampled Gaussian)",
    "ols": "dp-accounting PLD of T Poisson(q)-subsampled Gaussians",
    "cs": "dp-accounting PLD of T Poisson(pq)-subsampled Gaussians",
}
_SIGMA_LIMITS = (1e-4, 1e7)
#: Warned by :func:`calibrate_sigma` (the CLI adds it as ``note``) when only Thm 4.1 says σ = 0 suffices.
PAPER_NO_NOISE_NOTE = (
    "Theorem 4.1 as printed claims no noise is needed; the audit (docs/audit.md) refutes this bound"
)

__all__ = [
    "ANALYSES",
    "COMPOSITION_METHODS",
    "PAPER_NO_NOISE_NOTE",
    "RECOMMENDED_ANALYSIS",
    "PaperTerms",
    "RandomCheckInEvent",
    "calibrate_sigma",
    "delta_composed",
    "delta_per_iteration",
    "epsilon_composed",
    "epsilon_per_iteration",
    "eq28_delta",
    "log_delta_per_iteration",
    "paper_noiseless_delta",
    "paper_terms",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RandomCheckInEvent:
    """One iteration of DP-DSGD with random participation (004 Algorithm 1). Data only, no math.

    Each client joins with probability ``participation_probability`` (p); a joining client includes each
    record with probability ``sampling_probability`` (q); gradients are clipped to ``clip_norm`` (C) and the
    server adds N(0, ``noise_std``² I) to the sum. Unit: one record; relation: add/remove one record at a
    client holding ``local_dataset_size`` (d) other records (Δ₂ = C). Participation is not revealed.
    """

    participation_probability: float
    sampling_probability: float
    local_dataset_size: int
    noise_std: float
    clip_norm: float = 1.0

    def __post_init__(self) -> None:
        check_probability("participation_probability", self.participation_probability)
        check_probability("sampling_probability", self.sampling_probability)
        check_int("local_dataset_size", self.local_dataset_size, minimum=0)
        check_positive("noise_std", self.noise_std)
        check_positive("clip_norm", self.clip_norm)


# -------------------------------------------------------------------------------------- per-iteration δ
def _log_delta(analysis: str, p: float, q: float, d: int, s: float, eps: float) -> float:
    if analysis == "paper":
        return _paper_log_delta(p, q, d, s, eps)[0]
    if analysis == "wcs":  # Thm 5.2 as printed: pq·δ_G(ε″), ε″ = ε′ + log c̄₂ = log α′c̄₂
        return math.log(p) + math.log(q) + gaussian_log_delta(sigma=s, epsilon=_coefficients(p, q, eps)[2])
    log_rate = math.log(q) if analysis == "ols" else math.log(p) + math.log(q)
    return log_rate + gaussian_log_delta(sigma=s, epsilon=_log_inverse_amp(eps, log_rate))


def log_delta_per_iteration(
    *, analysis: str, p: float, q: float, d: int, sigma: float, epsilon: float, clip: float = 1.0
) -> float:
    """log δ(ε) of one iteration under ``analysis`` (see the module docstring); −inf when δ underflows."""
    analysis = check_choice("analysis", analysis, ANALYSES)
    p, q, d, s = _validate(p, q, d, sigma, clip)
    return _log_delta(analysis, p, q, d, s, check_nonnegative("epsilon", epsilon))


def delta_per_iteration(
    *, analysis: str, p: float, q: float, d: int, sigma: float, epsilon: float, clip: float = 1.0
) -> float:
    """δ(ε) of one iteration of 004 Algorithm 1 under ``analysis`` (``paper``, ``wcs``, ``ols``, ``cs``).

    Args:
        analysis: one of :data:`ANALYSES`; :data:`RECOMMENDED_ANALYSIS` is the sound default.
        p: client participation probability in (0, 1].
        q: local record sampling probability in (0, 1].
        d: number of records of the client besides x′ (≥ 0; only ``paper`` uses it).
        sigma: absolute noise standard deviation (> 0).
        epsilon: ε ≥ 0 in nats.
        clip: per-record gradient norm bound C (> 0).
    """
    return math.exp(
        log_delta_per_iteration(analysis=analysis, p=p, q=q, d=d, sigma=sigma, epsilon=epsilon, clip=clip)
    )


def epsilon_per_iteration(
    *, analysis: str, p: float, q: float, d: int, sigma: float, delta: float, clip: float = 1.0
) -> float:
    """Smallest ε (to 1e-9 relative, rounded up) with δ(ε) ≤ ``delta`` for one iteration."""
    analysis = check_choice("analysis", analysis, ANALYSES)
    p, q, d, s = _validate(p, q, d, sigma, clip)
    target = math.log(check_delta("delta", delta))
    return _smallest_eps(lambda e: _log_delta(analysis, p, q, d, s, e), target)


def _smallest_eps(f: Callable[[float], float], target: float, *, feasible: float | None = None) -> float:
    """Smallest ε (bisection, rounded up) with f(ε) ≤ target, for f: ε ↦ log δ non-increasing.

    ``feasible``, when given, is an ε known to meet the target (no bracket expansion needed).
    """
    if f(0.0) <= target:
        return 0.0
    lo, hi = 0.0, 1.0 if feasible is None else feasible
    while feasible is None and f(hi) > target:
        lo, hi = hi, hi * 2.0
        if hi > 1e6:
            raise NumericalError("epsilon: no epsilon up to 1e6 meets the target delta.")
    while hi - lo > 1e-9 * hi:
        mid = 0.5 * (lo + hi)
        if f(mid) > target:
            lo = mid
        else:
            hi = mid
    return hi


# ------------------------------------------------------------------------------------------ calibration
def calibrate_sigma(
    *, analysis: str, p: float, q: float, d: int, epsilon: float, delta: float, clip: float = 1.0
) -> float:
    """Smallest noise std σ (relative tolerance 1e-6, rounded up) making one iteration (ε, δ)-DP.

    Returns 0.0 when no noise is needed: the target δ is at least the analysis's largest possible δ (pq, q or
    pq), or, for ``paper``, at least the σ → 0 limit of Thm 4.1 (:func:`paper_noiseless_delta`). The
    latter (e.g. 004 Section 6.2, p = 0.1, q = 0.001, d = 1000, ε = 0.015, δ = 1e-6) is not a sound answer:
    the audit finds explicit datasets with a larger δ, so it emits a ``UserWarning`` with
    :data:`PAPER_NO_NOISE_NOTE`.
    """
    analysis = check_choice("analysis", analysis, ANALYSES)
    p, q, d, _ = _validate(p, q, d, 1.0, clip)
    eps = check_positive("epsilon", epsilon)
    dlt = check_delta("delta", delta)
    rate = q if analysis == "ols" else p * q
    if dlt >= rate:
        return 0.0
    if analysis in ("ols", "cs"):
        base = _log_inverse_amp(eps, math.log(rate))
        return analytic_gaussian_sigma(epsilon=base, delta=dlt / rate, sensitivity=clip)
    wcs_base = _coefficients(p, q, eps)[2]
    sigma_wcs = analytic_gaussian_sigma(epsilon=wcs_base, delta=dlt / rate, sensitivity=1.0)
    if analysis == "wcs":
        return sigma_wcs * clip
    # paper: Eq. 28 falls as σ grows, so if its σ → 0 limit meets the target no noise is needed (0.0).
    if _paper_noiseless_log_delta(p, q, d, eps) <= math.log(dlt):
        warnings.warn(PAPER_NO_NOISE_NOTE, UserWarning, stacklevel=2)
        return 0.0
    # δ_paper ≤ δ_wcs (004 A.3), so σ_wcs meets the target and starts the search.
    multiplier = calibrate_decreasing(
        lambda s: _paper_log_delta(p, q, d, s, eps)[0],
        math.log(dlt),
        name="sigma",
        initial=sigma_wcs,
        lower_limit=_SIGMA_LIMITS[0],
        upper_limit=_SIGMA_LIMITS[1],
        rtol=1e-6,
    )
    return multiplier * clip


# ------------------------------------------------------------------------------------------ composition
def _composition_inputs(
    analysis: str, p: float, q: float, d: int, sigma: float, iterations: int, clip: float
) -> tuple[str, float, float, int, float, int]:
    analysis = check_choice("analysis", analysis, ANALYSES)
    p, q, d, s = _validate(p, q, d, sigma, clip)
    return analysis, p, q, d, s, check_int("iterations", iterations, minimum=1)


def _poisson_step_event(analysis: str, p: float, q: float, s: float) -> Any:
    """One iteration of ``ols`` (rate q) or ``cs`` (rate pq) as a Poisson-subsampled Gaussian event."""
    return poisson_gaussian_event(sampling_probability=q if analysis == "ols" else p * q, noise_multiplier=s)


def epsilon_composed(
    *,
    analysis: str,
    p: float,
    q: float,
    d: int,
    sigma: float,
    iterations: int,
    delta: float,
    clip: float = 1.0,
) -> float:
    """ε after ``iterations`` iterations at total ``delta`` (methods: :data:`COMPOSITION_METHODS`)."""
    analysis, p, q, d, s, t = _composition_inputs(analysis, p, q, d, sigma, iterations, clip)
    dlt = check_delta("delta", delta)
    if analysis in ("ols", "cs"):
        event = _poisson_step_event(analysis, p, q, s)
        return pld_epsilon(composed_event(event, count=t), target_delta=dlt)
    if analysis == "wcs":
        step = subsampled_gaussian_pld(sampling_probability=q, noise_multiplier=s)
        return float(
            participation_mixture_pld(step, participation_probability=p, count=t).get_epsilon_for_delta(dlt)
        )
    return _paper_composed(p, q, d, s, t, dlt=dlt, eps=None)


def delta_composed(
    *,
    analysis: str,
    p: float,
    q: float,
    d: int,
    sigma: float,
    iterations: int,
    epsilon: float,
    clip: float = 1.0,
) -> float:
    """δ after ``iterations`` iterations at total ``epsilon`` (same methods as :func:`epsilon_composed`)."""
    analysis, p, q, d, s, t = _composition_inputs(analysis, p, q, d, sigma, iterations, clip)
    eps = check_nonnegative("epsilon", epsilon)
    if analysis in ("ols", "cs"):
        event = _poisson_step_event(analysis, p, q, s)
        return min(1.0, pld_delta(composed_event(event, count=t), target_epsilon=eps))
    if analysis == "wcs":
        step = subsampled_gaussian_pld(sampling_probability=q, noise_multiplier=s)
        mixture = participation_mixture_pld(step, participation_probability=p, count=t)
        return min(1.0, float(mixture.get_delta_for_epsilon(eps)))
    return _paper_composed(p, q, d, s, t, dlt=None, eps=eps)


def _paper_composed(
    p: float, q: float, d: int, s: float, t: int, *, dlt: float | None, eps: float | None
) -> float:
    """Optimal composition (KOV 2015 Thm 3.3) of Thm 4.1's per-iteration (ε₀, δ₀), best ε₀ on a log grid."""

    def objective(log_e0: float) -> float:
        e0 = math.exp(log_e0)
        log_d0 = _paper_log_delta(p, q, d, s, e0)[0]
        d0 = math.exp(log_d0)
        if eps is not None:  # minimise δ_T(ε)
            return math.exp(optimal_composition_log_delta(epsilon0=e0, delta0=d0, count=t, epsilon=eps))
        assert dlt is not None
        if -math.expm1(t * math.log1p(-d0)) >= dlt:
            return math.inf
        log_target = math.log(dlt)
        # at ε = T·ε₀ the randomised-response part vanishes, leaving 1 − (1 − δ₀)^T < δ: feasible.
        return _smallest_eps(
            lambda e: optimal_composition_log_delta(epsilon0=e0, delta0=d0, count=t, epsilon=e),
            log_target,
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
    return min(value, 1.0) if eps is not None else value
