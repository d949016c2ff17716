"""Explicit-dataset audit of paper 003's Theorem 2 (masked Laplace release of smashed data).

Theorem 2 claims that masking the first layer with Bernoulli keep-probabilities in [c, 1 − c] amplifies the
Laplace mechanism's ε to ln((1 − c^d) e^ε + c^d). Its proof (Appendix D) needs the zero input in the domain:
Δ ≥ |(w ⊙ M)·x| for every input x and mask M, so that the "all weights dropped" branch is a neighbour of
every output. Without that condition the mask gives nothing: with w = 1, x = 10, x′ = 10.1, θ = 0.9 and
Lap(Δ/ε) at Δ = 0.1, ε = 1, the two outputs differ by the full shift whenever the weight is kept, and the
log-ratio tends to ε as u → ±∞ (the tails of the kept component dominate both mixtures). So the exact ε is
the un-amplified 1.0, above both the printed 0.935 and the proof-corrected 0.975.

The exact ε comes from :func:`ampfl.accounting.pm_sfl.smashed_exact_epsilon` (mixture of Laplace densities,
supremum over the finitely many candidate points and ±∞, log space).
"""

from __future__ import annotations

from dataclasses import dataclass

from ampfl.accounting.pm_sfl import (
    amplified_epsilon_smashed,
    smashed_epsilon_proof_corrected,
    smashed_exact_epsilon,
)

__all__ = ["SmashedAudit", "audit_smashed_counterexample", "audit_smashed_pair"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SmashedAudit:
    """Claimed vs exact ε of one explicit pair of inputs (δ = 0)."""

    exact: float
    printed: float
    proof_corrected: float

    @property
    def printed_violated(self) -> bool:
        return self.exact > self.printed * (1.0 + 1e-12)

    @property
    def corrected_violated(self) -> bool:
        return self.exact > self.proof_corrected * (1.0 + 1e-12)


def audit_smashed_pair(
    *, weight: float, x: float, x_prime: float, keep_probability: float, epsilon: float, sensitivity: float
) -> SmashedAudit:
    """Audit a one-coordinate pair; the claims use c = min(θ, 1 − θ) and d = 1."""
    c = min(keep_probability, 1.0 - keep_probability)
    exact = smashed_exact_epsilon(
        weights=[weight],
        x=[x],
        x_prime=[x_prime],
        keep_probabilities=[keep_probability],
        epsilon=epsilon,
        sensitivity=sensitivity,
    )
    return SmashedAudit(
        exact=exact,
        printed=amplified_epsilon_smashed(epsilon=epsilon, c=c, dim=1),
        proof_corrected=smashed_epsilon_proof_corrected(epsilon=epsilon, c=c, dim=1),
    )


def audit_smashed_counterexample() -> SmashedAudit:
    """The domain counterexample: zero input outside the domain (w = 1, x = 10, x′ = 10.1, θ = 0.9)."""
    return audit_smashed_pair(
        weight=1.0, x=10.0, x_prime=10.1, keep_probability=0.9, epsilon=1.0, sensitivity=0.1
    )
