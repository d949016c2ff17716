"""The amplified MS-PAFL analysis (label ``amplified``; ampfl's former "tight" analysis): valid only when the
private part carries no information from earlier rounds.

Paper 000 (arXiv:2509.25906v1), record level, participation public (the server sees who uploaded). Each
round is taken to be the Poisson-subsampled Gaussian with sampling rate q (Eq. 9) and noise multiplier
z = σ/(2C), i.e. per round the PLD ``p · PLD(q-subsampled Gaussian) + (1 − p) · identity``, composed over
T rounds. Amplification by subsampling needs "record not sampled in round t ⇒ round t's upload has the same
distribution under both datasets". That holds if every round starts from a state that does not depend on
the data (e.g. the private submodel is re-initialised each round); it **fails** for MS-PAFL as printed,
whose private submodel persists (Eq. 14): the explicit counterexample of
:mod:`ampfl.accounting.audit.ms_pafl` has this analysis claim ε = 0.0817 at δ = 4.03e-5 where the exact δ
at that ε is 8.10e-4. Kept as a labelled alternative; never recommended.

Why the Poisson pair is the worst case under that assumption (docs/ms_pafl.md): with P = (1−q)R + qP₁,
Q = (1−q)R + qQ₁ and all components mixtures of N(m, σ²I), ‖m‖ ≤ C, advanced joint convexity (Balle,
Barthe, Gaboardi 2018, Thm 2) bounds the divergence by that of R = Q₁ = N(−Cu), P₁ = N(+Cu): the add/remove
pair of the Poisson-subsampled Gaussian with sensitivity 2C folded into z. Computed through the core
events :class:`~ampfl.accounting.events.PublicParticipationEvent` and
:class:`~ampfl.accounting.events.PoissonSampledEvent` on the PLD (default) or RDP accountant. Provenance: [D].
"""

from __future__ import annotations

import math

from ampfl.accounting._checks import check_int, check_nonnegative, check_positive, check_probability
from ampfl.accounting.accountants import Accountant, composed, delta_after, epsilon_after
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent, PrivacyEvent, PublicParticipationEvent
from ampfl.accounting.subsampling import subsampled_gaussian_log_delta

__all__ = [
    "ANALYSIS_AMPLIFIED",
    "NOTE_AMPLIFIED",
    "amplified_accountant",
    "amplified_delta",
    "amplified_epsilon",
    "amplified_event",
    "amplified_round_log_delta",
]

ANALYSIS_AMPLIFIED = "amplified"

NOTE_AMPLIFIED = (
    "valid only when the private part carries no information from earlier rounds (private submodel "
    "re-initialised every round), not for Eq. 14's persistent private submodel (counterexample: claims "
    "eps = 0.0817 at delta = 4.03e-5, exact delta there 8.10e-4); per round p * PLD(q-subsampled Gaussian, "
    "noise_multiplier = sigma/(2C)) + (1-p) * identity, participation public"
)


def amplified_event(*, participation: float, sampling_rate: float, noise_multiplier: float) -> PrivacyEvent:
    """One amplified round: public participation p of a q-Poisson-sampled Gaussian (z = σ/2C)."""
    inner = PoissonSampledEvent(
        sampling_rate=sampling_rate, event=GaussianEvent(noise_multiplier=noise_multiplier)
    )
    return PublicParticipationEvent(participation=participation, event=inner)


def amplified_accountant(
    *,
    participation: float,
    sampling_rate: float,
    noise_multiplier: float,
    rounds: int,
    accountant: str = "pld",
) -> Accountant:
    """A fresh accountant (``"pld"`` or ``"rdp"``) with ``rounds`` rounds of :func:`amplified_event`."""
    event = amplified_event(
        participation=participation, sampling_rate=sampling_rate, noise_multiplier=noise_multiplier
    )
    return composed(event, check_int("rounds", rounds), accountant)


def amplified_epsilon(
    *,
    participation: float,
    sampling_rate: float,
    noise_multiplier: float,
    rounds: int,
    delta: float,
    accountant: str = "pld",
) -> float:
    """ε at ``delta`` of the amplified analysis after ``rounds`` rounds (valid only without carried state)."""
    event = amplified_event(
        participation=participation, sampling_rate=sampling_rate, noise_multiplier=noise_multiplier
    )
    return epsilon_after(event, check_int("rounds", rounds), delta, accountant)


def amplified_delta(
    *,
    participation: float,
    sampling_rate: float,
    noise_multiplier: float,
    rounds: int,
    epsilon: float,
    accountant: str = "pld",
) -> float:
    """δ at ``epsilon`` amplified, after ``rounds`` rounds (valid only without carried state)."""
    event = amplified_event(
        participation=participation, sampling_rate=sampling_rate, noise_multiplier=noise_multiplier
    )
    return delta_after(event, check_int("rounds", rounds), epsilon, accountant)


def amplified_round_log_delta(
    *, noise_multiplier: float, sampling_rate: float, participation: float, epsilon: float
) -> float:
    """Exact log δ(ε) of one round of the amplified analysis: log p + log δ of the q-subsampled Gaussian.

    The subsampled-Gaussian δ is :func:`ampfl.accounting.subsampling.subsampled_gaussian_log_delta`
    (q·δ_G(log(1 + (e^ε − 1)/q)), the remove direction, which dominates); the public participation coin
    multiplies δ by p. This is the exact δ of one *freshly subsampled* round (the first MS-PAFL round, or
    every round when nothing is carried over), used to check Theorem 1 and Corollary 1 as printed.
    """
    z = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    p = check_probability("participation", participation)
    eps = check_nonnegative("epsilon", epsilon)
    return math.log(p) + subsampled_gaussian_log_delta(sampling_rate=q, noise_multiplier=z, epsilon=eps)
