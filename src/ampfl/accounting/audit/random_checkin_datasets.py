"""Random check-in (004): explicit datasets with NON-identical records (lower bounds).

Mechanism (C = 1, std z, participation hidden, one round): client 1 holds x′ (gradient u) and d other records
with gradients g_1 … g_d (‖g_i‖ ≤ 1); Q = (1 − p) N(0) + p·E[N(S)], P = (1 − p) N(0) + p·E[(1 − q) N(S) +
q N(S + u)], S = Σ_i ξ_i g_i, ξ_i ~ Bern(q) independent (the other clients add a term independent of x′: a
post-processing). :mod:`ampfl.accounting.audit.random_checkin_pld` searches datasets whose d records are all
equal (S = M·g). Here the records come in **types**: n_j records of gradient g_j (a 2-D vector in the plane
spanned by u and one v ⊥ u), so S is a lattice mixture Σ_j m_j g_j with weights Π_j Bin(m_j; n_j, q).

Every number is a LOWER bound on the mechanism's ε(δ) for that dataset (hence on the worst case): the plane is
cut into cells of width z/``cells_per_sigma`` (plus half-planes), the cell masses of P and Q are exact
(products of 1-D Gaussian CDF differences; the noise is isotropic), and the binned pair's PLD rounds every
loss DOWN (:func:`~ampfl.accounting.audit.random_checkin_pld.optimistic_pld`, as the identical-record code
does). Binning is a post-processing and optimistic rounding only lowers δ; composing the PLD T times is the
T-round mechanism on the fixed dataset. Lattice terms of weight below 1e-25 are dropped from P and Q alike
(changes δ by at most e^ε·1e-25 per term, far below every δ used). The search scores a dataset by the binned
pair's δ at a reference ε directly (``binned_delta``; the same lower bound, no loss grid): a dataset beats the
reference ε(δ) iff its δ at that ε exceeds the target δ.

Provenance: [C] (our construction; docs/pld_random_checkin.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import stats

from ampfl.accounting._checks import check_int, check_positive, check_probability
from ampfl.accounting.audit._mixture_integral import FloatArray
from ampfl.accounting.audit.random_checkin_pld import (
    binned_pair_delta,
    log_cell_masses,
    mix_cell_masses,
    optimistic_pld,
)

__all__ = [
    "DatasetSearch",
    "RecordType",
    "binned_delta",
    "random_record_types",
    "search_record_types",
    "sum_distribution",
    "types_pair_pld",
]

#: (count, (gradient along u, gradient along v)) of one record type; ‖gradient‖ ≤ 1 (clip norm C = 1).
RecordType = tuple[int, tuple[float, float]]
_KEEP = 1e-25


def _check_types(types: Sequence[RecordType]) -> list[RecordType]:
    out: list[RecordType] = []
    for n, (gu, gv) in types:
        check_int("record count", n, minimum=0, maximum=100_000)
        if not (math.isfinite(gu) and math.isfinite(gv)) or gu * gu + gv * gv > 1.0 + 1e-9:
            raise ValueError(f"record gradients must have norm at most 1 (the clip norm). Found {(gu, gv)}.")
        if n > 0:
            out.append((int(n), (float(gu), float(gv))))
    return out


def sum_distribution(
    types: Sequence[RecordType], q: float, keep: float = _KEEP
) -> tuple[FloatArray, FloatArray]:
    """(means (K, 2), log weights (K,)) of S = Σ_j m_j g_j, m_j ~ Bin(n_j, q) independent; terms of weight
    below ``keep`` are dropped (a sub-probability)."""
    means = np.zeros((1, 2))
    log_w = np.zeros(1)
    for n, g in _check_types(types):
        m = np.arange(n + 1, dtype=np.float64)
        lw = np.asarray(stats.binom.logpmf(m, n, q), dtype=np.float64)
        ok = lw >= math.log(keep)
        m, lw = m[ok], lw[ok]
        means = (means[:, None, :] + m[None, :, None] * np.asarray(g)[None, None, :]).reshape(-1, 2)
        log_w = (log_w[:, None] + lw[None, :]).ravel()
        ok = log_w >= math.log(keep)
        means, log_w = means[ok], log_w[ok]
        # merge equal means (e.g. equal types, or zero gradients)
        key = np.round(means * 1e9).astype(np.int64)
        uniq, inv = np.unique(key, axis=0, return_inverse=True)
        if uniq.shape[0] < means.shape[0]:
            inv = inv.ravel()
            merged = np.full(uniq.shape[0], -np.inf)
            np.logaddexp.at(merged, inv, log_w)
            first = np.zeros(uniq.shape[0], dtype=np.int64)
            first[inv[::-1]] = np.arange(inv.size)[::-1]
            means, log_w = means[first], merged
    return means, log_w


def _edges(lo: float, hi: float, z: float, cells: int, tail: float) -> FloatArray:
    lo, hi = lo - tail * z, hi + tail * z
    n = max(16, math.ceil((hi - lo) / z * cells))
    return np.concatenate([[-np.inf], np.linspace(lo, hi, n + 1), [np.inf]])


def log_masses(
    means: FloatArray, log_w: FloatArray, p: float, q: float, z: float, cells: int, tail: float
) -> tuple[FloatArray, FloatArray]:
    """(log P, log Q) cell masses of the pair with S ~ Σ_k w_k δ_{means_k} (module docstring)."""
    mu_u, mu_v = means[:, 0], means[:, 1]
    eu = _edges(min(0.0, float(mu_u.min())), max(1.0, float(mu_u.max()) + 1.0), z, cells, tail)
    u0 = log_cell_masses(eu, np.array([0.0]), z)[0]
    u_base, u_shift = log_cell_masses(eu, mu_u, z), log_cell_masses(eu, mu_u + 1.0, z)
    w = np.exp(log_w)
    if not np.any(mu_v != 0.0):
        base = w @ np.exp(u_base)
        shift = w @ np.exp(u_shift)
        with np.errstate(divide="ignore"):
            log_base, log_shift = np.log(base), np.log(shift)
        log_n0 = u0
    else:  # product grid; the noise is isotropic so each component's cell mass is (u-mass)·(v-mass)
        ev = _edges(min(0.0, float(mu_v.min())), max(0.0, float(mu_v.max())), z, cells, tail)
        v_m = np.exp(log_cell_masses(ev, mu_v, z))
        base = (np.exp(u_base) * w[:, None]).T @ v_m
        shift = (np.exp(u_shift) * w[:, None]).T @ v_m
        v0 = log_cell_masses(ev, np.array([0.0]), z)[0]
        with np.errstate(divide="ignore"):
            log_base, log_shift = np.log(base).ravel(), np.log(shift).ravel()
        log_n0 = (u0[:, None] + v0[None, :]).ravel()
    return mix_cell_masses(p, q, log_n0, log_base, log_shift)


def _check(p: float, q: float, z: float) -> tuple[float, float, float]:
    return (
        check_probability("participation", p),
        check_probability("sampling_rate", q),
        check_positive("noise_multiplier", z),
    )


def binned_delta(
    types: Sequence[RecordType],
    *,
    participation: float,
    sampling_rate: float,
    noise_multiplier: float,
    epsilon: float,
    cells_per_sigma: int = 16,
    tail: float = 10.0,
) -> float:
    """One-round δ(ε) (max of both directions) of the binned pair of the dataset ``types``: a LOWER bound on
    the mechanism's δ(ε) (data processing; no loss grid)."""
    p, q, z = _check(participation, sampling_rate, noise_multiplier)
    means, log_w = sum_distribution(types, q)
    return binned_pair_delta(*log_masses(means, log_w, p, q, z, cells_per_sigma, tail), epsilon)


