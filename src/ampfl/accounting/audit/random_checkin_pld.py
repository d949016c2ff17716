"""Random check-in (004): privacy-loss distributions of explicit datasets (lower bounds) and of the
empty-sample refinement of the WCS dominating pair (a sound upper bound), composed over T rounds.

**Explicit pair (lower bound).** The auditor's family (:mod:`ampfl.accounting.audit.random_checkin`): other
clients contribute 0, client 1's d other records all have gradient a·C·u, x′ has C·u; along u the output is
Q = (1 − p) N(0) + p Σ_m Bin(m; d, q) N(am), P = (1 − p) N(0) + p Σ_m Bin(m; d, q)[(1 − q) N(am) +
q N(am + 1)] (C = 1, std z); the tilted family puts them at C(a·u + b·v), v ⊥ u, a 2-D pair.
:func:`explicit_pair_pld` bins the line (plane) into cells of width z/``cells_per_sigma`` (plus the
half-lines), takes the exact cell masses of P and Q (Gaussian CDF differences in log space), and builds
the PLD of the binned pair with *optimistic* rounding of each loss. Binning is a post-processing (data
processing inequality) and optimistic rounding only lowers every δ, so every ε(δ) and δ(ε) it gives, composed
or not, is a lower bound on the mechanism's true value for that dataset, and therefore on the worst case.
Composing T copies is the T-round mechanism on a fixed dataset (participation and sampling fresh each round).

**Empty-sample refinement (upper bound).** :func:`refined_pld` (now in
:mod:`ampfl.accounting.random_checkin.pld_pairs`, the PLD accountant's pair for hidden participation).
Publish, each round, W = 1[client 1
participates and at least one of its d other records is sampled] and the sum S of those records' gradients
when W = 1. (W, S) has the same law with or without x′, so the released output is a post-processing of a
public-selector mixture: given W = 1, x′ is included with probability q (a q-subsampled Gaussian, the WCS
case); given W = 0, S = 0 and x′ is included with probability r = p(1 − q)^d q / π₀, π₀ = P(W = 0) =
1 − p + p(1 − q)^d (an r-subsampled Gaussian). So the pair π₁·PLD_q + π₀·PLD_r (π₁ = 1 − π₀, mixed by
dp-accounting's ``compute_mixture``, pessimistic) dominates one round in both directions and, W being fresh
and public each round, its T-fold composition dominates T rounds. d = 0 gives the pq-subsampled Gaussian
(exact: the client's participation is then only visible through x′); d → ∞ gives the WCS pair. The bound
increases with d (the d-pair is the d′-pair, d′ > d, with part of its selector forgotten: π₀(d)·r(d) =
π₀(d′)·r(d′) + (π₁(d′) − π₁(d))·q), so d may be any upper bound on the client's other records (the largest
local dataset, for a record at an unknown client).

**Noise split (upper bound).** :func:`split_pld`: reveal Y = B·S + N₁ with part N₁ of the noise; given Y
the round is an r(Y)-subsampled Gaussian with the rest of the noise (Blackwell–Jensen: docstring there).

Provenance: [C] (our derivation, docs/accounting.md "RDP vs PLD vs exact, per mechanism").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import special, stats

from ampfl.accounting._checks import check_int, check_positive, check_probability, check_range
from ampfl.accounting.audit._mixture_integral import FloatArray
from ampfl.accounting.pld_grid import mixture, round_down
from ampfl.accounting.random_checkin.count_split import merge_upwards
from ampfl.accounting.random_checkin.pld_pairs import refined_pld, refined_weights

__all__ = [
    "ExplicitSearch",
    "binned_pair_delta",
    "binned_pair_epsilon",
    "explicit_epsilon",
    "explicit_pair_masses",
    "explicit_pair_pld",
    "mix_cell_masses",
    "optimistic_pld",
    "refined_pld",
    "refined_weights",
    "split_components",
    "split_pld",
]

_BINOM_KEEP = 1e-25  # binomial terms below this are dropped (sub-probability: lowers δ, stays a lower bound)
_TAIL_SIGMAS = 14.0
_LOG_DROP = math.log(1e-30)


def log_cell_masses(edges: FloatArray, mu: FloatArray, z: float) -> FloatArray:
    """log N(μ_k, z²)[edges_i, edges_{i+1}] for each k (rows) and cell i (cols), accurate in both tails."""
    x = (edges[None, :] - mu[:, None]) / z
    lo, hi = x[:, :-1], x[:, 1:]
    right = lo > 0.0  # both in the right tail: sf(lo) − sf(hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        a_r, b_r = special.log_ndtr(-lo), special.log_ndtr(-hi)
        a_l, b_l = special.log_ndtr(hi), special.log_ndtr(lo)
        out_r = a_r + np.log1p(-np.exp(b_r - a_r))
        out_l = a_l + np.log1p(-np.exp(b_l - a_l))
    return np.asarray(np.where(right, out_r, out_l), dtype=np.float64)


def _binomial_terms(d: int, q: float) -> tuple[FloatArray, FloatArray]:
    m = np.arange(d + 1, dtype=np.float64)
    log_w = np.asarray(stats.binom.logpmf(m, d, q), dtype=np.float64)
    keep = log_w >= math.log(_BINOM_KEEP)
    return m[keep], log_w[keep]


def _explicit_log_masses(
    a: float, b: float, p: float, q: float, d: int, z: float, cells_per_sigma: int
) -> tuple[FloatArray, FloatArray]:
    """(log P, log Q) cell masses of the explicit pair (others at C(a·u + b·v), v ⊥ u) on a grid covering
    every mean ± 14 z; 1-D along u when b = 0, else a product grid in (u, v)."""
    m, log_w = _binomial_terms(d, q)

    def edges(means: FloatArray, cells: int) -> FloatArray:
        lo, hi = float(means.min()) - _TAIL_SIGMAS * z, float(means.max()) + _TAIL_SIGMAS * z
        n = max(16, math.ceil((hi - lo) / z * cells))
        return np.concatenate([[-np.inf], np.linspace(lo, hi, n + 1), [np.inf]])

    eu = edges(np.concatenate([[0.0], a * m, a * m + 1.0]), cells_per_sigma)
    u0 = log_cell_masses(eu, np.array([0.0]), z)[0]
    u_base, u_shift = log_cell_masses(eu, a * m, z), log_cell_masses(eu, a * m + 1.0, z)
    if b == 0.0:
        log_base = special.logsumexp(log_w[:, None] + u_base, axis=0)
        log_shift = special.logsumexp(log_w[:, None] + u_shift, axis=0)
        log_n0 = u0
    else:  # product grid: component k's cell mass is (u-mass)·(v-mass); summed in linear space
        ev = edges(np.concatenate([[0.0], b * m]), cells_per_sigma)
        v_m = np.exp(log_cell_masses(ev, b * m, z))
        w = np.exp(log_w)
        base = np.zeros((eu.size - 1, ev.size - 1))
        shift = np.zeros_like(base)
        for k in range(m.size):
            base += np.outer(w[k] * np.exp(u_base[k]), v_m[k])
            shift += np.outer(w[k] * np.exp(u_shift[k]), v_m[k])
        v0 = log_cell_masses(ev, np.array([0.0]), z)[0]
        with np.errstate(divide="ignore"):
            log_base, log_shift = np.log(base).ravel(), np.log(shift).ravel()
        log_n0 = (u0[:, None] + v0[None, :]).ravel()
    return mix_cell_masses(p, q, log_n0, log_base, log_shift)


def mix_cell_masses(
    p: float, q: float, log_n0: np.ndarray, log_base: np.ndarray, log_shift: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Log cell masses (with x′, without x′) of the round's output from the cell masses of the noise alone
    (``log_n0``), of a participant without x′ (``log_base``) and of one whose x′ is sampled
    (``log_shift``): participation p, x′ sampled with probability q."""
    lp = math.log(p)
    nonpart = math.log1p(-p) + log_n0 if p < 1.0 else np.full_like(log_n0, -np.inf)
    log_q_mass = np.logaddexp(nonpart, lp + log_base)
    inner = np.logaddexp(math.log1p(-q) + log_base, math.log(q) + log_shift) if q < 1.0 else log_shift
    log_p_mass = np.logaddexp(nonpart, lp + inner)
    return log_p_mass, log_q_mass


