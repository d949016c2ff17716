"""``ampfl account|calibrate model-split|bis|poisson|dropout``: partition amplification (paper 002).

A thin layer over :mod:`ampfl.accounting.partition.reports` and
:mod:`~ampfl.accounting.partition.sampling_reports`, which build every report (the common shape of
:func:`ampfl.accounting.report.privacy_report`; RDP reports add ``order``, ``orders``, ``rdp``). What stays
here is the CLI's policy: the flags, and ``--accountant auto`` (the default), which resolves to the PLD
accountant where it applies and to RDP otherwise — with an RDP setting (``--orders``, bis ``--bound``) or more
than :data:`PLD_MAX_COMPOSITIONS` compositions; an explicit ``--accountant pld`` with one of those is a
one-line error. ``--orders`` takes integers ≥ 2; the default is the one grid of
:mod:`ampfl.accounting.orders` (up to 10 000) for ``poisson`` and its orders ≤ 256 for the Theorem 3.1
mechanisms (:data:`ampfl.accounting.partition.PARTITION_ORDERS`), whose cost grows like α².
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ampfl.commands import (
    Handler,
    Registry,
    add_accountant,
    add_clip,
    add_delta,
    add_noise_multiplier,
    add_target_epsilon,
    flag_errors,
    keywords,
    parse_orders,
)

# Keyword of the Python API -> flag, so that one-line errors name the flag.
_FLAGS = {
    "noise_multiplier": "--noise-multiplier",
    "nonsplit_noise_multiplier": "--nonsplit-noise-multiplier",
    "num_submodels": "--submodels",
    "steps": "--steps",
    "iterations": "--iterations",
    "participations": "--k",
    "nonsplit_clip": "--nonsplit-clip",
    "clip": "--clip",
    "epochs": "--epochs",
    "sampling_rate": "--rate",
    "target_epsilon": "--epsilon",
    "delta": "--delta",
    "orders": "--orders",
    "bound": "--bound",
    "accountant": "--accountant",
}

_ORDERS_HELP = "comma-separated integer Renyi orders >= 2 (default: ampfl's grid, see docs/partition.md)"
#: What ``--accountant auto`` resolves to (:func:`resolve_accountant`).
_AUTO = (
    "pld (pessimistic PLD: any --submodels, with or without --rate; bis with any --k) where it applies, "
    "else rdp (002 Thm 3.1)"
)
_BOUND_HELP = (
    "forward term of Theorem 3.1: exact (Lemma 3.12, Eq. 2) or efficient (Eq. 5); "
    "default: exact where affordable (always for one participation / sub-model), else efficient"
)


def _common(parser: argparse.ArgumentParser) -> None:
    add_delta(parser)
    parser.add_argument("--orders", type=parse_orders, default=None, help=_ORDERS_HELP)
    add_clip(parser)


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
    exact, auto = _bound("exact"), _bound(None)
    for verb, name, handler, adders in (
        (
            "account",
            "model-split",
            _account_model_split,
            (add_noise_multiplier, _model_split_args, exact, _nonsplit_args, _accountant),
        ),
        ("account", "bis", _account_bis, (add_noise_multiplier, _bis_args, auto, _accountant)),
        ("account", "poisson", _account_poisson, (add_noise_multiplier, _poisson_args)),
        (
            "account",
            "dropout",
            _account_dropout,
            (add_noise_multiplier, _steps, _split_rate, exact, _nonsplit_args, _accountant),
        ),
        (
            "calibrate",
            "model-split",
            _calibrate_model_split,
            (add_target_epsilon, _model_split_args, _accountant),
        ),
        ("calibrate", "bis", _calibrate_bis, (add_target_epsilon, _bis_args, _accountant)),
        ("calibrate", "poisson", _calibrate_poisson, (add_target_epsilon, _poisson_args)),
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
    _rate(p, required=False)


def _rate(p: argparse.ArgumentParser, *, required: bool) -> None:
    # The one --rate of every command here: required by poisson, optional for the split mechanisms.
    text = "Poisson sampling rate q per step, in (0, 1]"
    if not required:
        text += " (002 Table 1 setting); default: every unit in every step"
    p.add_argument("--rate", type=float, required=required, default=None, help=text)


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
    _rate(p, required=True)
    _steps(p)
    add_accountant(p, auto="pld, the tightest sound one; rdp when --orders is given")


def _accountant(p: argparse.ArgumentParser) -> None:
    add_accountant(p, auto=_AUTO)


# ---------------------------------------------------------------------------------- accountant policy

#: Most self-compositions the CLI's PLD path takes: beyond, dp-accounting's composed grid outgrows memory
#: (10^9 steps of a Poisson-subsampled Gaussian ask 3 TiB) while RDP composes any count by a product;
#: ``--accountant auto`` then resolves to RDP, and an explicit ``pld`` is refused naming the flag.
PLD_MAX_COMPOSITIONS = 10**7


def composition_blockers(flag: str, count: int | None) -> list[str]:
    """``[reason]`` if ``count`` compositions (set by ``flag``) are too many for the PLD path, else ``[]``."""
    if count is None or count <= PLD_MAX_COMPOSITIONS:
        return []
    return [f"{flag} above {PLD_MAX_COMPOSITIONS:.0e} (the composed PLD would not fit in memory)"]


def resolve_accountant(args: argparse.Namespace, blockers: list[str]) -> str:
    """``--accountant`` resolved: ``pld`` unless an RDP setting or a ``blocker`` rules it out (auto → rdp;
    an explicit ``pld`` → one-line error naming the flag). Sets ``args.accountant`` to the resolved name."""
    if args.orders is not None:
        blockers = [*blockers, "--orders (an RDP setting)"]
    if args.accountant == "pld" and blockers:
        raise ValueError(f"--accountant pld does not apply with {'; '.join(blockers)}: use --accountant rdp.")
    if args.accountant in (None, "auto"):  # the tightest sound one that applies
        args.accountant = "rdp" if blockers else "pld"
    return str(args.accountant)


def wants_pld(args: argparse.Namespace) -> bool:
    """Whether ``account|calibrate model-split|dropout`` takes the PLD path (every number of sub-models has
    a PLD, Poisson-subsampled or not; ``args.accountant`` is set to the resolved name)."""
    return resolve_accountant(args, composition_blockers("--steps", getattr(args, "steps", None))) == "pld"


def _bis_accountant(args: argparse.Namespace) -> str:
    blockers = composition_blockers("--epochs", args.epochs)
    if getattr(args, "bound", None) is not None:
        blockers.append("--bound (an RDP setting)")
    return resolve_accountant(args, blockers)


def _poisson_accountant(args: argparse.Namespace) -> str:
    too_many = composition_blockers("--steps", args.steps)
    if args.accountant == "pld" and args.orders is not None:
        raise ValueError("--orders applies to --accountant rdp only.")
    return resolve_accountant(args, too_many)


# ------------------------------------------------------------------------------------------------ handlers


def _split_setting(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords every model-split command (account or calibrate, dropout included) passes on."""
    return keywords(args, _FLAGS, "steps", "delta", "sampling_rate", "clip", "orders")


