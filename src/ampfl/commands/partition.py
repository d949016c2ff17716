"""``ampfl account|calibrate model-split|bis|poisson|dropout``: partition amplification (paper 002).

Every ``account`` command prints ``epsilon``, ``order`` (the minimising Rényi order), ``orders`` and ``rdp``
(whole-run RDP at each order, same order as ``orders``). ``calibrate`` prints ``sigma`` (the noise standard
deviation; with the default ``--clip 1`` it is the noise multiplier). ``--orders`` takes integers ≥ 2; the
default grid is every integer 2..64 plus 72, 80, 96, 112, 128, 160, 192, 224, 256
(:data:`ampfl.accounting.rdp.DEFAULT_ORDERS`).
"""

from __future__ import annotations

import argparse
from typing import Any

from ampfl.commands import Registry, flag_errors, parse_orders

# Keyword of the Python API -> flag, so that one-line errors name the flag (``--sigma`` is the noise
# multiplier for bis / poisson, and sigma / clip is checked under its own flag before it becomes one).
_FLAGS = {
    "noise_multiplier": "--sigma",
    "split_noise_multiplier": "--sigma",
    "nonsplit_noise_multiplier": "--nonsplit-sigma",
    "num_submodels": "--submodels",
    "steps": "--steps",
    "iterations": "--iterations",
    "participations": "--k",
    "k": "--k",
    "epochs": "--epochs",
    "sampling_rate": "--rate",
    "epsilon": "--epsilon",
    "delta": "--delta",
    "orders": "--orders",
    "bound": "--bound",
}

_ORDERS_HELP = (
    "comma-separated integer Renyi orders >= 2 (default: 2..64 and 72,80,96,112,128,160,192,224,256)"
)
_BOUND_HELP = (
    "forward term of Theorem 3.1: exact (Lemma 3.12, Eq. 2) or efficient (Eq. 5); "
    "default: exact where affordable (always for one participation / sub-model), else efficient"
)


def _common(parser: argparse.ArgumentParser, *, delta: bool = True) -> None:
    if delta:
        parser.add_argument("--delta", type=float, required=True, help="target delta in (0, 1)")
    parser.add_argument("--orders", type=parse_orders, default=None, help=_ORDERS_HELP)


def register(registry: Registry) -> None:
    p = registry.command(
        "account", "model-split", _account_model_split, help="model splitting into D sub-models (002 Thm 3.4)"
    )
    _model_split_args(p)
    p.add_argument("--steps", type=int, required=True, help="iterations T (RDP composes additively)")
    _common(p)

    p = registry.command(
        "account", "bis", _account_bis, help="Balanced Iteration Subsampling, k of T iterations (002 Thm 3.8)"
    )
    _bis_args(p)
    p.add_argument("--sigma", type=float, required=True, help="noise multiplier sigma / C")
    _common(p)

    p = registry.command(
        "account", "poisson", _account_poisson, help="Poisson-subsampled Gaussian, exact integer-order RDP"
    )
    _poisson_args(p)
    p.add_argument("--sigma", type=float, required=True, help="noise multiplier sigma / C")
    _common(p)

    p = registry.command(
        "account", "dropout", _account_dropout, help="dropout with rate 1/2 on the split part (002 Thm 3.7)"
    )
    p.add_argument("--sigma", type=float, required=True, help="noise std of the split part")
    p.add_argument("--clip", type=float, default=1.0, help="clipping norm of the split part (default 1)")
    p.add_argument("--steps", type=int, required=True, help="iterations T")
    _nonsplit_args(p)
    p.add_argument("--bound", choices=("exact", "efficient"), default="exact", help=_BOUND_HELP)
    _common(p)

    p = registry.command(
        "calibrate", "model-split", _calibrate_model_split, help="noise for model splitting (002 Thm 3.4)"
    )
    p.add_argument("--epsilon", type=float, required=True, help="target epsilon")
    p.add_argument("--submodels", type=int, required=True, help="number of sub-models D")
    p.add_argument("--steps", type=int, required=True, help="iterations T")
    p.add_argument(
        "--clip", type=float, default=1.0, help="clipping norm C (default 1); sigma = multiplier * C"
    )
    p.add_argument("--bound", choices=("exact", "efficient"), default="exact", help=_BOUND_HELP)
    _common(p)

    p = registry.command("calibrate", "bis", _calibrate_bis, help="noise for Balanced Iteration Subsampling")
    p.add_argument("--epsilon", type=float, required=True, help="target epsilon")
    _bis_args(p)
    _common(p)

    p = registry.command(
        "calibrate", "poisson", _calibrate_poisson, help="noise for the Poisson-sampled Gaussian"
    )
    p.add_argument("--epsilon", type=float, required=True, help="target epsilon")
    _poisson_args(p)
    _common(p)