def optimistic_pld(log_p: FloatArray, log_q: FloatArray, h: float) -> pld_lib.PrivacyLossDistribution:
    """Optimistic PLD of the finite pair with log cell masses ``log_p``, ``log_q``: each loss rounded DOWN to
    the grid (:func:`~ampfl.accounting.pld_grid.round_down`); cells of mass < 1e-30 are dropped (a
    sub-probability: lowers every δ)."""
    loss = log_p - log_q

    def one(loss: FloatArray, log_mass: FloatArray) -> pld_pmf.DensePLDPmf:
        ok = np.isfinite(loss) & (log_mass > _LOG_DROP)
        return round_down(loss[ok], np.exp(log_mass[ok]), h)

    return pld_lib.PrivacyLossDistribution(one(loss, log_p), one(-loss, log_q))


def _direction_epsilon(log_p: FloatArray, log_q: FloatArray, delta: float) -> float:
    """Exact ε where δ(ε) = Σ_i (P_i − e^ε Q_i)₊ of a finite pair falls to ``delta`` (may be < 0 or ∞)."""
    pm, qm = np.exp(log_p), np.exp(log_q)
    infinite = float(pm[(qm == 0.0) & (pm > 0.0)].sum())  # loss +∞: in δ at every ε
    if infinite > delta:
        return math.inf
    both = (pm > 0.0) & (qm > 0.0)
    order = np.argsort(log_q[both] - log_p[both], kind="stable")  # losses in decreasing order
    loss = (log_p[both] - log_q[both])[order]
    above_p = np.concatenate([[0.0], np.cumsum(pm[both][order])])  # mass of the losses above loss[k]
    above_q = np.concatenate([[0.0], np.cumsum(qm[both][order])])
    # On [loss[k], loss[k − 1]] δ(ε) = infinite + above_p[k] − e^ε·above_q[k]; its value at each breakpoint:
    at_breaks = infinite + above_p[:-1] - np.exp(loss) * above_q[:-1]
    over = at_breaks > delta  # False then True (δ grows as ε falls); at_breaks[0] = infinite ≤ delta
    k = int(np.argmax(over)) if over.any() else loss.size
    rest = infinite + above_p[k] - delta
    if k == 0 or rest <= 0.0:  # no finite loss, or less than delta of mass: δ(ε) ≤ delta everywhere
        return -math.inf
    return math.log(rest / above_q[k])


