"""Privacy-loss distributions on the grid i·h: one implementation of each primitive.

A PMF of the privacy loss L on the grid (mass pᵢ at iᵢ·h, mass p_∞ at +∞) answers
δ(ε) = p_∞ + Σᵢ pᵢ (1 − e^{ε − iᵢh})₊. Each term increases with its loss, so

- **rounding up** (:func:`round_up`, :func:`cell_masses` with ``up=True``) gives δ(ε) ≥ the exact one at
  every ε, and so does moving mass to +∞ (the tail guard :func:`tail_cut`, the deficit of
  :func:`mixture` with ``complete=True``): a *pessimistic* PMF, an upper bound for the accountants;
- **rounding down** (:func:`round_down`, :func:`cell_masses` with ``up=False``) gives δ(ε) ≤ the exact one,
  and so does dropping mass (a sub-probability): an *optimistic* PMF, a lower bound for the auditors.

Both orders survive composition (each term of the convolution moves the same way). A public-selector mixture
Σ wᵢ·(Pᵢ, Qᵢ) has δ(ε) = Σ wᵢ δᵢ(ε) in each direction, so the weighted sum of the components' PMFs
(:func:`mixture`) is pessimistic (optimistic) when every component is.

The grid index of a loss is ⌈ℓ/h + guard⌉ (up) or ⌊ℓ/h − guard⌋ (down): ``guard`` (grid units, default 0)
keeps a loss that round-off put just below a grid point from landing on it (:data:`GUARD`).

Imports numpy alone (dp-accounting's PMF type is imported when one is built), so the accountant's kernels
(:mod:`~ampfl.accounting.accountants.pld_fast`) keep their start-up time.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ampfl.accounting._checks import NumericalError

if TYPE_CHECKING:
    from dp_accounting.pld import pld_pmf

__all__ = [
    "GUARD",
    "cell_masses",
    "check_pld_size",
    "dp_accounting_guard",
    "grid_index",
    "mixture",
    "round_down",
    "round_up",
    "tail_cut",
]

#: Float guard in grid units for losses computed in floating point (rounding up stays up despite round-off).
GUARD = 1e-9


def grid_index(losses: np.ndarray, h: float, *, up: bool, guard: float = 0.0) -> np.ndarray:
    """Grid index of each (finite) loss: ⌈ℓ/h + guard⌉ when ``up`` (pessimistic), else ⌊ℓ/h − guard⌋."""
    x = np.asarray(losses, dtype=np.float64) / h
    return (np.ceil(x + guard) if up else np.floor(x - guard)).astype(np.int64)


def _dense_pmf(
    h: float, index: np.ndarray, masses: np.ndarray, infinity: float, pessimistic: bool
) -> pld_pmf.DensePLDPmf:
    """dp-accounting's dense PMF with ``masses`` summed per grid index (one zero point when none)."""
    from dp_accounting.pld import pld_pmf

    if index.size == 0:
        return pld_pmf.DensePLDPmf(h, 0, np.zeros(1), infinity, pessimistic)
    lower = int(index.min())
    return pld_pmf.DensePLDPmf(h, lower, np.bincount(index - lower, weights=masses), infinity, pessimistic)


def round_up(
    losses: np.ndarray, masses: np.ndarray, h: float, *, infinity: float = 0.0, guard: float = GUARD
) -> pld_pmf.DensePLDPmf:
    """Pessimistic PMF of point masses: each loss rounded UP to the grid (index ⌈ℓ/h + guard⌉).

    Masses ≤ 0 are dropped, masses at loss +∞ join ``infinity`` (the result's mass at +∞, at most 1),
    masses at −∞ are dropped (they add nothing to any δ).
    """
    losses = np.asarray(losses, dtype=np.float64)
    masses = np.asarray(masses, dtype=np.float64)
    keep = masses > 0.0
    top = keep & (losses == np.inf)
    if top.any():
        infinity += float(masses[top].sum())
    keep &= np.isfinite(losses)
    index = grid_index(losses[keep], h, up=True, guard=guard)
    return _dense_pmf(h, index, masses[keep], min(1.0, infinity), True)


def round_down(losses: np.ndarray, masses: np.ndarray, h: float) -> pld_pmf.DensePLDPmf:
    """Optimistic PMF of point masses (a lower bound): each loss rounded DOWN to the grid (index ⌊ℓ/h⌋).

    Masses ≤ 0 and non-finite losses are dropped (a sub-probability: lowers every δ); no mass at +∞.
    """
    losses = np.asarray(losses, dtype=np.float64)
    masses = np.asarray(masses, dtype=np.float64)
    keep = np.isfinite(losses) & (masses > 0.0)
    return _dense_pmf(h, grid_index(losses[keep], h, up=False), masses[keep], 0.0, False)


def cell_masses(cumulative: np.ndarray, *, up: bool = True, survival: bool = False) -> np.ndarray:
    """Masses on the grid of a loss given its law at the thresholds ℓ₀ < … < ℓₙ (consecutive grid values).

    ``cumulative`` is F_k = P(L ≤ ℓ_k), or with ``survival`` S_k = P(L > ℓ_k) (accurate in the upper tail).

    - ``up`` (pessimistic): the cell (ℓ_{k−1}, ℓ_k] goes to ℓ_k and the mass below ℓ₀ joins ℓ₀; the mass above
      ℓₙ (1 − Fₙ or Sₙ) is the caller's (to +∞): ``[F₀, F₁ − F₀, …, Fₙ − Fₙ₋₁]``.
    - not ``up`` (rounded down): the cell [ℓ_k, ℓ_{k+1}) goes to ℓ_k and the mass above ℓₙ joins ℓₙ; the mass
      below ℓ₀ (F₀) is the caller's: ``[F₁ − F₀, …, Fₙ − Fₙ₋₁, 1 − Fₙ]``.

    Negative differences (round-off of a non-monotone evaluation) are clipped to 0.
    """
    c = np.asarray(cumulative, dtype=np.float64)
    if survival:  # P(L ≤ ℓ_k) = 1 − S_k: differences of S, accurate where S is small
        upper = np.concatenate(([1.0], c)) if up else np.concatenate((c, [0.0]))
        return np.asarray(np.maximum(upper[:-1] - upper[1:], 0.0), dtype=np.float64)
    masses = np.diff(np.concatenate(([0.0], c))) if up else np.diff(np.concatenate((c, [1.0])))
    return np.asarray(np.maximum(masses, 0.0), dtype=np.float64)


