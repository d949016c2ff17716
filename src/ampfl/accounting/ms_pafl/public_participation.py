"""The recommended MS-PAFL analysis (``public-participation``): sound with a persistent private submodel.

Paper 000 (arXiv:2509.25906v1), MS-PAFL, record level (one sample of one client's dataset changes, the
paper's Definitions 1–2), against the server: it receives every noisy upload (Eq. 12) and knows who sent
it, so participation is public to it. The private submodel persists across rounds (Eq. 14), so a record
drawn in round s shapes every later upload; local subsampling therefore does **not** amplify a round
(counterexample in :mod:`ampfl.accounting.audit.ms_pafl`).

What holds: the upload of a participating client is ``clip_C(w_p) + N(0, σ² I)`` with ‖clip_C(w_p)‖ ≤ C
(Eqs. 11–12). Given everything the server saw before, the round's upload is a mixture (over the client's
hidden state and draws) of Gaussians with means in the ball of radius C, under either dataset; by joint
convexity every such pair is dominated by the Gaussian pair with mean distance 2C. So each participated
round is a Gaussian mechanism with sensitivity 2C and noise multiplier z = σ/(2C) (adaptive composition
of dominating pairs), and a round the client skips releases nothing about it. With participation public
and independent of the data, δ(ε) = Σ_k Bin(k; T, p) δ_G(ε; √k / z). Provenance: [D] (docs/ms_pafl.md).

Computed through the core: :class:`~ampfl.accounting.events.MSPAFLRoundEvent` (``participation`` p,
``noise_multiplier`` z = σ/(2C)) composed T times on a :class:`~ampfl.accounting.accountants.PLDAccountant`
(default; exact mixture up to its pessimistic discretisation) or an
:class:`~ampfl.accounting.accountants.RDPAccountant`. ε in nats.
"""

from __future__ import annotations

from ampfl.accounting._checks import check_int
from ampfl.accounting.accountants import Accountant, composed, delta_after, epsilon_after
from ampfl.accounting.events import MSPAFLRoundEvent

__all__ = [
    "ANALYSIS_PUBLIC_PARTICIPATION",
    "NOTE_PUBLIC_PARTICIPATION",
    "public_participation_accountant",
    "public_participation_delta",
    "public_participation_epsilon",
    "round_event",
]

ANALYSIS_PUBLIC_PARTICIPATION = "public-participation"

NOTE_PUBLIC_PARTICIPATION = (
    "record level, against the server (sees each upload and its sender; participation public); sound "
    "with the persistent private submodel of Eq. 14: each participated round is a Gaussian mechanism "
    "with sensitivity 2C and noise_multiplier = sigma/(2C), no amplification by local subsampling; "
    "delta(eps) = sum_k Bin(k; T, p) delta_G(eps; sqrt(k)/z)"
)


def round_event(*, participation: float, noise_multiplier: float) -> MSPAFLRoundEvent:
    """One MS-PAFL round for one record as seen by the server (private submodel persistent, Eq. 14).

    Args:
        participation: check-in probability p in (0, 1] (Eq. 10).
        noise_multiplier: z = σ/(2C): Lemma 1's noise std σ over the upload's sensitivity 2C (Eq. C.3).
    """
    return MSPAFLRoundEvent(participation=participation, noise_multiplier=noise_multiplier)


def public_participation_accountant(
    *, participation: float, noise_multiplier: float, rounds: int, accountant: str = "pld"
) -> Accountant:
    """A fresh accountant (``"pld"`` or ``"rdp"``) with ``rounds`` MS-PAFL rounds composed."""
    event = round_event(participation=participation, noise_multiplier=noise_multiplier)
    return composed(event, check_int("rounds", rounds), accountant)


def public_participation_epsilon(
    *, participation: float, noise_multiplier: float, rounds: int, delta: float, accountant: str = "pld"
) -> float:
    """ε at ``delta`` after ``rounds`` rounds of the recommended analysis (an upper bound on the true ε).

    Args:
        participation: p in (0, 1].
        noise_multiplier: z = σ/(2C) with Lemma 1's σ (sensitivity 2C of the clipped upload).
        rounds: T ≥ 1.
        delta: target δ in (0, 1).
        accountant: ``"pld"`` (default, tighter) or ``"rdp"``.
    """
    event = round_event(participation=participation, noise_multiplier=noise_multiplier)
    return epsilon_after(event, check_int("rounds", rounds), delta, accountant)


def public_participation_delta(
    *, participation: float, noise_multiplier: float, rounds: int, epsilon: float, accountant: str = "pld"
) -> float:
    """δ at ``epsilon`` after ``rounds`` rounds of the recommended analysis (an upper bound on the true δ)."""
    event = round_event(participation=participation, noise_multiplier=noise_multiplier)
    return delta_after(event, check_int("rounds", rounds), epsilon, accountant)