def binned_pair_delta(log_p: FloatArray, log_q: FloatArray, epsilon: float) -> float:
    """δ(ε) (the larger direction) of the finite pair with log cell masses ``log_p`` and ``log_q``."""
    pm, qm, e = np.exp(log_p), np.exp(log_q), math.exp(epsilon)
    return float(max(np.maximum(pm - e * qm, 0.0).sum(), np.maximum(qm - e * pm, 0.0).sum()))


def binned_pair_epsilon(log_p: FloatArray, log_q: FloatArray, delta: float) -> float:
    """Exact ε(δ) (the larger direction, at least 0) of the finite pair with log cell masses ``log_p`` (with
    x′) and ``log_q`` (without): no loss grid, so no rounding. For the binned pair of an explicit dataset it
    is a lower bound on the mechanism's ε(δ) (binning is a post-processing) and at least the ε of any
    optimistically rounded PLD of the same cells."""
    return max(0.0, _direction_epsilon(log_p, log_q, delta), _direction_epsilon(log_q, log_p, delta))


def explicit_pair_masses(
    *,
    a: float,
    b: float = 0.0,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    cells_per_sigma: int | None = None,
) -> tuple[FloatArray, FloatArray]:
    """(log P, log Q) cell masses of the binned pair of the explicit dataset (a, b) (module docstring).

    Client 1's d other records have gradient C(a·u + b·v), v ⊥ u (a² + b² ≤ 1); b = 0 is the auditor's
    1-D family. ``cells_per_sigma`` sets the binning (default 256 on the line, 32 on the plane: keep the
    2-D grid ≤ 64).
    """
    p = check_probability("participation", participation)
    q = check_probability("sampling_rate", sampling_rate)
    d = check_int("local_dataset_size", local_dataset_size, minimum=0, maximum=1_000_000)
    z = check_positive("noise_multiplier", noise_multiplier)
    a_ = check_range("a", a, -1.0, 1.0)
    b_ = check_range("b", b, 0.0, 1.0)
    if a_ * a_ + b_ * b_ > 1.0 + 1e-9:
        raise ValueError(f"a**2 + b**2 must be at most 1 (gradient norm at most C). Found a={a_}, b={b_}.")
    default_cells = 256 if b_ == 0.0 else 32
    cells = check_int("cells_per_sigma", cells_per_sigma or default_cells, minimum=4, maximum=4096)
    return _explicit_log_masses(a_, b_, p, q, d, z, cells)


