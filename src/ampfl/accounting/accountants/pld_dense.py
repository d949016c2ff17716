"""Dense pessimistic PLDs in numpy alone: the accountant's own PMF and PLD types, and the Gaussian
(Poisson-subsampled or not) PLD built without dp-accounting.

Why: importing any part of dp-accounting runs its package ``__init__``, which imports scipy.signal and
scipy.stats (~1 s, 14× ``ampfl --version``). The PLD accountant's common path — a (Poisson-subsampled)
Gaussian event composed T times, ε(δ) read from the spectrum (:mod:`~ampfl.accounting.accountants.pld_cache`)
— needs only arrays, so it runs on these types; every other event still gets dp-accounting's PLD
(:func:`~ampfl.accounting.accountants.pld.event_pld`), which the accountant's kernels take as well (they read
the same attributes: ``_discretization``, ``_lower_loss``, ``_probs``, ``_infinity_mass`` of a PMF and
``_pmf_remove``, ``_pmf_add``, ``_symmetric`` of a PLD).

:func:`gaussian_connect_dots` is dp-accounting's ``from_gaussian_mechanism(..., pessimistic_estimate=True,
use_connect_dots=True)`` for one adjacency: the same truncation (mass e^-50 of the noise), the same grid, the
same connect-the-dots probabilities from the same hockey-stick divergences δ(ε_i) at the grid points, so the
same pessimistic (upper-bound) PLD. Only the normal CDF differs: ``math.erfc`` (glibc's, within an ulp or so,
as SciPy's ``ndtr``) and SciPy's ``log_ndtr`` scheme for its logarithm, so each δ(ε_i) agrees to ~1e-16 and
each mass to ~1e-16/h. ``tests/accounting/test_pld_dense.py`` checks the divergences, PMFs and ε against
dp-accounting's; :func:`~ampfl.accounting.accountants.pld_fast.gaussian_pld` runs this code on SciPy's CDF.

The ε(δ) queries of both kinds of PLD (:func:`pmf_epsilon`, :func:`walk_epsilon`, :func:`epsilon_for_delta`;
re-exported by :mod:`~ampfl.accounting.accountants.pld_fast`) live here, below the composition kernels, so
that the two modules import one way (pld_fast → pld_dense).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "DensePmf",
    "Pld",
    "epsilon_for_delta",
    "gaussian_connect_dots",
    "gaussian_pld",
    "norm_cdf",
    "norm_log_cdf",
    "pmf_epsilon",
    "walk_epsilon",
]

#: Φ⁻¹(½·e^-50) (``scipy.special.ndtri``; a test checks it): dp-accounting's truncation of the Gaussian noise
#: at ``log_mass_truncation_bound = -50``, in units of the standard deviation.
TRUNCATION_QUANTILE = -9.745474864965935
#: pld_pmf._DELTA_DIFF_TOLERANCE: how far consecutive δ(ε_i) may rise (rounding) before the input is refused.
_DELTA_DIFF_TOLERANCE = 1e-12


def norm_cdf(x: np.ndarray) -> np.ndarray:
    """Φ(x) = erfc(−x/√2)/2, elementwise (``scipy.special.ndtr``)."""
    t = np.asarray(x, dtype=np.float64) * -math.sqrt(0.5)
    # the same math.erfc per value as np.frompyfunc, without its object array (3 ms of account poisson)
    values = np.fromiter(map(math.erfc, t.ravel().tolist()), np.float64, t.size)
    return 0.5 * values.reshape(t.shape)


def norm_log_cdf(x: np.ndarray, cdf: np.ndarray | None = None) -> np.ndarray:
    """log Φ(x), elementwise, as ``scipy.special.log_ndtr``: log1p(−Φ(−x)) above 6, log Φ(x) down to −20,
    below that the asymptotic series of the Mills ratio (Φ(x) underflows at −38). ``cdf``: Φ(x) if known."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    high, low = x > 6.0, x <= -20.0
    mid = ~(high | low)
    if np.any(high):
        out[high] = np.log1p(-norm_cdf(-x[high]))
    if np.any(mid):
        with np.errstate(divide="ignore"):
            out[mid] = np.log(norm_cdf(x[mid]) if cdf is None else np.asarray(cdf)[mid])
    if np.any(low):
        t = x[low]
        inv = 1.0 / (t * t)
        # log Φ(t) = −t²/2 − log(−t) − log √(2π) + log(1 − 1/t² + 3/t⁴ − 15/t⁶ + …), |t| ≥ 20: the terms
        # (2k − 1)!!/t^{2k} fall below 1e-17 of the sum after 12 of them
        total, term = np.ones_like(t), np.ones_like(t)
        for k in range(1, 13):
            term = term * -(2 * k - 1) * inv
            total = total + term
        out[low] = -0.5 * t * t - np.log(-t) - 0.5 * math.log(2.0 * math.pi) + np.log(total)
    return out