def _split(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords ``account model-split|dropout`` pass on."""
    own = keywords(args, _FLAGS, "noise_multiplier", "nonsplit_noise_multiplier", "nonsplit_clip", "bound")
    return {**_split_setting(args), **own}


@flag_errors(_FLAGS)
def _account_model_split(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting.partition.reports import account_split

    accountant = "pld" if wants_pld(args) else "rdp"
    return account_split(num_submodels=args.submodels, accountant=accountant, **_split(args))


@flag_errors(_FLAGS)
def _account_dropout(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting.partition.reports import account_split

    accountant = "pld" if wants_pld(args) else "rdp"
    return account_split(num_submodels=2, accountant=accountant, theorem="theorem-3.7", **_split(args))


@flag_errors(_FLAGS)
def _calibrate_model_split(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting.partition.reports import calibrate_split

    accountant = "pld" if wants_pld(args) else "rdp"
    return calibrate_split(
        target_epsilon=args.epsilon,
        num_submodels=args.submodels,
        accountant=accountant,
        **_split_setting(args),
    )


def _bis(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords ``account|calibrate bis`` pass on (the accountant resolved)."""
    return {
        **keywords(args, _FLAGS, "iterations", "participations", "epochs", "delta"),
        "accountant": _bis_accountant(args),
        **keywords(args, _FLAGS, "clip", "orders"),
        "bound": getattr(args, "bound", None) or "auto",  # calibrate bis has no --bound
    }


def _poisson(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords ``account|calibrate poisson`` pass on (the accountant resolved)."""
    return {
        **keywords(args, _FLAGS, "sampling_rate", "steps", "delta"),
        "accountant": _poisson_accountant(args),
        **keywords(args, _FLAGS, "clip", "orders"),
    }


def _sampling_handler(name: str, keywords: Callable[[argparse.Namespace], dict[str, Any]]) -> Handler:
    """The handler of ``account|calibrate bis|poisson``: the report ``name`` of
    :mod:`~ampfl.accounting.partition.sampling_reports`, given the noise multiplier (``account_*``) or the
    target epsilon (``calibrate_*``) and the command's ``keywords``."""

    @flag_errors(_FLAGS)
    def handler(args: argparse.Namespace) -> dict[str, Any]:
        from ampfl.accounting.partition import sampling_reports

        if name.startswith("calibrate"):
            given = {"target_epsilon": args.epsilon}
        else:
            given = {"noise_multiplier": args.noise_multiplier}
        report: dict[str, Any] = getattr(sampling_reports, name)(**given, **keywords(args))
        return report

    return handler


_account_bis = _sampling_handler("account_bis", _bis)
_calibrate_bis = _sampling_handler("calibrate_bis", _bis)
_account_poisson = _sampling_handler("account_poisson", _poisson)
_calibrate_poisson = _sampling_handler("calibrate_poisson", _poisson)
