"""Noise calibration of paper 002's mechanisms (:mod:`~ampfl.accounting.partition.mechanisms`): the one
:func:`ampfl.accounting.calibrate.calibrate` over the matching events (:class:`~ampfl.accounting.events.
ModelSplitEvent`, :class:`~ampfl.accounting.events.DropoutEvent`,
:class:`~ampfl.accounting.events.BalancedIterationSubsamplingEvent`: one whole epoch per event), on the RDP
accountant with :data:`~ampfl.accounting.partition.mechanisms.PARTITION_ORDERS`."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ampfl.accounting._checks import check_int, check_orders
from ampfl.accounting.calibrate import CALIBRATION_RTOL, calibrate
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    DropoutEvent,
    ModelSplitEvent,
    PrivacyEvent,
)
from ampfl.accounting.partition.mechanisms import PARTITION_ORDERS

__all__ = ["calibrate_bis", "calibrate_dropout", "calibrate_model_split"]


def _calibrated(
    make_event: Callable[[float], PrivacyEvent],
    count: int,
    target_epsilon: float,
    target_delta: float,
    orders: Iterable[object],
    rtol: float,
) -> float:
    """The smallest z whose ``count`` × ``make_event(z)`` meets the target on the RDP accountant at
    ``orders`` (the one :func:`~ampfl.accounting.calibrate.calibrate`)."""
    return calibrate(
        make_event,
        target_epsilon=target_epsilon,
        target_delta=target_delta,
        count=count,
        rtol=rtol,
        accountant_kwargs={"orders": tuple(int(a) for a in check_orders("orders", orders))},
    )


def calibrate_model_split(
    *,
    target_epsilon: float,
    target_delta: float,
    num_submodels: int,
    steps: int,
    orders: Iterable[object] = PARTITION_ORDERS,
    rtol: float = CALIBRATION_RTOL,
) -> float:
    """Smallest noise multiplier z = σ/C making ``steps`` Theorem 3.4 split steps (ε, δ)-DP.

    ``steps`` × :class:`~ampfl.accounting.events.ModelSplitEvent` through the RDP accountant (exact forward
    term). Raises :class:`~ampfl.accounting.calibrate.UnreachableTarget` when no z ≤ 1e4 meets the target.
    """
    d = check_int("num_submodels", num_submodels, minimum=1)

    def event(z: float) -> ModelSplitEvent:
        return ModelSplitEvent(num_submodels=d, noise_multiplier=z)

    count = check_int("steps", steps, minimum=1)
    return _calibrated(event, count, target_epsilon, target_delta, orders, rtol)


def calibrate_dropout(
    *,
    target_epsilon: float,
    target_delta: float,
    steps: int,
    orders: Iterable[object] = PARTITION_ORDERS,
    rtol: float = CALIBRATION_RTOL,
) -> float:
    """Smallest noise multiplier for ``steps`` Theorem 3.7 dropout steps (rate 1/2, split part only)."""
    count = check_int("steps", steps, minimum=1)
    return _calibrated(
        lambda z: DropoutEvent(noise_multiplier=z), count, target_epsilon, target_delta, orders, rtol
    )


def calibrate_bis(
    *,
    target_epsilon: float,
    target_delta: float,
    iterations: int,
    participations: int,
    epochs: int = 1,
    orders: Iterable[object] = PARTITION_ORDERS,
    rtol: float = CALIBRATION_RTOL,
) -> float:
    """Smallest noise multiplier making ``epochs`` Balanced Iteration Subsampling epochs (Thm 3.8) (ε, δ)-DP.

    One :class:`~ampfl.accounting.events.BalancedIterationSubsamplingEvent` is a whole epoch of T
    ``iterations``, so it is composed ``epochs`` times (Remark 3.10); exact forward term where affordable.
    """
    t = check_int("iterations", iterations, minimum=1)
    k = check_int("participations", participations, minimum=1, maximum=t)

    def event(z: float) -> BalancedIterationSubsamplingEvent:
        return BalancedIterationSubsamplingEvent(iterations=t, participations=k, noise_multiplier=z)

    count = check_int("epochs", epochs, minimum=1)
    return _calibrated(event, count, target_epsilon, target_delta, orders, rtol)
