"""The same mechanism accounted with no amplification: every source of randomness assumed away.

Each paper's amplification comes from randomness the analysis may use: which clients take part (000 Eq. 10,
004 Algorithm 1, 001's group sampling), which records a step uses (Poisson or without-replacement subsampling,
BIS, 002 Thm 3.8), which part of the model a step touches (002 Thms 3.1–3.6). :func:`without_amplification`
maps an event to the bound that uses none of it: the record is assumed used, and observed, in every step its
event covers, so only the Gaussian noise protects it (for the noise multiplier at the event's own
sensitivity). This is the baseline "how much noise would the same guarantee need without amplification"
against which ``ampfl demo`` measures what amplification buys, and ``[privacy] accounting =
"no-amplification"`` of a run.

Soundness: each mapping drops a mixture (or a sampling step) whose privacy loss is dominated by the inner
mechanism run on the record — a Gaussian with the same noise multiplier at the same sensitivity — so the
unamplified event is never *less* private than the original's worst case; it is the classic upper bound.
Events whose only protection is randomness (PM-SFL's Bernoulli masks, 003) have no unamplified guarantee and
raise ``ValueError``.
"""

from __future__ import annotations

from ampfl.accounting.events import PrivacyEvent
from ampfl.accounting.mechanisms import lookup

__all__ = ["ACCOUNTING_MODES", "without_amplification"]

#: ``[privacy] accounting`` of a run and the ``accounting`` key of its results.
ACCOUNTING_MODES = ("amplified", "no-amplification")


def without_amplification(event: PrivacyEvent) -> PrivacyEvent:
    """``event`` with every sampling, participation and split amplification removed (module docstring): its
    registry entry's ``unamplified`` (:mod:`ampfl.accounting.mechanisms`).

    Raises:
        ValueError: one line naming the event when it has no guarantee without its randomness.
    """
    bound = lookup(event).unamplified
    if bound is None:
        raise ValueError(
            f"accounting: {type(event).__name__} has no guarantee without its randomness; "
            f"use accounting = 'amplified'."
        )
    return bound(event, recurse=without_amplification)  # type: ignore[no-any-return]
