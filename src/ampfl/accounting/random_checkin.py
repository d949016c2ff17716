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

Numerics: δ is computed from survival functions in log space (``log_ndtr``), never from the printed
1 − α′c̄₂ + … form, which cancels catastrophically. z* is found by bracket expansion on the monotone
log-likelihood ratio h(z) (single crossing holds: the posterior over the binomial index is monotone in z).
The binomial weights are truncated where they fall below e^{−230} of the mode; the neglected mass of ξ₂ is
added to δ, so δ stays an upper bound of Eq. 28.

Composition over T iterations: ``ols``/``cs`` by dp-accounting's PLD of the Poisson-subsampled Gaussian;
``wcs`` exactly as δ_T(ε) = Σ_m Bin(m; T, p) δ_m(ε) (participation is public and data-independent), with the
mixture PLD of :func:`ampfl.accounting.subsampling.participation_mixture_pld`; ``paper`` by the optimal
composition theorem (Kairouz–Oh–Viswanath 2015) of per-iteration (ε₀, δ₀) pairs, optimised over ε₀.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import integrate, optimize, special, stats

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
from ampfl.accounting.subsampling import (
    _deamplified,
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
_LOG_WEIGHT_CUT = 230.0  # binomial weights below e^-230 of the mode are dropped (their ξ₂ mass is added to δ)
_SIGMA_LIMITS = (1e-4, 1e7)


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


@dataclass(frozen=True, slots=True)
class PaperTerms:
    """The pieces of 004 Thm 4.1 for one (p, q, d, σ, C, ε); ``z_star`` is in absolute units (× C)."""

    epsilon: float
    epsilon_prime: float  # ε′ with ε = log(1 + pq(e^{ε′} − 1)), Eq. 5
    beta: float  # e^{ε − ε′}
    c1_bar: float
    c2_bar: float
    epsilon_double_prime: float  # ε″ = ε′ + log c̄₂ (Thm 5.2) = log(α′ c̄₂)
    z_star: float  # root of Eq. 7
    delta: float  # Eq. 6 (= Eq. 28), from survival functions, truncated mass added


# ----------------------------------------------------------------------------------------------- validation
def _validate(p: float, q: float, d: int, sigma: float, clip: float) -> tuple[float, float, int, float]:
    p = check_probability("p", p)
    q = check_probability("q", q)
    d = check_int("d", d, minimum=0)
    sigma = check_positive("sigma", sigma)
    clip = check_positive("clip", clip)
    return p, q, d, sigma / clip


def _log1mexp(x: float) -> float:
    """log(1 − e^x) for x ≤ 0 (−inf at 0)."""
    if x >= 0.0:
        return -math.inf
    return math.log(-math.expm1(x)) if x > -0.693 else math.log1p(-math.exp(x))


def _log_inverse_amp(eps: float, log_rate: float) -> float:
    """log(1 + (e^ε − 1)/r) for rate r = e^{log_rate} (the base ε whose amplification by r is ε)."""
    return _deamplified(eps, log_rate)


def _coefficients(p: float, q: float, eps: float) -> tuple[float, float, float]:
    """(ε′, log α′c̄₁, log α′c̄₂) of Thm 4.1 in log space; α′ = e^{ε′}."""
    log_pq = math.log(p) + math.log(q)
    eps_prime = _log_inverse_amp(eps, log_pq)
    log_gap = eps_prime + _log1mexp(eps - eps_prime)  # log(e^{ε′} − e^{ε})
    if p == 1.0:
        log_a1 = -math.inf
    else:
        log_a1 = log_gap + math.log1p(-p) - math.log1p(-p * q)
    if p * q == 1.0 or q == 1.0:
        log_a2 = eps  # c₂ = 0 (q = 1) or β = 1 (pq = 1)
    else:
        log_c2 = math.log(p) + math.log1p(-q) - math.log1p(-p * q)
        log_a2 = float(np.logaddexp(log_gap + log_c2, eps))
    return eps_prime, log_a1, log_a2


@functools.lru_cache(maxsize=64)
def _binomial(d: int, q: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Indices i, log Bin(i; d, q) kept after truncation, and log of the dropped mass."""
    if q == 1.0:
        return np.array([float(d)]), np.array([0.0]), -math.inf
    i = np.arange(d + 1, dtype=np.float64)
    logw = stats.binom.logpmf(i, d, q)
    keep = logw >= logw.max() - _LOG_WEIGHT_CUT
    lo, hi = int(i[keep][0]), int(i[keep][-1])
    low_tail = float(stats.binom.logcdf(lo - 1, d, q)) if lo > 0 else -math.inf
    high_tail = float(stats.binom.logsf(hi, d, q)) if hi < d else -math.inf
    i_keep, w_keep = i[lo : hi + 1].copy(), logw[lo : hi + 1].copy()
    i_keep.flags.writeable = False
    w_keep.flags.writeable = False
    return i_keep, w_keep, float(np.logaddexp(low_tail, high_tail))


def _lse(x: np.ndarray) -> float:
    """log Σ e^x (fast; scipy's logsumexp has a large per-call overhead)."""
    m = float(np.max(x))
    if m == -math.inf:
        return -math.inf
    return m + math.log(float(np.sum(np.exp(x - m))))


def _log_ratio(z: float, i: np.ndarray, logw: np.ndarray, s: float, log_a1: float, log_a2: float) -> float:
    """h(z) = log ξ₂(z) − log(α′c̄₁ξ₀(z) + α′c̄₂ξ₁(z)) (common factor e^{−z²/2s²} removed); increasing in z."""
    inv = 1.0 / (s * s)
    num = _lse(logw + (z * (i + 1.0) - 0.5 * (i + 1.0) ** 2) * inv)
    den1 = _lse(logw + (z * i - 0.5 * i * i) * inv)
    return float(num - np.logaddexp(log_a1, log_a2 + den1))


def _z_star(i: np.ndarray, logw: np.ndarray, s: float, log_a1: float, log_a2: float) -> float:
    """Root of Eq. 7 (in units of C) by bracket expansion and Brent's method on h(z)."""

    def h(z: float) -> float:
        return _log_ratio(z, i, logw, s, log_a1, log_a2)

    z0 = float(np.exp(_lse(logw + np.log(i + 1.0)))) + 0.5  # near the bulk of ξ₂
    h0 = h(z0)
    if h0 == 0.0:
        return z0
    step = max(1.0, s)
    direction = 1.0 if h0 < 0.0 else -1.0
    near = z0
    for _ in range(200):
        far = near + direction * step
        if (h(far) > 0.0) == (direction > 0.0):
            lo, hi = (near, far) if direction > 0 else (far, near)
            return float(optimize.brentq(h, lo, hi, xtol=1e-12 * max(1.0, abs(far)), rtol=1e-14))
        near, step = far, step * 2.0
    raise NumericalError("z*: no sign change of Eq. 7 found by bracket expansion.")


def _paper_log_delta(p: float, q: float, d: int, s: float, eps: float) -> tuple[float, PaperTerms]:
    eps_prime, log_a1, log_a2 = _coefficients(p, q, eps)
    i, logw, log_tail = _binomial(d, q)
    z = _z_star(i, logw, s, log_a1, log_a2)
    log_a = _lse(logw + special.log_ndtr(-(z - i - 1.0) / s))
    log_b = np.logaddexp(
        log_a2 + _lse(logw + special.log_ndtr(-(z - i) / s)), log_a1 + special.log_ndtr(-z / s)
    )
    if not log_b < log_a:
        raise NumericalError(
            f"Thm 4.1: survival terms do not separate at z* = {z:g} (log A = {log_a}, log B = {log_b})."
        )
    log_diff = float(log_a + _log1mexp(float(log_b - log_a)))
    log_delta = math.log(p) + math.log(q) + float(np.logaddexp(log_diff, log_tail))
    beta = math.exp(eps - eps_prime)
    terms = PaperTerms(
        epsilon=eps,
        epsilon_prime=eps_prime,
        beta=beta,
        c1_bar=math.exp(log_a1 - eps_prime),
        c2_bar=math.exp(log_a2 - eps_prime),
        epsilon_double_prime=log_a2,
        z_star=z,
        delta=math.exp(log_delta),
    )
    return log_delta, terms


def _paper_noiseless_log_delta(p: float, q: float, d: int, eps: float) -> float:
    """log of the σ → 0 limit of Eq. 28, pq Σ_i [w_i − α′c̄₂ w_{i+1}]₊ (+ dropped mass) = sup_σ Eq. 6."""
    _, _, log_a2 = _coefficients(p, q, eps)
    _, logw, log_tail = _binomial(d, q)
    log_next = np.append(logw[1:], -math.inf) + log_a2
    pos = logw > log_next
    if not pos.any():
        return math.log(p) + math.log(q) + log_tail
    log_terms = logw[pos] + np.log(-np.expm1(log_next[pos] - logw[pos]))
    return math.log(p) + math.log(q) + float(np.logaddexp(_lse(log_terms), log_tail))


def paper_noiseless_delta(*, p: float, q: float, d: int, epsilon: float) -> float:
    """The σ → 0 limit of Thm 4.1's δ, which is also its supremum over σ (δ of Eq. 28 falls as σ grows,
    by data processing: more noise is a common Markov kernel on all three mixtures).

    As σ → 0 the Gaussians of Eq. 28 separate on the lattice ℕ·C and δ/pq = Σ_i [w_i − α′c̄₂ w_{i+1}]₊ with
    w = Bin(d, q). When this is below a target δ, Thm 4.1 certifies (ε, δ) with NO noise at all, which
    exposes that its reduction to the dataset a = 1 is not a worst case (e.g. 004 Section 6.2).
    """
    p = check_probability("p", p)
    q = check_probability("q", q)
    d = check_int("d", d, minimum=0)
    return math.exp(_paper_noiseless_log_delta(p, q, d, check_nonnegative("epsilon", epsilon)))


def paper_terms(*, p: float, q: float, d: int, sigma: float, epsilon: float, clip: float = 1.0) -> PaperTerms:
    """ε′, c̄₁, c̄₂, ε″, z* and δ of 004 Thm 4.1 (Eq. 5–7) as printed; ``z_star`` in absolute units."""
    p, q, d, s = _validate(p, q, d, sigma, clip)
    eps = check_nonnegative("epsilon", epsilon)
    terms = _paper_log_delta(p, q, d, s, eps)[1]
    return PaperTerms(**{**_asdict(terms), "z_star": terms.z_star * float(clip)})


def _asdict(terms: PaperTerms) -> dict[str, float]:
    return {name: getattr(terms, name) for name in PaperTerms.__dataclass_fields__}


def eq28_delta(*, p: float, q: float, d: int, sigma: float, epsilon: float, clip: float = 1.0) -> float:
    """δ of 004 Eq. 28 by adaptive quadrature of pq∫ξ₂(z)[1 − e^{−h(z)}]₊dz (no closed form, no z* formula).

    This is the exact δ ("with x′ vs without") of the explicit dataset in which every record of client 1 has
    the gradient of x′ (norm C, "a = 1") and all other clients contribute 0. Slow; a cross-check of Eq. 6.
    """
    p, q, d, s = _validate(p, q, d, sigma, clip)
    eps = check_nonnegative("epsilon", epsilon)
    _, log_a1, log_a2 = _coefficients(p, q, eps)
    i, logw, log_tail = _binomial(d, q)
    z_split = _z_star(i, logw, s, log_a1, log_a2)
    log_norm = -0.5 * math.log(2.0 * math.pi) - math.log(s)

    def integrand(z: float) -> float:
        log_xi2 = _lse(logw - 0.5 * ((z - i - 1.0) / s) ** 2) + log_norm
        h = _log_ratio(z, i, logw, s, log_a1, log_a2)
        return float(math.exp(log_xi2) * -math.expm1(-h)) if h > 0.0 else 0.0

    lo, hi = float(i[0]) + 1.0 - 40.0 * s, float(i[-1]) + 1.0 + 40.0 * s
    pieces = [(lo, min(z_split, hi)), (max(z_split, lo), hi)]
    total = 0.0
    for a, b in pieces:
        if b > a:
            total += integrate.quad(integrand, a, b, epsabs=0.0, epsrel=1e-11, limit=2000)[0]
    if hi < z_split:  # the crossing sits beyond the bulk: integrate its tail in a shifted variable
        total += integrate.quad(
            lambda t: integrand(z_split + t), 0.0, math.inf, epsabs=0.0, epsrel=1e-11, limit=2000
        )[0]
    return p * q * (total + math.exp(log_tail))


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
    pq), or, for ``paper``, at least the σ → 0 limit of Thm 4.1 (:func:`paper_noiseless_delta`).
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
        event = poisson_gaussian_event(
            sampling_probability=q if analysis == "ols" else p * q, noise_multiplier=s
        )
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
        event = poisson_gaussian_event(
            sampling_probability=q if analysis == "ols" else p * q, noise_multiplier=s
        )
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
