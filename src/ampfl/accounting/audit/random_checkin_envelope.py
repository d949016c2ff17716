"""DIAGNOSTIC (not an accountant, used by no run): the per-count envelope of random check-in (004), one round.

Notation of :mod:`ampfl.accounting.audit.random_checkin_datasets` (C = 1, std z, participation hidden).
Reveal M, the number of sampled other records (a post-processing order: δ can only grow). Given M = m the
sum S has some law on the disk ‖S‖ ≤ m, the same with and without x′, so by joint convexity of the
hockey-stick divergence the conditional δ is at most sup_{‖s‖ ≤ m} δ_{m}(s) of the fixed-s pair
Q_s = (1 − p) N(0) + p N(s), P_s = (1 − p) N(0) + p[(1 − q) N(s) + q N(s + u)], per direction. So

    E(ε) = max over directions of Σ_m Bin(m; d, q) · sup_{‖s‖ ≤ m} δ_s^{dir}(ε)

is what an ideal per-count bound would give (the "pure" envelope). It reveals M even when B = 0, so it is
not below the empty-sample refinement (:func:`~ampfl.accounting.random_checkin.pld_pairs.refined_pld`),
which pools every B = 0 with M = 0. The **pooled envelope** fixes that as the per-count split does: counts
m ≥ k reveal B (their sup replaced by its limit p·δ_q as ‖s‖ → ∞, a garbling order) and their B = 0 part
joins M = 0 (an r₀-subsampled Gaussian, r₀ = p·Bin(0; d, q)·q / weight), counts 1 ≤ m < k keep the sup;
k = 1 is the refinement, k = d + 1 the pure envelope, and the smallest δ over k at each ε is reported (a
minimum of one-round δ(ε) bounds is one). Here the sup is a maximum over a grid of s (radii and angles,
v ≥ 0 by symmetry, then a local pattern search) and each δ_s is the binned pair's δ (a lower bound on
δ_s): so this is an ESTIMATE of the envelope from below, not a certified bound, and it is not composed.

:func:`envelope_epsilon` also returns the same mixture with one fixed direction for every count (s = m·g,
"identical records with M revealed"), which separates the two reasons the identical-record datasets stay below
the envelope: hiding M (explicit vs revealed) and one direction for all counts (revealed vs envelope).

:func:`count_hidden_path_epsilon` looks the other way: M stays hidden, but given M = m the sum is a free
point of its disk (a relaxation that contains every dataset), searched as a path over the counts; where it
finds nothing above identical records, the gap left is the accountant's (docs/pld_random_checkin.md, (f)).

Provenance: [C] (our construction; docs/pld_random_checkin.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import stats

from ampfl.accounting._checks import check_int, check_positive, check_probability
from ampfl.accounting.audit._mixture_integral import FloatArray
from ampfl.accounting.audit.random_checkin_datasets import log_masses
from ampfl.accounting.audit.random_checkin_pld import binned_pair_delta, binned_pair_epsilon, optimistic_pld
from ampfl.accounting.random_checkin.count_split import hockey_sticks

__all__ = [
    "Envelope",
    "PathSearch",
    "count_hidden_path_epsilon",
    "envelope_epsilon",
    "fixed_sum_deltas",
    "per_count_pld",
]


def fixed_sum_deltas(
    p: float, q: float, z: float, s: tuple[float, float], eps: FloatArray, cells_per_sigma: int = 16
) -> FloatArray:
    """(2, len(eps)) binned δ(ε) of the fixed-s pair (module docstring), rows remove and add: lower bounds."""
    log_p, log_q = log_masses(np.array([s], dtype=np.float64), np.zeros(1), p, q, z, cells_per_sigma, 10.0)
    pm, qm = np.exp(log_p), np.exp(log_q)
    e = np.exp(np.asarray(eps, dtype=np.float64))[:, None]
    rem = np.maximum(pm[None, :] - e * qm[None, :], 0.0).sum(axis=1)
    add = np.maximum(qm[None, :] - e * pm[None, :], 0.0).sum(axis=1)
    return np.vstack([rem, add])


@dataclass(frozen=True, slots=True)
class Envelope:
    """Result of :func:`envelope_epsilon` (one round, ε at the target δ; estimates, see module docstring).

    Attributes:
        epsilon: ε of the pooled envelope (the smallest over k, pointwise in ε); ``pure_epsilon``: ε of E
        (M revealed for every count); ``revealed_epsilon``: ε of the fixed-direction mixture (s = m·g for the
        given g, M revealed); ``revealed_bit_epsilon``: k = 1, the refinement, in closed form (a check);
        ``sup_points``: per count, the maximising (‖s‖, θ) at the middle ε.
    """

    epsilon: float
    pure_epsilon: float
    revealed_epsilon: float
    revealed_bit_epsilon: float
    sup_points: dict[int, tuple[float, float]]


def _interp_epsilon(eps: FloatArray, deltas: FloatArray, delta: float) -> float:
    """ε where the (decreasing) δ curve crosses ``delta``, linear in (ε, log δ) between grid points."""
    above = np.nonzero(deltas > delta)[0]
    if above.size == 0:
        return float(eps[0])
    i = int(above[-1])
    if i + 1 >= eps.size:
        return math.inf
    a, b = math.log(deltas[i]), math.log(max(deltas[i + 1], 1e-300))
    t = (a - math.log(delta)) / (a - b) if a > b else 0.0
    return float(eps[i] + t * (eps[i + 1] - eps[i]))


def _count_sup(
    p: float,
    q: float,
    z: float,
    m: int,
    eps: FloatArray,
    direction: tuple[float, float],
    angles: int,
    radii: int,
    refine: int,
    cells: int,
) -> tuple[FloatArray, tuple[float, float]]:
    """(2, len(eps)) max over a grid of s in the disk ‖s‖ ≤ m (polar, θ ∈ [0°, 180°]) of the fixed-s δ,
    refined by a pattern search at three ε; and the maximiser (‖s‖, θ) at the middle ε."""
    cache: dict[tuple[float, float], FloatArray] = {}

    def at(r: float, th: float) -> FloatArray:
        r, th = min(max(r, 0.0), 1.0), min(max(th, 0.0), 180.0)
        key = (round(r, 9), round(th, 9))
        if key not in cache:
            rad = math.radians(th)
            cache[key] = fixed_sum_deltas(p, q, z, (m * r * math.cos(rad), m * r * math.sin(rad)), eps, cells)
        return cache[key]

    for r in np.linspace(1.0 / radii, 1.0, radii):
        for th in np.linspace(0.0, 180.0, angles):
            at(float(r), float(th))
    at(math.hypot(*direction), math.degrees(math.atan2(direction[1], direction[0])))
    mid = eps.size // 2
    for col in (mid, 0, eps.size - 1):  # local pattern search at three ε
        r0, t0 = max(cache, key=lambda k: float(cache[k][:, col].max()))
        step_r, step_t = 0.5 / radii, 90.0 / (angles - 1)
        for _ in range(refine):
            moved = True
            while moved:
                moved = False
                for dr, dt in ((step_r, 0.0), (-step_r, 0.0), (0.0, step_t), (0.0, -step_t)):
                    if at(r0 + dr, t0 + dt)[:, col].max() > at(r0, t0)[:, col].max() * (1 + 1e-9):
                        r0, t0, moved = min(max(r0 + dr, 0.0), 1.0), min(max(t0 + dt, 0.0), 180.0), True
            step_r, step_t = step_r / 2, step_t / 2
    best = max(cache, key=lambda k: float(cache[k][:, mid].max()))
    return np.max(np.stack(list(cache.values())), axis=0), (m * best[0], best[1])


def envelope_epsilon(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    delta: float,
    eps_low: float,
    eps_high: float,
    direction: tuple[float, float] = (1.0, 0.0),
    points: int = 16,
    angles: int = 13,
    radii: int = 5,
    refine: int = 4,
    cells_per_sigma: int = 16,
) -> Envelope:
    """The per-count envelope's ε(δ) (an estimate from below; module docstring), evaluated on ``points``
    ε values between ``eps_low`` and ``eps_high`` (bracket it: the explicit ε and the refinement's ε) and
    interpolated. ``direction``: the fixed-direction gradient g for ``revealed_epsilon``."""
    p = check_probability("participation", participation)
    q = check_probability("sampling_rate", sampling_rate)
    d = check_int("local_dataset_size", local_dataset_size, minimum=0, maximum=100_000)
    z = check_positive("noise_multiplier", noise_multiplier)
    lo = max(check_positive("eps_low", eps_low) * 0.97, 1e-9)
    hi = check_positive("eps_high", eps_high) * 1.03
    eps = np.linspace(lo, hi, points)
    ms = np.arange(d + 1)
    w = stats.binom.pmf(ms, d, q)

    def hockey(rate: float) -> FloatArray:  # (2, points) closed-form δ of the rate-subsampled Gaussian
        out = [hockey_sticks(np.array([rate]), np.array([z]), float(x)) for x in eps]
        return np.array([[float(r[0]) for r, _ in out], [float(a[0]) for _, a in out]])

    cap = p * hockey(q)  # B revealed given M = m ≥ 1: the limit of the per-count sup as ‖s‖ → ∞
    sups: list[tuple[float, FloatArray]] = []  # (w_m, sup_m) for m ≥ 1; negligible counts get the cap
    fixed = w[0] * hockey(p * q)  # M = 0: S = 0, the pq-subsampled Gaussian
    sup_points: dict[int, tuple[float, float]] = {}
    saturated: FloatArray | None = None
    for m, wm in zip(ms[1:], w[1:], strict=True):
        if wm < 1e-16:  # negligible count: the cap (an overestimate by at most wm·p·δ_q)
            sups.append((float(wm), cap))
            fixed += wm * cap
            continue
        along = fixed_sum_deltas(p, q, z, (direction[0] * m, direction[1] * m), eps, cells_per_sigma)
        fixed += wm * along
        if saturated is not None:  # the sup is nondecreasing in m and below the cap
            sups.append((float(wm), np.maximum(saturated, along)))
            continue
        sup, point = _count_sup(p, q, z, int(m), eps, direction, angles, radii, refine, cells_per_sigma)
        sup_points[int(m)] = point
        sups.append((float(wm), sup))
        if np.all(sup >= 0.999 * cap):
            saturated = sup
    # counts m ≥ k reveal B and pool their B = 0 part with M = 0 (k = 1: the refinement; k > d: pure envelope)
    curves: list[FloatArray] = []
    for k in range(1, len(sups) + 2):
        pooled = sups[k - 1 :]
        weight = float(w[0]) + (1.0 - p) * sum(wm for wm, _ in pooled)
        dlt = sum((wm * sup for wm, sup in sups[: k - 1]), np.zeros((2, points)))
        dlt = dlt + p * sum(wm for wm, _ in pooled) * hockey(q)
        if weight > 0.0:
            dlt = dlt + weight * hockey(min(q, p * float(w[0]) * q / weight))
        curves.append(dlt.max(axis=0))
    return Envelope(
        _interp_epsilon(eps, np.min(np.stack(curves), axis=0), delta),
        _interp_epsilon(eps, curves[-1], delta),
        _interp_epsilon(eps, fixed.max(axis=0), delta),
        _interp_epsilon(eps, curves[0], delta),
        sup_points,
    )


def per_count_pld(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    sums: Mapping[int, tuple[float, float]],
    pool_from: int | None = None,
    value_discretization_interval: float = 1e-4,
    cells_per_sigma: int = 16,
) -> pld_lib.PrivacyLossDistribution:
    """DIAGNOSTIC: optimistic PLD of the public mixture over M = m of fixed-s pairs, s = ``sums[m]`` given as
    (‖s‖, θ in degrees) (counts not listed: s = m·v, orthogonal to u); counts m ≥ ``pool_from`` reveal B and
    pool their B = 0 part with M = 0 (module docstring). For the composed columns: it is one choice of the
    per-count sums, so it estimates the composed envelope from below; it is not a bound on the mechanism."""
    p = check_probability("participation", participation)
    q = check_probability("sampling_rate", sampling_rate)
    d = check_int("local_dataset_size", local_dataset_size, minimum=0, maximum=100_000)
    z = check_positive("noise_multiplier", noise_multiplier)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    ms = np.arange(d + 1)
    w = stats.binom.pmf(ms, d, q)
    k = d + 1 if pool_from is None else max(1, pool_from)
    parts: list[tuple[FloatArray, FloatArray]] = []  # (log P, log Q) cell masses, weights included

    def add(weight: float, part: float, s: tuple[float, float]) -> None:
        if weight > 1e-30:
            log_p, log_q = log_masses(
                np.array([s], dtype=np.float64), np.zeros(1), part, q, z, cells_per_sigma, 10.0
            )
            parts.append((log_p + math.log(weight), log_q + math.log(weight)))

    pooled = float(w[k:].sum()) if k <= d else 0.0
    weight0 = float(w[0]) + (1.0 - p) * pooled
    if (
        weight0 > 0.0
    ):  # S = 0; x′ included with probability r₀ = p·w₀·q / weight0: "participation" p·w₀/weight0
        add(weight0, min(1.0, p * float(w[0]) / weight0), (0.0, 0.0))
    if pooled > 0.0:  # B = 1 revealed: the q-subsampled Gaussian (participation 1, s = 0)
        add(p * pooled, 1.0, (0.0, 0.0))
    for m in range(1, min(k, d + 1)):
        r, th = sums.get(m, (float(m), 90.0))
        rad = math.radians(th)
        add(float(w[m]), p, (r * math.cos(rad), r * math.sin(rad)))
    log_p = np.concatenate([x for x, _ in parts])
    log_q = np.concatenate([y for _, y in parts])
    return optimistic_pld(log_p, log_q, h)


@dataclass(frozen=True, slots=True)
class PathSearch:
    """Result of :func:`count_hidden_path_epsilon` (one round; estimates from below, see there).

    Attributes:
        epsilon: ε(δ) of the best path found; ``start_epsilon``: of the straight start path s_m = m·g;
        ``path``: per count m = 1 … K, (‖s_m‖ / m, θ_m in degrees).
    """

    epsilon: float
    start_epsilon: float
    path: tuple[tuple[float, float], ...]


def count_hidden_path_epsilon(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    delta: float,
    reference_epsilon: float,
    start: tuple[float, float] = (1.0, 0.0),
    levels: int = 5,
    cells_per_sigma: int = 16,
) -> PathSearch:
    """DIAGNOSTIC, one round: the count-hidden relaxation. M ~ Bin(d, q) stays hidden, but given M = m the
    sum S is a free point s_m of the disk ‖s‖ ≤ m in the plane of x′ (every real dataset gives a mixture of
    such points, so by convexity the relaxation's worst case is a path of points; it is an upper bound on
    the mechanism that this search estimates from below). A pattern search over (‖s_m‖/m, θ_m) for the
    counts of mass ≥ 1e-7 (heavier-tail counts stay on the start direction ``start`` = g), from the straight
    path s_m = m·g (identical records), scored by the binned pair's δ at ``reference_epsilon``; ε(δ) of the
    binned pair, exact (:func:`~ampfl.accounting.audit.random_checkin_pld.binned_pair_epsilon`)."""
    p = check_probability("participation", participation)
    q = check_probability("sampling_rate", sampling_rate)
    d = check_int("local_dataset_size", local_dataset_size, minimum=1, maximum=100_000)
    z = check_positive("noise_multiplier", noise_multiplier)
    ref = check_positive("reference_epsilon", reference_epsilon)
    ms = np.arange(d + 1)
    w = stats.binom.pmf(ms, d, q)
    keep = w > 1e-18
    ms, log_w = ms[keep], np.log(w[keep])
    k = max(1, int(ms[w[keep] > 1e-7].max()))
    norm, angle = math.hypot(*start), math.degrees(math.atan2(start[1], start[0]))

    def masses(path: np.ndarray) -> tuple[FloatArray, FloatArray]:
        pts = np.zeros((ms.size, 2))
        for i, m in enumerate(ms):
            r, th = (path[m - 1] if 1 <= m <= k else (norm, angle)) if m > 0 else (0.0, 0.0)
            pts[i] = (m * r * math.cos(math.radians(th)), m * r * math.sin(math.radians(th)))
        return log_masses(pts, log_w, p, q, z, cells_per_sigma, 10.0)

    def score(path: np.ndarray) -> float:
        return binned_pair_delta(*masses(path), ref)

    first = np.array([(norm, angle)] * k, dtype=np.float64)
    path, best = first.copy(), score(first)
    step_r, step_t = 0.1, 15.0
    for _ in range(levels):
        moved = True
        while moved:
            moved = False
            for i in range(k):
                for col, step in ((0, step_r), (0, -step_r), (1, step_t), (1, -step_t)):
                    trial = path.copy()
                    trial[i, col] = (
                        min(max(trial[i, col] + step, 0.0), 1.0) if col == 0 else trial[i, col] + step
                    )
                    val = score(trial)
                    if val > best * (1.0 + 1e-9):
                        path, best, moved = trial, val, True
        step_r, step_t = step_r / 2.0, step_t / 2.0
    return PathSearch(
        binned_pair_epsilon(*masses(path), delta),
        binned_pair_epsilon(*masses(first), delta),
        tuple((float(r), float(t)) for r, t in path),
    )