def explicit_pair_pld(
    *,
    a: float,
    b: float = 0.0,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    value_discretization_interval: float = 1e-4,
    cells_per_sigma: int | None = None,
) -> pld_lib.PrivacyLossDistribution:
    """Optimistic PLD (a lower bound, both directions) of the explicit dataset (a, b): the cells of
    :func:`explicit_pair_masses`, each loss rounded DOWN to the grid (module docstring)."""
    h = check_positive("value_discretization_interval", value_discretization_interval)
    log_p, log_q = explicit_pair_masses(
        a=a,
        b=b,
        participation=participation,
        sampling_rate=sampling_rate,
        local_dataset_size=local_dataset_size,
        noise_multiplier=noise_multiplier,
        cells_per_sigma=cells_per_sigma,
    )
    return optimistic_pld(log_p, log_q, h)


@dataclass(frozen=True, slots=True)
class ExplicitSearch:
    """Result of :func:`explicit_epsilon`: lower bounds on the mechanism's ε(δ).

    Attributes:
        epsilon: the largest ε(δ) found; ``a``, ``b``: its dataset (other records at C(a·u + b·v)).
        collinear_epsilon, collinear_a: the best of the collinear family alone (b = 0, the auditor's family).
        evaluations: number of datasets evaluated.
    """

    epsilon: float
    a: float
    b: float
    collinear_epsilon: float
    collinear_a: float
    evaluations: int


def explicit_epsilon(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    delta: float,
    iterations: int = 1,
    a_values: Sequence[float] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    angles: Sequence[float] = (15.0, 30.0, 45.0, 60.0, 75.0, 90.0),
    refine: int = 6,
    value_discretization_interval: float = 1e-4,
) -> ExplicitSearch:
    """Largest ε(δ) found over explicit datasets, T-fold composed: a LOWER bound on the mechanism's ε(δ).

    Two families: collinear, gradients a·C·u for a in ``a_values``; tilted, full norm at an angle θ (degrees,
    ``angles``) from x′, i.e. C(cos θ·u + sin θ·v). The best grid point is refined by ``refine``
    golden-section steps within its family, between its grid neighbours. One round (T = 1): each dataset's
    ε is its binned pair's exact ε (:func:`binned_pair_epsilon`, no loss grid); T > 1: the optimistic PLD on
    a loss grid of ``value_discretization_interval`` = h composed T times, which lowers ε by less than T·h.

    Returns:
        An :class:`ExplicitSearch`: the largest ε found, its dataset, and the best collinear one.
    """
    t = check_int("iterations", iterations, minimum=1)
    cache: dict[tuple[float, float], float] = {}

    def eps_of(a: float, b: float) -> float:
        key = (round(a, 12), round(b, 12))
        if key not in cache:
            kw: dict[str, Any] = {
                "a": key[0],
                "b": key[1],
                "participation": participation,
                "sampling_rate": sampling_rate,
                "local_dataset_size": local_dataset_size,
                "noise_multiplier": noise_multiplier,
            }
            if t == 1:  # the binned pair's exact ε: no loss grid
                cache[key] = binned_pair_epsilon(*explicit_pair_masses(**kw), delta)
            else:
                one = explicit_pair_pld(**kw, value_discretization_interval=value_discretization_interval)
                cache[key] = max(0.0, float(one.self_compose(t).get_epsilon_for_delta(delta)))
        return cache[key]

    def tilted(theta: float) -> tuple[float, float]:
        rad = math.radians(theta)
        return max(-1.0, min(1.0, math.cos(rad))), max(0.0, min(1.0, math.sin(rad)))

    def collinear(a: float) -> tuple[float, float]:
        return a, 0.0

    families: dict[str, tuple[list[float], Callable[[float], tuple[float, float]]]] = {
        "collinear": (sorted({float(a) for a in a_values}), collinear),
        "tilted": (sorted({float(th) for th in angles} | {0.0}), tilted),
    }
    if local_dataset_size == 0:
        families = {"collinear": ([0.0], collinear)}
    best_val, best_family, best_k = -1.0, "collinear", 0
    for name, (grid, to_ab) in families.items():
        for k, x in enumerate(grid):
            val = eps_of(*to_ab(x))
            if val > best_val:
                best_val, best_family, best_k = val, name, k
    grid, to_ab = families[best_family]
    lo, hi = grid[max(0, best_k - 1)], grid[min(len(grid) - 1, best_k + 1)]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    for _ in range(refine if hi > lo else 0):  # golden section on the bracket around the best grid point
        if eps_of(*to_ab(x1)) >= eps_of(*to_ab(x2)):
            hi, x2 = x2, x1
            x1 = hi - g * (hi - lo)
        else:
            lo, x1 = x1, x2
            x2 = lo + g * (hi - lo)
    best = max(cache, key=lambda key: cache[key])
    line = max((key for key in cache if key[1] == 0.0), key=lambda key: cache[key])
    return ExplicitSearch(cache[best], best[0], best[1], cache[line], line[0], len(cache))


