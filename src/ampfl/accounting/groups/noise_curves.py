"""Noise functions z(q) for the GDPFed+ planner's search (paper 001, ampfl's design: docs/planner.md).

The search evaluates the error model at many sampling rates, so it needs each budget's noise multiplier as
a cheap function of q. Three sources: sound calibration on a log-spaced q grid interpolated by PCHIP (one
calibration per budget and grid rate), shared ε(z) curves per grid rate (cost independent of the number of
budgets, used from :data:`SHARED_CURVE_MIN_BUDGETS` distinct budgets), and the inferred closed form of
001's Theorem 1 (``analysis="paper"``). Only the search uses these; the planner calibrates its final plan
exactly (:mod:`ampfl.accounting.groups.calibration`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import interpolate

from ampfl.accounting.calibrate import UnreachableTarget
from ampfl.accounting.groups.calibration import sound_group_sigma
from ampfl.accounting.groups.search import NoiseFn
from ampfl.accounting.orders import DEFAULT_ORDERS

__all__ = [
    "SHARED_CURVE_MIN_BUDGETS",
    "SURROGATE_ORDERS",
    "paper_noise_fn",
    "pchip_noise",
    "shared_curve_noise",
]

#: Orders of the interpolation grid's calibrations: a subset of the one grid (sound, slightly looser, and
#: cheaper): 2..16, multiples of 8 to 64, then every third order of the grid up to ~2000 (ε down to ~0.01);
#: every reported noise multiplier is re-calibrated on the full grid.
SURROGATE_ORDERS: tuple[int, ...] = tuple(
    a for a in DEFAULT_ORDERS if a <= 16 or (a <= 64 and a % 8 == 0)
) + tuple(a for a in [b for b in DEFAULT_ORDERS if b > 64][::3] if a <= 2200)
_SURROGATE_RTOL = 1e-3


def _pchip(q_grid: np.ndarray, sig: list[float]) -> NoiseFn:
    """PCHIP in (log q, log z) through non-decreasing calibrated values (a running max)."""
    log_sig = np.maximum.accumulate(np.log(np.asarray(sig)))
    if q_grid.size == 1:
        return lambda q: np.full(np.shape(q), float(np.exp(log_sig[0])))
    spline = interpolate.PchipInterpolator(np.log(q_grid), log_sig, extrapolate=True)
    return lambda q: np.asarray(np.exp(spline(np.log(np.maximum(q, 1e-300)))), dtype=float)


def pchip_noise(eps: float, q_grid: np.ndarray, rounds: int, delta: float) -> NoiseFn:
    """z(q) for one budget: sound calibration on ``q_grid``, PCHIP in (log q, log z) between the points.

    PCHIP preserves the monotonicity of the data, and the data are made non-decreasing (a running max of
    calibrated values, each within rtol of the truth), so the interpolant increases with q like z does.
    Only the search uses it (on :data:`SURROGATE_ORDERS`); the final plan is calibrated exactly.
    """
    sig = []
    start = 1.0
    for q in q_grid:
        try:
            s = sound_group_sigma(
                eps,
                sampling_rate=float(q),
                rounds=rounds,
                target_delta=delta,
                rtol=_SURROGATE_RTOL,
                initial=start,
                orders=SURROGATE_ORDERS,
            )
        except UnreachableTarget:  # the subset may not reach a small budget: the full grid decides
            s = sound_group_sigma(
                eps, sampling_rate=float(q), rounds=rounds, target_delta=delta, initial=start
            )
        sig.append(s)
        start = s
    return _pchip(q_grid, sig)


#: Above this many distinct budgets the search's z(q) comes from one ε(z) curve per grid rate (shared by all
#: budgets) instead of one calibration per (budget, rate): cost independent of the number of budgets.
SHARED_CURVE_MIN_BUDGETS = 8
#: z grid of the shared curves: log-spaced, ratio ~1.07 per step (log ε is smooth in log z: the search only).
_CURVE_Z = np.geomspace(0.05, 2e3, 150)


def shared_curve_noise(
    budgets: np.ndarray, q_grid: np.ndarray, rounds: int, delta: float
) -> dict[float, NoiseFn] | None:
    """z(q) for every budget from ε(z) curves at each grid rate (SURROGATE_ORDERS), interpolated in log-log.

    Returns None when a budget falls outside a curve's range (the caller then calibrates per budget). Only
    the search uses these values; the final plan is calibrated exactly.
    """
    from ampfl.accounting.accountants import RDPAccountant
    from ampfl.accounting.events import GroupRoundEvent

    table = np.empty((q_grid.size, budgets.size))
    for i, q in enumerate(q_grid):
        eps = np.array(
            [
                RDPAccountant(orders=SURROGATE_ORDERS)
                .compose(GroupRoundEvent(sampling_rate=float(q), noise_multiplier=float(z)), rounds)
                .get_epsilon(delta)
                for z in _CURVE_Z
            ]
        )
        eps = np.minimum.accumulate(eps)  # ε decreases with z; guard round-off
        if not (eps[-1] <= budgets.min() and eps[0] >= budgets.max()):
            return None
        # log z as a function of log ε (ε decreasing: reverse to increasing for np.interp)
        table[i] = np.exp(np.interp(np.log(budgets), np.log(eps[::-1]), np.log(_CURVE_Z[::-1])))
    return {float(b): _pchip(q_grid, list(table[:, j])) for j, b in enumerate(budgets)}


def paper_noise_fn(eps: float, rounds: int, delta: float) -> NoiseFn:
    """z(q) = q · sqrt(7 T (ε + 2 log(1/δ))) / ε: Theorem 1 of 001 as inferred ([I]), vectorised."""
    factor = math.sqrt(7.0 * rounds * (eps + 2.0 * math.log(1.0 / delta))) / eps

    def fn(q: np.ndarray) -> np.ndarray:
        return np.asarray(factor * np.asarray(q, dtype=float), dtype=float)

    return fn
