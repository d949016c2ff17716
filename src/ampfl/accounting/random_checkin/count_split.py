"""Random check-in (004), hidden participation: the **per-count noise split** pair (sound).

Notation of :mod:`ampfl.accounting.random_checkin.pld_pairs`: X = B·(S + b′·x′) + N(0, z² I), M ~ Bin(d, q)
sampled other records of x′'s client, ‖S‖ ≤ M.

**The pair.** Publish M each round (its law does not involve b′: the same with and without x′). Given
M = m, any pair that dominates the conditional mechanism may be used, and the public mixture
Σ_m Bin(m; d, q)·E_m dominates the round in both directions; M being fresh each round, its T-fold
composition dominates T adaptive rounds. Per m, with a split s_m ∈ [0, 1):

* m = 0: S = 0, X = B·b′·x′ + N: exactly the pq-subsampled Gaussian with std z (E_0, no split needed);
* s_m = 0 (**reveal B**): given B = 1 the q-subsampled Gaussian, given B = 0 nothing: p·PLD_q(z) +
  (1 − p)·identity (the conditional of 004 Thm 5.2's pair; with s_m = 0 for every m ≥ 1 the whole pair is
  the empty-sample refinement, :func:`~ampfl.accounting.random_checkin.pld_pairs.refined_pld`);
* s_m > 0 (**noise split**): write N = N₁ + N₂, z₁ = s_m·z, z₂ = z·√(1 − s_m²), and publish
  Y = B·S + N₁. Given Y, X = Y + B·b′·x′ + N₂ is an r(Y)-subsampled Gaussian with std z₂,
  r(Y) = q·P(B = 1 | Y). Y is a garbling of V = m·B + N(0, z₁²) (scale V by ‖S‖/m along S/‖S‖, add
  N(0, z₁²(1 − ‖S‖²/m²)) there and N(0, z₁²) orthogonally; S's subset is independent of B), and the
  hockey-stick divergence of the r-subsampled Gaussian is convex in r in both directions (the integrand is
  affine in r inside (·)₊), so by Blackwell–Jensen the V-experiment's pair dominates: the mixture over
  V of r(V)-subsampled Gaussians with std z₂. r(V) is rounded UP onto a logit grid of step ``logit_step``
  (the r-pair is a garbling of the r′-pair for r′ ≥ r), a V-cell at a time (exact Gaussian masses).

Any local_dataset_size d at least the true count is sound (missing records = gradient 0). s_m is chosen per m
(:func:`count_splits`) to minimise the one-round δ at a reference ε (δ of a public mixture is the mixture of
δs, so per m is optimal for one round at that ε); any choice is sound. Components of one std are merged
upwards (into the next larger rate, sound) to at most ``max_components``.

**The PLD** (:func:`mixture_pld`): each r-subsampled Gaussian's privacy-loss PMF is built directly, both
directions (remove: (1 − r)N(0) + rN(1) vs N(0); add: the reverse), loss of each x-cell rounded UP to the
grid (exact Gaussian CDF masses on the cells between the loss-grid thresholds), the right tail beyond
1e-16 mass and any rounding deficit put at +∞: pessimistic, like dp-accounting's own construction
(tests compare them). The mixture is the weighted sum of the PMFs (public selector).

Provenance: [C] (our derivation; docs/pld_random_checkin.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from numpy.typing import NDArray
from scipy import special, stats

from ampfl.accounting.pld_grid import mixture, tail_cut

__all__ = [
    "SPLITS",
    "conditional_components",
    "count_split_pld",
    "count_splits",
    "directional_deltas",
    "merge_upwards",
    "mixture_delta",
    "mixture_pld",
]

FloatArray = NDArray[np.float64]
Component = tuple[float, float, float]  # (weight, rate, std)

#: Splits s = z₁/z tried per sampled count m (0 = reveal participation).
SPLITS: tuple[float, ...] = (0.0, 0.3, 0.45, 0.6, 0.7, 0.8)
_SLACK = 1e-15  # added at +∞: covers floating-point error in the cell masses (pessimistic)
_TAIL = 1e-16  # right-tail mass beyond the grid goes to +∞ (pessimistic)
_LOGIT_SPAN = 30.0  # posterior logits beyond prior ± this share a level (the lowest cell collects all below)
_BINOM_KEEP = 1e-18  # counts m with smaller probability: "reveal B" (any choice is sound)


def _masses(edges: FloatArray, mean: float, std: float) -> FloatArray:
    """N(mean, std²) mass of each cell [edges_i, edges_{i+1}] (edges increasing, ±∞ allowed), both tails
    accurate (upper-tail differences right of the mean)."""
    t = (edges - mean) / std
    cdf, sf = special.ndtr(t), special.ndtr(-t)
    right = sf[:-1] - sf[1:]
    left = cdf[1:] - cdf[:-1]
    return np.asarray(np.maximum(np.where(t[:-1] > 0.0, right, left), 0.0), dtype=np.float64)


def _two_point(mass_p: FloatArray, mass_q: FloatArray, k_lo: int, h: float) -> FloatArray:
    """Probabilities on the levels k_lo.. of cells with losses in ((k − 1)h, kh] (cell i ↔ level k_lo + i).

    Interior cell (P-mass a + b, Q-mass m_Q): a at (k − 1)h and b at kh with a·e^{−(k−1)h} + b·e^{−kh} = m_Q.
    The cell merged into one outcome is a garbling of this two-point pair, and ℓ ↦ (1 − e^{ε−ℓ})₊ is convex
    in e^{−ℓ}, so the two points dominate the cell's content at every ε (the connect-the-dots argument).
    a is shrunk by 1e-9 of the mass (floating point; less a = more mass rounded up = pessimistic); the end
    cells (unbounded x) and cells whose masses violate the constraint are rounded up whole."""
    n = mass_p.size
    out = np.zeros(n)
    k = k_lo + np.arange(n, dtype=np.float64)
    lower, upper = np.exp(-(k - 1.0) * h), np.exp(-k * h)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = (mass_q - mass_p * upper) / (lower - upper)
    a = a - 1e-9 * mass_p
    ok = np.isfinite(a) & (a >= 0.0) & (a <= mass_p)
    ok[0] = ok[-1] = False
    a = np.where(ok, a, 0.0)
    out += mass_p - a  # b at level k (and whole cells rounded up)
    out[:-1] += a[1:]  # a of cell i + 1 at level k_lo + i
    return out


def _loss_pmf(rate: float, std: float, h: float, add: bool) -> tuple[int, FloatArray, float]:
    """(lowest index, probabilities on k·h, mass at +∞) of one direction of the r-subsampled Gaussian,
    losses rounded up (pessimistic). remove: X ~ (1 − r)N(0) + rN(1), L = log(1 − r + r e^{(X − ½)/σ²});
    add: X ~ N(0), L = −log(1 − r + r e^{(X − ½)/σ²})."""
    s2 = std * std
    span = 10.0 * std  # the unbounded loss sides: beyond ±10σ < 1e-23 of mass (rounded up or sent to +∞)
    x_lo, x_hi = -span, 1.0 + span

    def loss(x: FloatArray) -> FloatArray:
        g = (x - 0.5) / s2
        val = np.logaddexp(math.log1p(-rate) if rate < 1.0 else -np.inf, math.log(rate) + g)
        return np.asarray(-val if add else val, dtype=np.float64)

    ends = loss(np.array([x_lo, x_hi]))
    # one level beyond each end, so that each end cell lies beyond ±10σ (negligible mass, rounded up whole)
    k_lo = math.floor(min(ends) / h) - 1
    k_hi = math.ceil(max(ends) / h) + 1
    if rate < 1.0:  # the bounded side (remove: L > log(1 − r); add: L < −log(1 − r)): one unreachable
        bound = math.log1p(-rate)  # level beyond the bound, so that the end cell is a whole grid cell
        if add:
            k_hi = math.ceil(-bound / h) + 1
        else:
            k_lo = math.floor(bound / h)
    ks = np.arange(k_lo, k_hi + 1, dtype=np.float64)
    # x-threshold of each loss level k·h: L(x) = k h  <=>  r e^{g} = e^{±kh} − (1 − r)
    target = -ks * h if add else ks * h
    with np.errstate(divide="ignore", invalid="ignore"):
        inner = np.where(
            rate < 1.0, np.exp(target) - (1.0 - rate), np.exp(target)
        )  # > 0 where the level is reachable
        xs = np.where(inner > 0.0, s2 * (np.log(np.maximum(inner, 1e-300)) - math.log(rate)) + 0.5, -np.inf)
    if add:  # L decreasing in x: level k collects x in [x_k, x_{k−1})
        edges = np.concatenate([[-np.inf], xs[::-1][1:], [np.inf]])  # increasing
        m0 = _masses(edges, 0.0, std)[::-1]  # reversed: cell i ↔ level k_lo + i
        m1 = _masses(edges, 1.0, std)[::-1]
        mass_p, mass_q = m0, (1.0 - rate) * m0 + rate * m1
    else:  # L increasing: level k collects x in (x_{k−1}, x_k]
        edges = np.concatenate([[-np.inf], xs[:-1], [np.inf]])
        m0 = _masses(edges, 0.0, std)
        m1 = _masses(edges, 1.0, std)
        mass_p, mass_q = (1.0 - rate) * m0 + rate * m1, m0
    probs = _two_point(mass_p, mass_q, k_lo, h)
    # cut the right tail (highest losses) at _TAIL into +∞, and any deficit of the sum too
    _, keep = tail_cut(probs, None, _TAIL)
    inf_mass = float(max(0.0, 1.0 - probs[:keep].sum())) + _SLACK
    return k_lo, probs[:keep], inf_mass


def mixture_pld(components: Sequence[Component], h: float) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of the public mixture Σ w·(r-subsampled Gaussian with std σ), both directions.

    Components with rate 0 are the identity (loss 0). Mixed by :func:`~ampfl.accounting.pld_grid.mixture`,
    the mass missing from 1 sent to +∞."""
    total = sum(w for w, _, _ in components)
    parts: list[tuple[float, pld_lib.PrivacyLossDistribution]] = []
    for w, rate, std in components:
        if w <= 0.0:
            continue
        if rate <= 0.0 or math.isinf(std):
            identity = pld_pmf.DensePLDPmf(h, 0, np.ones(1), 0.0, True)
            parts.append((w / total, pld_lib.PrivacyLossDistribution(identity, identity)))
            continue
        remove, add = (
            pld_pmf.DensePLDPmf(h, *_loss_pmf(min(1.0, rate), std, h, a), True) for a in (False, True)
        )
        parts.append((w / total, pld_lib.PrivacyLossDistribution(remove, add)))
    return mixture(parts, complete=True)


