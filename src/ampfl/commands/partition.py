"""``ampfl account|calibrate model-split|bis|poisson|dropout``: partition amplification (paper 002).

Every command prints the common report (:func:`ampfl.commands._report.privacy_report`): ``epsilon``,
``delta``, ``analysis`` (the recommended, sound analysis), ``accountant``, ``noise_multiplier`` (z = noise std
/ clip norm; ``noise_std`` = z·C with ``--clip``) and ``analyses`` (every other analysis, each with
``epsilon``, ``delta``, ``sound``, ``note``; ``calibrate`` adds each one's ``noise_multiplier``). RDP reports
also print ``order`` (the minimising Rényi order), ``orders`` and ``rdp`` (whole-run RDP at each order) of
the recommended analysis. ``--orders`` takes integers ≥ 2; the default is the one grid of
:mod:`ampfl.accounting.orders` (up to 10 000) for ``poisson`` and its orders ≤ 256 for the Theorem 3.1
mechanisms (:data:`ampfl.accounting.partition.PARTITION_ORDERS`), whose cost grows like α².
"""

from __future__ import annotations

import argparse
from typing import Any

from ampfl.commands import Registry, flag_errors, parse_orders
from ampfl.commands._report import analysis_entry, privacy_report

# Keyword of the Python API -> flag, so that one-line errors name the flag.
_FLAGS = {
    "noise_multiplier": "--noise-multiplier",
    "split_noise_multiplier": "--noise-multiplier",
    "nonsplit_noise_multiplier": "--nonsplit-noise-multiplier",
    "num_submodels": "--submodels",
    "steps": "--steps",
    "iterations": "--iterations",
    "participations": "--k",
    "k": "--k",
    "epochs": "--epochs",
    "sampling_rate": "--rate",
    "target_epsilon": "--epsilon",
    "target_delta": "--delta",
    "epsilon": "--epsilon",
    "delta": "--delta",
    "orders": "--orders",
    "bound": "--bound",
    "accountant": "--accountant",
}

_ORDERS_HELP = "comma-separated integer Renyi orders >= 2 (default: ampfl's grid, see docs/partition.md)"
_BOUND_HELP = (
    "forward term of Theorem 3.1: exact (Lemma 3.12, Eq. 2) or efficient (Eq. 5); "
    "default: exact where affordable (always for one participation / sub-model), else efficient"
)
#: Baselines that ignore the amplification (sound, looser): name -> note.
_BASELINES = {
    "no-split": "the split credit ignored: the plain Gaussian mechanism",
    "no-amplification": "each sample's k participations per epoch as plain Gaussian steps",
}


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--delta", type=float, required=True, help="target delta in (0, 1)")
    parser.add_argument("--orders", type=parse_orders, default=None, help=_ORDERS_HELP)
    parser.add_argument("--clip", type=float, default=None, help="clip norm C (reports noise_std = z*C)")


def _noise(p: argparse.ArgumentParser) -> None:
    p.add_argument("--noise-multiplier", type=float, required=True, help="noise multiplier z = noise std / C")


