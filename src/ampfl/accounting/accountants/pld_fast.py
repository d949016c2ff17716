"""Vectorised PLD kernels (issues 11 and 17): dp-accounting's algorithms without its per-point Python loops.

dp-accounting 0.6 builds a Poisson-subsampled Gaussian PLD by inverting the privacy loss one grid point at a
time, truncates composed tails and answers ε(δ) with Python loops over the PMF; on the 1e-4 grid those loops
dominate a calibration and every evaluation of a run. The functions here run the same algorithms over arrays:

- :func:`gaussian_pld`: ``from_gaussian_mechanism(..., use_connect_dots=True)`` (pessimistic connect-the-dots,
  both adjacencies): the same grid, the inverse privacy loss in closed form over all grid points at once;
- :func:`compose` and :func:`self_compose`: ``compose`` / ``self_compose`` with the tail truncation (prefix
  sums) and the Chernoff truncation bounds (powers of one base, no log-sum-exp per order) vectorised; the
  T-fold power of the spectrum by repeated squaring of a real FFT (half the spectrum, ~2 log2 T products
  instead of a complex ``**``), on dp-accounting's FFT length (the same wrap-around of the truncated tails);
- :func:`epsilon_for_delta`: ``get_epsilon_for_delta`` by prefix sums from the largest loss down.

Each is the dp-accounting algorithm (pessimistic rounding, tail mass to infinity); results agree with
dp-accounting's to rounding (tests/accounting/test_pld_accountant_fast.py: PMFs to 1e-12, ε to 1e-9 relative,
1e-6 after a self-composition, whose FFT rounding — in dp-accounting's too — moves ε at δ ≤ 1e-11 by ~1e-5
relative; a direct term-by-term convolution agrees to 1e-14 per point).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from dp_accounting.pld import pld_pmf, privacy_loss_mechanism
from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution as PLD
from scipy import fft

__all__ = [
    "TAIL_MASS",
    "compose",
    "epsilon_for_delta",
    "gaussian_pld",
    "pmf_epsilon",
    "self_compose",
    "spectrum_power",
    "walk_epsilon",
]


TAIL_MASS = 1e-15  # dp-accounting's default tail_mass_truncation of compose / self_compose
_SPARSE = 1000  # dp-accounting's _MAX_PMF_SPARSE_SIZE


def _dense(pmf: Any) -> pld_pmf.DensePLDPmf:
    return pmf.to_dense_pmf()


# ----------------------------------------------------------------------------------------- construction
def _inverse_loss(loss: Any, eps: np.ndarray) -> np.ndarray:
    """Vectorised ``GaussianPrivacyLoss.inverse_privacy_loss`` (ADD / REMOVE) at valid ``eps``."""
    s, var, q = loss.sensitivity, loss._standard_deviation**2, loss.sampling_prob
    add = loss.adjacency_type == privacy_loss_mechanism.AdjacencyType.ADD
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
    x = -0.5 * s - plain * var / s
    return np.asarray(x + s if add else x, dtype=np.float64)


def _gaussian_deltas(loss: Any, eps: np.ndarray) -> np.ndarray:
    """Vectorised ``GaussianPrivacyLoss.get_delta_for_epsilon`` (same branches, clipped to [0, 1])."""
    q = loss.sampling_prob
    deltas = np.zeros_like(eps, dtype=np.float64)
    if q == 1.0:
        inside = np.full(eps.shape, True)
    elif loss.adjacency_type == privacy_loss_mechanism.AdjacencyType.ADD:
        inside = eps < -math.log1p(-q)
    else:
        inside = eps > math.log1p(-q)
        deltas[~inside] = -np.expm1(eps[~inside])
    x = _inverse_loss(loss, eps[inside])
    deltas[inside] = loss.mu_upper_cdf(x) - np.exp(eps[inside] + loss.mu_lower_log_cdf(x))
    return np.clip(deltas, 0.0, 1.0)


def _connect_dots(loss: Any, h: float) -> pld_pmf.PLDPmf:
    """dp-accounting's continuous connect-the-dots (``create_pmf_pessimistic_connect_dots_fixed_gap``)."""
    bounds = loss.connect_dots_bounds()
    lo, hi = math.floor(bounds.epsilon_lower / h), math.ceil(bounds.epsilon_upper / h)
    deltas = _gaussian_deltas(loss, np.arange(lo, hi + 1) * h)
    if hi - lo + 1 <= _SPARSE:  # small: dp-accounting's own (sparse) construction
        return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(h, lo, hi, deltas)
    diffs = np.diff(deltas)
    if np.any(diffs > 1e-12):  # pld_pmf._DELTA_DIFF_TOLERANCE
        raise ValueError(f"deltas are not in non-increasing order: deltas={deltas}.")
    deltas = np.minimum.accumulate(deltas)
    diffs = np.diff(deltas)
    probs = np.zeros_like(deltas)
    probs[0] = 1 - deltas[0] + diffs[0] / math.expm1(h)
    probs[1:-1] = (diffs[1:] - diffs[:-1] * math.exp(h)) / math.expm1(h)
    probs[-1] = diffs[-1] / math.expm1(-h)
    return pld_pmf.DensePLDPmf(h, lo, np.maximum(0.0, probs), float(deltas[-1]), True)


