"""Theorem 3.1 of paper 002 (Dong, Chen, Özgür): RDP between a Gaussian mixture over k-of-d binary centres
and a centred Gaussian.

Setting (RECOVERED_MATH.md §1.1): ``S`` is the set of binary vectors in {0, 1}^d with exactly ``k`` ones,
``P = |S|^{-1} Σ_{v∈S} N(c·v, σ² I_d)`` and ``Q = N(0, σ² I_d)``. Only ``c/σ`` matters, so every function
takes the noise multiplier ``z = σ/c`` and works with ``λ = c²/σ² = 1/z²``. Orders are integers α ≥ 2
(Eq. (2) enumerates α-tuples).

Kernels (each returns one value per order, in nats):

- :func:`forward_rdp_exact`: the first term of Eq. (2), i.e. Lemma 3.12, which is *equal* to D_α(P‖Q)
  [D, verified exactly]. For ``k = 1`` it is evaluated through occupancy counts (RECOVERED_MATH §1.4)::

      D_α = (log α! + log [z^α] f(z)^d − α log d) / (α − 1),   f(z) = Σ_n z^n exp(λ n(n−1)/2) / n!

  The coefficients of ``f`` do not depend on α, so one truncated power ``f^d`` (repeated squaring, log-space
  convolutions, O(α_max² log d)) serves every order at once. For ``k > 1`` an exact enumeration over the
  multiset of slot counts is used while it is affordable; otherwise a ``ValueError`` says so.
- :func:`forward_rdp_efficient`: Eq. (5) / Corollary 3.14 (hypergeometric sum, O(k)) [C].
- :func:`reverse_rdp_bound`: R_α with the (d − 1) prefactor (Cor. 3.17 + Lemma 3.18 + Cor. 3.19) [D].
  The d-prefactor variant used by Feldman & Shenfeld is *not* an upper bound (§1.13) and is not offered.
- :func:`theorem_3_1_rdp`: the bound of Theorem 3.1, ``max(forward, reverse)``.

Everything is computed in log space (no overflow for α up to 2048 and d up to 1e5 in the exact form, any
size in the efficient form). Values are rounded up by an estimate of the floating-point error so the
returned numbers are upper bounds, never below the true value by round-off.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import combinations
from typing import Literal

import numpy as np
from scipy import special

from ampfl.accounting._checks import NumericalError, check_choice, check_int, check_orders, check_positive
from ampfl.accounting._numerics import EPS as _EPS
from ampfl.accounting._numerics import log1p_of_logsum, log_expm1

Bound = Literal["exact", "efficient"]
BOUNDS: tuple[str, ...] = ("exact", "efficient")

#: Largest order accepted by the exact k = 1 form (its cost and memory grow as α_max²).
MAX_EXACT_ORDER = 2048
#: Largest number of subsets C(d, k) enumerated per step by the exact k > 1 form.
_MAX_SUBSETS = 5_000
#: Work budget (state × subset updates) of the exact k > 1 enumeration.
_MAX_ENUMERATION_WORK = 2_000_000


def _validate(
    orders: Iterable[object], d: object, k: object, noise_multiplier: object
) -> tuple[np.ndarray, int, int, float]:
    alphas = check_orders("orders", orders)
    dd = check_int("d", d, minimum=1)
    kk = check_int("k", k, minimum=1, maximum=dd)
    z = check_positive("noise_multiplier", noise_multiplier)
    return alphas, dd, kk, z


def _lam(z: float) -> float:
    z2 = z * z
    lam = math.inf if z2 == 0.0 else 1.0 / z2
    if not math.isfinite(lam):
        raise NumericalError(f"noise_multiplier {z!r} is too small: c²/σ² overflows.")
    return lam


def _log_comb_small(n: float, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log C(n, r) as Σ_{j<m} log(n − j) − log m!, m = min(r, n − r), and a bound on its absolute error / eps.

    Accurate for huge n (gammaln(n) − gammaln(n − r) would lose all digits once n ≫ 1e12).
    """
    r = np.asarray(r, dtype=np.float64)
    m = np.minimum(r, n - r).astype(np.int64)
    m_max = int(m.max()) if m.size else 0
    logs = np.concatenate([[0.0], np.cumsum(np.log(n - np.arange(m_max, dtype=np.float64)))])
    fact = special.gammaln(m + 1.0)
    value = logs[m] - fact
    error = (m + 2.0) * (np.abs(logs[m]) + np.abs(fact) + 1.0)
    return np.asarray(value, dtype=np.float64), np.asarray(error, dtype=np.float64)