def split_components(
    p: float, q: float, d: int, z1: float, logit_step: float = 0.25
) -> list[tuple[float, float]]:
    """(weight, rate) pairs of the noise-split pair (:func:`split_pld`); rates rounded UP, weights sum to 1.

    For M = |J| ≥ 1 the posterior P(B = 1 | M, V), V = M·B + N(0, z1²), rises with V; its logit is cut on a
    grid of step ``logit_step`` and each cell gets the posterior at its upper end (r = q × that posterior).
    """
    m, log_w = _binomial_terms(d, q)
    w = np.exp(log_w)
    comps: dict[int, float] = {}  # logit level index -> weight (posterior rounded up to that level)
    top = max(0.0, 1.0 - float(w.sum()))  # weight at posterior 1 (r = q); dropped binomial mass goes here
    prior = math.log(p / (1.0 - p)) if p < 1.0 else math.inf
    out: list[tuple[float, float]] = []
    for mk, wk in zip(m, w, strict=True):
        if mk == 0.0 or p == 1.0:
            out.append((float(wk), p * q))
            continue
        # logit(post) = prior + (M V − M²/2)/z1²; V-threshold of logit level ℓ:
        spread = 12.0 * mk / z1 + mk * mk / (2.0 * z1 * z1)
        levels = np.arange(
            math.floor((prior - spread) / logit_step), math.ceil((prior + spread) / logit_step) + 1
        )
        v = (z1 * z1 * (levels * logit_step - prior) + mk * mk / 2.0) / mk
        cdf = (1.0 - p) * stats.norm.cdf(v, 0.0, z1) + p * stats.norm.cdf(v, mk, z1)
        masses = np.diff(np.concatenate([[0.0], cdf, [1.0]]))  # cell k: (ℓ_{k−1}, ℓ_k]; last: above all
        for k, mass in enumerate(masses[:-1]):
            if mass > 0.0:
                comps[int(levels[k])] = comps.get(int(levels[k]), 0.0) + float(wk * mass)
        top += float(wk * max(0.0, masses[-1]))
    for key, weight in comps.items():
        out.append((weight, q * float(special.expit(key * logit_step))))
    if top > 0.0:
        out.append((top, q))
    return out


def split_pld(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    split: float = 0.5,
    value_discretization_interval: float = 1e-4,
    logit_step: float = 0.25,
    max_components: int = 24,
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of one round under the noise-split bound (sound; docs/accounting.md).

    The noise N(0, z²) is split as N₁ + N₂, z₁ = ``split``·z, z₂ = √(z² − z₁²); publishing Y = B·S + N₁ (B
    participation, S the sampled other records' sum) leaves, given Y, an r(Y)-subsampled Gaussian with noise
    z₂, r(Y) = q·P(B = 1 | Y). Y is a garbling of (M, M·B + N(0, z₁²)) (M = |J|, ‖S‖ ≤ M·C), and δ is convex
    in r, so that 1-D experiment gives an upper bound; rates are rounded up (a post-processing order).
    The lightest components are merged upwards (into the next larger rate, sound) until at most
    ``max_components`` remain.
    """
    p = check_probability("participation", participation)
    q = check_probability("sampling_rate", sampling_rate)
    d = check_int("local_dataset_size", local_dataset_size, minimum=0)
    z = check_positive("noise_multiplier", noise_multiplier)
    frac = check_range("split", split, 1e-3, 1.0 - 1e-3)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    z1, z2 = frac * z, z * math.sqrt(1.0 - frac * frac)
    comps = [(w, rate, z2) for w, rate in split_components(p, q, d, z1, logit_step)]
    merged = [(w, rate) for w, rate, _ in merge_upwards(comps, max_components)]
    total = sum(w for w, _ in merged)
    parts = [
        (
            weight / total,
            pld_lib.from_gaussian_mechanism(
                standard_deviation=z2,
                sensitivity=1.0,
                sampling_prob=min(1.0, rate),
                pessimistic_estimate=True,
                value_discretization_interval=h,
            ),
        )
        for weight, rate in merged
    ]
    return mixture(parts)