def _model_split_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--submodels", type=int, required=True, help="number of disjoint sub-models D (>= 1)")
    p.add_argument("--sigma", type=float, required=True, help="noise std of the split part")
    p.add_argument("--clip", type=float, default=1.0, help="clipping norm C of the split part (default 1)")
    p.add_argument("--bound", choices=("exact", "efficient"), default="exact", help=_BOUND_HELP)
    _nonsplit_args(p)


def _nonsplit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nonsplit-sigma",
        type=float,
        default=None,
        help="partial splitting (002 Sec. 3.2.2): noise std of the non-split part (default: no such part)",
    )
    p.add_argument("--nonsplit-clip", type=float, default=1.0, help="clipping norm of the non-split part")


def _bis_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--iterations", type=int, required=True, help="iterations T per run (epoch)")
    p.add_argument("--k", type=int, required=True, help="iterations each sample takes part in, per run")
    p.add_argument("--epochs", type=int, default=1, help="independent runs composed (002 Remark 3.10)")
    p.add_argument("--bound", choices=("exact", "efficient"), default=None, help=_BOUND_HELP)


def _poisson_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", type=float, required=True, help="sampling rate q in (0, 1]")
    p.add_argument("--steps", type=int, required=True, help="iterations T")


def _orders(args: argparse.Namespace) -> list[int]:
    from ampfl.accounting.rdp import DEFAULT_ORDERS

    return list(args.orders) if args.orders is not None else list(DEFAULT_ORDERS)


def _multiplier(sigma: float, clip: float, flag: str) -> float:
    from ampfl.accounting._checks import check_positive

    s = check_positive(f"--{flag}sigma", sigma)
    c = check_positive(f"--{flag}clip", clip)
    return s / c


def _result(orders: list[int], rdp: Any, delta: float, **extra: Any) -> dict[str, Any]:
    import numpy as np

    from ampfl.accounting._checks import check_orders
    from ampfl.accounting.rdp import epsilon_from_rdp

    alphas = check_orders("orders", orders)
    values = np.asarray(rdp, dtype=np.float64)
    eps, order = epsilon_from_rdp(orders=alphas, rdp=values, delta=delta)
    return {
        "epsilon": eps,
        "order": order,
        "delta": delta,
        **extra,
        "orders": [int(a) for a in alphas],
        "rdp": [float(r) for r in values],
    }


def _nonsplit(args: argparse.Namespace) -> float | None:
    if args.nonsplit_sigma is None:
        return None
    return _multiplier(args.nonsplit_sigma, args.nonsplit_clip, "nonsplit-")