class DensePmf:
    """A dense pessimistic PLD PMF: ``probs[i]`` at loss ``(lower_loss + i)·discretization``, plus the mass at
    +∞ (dp-accounting's ``DensePLDPmf``, same attribute names, without its import)."""

    __slots__ = ("_discretization", "_infinity_mass", "_lower_loss", "_pessimistic_estimate", "_probs")

    def __init__(
        self, discretization: float, lower_loss: int, probs: np.ndarray, infinity_mass: float
    ) -> None:
        self._discretization = float(discretization)
        self._lower_loss = int(lower_loss)
        self._probs = np.asarray(probs, dtype=np.float64)
        self._infinity_mass = float(infinity_mass)
        self._pessimistic_estimate = True

    @property
    def size(self) -> int:
        return int(self._probs.size)

    def to_dense_pmf(self) -> DensePmf:
        return self

    def validate_composable(self, other: Any) -> None:
        if self._discretization != other._discretization or not other._pessimistic_estimate:
            raise ValueError("PMFs on different grids (or not pessimistic) cannot be composed.")

    def get_delta_for_epsilon(self, epsilon: float) -> float:
        """δ(ε) = mass at ∞ + Σ_{loss > ε} p·(1 − e^{ε − loss}) (dp-accounting's
        ``_get_delta_for_epsilon``)."""
        losses = (np.arange(self.size) + self._lower_loss) * self._discretization
        above = losses > epsilon
        return float(self._infinity_mass + np.dot(-np.expm1(epsilon - losses[above]), self._probs[above]))

    def get_epsilon_for_delta(self, delta: float) -> float:
        return pmf_epsilon(self, delta)

    def to_dp_accounting(self) -> Any:
        """dp-accounting's ``DensePLDPmf`` with the same values (imports dp-accounting)."""
        from dp_accounting.pld import pld_pmf

        return pld_pmf.DensePLDPmf(
            self._discretization, self._lower_loss, self._probs, self._infinity_mass, True
        )


class Pld:
    """A PLD of two dense PMFs, remove and add adjacency (one if symmetric): dp-accounting's
    ``PrivacyLossDistribution`` for what the accountant asks of it."""

    def __init__(self, pmf_remove: DensePmf, pmf_add: DensePmf | None = None) -> None:
        self._pmf_remove = pmf_remove
        self._symmetric = pmf_add is None
        self._pmf_add = pmf_remove if pmf_add is None else pmf_add

    def get_delta_for_epsilon(self, epsilon: float) -> float:
        delta = self._pmf_remove.get_delta_for_epsilon(epsilon)
        return delta if self._symmetric else max(delta, self._pmf_add.get_delta_for_epsilon(epsilon))

    def get_epsilon_for_delta(self, delta: float) -> float:
        return epsilon_for_delta(self, delta)

    def to_dp_accounting(self) -> Any:
        """dp-accounting's ``PrivacyLossDistribution`` with the same PMFs (imports dp-accounting)."""
        from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

        remove = self._pmf_remove.to_dp_accounting()
        return PrivacyLossDistribution(remove, None if self._symmetric else self._pmf_add.to_dp_accounting())


# ---------------------------------------------------------------------------------------------- queries
def pmf_epsilon(pmf: Any, delta: float, first_block: int = 4096) -> float:
    """``_get_epsilon_for_delta`` over a PMF: walk the losses from the largest down with prefix sums.

    In blocks (``first_block`` points, then from 4096 doubling): the walk stops where ε(δ) is reached,
    usually in the upper tail, so most of a long PMF is never touched. The running sums are carried into each
    block's prefix sum, so the additions are the loop's, in its order, whatever the blocks."""
    return walk_epsilon(pmf, delta, first_block)[0]


#: Relative slack of the walk's prefilter: log(a) ≥ loss in floating point implies a·e^{-loss} ≥ 1 − 1e-9
#: (log and exp err by a few ulps, i.e. ~1e-13 relative for |loss| ≤ 745).
_SLACK = 1.0 - 1e-9