def _round_up(values: np.ndarray, magnitude: np.ndarray, ops: float) -> np.ndarray:
    """Add a bound on accumulated round-off (``ops`` operations on numbers of size ``magnitude``)."""
    return np.asarray(values + 8.0 * _EPS * (ops + 4.0) * (np.abs(magnitude) + 1.0), dtype=np.float64)


# ---------------------------------------------------------------------------------------------------------
# forward, exact (Lemma 3.12)
# ---------------------------------------------------------------------------------------------------------


def _log_convolve(la: np.ndarray, lb: np.ndarray, degree: int) -> np.ndarray:
    """log of the coefficients 0..degree of the product of two polynomials given by log-coefficients."""
    n = degree + 1
    lb_padded = np.concatenate([np.full(n, -np.inf), lb[:n]])
    # row i holds lb[m - i] for m = 0..degree (a sliding window read backwards), so column m sums i + j = m
    windows = np.lib.stride_tricks.sliding_window_view(lb_padded, n)[n:0:-1]
    terms = la[:n, None] + windows
    top = np.max(terms, axis=0)
    out = np.log(np.sum(np.exp(terms - top[None, :]), axis=0)) + top
    return np.asarray(out, dtype=np.float64)


def _log_power(log_coeffs: np.ndarray, power: int, degree: int) -> tuple[np.ndarray, int]:
    """Log-coefficients 0..degree of ``f(z)**power`` by repeated squaring, and the convolution count."""
    result: np.ndarray | None = None
    base = log_coeffs[: degree + 1].copy()
    convolutions = 0
    p = power
    while p:
        if p & 1:
            if result is None:
                result = base.copy()
            else:
                result = _log_convolve(result, base, degree)
                convolutions += 1
        p >>= 1
        if p:
            base = _log_convolve(base, base, degree)
            convolutions += 1
    assert result is not None
    return result, convolutions


def _forward_exact_k1(alphas: np.ndarray, d: int, lam: float) -> np.ndarray:
    a_max = int(alphas.max())
    n = np.arange(a_max + 1, dtype=np.float64)
    log_coeffs = lam * n * (n - 1.0) / 2.0 - special.gammaln(n + 1.0)
    log_pow, convolutions = _log_power(log_coeffs, d, a_max)
    a = alphas.astype(np.float64)
    log_moment = special.gammaln(a + 1.0) + log_pow[alphas] - a * math.log(d)
    if not np.all(np.isfinite(log_moment)):
        raise NumericalError("exact forward divergence (Lemma 3.12) is not finite; use the efficient bound.")
    magnitude = np.abs(special.gammaln(a + 1.0)) + np.abs(log_pow[alphas]) + a * math.log(d)
    log_moment = _round_up(log_moment, magnitude, 2.0 * (convolutions + 1) * math.log2(a_max + 2))
    return np.asarray(np.maximum(log_moment, 0.0) / (a - 1.0), dtype=np.float64)


def _forward_exact_enumerated(alphas: np.ndarray, d: int, k: int, lam: float) -> np.ndarray:
    """Lemma 3.12 for k > 1: exact walk over multisets of slot counts, one α-tuple member at a time.

    Σ_{i<j} v_iᵀv_j = (Σ_b N_b² − αk)/2, where N_b counts the tuple members that contain slot b. The walk
    keeps integer multiplicities of each sorted count vector, so the only rounding is in the final log-sum.
    """
    subsets = [np.array(s) for s in combinations(range(d), k)]
    a_max = int(alphas.max())
    states: dict[tuple[int, ...], int] = {tuple([0] * d): 1}
    wanted = set(int(a) for a in alphas)
    log_num_subsets = math.log(len(subsets))
    out: dict[int, float] = {}
    work = 0
    for j in range(1, a_max + 1):
        nxt: dict[tuple[int, ...], int] = {}
        work += len(states) * len(subsets)
        if work > _MAX_ENUMERATION_WORK:
            raise ValueError(
                f"the exact forward bound (Lemma 3.12) for k > 1 enumerates α-tuples of {k}-of-{d} "
                f"subsets and is not affordable up to order {a_max} (more than {_MAX_ENUMERATION_WORK} "
                "updates); use the efficient bound (Eq. 5; CLI --bound efficient) or smaller orders."
            )
        for state, mult in states.items():
            base = np.array(state)
            for s in subsets:
                new = base.copy()
                new[s] += 1
                key = tuple(sorted(new.tolist()))
                nxt[key] = nxt.get(key, 0) + mult
        states = nxt
        if j in wanted:
            logs = np.array(
                [math.log(m) + lam * (sum(x * x for x in st) - j * k) / 2.0 for st, m in states.items()]
            )
            log_moment = float(special.logsumexp(logs)) - j * log_num_subsets
            magnitude = float(np.max(np.abs(logs))) + j * log_num_subsets
            log_moment = float(_round_up(np.array([log_moment]), np.array([magnitude]), len(logs))[0])
            out[j] = max(log_moment, 0.0) / (j - 1.0)
    return np.array([out[int(a)] for a in alphas])