@flag_errors(_FLAGS)
def _account_model_split(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_delta
    from ampfl.accounting.partition import rdp_partial_split

    delta = check_delta("--delta", args.delta)
    orders = _orders(args)
    rdp = rdp_partial_split(
        orders=orders,
        num_submodels=args.submodels,
        split_noise_multiplier=_multiplier(args.sigma, args.clip, ""),
        nonsplit_noise_multiplier=_nonsplit(args),
        steps=args.steps,
        bound=args.bound,
    )
    return _result(
        orders,
        rdp,
        delta,
        analysis="002 Theorem 3.4 (Theorem 3.1, d = submodels, k = 1)"
        + (" + Gaussian non-split part (Sec. 3.2.2)" if args.nonsplit_sigma is not None else ""),
        bound=args.bound,
    )


@flag_errors(_FLAGS)
def _account_dropout(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_delta
    from ampfl.accounting.partition import rdp_dropout

    delta = check_delta("--delta", args.delta)
    orders = _orders(args)
    rdp = rdp_dropout(
        orders=orders,
        noise_multiplier=_multiplier(args.sigma, args.clip, ""),
        steps=args.steps,
        nonsplit_noise_multiplier=_nonsplit(args),
        bound=args.bound,
    )
    return _result(
        orders,
        rdp,
        delta,
        analysis="002 Theorem 3.7 (dropout rate 1/2: Theorem 3.1, d = 2, k = 1)",
        bound=args.bound,
    )


def _bis_bound(args: argparse.Namespace, orders: list[int]) -> str:
    from ampfl.accounting._checks import check_int
    from ampfl.accounting.partition import resolve_bound

    t = check_int("--iterations", args.iterations, minimum=1)
    k = check_int("--k", args.k, minimum=1, maximum=t)
    return resolve_bound(args.bound or "auto", d=t, k=k, max_order=max(orders))


@flag_errors(_FLAGS)
def _account_bis(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_delta
    from ampfl.accounting.partition import rdp_bis

    delta = check_delta("--delta", args.delta)
    orders = _orders(args)
    bound = _bis_bound(args, orders)
    rdp = rdp_bis(
        orders=orders,
        iterations=args.iterations,
        participations=args.k,
        noise_multiplier=args.sigma,
        epochs=args.epochs,
        bound=bound,
    )
    return _result(
        orders,
        rdp,
        delta,
        analysis="002 Theorem 3.8 (Theorem 3.1, d = T) x epochs (Remark 3.10)",
        bound=bound,
    )


@flag_errors(_FLAGS)
def _account_poisson(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_delta, check_probability
    from ampfl.accounting.rdp import rdp_poisson_gaussian

    delta = check_delta("--delta", args.delta)
    rate = check_probability("--rate", args.rate)  # (0, 1], as for calibrate poisson and the help text
    orders = _orders(args)
    rdp = rdp_poisson_gaussian(
        orders=orders, sampling_rate=rate, noise_multiplier=args.sigma, steps=args.steps
    )
    return _result(orders, rdp, delta, analysis="Poisson-subsampled Gaussian, exact integer-order RDP")


@flag_errors(_FLAGS)
def _calibrate_model_split(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_positive
    from ampfl.accounting.partition import calibrate_model_split

    clip = check_positive("--clip", args.clip)
    z = calibrate_model_split(
        epsilon=args.epsilon,
        delta=args.delta,
        num_submodels=args.submodels,
        steps=args.steps,
        orders=_orders(args),
        bound=args.bound,
    )
    return {"sigma": z * clip, "noise_multiplier": z, "epsilon": args.epsilon, "delta": args.delta}


@flag_errors(_FLAGS)
def _calibrate_bis(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting.partition import calibrate_bis

    orders = _orders(args)
    bound = _bis_bound(args, orders)
    z = calibrate_bis(
        epsilon=args.epsilon,
        delta=args.delta,
        iterations=args.iterations,
        participations=args.k,
        epochs=args.epochs,
        orders=orders,
        bound=bound,
    )
    return {"sigma": z, "epsilon": args.epsilon, "delta": args.delta, "bound": bound}


@flag_errors(_FLAGS)
def _calibrate_poisson(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting.rdp import calibrate_poisson_gaussian

    z = calibrate_poisson_gaussian(
        epsilon=args.epsilon,
        delta=args.delta,
        sampling_rate=args.rate,
        steps=args.steps,
        orders=_orders(args),
    )
    return {"sigma": z, "epsilon": args.epsilon, "delta": args.delta}