def walk_epsilon(pmf: Any, delta: float, first_block: int = 4096) -> tuple[float, int]:
    """:func:`pmf_epsilon` and the number of points walked from the largest loss down to where it stopped
    (a good ``first_block`` for the next, slightly larger, composition).

    The loop's test at each loss is log((upper − δ)/lower) ≥ loss; a point can only pass it if
    (upper − δ)/lower · e^{−loss} ≥ 1 − 1e-9 (the factor e^{−loss} is the one the lower sum uses), so the
    logarithm is taken only at the points passing that prefilter, first ones first: the same first point,
    hence the same answer, as taking it everywhere."""
    if not hasattr(pmf, "_probs"):  # dp-accounting's sparse PMF
        return float(pmf.get_epsilon_for_delta(delta)), 0
    inf = float(pmf._infinity_mass)
    if inf > delta:
        return math.inf, 0
    probs = np.asarray(pmf._probs, dtype=np.float64)[::-1]
    n, top, h = len(probs), pmf._lower_loss + len(probs) - 1, pmf._discretization
    upper_mass, lower_mass = inf, 0.0
    start, size, next_size = 0, max(1, first_block), 4096
    while start < n:
        stop = min(n, start + size)
        p = probs[start:stop]
        # (top − j)·h from float integers (exact below 2^53): the int64 array's multiply casts slowly
        losses = np.arange(top - start, top - stop, -1, dtype=np.float64) * h
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            scale = np.exp(-losses)
            upper = np.cumsum(np.concatenate(([upper_mass], p)))  # mass above the block's k-th loss: upper[k]
            lower = np.cumsum(np.concatenate(([lower_mass], scale * p)))
            above, weight = upper[:-1], lower[:-1]
            ratio = (above - delta) / weight
            maybe = np.flatnonzero((ratio * scale >= _SLACK) | (scale == 0.0))
        maybe = maybe[(above[maybe] > delta) & (weight[maybe] > 0)]
        k = len(p)
        for lo in range(0, maybe.size, 256):  # the exact test, first candidates first
            chunk = maybe[lo : lo + 256]
            with np.errstate(divide="ignore", invalid="ignore"):
                passed = np.flatnonzero(np.log(ratio[chunk]) >= losses[chunk])
            if passed.size:
                k = int(chunk[passed[0]])
                break
        zero = np.flatnonzero((upper[1 : k + 1] >= delta) & (lower[1 : k + 1] == 0))  # exp(-loss) underflowed
        if zero.size:
            return max(0.0, float(losses[zero[0]])), start + int(zero[0]) + 1
        upper_mass, lower_mass = float(upper[k]), float(lower[k])
        if k < len(p):
            start += k
            break
        start, size, next_size = stop, next_size, 2 * next_size
    if upper_mass <= lower_mass + delta:
        return 0.0, start
    return math.log((upper_mass - delta) / lower_mass), start


def epsilon_for_delta(pld: Any, delta: float) -> float:
    """``pld.get_epsilon_for_delta(delta)``: the larger of the two adjacencies."""
    eps = pmf_epsilon(pld._pmf_remove, delta)
    if pld._symmetric:
        return eps
    return max(eps, pmf_epsilon(pld._pmf_add, delta))


# ------------------------------------------------------------------------------------------ the Gaussian
def _loss_remove(x: float, sigma: float, q: float) -> float:
    """dp-accounting's ``GaussianPrivacyLoss._privacy_loss_remove`` (sensitivity 1): log(1 − q + q·e^l(x))."""
    plain = (-0.5 - x) / (sigma * sigma)
    if q == 1.0:
        return plain
    if plain == 0.0:
        return math.log(q + (1.0 - q))
    d, c = plain + math.log(q), math.log(1.0 - q)
    lo, hi = min(d, c), max(d, c)
    return hi + math.log1p(math.exp(lo - hi))


def _inverse_loss(eps: np.ndarray, sigma: float, q: float, add: bool) -> np.ndarray:
    """Vectorised ``GaussianPrivacyLoss.inverse_privacy_loss`` (ADD / REMOVE) at valid ``eps``."""
    var = sigma * sigma
    if q == 1.0:
        plain = eps
    else:  # the loss without subsampling: ±log(a·e^b + c), a = 1/q, b = ∓ε, c = 1 - 1/q (common.py)
        b = -eps if add else eps
        d = b + math.log(1.0 / q)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = d + np.log1p(-np.exp(math.log(-(1.0 - 1.0 / q)) - d))
        value = np.where(b == 0.0, 0.0, value)
        plain = -value if add else value
        edge = -math.log1p(-q) if add else math.log1p(-q)
        close = np.abs(eps - edge) <= 1e-9 * np.maximum(np.abs(eps), abs(edge))  # math.isclose
        plain = np.where(close, math.inf if add else -math.inf, plain)
    x = -0.5 - plain * var
    return np.asarray(x + 1.0 if add else x, dtype=np.float64)


#: The standard normal CDF Φ, and log Φ(x) given Φ(x) where known (None: not computed).
Cdf = Callable[[np.ndarray], np.ndarray]
LogCdf = Callable[[np.ndarray, "np.ndarray | None"], np.ndarray]