def _epsilon(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epsilon", type=float, required=True, help="target epsilon")


def _steps(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, required=True, help="iterations T (RDP composes additively)")


def _bound(default: str | None) -> Any:
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bound", choices=("exact", "efficient"), default=default, help=_BOUND_HELP)

    return add


_SPLIT = "model splitting into D sub-models (002 Thm 3.4)"
_BIS = "Balanced Iteration Subsampling, k of T iterations (002 Thm 3.8)"
_POISSON = "the Poisson-subsampled Gaussian (RDP or PLD accountant)"
_HELP = {
    "model-split": _SPLIT,
    "bis": _BIS,
    "poisson": _POISSON,
    "dropout": "dropout, rate 1/2 (002 Thm 3.7)",
}


def register(registry: Registry) -> None:
    from ampfl.commands._partition_calibrate import (
        _calibrate_bis,
        _calibrate_model_split,
        _calibrate_poisson,
    )
    from ampfl.commands._partition_pld import add_accountant

    exact, auto = _bound("exact"), _bound(None)
    for verb, name, handler, adders in (
        (
            "account",
            "model-split",
            _account_model_split,
            (_noise, _model_split_args, exact, _nonsplit_args, add_accountant),
        ),
        ("account", "bis", _account_bis, (_noise, _bis_args, auto, add_accountant)),
        ("account", "poisson", _account_poisson, (_noise, _poisson_args)),
        (
            "account",
            "dropout",
            _account_dropout,
            (_noise, _steps, _split_rate, exact, _nonsplit_args, add_accountant),
        ),
        ("calibrate", "model-split", _calibrate_model_split, (_epsilon, _model_split_args, add_accountant)),
        ("calibrate", "bis", _calibrate_bis, (_epsilon, _bis_args, add_accountant)),
        ("calibrate", "poisson", _calibrate_poisson, (_epsilon, _poisson_args)),
    ):
        text = _HELP[name] if verb == "account" else "noise for " + _HELP[name]
        p = registry.command(verb, name, handler, help=text)
        for add in adders:
            add(p)
        _common(p)


def _model_split_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--submodels", type=int, required=True, help="number of disjoint sub-models D (>= 1)")
    _steps(p)
    _split_rate(p)


def _split_rate(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="Poisson sampling rate per step (002 Table 1 setting); default: every unit in every step",
    )


def _nonsplit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nonsplit-noise-multiplier",
        type=float,
        default=None,
        help="partial splitting (002 Sec. 3.2.2): noise multiplier of the non-split part (default: none)",
    )
    p.add_argument("--nonsplit-clip", type=float, default=None, help="clip norm of the non-split part")


def _bis_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--iterations", type=int, required=True, help="iterations T per run (epoch)")
    p.add_argument("--k", type=int, required=True, help="iterations each sample takes part in, per run")
    p.add_argument("--epochs", type=int, default=1, help="independent runs composed (002 Remark 3.10)")


def _poisson_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", type=float, required=True, help="sampling rate q in (0, 1]")
    _steps(p)
    p.add_argument(
        "--accountant",
        choices=("auto", "rdp", "pld"),
        default=None,
        help="accountant (default auto: pld, the tightest sound one; rdp when --orders is given)",
    )


# ----------------------------------------------------------------------------------------------- helpers


def _orders(args: argparse.Namespace, default: tuple[int, ...]) -> tuple[int, ...]:
    from ampfl.accounting._checks import check_orders

    if args.orders is None:
        return default
    return tuple(int(a) for a in check_orders("--orders", args.orders))


def _partition_orders(args: argparse.Namespace) -> tuple[int, ...]:
    from ampfl.accounting.partition import PARTITION_ORDERS

    return _orders(args, PARTITION_ORDERS)


def _positive(value: float | None, flag: str) -> float | None:
    from ampfl.accounting._checks import check_positive

    return None if value is None else check_positive(flag, value)


def _curve(orders: tuple[int, ...], rdp: Any, delta: float) -> tuple[float, dict[str, Any]]:
    """ε of an RDP curve (the one conversion) and the ``order``/``orders``/``rdp`` keys."""
    from ampfl.accounting.rdp import epsilon_from_rdp

    values = [float(r) for r in rdp]
    eps, order = epsilon_from_rdp(orders=orders, rdp=values, delta=delta)
    return eps, {"order": order, "orders": list(orders), "rdp": values}


def _rdp(event: Any, count: int, orders: tuple[int, ...]) -> Any:
    """Per-order RDP of ``count`` × ``event`` in a fresh RDP accountant."""
    from ampfl.accounting.accountants import RDPAccountant

    return RDPAccountant(orders=orders).compose(event, count).rdp


def _eps(event: Any, count: int, delta: float, orders: tuple[int, ...]) -> float:
    return _curve(orders, _rdp(event, count, orders), delta)[0]


def _entry(name: str, eps: float, delta: float, z: Any = None) -> dict[str, Any]:
    """An ``analyses`` entry; ``z`` is a calibrated noise multiplier or the UnreachableTarget it raised."""
    from ampfl.accounting.partition import SUBSAMPLED_ANALYSES

    sound, note = SUBSAMPLED_ANALYSES.get(name, (True, _BASELINES.get(name, "")))
    if z is not None and not isinstance(z, float):  # an UnreachableTarget
        eps, note = z.smallest_epsilon, note + "; target unreachable: epsilon is the smallest it certifies"
    out = analysis_entry(epsilon=eps, delta=delta, sound=sound, note=note)
    if isinstance(z, float):
        out["noise_multiplier"] = z
    return out


