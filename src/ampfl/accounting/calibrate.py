"""Noise calibration: :func:`calibrate` (any event family, any accountant) over the kernel
:func:`calibrate_decreasing` (STYLE.md rule 11), whose search core is
:func:`ampfl.accounting._numerics.smallest_feasible` (below every analysis: ``gaussian.py`` uses it too).

:func:`calibrate_decreasing` finds the smallest parameter value ``x`` (typically a noise multiplier) such
that a privacy-loss function ``f(x)`` that decreases in ``x`` is at most a target. It searches in log space,
expands the bracket geometrically, refines by bisection on ``log f``, and re-checks the result so that the
returned ``x`` always satisfies ``f(x) <= target`` (it errs towards more noise, never less).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ampfl.accounting._checks import NumericalError, check_delta, check_int, check_positive
from ampfl.accounting._numerics import UnreachableTarget, smallest_feasible

__all__ = ["CALIBRATION_RTOL", "UnreachableTarget", "calibrate", "calibrate_decreasing"]

#: Relative distance of a calibrated noise multiplier from the smallest one that meets the target.
CALIBRATION_RTOL = 0.004


def calibrate(
    make_event: Callable[[float], Any],
    *,
    target_epsilon: float,
    target_delta: float,
    accountant: str = "rdp",
    count: int = 1,
    lower: float = 1e-3,
    upper: float = 1e4,
    initial: float = 1.0,
    rtol: float = CALIBRATION_RTOL,
    accountant_kwargs: dict[str, Any] | None = None,
    step: float = 2.0,
) -> float:
    """Smallest noise multiplier z (to ``rtol``) whose ``count``-fold ``make_event(z)`` is (ε, δ)-DP.

    The returned z is accounted by a fresh accountant of kind ``accountant`` at ε ≤ ``target_epsilon``
    (re-checked), and z ≤ (1 + ``rtol``)·z* where z* is the smallest multiplier the accountant accepts
    (the default keeps it within 0.5%). ε must not increase with z (true of every event family here).
    ``step`` is the factor of the bracket search around ``initial``: pass a small one (e.g. 1.03) with a good
    guess to save probes; the answer is the same to ``rtol`` either way.

    Raises:
        UnreachableTarget: when even ``upper`` does not meet the target; the message says "unreachable" and
            names the smallest ε the accountant certifies in the range (``.smallest_epsilon``).
    """
    from ampfl.accounting.accountants import make_accountant
    from ampfl.accounting.accountants.pld import PLD_DISCRETIZATION

    eps = check_positive("target_epsilon", target_epsilon)
    dlt = check_delta("target_delta", target_delta)
    n = check_int("count", count, minimum=1)
    kwargs = dict(accountant_kwargs or {})

    def probe(settings: dict[str, Any]) -> Callable[[float], float]:
        memo: dict[float, float] = {}

        def value(z: float) -> float:
            if z not in memo:
                acc = make_accountant(accountant, **settings)
                acc.compose(make_event(z), n)
                memo[z] = float(acc.get_epsilon(dlt))
            return memo[z]

        return value

    loss = probe(kwargs)
    coarse_loss: Callable[[float], float] | None = None
    if accountant == "pld" and "value_discretization_interval" not in kwargs:
        # Coarse to fine: a 10× coarser (still pessimistic) PLD finds the noise to 2%; the fine − coarse gap
        # shifts the coarse curve onto the fine one (_offset_guess: 3–5 fine probes), else the fine
        # accountant brackets it within 5% and bisects; the answer is the fine accountant's (sound, within
        # rtol).
        coarse_loss = probe(
            {**kwargs, "value_discretization_interval": 10 * PLD_DISCRETIZATION, "refine": False}
        )

    def unreachable() -> UnreachableTarget:
        floor = loss(upper)
        return UnreachableTarget(
            f"target epsilon {eps:g} at delta {dlt:g} is unreachable: the smallest epsilon the {accountant} "
            f"accountant certifies (noise multiplier up to {upper:g}) is {floor:.6g}.",
            smallest_epsilon=floor,
        )

    # The floor first, unless the coarse grid already meets the target there (the fine one at the largest
    # noise refines down to its finest grid: 0.1 s for nothing in the usual case).
    if not (coarse_loss is not None and coarse_loss(upper) <= eps) and not loss(upper) <= eps:
        raise unreachable()
    if not step > 1.0:
        raise ValueError(f"step must be > 1. Found {step}.")
    try:
        return _search(loss, coarse_loss, eps, lower, upper, initial, rtol, step)
    except UnreachableTarget:  # the fine accountant misses where the coarse one met the target
        raise unreachable() from None


def _search(
    loss: Callable[[float], float],
    coarse_loss: Callable[[float], float] | None,
    eps: float,
    lower: float,
    upper: float,
    initial: float,
    rtol: float,
    step: float,
) -> float:
    if coarse_loss is not None:
        try:
            initial = calibrate_decreasing(
                coarse_loss, eps, initial=initial, lower_limit=lower, upper_limit=upper, rtol=0.02
            )
            step = 1.05
            guess = _offset_guess(loss, coarse_loss, eps, initial, lower, upper, rtol)
            if guess is not None:
                return guess
        except NumericalError:  # the coarse grid could not answer: search with the fine one alone
            pass
    z = calibrate_decreasing(
        loss, eps, initial=initial, lower_limit=lower, upper_limit=upper, rtol=rtol, step=step
    )
    if not loss(z) <= eps:  # pragma: no cover - calibrate_decreasing re-checks already
        raise NumericalError("calibration re-check failed: the accountant is not monotone in the noise.")
    return z


def _offset_guess(
    loss: Callable[[float], float],
    coarse_loss: Callable[[float], float],
    eps: float,
    z_coarse: float,
    lower: float,
    upper: float,
    rtol: float,
    tries: int = 3,
) -> float | None:
    """A few fine probes instead of a fine search: the fine − coarse gap at ``z_coarse`` shifts the (cheap)
    coarse curve onto the fine one, whose root is then bracketed by two fine probes ``rtol`` apart. The gap
    drifts with z (the grids' pessimism does), so a missed bracket re-measures it at the probe nearest the
    target and predicts again (up to ``tries`` times; 3 fine probes when the first prediction holds).

    Returns z with loss(z) ≤ eps < loss(z / (1 + rtol)) (the guarantee of :func:`calibrate_decreasing`), or
    ``None`` when the predictions miss (the caller then searches as before, reusing the probes).
    """
    z = z_coarse
    for _ in range(tries):
        offset = coarse_loss(z) - loss(z)
        try:
            pred = calibrate_decreasing(
                partial(_shifted, coarse_loss, offset),
                eps,
                initial=z,
                lower_limit=lower,
                upper_limit=upper,
                rtol=rtol / 4.0,
                step=1.02,
            )
        except NumericalError:
            return None
        hi = min(upper, pred * (1.0 + rtol / 2.0))
        if loss(hi) > eps:
            z = hi
        elif loss(hi / (1.0 + rtol)) > eps:
            return hi
        else:
            z = hi / (1.0 + rtol)
    return None


def _shifted(f: Callable[[float], float], offset: float, x: float) -> float:
    return f(x) - offset


#: The calibration kernel: the smallest ``x`` with ``f(x) <= target`` for a non-increasing ``f``. One
#: implementation, documented where it is defined (:func:`ampfl.accounting._numerics.smallest_feasible`,
#: which ``gaussian.py`` calls directly, below the accountants).
calibrate_decreasing = smallest_feasible
