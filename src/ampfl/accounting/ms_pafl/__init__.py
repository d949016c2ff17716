"""MS-PAFL privacy accounting (paper 000: Li, Wang, Tian, Wang, Su, "Federated Learning with Enhanced Privacy
via Model Splitting and Random Client Participation", arXiv:2509.25906v1).

Record level, against the server (it sees each noisy upload and who sent it). Modules:

* :mod:`~ampfl.accounting.ms_pafl.public_participation` — the **recommended** analysis
  (``public-participation``): sound with the persistent private submodel of Eq. 14; each participated round
  is a Gaussian mechanism with sensitivity 2C and noise multiplier z = σ/(2C), participation public; computed
  by composing :class:`~ampfl.accounting.events.MSPAFLRoundEvent` on the PLD or RDP accountant.
* :mod:`~ampfl.accounting.ms_pafl.first_use` — a tighter sound bound (``first-use``), closed form.
* :mod:`~ampfl.accounting.ms_pafl.amplified` — amplification by local subsampling (``amplified``, formerly
  "tight"): valid only when the private part carries no information from earlier rounds.
* :mod:`~ampfl.accounting.ms_pafl.printed` — Eq. (9), Lemma 1, Theorems 1–4 / Corollary 1 as printed.
* :mod:`~ampfl.accounting.ms_pafl.account` — :func:`account_ms_pafl`, all of the above in one call.

Units: the analyses' ``noise_multiplier`` (as :class:`~ampfl.accounting.events.MSPAFLRoundEvent`'s) is
σ/(2C) with Lemma 1's σ; the 2C is the L2 sensitivity of the clipped upload (‖ŵ_{i,p}‖ ≤ C, Eq. 11) to any
change of the local dataset. :func:`account_ms_pafl`, ``ampfl account ms-pafl`` and the simulator's
``[algorithm] noise_multiplier`` take and report z = σ/C (std / clip norm, docs/units.md) and convert.
ε in nats. Findings: ``docs/ms_pafl.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ampfl.accounting._lazy import lazy_attributes

if TYPE_CHECKING:  # the names below are loaded on first use (PEP 562): importing the package (the
    # simulator's algorithms, a Flower ClientApp) must not import SciPy through the analyses it does not use
    from ampfl.accounting.ms_pafl.account import PAPER_NOTES, MSPAFLAccount, MSPAFLAnalysis, account_ms_pafl
    from ampfl.accounting.ms_pafl.amplified import (
        ANALYSIS_AMPLIFIED,
        NOTE_AMPLIFIED,
        amplified_accountant,
        amplified_delta,
        amplified_epsilon,
        amplified_event,
        amplified_round_log_delta,
    )
    from ampfl.accounting.ms_pafl.first_use import (
        ANALYSIS_FIRST_USE,
        NOTE_FIRST_USE,
        first_use_delta,
        first_use_epsilon,
        first_use_log_delta,
        first_use_weights,
    )
    from ampfl.accounting.ms_pafl.printed import (
        SAMPLING_SCHEMES,
        eps_local_from_noise_multiplier,
        hoeffding_delta,
        ldp_noise_multiplier,
        ldp_sigma,
        sampling_rate,
        theorem1_amplification,
        theorem2_round_cdp,
        theorem2_round_delta,
        theorem3_client_total,
        theorem3_constant,
        theorem4_strong_composition,
    )
    from ampfl.accounting.ms_pafl.public_participation import (
        ANALYSIS_PUBLIC_PARTICIPATION,
        NOTE_PUBLIC_PARTICIPATION,
        public_participation_accountant,
        public_participation_delta,
        public_participation_epsilon,
        round_event,
    )

    RECOMMENDED = ANALYSIS_PUBLIC_PARTICIPATION

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "PAPER_NOTES": "ampfl.accounting.ms_pafl.account",
    "MSPAFLAccount": "ampfl.accounting.ms_pafl.account",
    "MSPAFLAnalysis": "ampfl.accounting.ms_pafl.account",
    "account_ms_pafl": "ampfl.accounting.ms_pafl.account",
    "ANALYSIS_AMPLIFIED": "ampfl.accounting.ms_pafl.amplified",
    "NOTE_AMPLIFIED": "ampfl.accounting.ms_pafl.amplified",
    "amplified_accountant": "ampfl.accounting.ms_pafl.amplified",
    "amplified_delta": "ampfl.accounting.ms_pafl.amplified",
    "amplified_epsilon": "ampfl.accounting.ms_pafl.amplified",
    "amplified_event": "ampfl.accounting.ms_pafl.amplified",
    "amplified_round_log_delta": "ampfl.accounting.ms_pafl.amplified",
    "ANALYSIS_FIRST_USE": "ampfl.accounting.ms_pafl.first_use",
    "NOTE_FIRST_USE": "ampfl.accounting.ms_pafl.first_use",
    "first_use_delta": "ampfl.accounting.ms_pafl.first_use",
    "first_use_epsilon": "ampfl.accounting.ms_pafl.first_use",
    "first_use_log_delta": "ampfl.accounting.ms_pafl.first_use",
    "first_use_weights": "ampfl.accounting.ms_pafl.first_use",
    "SAMPLING_SCHEMES": "ampfl.accounting.ms_pafl.printed",
    "eps_local_from_noise_multiplier": "ampfl.accounting.ms_pafl.printed",
    "hoeffding_delta": "ampfl.accounting.ms_pafl.printed",
    "ldp_noise_multiplier": "ampfl.accounting.ms_pafl.printed",
    "ldp_sigma": "ampfl.accounting.ms_pafl.printed",
    "sampling_rate": "ampfl.accounting.ms_pafl.printed",
    "theorem1_amplification": "ampfl.accounting.ms_pafl.printed",
    "theorem2_round_cdp": "ampfl.accounting.ms_pafl.printed",
    "theorem2_round_delta": "ampfl.accounting.ms_pafl.printed",
    "theorem3_client_total": "ampfl.accounting.ms_pafl.printed",
    "theorem3_constant": "ampfl.accounting.ms_pafl.printed",
    "theorem4_strong_composition": "ampfl.accounting.ms_pafl.printed",
    "ANALYSIS_PUBLIC_PARTICIPATION": "ampfl.accounting.ms_pafl.public_participation",
    "NOTE_PUBLIC_PARTICIPATION": "ampfl.accounting.ms_pafl.public_participation",
    "public_participation_accountant": "ampfl.accounting.ms_pafl.public_participation",
    "public_participation_delta": "ampfl.accounting.ms_pafl.public_participation",
    "public_participation_epsilon": "ampfl.accounting.ms_pafl.public_participation",
    "round_event": "ampfl.accounting.ms_pafl.public_participation",
}
#: Public aliases: name -> the exported name it stands for.
_ALIASES: dict[str, str] = {"RECOMMENDED": "ANALYSIS_PUBLIC_PARTICIPATION"}

__all__ = [
    "ANALYSIS_AMPLIFIED",
    "ANALYSIS_FIRST_USE",
    "ANALYSIS_PUBLIC_PARTICIPATION",
    "NOTE_AMPLIFIED",
    "NOTE_FIRST_USE",
    "NOTE_PUBLIC_PARTICIPATION",
    "PAPER_NOTES",
    "RECOMMENDED",
    "SAMPLING_SCHEMES",
    "MSPAFLAccount",
    "MSPAFLAnalysis",
    "account_ms_pafl",
    "amplified_accountant",
    "amplified_delta",
    "amplified_epsilon",
    "amplified_event",
    "amplified_round_log_delta",
    "eps_local_from_noise_multiplier",
    "first_use_delta",
    "first_use_epsilon",
    "first_use_log_delta",
    "first_use_weights",
    "hoeffding_delta",
    "ldp_noise_multiplier",
    "ldp_sigma",
    "public_participation_accountant",
    "public_participation_delta",
    "public_participation_epsilon",
    "round_event",
    "sampling_rate",
    "theorem1_amplification",
    "theorem2_round_cdp",
    "theorem2_round_delta",
    "theorem3_client_total",
    "theorem3_constant",
    "theorem4_strong_composition",
]

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, aliases=_ALIASES, public=__all__)
