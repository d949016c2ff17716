"""Pessimistic PLD of Poisson-subsampled model splitting (d ≤ 2) and dropout (paper 002, Table 1 setting).

The mechanism (002 Alg. 1 with Poisson sampling at rate q; dropout at rate 1/2 is d = 2, 002 Thm 3.7): each
unit joins the step with probability q; a joining unit adds its clipped split-part update (norm ≤ C_s) to one
of d secret disjoint blocks and its non-split update (norm ≤ C_ns, 002 §3.2.2) to the shared coordinates;
N(0, z²C_s²) and N(0, z_ns²C_ns²) noise is added. In units of the noise (a = 1/z, b = 1/z_ns), removing a unit
changes the output from Q = N(0, I) to

    P = (1 − q)·Q + q·P₁,   P₁ = (1/d) Σ_j N(a·v_j + b·e, I)                                           (1)

whatever the other units do (joint convexity of the hockey-stick divergence, translation invariance; smaller
norms are dominated by the coordinate-wise contraction of :mod:`ampfl.accounting.partition.pld`). The pair
(P, Q) dominates the remove direction and (Q, P) the add direction.

**Reduction to two dimensions** (d = 2). After u = (x₁ + x₂)/√2, w = (x₁ − x₂)/√2 the two components of P₁
have means (a/√2, ±a/√2, b) in (u, w, x_ns); the (u, x_ns) plane carries the same mean in both, so one axis s
along it with shift c = √(a²/2 + b²) suffices (the orthogonal axis is N(0, 1) under every distribution and
drops out). With a' = a/√2, Q = N(0, I₂) and P₁ = N(c, 1) ⊗ ½[N(a', 1) + N(−a', 1)]:

    L(s, w) = ln dP/dQ = ln[(1 − q) + q·exp(L₁(s, w))],   L₁ = c·s − c²/2 + ln cosh(a'w) − a'²/2,     (2)

increasing in s and in |w|. L₁ is the privacy loss of the unsubsampled pair (P₁, Q) — the exact product PLD of
:func:`ampfl.accounting.partition.pld.model_split_pld` (a Gaussian composed with the symmetric mixture). d = 1
is the Poisson-subsampled Gaussian at sensitivity c = √(a² + b²) (dp-accounting's own, bit for bit).

**Subsampling a pessimistic PLD** (:func:`poisson_subsample_pld`, for any pair (P₁, Q)). A pessimistic PMF of
L₁ under P₁ (losses rounded up, mass p_i at ℓ_i, infinity mass p_∞) is the PLD of a discrete pair (P̃₁, Q̃)
with Q̃(i) = p_i e^{−ℓ_i}, the rest of Q̃ on a point ⊥ where P̃₁ = 0, p_∞ on a point where Q̃ = 0; it dominates
(P₁, Q): H_α(P₁‖Q) = E_{P₁}(1 − αe^{−L₁})₊ ≤ H_α(P̃₁‖Q̃) for every α ≥ 0. Since

    H_α((1 − q)Q + qP₁ ‖ Q) = q·H_{α'}(P₁ ‖ Q),   α' = 1 + (α − 1)/q      (α ≥ 1 − q; else 1 − α),      (3)
    H_α(Q ‖ (1 − q)Q + qP₁) = (1 − α(1 − q))₊·H_{α''}(Q ‖ P₁),   α'' = αq / (1 − α(1 − q)),            (4)

both monotone in the unsubsampled divergences, subsampling the discrete dominating pair dominates the
subsampled pair in both directions (and for every α, as composition needs). Its losses are

    remove: f(ℓ_i) = ln(1 − q + q e^{ℓ_i}), mass q·p_i + (1 − q)·p_i e^{−ℓ_i}; ln(1 − q) at ⊥; ∞ at q·p_∞;
    add:    g(ℓ̂_j) = −ln(1 − q + q e^{−ℓ̂_j}), mass p̂_j (the add PMF: L̂ = ln dQ/dP₁ under Q);
            −ln(1 − q) for the add infinity mass,                                                     (5)

each rounded up to the output grid. f and g are increasing with slopes in (0, 1).

**Error** (per step, the reported δ(ε) is ≥ the exact one at every ε): the losses of the discrete pair are
≥ the exact ones and at most e_in above them, e_in ≤ 2·h_in the inner PLD's rounding (grid
h_in = h / :data:`INNER_REFINEMENT`, by default h; two roundings: Gaussian and mixture) shrunk by the slope of
f or g (≈ q·e^{L₁} for small q); the output PMF (Connect-the-Dots on grid h) lies between that pair and the
pair with every loss rounded up to the grid, so T composed steps report ε(δ) ≤ ε_exact(δ) + T·(e_in + h).
Tail masses (≤ 1e-22 per piece) go to the infinity mass. The inner composition is dp-accounting's FFT
convolution (its round-off, ≈ 1e-17 per point, is the one uncertified part, as in every dp-accounting
composition).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from ampfl.accounting._checks import check_int, check_positive, check_probability
from ampfl.accounting.events import DropoutEvent, ModelSplitEvent, PoissonSampledEvent
from ampfl.accounting.partition.pld import PLD_MAX_SUBMODELS, gaussian_pld, symmetric_mixture_pld
from ampfl.accounting.pld_grid import grid_index

__all__ = [
    "INNER_REFINEMENT",
    "poisson_subsample_pld",
    "subsampled_event_pld",
    "subsampled_split_pld",
]

#: The unsubsampled PLD is built on a grid this many times finer than the output grid.
INNER_REFINEMENT = 1


def _dense(pmf: pld_pmf.PLDPmf) -> tuple[np.ndarray, np.ndarray, float]:
    """(losses, masses, infinity mass) of a pessimistic PMF; mass missing from the total goes to infinity."""
    dense = pmf.to_dense_pmf()
    if not dense._pessimistic_estimate:
        raise ValueError("pld must be a pessimistic estimate (losses rounded up).")
    probs = np.maximum(np.asarray(dense._probs, dtype=np.float64), 0.0)
    losses = (dense._lower_loss + np.arange(probs.size, dtype=np.float64)) * dense._discretization
    infinity = float(dense._infinity_mass)
    infinity += max(0.0, 1.0 - float(probs.sum()) - infinity)  # dropped tails: to +∞, pessimistic
    return losses, probs, min(infinity, 1.0)


def _to_grid(losses: np.ndarray, masses: np.ndarray, infinity: float, h: float) -> pld_pmf.PLDPmf:
    """Pessimistic Connect-the-Dots PMF on the grid k·h of the discrete pair with these (loss, mass) points.

    δ(ε_k) = Σ_i m_i (1 − e^{ε_k − f_i})₊ + m_∞ is computed exactly at every grid point ε_k = k·h: with A_j,
    C_j the sums of m_i and m_i·(1 − e^{ε_{j−1} − f_i}) over the points of cell (ε_{j−1}, ε_j],
    δ(ε_k) − m_∞ = U_k + V_k, U_{k−1} = (1 − e^{−h})·Σ_{j>k} A_j + e^{−h}·U_k, V_{k−1} = C_k + e^{−h}·V_k:
    sums of non-negative terms (no cancellation). dp-accounting's Connect-the-Dots (Doroshenko et al. 2022)
    turns them into a PMF whose δ(ε) is ≥ the pair's at every ε (δ is convex in e^ε between grid points).
    """
    from scipy import signal

    keep = masses > 0.0
    losses, masses = losses[keep], masses[keep]
    if losses.size == 0:
        return pld_pmf.DensePLDPmf(h, 0, np.zeros(1), infinity, True)
    k_min = math.floor(float(losses.min()) / h)
    cell = np.maximum(grid_index(losses, h, up=True), k_min)  # f_i ∈ (ε_{j−1}, ε_j]
    k_max = int(cell.max())
    size = k_max - k_min + 1
    a = np.bincount(cell - k_min, weights=masses, minlength=size)
    c = np.bincount(cell - k_min, weights=masses * -np.expm1((cell - 1) * h - losses), minlength=size)
    decay = math.exp(-h)
    # reversed order: index n is k = k_max − n; its input is cell k_max − n + 1 (none at n = 0)
    a_in = np.concatenate(([0.0], a[::-1][:-1]))
    c_in = np.concatenate(([0.0], c[::-1][:-1]))
    tail_a = np.cumsum(a_in)  # Σ_{j>k} A_j
    u = signal.lfilter([-math.expm1(-h)], [1.0, -decay], np.concatenate(([0.0], tail_a[:-1])))
    v = signal.lfilter([1.0], [1.0, -decay], c_in)
    deltas = np.maximum.accumulate(np.clip(u + v + infinity, 0.0, 1.0))[::-1]  # non-increasing in k
    return pld_pmf.create_pmf_pessimistic_connect_dots(h, np.arange(k_min, k_max + 1), deltas)


def poisson_subsample_pld(
    pld: pld_lib.PrivacyLossDistribution, sampling_rate: float, value_discretization_interval: float
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of ((1 − q)Q + qP₁, Q) (remove) and (Q, (1 − q)Q + qP₁) (add), Eqs. (3)–(5).

    Args:
        pld: a pessimistic PLD of the pair (P₁, Q) — remove PMF: ln dP₁/dQ under P₁ (unit present vs absent);
            add PMF: ln dQ/dP₁ under Q — on any grid (a finer one than the output keeps the error small).
        sampling_rate: q in (0, 1].
        value_discretization_interval: h of the output grid.
    """
    q = check_probability("sampling_rate", sampling_rate)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    log_q, log_1mq = math.log(q), (math.log1p(-q) if q < 1.0 else -math.inf)
    losses, probs, inf_remove = _dense(pld._pmf_remove)
    with np.errstate(divide="ignore", over="ignore"):
        q_mass = np.exp(np.log(probs) - losses)  # Q̃(i) = p_i e^{−ℓ_i}
        remove_loss = np.logaddexp(log_1mq, log_q + losses)
    remove_mass = q * probs + (1.0 - q) * q_mass
    bottom = (1.0 - q) * max(0.0, 1.0 - float(q_mass.sum()))  # Q̃(⊥), where P̃₁ = 0
    if bottom > 0.0:
        remove_loss = np.append(remove_loss, log_1mq)
        remove_mass = np.append(remove_mass, bottom)
    remove = _to_grid(remove_loss, remove_mass, q * inf_remove, h)

    add_losses, add_probs, inf_add = _dense(pld._pmf_add)
    add_loss = -np.logaddexp(log_1mq, log_q - add_losses)
    add_inf = 0.0
    if q < 1.0:
        add_loss, add_probs = np.append(add_loss, -log_1mq), np.append(add_probs, inf_add)
    else:
        add_inf = inf_add
    return pld_lib.PrivacyLossDistribution(remove, _to_grid(add_loss, add_probs, add_inf, h))


