"""``ampfl calibrate model-split|bis|poisson``: the calibrate handlers of :mod:`ampfl.commands.partition`."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ampfl.commands import flag_errors
from ampfl.commands._report import privacy_report
from ampfl.commands.partition import (
    _FLAGS,
    _bis_setup,
    _calibrate,
    _curve,
    _entry,
    _eps,
    _gaussian,
    _partition_orders,
    _poisson,
    _poisson_setup,
    _positive,
)


@flag_errors(_FLAGS)
def _calibrate_model_split(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting import partition
    from ampfl.accounting._checks import check_delta, check_int, check_positive, check_probability
    from ampfl.accounting.events import ModelSplitEvent
    from ampfl.commands import _partition_pld

    target = check_positive("--epsilon", args.epsilon)
    delta = check_delta("--delta", args.delta)
    d = check_int("--submodels", args.submodels, minimum=1)
    steps = check_int("--steps", args.steps, minimum=1)
    if _partition_pld.wants_pld(args):
        return _partition_pld.calibrate_split(args, d=d, target=target, delta=delta, steps=steps)
    orders = _partition_orders(args)
    common: dict[str, Any] = {"accountant": "rdp", "clip": _positive(args.clip, "--clip")}
    if args.rate is None:
        z = partition.calibrate_model_split(
            target_epsilon=target, target_delta=delta, num_submodels=d, steps=steps, orders=orders
        )
        eps = _eps(ModelSplitEvent(num_submodels=d, noise_multiplier=z), steps, delta, orders)
        z_plain = _calibrate(_gaussian, target, delta, steps, accountant_kwargs={"orders": orders})
        plain = _eps(_gaussian(z_plain), steps, delta, orders)
        analyses = {"no-split": _entry("no-split", plain, delta, z_plain)}
        return privacy_report(
            epsilon=eps,
            delta=delta,
            analysis="theorem-3.4",
            noise_multiplier=z,
            analyses=analyses,
            **common,
            target_epsilon=target,
        )
    q = check_probability("--rate", args.rate)
    split: dict[str, Any] = {"num_submodels": d, "sampling_rate": q, "steps": steps, "orders": orders}
    zs = partition.calibrate_subsampled_split_analyses(target_epsilon=target, target_delta=delta, **split)

    def eps_at(name: str, z: Any) -> float:
        if not isinstance(z, float):
            return math.inf
        curve = partition.subsampled_split_curves(noise_multiplier=z, names=[name], **split)[name]
        return _curve(orders, curve, delta)[0]

    z_num = {n: (z if isinstance(z, float) else math.inf) for n, z in zs.items()}
    best = min(partition.SUBSAMPLED_RECOMMENDED, key=z_num.__getitem__)
    z_best = zs[best]
    if not isinstance(z_best, float):
        raise z_best
    analyses = {n: _entry(n, eps_at(n, z), delta, z) for n, z in zs.items() if n != best}
    return privacy_report(
        epsilon=eps_at(best, z_best),
        delta=delta,
        analysis=best,
        noise_multiplier=z_best,
        analyses=analyses,
        **common,
        target_epsilon=target,
        sampling_rate=q,
    )


@flag_errors(_FLAGS)
def _calibrate_bis(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_positive
    from ampfl.accounting.events import BalancedIterationSubsamplingEvent
    from ampfl.accounting.partition import calibrate_bis
    from ampfl.commands import _partition_pld

    target = check_positive("--epsilon", args.epsilon)
    delta, t, k, epochs, orders, bound = _bis_setup(args)
    if _partition_pld.wants_bis_pld(args, k):  # issue 11: random allocation (any k) has a PLD
        return _partition_pld.calibrate_bis(args, target=target, delta=delta, t=t, k=k, epochs=epochs)
    z = calibrate_bis(
        target_epsilon=target,
        target_delta=delta,
        iterations=t,
        participations=k,
        epochs=epochs,
        orders=orders,
    )
    event = BalancedIterationSubsamplingEvent(iterations=t, participations=k, noise_multiplier=z)
    z_plain = _calibrate(_gaussian, target, delta, k * epochs, accountant_kwargs={"orders": orders})
    plain = _eps(_gaussian(z_plain), k * epochs, delta, orders)
    return privacy_report(
        epsilon=_eps(event, epochs, delta, orders),
        delta=delta,
        analysis="theorem-3.8",
        accountant="rdp",
        noise_multiplier=z,
        clip=_positive(args.clip, "--clip"),
        analyses={"no-amplification": _entry("no-amplification", plain, delta, z_plain)},
        target_epsilon=target,
        bound=bound,
    )


@flag_errors(_FLAGS)
def _calibrate_poisson(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_positive
    from ampfl.accounting.accountants import make_accountant

    target = check_positive("--epsilon", args.epsilon)
    delta, rate, steps, kwargs = _poisson_setup(args)
    z = _calibrate(
        lambda x: _poisson(rate, x),
        target,
        delta,
        steps,
        accountant=args.accountant,
        accountant_kwargs=kwargs,
    )
    acc = make_accountant(args.accountant, **kwargs).compose(_poisson(rate, z), steps)
    return privacy_report(
        epsilon=float(acc.get_epsilon(delta)),
        delta=delta,
        analysis="poisson-gaussian",
        accountant=args.accountant,
        noise_multiplier=z,
        clip=_positive(args.clip, "--clip"),
        target_epsilon=target,
        sampling_rate=rate,
        steps=steps,
    )
