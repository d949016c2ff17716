"""Integral of the positive part of a signed 1-D Gaussian mixture (the auditor's quadrature engine).

f(y) = Σ_k c_k N(y; μ_k, σ²) with signed coefficients and a common std σ (``std``);
:func:`integrate_positive_part` returns ∫ f_+ dy with an error bound. f is evaluated as A − B (positive and
negative parts), each by log-sum-exp over the components within 16 σ, and f = A·(−expm1(log B − log A)), so
no large terms cancel. Sign changes are found on a scan of 16 points per σ and refined by vectorised
bisection; the positive set is cut into panels of width ≤ σ/2 (and at every root), each integrated with 16-
and 8-point Gauss–Legendre, bisecting panels where the two rules disagree by more than their share of the
tolerance. The signed f is integrated over panels found positive, so a missed pair of sign changes can only
lower the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import special

from ampfl.accounting._checks import NumericalError

FloatArray = NDArray[np.float64]

_RANGE_SIGMAS = 16.0  # integrate over the positive components' means ± 16 σ
_WINDOW_SIGMAS = 16.0  # components farther than 16 σ from an evaluation point are dropped (bounded below)
_SCAN_PER_PANEL = 8  # sign scan: 8 intervals per panel, i.e. 16 points per σ
_PANEL_SIGMAS = 0.5  # initial panel width
_MAX_POINTS = 4_000_000  # refuse integrations needing more scan points than this
_ROUNDING = 1e-12  # relative accuracy of f where it is positive (coefficients, logpmf, log-sum-exp)
_GL16 = np.polynomial.legendre.leggauss(16)
_GL8 = np.polynomial.legendre.leggauss(8)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True, slots=True)
class SignedMixture:
    """f(y) = A(y) − B(y); A (B) has means ``pos_mu`` (``neg_mu``) and log|c|, sorted by mean.

    Build it with :func:`signed_mixture`; ``abs_sum`` = Σ|c_k|, ``pos_sum`` = Σ_{c_k>0} c_k.
    """

    pos_mu: FloatArray
    pos_logc: FloatArray
    neg_mu: FloatArray
    neg_logc: FloatArray
    std: float
    abs_sum: float
    pos_sum: float


def _merge(mu: FloatArray, logc: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Sort by mean and merge components with equal means (log-sum-exp of their coefficients)."""
    finite = np.isfinite(logc)
    mu, logc = mu[finite], logc[finite]
    if mu.size == 0:
        return mu, logc
    order = np.argsort(mu, kind="stable")
    mu, logc = mu[order], logc[order]
    starts = np.flatnonzero(np.concatenate(([True], np.diff(mu) != 0.0)))
    peak = np.maximum.reduceat(logc, starts)
    total = np.add.reduceat(np.exp(logc - np.repeat(peak, np.diff(np.append(starts, mu.size)))), starts)
    return mu[starts], peak + np.log(total)


def signed_mixture(
    mus: dict[int, list[FloatArray]], logs: dict[int, list[FloatArray]], std: float
) -> SignedMixture:
    """Collect components by sign (+1/-1 → lists of means and log|c|), sort and merge equal means."""
    parts: dict[int, tuple[FloatArray, FloatArray]] = {}
    for sign in (1, -1):
        if mus.get(sign):
            parts[sign] = _merge(np.concatenate(mus[sign]), np.concatenate(logs[sign]))
        else:
            parts[sign] = (np.zeros(0), np.zeros(0))
    pos_sum = float(np.exp(parts[1][1]).sum())
    neg_sum = float(np.exp(parts[-1][1]).sum())
    return SignedMixture(
        parts[1][0], parts[1][1], parts[-1][0], parts[-1][1], std, pos_sum + neg_sum, pos_sum
    )


def _log_density(mu: FloatArray, logc: FloatArray, y: FloatArray, std: float) -> FloatArray:
    """log Σ_k c_k N(y; μ_k, σ²) for sorted ``y``, using only components within 16 σ of each point."""
    out = np.full(y.shape, -np.inf)
    if mu.size == 0 or y.size == 0:
        return out
    window = _WINDOW_SIGMAS * std
    n, i = y.size, 0
    ends = np.searchsorted(y, y + 8.0 * std, side="right")
    while i < n:
        j = int(min(n, i + 512, max(int(ends[i]), i + 1)))
        lo = int(np.searchsorted(mu, y[i] - window, side="left"))
        hi = int(np.searchsorted(mu, y[j - 1] + window, side="right"))
        if hi > lo:
            z = (y[i:j, None] - mu[None, lo:hi]) / std
            e = logc[None, lo:hi] - 0.5 * z * z
            peak = e.max(axis=1)
            ok = np.isfinite(peak)
            with np.errstate(invalid="ignore"):
                s = np.log(np.exp(e - peak[:, None]).sum(axis=1))
            out[i:j] = np.where(ok, peak + s, -np.inf)
        i = j
    return out - math.log(std) - _LOG_SQRT_2PI