def _prefix(probs: np.ndarray, threshold: float) -> int:
    """Length of the longest prefix whose running sum stays ≤ ``threshold``."""
    above = np.flatnonzero(np.cumsum(probs) > threshold)
    return int(above[0]) if above.size else len(probs)


def tail_cut(probs: np.ndarray, left: float | None, right: float | None) -> tuple[int, int]:
    """The tail guard: ``(start, stop)``, the window of ``probs`` kept after cutting the longest prefix whose
    mass is ≤ ``left`` and the longest suffix whose mass is ≤ ``right`` (``None``: no cut); at least one point
    is kept. A pessimistic caller moves the cut low tail up onto ``probs[start]`` and the cut high tail to +∞
    (dp-accounting's truncation of a composition); an optimistic one moves them the other way.
    """
    n = len(probs)
    start = 0 if left is None else min(_prefix(probs, left), n - 1)
    stop = n if right is None else n - _prefix(probs[::-1], right)
    return start, max(stop, start + 1)


def mixture(parts: Sequence[tuple[float, Any]], *, complete: bool = False) -> Any:
    """PLD of a public-selector mixture Σ wᵢ·PLDᵢ, both directions (dp-accounting PLDs on one grid).

    Each direction's PMF is Σ wᵢ·PMFᵢ, its mass at +∞ Σ wᵢ·p_∞ᵢ; parts of weight 0 are left out. The
    weights are the caller's (e.g. w and 1 − w, as dp-accounting's ``compute_mixture``, whose result this
    then is, bit for bit) and must sum to 1 within 1e-9 (weights summing to less would understate every δ).
    ``complete``: the mass the PMF misses from 1 (dropped tails, round-off) goes to +∞ too (pessimistic PMFs
    only). Symmetric when every part is.

    Raises:
        ValueError: a negative weight, weights not summing to 1, parts on different grids or of different
            rounding (pessimistic / optimistic).
    """
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    weights = [float(w) for w, _ in parts]
    if any(not w >= 0.0 for w in weights) or not abs(math.fsum(weights) - 1.0) <= 1e-9:
        raise ValueError(f"mixture weights must be non-negative and sum to 1. Found {weights}.")
    used = [(w, pld) for w, (_, pld) in zip(weights, parts, strict=True) if w > 0.0]

    def one(pmfs: list[tuple[float, Any]]) -> pld_pmf.DensePLDPmf:
        dense = [(w, p.to_dense_pmf()) for w, p in pmfs]
        h, pessimistic = dense[0][1]._discretization, dense[0][1]._pessimistic_estimate
        if any(d._discretization != h or d._pessimistic_estimate != pessimistic for _, d in dense):
            raise ValueError("mixture parts must share one grid and one rounding (pessimistic or not).")
        lower = min(d._lower_loss for _, d in dense)
        probs = np.zeros(max(d._lower_loss + d.size for _, d in dense) - lower)
        infinity = 0.0
        for w, d in dense:
            start = d._lower_loss - lower
            probs[start : start + d.size] += w * d._probs
            infinity += d._infinity_mass * w
        if complete:
            infinity = min(1.0, infinity + max(0.0, 1.0 - probs.sum() - infinity))
        return pld_pmf.DensePLDPmf(h, lower, probs, infinity, pessimistic)

    remove = one([(w, p._pmf_remove) for w, p in used])
    if all(p._symmetric for _, p in used):
        return pld_lib.PrivacyLossDistribution(remove)
    return pld_lib.PrivacyLossDistribution(remove, one([(w, p._pmf_add) for w, p in used]))


# --------------------------------------------------- guards on building a PLD (dp-accounting or not)
#: Largest PLD grid (≈ privacy-loss range / discretisation) built before refusing with NumericalError.
_MAX_PLD_POINTS = 1e8


@contextlib.contextmanager
def dp_accounting_guard(what: str) -> Iterator[None]:
    """Turn dp-accounting's overflow/allocation failures on extreme inputs into :class:`NumericalError`."""
    try:
        yield
    except (OverflowError, ZeroDivisionError, MemoryError, FloatingPointError) as exc:
        raise NumericalError(f"{what}: dp-accounting failed on these extreme parameters ({exc}).") from exc


def check_pld_size(noise_multiplier: float, value_discretization_interval: float) -> None:
    """Refuse (NumericalError) a Gaussian PLD whose grid would be too large to build.

    The privacy loss of N(1, z²) vs N(0, z²) spans about 1/z² + 20/z; divided by the discretisation this is
    the number of PMF points dp-accounting allocates.
    """
    z = noise_multiplier
    width = (1.0 / (z * z) + 20.0 / z) if z * z > 0.0 else math.inf
    if not width / value_discretization_interval <= _MAX_PLD_POINTS:
        raise NumericalError(
            f"noise_multiplier {z:g} is too small for a PLD with discretisation "
            f"{value_discretization_interval:g} (about {width / value_discretization_interval:.3g} points)."
        )
