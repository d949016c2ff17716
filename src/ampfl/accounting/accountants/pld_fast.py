"""Vectorised PLD kernels: dp-accounting's algorithms without its per-point Python loops.

dp-accounting 0.6 builds a Poisson-subsampled Gaussian PLD by inverting the privacy loss one grid point at a
time, truncates composed tails and answers ε(δ) with Python loops over the PMF; on the 1e-4 grid those loops
dominate a calibration and every evaluation of a run. The functions here run the same algorithms over arrays:

- :func:`gaussian_pld`: ``from_gaussian_mechanism(..., use_connect_dots=True)`` (pessimistic connect-the-dots,
  both adjacencies): the same grid, the inverse privacy loss in closed form over all grid points at once;
- :func:`compose` and :func:`self_compose`: ``compose`` / ``self_compose`` with the tail truncation (prefix
  sums) and the Chernoff truncation bounds (powers of one base, no log-sum-exp per order) vectorised; the
  T-fold power of the spectrum by repeated squaring of a real FFT (half the spectrum, ~2 log2 T products
  instead of a complex ``**``), on dp-accounting's FFT length (the same wrap-around of the truncated tails);
- :func:`epsilon_for_delta`: ``get_epsilon_for_delta`` by prefix sums from the largest loss down (defined in
  :mod:`~ampfl.accounting.accountants.pld_dense`, below this module, whose PMF types answer with it).

Each is the dp-accounting algorithm (pessimistic rounding, tail mass to infinity); results agree with
dp-accounting's to rounding (tests/accounting/test_pld_accountant_fast.py: PMFs to 1e-12, ε to 1e-9 relative,
1e-6 after a self-composition, whose FFT rounding — in dp-accounting's too — moves ε at δ ≤ 1e-11 by ~1e-5
relative; a direct term-by-term convolution agrees to 1e-14 per point).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ampfl.accounting.accountants import pld_dense
from ampfl.accounting.accountants.pld_dense import (
    DensePmf,
    Pld,
    epsilon_for_delta,
    pmf_epsilon,
    walk_epsilon,
)
from ampfl.accounting.pld_grid import tail_cut

__all__ = [
    "TAIL_MASS",
    "compose",
    "convolve",
    "epsilon_for_delta",
    "fft_length",
    "gaussian_pld",
    "pmf_epsilon",
    "self_compose",
    "spectrum_power",
    "walk_epsilon",
]


TAIL_MASS = 1e-15  # dp-accounting's default tail_mass_truncation of compose / self_compose
_SPARSE = 1000  # dp-accounting's _MAX_PMF_SPARSE_SIZE


def fft_length(n: int) -> int:
    """The smallest m·2^j ≥ n with m ∈ {4, 5, 6, 7} (a power of two up to 64): at most 25 % longer than n
    (a power of two wastes up to 100 %, and an inverse FFT's time grows about linearly with its length);
    pocketfft's radix-5 and radix-7 passes cost about what radix 2 does per point, so a round's reading at
    length 5·2^15 takes ~3 ms instead of ~5 ms at 2^18. A multiple of 2·16 from n > 256 on."""
    if n <= 64:
        return max(2, 1 << (n - 1).bit_length())
    shift = (n - 1).bit_length() - 3
    return next(m << shift for m in (4, 5, 6, 7, 8) if m << shift >= n)


def convolve(a: np.ndarray, b: np.ndarray, native: bool = True) -> np.ndarray:
    """The linear convolution of two PMFs by a real FFT: NumPy's (``native``: without importing scipy.signal,
    for the accountant's own PLDs), else ``scipy.signal.fftconvolve`` as dp-accounting's ``compose`` (the
    same FFT length, so the same rounding in the far tails, where it decides the truncation)."""
    if not native:
        from scipy import signal

        return np.asarray(signal.fftconvolve(a, b), dtype=np.float64)
    n = len(a) + len(b) - 1
    length = fft_length(n)
    return np.fft.irfft(np.fft.rfft(a, length) * np.fft.rfft(b, length), length)[:n]


def _dense(pmf: Any) -> Any:
    return pmf.to_dense_pmf()


def _native(*objects: Any) -> bool:
    """Whether any of the PMFs / PLDs is ampfl's own (:mod:`pld_dense`): the result is then ampfl's too."""
    return any(isinstance(o, DensePmf | Pld) for o in objects)


def _dense_pmf(h: float, lower: int, probs: np.ndarray, inf: float, native: bool) -> Any:
    if native:
        return DensePmf(h, lower, probs, inf)
    from dp_accounting.pld import pld_pmf

    return pld_pmf.DensePLDPmf(h, lower, probs, inf, True)


def _pld(remove: Any, add: Any, native: bool) -> Any:
    if native:
        return Pld(remove, add)
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

    return PrivacyLossDistribution(remove, add)


# ----------------------------------------------------------------------------------------- construction
def gaussian_pld(noise_multiplier: float, sampling_prob: float, interval: float) -> Any:
    """``from_gaussian_mechanism(noise_multiplier, sensitivity=1, sampling_prob, pessimistic, interval)``
    as a dp-accounting PLD: the grid and divergences of :func:`pld_dense.gaussian_connect_dots` with SciPy's
    normal CDF, as dp-accounting's (the accountant uses :func:`pld_dense.gaussian_pld`: the same algorithm on
    ampfl's CDF, without dp-accounting or SciPy); a PMF of at most 1000 points is dp-accounting's sparse one,
    as ``from_gaussian_mechanism`` builds it."""
    from dp_accounting.pld import pld_pmf
    from scipy import special

    def log_cdf(x: np.ndarray, _: np.ndarray | None) -> np.ndarray:
        return np.asarray(special.log_ndtr(x), dtype=np.float64)

    def one(add: bool) -> Any:
        lo, hi, deltas = pld_dense.gaussian_connect_dots(
            noise_multiplier, sampling_prob, interval, add, special.ndtr, log_cdf
        )
        if hi - lo + 1 <= _SPARSE:  # small: dp-accounting's own (sparse) construction
            return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(interval, lo, hi, deltas)
        probs, inf = pld_dense.connect_dots_probs(deltas, interval)
        return pld_pmf.DensePLDPmf(interval, lo, probs, inf, True)

    remove = one(False)
    return _pld(remove, None if sampling_prob == 1.0 else one(True), False)


# ------------------------------------------------------------------------------------------ composition
def _compose_pmf(a: Any, b: Any, tail: float) -> Any:
    native = _native(a, b)
    if not native:
        from dp_accounting.pld import pld_pmf

        small = (
            isinstance(a, pld_pmf.SparsePLDPmf)
            and isinstance(b, pld_pmf.SparsePLDPmf)
            and a.size * b.size <= _SPARSE
        )
        if small or not a._pessimistic_estimate:
            return pld_pmf.compose_pmfs(a, b, tail)
    a, b = _dense(a), _dense(b)
    a.validate_composable(b)
    probs = convolve(a._probs, b._probs, native)
    inf = a._infinity_mass + b._infinity_mass - a._infinity_mass * b._infinity_mass
    left, right = tail_cut(probs, tail / 2, tail / 2)  # the tail guard (pld_grid)
    left_mass, right_mass = np.sum(probs[:left]), np.sum(probs[right:])
    kept = probs[left:right]
    kept[0] += left_mass  # pessimistic: the left tail onto the smallest kept loss, the right tail to infinity
    return _dense_pmf(a._discretization, a._lower_loss + b._lower_loss + left, kept, inf + right_mass, native)


def compose(a: Any, b: Any, tail: float = TAIL_MASS) -> Any:
    """``a.compose(b)`` (pessimistic PLDs; ampfl's :class:`~pld_dense.Pld` if either is one, else
    dp-accounting's)."""
    native = _native(a, b)
    remove = _compose_pmf(a._pmf_remove, b._pmf_remove, tail)
    if a._symmetric and b._symmetric:
        return _pld(remove, None, native)
    return _pld(remove, _compose_pmf(a._pmf_add, b._pmf_add, tail), native)


def log_mgfs(probs: np.ndarray) -> list[tuple[float, float]]:
    """``(order, log Σ_k p_k e^{order·k})`` at the orders m / n, m = ±1..±20, of dp-accounting's bounds.

    A sum of products with powers of one base (two exponentials per point, not forty log-sum-exps); every
    term is scaled into [e^-20, 1] first, so none over- or underflows. NumPy's own sum, not a BLAS dot: above
    10^4 points OpenBLAS runs a dot on its thread pool, whose idle worker then spins for ~0.1 s and, on two
    cores, took a core from the training while a run's ledger thread composed."""
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


def _self_compose_pmf(pmf: Any, times: int, tail: float) -> Any:
    native = _native(pmf)
    if not native and (
        (type(pmf).__name__ == "SparsePLDPmf" and pmf.size**times <= _SPARSE) or not pmf._pessimistic_estimate
    ):
        return pmf.self_compose(times, tail)
    from scipy import fft  # dp-accounting's FFT length (below): the same wrap-around as its self_compose

    dense = _dense(pmf)
    probs = np.asarray(dense._probs, dtype=np.float64)
    lower, upper = _bounds(probs, times, tail)
    size = upper - lower + 1
    fast = fft.next_fast_len(max(size, len(probs)))
    out = np.roll(fft.irfft(spectrum_power(fft.rfft(probs, fast), times), fast), -lower)[:size]
    inf = tail - math.expm1(times * math.log1p(-dense._infinity_mass))
    return _dense_pmf(dense._discretization, dense._lower_loss * times + lower, np.array(out), inf, native)


def self_compose(pld: Any, times: int, tail: float = TAIL_MASS) -> Any:
    """``pld.self_compose(times)`` (pessimistic PLDs)."""
    if times == 1:
        return pld
    native = _native(pld)
    remove = _self_compose_pmf(pld._pmf_remove, times, tail)
    if pld._symmetric:
        return _pld(remove, None, native)
    return _pld(remove, _self_compose_pmf(pld._pmf_add, times, tail), native)
