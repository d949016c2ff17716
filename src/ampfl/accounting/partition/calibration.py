"""Noise calibration of paper 002's mechanisms (:mod:`~ampfl.accounting.partition.mechanisms`): the one
:func:`ampfl.accounting.calibrate.calibrate` over the matching events (:class:`~ampfl.accounting.events.
ModelSplitEvent`, :class:`~ampfl.accounting.events.DropoutEvent`,
:class:`~ampfl.accounting.events.BalancedIterationSubsamplingEvent`: one whole epoch per event), on the RDP
accountant with :data:`~ampfl.accounting.partition.mechanisms.PARTITION_ORDERS`."""

from __future__ import annotations

from collections.abc import Iterable

from ampfl.accounting._checks import check_int, check_orders
from ampfl.accounting.calibrate import CALIBRATION_RTOL, calibrate
from ampfl.accounting.events import BalancedIterationSubsamplingEvent, DropoutEvent, ModelSplitEvent
from ampfl.accounting.partition.mechanisms import PARTITION_ORDERS

__all__ = ["calibrate_bis", "calibrate_dropout", "calibrate_model_split"]


def _orders_kwargs(orders: Iterable[object]) -> dict[str, object]:
    return {"orders": _orders(orders)}


def _orders(orders: Iterable[object]) -> tuple[int, ...]:
    return tuple(int(a) for a in check_orders("orders", orders))


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
    return calibrate(
        lambda z: ModelSplitEvent(num_submodels=d, noise_multiplier=z),
        target_epsilon=target_epsilon,
        target_delta=target_delta,
        count=check_int("steps", steps, minimum=1),
        rtol=rtol,
        accountant_kwargs=_orders_kwargs(orders),
    )


def calibrate_dropout(
    *,
    target_epsilon: float,
    target_delta: float,
    steps: int,
    orders: Iterable[object] = PARTITION_ORDERS,
    rtol: float = CALIBRATION_RTOL,
) -> float:
    """Smallest noise multiplier for ``steps`` Theorem 3.7 dropout steps (rate 1/2, split part only)."""
    return calibrate(
        lambda z: DropoutEvent(noise_multiplier=z),
        target_epsilon=target_epsilon,
        target_delta=target_delta,
        count=check_int("steps", steps, minimum=1),
        rtol=rtol,
        accountant_kwargs=_orders_kwargs(orders),
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
    return calibrate(
        lambda z: BalancedIterationSubsamplingEvent(iterations=t, participations=k, noise_multiplier=z),
        target_epsilon=target_epsilon,
        target_delta=target_delta,
        count=check_int("epochs", epochs, minimum=1),
        rtol=rtol,
        accountant_kwargs=_orders_kwargs(orders),
    )
