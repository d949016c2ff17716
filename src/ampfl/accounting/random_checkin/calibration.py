"""Noise calibration for 004 Algorithm 1: the smallest noise multiplier z = σ/C meeting a target (ε, δ).

Paper 004 (arXiv:2205.01556v1). Two routes (:func:`calibrate_noise_multiplier`):

* **per iteration, closed form** (``iterations=None`` and ``accountant=None``): the paper's own formulas
  (Thm 4.1, 5.1, 5.2, Cor. 5.3), searched by :func:`ampfl.accounting.calibrate.calibrate_decreasing` on the
  very δ(ε) that :func:`~ampfl.accounting.random_checkin.delta_per_iteration` reports (relative tolerance
  1e-6, rounded up). This reproduces 004 Section 6 (wcs σ = 7.665 and 0.8739, ols 22.50 and 1.1035).
* **events on an accountant** (``iterations`` T and/or ``accountant`` given) for wcs, ols and cs:
  :func:`ampfl.accounting.calibrate.calibrate` on T × the analysis' event (PLD by default). ``paper`` has no
  event; with ``iterations`` it is calibrated on its optimal (KOV) composition.

Either route raises :class:`~ampfl.accounting.calibrate.UnreachableTarget` (message containing "unreachable",
``smallest_epsilon`` the best ε certified) when no z up to :data:`NOISE_LIMITS` ``[1]`` meets the target.
z = 0.0 is returned when no noise is needed: the target δ is at least the probability that the record is
used at all (1 − (1 − r)^T with r = q for ols, pq otherwise), or, for ``paper`` only, when Thm 4.1's σ → 0
limit meets it (a refuted claim: warned with :data:`PAPER_NO_NOISE_NOTE`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

from ampfl.accounting._checks import check_choice, check_delta, check_int, check_positive
from ampfl.accounting.accountants import ACCOUNTANTS
from ampfl.accounting.calibrate import CALIBRATION_RTOL, UnreachableTarget, calibrate, calibrate_decreasing
from ampfl.accounting.random_checkin.analyses import (
    PAPER_NO_NOISE_NOTE,
    analysis_event,
    check_analysis,
    check_mechanism,
)
from ampfl.accounting.random_checkin.composition import paper_composed
from ampfl.accounting.random_checkin.per_iteration import log_delta, smallest_epsilon
from ampfl.accounting.random_checkin.theorem41 import paper_log_delta, paper_noiseless_log_delta

__all__ = ["NOISE_LIMITS", "calibrate_noise_multiplier"]

#: Search range of the noise multiplier (the upper end decides "unreachable").
NOISE_LIMITS = (1e-4, 1e6)


def calibrate_noise_multiplier(
    *,
    analysis: str,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    epsilon: float,
    delta: float,
    iterations: int | None = None,
    accountant: str | None = None,
) -> float:
    """Smallest noise multiplier z making 004 Algorithm 1 (ε, δ)-DP under ``analysis``.

    Args:
        analysis: ``paper``, ``wcs`` (recommended), ``ols`` or ``cs``.
        participation, sampling_rate, local_dataset_size: p, q, d of 004 Algorithm 1.
        epsilon, delta: the target; per iteration when ``iterations`` is ``None``, else for T iterations.
        iterations: T; ``None`` calibrates one iteration.
        accountant: ``"pld"`` or ``"rdp"`` for wcs/ols/cs (default ``"pld"`` when ``iterations`` is given);
            ``None`` with ``iterations=None`` uses the paper's per-iteration closed forms. ``paper`` ignores
            it (per-iteration closed form, or optimal composition with ``iterations``).

    Raises:
        UnreachableTarget: no z up to ``NOISE_LIMITS[1]`` meets the target.
    """
    name = check_analysis(analysis)
    p, q, d = check_mechanism(participation, sampling_rate, local_dataset_size)
    eps = check_positive("epsilon", epsilon)
    dlt = check_delta("delta", delta)
    t = None if iterations is None else check_int("iterations", iterations, minimum=1)
    kind = None if accountant is None else check_choice("accountant", accountant, ACCOUNTANTS)
    rate = q if name == "ols" else p * q
    used = 1.0 if rate == 1.0 else -math.expm1((t or 1) * math.log1p(-rate))  # P(the record is used)
    if dlt >= used:
        return 0.0  # (ε, δ)-DP without any noise, under every analysis
    if name == "paper" and t is not None:
        return _paper_composed_noise(p, q, d, eps, dlt, t)
    if t is None and (kind is None or name == "paper"):  # Thm 4.1 has no event: closed form only
        return _closed_form_noise(name, p, q, d, eps, dlt)
    kind = kind or "pld"

    def make_event(z: float) -> object:
        return analysis_event(
            name, participation=p, sampling_rate=q, noise_multiplier=z, local_dataset_size=d
        )

    return calibrate(
        make_event,
        target_epsilon=eps,
        target_delta=dlt,
        accountant=kind,
        count=t or 1,
        upper=NOISE_LIMITS[1],
    )


def _closed_form_noise(name: str, p: float, q: float, d: int, eps: float, dlt: float) -> float:
    """Per-iteration calibration on the printed δ(ε) of ``name`` (tolerance 1e-6 relative, rounded up)."""
    target = math.log(dlt)
    if name == "paper":
        # Eq. 28 falls as σ grows, so if its σ → 0 limit meets the target Thm 4.1 claims no noise is needed.
        if paper_noiseless_log_delta(p, q, d, eps) <= target:
            warnings.warn(PAPER_NO_NOISE_NOTE, UserWarning, stacklevel=3)
            return 0.0
        # δ_paper ≤ δ_wcs (004 A.3), so the wcs multiplier meets the target and starts the search.
        initial = _closed_form_noise("wcs", p, q, d, eps, dlt)
    else:
        rate = q if name == "ols" else p * q
        initial = math.sqrt(2.0 * math.log(1.25 * rate / dlt)) / math.log1p(math.expm1(eps) / rate)
    return _search(
        lambda z: log_delta(name, p, q, d, z, eps),
        target,
        initial=initial,
        rtol=1e-6,
        floor=lambda z: smallest_epsilon(lambda e: log_delta(name, p, q, d, z, e), target),
        what=f"per-iteration epsilon the {name} analysis (closed form)",
        eps=eps,
        dlt=dlt,
    )


def _paper_composed_noise(p: float, q: float, d: int, eps: float, dlt: float, t: int) -> float:
    """Calibration of Thm 4.1 composed over T iterations by optimal composition (a refuted bound)."""
    noiseless = paper_composed(lambda e0: paper_noiseless_log_delta(p, q, d, e0), t, delta=dlt)
    if noiseless <= eps:
        warnings.warn(PAPER_NO_NOISE_NOTE, UserWarning, stacklevel=3)
        return 0.0

    def composed(z: float) -> float:
        return paper_composed(lambda e0: paper_log_delta(p, q, d, z, e0)[0], t, delta=dlt)

    return _search(
        composed,
        eps,
        initial=1.0,
        rtol=CALIBRATION_RTOL,
        floor=composed,
        what=f"epsilon Thm 4.1 composed over {t} iterations",
        eps=eps,
        dlt=dlt,
    )


def _search(
    f: Callable[[float], float],
    target: float,
    *,
    initial: float,
    rtol: float,
    floor: Callable[[float], float],
    what: str,
    eps: float,
    dlt: float,
) -> float:
    """:func:`calibrate_decreasing` on ``f`` over :data:`NOISE_LIMITS`, re-raising an unreachable target
    with the smallest ε certified (``floor`` at the upper limit)."""
    lower, upper = NOISE_LIMITS
    try:
        return calibrate_decreasing(
            f,
            target,
            name="noise_multiplier",
            initial=min(max(initial, lower), upper),
            lower_limit=lower,
            upper_limit=upper,
            rtol=rtol,
        )
    except UnreachableTarget:
        smallest = floor(upper)
        raise UnreachableTarget(
            f"target epsilon {eps:g} at delta {dlt:g} is unreachable: the smallest {what} certifies "
            f"(noise multiplier up to {upper:g}) is {smallest:.6g}.",
            smallest_epsilon=smallest,
        ) from None
