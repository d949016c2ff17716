"""Input validation at the public boundary of the accounting layer (STYLE.md rule 10).

Every public accounting function validates its arguments with these helpers and raises
:class:`ValueError` with a one-line message naming the parameter, its allowed range and the value found.
The CLI turns that message into ``ampfl: error: ...`` with exit code 2. Numerical trouble that is not the
caller's fault (no root bracket, overflow that log space cannot avoid) raises :class:`NumericalError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np


class NumericalError(ArithmeticError):
    """A computation could not produce a trustworthy number (reported, never returned silently)."""


class UnsupportedEventError(ValueError):
    """No sound bound for an event (the message names the offending sub-event)."""


def _as_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a real number. Found {value!r}.")
    out = float(value)
    if math.isnan(out):
        raise ValueError(f"{name} must be a real number. Found nan.")
    return out


def check_probability(name: str, value: object, *, allow_zero: bool = False, allow_one: bool = True) -> float:
    """Check ``value`` lies in (0, 1] by default; ``allow_zero``/``allow_one`` open or close the ends."""
    x = _as_float(name, value)
    lo_ok = x >= 0.0 if allow_zero else x > 0.0
    hi_ok = x <= 1.0 if allow_one else x < 1.0
    if not (lo_ok and hi_ok):
        interval = ("[" if allow_zero else "(") + "0, 1" + ("]" if allow_one else ")")
        raise ValueError(f"{name} must be in {interval}. Found {x}.")
    return x


def check_delta(name: str, value: object) -> float:
    """Check a DP δ lies in the open interval (0, 1)."""
    return check_probability(name, value, allow_zero=False, allow_one=False)


def check_positive(name: str, value: object, *, upper: float = math.inf) -> float:
    """Check ``0 < value < upper`` (finite)."""
    x = _as_float(name, value)
    if not (0.0 < x < upper) or math.isinf(x):
        bound = "inf)" if math.isinf(upper) else f"{upper})"
        raise ValueError(f"{name} must be in (0, {bound}. Found {x}.")
    return x


def check_nonnegative(name: str, value: object) -> float:
    """Check ``0 <= value < inf``."""
    x = _as_float(name, value)
    if not (0.0 <= x < math.inf):
        raise ValueError(f"{name} must be in [0, inf). Found {x}.")
    return x


def check_range(name: str, value: object, low: float, high: float) -> float:
    """Check ``low <= value <= high``."""
    x = _as_float(name, value)
    if not (low <= x <= high):
        raise ValueError(f"{name} must be in [{low}, {high}]. Found {x}.")
    return x


def check_int(name: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> int:
    """Check ``value`` is an integer with ``minimum <= value <= maximum``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer. Found {value!r}.")
    if isinstance(value, float | np.floating) and float(value).is_integer():
        value = int(value)
    if not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer. Found {value!r}.")
    n = int(value)
    if n < minimum or (maximum is not None and n > maximum):
        upper = "inf" if maximum is None else str(maximum)
        raise ValueError(f"{name} must be an integer in [{minimum}, {upper}]. Found {n}.")
    return n


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """Check ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}. Found {value!r}.")
    return str(value)


def check_orders(name: str, orders: Iterable[object], *, minimum: int = 2) -> np.ndarray:
    """Check a non-empty list of integer Rényi orders ``>= minimum``; returns a sorted unique int array."""
    if isinstance(orders, str | bytes) or not isinstance(orders, Iterable):
        raise ValueError(f"{name} must be a non-empty list of integers >= {minimum}. Found {orders!r}.")
    if isinstance(orders, np.ndarray) and orders.dtype.kind in "iu" and orders.ndim == 1 and orders.size:
        # fast path (an accountant's own grid, checked many times per calibration): vectorised, same rules
        if int(orders.min()) < minimum:
            raise ValueError(f"{name} must be an integer in [{minimum}, inf]. Found {int(orders.min())}.")
        return np.unique(orders.astype(np.int64))
    values = [check_int(name, o, minimum=minimum) for o in orders]
    if not values:
        raise ValueError(f"{name} must be a non-empty list of integers >= {minimum}. Found [].")
    return np.unique(np.asarray(values, dtype=np.int64))
