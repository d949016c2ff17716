"""Pessimistic PLD of the D-component orthogonal Gaussian mixture: model splitting into any number of
sub-models (paper 002 Alg. 1, Thms 3.4/3.5) and random allocation of one of T steps (Balanced Iteration
Subsampling with k = 1, 002 Thm 3.8).

**The pair.** With unit sensitivity and noise multiplier z (a = 1/z), both mechanisms are dominated by
P = (1/D) Σ_i N(a e_i, I_D) (the unit present) against Q = N(0, I_D) (absent), add and remove:

- model split (002 Thm 3.4's mechanism): docs/accounting.md "Model splitting and dropout", as for D ≤ 2;
- random allocation (002 Thm 3.8, k = 1, D = T): condition on the other units' allocations (joint convexity
  of the hockey-stick divergence) and whiten step t by its history-dependent mean and σ = z (clip norm 1).
  From the pair's coordinates s_t, build x_t = u_t(ρ_t s_t + √(1 − ρ_t²) η_t) + (I − u_t u_tᵀ) w_t with
  u_t = g_t/|g_t|, ρ_t = |g_t| ≤ 1 for the unit's clipped gradient g_t computed from x_<t, and fresh
  noise η_t, w_t. Under Q every x_t | x_<t is N(0, I); at the allocated step its mean is ρ_t a u_t = g_t/z.
  So this kernel maps the pair onto the mechanism's pair, whatever the adaptive choices, and by data
  processing every hockey-stick divergence, in both directions, is at most the pair's.

**The loss.** L(x) = log Σ_i e^{a x_i} − log D − a²/2. Under Q all x_i ~ N(0, 1); under P (symmetry)
x_1 ~ N(a, 1) and the others N(0, 1). So L is the log of a sum of independent lognormals. Its distribution is
built on a uniform grid of log S (spacing g) by log-sum-exp convolution: for grid values u ≥ v,
log(e^u + e^v) = u + log1p(e^{−(u−v)}) is rounded UP to the grid for the remove direction (loss L under P)
and DOWN for the add direction (loss −L under Q, so −L is rounded up). log-sum-exp is 1-Lipschitz in the sup
norm and increasing in each argument, so each of the c log-sum-exp steps adds at most g and the grid of the
single terms another g. Tails: a term beyond ±8 standard deviations on the harmless side is moved to the
pessimistic side (up to the lowest grid point, or down to the highest); beyond 9.5 on the other side it makes
the loss infinite (remove: S = +∞; add: S rounded down to 0, so −L = +∞); sums are trimmed at 1e-30 the
same way. Each pairing of grid points costs O(1) through cumulative
sums, per correction value: O(N · ln 2 / g) per step for N grid points.

**Error bound** (:func:`loss_error_bound`): the PLD is pessimistic (every ε(δ), δ(ε) is an upper bound) and
its losses exceed a coupling of the true ones by at most (c + 1)·g + h per application (h = the PLD's value
discretisation interval), plus infinite-loss mass ≤ D·Φ(−9.5) + 1e-30·c (D·1.1e-21). g is chosen so that
one step costs about 2·10⁷ updates: g ≈ 8e-4 at z = 1, 3.5e-4 at z = 5 (:func:`log_grid_spacing`).

**Random allocation of k > 1 of T steps** (BIS, 002 Thm 3.8) reduces to k = 1 blocks (the reduction of
Feldman & Shenfeld 2025, with its adaptive step shown here). The kernel above never uses which coordinates are
allocated, so P_k = E_S N(a 1_S, I_T) (S a uniform k-subset) vs N(0, I_T) dominates the adaptive mechanism.
Draw S as: a uniform random permutation of [T] cut into k blocks, r = T mod k of size m + 1 and k − r of size
m = ⌊T/k⌋, one uniform element from each block. The law of that set is invariant under every permutation of
[T] and k-subsets form one orbit, so it is uniform: P_k = E_π P_π. Joint convexity of the hockey-stick
divergence (Q does not depend on π) gives H_γ(P_k ‖ Q) ≤ E_π H_γ(P_π ‖ Q) and H_γ(Q ‖ P_k) ≤ E_π H_γ(Q ‖ P_π),
and each P_π vs Q is, on disjoint coordinate blocks, the product of the D = m + 1 (r times) and D = m (k − r
times) pairs, the same for every π. So one epoch is bounded by that composition (:func:`allocation_pld`),
in both directions, after adaptive composition too (the same mixture argument over the epochs' π).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import special

from ampfl.accounting._checks import check_int, check_positive
from ampfl.accounting.pld_grid import GUARD, cell_masses, grid_index, round_up, tail_cut

__all__ = [
    "LOG_GRID_BUDGET",
    "allocation_pld",
    "log_grid_spacing",
    "loss_error_bound",
    "model_split_pld_any",
    "orthogonal_mixture_pld",
]

#: Updates (grid points × correction values) one log-sum-exp step may cost; sets the log grid g.
LOG_GRID_BUDGET = 2.0e7
#: A single term's standard-normal tails moved to the pessimistic side (mass 6e-16, inside the grid's span).
_TAIL_INNER = 8.0
#: A single term's upper tail sent to the infinite-loss mass in the remove direction (mass 1.1e-21).
_TAIL_OUTER = 9.5
#: Mass trimmed from each side of a sum's grid after a step (moved to the pessimistic side).
_TRIM = 1e-30
#: Pairs per chunk of the direct (all pairs) log-sum step.
_DIRECT = 1 << 20
#: Cost of one run of the run-wise step in grid points (its Python overhead).
_RUN_OVERHEAD = 300


@dataclass(frozen=True)
class _LogSum:
    """log S on the grid (off + i)·g, i < len(p); atoms at −∞ (S = 0) and +∞."""

    off: int
    p: np.ndarray
    neg: float = 0.0
    pos: float = 0.0


@functools.lru_cache(maxsize=16)
def _groups(g: float, up: bool) -> tuple[tuple[int, int, int], ...]:
    """Runs (s, m_lo, m_hi) of equal rounded correction s_m = ⌈log1p(e^{−m g})/g⌉ (or ⌊·⌋); m_hi = −1: ∞."""
    m_tail = math.ceil(-math.log(math.expm1(g)) / g) + 2  # beyond it the correction is below one grid step
    m = np.arange(m_tail + 1, dtype=float)
    s = np.maximum(grid_index(np.log1p(np.exp(-m * g)), g, up=up, guard=GUARD), 1 if up else 0)
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    ends = np.concatenate((starts[1:], [len(s)])) - 1
    runs = [(int(s[i]), int(i), int(j)) for i, j in zip(starts, ends, strict=True)]
    runs[-1] = (runs[-1][0], runs[-1][1], -1)
    return tuple(runs)


def _half(
    out: np.ndarray,
    lo: int,
    x: _LogSum,
    y: _LogSum,
    runs: tuple[tuple[int, int, int], ...],
    strict: bool,
    weight: float,
) -> None:
    """Adds the pairs with x's grid index i ≥ y's index j (i > j if ``strict``) at index i + s_{i−j}."""
    nx, ny = len(x.p), len(y.p)
    m_top = runs[-1][1] + 1
    cy = np.concatenate(([0.0], np.cumsum(y.p)))
    # pad[i − m + m_top] = P(y index ≤ x.off + i − m), finite part
    pad = cy[np.clip(np.arange(-m_top, nx + 1) + (x.off - y.off + 1), 0, ny)]
    px = x.p * weight
    for s, m_lo, m_hi in runs:
        if strict and m_lo == 0:
            if m_hi == 0:
                continue
            m_lo = 1
        w = pad[m_top - m_lo : m_top - m_lo + nx]
        if m_hi >= 0:
            w = w - pad[m_top - m_hi - 1 : m_top - m_hi - 1 + nx]
        a = x.off + s - lo
        out[a : a + nx] += px * w


def _direct(out: np.ndarray, lo: int, x: _LogSum, y: _LogSum, g: float, up: bool) -> None:
    """All pairs at once (small grids): index max(i, j) + s_{|i−j|}, the same rounding as the runs."""
    iy = y.off + np.arange(len(y.p))
    rows = max(1, _DIRECT // max(len(y.p), 1))
    for start in range(0, len(x.p), rows):
        ix = x.off + np.arange(start, min(start + rows, len(x.p)))
        gap = np.abs(ix[:, None] - iy[None, :])
        s = np.maximum(grid_index(np.log1p(np.exp(-gap * g)), g, up=up, guard=GUARD), 1 if up else 0)
        at = (np.maximum(ix[:, None], iy[None, :]) + s - lo).ravel()
        first = int(at.min())
        add = np.bincount(at - first, weights=np.outer(x.p[ix - x.off], y.p).ravel())
        out[first : first + len(add)] += add


def _combine(x: _LogSum, y: _LogSum, g: float, up: bool) -> _LogSum:
    """log(e^X + e^Y) of independent X, Y, rounded to the grid (up or down)."""
    lo = min(x.off, y.off)
    out = np.zeros(max(x.off + len(x.p), y.off + len(y.p)) + math.ceil(math.log(2.0) / g) + 2 - lo)
    if len(x.p) * len(y.p) <= (len(x.p) + len(y.p)) * (math.log(2.0) / g + _RUN_OVERHEAD):
        _direct(out, lo, x, y, g, up)
    elif x is y:
        runs = _groups(g, up)
        _half(out, lo, x, x, runs, True, 2.0)
        out[x.off + runs[0][0] - lo : x.off + runs[0][0] - lo + len(x.p)] += x.p * x.p
    else:
        runs = _groups(g, up)
        _half(out, lo, x, y, runs, False, 1.0)
        _half(out, lo, y, x, runs, True, 1.0)
    # an atom absorbs: +∞ (up) is exact; −∞ (down) drops the other term too, which rounds S down
    return _trim(
        _LogSum(lo, out, 1.0 - (1.0 - x.neg) * (1.0 - y.neg), 1.0 - (1.0 - x.pos) * (1.0 - y.pos)), up
    )


def _trim(x: _LogSum, up: bool) -> _LogSum:
    """Drops ≤ _TRIM of mass at each end (:func:`~ampfl.accounting.pld_grid.tail_cut`): up (remove): low
    end up, high end to +∞; down: mirrored."""
    i0, i1 = tail_cut(x.p, _TRIM, _TRIM)
    p = x.p[i0:i1].copy()
    low = float(np.cumsum(x.p[:i0])[-1]) if i0 else 0.0  # summed in the order the cut was decided
    high = float(np.cumsum(x.p[i1:][::-1])[-1]) if i1 < len(x.p) else 0.0
    if up:
        p[0] += low
        return _LogSum(x.off + i0, p, x.neg, x.pos + high)
    p[-1] += high
    return _LogSum(x.off + i0, p, x.neg + low, x.pos)


def _single(a: float, mean: float, g: float, up: bool) -> _LogSum:
    """log Y = a·x, x ~ N(mean, 1), on the grid: (v_{i−1}, v_i] → v_i (up) or [v_i, v_{i+1}) → v_i."""
    top, bottom = (_TAIL_OUTER, _TAIL_INNER) if up else (_TAIL_INNER, _TAIL_OUTER)
    i0 = math.floor(a * (mean - bottom) / g)
    i1 = math.ceil(a * (mean + top) / g)
    cdf = special.ndtr(np.arange(i0, i1 + 1) * (g / a) - mean)
    if up:  # below the grid: up to its lowest point; above: infinite loss
        return _LogSum(i0, cell_masses(cdf), 0.0, float(special.ndtr(-(i1 * g / a - mean))))
    # down: above the grid to its highest point; below: the −∞ atom (S rounded down to 0)
    return _LogSum(i0, cell_masses(cdf, up=False), float(cdf[0]), 0.0)


def _sum(x: _LogSum, count: int, g: float, up: bool) -> tuple[_LogSum, int]:
    """log of the sum of ``count`` iid copies (binary powering) and the number of log-sum-exp steps."""
    out: _LogSum | None = None
    steps = 0
    while count:
        if count & 1:
            if out is None:
                out = x
            else:
                out, steps = _combine(out, x, g, up), steps + 1
        count >>= 1
        if count:
            x, steps = _combine(x, x, g, up), steps + 1
    assert out is not None
    return out, steps


def _steps(d: int) -> int:
    """log-sum-exp steps of one direction: binary powering of d (or d − 1, plus one)."""
    return max(d.bit_length() - 1 + bin(d).count("1") - 1, 0)


def log_grid_spacing(num_components: int, shift: float) -> float:
    """The log-sum grid spacing g at which one step costs about :data:`LOG_GRID_BUDGET` updates.

    A step over N = span/g points costs N·ln 2/g run-wise; where that needs more than 4000 runs (small
    spans, z ≳ 20) the all-pairs step over N = 3000 points is cheaper.
    """
    del num_components  # the first step's grid is the widest: a single term's span
    span = shift * (_TAIL_INNER + _TAIL_OUTER + shift)
    runs = math.sqrt(math.log(2.0) * span / LOG_GRID_BUDGET)
    return runs if math.log(2.0) / runs <= 4000 else span / 3000


def loss_error_bound(
    num_components: int,
    shift: float,
    value_discretization_interval: float = 1e-4,
    log_grid: float | None = None,
) -> float:
    """Bound on the PLD's loss excess over a coupling of the true loss, per application (both directions).

    (c + 1)·g + h: c log-sum-exp steps and the single-term grid, each at most g; h the final rounding.
    """
    d = check_int("num_components", num_components, minimum=1)
    a = check_positive("shift", shift)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    if d == 1:
        return h
    g = log_grid_spacing(d, a) if log_grid is None else check_positive("log_grid", log_grid)
    return (_steps(d) + 1) * g + h


def orthogonal_mixture_pld(
    *,
    num_components: int,
    shift: float,
    value_discretization_interval: float = 1e-4,
    log_grid: float | None = None,
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of P = (1/D) Σ_i N(a e_i, I_D) vs Q = N(0, I_D), both directions (docstring above).

    Args:
        num_components: D ≥ 1 (D = 1 is the Gaussian mechanism at sensitivity a).
        shift: a > 0 (sensitivity / noise standard deviation: 1/z).
        value_discretization_interval: h, the loss grid's spacing.
        log_grid: g, the log-sum grid's spacing (default :func:`log_grid_spacing`); any g > 0 is sound.
    """
    d = check_int("num_components", num_components, minimum=1)
    a = check_positive("shift", shift)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    if d == 1:
        return pld_lib.from_gaussian_mechanism(
            standard_deviation=1.0 / a,
            sensitivity=1.0,
            pessimistic_estimate=True,
            value_discretization_interval=h,
        )
    from ampfl.accounting.pld_grid import check_pld_size

    check_pld_size(1.0 / a, h)  # the loss spans about what the Gaussian's does
    g = log_grid_spacing(d, a) if log_grid is None else check_positive("log_grid", log_grid, upper=1.0)
    offset = math.log(d) + a * a / 2.0
    # remove: X ~ P, loss L = log S − log D − a²/2 rounded up
    rest, _ = _sum(_single(a, 0.0, g, True), d - 1, g, True)
    s_p = _combine(rest, _single(a, a, g, True), g, True)
    grid_p = (s_p.off + np.arange(len(s_p.p))) * g - offset
    remove = round_up(grid_p, s_p.p, h, infinity=s_p.pos)
    # add: X ~ Q, loss −L rounded up (log S rounded down); S = 0 (all terms below the grid): infinite loss
    s_q, _ = _sum(_single(a, 0.0, g, False), d, g, False)
    grid_q = offset - (s_q.off + np.arange(len(s_q.p))) * g
    add = round_up(grid_q, s_q.p, h, infinity=s_q.neg)
    return pld_lib.PrivacyLossDistribution(remove, add)


