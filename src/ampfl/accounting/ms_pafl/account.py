"""One-call MS-PAFL account (paper 000, arXiv:2509.25906v1): the recommended analysis plus every other one.

:func:`account_ms_pafl` returns the recommended, sound ``public-participation`` ε at one δ (top level) and,
in ``analyses``, the other analyses each with its own (ε, δ), a ``sound`` flag and a note:

* ``first-use`` (sound, tighter, exact closed form; :mod:`ampfl.accounting.ms_pafl.first_use`);
* ``amplified`` (ampfl's former "tight" analysis; sound only if the private submodel is re-initialised
  every round, ``private_state="reset"``; :mod:`ampfl.accounting.ms_pafl.amplified`);
* the paper as printed (:mod:`ampfl.accounting.ms_pafl.printed`): ``paper-theorem1`` (per round),
  ``paper-corollary1`` (per round), with ``rounds``: ``paper-theorem4`` (Eq. 19 on Cor. 1) and
  ``paper-theorem3`` (Eq. 18 with the C.8 constant, at δ_ℓ); all ``sound: false`` (docs/ms_pafl.md).

Noise: either ``eps_local`` (Lemma 1 gives σ = 2C√(2 ln(1.25/δ_ℓ))/ε_ℓ) or ``noise_multiplier``
z = σ/C directly, the noise std over the clip norm as everywhere in ampfl (docs/units.md; the printed analyses
then use the ε_ℓ Lemma 1 assigns to σ, and are left out when it exceeds 1). The sensitivity of the clipped
upload is 2C (Eq. C.3), so the analyses below (and :class:`~ampfl.accounting.events.MSPAFLRoundEvent`) take
their own multiplier σ/(2C) = z/2: :func:`account_ms_pafl` converts, nowhere else (before
it, this function's ``noise_multiplier`` was σ/(2C): multiply an old value by 2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ampfl.accounting._checks import check_choice, check_delta, check_int, check_positive, check_probability
from ampfl.accounting.events import MS_PAFL_PRIVATE_STATES
from ampfl.accounting.ms_pafl.amplified import ANALYSIS_AMPLIFIED, NOTE_AMPLIFIED, amplified_epsilon
from ampfl.accounting.ms_pafl.first_use import ANALYSIS_FIRST_USE, NOTE_FIRST_USE, first_use_epsilon
from ampfl.accounting.ms_pafl.printed import (
    eps_local_from_noise_multiplier,
    ldp_noise_multiplier,
    sampling_rate,
    theorem1_amplification,
    theorem2_round_cdp,
    theorem2_round_delta,
    theorem3_client_total,
    theorem4_strong_composition,
)
from ampfl.accounting.ms_pafl.public_participation import (
    ANALYSIS_PUBLIC_PARTICIPATION,
    public_participation_epsilon,
)

__all__ = ["PAPER_NOTES", "MSPAFLAccount", "MSPAFLAnalysis", "account_ms_pafl"]

#: Notes of the printed analyses (why each is labelled ``sound: false``).
PAPER_NOTES: dict[str, str] = {
    "paper-theorem1": (
        "as printed, per round: (2 q eps_l, q delta_l); true for a freshly subsampled mechanism, but its "
        "hypothesis fails for MS-PAFL rounds: the persistent private submodel (Eq. 14) makes round t depend "
        "on records drawn earlier"
    ),
    "paper-corollary1": (
        "as printed, per round (Eq. 16); refuted: against the server p does not reduce epsilon (exact delta "
        "26x the claimed one in the paper's setting), and the proof's (A.1) is client level"
    ),
    "paper-theorem4": (
        "as printed (Eq. 19) on Corollary 1's per-round pair; strong composition is correct but its input "
        "is refuted"
    ),
    "paper-theorem3": (
        "as printed (Eq. 18) with the C.8 constant, at delta = delta_l (paper's asymptotic form); refuted: "
        "under-reports epsilon in 27 of 54 grid cases"
    ),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class MSPAFLAnalysis:
    """One analysis' (ε, δ), whether ampfl's checks let it stand for MS-PAFL (``sound``), and why."""

    epsilon: float
    delta: float
    sound: bool
    note: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MSPAFLAccount:
    """Result of :func:`account_ms_pafl`.

    Attributes:
        epsilon, delta: the recommended analysis (``analysis`` = ``"public-participation"``) after ``rounds``
            rounds (one round when ``rounds`` is None).
        accountant: ``"pld"`` or ``"rdp"`` (the recommended and ``amplified`` numbers).
        noise_multiplier: z = σ/C (the analyses' multiplier is σ/(2C) = z/2). noise_std: σ = C·z. clip: C.
        eps_local: ε_ℓ (given, or the one Lemma 1 assigns to σ).
        sampling_rate: q of Eq. (9). participation: p.
        analyses: every other analysis by name (see module docstring).
        epsilon_round, delta_round: Corollary 1 as printed (None when ε_ℓ > 1).
        epsilon_total, delta_total: Theorem 4 on Corollary 1 (None without ``rounds`` or when ε_ℓ > 1).
        epsilon_client_total: Theorem 3 with the C.8 constant at δ_ℓ (same conditions).
    """

    epsilon: float
    delta: float
    analysis: str
    accountant: str
    noise_multiplier: float
    noise_std: float
    clip: float
    eps_local: float
    sampling_rate: float
    participation: float
    rounds: int | None
    analyses: dict[str, MSPAFLAnalysis] = field(default_factory=dict)
    epsilon_round: float | None = None
    delta_round: float | None = None
    epsilon_total: float | None = None
    delta_total: float | None = None
    epsilon_client_total: float | None = None


def _noise(
    eps_local: float | None, noise_multiplier: float | None, delta_local: float
) -> tuple[float, float]:
    """(σ/(2C), ε_ℓ) from exactly one of ``eps_local`` and ``noise_multiplier`` (z = σ/C).

    The first is the analyses' noise multiplier, relative to the upload's sensitivity 2C: z/2.
    """
    if (eps_local is None) == (noise_multiplier is None):
        raise ValueError("exactly one of eps_local and noise_multiplier must be given.")
    if eps_local is not None:
        return ldp_noise_multiplier(eps_local=eps_local, delta_local=delta_local), float(eps_local)
    half = check_positive("noise_multiplier", noise_multiplier) / 2.0  # sensitivity 2C (Eq. C.3)
    return half, eps_local_from_noise_multiplier(noise_multiplier=half, delta_local=delta_local)


def account_ms_pafl(
    *,
    participation: float,
    delta_local: float,
    num_clients: int,
    beta: float,
    local_steps: int,
    batch_size: int,
    dataset_size: int,
    sampling: str,
    eps_local: float | None = None,
    noise_multiplier: float | None = None,
    rounds: int | None = None,
    delta_tilde: float | None = None,
    delta: float | None = None,
    clip: float = 1.0,
    accountant: str = "pld",
    private_state: str = "persistent",
) -> MSPAFLAccount:
    """Account MS-PAFL: the recommended ``public-participation`` ε at δ, plus every other analysis.

    Args:
        participation: check-in probability p in (0, 1] (Eq. 10).
        delta_local: δ_ℓ in (0, 1) of Lemma 1.
        num_clients, beta: N and β of Theorem 2 (δ' = 2 exp(−2β²N)).
        local_steps, batch_size, dataset_size, sampling: Q, b, |D_i| and ``"wor"``/``"wr"`` of Eq. (9).
        eps_local: ε_ℓ in (0, 1]; or give ``noise_multiplier`` instead.
        noise_multiplier: z = σ/C, the noise std over the clip norm (docs/units.md); the analyses use
            σ/(2C) = z/2, the upload's sensitivity being 2C.
        rounds: T (with ``delta_tilde``, both or neither); None means one round.
        delta_tilde: δ̃ of Theorem 4.
        delta: δ of the recommended, first-use and amplified ε. Default: the paper's δ at the same
            horizon, i.e. Corollary 1's δ_c for one round and Theorem 4's Tδ_c + δ̃ for ``rounds``.
        clip: C of Eq. (11) (default 1, as the paper); changes σ and Theorem 3, not any sound ε.
        accountant: ``"pld"`` (default) or ``"rdp"`` for the recommended and amplified analyses.
        private_state: ``"persistent"`` (Eq. 14, the paper) or ``"reset"`` (private submodel
            re-initialised every round: then ``amplified`` and Theorem 1 are flagged sound).

    Raises:
        ValueError: one line naming the parameter and its allowed range.
    """
    if (rounds is None) != (delta_tilde is None):
        raise ValueError("rounds and delta_tilde must be given together (both or neither).")
    p = check_probability("participation", participation)
    dl = check_delta("delta_local", delta_local)
    c = check_positive("clip", clip)
    check_choice("accountant", accountant, ("pld", "rdp"))
    state = check_choice("private_state", private_state, MS_PAFL_PRIVATE_STATES)
    q = sampling_rate(
        batch_size=batch_size, dataset_size=dataset_size, local_steps=local_steps, scheme=sampling
    )
    z_event, el = _noise(eps_local, noise_multiplier, dl)  # σ/(2C), the analyses' unit
    t = 1 if rounds is None else check_int("rounds", rounds)
    delta_c = theorem2_round_delta(
        participation=p, sampling_rate=q, delta_local=dl, num_clients=num_clients, beta=beta
    )
    if delta is None:  # the paper's delta at the same horizon (Cor. 1 for one round, Thm 4 for T rounds)
        dt = 0.0 if delta_tilde is None else check_delta("delta_tilde", delta_tilde)
        delta = t * delta_c + dt if rounds is not None else delta_c
        if delta >= 1.0:
            raise ValueError(
                f"delta must be given: the paper's T*delta_c + delta_tilde = {delta:.6g} is >= 1."
            )
    dlt = check_delta("delta", delta)

    eps_rec = public_participation_epsilon(
        participation=p, noise_multiplier=z_event, rounds=t, delta=dlt, accountant=accountant
    )
    analyses = {
        ANALYSIS_FIRST_USE: MSPAFLAnalysis(
            epsilon=first_use_epsilon(
                noise_multiplier=z_event, participation=p, sampling_rate=q, rounds=t, delta=dlt
            ),
            delta=dlt,
            sound=True,
            note=NOTE_FIRST_USE,
        ),
        ANALYSIS_AMPLIFIED: MSPAFLAnalysis(
            epsilon=amplified_epsilon(
                participation=p,
                sampling_rate=q,
                noise_multiplier=z_event,
                rounds=t,
                delta=dlt,
                accountant=accountant,
            ),
            delta=dlt,
            sound=state == "reset",
            note=NOTE_AMPLIFIED,
        ),
    }
    acc = MSPAFLAccount(
        epsilon=eps_rec,
        delta=dlt,
        analysis=ANALYSIS_PUBLIC_PARTICIPATION,
        accountant=accountant,
        noise_multiplier=2.0 * z_event,  # σ/C
        noise_std=2.0 * c * z_event,  # σ = 2C · σ/(2C)
        clip=c,
        eps_local=el,
        sampling_rate=q,
        participation=p,
        rounds=rounds,
        analyses=analyses,
    )
    if el > 1.0:  # Lemma 1 / Theorem 1 do not apply: the printed analyses are undefined
        return acc
    return _with_printed(
        acc, state=state, delta_local=dl, num_clients=num_clients, beta=beta, delta_tilde=delta_tilde
    )


def _with_printed(
    acc: MSPAFLAccount,
    *,
    state: str,
    delta_local: float,
    num_clients: int,
    beta: float,
    delta_tilde: float | None,
) -> MSPAFLAccount:
    """Add the paper's numbers (Thm 1, Cor. 1 and, with rounds, Thms 3–4) as printed, labelled."""
    p, q, el = acc.participation, acc.sampling_rate, acc.eps_local
    analyses = dict(acc.analyses)
    e1, d1 = theorem1_amplification(eps_local=el, delta_local=delta_local, sampling_rate=q)
    analyses["paper-theorem1"] = MSPAFLAnalysis(
        epsilon=e1, delta=d1, sound=state == "reset", note=PAPER_NOTES["paper-theorem1"]
    )
    eps_c, delta_c = theorem2_round_cdp(
        participation=p,
        sampling_rate=q,
        eps_local=el,
        delta_local=delta_local,
        num_clients=num_clients,
        beta=beta,
    )
    analyses["paper-corollary1"] = MSPAFLAnalysis(
        epsilon=eps_c, delta=delta_c, sound=False, note=PAPER_NOTES["paper-corollary1"]
    )
    out = dataclasses.replace(acc, epsilon_round=eps_c, delta_round=delta_c)
    if acc.rounds is None or delta_tilde is None:
        return dataclasses.replace(out, analyses=analyses)
    eps_total, delta_total = theorem4_strong_composition(
        epsilon_round=eps_c, delta_round=delta_c, rounds=acc.rounds, delta_tilde=delta_tilde
    )
    eps_client = theorem3_client_total(
        participation=p,
        sampling_rate=q,
        eps_local=el,
        delta_local=delta_local,
        rounds=acc.rounds,
        clip=acc.clip,
    )
    analyses["paper-theorem4"] = MSPAFLAnalysis(
        epsilon=eps_total, delta=delta_total, sound=False, note=PAPER_NOTES["paper-theorem4"]
    )
    analyses["paper-theorem3"] = MSPAFLAnalysis(
        epsilon=eps_client, delta=delta_local, sound=False, note=PAPER_NOTES["paper-theorem3"]
    )
    return dataclasses.replace(
        out,
        analyses=analyses,
        epsilon_total=eps_total,
        delta_total=delta_total,
        epsilon_client_total=eps_client,
    )