def gaussian_pld(noise_multiplier: float, sampling_prob: float, interval: float) -> PLD:
    """``from_gaussian_mechanism(noise_multiplier, sensitivity=1, sampling_prob, pessimistic, interval)``."""

    def one(adjacency: Any) -> pld_pmf.PLDPmf:
        loss = privacy_loss_mechanism.GaussianPrivacyLoss(
            noise_multiplier, sensitivity=1.0, sampling_prob=sampling_prob, adjacency_type=adjacency
        )
        return _connect_dots(loss, interval)

    remove = one(privacy_loss_mechanism.AdjacencyType.REMOVE)
    if sampling_prob == 1.0:
        return PLD(remove)
    return PLD(remove, one(privacy_loss_mechanism.AdjacencyType.ADD))


# ------------------------------------------------------------------------------------------ composition
def _prefix(probs: np.ndarray, threshold: float) -> int:
    """``_find_prefix_to_truncate``: the longest prefix whose running sum stays ≤ ``threshold``."""
    above = np.flatnonzero(np.cumsum(probs) > threshold)
    return int(above[0]) if above.size else len(probs)


def _compose_pmf(a: Any, b: Any, tail: float) -> pld_pmf.PLDPmf:
    small = (
        isinstance(a, pld_pmf.SparsePLDPmf)
        and isinstance(b, pld_pmf.SparsePLDPmf)
        and a.size * b.size <= _SPARSE
    )
    if small or not a._pessimistic_estimate:
        return pld_pmf.compose_pmfs(a, b, tail)
    a, b = _dense(a), _dense(b)
    a.validate_composable(b)
    from scipy import signal

    probs = signal.fftconvolve(a._probs, b._probs)
    inf = a._infinity_mass + b._infinity_mass - a._infinity_mass * b._infinity_mass
    left = _prefix(probs, tail / 2)
    right = max(len(probs) - _prefix(probs[::-1], tail / 2), left + 1)
    left_mass, right_mass = np.sum(probs[:left]), np.sum(probs[right:])
    kept = probs[left:right]
    kept[0] += left_mass  # pessimistic: the left tail onto the smallest kept loss, the right tail to infinity
    return pld_pmf.DensePLDPmf(
        a._discretization, a._lower_loss + b._lower_loss + left, kept, inf + right_mass, True
    )


def compose(a: PLD, b: PLD, tail: float = TAIL_MASS) -> PLD:
    """``a.compose(b)`` (pessimistic PLDs)."""
    remove = _compose_pmf(a._pmf_remove, b._pmf_remove, tail)
    if a._symmetric and b._symmetric:
        return PLD(remove)
    return PLD(remove, _compose_pmf(a._pmf_add, b._pmf_add, tail))