def conditional_components(
    p: float, q: float, m: int, z: float, split: float, logit_step: float = 0.25
) -> list[Component]:
    """(weight, rate, std) of E_m (module docstring), weights summing to 1."""
    if m == 0:
        return [(1.0, p * q, z)]
    if split <= 0.0 or p >= 1.0:
        return [(p, q, z), (1.0 - p, 0.0, z)]
    z1, z2 = split * z, z * math.sqrt(1.0 - split * split)
    prior = math.log(p / (1.0 - p))
    spread = min(12.0 * m / z1 + m * m / (2.0 * z1 * z1), _LOGIT_SPAN)  # beyond: r ≈ 0 or ≈ q (rounded up)
    levels = np.arange(
        math.floor((prior - spread) / logit_step), math.ceil((prior + spread) / logit_step) + 1
    )
    # logit P(B = 1 | V) = prior + (m V − m²/2)/z₁² rises with V; V-threshold of level ℓ:
    v = (z1 * z1 * (levels * logit_step - prior) + m * m / 2.0) / m
    edges = np.concatenate([[-np.inf], v, [np.inf]])
    masses = (1.0 - p) * _masses(edges, 0.0, z1) + p * _masses(edges, float(m), z1)
    out = [
        (float(w), q * float(special.expit(lv * logit_step)), z2)
        for w, lv in zip(masses[:-1], levels, strict=True)
        if w > 0.0
    ]
    out.append((float(masses[-1]) + max(0.0, 1.0 - float(masses.sum())), q, z2))  # above all levels: r = q
    return out