def types_pair_pld(
    types: Sequence[RecordType],
    *,
    participation: float,
    sampling_rate: float,
    noise_multiplier: float,
    value_discretization_interval: float = 1e-4,
    cells_per_sigma: int | None = None,
) -> pld_lib.PrivacyLossDistribution:
    """Optimistic PLD (a LOWER bound, both directions) of the dataset ``types`` (module docstring).

    ``cells_per_sigma`` defaults to 256 when every gradient lies on u (1-D), else 32 (a 2-D grid)."""
    p, q, z = _check(participation, sampling_rate, noise_multiplier)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    flat = all(g[1] == 0.0 for _, g in _check_types(types))
    cells = check_int("cells_per_sigma", cells_per_sigma or (256 if flat else 32), minimum=4, maximum=4096)
    means, log_w = sum_distribution(types, q)
    log_p, log_q = log_masses(means, log_w, p, q, z, cells, 14.0)
    return optimistic_pld(log_p, log_q, h)


@dataclass(frozen=True, slots=True)
class DatasetSearch:
    """Result of :func:`search_record_types`: the dataset with the largest score found.

    Attributes:
        types: the record types found (count, gradient); ``value``: its score (one round: the binned δ at the
        reference ε; composed: the T-fold ε(δ) of its optimistic PLD; a lower bound on the mechanism's value
        either way); ``start_value``: the same for the starting (identical-record) dataset; ``evaluations``:
        datasets scored.
    """

    types: tuple[RecordType, ...]
    value: float
    start_value: float
    evaluations: int


def _polar(r: float, theta: float) -> tuple[float, float]:
    rad = math.radians(theta)
    return r * math.cos(rad), r * math.sin(rad)


Key = tuple[int, float, float, float, float]


