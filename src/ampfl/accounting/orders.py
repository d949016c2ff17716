"""The one Rényi order grid of ampfl (every RDP computation and the RDP accountant use it).

Integers only: Theorem 3.1 of paper 002 and the exact subsampled-Gaussian sum (Mironov, Talwar & Zhang 2019,
Sec. 3.3) need integer α ≥ 2, and fractional orders below 2 only matter for ε in the tens. Every integer
2..64, then a geometric tail (ratio ≈ 1.1) up to :data:`MAX_DEFAULT_ORDER`: a small ε needs a large order,
since the conversion (002 Prop. 2.3) gives ε ≥ log(1/δ)/(α − 1) — ε = 0.01 at δ = 1e-6 needs α ≥ 1383.

:data:`CHEAP_ORDERS` is the prefix up to 256, used by kernels whose cost grows like α² (the exact forward term
of 002 Thm 3.1); evaluating on a subset is sound (the conversion minimises over the orders it is given).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

MAX_DEFAULT_ORDER = 10_000


def _grid() -> tuple[int, ...]:
    orders = list(range(2, 65))
    x = 64.0
    while True:
        x *= 1.1
        a = round(x)
        if a > MAX_DEFAULT_ORDER:
            break
        if a > orders[-1]:
            orders.append(a)
    if orders[-1] != MAX_DEFAULT_ORDER:
        orders.append(MAX_DEFAULT_ORDER)
    return tuple(orders)


#: The default grid (116 integer orders from 2 to 10 000).
DEFAULT_ORDERS: tuple[int, ...] = _grid()

#: The prefix of :data:`DEFAULT_ORDERS` up to 256, for kernels whose cost grows like α².
CHEAP_ORDERS: tuple[int, ...] = tuple(a for a in DEFAULT_ORDERS if a <= 256)

_CHEAP_MAX = max(CHEAP_ORDERS)


def on_cheap_orders(alphas: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``fn`` (an α²-cost kernel) on the orders ≤ 256 only, ``inf`` above (sound: ε minimises over α)."""
    out = np.full(alphas.size, np.inf)
    small = alphas <= _CHEAP_MAX
    if np.any(small):
        out[small] = fn(alphas[small])
    return out