def hockey_sticks(rate: FloatArray, std: FloatArray, eps: float) -> tuple[FloatArray, FloatArray]:
    """(remove, add) hockey-stick δ(ε) of r-subsampled Gaussians (closed forms; rate 0 gives 0)."""
    e = math.exp(eps)
    r = np.clip(rate, 1e-300, 1.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # r → 0: x = +∞, δ terms 0
        x = std * std * np.log((e - (1.0 - r)) / r) + 0.5
        rem = (
            (1.0 - r) * special.ndtr(-x / std)
            + r * special.ndtr((1.0 - x) / std)
            - e * special.ndtr(-x / std)
        )
        inner = (1.0 / e - (1.0 - r)) / r
        x2 = std * std * np.log(np.where(inner > 0.0, inner, 1.0)) + 0.5
        add = special.ndtr(x2 / std) - e * (
            (1.0 - r) * special.ndtr(x2 / std) + r * special.ndtr((x2 - 1.0) / std)
        )
        add = np.where(inner > 0.0, add, 0.0)
    ok = rate > 0.0
    return np.where(ok, np.maximum(rem, 0.0), 0.0), np.where(ok, np.maximum(add, 0.0), 0.0)


def directional_deltas(components: Sequence[Component], eps: float) -> FloatArray:
    """One-round (remove, add) δ(ε) of the public mixture, without discretisation."""
    w = np.array([c[0] for c in components])
    rem, add = hockey_sticks(np.array([c[1] for c in components]), np.array([c[2] for c in components]), eps)
    return np.array([np.dot(w, rem), np.dot(w, add)])


def mixture_delta(components: Sequence[Component], eps: float) -> float:
    """One-round δ(ε) of the public mixture (max of the two directions), without discretisation."""
    return float(directional_deltas(components, eps).max())


def count_splits(p: float, q: float, d: int, z: float, reference_epsilon: float) -> dict[int, float]:
    """s_m for each count m ≥ 1 with Bin(m; d, q) ≥ 1e-18: the split of :data:`SPLITS` with the smallest
    conditional δ at ``reference_epsilon`` (sum of both directions); other counts reveal B (s = 0)."""
    out: dict[int, float] = {}
    ms = np.arange(1, d + 1)
    w = stats.binom.pmf(ms, d, q)
    for m in ms[w >= _BINOM_KEEP]:
        scores = []
        for s in SPLITS:
            c = conditional_components(p, q, int(m), z, s)
            rem, add = hockey_sticks(
                np.array([x[1] for x in c]), np.array([x[2] for x in c]), reference_epsilon
            )
            wc = np.array([x[0] for x in c])
            scores.append(float(np.dot(wc, rem) + np.dot(wc, add)))
        out[int(m)] = SPLITS[int(np.argmin(scores))]
    return out


def merge_upwards(comps: list[Component], limit: int) -> list[Component]:
    """Per std, merge components into the next larger rate (sound: a rate rounded up is a garbling order),
    cheapest first (weight × rate increase; δ is about linear in r), to at most ``limit`` per std."""
    out: list[Component] = []
    for std in sorted({c[2] for c in comps}):
        items = sorted((c for c in comps if c[2] == std), key=lambda c: c[1])
        merged: list[list[float]] = []
        for w, r, _ in items:
            if merged and merged[-1][1] == r:
                merged[-1][0] += w
            else:
                merged.append([w, r])
        while len(merged) > max(1, limit):
            k = min(range(len(merged) - 1), key=lambda i: merged[i][0] * (merged[i + 1][1] - merged[i][1]))
            weight = merged.pop(k)[0]
            merged[k][0] += weight
        out += [(w, r, std) for w, r in merged]
    return out


def count_split_components(
    p: float, q: float, d: int, z: float, splits: Mapping[int, float], max_components: int = 32
) -> list[Component]:
    """The pair's (weight, rate, std) components (module docstring), merged upwards per std.

    The selector keeps the revealing counts (s_m = 0) with B = 0 together with M = 0: given that group,
    S = 0 and x′ is included with probability r₀ = p·Bin(0; d, q)·q / (its weight), an r₀-subsampled Gaussian
    with std z (with s_m = 0 for every m this is exactly the empty-sample refinement)."""
    ms = np.arange(d + 1)
    w = stats.binom.pmf(ms, d, q)
    w0 = float(w[0])
    idle = 0.0  # P(M ≥ 1 revealing, B = 0)
    comps: list[Component] = []
    for m, wm in zip(ms[1:], w[1:], strict=True):
        s = splits.get(int(m), 0.0)
        if wm <= 0.0:
            continue
        if s <= 0.0 or p >= 1.0:
            comps.append((float(wm) * p, q, z))
            idle += float(wm) * (1.0 - p)
            continue
        for cw, r, std in conditional_components(p, q, int(m), z, s):
            comps.append((float(wm) * cw, r, std))
    group = w0 + idle
    if group > 0.0:
        comps.append((group, min(q, p * w0 * q / group), z))
    return merge_upwards(comps, max_components)


def count_split_pld(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    reference_epsilon: float,
    value_discretization_interval: float = 1e-4,
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of one round under the per-count noise split (sound; module docstring)."""
    p, q, d, z = participation, sampling_rate, local_dataset_size, noise_multiplier
    splits = count_splits(p, q, d, z, reference_epsilon)
    return mixture_pld(count_split_components(p, q, d, z, splits), value_discretization_interval)