def exact_forward_affordable(*, d: int, k: int, max_order: int) -> bool:
    """Whether :func:`forward_rdp_exact` runs for these sizes (k = 1: always, up to ``MAX_EXACT_ORDER``)."""
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1, maximum=d)
    max_order = check_int("max_order", max_order, minimum=2)
    if max_order > MAX_EXACT_ORDER:
        return False
    if k == 1 or k == d:
        return True
    if math.comb(d, k) > _MAX_SUBSETS:
        return False
    # Rough a-priori work estimate: states grow at most like the number of multisets of counts.
    work, states = 0, 1
    n_subsets = math.comb(d, k)
    for j in range(1, max_order + 1):
        work += states * n_subsets
        if work > _MAX_ENUMERATION_WORK:
            return False
        states = min(states * n_subsets, math.comb(j * k + d - 1, d - 1))
    return True


def forward_rdp_exact(*, orders: Iterable[object], d: int, k: int, noise_multiplier: float) -> np.ndarray:
    """D_α(P‖Q) exactly: the first term of Theorem 3.1 Eq. (2), i.e. Lemma 3.12 (002) [D, verified exactly].

    Args:
        orders: integer Rényi orders α ≥ 2 (at most ``MAX_EXACT_ORDER``).
        d: number of slots (sub-models, or iterations T for BIS), ≥ 1.
        k: ones per centre (1 for model splitting; participations for BIS), 1 ≤ k ≤ d.
        noise_multiplier: σ/c > 0.

    Returns:
        Array of D_α(P‖Q), one per sorted unique order.

    Raises:
        ValueError: bad input, or k > 1 where the enumeration is not affordable (use the efficient bound).
    """
    alphas, dd, kk, z = _validate(orders, d, k, noise_multiplier)
    lam = _lam(z)
    if int(alphas.max()) > MAX_EXACT_ORDER:
        raise ValueError(
            f"orders must be at most {MAX_EXACT_ORDER} for the exact forward bound. "
            f"Found {int(alphas.max())}; use the efficient bound (CLI --bound efficient) for larger orders."
        )
    if kk == dd:  # a single centre: P = N(c·1, σ²I)
        return np.asarray(alphas * lam * dd / 2.0, dtype=np.float64)
    if kk == 1:
        return _forward_exact_k1(alphas, dd, lam)
    if math.comb(dd, kk) > _MAX_SUBSETS:
        raise ValueError(
            f"the exact forward bound (Lemma 3.12) for k > 1 enumerates subsets; C(d, k) = "
            f"C({dd}, {kk}) exceeds {_MAX_SUBSETS}, so it is not affordable. "
            "Use the efficient bound (Eq. 5; CLI --bound efficient)."
        )
    return _forward_exact_enumerated(alphas, dd, kk, lam)


# ---------------------------------------------------------------------------------------------------------
# forward, efficient (Eq. 5) and reverse (R_α)
# ---------------------------------------------------------------------------------------------------------