def _gaussian(z: float) -> Any:
    from ampfl.accounting.events import GaussianEvent

    return GaussianEvent(noise_multiplier=z)


def _poisson(rate: float, z: float) -> Any:
    from ampfl.accounting.events import PoissonSampledEvent

    return PoissonSampledEvent(sampling_rate=rate, event=_gaussian(z))


def _calibrate(make_event: Any, target: float, delta: float, count: int, **kwargs: Any) -> float:
    from ampfl.accounting.calibrate import calibrate

    return calibrate(make_event, target_epsilon=target, target_delta=delta, count=count, **kwargs)


# ----------------------------------------------------------------------------------------------- account


def split_inputs(args: argparse.Namespace) -> tuple[float, int, float, float | None, dict[str, Any]]:
    """(δ, steps, z, z_ns, report keys of the non-split part) of ``account model-split|dropout``."""
    from ampfl.accounting._checks import check_delta, check_int, check_positive

    delta = check_delta("--delta", args.delta)
    steps = check_int("--steps", args.steps, minimum=1)
    z = check_positive("--noise-multiplier", args.noise_multiplier)
    z_ns = _positive(args.nonsplit_noise_multiplier, "--nonsplit-noise-multiplier")
    extra: dict[str, Any] = {} if z_ns is None else {"nonsplit_noise_multiplier": z_ns}
    clip_ns = _positive(args.nonsplit_clip, "--nonsplit-clip")
    if z_ns is not None and clip_ns is not None:
        extra["nonsplit_noise_std"] = z_ns * clip_ns
    return delta, steps, z, z_ns, extra


def _split_report(args: argparse.Namespace, *, d: int, theorem: str) -> dict[str, Any]:
    """Thm 3.4 / 3.7 over ``--steps`` (+ a non-split part), or its Poisson-subsampled form with ``--rate``."""
    from ampfl.commands import _partition_pld

    if _partition_pld.wants_pld(args):
        return _partition_pld.split_report(args, d=d, theorem=theorem)
    from ampfl.accounting import partition
    from ampfl.accounting._checks import check_probability

    delta, steps, z, z_ns, extra = split_inputs(args)
    orders = _partition_orders(args)
    common: dict[str, Any] = {
        "noise_multiplier": z,
        "clip": _positive(args.clip, "--clip"),
        "accountant": "rdp",
    }
    rate = getattr(args, "rate", None)
    if rate is None:
        rdp = partition.rdp_partial_split(
            orders=orders,
            num_submodels=d,
            split_noise_multiplier=z,
            nonsplit_noise_multiplier=z_ns,
            steps=steps,
            bound=args.bound,
        )
        eps, keys = _curve(orders, rdp, delta)
        plain = _eps(_gaussian(partition.unsplit_noise_multiplier(z, z_ns)), steps, delta, orders)
        analyses = {"no-split": _entry("no-split", plain, delta)}
        return privacy_report(
            epsilon=eps,
            delta=delta,
            analysis=theorem,
            analyses=analyses,
            **common,
            **extra,
            bound=args.bound,
            **keys,
        )
    q = check_probability("--rate", rate)
    curves = partition.subsampled_split_curves(
        orders=orders,
        num_submodels=d,
        noise_multiplier=z,
        sampling_rate=q,
        steps=steps,
        nonsplit_noise_multiplier=z_ns,
        bound=args.bound,
    )
    results = {name: _curve(orders, rdp, delta) for name, rdp in curves.items()}
    best = min(partition.SUBSAMPLED_RECOMMENDED, key=lambda n: results[n][0])
    analyses = {n: _entry(n, results[n][0], delta) for n in results if n != best}
    return privacy_report(
        epsilon=results[best][0],
        delta=delta,
        analysis=best,
        analyses=analyses,
        **common,
        **extra,
        sampling_rate=q,
        bound=args.bound,
        **results[best][1],
    )


