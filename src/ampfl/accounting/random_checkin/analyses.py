"""The catalogue of paper 004's analyses, input validation, and the event each sound analysis composes.

Paper 004: B. Hasırcıoğlu & D. Gündüz, "Privacy Amplification via Random Participation in Federated
Learning", arXiv:2205.01556v1. Symbols → names (docs/units.md): p → ``participation``, q → ``sampling_rate``,
d → ``local_dataset_size``, σ (in units of the clip norm C) → ``noise_multiplier`` z, T → ``iterations``.
"""

from __future__ import annotations

from ampfl.accounting._checks import check_choice, check_int, check_positive, check_probability
from ampfl.accounting.events import (
    GaussianEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    RandomCheckInEvent,
)

__all__ = [
    "ANALYSES",
    "COMPOSITION_METHODS",
    "EVENT_ANALYSES",
    "NOTES",
    "PAPER_NO_NOISE_NOTE",
    "RECOMMENDED_ANALYSIS",
    "SOUND",
    "analysis_event",
    "check_analysis",
    "check_mechanism",
    "check_noisy_mechanism",
]

ANALYSES: tuple[str, ...] = ("paper", "wcs", "ols", "cs")
#: The smallest published bound that is provably an upper bound (Thm 5.2; docs/accounting.md).
RECOMMENDED_ANALYSIS: str = "wcs"
#: Analyses defined by an event that the RDP and PLD accountants compose (``paper`` is a closed form only).
EVENT_ANALYSES: tuple[str, ...] = ("wcs", "ols", "cs")
#: Whether an analysis is an upper bound on the privacy loss of 004 Algorithm 1 (``sound`` in reports).
SOUND: dict[str, bool] = {"paper": False, "wcs": True, "ols": True, "cs": False}
#: One-line label of each analysis (the ``note`` of reports).
NOTES: dict[str, str] = {
    "paper": "004 Thm 4.1 as printed (Eq. 5-7), composed by optimal composition (Kairouz-Oh-Viswanath); "
    "refuted: explicit datasets exceed it (docs/audit.md)",
    "wcs": "004 Thm 5.2 (worst-case sampling): participation revealed, each iteration "
    "PublicParticipation(p, PoissonSampled(q, Gaussian(z))); sound, recommended",
    "ols": "004 Thm 5.1 (only local sampling): PoissonSampled(q, Gaussian(z)); sound, looser than wcs",
    "cs": "004 Cor. 5.3 (central sampling at rate pq): describes another mechanism; the exact delta of one "
    "dataset here, hence a lower bound for random check-in, not a guarantee",
}
#: How :func:`~ampfl.accounting.random_checkin.epsilon_composed` composes T iterations, per analysis.
COMPOSITION_METHODS: dict[str, str] = {
    "paper": "optimal composition (Kairouz-Oh-Viswanath 2015, Thm 3.3) of Thm 4.1's per-iteration "
    "(eps0, delta0), optimised over eps0",
    "wcs": "T x RandomCheckInEvent (dominated by PublicParticipation(p, PoissonSampled(q, Gaussian(z)))) "
    "on the chosen accountant",
    "ols": "T x PoissonSampled(q, Gaussian(z)) on the chosen accountant",
    "cs": "T x PoissonSampled(pq, Gaussian(z)) on the chosen accountant",
}
#: Warned by ``calibrate_noise_multiplier(analysis="paper")`` when only Thm 4.1 says no noise is needed.
PAPER_NO_NOISE_NOTE = (
    "Theorem 4.1 as printed claims no noise is needed; the audit (docs/audit.md) refutes this bound"
)


def check_analysis(analysis: object) -> str:
    """``analysis`` if it names one of :data:`ANALYSES`, else ``ValueError``."""
    return check_choice("analysis", analysis, ANALYSES)


def check_mechanism(
    participation: object, sampling_rate: object, local_dataset_size: object
) -> tuple[float, float, int]:
    """Validated (p, q, d) of 004 Algorithm 1: p, q in (0, 1], d ≥ 0 an integer."""
    return (
        check_probability("participation", participation),
        check_probability("sampling_rate", sampling_rate),
        check_int("local_dataset_size", local_dataset_size, minimum=0),
    )


def check_noisy_mechanism(
    participation: object, sampling_rate: object, local_dataset_size: object, noise_multiplier: object
) -> tuple[float, float, int, float]:
    """Validated (p, q, d, z) of 004 Algorithm 1: :func:`check_mechanism` and z = σ/C > 0."""
    p, q, d = check_mechanism(participation, sampling_rate, local_dataset_size)
    return p, q, d, check_positive("noise_multiplier", noise_multiplier)


def analysis_event(
    analysis: str,
    *,
    participation: float,
    sampling_rate: float,
    noise_multiplier: float,
    local_dataset_size: int = 0,
) -> PrivacyEvent:
    """The event one iteration of 004 Algorithm 1 is accounted as under ``analysis`` (wcs, ols or cs).

    ``wcs``: :class:`~ampfl.accounting.events.RandomCheckInEvent` with ``participation_hidden=False`` (its
    pair is PublicParticipation(p, PoissonSampled(q, Gaussian(z))), Thm 5.2, on both accountants; a run's
    events keep the default ``True``, which the PLD accountant bounds by a tighter pair); ``ols``:
    PoissonSampled(q, Gaussian(z)) (Thm 5.1); ``cs``: PoissonSampled(pq, Gaussian(z)) (Cor. 5.3, a lower
    bound here).

    Raises:
        ValueError: for ``paper`` (Thm 4.1 is a closed form, not an event) or out-of-range parameters.
    """
    name = check_choice("analysis", analysis, EVENT_ANALYSES)
    p, q, d, z = check_noisy_mechanism(participation, sampling_rate, local_dataset_size, noise_multiplier)
    if name == "wcs":  # Thm 5.2 as named: participation revealed (runs' events hide it: a tighter PLD pair)
        return RandomCheckInEvent(
            participation=p,
            sampling_rate=q,
            noise_multiplier=z,
            local_dataset_size=d,
            participation_hidden=False,
        )
    rate = q if name == "ols" else p * q
    return PoissonSampledEvent(sampling_rate=rate, event=GaussianEvent(noise_multiplier=z))