def log_mgfs(probs: np.ndarray) -> list[tuple[float, float]]:
    """``(order, log Σ_k p_k e^{order·k})`` at the orders m / n, m = ±1..±20, of dp-accounting's bounds.

    A sum of products with powers of one base (two exponentials per point, not forty log-sum-exps); every
    term is scaled into [e^-20, 1] first, so none over- or underflows. NumPy's own sum, not a BLAS dot: above
    10^4 points OpenBLAS runs a dot on its thread pool, whose idle worker then spins for ~0.1 s and, on two
    cores, took a core from the training while a run's ledger thread composed (issue 17)."""
    n = len(probs)
    k = np.arange(n, dtype=np.float64)
    out = []
    for sign, base, shift in ((1, np.exp((k - (n - 1)) / n), (n - 1) / n), (-1, np.exp(-k / n), 0.0)):
        power = np.ones(n)
        for m in range(1, 21):
            power = power * base
            total = float(np.add.reduce(power * probs))
            out.append((sign * m / n, m * shift + math.log(total) if total > 0 else -math.inf))
    return out


def chernoff_window(mgfs: list[tuple[float, float]], n: int, times: int, tail: float) -> tuple[int, int]:
    """``common.compute_self_convolve_bounds`` from :func:`log_mgfs`: the index window of the ``times``-fold
    convolution outside which at most ``tail`` of the mass lies."""
    upper, lower = (n - 1) * times, 0
    log_2_over_tail = math.log(2 / tail)
    for order, log_mgf in mgfs:
        bound = (times * log_mgf + log_2_over_tail) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            upper = min(upper, math.ceil(bound))
        else:
            lower = max(lower, math.floor(bound))
    return lower, upper


def _bounds(probs: np.ndarray, times: int, tail: float) -> tuple[int, int]:
    """``common.compute_self_convolve_bounds``: Chernoff bounds at the orders m / n, m = ±1..±20."""
    return chernoff_window(log_mgfs(probs), len(probs), times, tail)


def spectrum_power(spectrum: np.ndarray, times: int) -> np.ndarray:
    """``spectrum ** times`` by repeated squaring, in place (|values| ≤ 1: a characteristic function)."""
    out: np.ndarray | None = None
    base = spectrum.copy()
    while times:
        if times & 1:
            out = base.copy() if out is None else np.multiply(out, base, out=out)
        times >>= 1
        if times:
            np.multiply(base, base, out=base)
    assert out is not None
    return out


def _self_compose_pmf(pmf: Any, times: int, tail: float) -> pld_pmf.PLDPmf:
    if (
        isinstance(pmf, pld_pmf.SparsePLDPmf) and pmf.size**times <= _SPARSE
    ) or not pmf._pessimistic_estimate:
        return pmf.self_compose(times, tail)
    dense = _dense(pmf)
    probs = np.asarray(dense._probs, dtype=np.float64)
    lower, upper = _bounds(probs, times, tail)
    size = upper - lower + 1
    fast = fft.next_fast_len(max(size, len(probs)))  # dp-accounting's length: the same wrap-around
    out = np.roll(fft.irfft(spectrum_power(fft.rfft(probs, fast), times), fast), -lower)[:size]
    inf = tail - math.expm1(times * math.log1p(-dense._infinity_mass))
    return pld_pmf.DensePLDPmf(
        dense._discretization, dense._lower_loss * times + lower, np.array(out), inf, True
    )


def self_compose(pld: PLD, times: int, tail: float = TAIL_MASS) -> PLD:
    """``pld.self_compose(times)`` (pessimistic PLDs)."""
    if times == 1:
        return pld
    remove = _self_compose_pmf(pld._pmf_remove, times, tail)
    if pld._symmetric:
        return PLD(remove)
    return PLD(remove, _self_compose_pmf(pld._pmf_add, times, tail))


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
    if isinstance(pmf, pld_pmf.SparsePLDPmf):
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


def epsilon_for_delta(pld: PLD, delta: float) -> float:
    """``pld.get_epsilon_for_delta(delta)``: the larger of the two adjacencies."""
    eps = pmf_epsilon(pld._pmf_remove, delta)
    if pld._symmetric:
        return eps
    return max(eps, pmf_epsilon(pld._pmf_add, delta))
