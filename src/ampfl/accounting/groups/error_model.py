"""The GDPFed+ planner's error model J(q, κ): ampfl's design (``docs/planner.md``), not paper 001's.

Paper 001 (arXiv:2505.13655v3) chooses q_g by minimising "the third and last terms" of its Theorem 2; that
formula was not recoverable (RECOVERED_MATH.md §2.8, [X]). ampfl instead scores a plan by the mean squared
error of one aggregated update against the full-participation mean update,

    J(q, κ) = Σ_a [ q_a N_a (1 − q_a) u² / M²            (client-sampling variance, Poisson)
                  + κ_a d z_a(q_a)² C² / M²              (DP noise energy after top-κ)
                  + ω(κ_a) λ_a² m² ]                      (sparsification error, ω from Lemma 3)
              + A ζ² Σ_a (λ_a − π_a)²                      (reweighting bias between aggregates)

with M = qN the expected cohort, λ_a = q_a N_a / M the inferred reweighting, π_a = N_a / N, u = update
norm bound, m = group mean-update norm, ζ = bound on ‖μ_a − μ‖, A the number of aggregates. With one
aggregate, κ = 1 and q_a = q, J is exactly DP-FedAvg's MSE. The noise energy κ d z² C² is
:func:`ampfl.accounting.groups.calibration.noise_energy`. The search over plans is
:func:`ampfl.accounting.groups.planner.plan_groups`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ampfl.accounting._checks import check_choice, check_int, check_nonnegative, check_positive, check_range
from ampfl.accounting.groups.calibration import noise_energy

__all__ = ["OMEGA_MODELS", "ErrorModel", "PlanProblem", "contributions", "objective", "omega"]

OMEGA_MODELS: tuple[str, ...] = ("squared", "worst-case")


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorModel:
    """Constants of the planner's error model (docs/planner.md; ampfl's design, not the paper's).

    Attributes:
        dim: model dimension d.
        clip_norm: per-client clipping norm C.
        update_norm: u / C, bound on a clipped update's norm relative to C (≤ 1 under clipping).
        signal_norm: m / C, norm of a group's mean update relative to C (drives the sparsification error).
        heterogeneity: ζ / C, bound on ‖μ_a − μ‖ between a group's mean update and the population's
            (0 for IID data, the paper's default setting).
        omega: ω(κ) model, ``"squared"`` = (1 − κ)² ([I], likely the paper's) or ``"worst-case"`` = 1 − κ.
        kappa_min: smallest κ the ``auto`` rule may choose.
    """

    dim: int
    clip_norm: float = 1.0
    update_norm: float = 1.0
    signal_norm: float = 1.0
    heterogeneity: float = 0.0
    omega: str = "squared"
    kappa_min: float = 0.01

    def __post_init__(self) -> None:
        check_int("dim", self.dim, minimum=1)
        check_positive("clip_norm", self.clip_norm)
        check_range("update_norm", self.update_norm, 0.0, 1.0)
        check_nonnegative("signal_norm", self.signal_norm)
        check_nonnegative("heterogeneity", self.heterogeneity)
        check_choice("omega", self.omega, OMEGA_MODELS)
        check_range("kappa_min", self.kappa_min, 1e-9, 1.0)


def omega(kappa: np.ndarray | float, model: str) -> np.ndarray:
    """ω(κ) of Lemma 3 of paper 001 (‖top_κ(x) − x‖² ≤ ω ‖x‖²), elementwise, unvalidated.

    ``"worst-case"``: 1 − κ, valid for every x [V]; ``"squared"``: (1 − κ)², the tighter model after Shi et
    al. 2019 that paper 001 most likely adopts [I] — an empirical model for bell-shaped updates, not a bound
    for every x. :func:`ampfl.sparsify.sparsification_error_bound` is the validated scalar form.
    """
    k = np.asarray(kappa, dtype=np.float64)
    return np.asarray((1.0 - k) ** 2 if model == "squared" else 1.0 - k)


def _auto_kappa(noise: np.ndarray, signal: np.ndarray, model: ErrorModel) -> np.ndarray:
    """argmin over κ in [kappa_min, 1] of ω(κ)·signal + κ·noise (closed form per aggregate)."""
    lo = model.kappa_min
    if model.omega == "squared":
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.where(signal > 0, 1.0 - noise / (2.0 * np.where(signal > 0, signal, 1.0)), lo)
        return np.clip(k, lo, 1.0)
    lo_val = (1.0 - lo) * signal + lo * noise
    return np.where(lo_val < noise, lo, 1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanProblem:
    """One partition of the budget groups into aggregates, as the objective sees it.

    Attributes:
        sizes: aggregate sizes N_a, shape ``[A]``.
        budgets: aggregate budgets (smallest member budget), shape ``[A]``.
        kappa: given κ_a (``sparsify="given"``), shape ``[A]``, or None.
        sparsify: ``"none"``, ``"auto"`` or ``"given"``.
        total: N, all clients.
        rate: q, the global participation ratio (M = qN).
        model: the error model's constants.
    """

    sizes: np.ndarray
    budgets: np.ndarray
    kappa: np.ndarray | None
    sparsify: str
    total: int
    rate: float
    model: ErrorModel


def contributions(
    q: np.ndarray, noise_multiplier: np.ndarray, prob: PlanProblem
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """J's terms per aggregate (shape ``[..., A]``): J is their sum over the last axis, so it is separable.

    Returns the per-aggregate total, κ and the per-aggregate terms (module docstring).
    """
    m = prob.model
    cohort = prob.rate * prob.total
    c2 = m.clip_norm**2
    lam = q * prob.sizes / cohort
    pi = prob.sizes / prob.total
    sampling = q * prob.sizes * (1.0 - q) * (m.update_norm**2) * c2 / cohort**2
    noise = noise_energy(noise_multiplier, dim=m.dim, clip_norm=m.clip_norm) / cohort**2
    signal = lam**2 * (m.signal_norm**2) * c2
    if prob.sparsify == "none":
        kappa = np.ones_like(q)
    elif prob.sparsify == "given":
        assert prob.kappa is not None
        kappa = np.broadcast_to(prob.kappa, q.shape)
    else:
        kappa = _auto_kappa(noise, signal, m)
    dp = kappa * noise
    sparse = omega(kappa, m.omega) * signal
    bias = q.shape[-1] * (m.heterogeneity**2) * c2 * (lam - pi) ** 2
    terms = {"sampling": sampling, "dp_noise": dp, "sparsification": sparse, "reweighting_bias": bias}
    return sampling + dp + sparse + bias, kappa, terms


def objective(
    q: np.ndarray, noise_multiplier: np.ndarray, prob: PlanProblem
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """J for a batch of plans: ``q``, ``noise_multiplier`` of shape ``[..., A]``; returns J, κ, the terms."""
    total, kappa, terms = contributions(q, noise_multiplier, prob)
    return total.sum(axis=-1), kappa, {k: v.sum(axis=-1) for k, v in terms.items()}