def forward_rdp_efficient(*, orders: Iterable[object], d: int, k: int, noise_multiplier: float) -> np.ndarray:
    """Upper bound on D_α(P‖Q): Eq. (5) / Corollary 3.14 of 002 [C], O(k) per order.

    ``log Σ_i hypergeom(i; d, k, k) · exp(α λ i / 2)`` with i the overlap of two random k-subsets of [d].
    For k = 1 it is ``log(1 + (e^{αλ/2} − 1)/d)``. Equal to the exact value at α = 2.
    """
    alphas, dd, kk, z = _validate(orders, d, k, noise_multiplier)
    lam = _lam(z)
    # log Σ_i pmf(i) e^{αλi/2} = log1p(Σ_{i≥1} pmf(i) (e^{αλi/2} − 1)): every term positive, no cancellation.
    i = np.arange(max(1, 2 * kk - dd), kk + 1, dtype=np.float64)
    fd, fk = float(dd), float(kk)  # floats: numpy cannot hold Python ints beyond 2**63
    c1, e1 = _log_comb_small(fk, i)
    c2, e2 = _log_comb_small(fd - fk, fk - i)
    c3, e3 = _log_comb_small(fd, np.array([fk]))
    # round each weight up by the accumulated error of its log-binomials (never below the true pmf)
    log_pmf = c1 + c2 - c3 + 16.0 * _EPS * (e1 + e2 + e3 + 1.0)
    a = alphas.astype(np.float64)
    exponents = log_pmf[None, :] + log_expm1((a[:, None] * lam / 2.0) * i[None, :])
    values = log1p_of_logsum(exponents, axis=1)
    if np.any(np.isnan(values)):
        raise NumericalError(
            f"efficient forward bound (Eq. 5) is not a number for d = {dd:.6g}, k = {kk:.6g}."
        )
    return np.asarray(np.maximum(values, 0.0), dtype=np.float64)


def _log1p_alpha_expm1(a: np.ndarray, x: float) -> np.ndarray:
    """log(1 + α(eˣ − 1)) without overflow for large x."""
    if x < 1.0:
        return np.asarray(np.log1p(a * math.expm1(x)), dtype=np.float64)
    # 1 + α(eˣ − 1) = α eˣ (1 − (α − 1) e^{−x} / α)
    return np.asarray(x + np.log(a) + np.log1p(-(a - 1.0) / a * math.exp(-x)), dtype=np.float64)


def reverse_rdp_bound(*, orders: Iterable[object], d: int, k: int, noise_multiplier: float) -> np.ndarray:
    """Upper bound R_α on D_α(Q‖P): Theorem 3.1 second term, with the (d − 1) prefactor (002) [D].

    ``R_α = α λ k² / (2d) + (d − 1)/(2(α − 1)) · [α x − log(1 + α(eˣ − 1))]``, ``x = λ k(d − k)/(d(d − 1))``
    (Cor. 3.17 for D_α(Q‖Q'), Lemma 3.18 + Cor. 3.19 for D_α(Q'‖P); RECOVERED_MATH §1.3, §1.10). The second
    term vanishes for d = 1 and for k = d (a single centre).
    """
    alphas, dd, kk, z = _validate(orders, d, k, noise_multiplier)
    lam = _lam(z)
    a = alphas.astype(np.float64)
    first = a * lam * kk * kk / (2.0 * dd)
    if dd == 1 or kk == dd:
        second = np.zeros_like(a)
    else:
        x = lam * kk * (dd - kk) / (dd * (dd - 1.0))
        gap = a * x - _log1p_alpha_expm1(a, x)
        second = (dd - 1.0) / (2.0 * (a - 1.0)) * np.maximum(gap, 0.0)
    total = first + second
    if not np.all(np.isfinite(total)):
        raise NumericalError("reverse bound R_α overflowed; the noise multiplier is too small.")
    return np.asarray(_round_up(total, total, 16.0), dtype=np.float64)


def theorem_3_1_rdp(
    *, orders: Iterable[object], d: int, k: int, noise_multiplier: float, bound: str = "exact"
) -> np.ndarray:
    """Theorem 3.1 of 002: ``max(forward, reverse)`` — an RDP bound valid in both neighbouring directions.

    Args:
        orders: integer orders α ≥ 2.
        d: number of slots, ≥ 1.
        k: ones per centre, 1 ≤ k ≤ d.
        noise_multiplier: σ/c > 0.
        bound: ``"exact"`` (Eq. (2): Lemma 3.12 forward) or ``"efficient"`` (Eq. (3): Eq. (5) forward).

    Returns:
        Per-order RDP bound, in the order of the sorted unique ``orders``.
    """
    which = check_choice("bound", bound, BOUNDS)
    if which == "exact":
        fwd = forward_rdp_exact(orders=orders, d=d, k=k, noise_multiplier=noise_multiplier)
    else:
        fwd = forward_rdp_efficient(orders=orders, d=d, k=k, noise_multiplier=noise_multiplier)
    rev = reverse_rdp_bound(orders=orders, d=d, k=k, noise_multiplier=noise_multiplier)
    return np.asarray(np.maximum(fwd, rev), dtype=np.float64)
