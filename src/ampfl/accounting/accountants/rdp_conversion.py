"""The RDP accountant's conversion of a Rényi curve to (ε, δ): paper 002, Proposition 2.3 as written in
RECOVERED_MATH §1.2 [I, standard form; Canonne, Kamath & Steinke 2020 Prop. 12, Asoodeh et al. 2020]::

    ε_DP = ε + log((α − 1)/α) − (log δ + log α)/(α − 1)

minimised over the orders, and its inverse δ(ε). Like dp-accounting, both directions also use the
total-variation bound δ ≤ TV ≤ sqrt(1 − e^{−KL}) ≤ sqrt(1 − e^{−D_α}) (Bretagnolle–Huber; KL ≤ D_α), which
only matters when δ is large or the RDP tiny (an empty ledger gives ε = 0). Results are rounded up (a few
ulps) so that round-off never reports a smaller ε or δ. Also importable from :mod:`ampfl.accounting.rdp`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from ampfl.accounting._checks import check_delta, check_int, check_nonnegative
from ampfl.accounting._numerics import EPS as _EPS

__all__ = ["DeltaAtOrder", "EpsilonAtOrder", "delta_from_rdp", "epsilon_from_rdp"]


class EpsilonAtOrder(NamedTuple):
    """An ε guarantee and the Rényi order that gives it."""

    epsilon: float
    order: int


class DeltaAtOrder(NamedTuple):
    """A δ guarantee and the Rényi order that gives it."""

    delta: float
    order: int


def _check_curve(orders: Iterable[object], rdp: Iterable[object]) -> tuple[np.ndarray, np.ndarray]:
    try:
        raw_orders, raw_values = list(orders), list(rdp)
    except TypeError:
        raise ValueError(
            f"orders and rdp must be lists of numbers. Found {type(orders).__name__}, {type(rdp).__name__}."
        ) from None
    given = np.asarray(raw_orders) if raw_orders else np.zeros(0)
    if given.ndim == 1 and given.dtype.kind in "iu" and given.size and int(given.min()) >= 2:
        alphas = given.astype(np.float64)  # integers >= 2 already (the accountants' order grids)
    else:  # anything else, order by order (the same one-line errors)
        alphas = np.asarray([check_int("orders", o, minimum=2) for o in raw_orders], dtype=np.float64)
    try:
        values = np.asarray(raw_values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("rdp must be a list of non-negative numbers (inf allowed).") from None
    if alphas.size == 0:
        raise ValueError("orders must be a non-empty list of integers >= 2. Found [].")
    if values.shape != alphas.shape:
        raise ValueError(f"rdp must have one value per order ({alphas.size}). Found {values.size} values.")
    if np.any(np.isnan(values)) or np.any(values < 0.0):
        raise ValueError("rdp must be non-negative numbers (inf allowed). Found a negative value or nan.")
    return alphas, values


def epsilon_from_rdp(*, orders: Iterable[object], rdp: Iterable[object], delta: float) -> EpsilonAtOrder:
    """Smallest ε over the orders by 002 Prop. 2.3 (improved conversion): ``r + log1p(−1/α) − log(δα)/(α−1)``.

    Args:
        orders: integer orders α ≥ 2.
        rdp: RDP value at each order (same length; ``inf`` allowed).
        delta: target δ in (0, 1).

    Returns:
        ``(epsilon, order)``; ε is clamped at 0 (a negative value still certifies (0, δ)-DP).
    """
    alphas, values = _check_curve(orders, rdp)
    dlt = check_delta("delta", delta)
    eps = values + np.log1p(-1.0 / alphas) - (math.log(dlt) + np.log(alphas)) / (alphas - 1.0)
    # total-variation case (as in dp-accounting): δ ≥ sqrt(1 − e^{−r}) ≥ TV gives ε = 0
    eps = np.where(dlt * dlt + np.expm1(-values) > 0.0, 0.0, eps)
    best = int(np.argmin(eps))
    value = float(eps[best])
    if math.isfinite(value) and value > 0.0:
        value += 4.0 * _EPS * (abs(value) + float(values[best]) + abs(math.log(dlt)) + 1.0)
    return EpsilonAtOrder(max(0.0, value), int(alphas[best]))


def delta_from_rdp(*, orders: Iterable[object], rdp: Iterable[object], epsilon: float) -> DeltaAtOrder:
    """Smallest δ over the orders by inverting 002 Prop. 2.3: ``log δ = (α−1)(r − ε + log1p(−1/α)) − log α``.

    Returns:
        ``(delta, order)`` with δ clamped to at most 1.
    """
    alphas, values = _check_curve(orders, rdp)
    eps = check_nonnegative("epsilon", epsilon)
    with np.errstate(invalid="ignore"):
        log_delta = (alphas - 1.0) * (values - eps + np.log1p(-1.0 / alphas)) - np.log(alphas)
    log_delta = np.where(np.isnan(log_delta), np.inf, log_delta)
    # total-variation bound (as in dp-accounting): δ ≤ TV ≤ sqrt(1 − e^{−KL}) ≤ sqrt(1 − e^{−r}) for any ε ≥ 0
    with np.errstate(divide="ignore"):
        log_tv = 0.5 * np.log(-np.expm1(-values))
    log_delta = np.minimum(log_delta, log_tv)
    best = int(np.argmin(log_delta))
    value = float(log_delta[best])
    if math.isfinite(value):
        value += 4.0 * _EPS * float(alphas[best]) * (abs(float(values[best])) + eps + 2.0)
    return DeltaAtOrder(min(1.0, math.exp(min(value, 0.0))), int(alphas[best]))
