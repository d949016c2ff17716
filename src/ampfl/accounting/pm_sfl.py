"""PM-SFL privacy formulas (paper 003: Wang, Wu, Miao, Li, Hu, Cao, Gao, Su, "Towards Privacy-Preserving and
Heterogeneity-aware Split Federated Learning via Probabilistic Masking", arXiv:2509.14603).

Implemented as printed (labelled "as printed") and checked (``docs/pm_sfl.md``):

* Theorem 2 (smashed data): Laplace noise Lap(Δf/ε) plus a Bernoulli mask with keep-probabilities in
  [c, 1 − c] is claimed (ε_amp, 0)-DP with ε_amp = ln((1 − c^d) e^ε + c^d) (Eq. 33/56). An explicit
  two-coordinate dataset (:func:`smashed_exact_epsilon`) shows the claim fails when Δf is the unmasked
  sensitivity of Eq. (32): a fixed mask can have a larger sensitivity than the unmasked function.
* Theorem 3 (mask aggregation): the noise conditions for noise on each local update and on the mask
  probabilities, with exact replacements (analytic Gaussian, correct L2 sensitivity).
* The Bernoulli-sampling expression after Theorem 3. Its two printed terms are identical
  ("(1−c)^α c^{1−α} + (1−c)^α c^{1−α}"); we implement the evident intended, symmetric form
  c^α (1 − c)^{1−α} + (1 − c)^α c^{1−α}, i.e. d_b times the Rényi divergence of order α between Bern(1 − c)
  and Bern(c). ``min`` over α > 1 of that RDP curve is its α → 1 limit (a KL divergence), which is not a
  DP guarantee; the valid pure-DP value is its α → ∞ limit d_b ln((1 − c)/c).

Symbols: ε → ``epsilon`` (nats), c → ``c`` in (0, 0.5), d (or d_b) → ``dim``, R → ``local_iterations``,
Γ → ``clip``, |Q_k| → ``batch_size``, α → ``orders``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from scipy import special

from ampfl.accounting._checks import (
    check_choice,
    check_delta,
    check_int,
    check_positive,
    check_range,
)
from ampfl.accounting.events import BernoulliMaskEvent
from ampfl.accounting.gaussian import analytic_gaussian_sigma

#: Largest mask dimension the exact enumeration of :func:`smashed_exact_epsilon` accepts (2^d masks).
MAX_EXACT_DIM = 14


def _check_c(c: float) -> float:
    x = check_positive("c", c, upper=0.5)
    if not 0.0 < x < 0.5:  # pragma: no cover - check_positive already enforces it
        raise ValueError(f"c must be in (0, 0.5). Found {x}.")
    return x


# ----------------------------------------------------------------------------------------------------------
# Theorem 2: smashed data forwarding
# ----------------------------------------------------------------------------------------------------------
def amplified_epsilon_smashed(*, epsilon: float, c: float, dim: int) -> float:
    """Theorem 2 of paper 003 as printed: ε_amp = ln((1 − c^d) e^ε + c^d) (Eq. 33/56).

    Computed as log1p((1 − c^d) expm1(ε)). Limits: c → 0 gives ε; c^d → 1 would give 0; ε_amp decreases
    towards ε as d grows. Provenance: [V]. **Not a valid bound in general** — see
    :func:`smashed_exact_epsilon` and docs/pm_sfl.md (Lemma 2 of Appendix D fails when a fixed mask has a
    larger sensitivity than the unmasked function, and step (54) drops a factor e^{−ε}).

    Args:
        epsilon: ε of the Laplace mechanism Lap(Δf/ε), > 0.
        c: lower bound of the keep-probabilities, in (0, 0.5).
        dim: number d of masked parameters (≥ 1).
    """
    eps = check_positive("epsilon", epsilon)
    cc = _check_c(c)
    d = check_int("dim", dim)
    one_minus_cd = -math.expm1(d * math.log(cc))
    return _log1p_scaled_expm1(eps, one_minus_cd)


def _log1p_scaled_expm1(eps: float, r: float) -> float:
    """log(1 + r (e^ε − 1)) for r in (0, 1], without overflow for large ε."""
    if eps <= 30.0:
        return math.log1p(r * math.expm1(eps))
    # 1 + r(e^ε − 1) = r e^ε (1 + (1 − r) e^{−ε} / r), exactly
    return eps + math.log(r) + math.log1p((1.0 - r) * math.exp(-eps) / r)


def smashed_epsilon_proof_corrected(*, epsilon: float, c: float, dim: int) -> float:
    """The bound the proof of Theorem 2 (Appendix D) gives when step (54) keeps the factor e^{−ε} of (53).

    e^{ε'} = 1 + (e^ε − 1)(1 − c^d) / ((1 − c^d) + c^d e^{−ε}) ≥ the printed value. Valid only under the
    proof's extra assumptions (zero input in the domain and every fixed mask's sensitivity ≤ Δf). Provenance:
    [D].
    """
    eps = check_positive("epsilon", epsilon)
    cc = _check_c(c)
    d = check_int("dim", dim)
    p0 = math.exp(d * math.log(cc))
    one_minus = -math.expm1(d * math.log(cc))
    return _log1p_scaled_expm1(eps, one_minus / (one_minus + p0 * math.exp(-eps)))


#: Analyses of the smashed-data release reported by ``account pm-sfl-smashed`` (recommended first).
SMASHED_ANALYSES: tuple[str, ...] = ("no-amplification", "proof-corrected", "theorem-2-as-printed")


def smashed_recommended(
    *, epsilon: float, c: float, dim: int, domain_includes_zero: bool = False
) -> tuple[str, float]:
    """The analysis ampfl recommends for the masked smashed-data release, and its ε (δ = 0).

    The mask amplification of Theorem 2 needs the zero input in the domain (Δ ≥ |(w ⊙ M)·x| for every
    input x and mask M); without it the exact ε can equal the Laplace mechanism's own ε
    (:func:`ampfl.accounting.audit.pm_sfl.audit_smashed_counterexample`). So the recommendation is the
    un-amplified ε unless the caller asserts that condition, in which case it is the proof-corrected bound
    (:func:`smashed_epsilon_proof_corrected`; the printed one drops a factor e^{−ε}). Provenance: [D].
    """
    eps = check_positive("epsilon", epsilon)
    if domain_includes_zero:
        return "proof-corrected", smashed_epsilon_proof_corrected(epsilon=eps, c=c, dim=dim)
    _check_c(c)
    check_int("dim", dim)
    return "no-amplification", eps


def smashed_exact_epsilon(
    *,
    weights: Sequence[float],
    x: Sequence[float],
    x_prime: Sequence[float],
    keep_probabilities: Sequence[float],
    epsilon: float,
    sensitivity: float,
) -> float:
    """Exact ε (both directions, δ = 0) of the masked Laplace mechanism of Appendix D on one pair of inputs.

    The mechanism is u = (w ⊙ M)·x + Lap(Δ/ε), M_j ~ Bern(θ_j) independent (Eq. 31). Its output density is a
    mixture of 2^d Laplace densities; the log-ratio of two such mixtures is monotone between consecutive
    means (a Möbius function of e^{2u/b}), so its supremum is attained at a mean or at ±∞, all of which are
    evaluated exactly (log space). Provenance: [D] (independent exact computation).

    Args:
        weights: w ∈ R^d (d ≤ ``MAX_EXACT_DIM``).
        x, x_prime: the two neighbouring inputs in R^d.
        keep_probabilities: θ ∈ [0, 1]^d.
        epsilon: ε of the Laplace scale Δ/ε.
        sensitivity: Δ used for the Laplace scale (e.g. Eq. 32's unmasked sensitivity).
    """
    w = np.asarray(weights, dtype=np.float64)
    d = w.size
    if not 1 <= d <= MAX_EXACT_DIM:
        raise ValueError(f"len(weights) must be in [1, {MAX_EXACT_DIM}]. Found {d}.")
    xa = np.asarray(x, dtype=np.float64)
    xb = np.asarray(x_prime, dtype=np.float64)
    theta = np.asarray([check_range("keep_probabilities", t, 0.0, 1.0) for t in keep_probabilities])
    if xa.shape != (d,) or xb.shape != (d,) or theta.shape != (d,):
        raise ValueError(f"x, x_prime and keep_probabilities must all have length {d}.")
    if not (np.all(np.isfinite(w)) and np.all(np.isfinite(xa)) and np.all(np.isfinite(xb))):
        raise ValueError("weights, x and x_prime must be finite.")
    eps = check_positive("epsilon", epsilon)
    scale = check_positive("sensitivity", sensitivity) / eps
    masks = np.asarray(list(itertools.product((0.0, 1.0), repeat=d)))  # [2^d, d]
    with np.errstate(divide="ignore"):
        log_pm = (masks * np.log(theta) + (1.0 - masks) * np.log1p(-theta)).sum(axis=1)
    keep = np.isfinite(log_pm)
    masks, log_pm = masks[keep], log_pm[keep]
    mean_a = masks @ (w * xa)
    mean_b = masks @ (w * xb)
    points = np.unique(np.concatenate([mean_a, mean_b]))

    def log_density(means: np.ndarray, u: np.ndarray) -> np.ndarray:
        out: np.ndarray = special.logsumexp(
            log_pm[None, :] - np.abs(u[:, None] - means[None, :]) / scale, axis=1
        )
        return out

    ratio = log_density(mean_a, points) - log_density(mean_b, points)
    tails = [
        special.logsumexp(log_pm + mean_a / scale) - special.logsumexp(log_pm + mean_b / scale),
        special.logsumexp(log_pm - mean_a / scale) - special.logsumexp(log_pm - mean_b / scale),
    ]
    return float(max(np.max(np.abs(ratio)), abs(tails[0]), abs(tails[1])))


# ----------------------------------------------------------------------------------------------------------
# Theorem 3: noise conditions for mask aggregation
# ----------------------------------------------------------------------------------------------------------
def theorem3_sigma_local_updates(
    *, epsilon: float, delta: float, clip: float, batch_size: int, local_iterations: int
) -> float:
    """Theorem 3, first bullet, as printed: σ² ≥ 2RΓ² ln(1/δ) / (ε² |Q_k|²); returns the smallest σ.

    Derived in Appendix E.1 from per-step sensitivity Γ/|Q_k| and an approximate ("≈") advanced composition.
    Appendix (71) prints c² in place of Γ² (a typo; the statement's Γ is used). The exact check in
    docs/pm_sfl.md shows it holds for small ε and fails for large ε; use :func:`sigma_local_updates_exact`.
    Provenance: [V].
    """
    eps = check_positive("epsilon", epsilon)
    dlt = check_delta("delta", delta)
    g = check_positive("clip", clip)
    m = check_int("batch_size", batch_size)
    r = check_int("local_iterations", local_iterations)
    return g * math.sqrt(2.0 * r * math.log(1.0 / dlt)) / (eps * m)


def sigma_local_updates_exact(
    *,
    epsilon: float,
    delta: float,
    clip: float,
    batch_size: int,
    local_iterations: int,
    relation: str = "add_remove",
) -> float:
    """Smallest σ making R noisy clipped-mean steps (ε, δ)-DP, exactly (no subsampling credit).

    R Gaussian steps with per-step L2 sensitivity Δ compose to one Gaussian with sensitivity √R Δ, so the
    analytic Gaussian mechanism (Balle–Wang) gives the exact σ. Δ = Γ/|Q_k| (the paper's Eq. 59,
    ``relation="add_remove"``) or 2Γ/|Q_k| (``relation="replace_one"``). Provenance: [D].
    """
    rel = check_choice("relation", relation, ("add_remove", "replace_one"))
    g = check_positive("clip", clip)
    m = check_int("batch_size", batch_size)
    r = check_int("local_iterations", local_iterations)
    step = (2.0 if rel == "replace_one" else 1.0) * g / m
    return analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=math.sqrt(r) * step)


def theorem3_sigma_mask_noise(*, epsilon: float, delta: float, c: float) -> float:
    """Theorem 3, second bullet, as printed: σ² ≥ 2(1 − 2c)² ln(1.25/δ) / ε²; returns the smallest σ.

    Uses the per-coordinate range 1 − 2c as the sensitivity (Eq. 68). For a d_b-dimensional mask vector the
    L2 sensitivity is (1 − 2c)√d_b, so this under-noises by √d_b; and the classic formula needs ε < 1 (not
    enforced here, as printed). Use :func:`sigma_mask_noise_exact`. Provenance: [V].
    """
    eps = check_positive("epsilon", epsilon)
    dlt = check_delta("delta", delta)
    cc = _check_c(c)
    return (1.0 - 2.0 * cc) * math.sqrt(2.0 * math.log(1.25 / dlt)) / eps


def sigma_mask_noise_exact(*, epsilon: float, delta: float, c: float, dim: int) -> float:
    """Smallest σ for (ε, δ)-DP of the clipped mask probabilities θ ∈ [c, 1 − c]^{d_b}: analytic Gaussian with
    L2 sensitivity (1 − 2c)√d_b (any change of a client's data may move every coordinate). Provenance: [D].
    """
    cc = _check_c(c)
    d = check_int("dim", dim)
    return analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=(1.0 - 2.0 * cc) * math.sqrt(d))


# ----------------------------------------------------------------------------------------------------------
# Bernoulli-sampling amplification expression (after Theorem 3)
# ----------------------------------------------------------------------------------------------------------
def bernoulli_mask_rdp(*, orders: Sequence[float], c: float, dim: int) -> np.ndarray:
    """d/(α − 1) · ln(c^α (1 − c)^{1−α} + (1 − c)^α c^{1−α}) for each order α > 1 (intended form).

    The printed expression repeats the term (1 − c)^α c^{1−α} twice; the evident intended form (used here)
    is symmetric in c ↔ 1 − c and equals d · D_α(Bern(1 − c) ‖ Bern(c)), the exact RDP of releasing d
    independent Bernoulli bits whose probabilities lie in [c, 1 − c]. Provenance: [I] (intended form).
    """
    cc = _check_c(c)
    d = check_int("dim", dim)
    alphas = np.asarray([check_range("orders", a, 1.0 + 1e-12, 1e6) for a in orders], dtype=np.float64)
    if alphas.size == 0:
        raise ValueError("orders must be a non-empty list of numbers in (1, 1e6]. Found [].")
    lc, l1c = math.log(cc), math.log1p(-cc)
    log_terms = np.logaddexp(alphas * lc + (1.0 - alphas) * l1c, alphas * l1c + (1.0 - alphas) * lc)
    out: np.ndarray = d * log_terms / (alphas - 1.0)
    return out


def bernoulli_mask_event_rdp(event: BernoulliMaskEvent, alphas: np.ndarray, relation: object) -> np.ndarray:
    """:func:`bernoulli_mask_rdp` of a :class:`~ampfl.accounting.events.BernoulliMaskEvent` (the mechanism
    registry's RDP bound; both directions of every relation: the bits' law changes within [c, 1 − c])."""
    return bernoulli_mask_rdp(orders=[float(a) for a in alphas], c=event.c, dim=event.dim)


def bernoulli_amplified_epsilon_as_printed(*, epsilon: float, c: float, dim: int) -> float:
    """min_{α>1} {ε, d/(α−1) ln(...)} as printed (intended form). Provenance: [I].

    The RDP curve increases in α, so the minimum over α > 1 is its α → 1 limit, d (1 − 2c) ln((1 − c)/c)
    (a KL divergence). That is **not** an ε-DP bound: Bern(1 − c) vs Bern(c) has pure ε = ln((1 − c)/c)
    (see :func:`bernoulli_mask_epsilon`). Kept for reference only.
    """
    eps = check_positive("epsilon", epsilon)
    cc = _check_c(c)
    d = check_int("dim", dim)
    return min(eps, d * (1.0 - 2.0 * cc) * math.log((1.0 - cc) / cc))


def bernoulli_mask_epsilon(*, epsilon: float, c: float, dim: int) -> float:
    """Valid pure-DP counterpart: min(ε, d ln((1 − c)/c)), the α → ∞ limit of the RDP curve.

    Releasing d Bernoulli bits with probabilities in [c, 1 − c] is (d ln((1 − c)/c), 0)-DP whatever the
    input (exact: the likelihood ratio is at most ((1 − c)/c)^d); if the probabilities are also (ε, δ)-DP,
    the bits are (min(ε, d ln((1 − c)/c)), δ)-DP. Provenance: [D].
    """
    eps = check_positive("epsilon", epsilon)
    cc = _check_c(c)
    d = check_int("dim", dim)
    return min(eps, d * math.log((1.0 - cc) / cc))


def bernoulli_mask_epsilon_delta(
    *, c: float, dim: int, delta: float, orders: Sequence[float] = tuple(range(2, 257))
) -> float:
    """(ε, δ) of the d Bernoulli bits from the intended RDP curve (dp-accounting conversion), never above the
    pure value d ln((1 − c)/c). Provenance: [D].
    """
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    dlt = check_delta("delta", delta)
    orders = list(orders)
    curve = bernoulli_mask_rdp(orders=orders, c=c, dim=dim)
    eps, _ = rdp.compute_epsilon([float(a) for a in orders], list(curve), dlt)
    cc = _check_c(c)
    return float(min(eps, check_int("dim", dim) * math.log((1.0 - cc) / cc)))