def model_split_pld_any(
    *,
    num_submodels: int,
    noise_multiplier: float,
    nonsplit_noise_multiplier: float | None = None,
    value_discretization_interval: float = 1e-4,
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of one model-split step into any d ≥ 1 sub-models (002 Alg. 1, Thms 3.4/3.5).

    d ≤ 2 is the exact product form of :func:`ampfl.accounting.partition.pld.model_split_pld`; d ≥ 3 the
    mixture above with a = 1/z; a non-split part (002 §3.2.2) composes as an independent Gaussian.
    """
    from ampfl.accounting.partition.pld import PLD_MAX_SUBMODELS, model_split_pld
    from ampfl.accounting.pld_grid import check_pld_size, dp_accounting_guard

    d = check_int("num_submodels", num_submodels, minimum=1)
    z = check_positive("noise_multiplier", noise_multiplier)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    if d <= PLD_MAX_SUBMODELS:
        return model_split_pld(
            num_submodels=d,
            noise_multiplier=z,
            nonsplit_noise_multiplier=nonsplit_noise_multiplier,
            value_discretization_interval=h,
        )
    with dp_accounting_guard("model-split PLD"):
        out = orthogonal_mixture_pld(num_components=d, shift=1.0 / z, value_discretization_interval=h)
        if nonsplit_noise_multiplier is not None:
            z_ns = check_positive("nonsplit_noise_multiplier", nonsplit_noise_multiplier)
            check_pld_size(z_ns, h)
            out = out.compose(
                pld_lib.from_gaussian_mechanism(
                    standard_deviation=z_ns,
                    sensitivity=1.0,
                    pessimistic_estimate=True,
                    value_discretization_interval=h,
                )
            )
    return out


def allocation_pld(
    *,
    iterations: int,
    noise_multiplier: float,
    participations: int = 1,
    value_discretization_interval: float = 1e-4,
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of one epoch of random allocation of k of T Gaussian steps (002 Thm 3.8's mechanism).

    k = 1 is the model-split pair with D = T; k > 1 composes r = T mod k pairs with D = ⌊T/k⌋ + 1 and k − r
    with D = ⌊T/k⌋ (module docstring). One event per epoch; epochs compose.
    """
    from ampfl.accounting.pld_grid import dp_accounting_guard

    t = check_int("iterations", iterations, minimum=1)
    k = check_int("participations", participations, minimum=1, maximum=t)
    z = check_positive("noise_multiplier", noise_multiplier)
    h = value_discretization_interval
    m, r = divmod(t, k)
    with dp_accounting_guard("random-allocation PLD"):
        out = orthogonal_mixture_pld(num_components=m, shift=1.0 / z, value_discretization_interval=h)
        out = out.self_compose(k - r) if k - r > 1 else out
        if r:
            big = orthogonal_mixture_pld(num_components=m + 1, shift=1.0 / z, value_discretization_interval=h)
            out = out.compose(big.self_compose(r) if r > 1 else big)
        return out