def _evaluate(mix: SignedMixture, y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(f(y), A(y)) for any ``y`` (sorted internally)."""
    order = np.argsort(y, kind="stable")
    ys = y[order]
    la = _log_density(mix.pos_mu, mix.pos_logc, ys, mix.std)
    lb = _log_density(mix.neg_mu, mix.neg_logc, ys, mix.std)
    with np.errstate(invalid="ignore", over="ignore"):
        pos = la >= lb
        diff = np.where(pos, lb - la, la - lb)
        diff = np.where(np.isnan(diff), -np.inf, diff)  # both parts zero
        mag = np.where(pos, np.exp(la), np.exp(lb)) * -np.expm1(diff)
        f_sorted = np.where(pos, mag, -mag)
    f = np.empty_like(f_sorted)
    f[order] = f_sorted
    a_vals = np.empty_like(la)
    a_vals[order] = np.exp(la)
    return f, a_vals


def _intervals(mu: FloatArray, half: float) -> list[tuple[float, float]]:
    """Union of [μ − half, μ + half] over sorted means, as disjoint intervals."""
    out: list[tuple[float, float]] = []
    start, end = float(mu[0]) - half, float(mu[0]) + half
    for value in mu[1:]:
        if value - half > end:
            out.append((start, end))
            start = float(value) - half
        end = float(value) + half
    out.append((start, end))
    return out


def _bisect_roots(mix: SignedMixture, lo: FloatArray, hi: FloatArray, f_lo: FloatArray) -> FloatArray:
    """Vectorised bisection of sign changes of f in the brackets [lo, hi]."""
    lo, hi = lo.copy(), hi.copy()
    sign_lo = f_lo > 0.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        f_mid, _ = _evaluate(mix, mid)
        same = (f_mid > 0.0) == sign_lo
        lo = np.where(same, mid, lo)
        hi = np.where(same, hi, mid)
        if np.all(hi - lo <= 4e-16 * np.maximum(np.abs(lo), mix.std)):
            break
    return 0.5 * (lo + hi)


def _gauss_legendre(
    mix: SignedMixture, lo: FloatArray, hi: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(G16 of f, |G16 − G8|, G16 of A) on each panel [lo, hi]."""
    half, centre = 0.5 * (hi - lo), 0.5 * (hi + lo)
    x16, w16 = _GL16
    x8, w8 = _GL8
    y = np.concatenate(
        [
            (centre[:, None] + half[:, None] * x16[None, :]).ravel(),
            (centre[:, None] + half[:, None] * x8[None, :]).ravel(),
        ]
    )
    f, a_vals = _evaluate(mix, y)
    n = lo.size
    f16, f8 = f[: 16 * n].reshape(n, 16), f[16 * n :].reshape(n, 8)
    g16 = half * (f16 @ w16)
    g8 = half * (f8 @ w8)
    a16 = half * (a_vals[: 16 * n].reshape(n, 16) @ w16)
    return g16, np.abs(g16 - g8), a16


def _integrate(mix: SignedMixture, *, rtol: float = 1e-10) -> tuple[float, float, FloatArray]:
    """∫ over the positive set of f: (estimate, quadrature+rounding error, roots)."""
    std = mix.std
    pieces = _intervals(mix.pos_mu, _RANGE_SIGMAS * std)
    panel = _PANEL_SIGMAS * std
    counts = [max(1, math.ceil((b - a) / panel)) for a, b in pieces]
    if sum(counts) * _SCAN_PER_PANEL > _MAX_POINTS:
        raise NumericalError(
            f"audit integration needs {sum(counts) * _SCAN_PER_PANEL} scan points (limit {_MAX_POINTS}); "
            "reduce local_dataset_size or increase noise_multiplier."
        )
    edges_all: list[FloatArray] = []
    roots_all: list[FloatArray] = []
    for (a, b), n_panels in zip(pieces, counts, strict=True):
        scan = np.linspace(a, b, n_panels * _SCAN_PER_PANEL + 1)
        f_scan, _ = _evaluate(mix, scan)
        change = np.flatnonzero((f_scan[:-1] > 0.0) != (f_scan[1:] > 0.0))
        if change.size:
            roots_all.append(_bisect_roots(mix, scan[change], scan[change + 1], f_scan[change]))
        edges_all.append(scan[::_SCAN_PER_PANEL])
    roots = np.sort(np.concatenate(roots_all)) if roots_all else np.zeros(0)
    lo_list, hi_list = [], []
    for edges in edges_all:
        inside = roots[(roots > edges[0]) & (roots < edges[-1])]
        pts = np.unique(np.concatenate([edges, inside]))
        lo_list.append(pts[:-1])
        hi_list.append(pts[1:])
    lo, hi = np.concatenate(lo_list), np.concatenate(hi_list)
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    f_mid, _ = _evaluate(mix, 0.5 * (lo + hi))
    positive = f_mid > 0.0
    lo, hi = lo[positive], hi[positive]
    total, quad_err, a_mass = 0.0, 0.0, 0.0
    for _level in range(40):
        if lo.size == 0:
            break
        g16, err, a16 = _gauss_legendre(mix, lo, hi)
        estimate = total + float(g16.sum())
        target = max(rtol * abs(estimate), 1e-300)
        share = target * (hi - lo) / max(float((hi - lo).sum()), 1e-300)
        done = (err <= share) | (hi - lo <= 1e-9 * std)
        total += float(g16[done].sum())
        quad_err += float(err[done].sum())
        a_mass += float(a16[done].sum())
        mid = 0.5 * (lo + hi)
        lo, hi = np.concatenate([lo[~done], mid[~done]]), np.concatenate([mid[~done], hi[~done]])
    if lo.size:
        raise NumericalError("audit quadrature did not converge after 40 bisection levels.")
    return total, quad_err + _ROUNDING * a_mass, roots


def _closed_form(mix: SignedMixture, roots: FloatArray, positive: list[tuple[float, float]]) -> float | None:
    """Σ_k c_k [Φ((r_hi − μ_k)/σ) − Φ((r_lo − μ_k)/σ)] over the positive intervals (exact sum of terms)."""
    size = (mix.pos_mu.size + mix.neg_mu.size) * max(1, len(positive))
    if size > 2_000_000 or not positive:
        return None if positive else 0.0
    terms: list[float] = []
    for lo, hi in positive:
        for mu, logc, sign in ((mix.pos_mu, mix.pos_logc, 1.0), (mix.neg_mu, mix.neg_logc, -1.0)):
            # Φ(b) − Φ(a) = Φ̄(a) − Φ̄(b); use the tail that is small to keep relative accuracy.
            za, zb = (lo - mu) / mix.std, (hi - mu) / mix.std
            upper = np.where(
                za > 0.0, special.ndtr(-za) - special.ndtr(-zb), special.ndtr(zb) - special.ndtr(za)
            )
            terms.extend((sign * np.exp(logc) * upper).tolist())
    return max(0.0, math.fsum(terms))


def _positive_intervals(mix: SignedMixture, roots: FloatArray) -> list[tuple[float, float]]:
    """Maximal intervals between consecutive roots (or ±inf) on which f > 0."""
    if mix.pos_mu.size == 0:
        return []
    if roots.size == 0:
        probes = np.array([float(mix.pos_mu[0])])
    else:
        inner = 0.5 * (roots[:-1] + roots[1:])
        probes = np.concatenate(([roots[0] - mix.std], inner, [roots[-1] + mix.std]))
    f_probe, _ = _evaluate(mix, probes)
    points = np.concatenate(([-np.inf], roots, [np.inf]))
    return [(float(points[k]), float(points[k + 1])) for k in np.flatnonzero(f_probe > 0.0)]


@dataclass(frozen=True, slots=True)
class PositivePartIntegral:
    """∫ f_+ dy: ``value``; ``error`` (quadrature, rounding, range and window truncation); ``closed_form``
    (Σ_k c_k [Φ] over the located positive intervals, or ``None`` when too expensive); ``num_intervals``."""

    value: float
    error: float
    closed_form: float | None
    num_intervals: int


def integrate_positive_part(mix: SignedMixture) -> PositivePartIntegral:
    """∫ max(f, 0) dy for a signed Gaussian mixture, with an error bound (see the module docstring)."""
    if mix.pos_mu.size == 0:
        return PositivePartIntegral(0.0, 0.0, 0.0, 0)
    total, err, roots = _integrate(mix)
    std = mix.std
    length = sum(b - a for a, b in _intervals(mix.pos_mu, _RANGE_SIGMAS * std))
    tail = 2.0 * mix.pos_sum * float(special.ndtr(-_RANGE_SIGMAS))
    window = mix.abs_sum * math.exp(-0.5 * _WINDOW_SIGMAS**2 - _LOG_SQRT_2PI) / std * length
    positive = _positive_intervals(mix, roots)
    closed = _closed_form(mix, roots, positive)
    return PositivePartIntegral(max(0.0, total), err + tail + window, closed, len(positive))