def _deltas(
    eps: np.ndarray, sigma: float, q: float, add: bool, cdf_fn: Cdf, log_cdf_fn: LogCdf
) -> np.ndarray:
    """Vectorised ``GaussianPrivacyLoss.get_delta_for_epsilon``: μ_upper_cdf(x) − e^ε·μ_lower_cdf(x) at the
    inverse loss x of each ε (the same branches, clipped to [0, 1]); ``cdf_fn`` / ``log_cdf_fn(x, Φ(x))``: the
    standard normal CDF and its logarithm."""
    deltas = np.zeros_like(eps, dtype=np.float64)
    if q == 1.0:
        inside = np.full(eps.shape, True)
    elif add:
        inside = eps < -math.log1p(-q)
    else:
        inside = eps > math.log1p(-q)
        deltas[~inside] = -np.expm1(eps[~inside])
    x = _inverse_loss(eps[inside], sigma, q, add)
    t = x / sigma
    cdf = cdf_fn(t)
    if add:  # μ_upper = μ, μ_lower = (1 − q)μ + q·μ(· − 1)
        upper = cdf
        shifted = log_cdf_fn((x - 1.0) / sigma, None)
        if q == 1.0:
            log_lower = shifted
        else:
            log_lower = np.logaddexp(np.log1p(-q) + log_cdf_fn(t, cdf), np.log(q) + shifted)
    else:  # μ_upper = (1 − q)μ + q·μ(· + 1), μ_lower = μ
        shifted_cdf = cdf_fn((x + 1.0) / sigma)
        upper = shifted_cdf if q == 1.0 else (1.0 - q) * cdf + q * shifted_cdf
        log_lower = log_cdf_fn(t, cdf)
    deltas[inside] = upper - np.exp(eps[inside] + log_lower)
    return np.clip(deltas, 0.0, 1.0)


def gaussian_connect_dots(
    sigma: float, q: float, h: float, add: bool, cdf: Cdf = norm_cdf, log_cdf: LogCdf = norm_log_cdf
) -> tuple[int, int, np.ndarray]:
    """``(lo, hi, δ(ε_i))`` of dp-accounting's connect-the-dots grid ε_i = i·h, lo ≤ i ≤ hi, for one adjacency
    of the Gaussian mechanism (sensitivity 1, noise ``sigma``) Poisson-subsampled at rate ``q``; ``cdf`` and
    ``log_cdf``: the normal CDF and log CDF (default ampfl's; :func:`pld_fast.gaussian_pld` passes SciPy's,
    as dp-accounting)."""
    lower_x = sigma * TRUNCATION_QUANTILE
    upper_x = -lower_x
    if add:
        upper_x += 1.0
    else:
        lower_x -= 1.0

    def loss(x: float) -> float:
        return -_loss_remove(-x, sigma, q) if add else _loss_remove(x, sigma, q)

    bottom, top = loss(upper_x) / h, loss(lower_x) / h
    if not (math.isfinite(bottom) and math.isfinite(top)):  # e.g. z = 1e308: z² overflows
        raise OverflowError(f"the privacy-loss range of noise multiplier {sigma:g} is not finite.")
    lo, hi = math.floor(bottom), math.ceil(top)
    return lo, hi, _deltas(np.arange(lo, hi + 1) * h, sigma, q, add, cdf, log_cdf)


def connect_dots_probs(deltas: np.ndarray, h: float) -> tuple[np.ndarray, float]:
    """(probabilities, mass at ∞) of the pessimistic connect-the-dots PMF on consecutive grid points with
    divergences ``deltas`` (dp-accounting's ``create_pmf_pessimistic_connect_dots_fixed_gap``)."""
    if deltas.size == 1:
        return np.array([1.0 - deltas[0]]), float(deltas[0])
    diffs = np.diff(deltas)
    if np.any(diffs > _DELTA_DIFF_TOLERANCE):
        raise ValueError(f"deltas are not in non-increasing order: deltas={deltas}.")
    deltas = np.minimum.accumulate(deltas)
    diffs = np.diff(deltas)
    probs = np.zeros_like(deltas)
    probs[0] = 1 - deltas[0] + diffs[0] / math.expm1(h)
    probs[1:-1] = (diffs[1:] - diffs[:-1] * math.exp(h)) / math.expm1(h)
    probs[-1] = diffs[-1] / math.expm1(-h)
    return np.maximum(0.0, probs), float(deltas[-1])


def gaussian_pld(noise_multiplier: float, sampling_prob: float, interval: float) -> Pld:
    """The pessimistic PLD of the Gaussian mechanism (sensitivity 1) Poisson-subsampled at ``sampling_prob``
    (1: not subsampled; symmetric then), both adjacencies: dp-accounting's ``from_gaussian_mechanism(...,
    pessimistic_estimate=True, use_connect_dots=True)``, dense."""

    def one(add: bool) -> DensePmf:
        lo, _, deltas = gaussian_connect_dots(noise_multiplier, sampling_prob, interval, add)
        probs, inf = connect_dots_probs(deltas, interval)
        return DensePmf(interval, lo, probs, inf)

    remove = one(False)
    return Pld(remove) if sampling_prob == 1.0 else Pld(remove, one(True))