def search_record_types(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    start: tuple[float, float],
    epsilon: float | None = None,
    delta: float | None = None,
    iterations: int = 1,
    fractions: Sequence[float] = (0.0, 0.25, 0.5, 0.75),
    angles: Sequence[float] = tuple(range(0, 360, 30)),
    norms: Sequence[float] = (0.0, 0.5, 1.0),
    pattern_steps: int = 4,
    seeds: int = 2,
    cells_per_sigma: int = 16,
) -> DatasetSearch:
    """Two record types, k records at g₁ and d − k at g₂ (polar (r, θ) in the (u, v) plane), maximising a
    lower bound: with ``epsilon``, the binned one-round δ at that ε; with ``delta``, the ε(δ) of the dataset's
    optimistic PLD composed ``iterations`` times. A coarse scan (g₁ = ``start``, the best identical-record
    gradient; k = max(1, ⌊f·d⌋) for f in ``fractions``; g₂ over ``norms`` × ``angles``), then a pattern
    search on (k, r₁, θ₁, r₂, θ₂) from the ``seeds`` best scanned points (``pattern_steps`` halvings of the
    steps d/4, 0.25, 30°)."""
    p, q, z = _check(participation, sampling_rate, noise_multiplier)
    d = check_int("local_dataset_size", local_dataset_size, minimum=0, maximum=100_000)
    t = check_int("iterations", iterations, minimum=1)
    if (epsilon is None) == (delta is None):
        raise ValueError("search_record_types: give exactly one of epsilon (one round) and delta (composed).")
    cache: dict[Key, float] = {}

    def key_of(k: int, r1: float, t1: float, r2: float, t2: float) -> Key:
        k = min(max(k, 0), d)
        r1, r2 = min(max(r1, 0.0), 1.0), min(max(r2, 0.0), 1.0)
        return k, round(r1, 9), round(t1 % 360.0, 9), round(r2, 9), round(t2 % 360.0, 9)

    def types_of(key: Key) -> tuple[RecordType, ...]:
        k, r1, t1, r2, t2 = key
        return ((k, _polar(r1, t1)), (d - k, _polar(r2, t2)))

    def score(key: Key) -> float:
        if key not in cache:
            if epsilon is not None:
                cache[key] = binned_delta(
                    types_of(key),
                    participation=p,
                    sampling_rate=q,
                    noise_multiplier=z,
                    epsilon=epsilon,
                    cells_per_sigma=cells_per_sigma,
                )
            else:
                assert delta is not None
                one = types_pair_pld(types_of(key), participation=p, sampling_rate=q, noise_multiplier=z)
                pld = one if t == 1 else one.self_compose(t)
                cache[key] = max(0.0, float(pld.get_epsilon_for_delta(delta)))
        return cache[key]

    r0 = min(1.0, math.hypot(*start))
    t0 = math.degrees(math.atan2(start[1], start[0]))
    start_key = key_of(d, r0, t0, r0, t0)
    start_value = score(start_key)
    if d >= 2:
        for k in sorted({max(1, int(f * d)) for f in fractions}):
            for r2 in norms:
                for t2 in angles if r2 > 0.0 else (0.0,):
                    score(key_of(k, r0, t0, r2, t2))
        for seed in sorted(cache, key=lambda kk: -cache[kk])[:seeds]:
            cur: Key = seed
            steps = [float(max(1, d // 4)), 0.25, 30.0, 0.25, 30.0]
            for _ in range(pattern_steps):
                improved = True
                while improved:
                    improved = False
                    for i in range(5):
                        for sign in (1.0, -1.0):
                            trial = [float(x) for x in cur]
                            trial[i] += sign * steps[i]
                            tk = key_of(int(trial[0]), trial[1], trial[2], trial[3], trial[4])
                            if score(tk) > score(cur) * (1.0 + 1e-9):
                                cur, improved = tk, True
                steps = [float(max(1, int(steps[0]) // 2))] + [x / 2.0 for x in steps[1:]]
    best = max(cache, key=lambda kk: cache[kk])
    return DatasetSearch(types_of(best), cache[best], start_value, len(cache))


def random_record_types(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    epsilon: float,
    samples: int,
    n_types: int = 3,
    seed: int = 0,
    cells_per_sigma: int = 16,
) -> tuple[tuple[RecordType, ...], float]:
    """Random search: ``samples`` datasets of ``n_types`` types (random split of the d records, angles
    uniform, norms 1 or √U(0.2, 1) with probability ½ each), scored by the binned δ at ``epsilon`` (a lower
    bound). Returns the best dataset and its δ."""
    p, q, z = _check(participation, sampling_rate, noise_multiplier)
    d = check_int("local_dataset_size", local_dataset_size, minimum=0, maximum=100_000)
    n = check_int("samples", samples, minimum=1)
    kk = check_int("n_types", n_types, minimum=1, maximum=8)
    rng = np.random.default_rng(seed)
    best: tuple[tuple[RecordType, ...], float] = ((), -1.0)
    for _ in range(n):
        cuts = np.sort(rng.integers(0, d + 1, size=kk - 1))
        counts = np.diff(np.concatenate([[0], cuts, [d]]))
        theta = np.radians(rng.uniform(-180.0, 180.0, kk))
        norm = np.where(rng.random(kk) < 0.5, 1.0, np.sqrt(rng.uniform(0.2, 1.0, kk)))
        types = tuple(
            (int(c), (float(r * math.cos(t)), float(r * math.sin(t))))
            for c, r, t in zip(counts, norm, theta, strict=True)
        )
        val = binned_delta(
            types,
            participation=p,
            sampling_rate=q,
            noise_multiplier=z,
            epsilon=epsilon,
            cells_per_sigma=cells_per_sigma,
        )
        if val > best[1]:
            best = (types, val)
    return best