def _split_shifts(d: int, z: float, z_ns: float | None) -> tuple[float, float]:
    """(c, a'): the shift on the shared axis s and on the block-difference axis w (Eq. 2), in noise units."""
    a = 0.0 if math.isinf(z) else 1.0 / z
    b = 0.0 if z_ns is None or math.isinf(z_ns) else 1.0 / z_ns
    if d == 1:
        return math.sqrt(a * a + b * b), 0.0
    return math.sqrt(a * a / 2.0 + b * b), a / math.sqrt(2.0)


def _unsubsampled(c: float, a_w: float, h: float) -> pld_lib.PrivacyLossDistribution:
    """PLD of (P₁, Q) = N(c, 1) ⊗ ½[N(a', 1) + N(−a', 1)] vs N(0, I₂), pessimistic on the grid h."""
    if c == 0.0:
        return pld_lib.identity(h)
    out = gaussian_pld(c, 1.0, h)
    if a_w > 0.0:
        mix = symmetric_mixture_pld(shift=a_w, noise_multiplier=1.0, value_discretization_interval=h)
        out = out.compose(mix)
    return out


def subsampled_split_pld(
    *,
    num_submodels: int,
    noise_multiplier: float,
    sampling_rate: float,
    nonsplit_noise_multiplier: float | None = None,
    value_discretization_interval: float = 1e-4,
    inner_refinement: int = INNER_REFINEMENT,
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of one Poisson-subsampled step of model splitting into d ≤ 2 sub-models (Eq. 1).

    Args:
        num_submodels: d ∈ {1, 2} (d = 2 is also dropout at rate 1/2, 002 Thm 3.7).
        noise_multiplier: z = σ_s / C_s of the split part (``math.inf``: the part leaks nothing).
        sampling_rate: q in [0, 1] (Poisson, per unit).
        nonsplit_noise_multiplier: z_ns = σ_ns / C_ns of a non-split part (002 §3.2.2), or None.
        value_discretization_interval: h of the loss grid.
        inner_refinement: the unsubsampled PLD's grid is h / inner_refinement (error: module docstring).

    Raises:
        ValueError: d outside [1, 2] (use the RDP accountant for more sub-models).
    """
    from ampfl.accounting.pld_grid import dp_accounting_guard

    d = check_int("num_submodels", num_submodels, minimum=1, maximum=PLD_MAX_SUBMODELS)
    z = _noise("noise_multiplier", noise_multiplier)
    z_ns = nonsplit_noise_multiplier
    if z_ns is not None:
        z_ns = _noise("nonsplit_noise_multiplier", z_ns)
    q = check_probability("sampling_rate", sampling_rate, allow_zero=True)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    k = check_int("inner_refinement", inner_refinement, minimum=1)
    c, a_w = _split_shifts(d, z, z_ns)
    if q == 0.0 or c == 0.0:
        return pld_lib.identity(h)
    with dp_accounting_guard("subsampled model-split PLD"):
        if a_w == 0.0:  # d = 1 (or no split part): the Poisson-subsampled Gaussian at sensitivity c
            from ampfl.accounting.pld_grid import check_pld_size

            check_pld_size(1.0 / c, h)
            return pld_lib.from_gaussian_mechanism(
                standard_deviation=1.0,
                sensitivity=c,
                sampling_prob=q,
                pessimistic_estimate=True,
                value_discretization_interval=h,
            )
        if q == 1.0:
            return _unsubsampled(c, a_w, h)
        return poisson_subsample_pld(_unsubsampled(c, a_w, h / k), q, h)


def _noise(name: str, value: float) -> float:
    """A noise multiplier in (0, ∞]: ∞ (the part leaks nothing) or a checked positive number."""
    if isinstance(value, float) and value == math.inf:
        return value
    return check_positive(name, value)


def subsampled_event_pld(
    event: PoissonSampledEvent,
    h: float,
    inner: Callable[[ModelSplitEvent | DropoutEvent, float], pld_lib.PrivacyLossDistribution] | None = None,
) -> pld_lib.PrivacyLossDistribution:
    """PLD of ``PoissonSampledEvent(q, ModelSplitEvent | DropoutEvent)`` (the PLD accountant's entry point).

    d ≤ 2 goes through :func:`subsampled_split_pld`; for d > 2, ``inner`` (the accountant's unsubsampled
    partition PLD, which raises where none exists) gives the PLD of (P₁, Q), subsampled by
    :func:`poisson_subsample_pld`.
    """
    base = event.event
    if not isinstance(base, ModelSplitEvent | DropoutEvent):
        raise TypeError("subsampled_event_pld takes a PoissonSampledEvent of a model split or dropout.")
    d = base.num_submodels if isinstance(base, ModelSplitEvent) else 2
    q = event.sampling_rate
    if q == 0.0:
        return pld_lib.identity(h)
    if d <= PLD_MAX_SUBMODELS or inner is None:
        return subsampled_split_pld(
            num_submodels=d,
            noise_multiplier=base.noise_multiplier,
            sampling_rate=q,
            nonsplit_noise_multiplier=base.nonsplit_noise_multiplier,
            value_discretization_interval=h,
        )
    if q == 1.0:
        return inner(base, h)
    return poisson_subsample_pld(inner(base, h / INNER_REFINEMENT), q, h)
