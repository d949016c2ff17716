"""How many canaries an audit needs: the accounted ε forecast before training, and the count certifying it.

``canaries = "auto"`` (:func:`ampfl.fl.audit.run.audit_run`, ``ampfl audit run --canaries auto``): the run's ε
is forecast from the configured algorithm before any canary is planted (its calibrated noise, every round's
privacy events composed as the run composes them: they do not depend on the run's draws), and the count is
the smallest count of :data:`ampfl.accounting.audit.power.LADDER` whose planned ceiling (the bound with every
guess right, at coins as unbalanced as their 90 % two-sided quantile) reaches it at the audit's confidence,
runs and estimator (:mod:`ampfl.accounting.audit.power`). A count above ``max_canaries`` is refused in one
line naming what it would take; nothing is trained. A run without a guarantee (ε = ∞) is audited with
:data:`NO_GUARANTEE_CANARIES` canaries (capped at ``max_canaries``): any detection fails it, no ceiling is
needed. The verdict itself always uses the realised coins and the ε the run accounted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.config import RunConfig
    from ampfl.fl.privacy.run_accountant import RunAccountant

__all__ = ["NO_GUARANTEE_CANARIES", "check_requested", "forecast_epsilon", "resolve_canaries"]

#: Canaries of an ``"auto"`` audit of a run without a guarantee (ε = ∞).
NO_GUARANTEE_CANARIES = 500


def forecast_epsilon(config: RunConfig, algorithm: Algorithm, accountant: RunAccountant) -> float:
    """ε at the run's δ after ``config.rounds`` rounds of ``algorithm`` (calibrated; ``accountant`` fresh from
    :func:`ampfl.fl.run.experiment.build_calibrated`), ``inf`` without a guarantee."""
    if not accountant.private:
        return math.inf
    try:
        for r in range(config.rounds):
            accountant.compose(algorithm.round_events(r))
    except (ValueError, RuntimeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(
            f"canaries: 'auto' cannot forecast the accounted epsilon of {config.algorithm.name!r} ({first}); "
            "give a number of canaries."
        ) from None
    return float(accountant.epsilon())


def resolve_canaries(
    requested: int | str,
    *,
    max_canaries: int,
    epsilon: float,
    runs: int,
    delta: float,
    confidence: float,
    cuts: Sequence[float] | np.ndarray | None = None,
) -> int:
    """The canary count of an audit: ``requested`` itself, or for ``"auto"`` the planned count (module
    docstring); a ``ValueError`` naming the count it would need when that is above ``max_canaries``."""
    from ampfl.accounting.audit.power import MAX_CANARIES, canaries_needed

    if requested != "auto":
        return int(requested)
    if not math.isfinite(epsilon):
        return min(NO_GUARANTEE_CANARIES, max_canaries)
    found = canaries_needed(
        epsilon, runs=runs, delta=delta, confidence=confidence, maximum=max_canaries, cuts=cuts
    )
    if found is not None:
        return found
    more = canaries_needed(epsilon, runs=runs, delta=delta, confidence=confidence, cuts=cuts)
    need = f"{more} canaries" if more is not None else f"more than {MAX_CANARIES} canaries"
    raise ValueError(
        f"max_canaries: certifying the accounted epsilon {epsilon:.3g} at confidence {confidence:g} with "
        f"{runs} run(s) needs {need}, above max_canaries = {max_canaries}; raise it (at most {MAX_CANARIES}) "
        "or the runs, or give a number of canaries (the verdict will then say inconclusive)."
    )


def check_requested(canaries: int | str, max_canaries: int) -> None:
    """One-line errors for ``canaries`` (an integer in [2, 100000] or ``"auto"``) and ``max_canaries``."""
    from ampfl.accounting._checks import check_int
    from ampfl.accounting.audit.power import MAX_CANARIES

    check_int("max_canaries", max_canaries, minimum=2, maximum=MAX_CANARIES)
    if canaries != "auto":
        if isinstance(canaries, (str, bool)):
            raise ValueError(f"canaries must be an integer in [2, 100000] or 'auto'. Found {canaries!r}.")
        check_int("canaries", canaries, minimum=2, maximum=MAX_CANARIES)
