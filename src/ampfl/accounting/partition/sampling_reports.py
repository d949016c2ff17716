"""Reports of Balanced Iteration Subsampling and of the Poisson-subsampled Gaussian (paper 002): what
``ampfl account|calibrate bis|poisson`` print. The common parts and the model-split reports:
:mod:`ampfl.accounting.partition.reports`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ampfl.accounting._checks import check_delta, check_int, check_positive, check_probability
from ampfl.accounting.accountants import composed, epsilon_after
from ampfl.accounting.partition.reports import (
    calibrated,
    entry,
    gaussian,
    orders_or,
    partition_orders,
    poisson,
    positive_or_none,
    rdp_curve,
    rdp_epsilon,
    rdp_report,
    resolved,
)
from ampfl.accounting.report import privacy_report

_BIS_NOTES = {
    "rdp": "002 Thm 3.8 RDP bound of the same mechanism (sound, looser)",
    "poisson": "another sampling scheme, for comparison: Poisson at rate k/T over the same T steps (PLD)",
}


def _bis_setup(
    iterations: int,
    participations: int,
    epochs: int,
    delta: float,
    clip: float | None,
    orders: Sequence[int] | None,
    bound: str,
) -> tuple[int, int, int, float, float | None, tuple[int, ...], str]:
    """(T, k, E, δ, C, orders, bound) of a BIS report, checked; ``bound`` resolved (002 Thm 3.8's forward
    term: exact where affordable)."""
    from ampfl.accounting.partition import resolve_bound

    t = check_int("iterations", iterations, minimum=1)
    k = check_int("participations", participations, minimum=1, maximum=t)
    e, dlt = check_int("epochs", epochs, minimum=1), check_delta("delta", delta)
    clip = positive_or_none(clip, "clip")
    grid = partition_orders(orders)
    return t, k, e, dlt, clip, grid, resolve_bound(bound, d=t, k=k, max_order=max(grid))


def _bis_events(t: int, k: int) -> dict[str, tuple[str, Callable[[float], Any], int]]:
    """name → (accountant, event family, events per epoch) of the BIS PLD report's analyses."""
    from ampfl.accounting.events import BalancedIterationSubsamplingEvent

    def bis(x: float) -> Any:
        return BalancedIterationSubsamplingEvent(iterations=t, participations=k, noise_multiplier=x)

    return {
        "random-allocation-pld": ("pld", bis, 1),
        "rdp": ("rdp", bis, 1),
        "no-amplification": ("pld", gaussian, k),
        "poisson": ("pld", lambda x: poisson(k / t, x), t),
    }


def _bis_pld_report(
    t: int, k: int, epochs: int, delta: float, z: float, clip: float | None, zs: Any = None, **extra: Any
) -> dict[str, Any]:
    """The BIS PLD report at noise ``z``; ``zs`` (calibrate): name → calibrated z or its UnreachableTarget."""
    entries = {}
    for name, (acc, make, per_epoch) in _bis_events(t, k).items():
        z_name = zs[name] if zs is not None and isinstance(zs[name], float) else z
        eps = epsilon_after(make(z_name), per_epoch * epochs, delta, acc)
        entries[name] = entry(name, eps, delta, None if zs is None else zs[name])
        entries[name]["note"] = _BIS_NOTES.get(name, "") + entries[name]["note"]
    return privacy_report(
        epsilon=entries["random-allocation-pld"]["epsilon"],
        delta=delta,
        analysis="random-allocation-pld",
        accountant="pld",
        noise_multiplier=z,
        clip=clip,
        analyses=entries,
        **extra,
        epochs=epochs,
    )


def account_bis(
    *,
    noise_multiplier: float,
    iterations: int,
    participations: int,
    delta: float,
    accountant: str,
    epochs: int = 1,
    clip: float | None = None,
    orders: Sequence[int] | None = None,
    bound: str = "auto",
) -> dict[str, Any]:
    """ε of ``epochs`` runs of Balanced Iteration Subsampling, k of T iterations each (002 Thm 3.8; PLD:
    random allocation, :mod:`ampfl.accounting.partition.allocation_pld`)."""
    from ampfl.accounting.partition import rdp_bis

    t, k, epochs, delta, clip, grid, bound = _bis_setup(
        iterations, participations, epochs, delta, clip, orders, bound
    )
    z = check_positive("noise_multiplier", noise_multiplier)
    if resolved(accountant) == "pld":
        return _bis_pld_report(t, k, epochs, delta, z, clip)
    rdp = rdp_bis(orders=grid, iterations=t, participations=k, noise_multiplier=z, epochs=epochs, bound=bound)
    eps, keys = rdp_report(grid, rdp, delta)
    plain = rdp_epsilon(gaussian(z), k * epochs, delta, grid)
    return privacy_report(
        epsilon=eps,
        delta=delta,
        analysis="theorem-3.8",
        accountant="rdp",
        noise_multiplier=z,
        clip=clip,
        analyses={"no-amplification": entry("no-amplification", plain, delta)},
        bound=bound,
        **keys,
    )


