"""Top-κ magnitude sparsification (Algorithm 2 of paper 001, GDPFed+), a pure numpy function.

GDPFed+ applies ``top_kappa`` on the server to each group's *noisy* secure-aggregation sum (Algorithm 1,
line 17), i.e. after the Gaussian noise is added, so by post-processing (Lemma 2 of paper 001) it costs no
privacy. Applying it *before* the noise would make the kept support depend on raw data and is not covered
by the group's DP guarantee; this module cannot tell the difference, the caller must keep the order.

References: arXiv:2505.13655v3, Algorithm 2 and Lemma 3 (provenance [D]: described from the prose; the
pseudocode did not survive, RECOVERED_MATH.md §2.5). ω(κ) is computed once, by
:func:`ampfl.accounting.groups.error_model.omega` (the planner's error model uses the same function).
"""

from __future__ import annotations

import math

import numpy as np


def kept_count(kappa: float, dim: int) -> int:
    """Number of coordinates top-κ keeps: ⌈κ d⌉ (0 for κ = 0, d for κ = 1).

    The product is rounded to 9 decimals before the ceiling so that e.g. κ = 0.3, d = 10 keeps 3, not 4.
    """
    if isinstance(kappa, bool) or not isinstance(kappa, int | float | np.integer | np.floating):
        raise ValueError(f"kappa must be a real number in [0, 1]. Found {kappa!r}.")
    k = float(kappa)
    if not 0.0 <= k <= 1.0:
        raise ValueError(f"kappa must be in [0, 1]. Found {k}.")
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise ValueError(f"dim must be an integer >= 1. Found {dim!r}.")
    return min(int(dim), max(0, math.ceil(round(k * int(dim), 9))))


def top_kappa(x: np.ndarray, kappa: float) -> np.ndarray:
    """Keep the ⌈κ d⌉ largest-magnitude coordinates of each row and zero the rest.

    Args:
        x: real array of shape ``[dim]`` or ``[num_clients, dim]`` (rows are sparsified independently).
        kappa: fraction of coordinates kept, in [0, 1] (0 keeps nothing, 1 returns a copy).

    Returns:
        A new array of the same shape and dtype. Ties at the threshold are broken by position (the
        stable sort keeps the earlier index), so exactly ⌈κ d⌉ entries per row can be non-zero.

    Raises:
        ValueError: for a non-real or non-finite array, a shape other than 1-D/2-D, or κ outside [0, 1].
    """
    arr = np.asarray(x)
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise ValueError(f"x must have shape [dim] or [num_clients, dim] with dim >= 1. Found {arr.shape}.")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"x must be a real-valued array. Found dtype {arr.dtype}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError("x must be finite. Found nan or inf.")
    dim = int(arr.shape[-1])
    k = kept_count(kappa, dim)
    rows = arr.reshape(-1, dim)
    out = np.zeros_like(rows)
    if k == dim:
        out[...] = rows
    elif k > 0:
        order = np.argsort(-np.abs(rows), axis=1, kind="stable")[:, :k]
        np.put_along_axis(out, order, np.take_along_axis(rows, order, axis=1), axis=1)
    return out.reshape(arr.shape)


def sparsification_error_bound(kappa: float, *, model: str = "worst-case") -> float:
    """ω(κ) in Lemma 3 of paper 001: ‖top_κ(x) − x‖² ≤ ω ‖x‖².

    ``"worst-case"``: ω = 1 − κ, valid for every x (top-κ keeps at least a κ fraction of the energy) [V].
    ``"squared"``: ω = (1 − κ)², the tighter form after Shi et al. 2019 (arXiv:1911.08772) that paper 001
    most likely adopts [I]; it is an empirical model for bell-shaped updates, NOT a bound for every x
    (equal-magnitude x gives 1 − κ).
    """
    if isinstance(kappa, bool) or not isinstance(kappa, int | float | np.integer | np.floating):
        raise ValueError(f"kappa must be a real number in [0, 1]. Found {kappa!r}.")
    k = float(kappa)
    if not 0.0 <= k <= 1.0:
        raise ValueError(f"kappa must be in [0, 1]. Found {k}.")
    if model not in ("worst-case", "squared"):
        raise ValueError(f"model must be one of worst-case, squared. Found {model!r}.")
    from ampfl.accounting.groups.error_model import omega

    return float(omega(k, model))
