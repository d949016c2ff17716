"""Random check-in with local sampling (paper 004): per-iteration δ(ε), composition, noise calibration.

Paper 004: B. Hasırcıoğlu & D. Gündüz, "Privacy Amplification via Random Participation in Federated
Learning", arXiv:2205.01556v1. Mechanism (Algorithm 1, Eq. 4): in each iteration every client joins with
probability p; a joining client includes each of its records with probability q (both Poisson, independent);
each record's gradient is clipped to L2 norm C; the server releases Σ (clipped gradients) + N(0, σ² I_m).
Unit of privacy: one record. Neighbouring relation: add/remove one record x′ at one client (client 1 holds d
other records). Both directions are needed for add/remove DP; the paper's proof treats only "with x′ vs
without" (A.1, "without loss of generality").

Names (docs/units.md): p = ``participation``, q = ``sampling_rate``, d = ``local_dataset_size``,
σ/C = ``noise_multiplier`` (the paper's σ in units of the clip norm; nothing here depends on C otherwise),
T = ``iterations``; ε in nats. One iteration as an event:
:class:`~ampfl.accounting.events.RandomCheckInEvent`.

The four analyses (:data:`ANALYSES`; :data:`SOUND` says which are upper bounds, :data:`NOTES` labels them):

* ``paper`` — Thm 4.1 as printed (Eq. 5–7, :mod:`.theorem41`). Eq. 6 is the exact δ of ONE explicit
  dataset (every other record of client 1 has x′'s gradient, "a = 1"); the reduction to it (A.1, Eq. 27) is
  unproven and false (docs/audit.md), so it is reported, labelled ``sound: false``, never recommended.
  Composed by optimal composition (Kairouz–Oh–Viswanath 2015). Provenance: [V] formula, [X] as a bound.
* ``wcs`` — Thm 5.2, :data:`RECOMMENDED_ANALYSIS`. Per iteration δ = pq·δ_G(ε″) as printed; composed as
  T × ``RandomCheckInEvent``, dominated by PublicParticipation(p, PoissonSampled(q, Gaussian(z))), on the
  PLD (default) or RDP accountant. Sound (participation revealed: post-processing in reverse). [V]
* ``ols`` — Thm 5.1: a q-subsampled Gaussian, participation ignored; sound, looser than wcs. [V]
* ``cs`` — Cor. 5.3: a pq-subsampled Gaussian. It describes central sampling, another mechanism; here it is
  the exact δ of the dataset a = 0, a LOWER bound for random check-in (``sound: false``).

Hidden participation: ``RandomCheckInEvent.participation_hidden`` (default True: the observer
sees the released sums only, 004 §3.1) lets the PLD accountant compose the empty-sample refinement of the
``wcs`` pair (:mod:`.pld_pairs`, never looser) and, as a second composition, the per-count noise split
(:mod:`.count_split`; splits chosen at the refinement's one-round ε(1e-5)), reporting the smaller ε;
:func:`.pld_pairs.best_hidden_epsilon` also tries a second choice of splits. The ``wcs`` analysis keeps
Thm 5.2's meaning (its event sets ``participation_hidden=False``).

Modules: :mod:`.analyses` (catalogue, events), :mod:`.theorem41`, :mod:`.per_iteration` (closed forms),
:mod:`.composition` (T iterations), :mod:`.calibration`, :mod:`.pld_pairs` and :mod:`.count_split` (PLD
pairs for hidden participation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ampfl.accounting._lazy import lazy_attributes

if TYPE_CHECKING:  # the names below are loaded on first use (PEP 562): importing the package (the
    # simulator's algorithms, a Flower ClientApp) must not import SciPy through the analyses it does not use
    from ampfl.accounting.events import RandomCheckInEvent
    from ampfl.accounting.random_checkin.analyses import (
        ANALYSES,
        COMPOSITION_METHODS,
        EVENT_ANALYSES,
        NOTES,
        PAPER_NO_NOISE_NOTE,
        RECOMMENDED_ANALYSIS,
        SOUND,
        analysis_event,
    )
    from ampfl.accounting.random_checkin.calibration import NOISE_LIMITS, calibrate_noise_multiplier
    from ampfl.accounting.random_checkin.composition import (
        composed_accountant,
        delta_composed,
        epsilon_composed,
    )
    from ampfl.accounting.random_checkin.per_iteration import (
        delta_per_iteration,
        epsilon_per_iteration,
        log_delta_per_iteration,
    )
    from ampfl.accounting.random_checkin.theorem41 import (
        PaperTerms,
        eq28_delta,
        paper_noiseless_delta,
        paper_terms,
    )

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "RandomCheckInEvent": "ampfl.accounting.events",
    "ANALYSES": "ampfl.accounting.random_checkin.analyses",
    "COMPOSITION_METHODS": "ampfl.accounting.random_checkin.analyses",
    "EVENT_ANALYSES": "ampfl.accounting.random_checkin.analyses",
    "NOTES": "ampfl.accounting.random_checkin.analyses",
    "PAPER_NO_NOISE_NOTE": "ampfl.accounting.random_checkin.analyses",
    "RECOMMENDED_ANALYSIS": "ampfl.accounting.random_checkin.analyses",
    "SOUND": "ampfl.accounting.random_checkin.analyses",
    "analysis_event": "ampfl.accounting.random_checkin.analyses",
    "NOISE_LIMITS": "ampfl.accounting.random_checkin.calibration",
    "calibrate_noise_multiplier": "ampfl.accounting.random_checkin.calibration",
    "composed_accountant": "ampfl.accounting.random_checkin.composition",
    "delta_composed": "ampfl.accounting.random_checkin.composition",
    "epsilon_composed": "ampfl.accounting.random_checkin.composition",
    "delta_per_iteration": "ampfl.accounting.random_checkin.per_iteration",
    "epsilon_per_iteration": "ampfl.accounting.random_checkin.per_iteration",
    "log_delta_per_iteration": "ampfl.accounting.random_checkin.per_iteration",
    "PaperTerms": "ampfl.accounting.random_checkin.theorem41",
    "eq28_delta": "ampfl.accounting.random_checkin.theorem41",
    "paper_noiseless_delta": "ampfl.accounting.random_checkin.theorem41",
    "paper_terms": "ampfl.accounting.random_checkin.theorem41",
}

__all__ = [
    "ANALYSES",
    "COMPOSITION_METHODS",
    "EVENT_ANALYSES",
    "NOISE_LIMITS",
    "NOTES",
    "PAPER_NO_NOISE_NOTE",
    "RECOMMENDED_ANALYSIS",
    "SOUND",
    "PaperTerms",
    "RandomCheckInEvent",
    "analysis_event",
    "calibrate_noise_multiplier",
    "composed_accountant",
    "delta_composed",
    "delta_per_iteration",
    "epsilon_composed",
    "epsilon_per_iteration",
    "eq28_delta",
    "log_delta_per_iteration",
    "paper_noiseless_delta",
    "paper_terms",
]

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, public=__all__)