def calibrate_bis(
    *,
    target_epsilon: float,
    iterations: int,
    participations: int,
    delta: float,
    accountant: str,
    epochs: int = 1,
    clip: float | None = None,
    orders: Sequence[int] | None = None,
    bound: str = "auto",
) -> dict[str, Any]:
    """The smallest noise multiplier of Balanced Iteration Subsampling at (``target_epsilon``, ``delta``);
    the other analyses' noise alongside."""
    from ampfl.accounting.calibrate import UnreachableTarget, calibrate
    from ampfl.accounting.events import BalancedIterationSubsamplingEvent
    from ampfl.accounting.partition import calibrate_bis as calibrate_bis_rdp

    target = check_positive("target_epsilon", target_epsilon)
    t, k, epochs, delta, clip, grid, bound = _bis_setup(
        iterations, participations, epochs, delta, clip, orders, bound
    )
    if resolved(accountant) == "pld":
        zs: dict[str, Any] = {}
        for name, (acc, make, per_epoch) in _bis_events(t, k).items():
            kw: dict[str, Any] = {
                "initial": zs.get("random-allocation-pld", 1.0),
                "count": per_epoch * epochs,
            }
            try:
                zs[name] = calibrate(make, target_epsilon=target, target_delta=delta, accountant=acc, **kw)
            except UnreachableTarget as exc:  # reported in its entry, not fatal: the PLD answer stands
                if name == "random-allocation-pld":
                    raise
                zs[name] = exc
        z = zs["random-allocation-pld"]
        return _bis_pld_report(t, k, epochs, delta, z, clip, zs, target_epsilon=target)
    z = calibrate_bis_rdp(
        target_epsilon=target, target_delta=delta, iterations=t, participations=k, epochs=epochs, orders=grid
    )
    event = BalancedIterationSubsamplingEvent(iterations=t, participations=k, noise_multiplier=z)
    z_plain = calibrated(gaussian, target, delta, k * epochs, accountant_kwargs={"orders": grid})
    plain = rdp_epsilon(gaussian(z_plain), k * epochs, delta, grid)
    return privacy_report(
        epsilon=rdp_epsilon(event, epochs, delta, grid),
        delta=delta,
        analysis="theorem-3.8",
        accountant="rdp",
        noise_multiplier=z,
        clip=clip,
        analyses={"no-amplification": entry("no-amplification", plain, delta, z_plain)},
        target_epsilon=target,
        bound=bound,
    )


# ------------------------------------------------------------------------------------------------ poisson


def _poisson_inputs(delta: float, sampling_rate: float, steps: int) -> tuple[float, float, int]:
    """(δ, q, T) of a Poisson report, checked."""
    return (
        check_delta("delta", delta),
        check_probability("sampling_rate", sampling_rate),
        check_int("steps", steps, minimum=1),
    )


def account_poisson(
    *,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    accountant: str,
    clip: float | None = None,
    orders: Sequence[int] | None = None,
) -> dict[str, Any]:
    """ε of ``steps`` Poisson-subsampled Gaussian steps (the DP-SGD baseline of 002's comparisons)."""
    from ampfl.accounting.orders import DEFAULT_ORDERS

    delta, rate, steps = _poisson_inputs(delta, sampling_rate, steps)
    z = check_positive("noise_multiplier", noise_multiplier)
    keys: dict[str, Any] = {}
    if resolved(accountant) == "rdp":
        grid = orders_or(orders, DEFAULT_ORDERS)
        eps, keys = rdp_report(grid, rdp_curve(poisson(rate, z), steps, grid), delta)
    else:
        eps = epsilon_after(poisson(rate, z), steps, delta, "pld")
    return privacy_report(
        epsilon=eps,
        delta=delta,
        analysis="poisson-gaussian",
        accountant=accountant,
        noise_multiplier=z,
        clip=positive_or_none(clip, "clip"),
        sampling_rate=rate,
        steps=steps,
        **keys,
    )


def calibrate_poisson(
    *,
    target_epsilon: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    accountant: str,
    clip: float | None = None,
    orders: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The smallest noise multiplier of ``steps`` Poisson-subsampled Gaussian steps at the target."""
    from ampfl.accounting.orders import DEFAULT_ORDERS

    target = check_positive("target_epsilon", target_epsilon)
    delta, rate, steps = _poisson_inputs(delta, sampling_rate, steps)
    kwargs = {"orders": orders_or(orders, DEFAULT_ORDERS)} if resolved(accountant) == "rdp" else {}
    z = calibrated(
        lambda x: poisson(rate, x), target, delta, steps, accountant=accountant, accountant_kwargs=kwargs
    )
    acc = composed(poisson(rate, z), steps, accountant, **kwargs)
    return privacy_report(
        epsilon=float(acc.get_epsilon(delta)),
        delta=delta,
        analysis="poisson-gaussian",
        accountant=accountant,
        noise_multiplier=z,
        clip=positive_or_none(clip, "clip"),
        target_epsilon=target,
        sampling_rate=rate,
        steps=steps,
    )