@flag_errors(_FLAGS)
def _account_model_split(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_int

    d = check_int("--submodels", args.submodels, minimum=1)
    return _split_report(args, d=d, theorem="theorem-3.4")


@flag_errors(_FLAGS)
def _account_dropout(args: argparse.Namespace) -> dict[str, Any]:
    return _split_report(args, d=2, theorem="theorem-3.7")


def _bis_setup(args: argparse.Namespace) -> tuple[float, int, int, int, tuple[int, ...], str]:
    """(delta, T, k, epochs, orders, bound) of a bis command."""
    from ampfl.accounting._checks import check_delta, check_int
    from ampfl.accounting.partition import resolve_bound

    delta = check_delta("--delta", args.delta)
    t = check_int("--iterations", args.iterations, minimum=1)
    k = check_int("--k", args.k, minimum=1, maximum=t)
    epochs = check_int("--epochs", args.epochs, minimum=1)
    orders = _partition_orders(args)
    bound = resolve_bound(getattr(args, "bound", None) or "auto", d=t, k=k, max_order=max(orders))
    return delta, t, k, epochs, orders, bound


@flag_errors(_FLAGS)
def _account_bis(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_positive
    from ampfl.accounting.partition import rdp_bis
    from ampfl.commands import _partition_pld

    delta, t, k, epochs, orders, bound = _bis_setup(args)
    if _partition_pld.wants_bis_pld(args, k):  # issue 11: random allocation (any k) has a PLD
        return _partition_pld.bis_report(args, delta=delta, t=t, k=k, epochs=epochs)
    z = check_positive("--noise-multiplier", args.noise_multiplier)
    rdp = rdp_bis(
        orders=orders, iterations=t, participations=k, noise_multiplier=z, epochs=epochs, bound=bound
    )
    eps, keys = _curve(orders, rdp, delta)
    plain = _eps(_gaussian(z), k * epochs, delta, orders)
    return privacy_report(
        epsilon=eps,
        delta=delta,
        analysis="theorem-3.8",
        accountant="rdp",
        noise_multiplier=z,
        clip=_positive(args.clip, "--clip"),
        analyses={"no-amplification": _entry("no-amplification", plain, delta)},
        bound=bound,
        **keys,
    )


def _poisson_setup(args: argparse.Namespace) -> tuple[float, float, int, dict[str, Any]]:
    """(delta, rate, steps, accountant kwargs) of a poisson command; ``--orders`` is an RDP setting."""
    from ampfl.accounting._checks import check_delta, check_int, check_probability
    from ampfl.accounting.orders import DEFAULT_ORDERS

    delta = check_delta("--delta", args.delta)
    rate = check_probability("--rate", args.rate)
    steps = check_int("--steps", args.steps, minimum=1)
    from ampfl.commands._partition_pld import composition_blockers

    too_many = composition_blockers("--steps", steps)
    if args.accountant in (None, "auto"):  # issue 11: the tightest sound accountant by default
        args.accountant = "rdp" if args.orders is not None or too_many else "pld"
    if args.accountant == "pld":
        if args.orders is not None:
            raise ValueError("--orders applies to --accountant rdp only.")
        if too_many:
            raise ValueError(f"--accountant pld does not apply with {too_many[0]}: use --accountant rdp.")
        return delta, rate, steps, {}
    return delta, rate, steps, {"orders": _orders(args, DEFAULT_ORDERS)}


@flag_errors(_FLAGS)
def _account_poisson(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_positive
    from ampfl.accounting.accountants import PLDAccountant

    delta, rate, steps, kwargs = _poisson_setup(args)
    z = check_positive("--noise-multiplier", args.noise_multiplier)
    keys: dict[str, Any] = {}
    if args.accountant == "rdp":
        eps, keys = _curve(kwargs["orders"], _rdp(_poisson(rate, z), steps, kwargs["orders"]), delta)
    else:
        eps = float(PLDAccountant().compose(_poisson(rate, z), steps).get_epsilon(delta))
    return privacy_report(
        epsilon=eps,
        delta=delta,
        analysis="poisson-gaussian",
        accountant=args.accountant,
        noise_multiplier=z,
        clip=_positive(args.clip, "--clip"),
        sampling_rate=rate,
        steps=steps,
        **keys,
    )
