"""Auditor for random participation with local sampling (paper 004): exact δ(ε) of explicit datasets.

Mechanism (arXiv:2205.01556v1, Algorithm 1, one iteration): client 1 participates with probability p
(``participation``); if it does, each of its samples is included independently with probability q
(``sampling_rate``); the server releases the sum of the included clipped gradients plus N(0, σ²I) (the public
scaling 1/(p N_t q d) of Eq. (4) is post-processing and is dropped). Everything scales with the clip norm C,
so the auditor works in units of C = 1: σ is the noise multiplier z = σ/C (``noise_multiplier``).

Datasets audited. Every other client contributes the zero gradient. Client 1 holds d
(``local_dataset_size``) samples whose gradients all equal ``a·C·u`` with ``a ∈ [-1, 1]``, where ``u`` is the
unit direction of the gradient of the differing sample ``x'`` (norm ``C``). Along ``u`` the output is
one-dimensional (the orthogonal noise is identical under both datasets); with M ~ Bin(d, q), B ~ Bern(p):

    Q = law under D' (without x'):  (1-p) N(0, σ²) + p Σ_m Bin(m; d, q) N(a C m, σ²),
    P = law under D  (with x'):     (1-p) N(0, σ²)
                                    + p Σ_m Bin(m; d, q) [(1-q) N(a C m, σ²) + q N(a C m + C, σ²)].

Directions (add/remove neighbouring relation, paper 004 Definition 2.1):
    ``"add"``    δ = H_{e^ε}(P ‖ Q) = ∫ (P − e^ε Q)_+ : the dataset *with* x' first (the paper's Eq. (19)),
    ``"remove"`` δ = H_{e^ε}(Q ‖ P) = ∫ (Q − e^ε P)_+ : the dataset *without* x' first.

Hand-derivable cases (used in the tests): at ``a = 0`` the add direction equals p q δ_G(ε') with
ε' = log(1 + (e^ε − 1)/(p q)) and δ_G the Gaussian δ of sensitivity C (advanced joint convexity, Balle et
al. 2018 Thm 2, with the mixture weight γ = p q); at ``a = 1`` the add direction equals the integral of
Eq. (28) exactly (the joint-convexity step of Eq. (22) is tight when the other clients are fixed), i.e.
Thm 4.1's δ when Eq. (7) has a single root; for p = q = 1 both directions are δ_G(ε).

Numerics. The integrand is a signed Gaussian mixture f = Σ_k c_k N(y; μ_k, σ²), whose coefficients are
formed analytically (e.g. 1 − q − e^ε = −(q + expm1 ε)), so the large terms never cancel numerically.
f is evaluated as A − B (positive and negative parts) by log-sum-exp, and f = A·(−expm1(log B − log A)).
Sign changes are located on a scan of 16 points per σ and refined by vectorised bisection; the positive
set is cut into panels of width ≤ σ/2, each integrated with 16- and 8-point Gauss–Legendre, and panels whose
two rules disagree by more than their share of the tolerance are bisected (adaptive grid). The signed f
is integrated over the panels found positive, so a sign change missed by the scan can only lower the
estimate (the audit stays a lower bound). ``error`` bounds |estimate − true δ| from quadrature (Σ|G16 −
G8|), rounding, the integration range, dropped distant components and the truncated binomial tails.

References:
    B. Hasırcıoğlu, D. Gündüz, "Privacy amplification via random participation in federated learning",
    arXiv:2205.01556v1: Algorithm 1, Thm 4.1 (Eqs. (5)–(7)), Appendix A.1 (Eqs. (14)–(29)).
    Balle, Barthe, Gaboardi, "Privacy amplification by subsampling", NeurIPS 2018, Thm 2 (advanced joint
    convexity). Provenance: [C] (independent implementation, checked against closed forms).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, stats

from ampfl.accounting._checks import (
    NumericalError,
    check_choice,
    check_int,
    check_nonnegative,
    check_positive,
    check_probability,
    check_range,
)
from ampfl.accounting.audit._mixture_integral import (
    FloatArray,
    SignedMixture,
    integrate_positive_part,
    signed_mixture,
)

#: The two orderings of a neighbouring pair: ``"add"`` = H(M(D with x') ‖ M(D' without x')),
#: ``"remove"`` = H(M(D' without x') ‖ M(D with x')).
DIRECTIONS: tuple[str, ...] = ("add", "remove")

_BINOM_KEEP = 1e-34  # binomial terms below this probability are dropped (their mass enters the error)


@dataclass(frozen=True, slots=True)
class DeltaEstimate:
    """Integrated δ of one dataset and direction.

    Attributes:
        delta: the integral of f over the panels found positive (≥ 0).
        error: bound on |delta − true δ| (except sign changes closer than σ/16, which only lower delta).
        closed_form: the same δ from the located roots, Σ_k c_k [Φ]_intervals (paper Eq. (6) at a = 1),
            or ``None`` when too expensive; an independent check of the quadrature.
        num_intervals: number of maximal intervals where f > 0 (Eq. (28) assumes one).
    """

    delta: float
    error: float
    closed_form: float | None
    num_intervals: int

    @property
    def lower(self) -> float:
        """A certified lower bound on the true δ of this dataset: max(0, delta − error)."""
        return max(0.0, self.delta - self.error)


@dataclass(frozen=True, slots=True)
class AnalysisCheck:
    """One analysis' claimed per-iteration δ(ε) against the audit.

    Attributes:
        delta: the analysis' δ(ε), or ``None`` if it could not be computed (see ``note``).
        violated: True when ``delta`` is below the audited lower bound (beyond ``claim_rtol``).
        ratio: audited lower bound / claimed δ (> 1 means the claim is too small), or ``None``.
        note: why ``delta`` is missing, if it is.
    """

    delta: float | None
    violated: bool
    ratio: float | None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class DirectionResult:
    """The worst dataset found for one direction (if every δ found is 0, ``worst_a`` is the first a, −1)."""

    max_delta: float
    worst_a: float
    error: float
    lower: float


@dataclass(frozen=True, slots=True)
class AuditResult:
    """Worst-case δ found over a ∈ [-1, 1] and both directions, and the verdict for each analysis.

    Attributes:
        max_delta: the largest integrated δ found.
        worst_a: the a of that dataset.
        direction: ``"add"`` (with x' vs without) or ``"remove"`` (without x' vs with).
        integration_error: error bound of ``max_delta``.
        lower_bound: certified lower bound max(0, max_delta − integration_error) used for verdicts.
        analyses: analysis name → :class:`AnalysisCheck`.
        by_direction: direction → :class:`DirectionResult`.
        evaluations: number of integrations performed.
    """

    max_delta: float
    worst_a: float
    direction: str
    integration_error: float
    lower_bound: float
    analyses: dict[str, AnalysisCheck] = field(default_factory=dict)
    by_direction: dict[str, DirectionResult] = field(default_factory=dict)
    evaluations: int = 0


@dataclass(frozen=True, slots=True)
class _Binomial:
    m: FloatArray
    log_w: FloatArray
    dropped: float  # total probability of the dropped terms


def _binomial(d: int, q: float) -> _Binomial:
    if d == 0 or q == 1.0:
        return _Binomial(np.array([float(d)]), np.array([0.0]), 0.0)
    mean, sd = d * q, math.sqrt(d * q * (1.0 - q))
    lo = max(0, math.floor(mean - 15.0 * sd - 30.0))
    hi = min(d, math.ceil(mean + 15.0 * sd + 30.0))
    m = np.arange(lo, hi + 1, dtype=np.float64)
    log_w = np.asarray(stats.binom.logpmf(m, d, q), dtype=np.float64)
    keep = log_w >= math.log(_BINOM_KEEP)
    outside = float(stats.binom.cdf(lo - 1, d, q)) + float(stats.binom.sf(hi, d, q))
    dropped = float(np.exp(log_w[~keep]).sum()) + outside
    return _Binomial(m[keep], log_w[keep], dropped)


def _mixture(
    *, a: float, p: float, q: float, z: float, epsilon: float, direction: str, binom: _Binomial
) -> SignedMixture:
    em1 = math.expm1(epsilon)
    log_p = math.log(p)
    base = binom.m * a
    mus: dict[int, list[FloatArray]] = {1: [], -1: []}
    logs: dict[int, list[FloatArray]] = {1: [], -1: []}

    def add(sign: int, mu: FloatArray, logc: FloatArray) -> None:
        mus[sign].append(mu)
        logs[sign].append(logc)

    if p < 1.0 and em1 > 0.0:  # non-participation: (1 − p)(1 − e^ε) N(0), negative in both directions
        add(-1, np.zeros(1), np.array([math.log1p(-p) + math.log(em1)]))
    if direction == "add":  # f = P − e^ε Q
        if q + em1 > 0.0:
            add(-1, base, log_p + binom.log_w + math.log(q + em1))
        add(1, base + 1.0, log_p + binom.log_w + math.log(q))
    else:  # f = Q − e^ε P
        coef = q * math.exp(epsilon) - em1  # 1 − e^ε (1 − q)
        if coef != 0.0:
            add(1 if coef > 0 else -1, base, log_p + binom.log_w + math.log(abs(coef)))
        add(-1, base + 1.0, log_p + binom.log_w + math.log(q) + epsilon)
    return signed_mixture(mus, logs, z)


def _validate(
    participation: object,
    sampling_rate: object,
    local_dataset_size: object,
    noise_multiplier: object,
    epsilon: object,
) -> tuple[float, float, int, float, float]:
    return (
        check_probability("participation", participation),
        check_probability("sampling_rate", sampling_rate),
        check_int("local_dataset_size", local_dataset_size, minimum=0, maximum=1_000_000),
        check_positive("noise_multiplier", noise_multiplier),
        check_nonnegative("epsilon", epsilon),
    )


def _estimate(
    *, a: float, p: float, q: float, z: float, epsilon: float, direction: str, binom: _Binomial
) -> DeltaEstimate:
    mix = _mixture(a=a, p=p, q=q, z=z, epsilon=epsilon, direction=direction, binom=binom)
    result = integrate_positive_part(mix)
    truncation = p * binom.dropped * (1.0 + math.exp(epsilon)) if mix.pos_mu.size else 0.0
    return DeltaEstimate(result.value, result.error + truncation, result.closed_form, result.num_intervals)


def true_delta_estimate(
    *,
    a: float,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    epsilon: float,
    direction: str = "add",
) -> DeltaEstimate:
    """Exact per-iteration δ(ε) of Algorithm 1 on one explicit dataset, with its error bound.

    Args:
        a: the other samples of client 1 each have gradient ``a·C·u`` (a ∈ [-1, 1]).
        participation: client participation probability p, in (0, 1].
        sampling_rate: local Poisson sampling probability q, in (0, 1].
        local_dataset_size: number d of samples of client 1 besides x' (integer in [0, 10^6]).
        noise_multiplier: z = noise std / clip norm, > 0.
        epsilon: ε ≥ 0 in nats.
        direction: ``"add"`` = H_{e^ε}(M(D with x') ‖ M(D' without x')); ``"remove"`` = the reverse.

    Returns:
        A :class:`DeltaEstimate` (``delta``, ``error``, ``closed_form``, ``num_intervals``).

    Raises:
        ValueError: for parameters outside their ranges.
        NumericalError: if the integration would need too many points or does not converge.
    """
    p, q, d, z, eps = _validate(participation, sampling_rate, local_dataset_size, noise_multiplier, epsilon)
    a_ = check_range("a", a, -1.0, 1.0)
    direction_ = check_choice("direction", direction, DIRECTIONS)
    return _estimate(a=a_, p=p, q=q, z=z, epsilon=eps, direction=direction_, binom=_binomial(d, q))


def true_delta(
    *,
    a: float,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    epsilon: float,
    direction: str = "add",
) -> float:
    """The integrated δ(ε) of one dataset (see :func:`true_delta_estimate` for arguments and the error)."""
    return true_delta_estimate(
        a=a,
        participation=participation,
        sampling_rate=sampling_rate,
        local_dataset_size=local_dataset_size,
        noise_multiplier=noise_multiplier,
        epsilon=epsilon,
        direction=direction,
    ).delta


def _claims(
    names: Sequence[str] | None, *, p: float, q: float, d: int, z: float, epsilon: float
) -> dict[str, float | str]:
    """Each analysis' δ(ε) from :mod:`ampfl.accounting.random_checkin` (or the error message)."""
    from ampfl.accounting import random_checkin

    out: dict[str, float | str] = {}
    for name in names if names is not None else random_checkin.ANALYSES:
        try:
            out[name] = random_checkin.delta_per_iteration(
                analysis=name,
                participation=p,
                sampling_rate=q,
                local_dataset_size=d,
                noise_multiplier=z,
                epsilon=epsilon,
            )
        except (ValueError, NumericalError) as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


def _a_grid(n_linear: int, d: int) -> FloatArray:
    """a values searched: ``n_linear`` equally spaced in [-1, 1] plus ±10^k, k = -5, -4.75, …, -1.25.

    The log-spaced part matters for large d·q, where the worst a is of order σ/(C d q) (the client's other
    samples then reveal its participation while x' is not confused with one of them).
    """
    if d == 0:
        return np.array([0.0])
    near_zero = 10.0 ** np.arange(-5.0, -1.0, 0.25)
    grid = np.concatenate([np.linspace(-1.0, 1.0, n_linear), near_zero, -near_zero, [0.0]])
    return np.unique(grid)


def _local_maxima(values: FloatArray) -> list[int]:
    """Indices of the positive local maxima of ``values`` (plateaus count once), largest first."""
    padded = np.concatenate(([-np.inf], values, [-np.inf]))
    idx = [
        k
        for k in range(values.size)
        if values[k] > 0.0 and padded[k + 1] > padded[k] and padded[k + 1] >= padded[k + 2]
    ]
    return sorted(idx, key=lambda k: -values[k])


def audit_random_checkin(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    epsilon: float,
    grid: int = 41,
    refine: bool = True,
    analyses: Sequence[str] | None = None,
    claim_rtol: float = 1e-6,
    progress: Callable[[int, int], None] | None = None,
) -> AuditResult:
    """Search a ∈ [-1, 1] and both directions for the largest exact δ(ε) and check each analysis against it.

    The a-grid has ``grid`` equally spaced points plus log-spaced points near 0; with ``refine`` the three
    largest local maxima of each direction are refined by a bounded scalar search between their grid
    neighbours. Every number found is a lower bound on the mechanism's worst-case δ(ε) (only this dataset
    family is searched).

    Args:
        participation, sampling_rate, local_dataset_size, noise_multiplier, epsilon: the mechanism, as in
            :func:`true_delta_estimate`.
        grid: number of equally spaced a values in [-1, 1] (integer ≥ 1; odd values include -1, 0, 1); 32
            log-spaced values ±10^k (k = -5 … -1.25) are always added (see ``_a_grid``).
        refine: refine the three largest local maxima of each direction by a bounded scalar search.
        analyses: names to check (default: all of ``ampfl.accounting.random_checkin.ANALYSES``).
        claim_rtol: an analysis is ``violated`` only if its δ < (1 − claim_rtol) · the audited lower bound
            (allows for the claimed values' own rounding).
        progress: optional callback ``(done, total)`` after each integration.

    Returns:
        An :class:`AuditResult`.

    Raises:
        ValueError: for parameters outside their ranges.
        NumericalError: if an integration fails.
    """
    p_, q_, d_, z_, eps_ = _validate(
        participation, sampling_rate, local_dataset_size, noise_multiplier, epsilon
    )
    n_grid = check_int("grid", grid, minimum=1, maximum=100_001)
    rtol = check_range("claim_rtol", claim_rtol, 0.0, 0.5)
    binom = _binomial(d_, q_)
    a_grid = _a_grid(n_grid, d_)
    n_refine = 3 if refine and a_grid.size > 2 else 0
    total = len(DIRECTIONS) * (a_grid.size + 25 * n_refine)
    done = 0
    by_direction: dict[str, DirectionResult] = {}
    best_lower = 0.0
    for direction in DIRECTIONS:
        cache: dict[float, DeltaEstimate] = {}

        def evaluate(
            a: float, direction: str = direction, cache: dict[float, DeltaEstimate] = cache
        ) -> float:
            nonlocal done
            a = min(1.0, max(-1.0, float(a)))
            if a not in cache:
                cache[a] = _estimate(a=a, p=p_, q=q_, z=z_, epsilon=eps_, direction=direction, binom=binom)
                done += 1
                if progress is not None:
                    progress(done, total)
            return cache[a].delta

        values = np.array([evaluate(float(a)) for a in a_grid])
        for k in _local_maxima(values)[:n_refine]:
            lo, hi = float(a_grid[max(0, k - 1)]), float(a_grid[min(a_grid.size - 1, k + 1)])
            optimize.minimize_scalar(
                lambda a: -evaluate(a),
                bounds=(lo, hi),
                method="bounded",
                options={"xatol": 1e-4 * (hi - lo), "maxiter": 25},
            )
        worst_a = max(cache, key=lambda a: cache[a].delta)
        est = cache[worst_a]
        by_direction[direction] = DirectionResult(est.delta, worst_a, est.error, est.lower)
        best_lower = max(best_lower, max(e.lower for e in cache.values()))
    if progress is not None:
        progress(total, total)
    direction = max(DIRECTIONS, key=lambda name: by_direction[name].max_delta)
    worst = by_direction[direction]
    checks: dict[str, AnalysisCheck] = {}
    for name, claim in _claims(analyses, p=p_, q=q_, d=d_, z=z_, epsilon=eps_).items():
        if isinstance(claim, str):
            checks[name] = AnalysisCheck(None, False, None, claim)
            continue
        ratio = best_lower / claim if claim > 0.0 else (math.inf if best_lower > 0.0 else None)
        checks[name] = AnalysisCheck(claim, claim < (1.0 - rtol) * best_lower, ratio)
    return AuditResult(
        max_delta=worst.max_delta,
        worst_a=worst.worst_a,
        direction=direction,
        integration_error=worst.error,
        lower_bound=best_lower,
        analyses=checks,
        by_direction=by_direction,
        evaluations=done,
    )
