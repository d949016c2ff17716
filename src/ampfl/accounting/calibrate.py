"""Generic, pure noise calibration (STYLE.md rule 11).

:func:`calibrate_decreasing` finds the smallest parameter value ``x`` (typically a noise multiplier) such
that a privacy-loss function ``f(x)`` that decreases in ``x`` is at most a target. It searches in log space,
expands the bracket geometrically, refines by bisection on ``log f``, and re-checks the result so that the
returned ``x`` always satisfies ``f(x) <= target`` (it errs towards more noise, never less).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ampfl.accounting._checks import NumericalError


def calibrate_decreasing(
    f: Callable[[float], float],
    target: float,
    *,
    name: str = "noise_multiplier",
    initial: float = 1.0,
    lower_limit: float = 1e-6,
    upper_limit: float = 1e6,
    rtol: float = 1e-6,
    max_iter: int = 200,
) -> float:
    """Smallest ``x`` in ``[lower_limit, upper_limit]`` with ``f(x) <= target``, for ``f`` non-increasing.

    Args:
        f: privacy loss (ε or δ) as a function of the searched parameter; must not increase with it.
        target: the largest acceptable value of ``f`` (any real; pass logs to search on log δ).
        name: parameter name used in error messages.
        initial: first guess for ``x``.
        lower_limit, upper_limit: search limits; reaching ``upper_limit`` without meeting the target raises.
        rtol: relative width of the final bracket.
        max_iter: cap on bisection steps.

    Returns:
        ``x_hi`` with ``f(x_hi) <= target`` and ``x_hi / x_lo - 1 <= rtol`` for some ``x_lo`` with
        ``f(x_lo) > target`` (or ``x_hi == lower_limit``).

    Raises:
        NumericalError: if even ``upper_limit`` does not meet the target.
    """
    if math.isnan(target):
        raise ValueError("target must be a real number. Found nan.")
    lo, hi = None, None
    x = min(max(initial, lower_limit), upper_limit)
    if f(x) <= target:
        hi = x
        while True:
            cand = max(hi / 2.0, lower_limit)
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
            cand = min(lo * 2.0, upper_limit)
            if f(cand) <= target:
                hi = cand
                break
            if cand >= upper_limit:
                raise NumericalError(
                    f"{name}: no value up to {upper_limit:g} meets the target {target:g}; "
                    "the target is unreachable for these parameters."
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
