"""Log-space numerics shared by every analysis (one implementation each).

Each function either is exact in floating point up to a few ulps or rounds its result *up* by a bound on its
round-off, so that a privacy loss computed from it is never understated. The searches: :func:`find_root` (the
one root finder), :func:`epsilon_from_delta_curve` (ε where a δ(ε) curve meets a target) and
:func:`smallest_feasible` (calibration's geometric search). SciPy is imported inside the functions that use
it: :mod:`ampfl.accounting.calibrate` imports this module on the accountants' start-up path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np

from ampfl.accounting._checks import NumericalError

__all__ = [
    "EPS",
    "UnreachableTarget",
    "epsilon_from_delta_curve",
    "find_root",
    "log1p_of_logsum",
    "log_comb_row",
    "log_expm1",
    "log_sub_exp",
    "smallest_feasible",
]

EPS = float(np.finfo(np.float64).eps)


def log_sub_exp(a: float, b: float) -> float:
    """log(exp(a) − exp(b)) for a ≥ b; −inf when equal."""
    if b == -math.inf:
        return a
    if b >= a:
        return -math.inf
    return a + math.log(-math.expm1(b - a))


def log_expm1(x: np.ndarray) -> np.ndarray:
    """log(eˣ − 1) for x ≥ 0, accurate for tiny x and without overflow for large x (−inf at 0)."""
    x = np.asarray(x, dtype=np.float64)
    small = x < 30.0
    with np.errstate(divide="ignore"):
        out = np.where(
            small, np.log(np.expm1(np.where(small, x, 1.0))), x + np.log1p(-np.exp(-np.where(small, 30.0, x)))
        )
    return np.asarray(out, dtype=np.float64)


def log1p_of_logsum(terms: np.ndarray, axis: int = -1) -> np.ndarray:
    """``log(1 + Σ exp(terms))`` along ``axis``, rounded up by a bound on its floating-point error.

    The error of a log-sum-exp is about eps · Σ wᵢ(|tᵢ| + 1) with weights wᵢ = exp(tᵢ − lse); through
    ``log1p`` it shrinks by the factor ``exp(lse) / (1 + exp(lse))``.
    """
    from scipy import special  # here, not at import: the accountants' start-up path imports this module

    t = np.asarray(terms, dtype=np.float64)
    lse = np.asarray(special.logsumexp(t, axis=axis, keepdims=True), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        w = np.where(np.isfinite(t), np.exp(t - lse), 0.0)
    spread = np.sum(w * (np.abs(np.where(np.isfinite(t), t, 0.0)) + 1.0), axis=axis)
    lse = np.squeeze(lse, axis=axis)
    value = np.logaddexp(0.0, lse)
    shrink = np.exp(np.minimum(lse, 0.0) - np.logaddexp(0.0, np.minimum(lse, 0.0)))
    err = 8.0 * EPS * (spread * shrink + value + 1.0 * shrink)
    return np.asarray(value + err * (t.shape[axis] + 2.0) ** 0.5, dtype=np.float64)


def log_comb_row(n: int) -> np.ndarray:
    """log C(n, ℓ) for ℓ = 0..n (gammaln; exact to a few ulps of its magnitude)."""
    from scipy import special

    ell = np.arange(n + 1, dtype=np.float64)
    return np.asarray(special.gammaln(n + 1.0) - special.gammaln(ell + 1.0) - special.gammaln(n - ell + 1.0))


def _side(f: Callable[[float], float], x: float, name: str) -> float:
    """f(x), refusing nan (inf is fine: only its sign is used)."""
    value = float(f(x))
    if math.isnan(value):
        raise NumericalError(f"{name}: the function is nan at {x!r}; no root can be bracketed there.")
    return value


def find_root(
    f: Callable[[float], float],
    lo: float,
    hi: float,
    *,
    expand: Literal["none", "upper", "lower", "both"] = "none",
    max_hi: float = 1e6,
    min_lo: float = -1e6,
    factor: float = 2.0,
    xtol: float = 0.0,
    rtol: float = 1e-12,
    end: Literal["lower", "upper"] = "upper",
    name: str = "root",
    max_iter: int = 4000,
) -> float:
    """A sign change of ``f`` in a bracket it checks (the one root finder of the accounting layer).

    ``f(lo)`` and ``f(hi)`` must differ in sign (an exact zero is returned at once). If they do not, the
    ends named by ``expand`` move out geometrically from the other end (an upper end at ``lo + (hi − lo)·
    factorᵏ``, the old end becoming the new other end) until they do, up to ``max_hi`` / ``min_lo``. ±inf
    values of ``f`` count by their sign; a nan raises. The bracket is then bisected (arithmetic midpoints,
    so each end keeps the sign of ``f`` it had) until ``hi − lo ≤ xtol + rtol·max(|lo|, |hi|)`` or the ends
    are adjacent floats.

    Args:
        f: the function; need not be continuous (a step is found like a root).
        lo, hi: the initial bracket (``lo < hi``).
        expand: which end(s) may move out when the initial bracket has no sign change.
        max_hi, min_lo: finite limits of the expansion (inclusive).
        factor: growth of the bracket's width per expansion step (> 1).
        xtol, rtol: absolute and relative width of the final bracket.
        end: which end of the final bracket to return; each end is a point where ``f`` has the sign it had
            at that end of the checked bracket (or is 0), so the caller picks its conservative side (e.g.
            ``"upper"`` for the smallest ε with δ(ε) − target ≤ 0, δ decreasing: never under-reports).
        name: what is searched, for error messages.
        max_iter: cap on expansion plus bisection steps.

    Returns:
        The chosen end of the final bracket (or a point where ``f`` is exactly 0).

    Raises:
        NumericalError: when ``f`` is nan at a probe, or no sign change is found within the limits.
        ValueError: on an invalid bracket or settings.
    """
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"{name}: the bracket must be finite with lo < hi. Found [{lo}, {hi}].")
    if not (math.isfinite(max_hi) and math.isfinite(min_lo) and min_lo <= lo and hi <= max_hi):
        raise ValueError(
            f"{name}: the limits must be finite and contain the bracket. Found [{min_lo}, {max_hi}]."
        )
    if not factor > 1.0:
        raise ValueError(f"{name}: factor must be > 1. Found {factor}.")
    f_lo, f_hi = _side(f, lo, name), _side(f, hi, name)
    anchor_lo, anchor_hi = lo, hi
    limit_lo = min_lo if expand in ("lower", "both") else lo
    limit_hi = max_hi if expand in ("upper", "both") else hi
    steps = 0
    while (f_lo > 0.0) == (f_hi > 0.0) and f_lo != 0.0 and f_hi != 0.0:
        up = expand in ("upper", "both") and hi < max_hi
        down = expand in ("lower", "both") and lo > min_lo
        steps += 1
        if not (up or down) or steps > max_iter:
            raise NumericalError(
                f"{name}: no sign change in [{lo:.6g}, {hi:.6g}] (f = {f_lo:.6g}, {f_hi:.6g}); the root "
                f"is not bracketed within the search limits [{limit_lo:.6g}, {limit_hi:.6g}]."
            )
        if up:
            new_hi = min(max_hi, anchor_lo + (hi - anchor_lo) * factor)
            if not down:
                lo, f_lo = hi, f_hi
            hi, f_hi = new_hi, _side(f, new_hi, name)
        if down and (f_lo > 0.0) == (f_hi > 0.0) and f_lo != 0.0 and f_hi != 0.0:
            new_lo = max(min_lo, anchor_hi - (anchor_hi - lo) * factor)
            if not up:
                hi, f_hi = lo, f_lo
            lo, f_lo = new_lo, _side(f, new_lo, name)
    if f_lo == 0.0:
        return lo
    if f_hi == 0.0:
        return hi
    positive_lo = f_lo > 0.0
    for _ in range(max_iter):
        if hi - lo <= xtol + rtol * max(abs(lo), abs(hi)):
            break
        mid = lo + 0.5 * (hi - lo)
        if not lo < mid < hi:
            break
        f_mid = _side(f, mid, name)
        if f_mid == 0.0:
            return mid
        if (f_mid > 0.0) == positive_lo:
            lo = mid
        else:
            hi = mid
    return hi if end == "upper" else lo


def epsilon_from_delta_curve(
    delta_at: Callable[[float], float],
    target: float,
    *,
    start: float = 1.0,
    expand: bool = True,
    max_epsilon: float = 1e6,
    xtol: float = 0.0,
    rtol: float = 1e-12,
    name: str = "epsilon",
) -> float:
    """The smallest ε ≥ 0 at which a non-increasing δ(ε) curve meets ``target`` (the one ε-from-δ search).

    0 when δ(0) ≤ ``target``; else :func:`find_root` on δ(ε) − target over [0, ``start``] (its upper end
    moving out geometrically up to ``max_epsilon`` when ``expand``) to ``xtol`` + ``rtol``·ε, returning the
    upper end of the final bracket: δ ≤ ``target`` holds there, so ε is never under-reported. Pass log δ and
    log target to search in log space (a curve that underflows).

    Raises:
        NumericalError: when δ is nan at a probe, or still above ``target`` at ``max_epsilon`` (or at
            ``start`` without ``expand``).
    """
    if delta_at(0.0) <= target:
        return 0.0
    return find_root(
        lambda e: delta_at(e) - target,
        0.0,
        start,
        expand="upper" if expand else "none",
        max_hi=max(max_epsilon, start),
        xtol=xtol,
        rtol=rtol,
        end="upper",
        name=name,
    )


class UnreachableTarget(NumericalError):
    """No noise level in the search range meets the target; ``smallest_epsilon`` is the best certified."""

    def __init__(self, message: str, *, smallest_epsilon: float) -> None:
        super().__init__(message)
        self.smallest_epsilon = smallest_epsilon


def smallest_feasible(
    f: Callable[[float], float],
    target: float,
    *,
    name: str = "noise_multiplier",
    initial: float = 1.0,
    lower_limit: float = 1e-6,
    upper_limit: float = 1e6,
    rtol: float = 1e-6,
    max_iter: int = 200,
    step: float = 2.0,
) -> float:
    """Smallest ``x`` in ``[lower_limit, upper_limit]`` with ``f(x) <= target``, for ``f`` non-increasing:
    calibration's search, exported as :func:`ampfl.accounting.calibrate.calibrate_decreasing`.

    A geometric bracket search from ``initial`` (factor ``step``), then bisection at geometric midpoints
    until ``x_hi / x_lo − 1 ≤ rtol``; the result is re-checked, so ``f(x) <= target`` always holds (errs
    towards more noise, never less).

    Args:
        f: privacy loss (ε or δ) as a function of the searched parameter; must not increase with it.
        target: the largest acceptable value of ``f`` (any real; pass logs to search on log δ).
        name: parameter name used in error messages.
        initial: first guess for ``x``.
        lower_limit, upper_limit: search limits; reaching ``upper_limit`` without meeting the target raises.
        rtol: relative width of the final bracket.
        max_iter: cap on bisection steps.
        step: factor of the geometric bracket search around ``initial`` (> 1; small when ``initial`` is a
            good guess).

    Returns:
        ``x_hi`` with ``f(x_hi) <= target`` and ``x_hi / x_lo - 1 <= rtol`` for some ``x_lo`` with
        ``f(x_lo) > target`` (or ``x_hi == lower_limit``).

    Raises:
        UnreachableTarget: if even ``upper_limit`` does not meet the target (``smallest_epsilon`` holds the
            smallest value of ``f`` reached, in ``f``'s units).
    """
    if math.isnan(target):
        raise ValueError("target must be a real number. Found nan.")
    lo, hi = None, None
    x = min(max(initial, lower_limit), upper_limit)
    if f(x) <= target:
        hi = x
        while True:
            cand = max(hi / step, lower_limit)
            if cand == hi:
                return hi
            if f(cand) <= target:
                hi = cand
            else:
                lo = cand
                break
    else:
        lo = x
        while True:
            cand = min(lo * step, upper_limit)
            if f(cand) <= target:
                hi = cand
                break
            if cand >= upper_limit:
                floor = f(cand)
                raise UnreachableTarget(
                    f"{name}: the target {target:g} is unreachable: no value up to {upper_limit:g} meets it "
                    f"(the smallest value reached is {floor:.6g}).",
                    smallest_epsilon=floor,
                )
            lo = cand
    for _ in range(max_iter):
        if hi / lo - 1.0 <= rtol:
            break
        mid = math.sqrt(lo * hi)
        if f(mid) <= target:
            hi = mid
        else:
            lo = mid
    if not f(hi) <= target:  # pragma: no cover - defensive re-check (f must be monotone)
        raise NumericalError(f"{name}: calibration re-check failed; the loss is not monotone in {name}.")
    return hi
