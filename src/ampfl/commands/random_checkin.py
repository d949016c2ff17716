"""``ampfl account random-checkin`` and ``ampfl calibrate random-checkin`` (paper 004, random check-in).

Flags: ``--p`` participation probability, ``--q`` local record sampling probability, ``--d`` records of the
client besides x′, ``--noise-multiplier`` z = σ/C (the paper's σ in units of the clip norm), ``--clip`` C
(optional: only adds ``noise_std`` = z·C to the report), ``--iterations`` T, ``--accountant auto|rdp|pld``
(``auto``, the default: the PLD accountant with ``--iterations``, else the closed forms).

Both commands print the common report (:func:`ampfl.accounting.report.privacy_report`). The top level is the
recommended analysis, ``wcs`` (004 Thm 5.2); ``analyses`` holds all four (``paper`` = Thm 4.1 and ``cs`` =
Cor. 5.3 with ``sound: false``). Per iteration (no ``--iterations``, no ``--accountant``) every analysis is
the paper's closed form (``accountant: "closed-form"``); with ``--iterations`` wcs/ols/cs are events composed
on the PLD accountant (default) or the RDP one, and ``paper`` by optimal composition.

``analyses["hidden-participation"]`` is what an ampfl run accounts: the same event with
participation hidden from the observer (004 §3.1: trusted server, secure channels; only the models are
released) and ``--d`` an upper bound on the client's other records, on the PLD accountant — the smaller of
two compositions, the empty-sample refinement of Thm 5.2's pair and the per-count noise split
(:mod:`ampfl.accounting.random_checkin.pld_pairs`), never above ``wcs``.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from ampfl.commands import (
    Registry,
    add_accountant,
    add_checkin,
    add_clip,
    add_delta,
    add_noise_multiplier,
    add_target_epsilon,
    flag_errors,
)

# Keyword of the Python API -> flag, so that one-line errors name the flag.
_FLAGS = {
    "participation": "--p",
    "sampling_rate": "--q",
    "local_dataset_size": "--d",
    "noise_multiplier": "--noise-multiplier",
    "clip": "--clip",
    "epsilon": "--epsilon",
    "delta": "--delta",
    "iterations": "--iterations",
    "accountant": "--accountant",
}
#: Most iterations ``--iterations`` takes: the hidden-participation PLD composes T count-mixture steps
#: (28 s at 10^6 on one core, 392 s at 10^7).
MAX_ITERATIONS = 10**6
_RECOMMENDED = "wcs"  # ampfl.accounting.random_checkin.RECOMMENDED_ANALYSIS (tests check they agree)


def _add_common(parser: argparse.ArgumentParser) -> None:
    add_checkin(parser)
    add_clip(parser)
    add_accountant(parser, auto="pld for wcs/ols/cs with --iterations, else the closed forms")


def _mechanism(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_int, check_positive, check_probability

    if args.clip is not None:
        check_positive("clip", args.clip)
    return {
        "participation": check_probability("participation", args.p),
        "sampling_rate": check_probability("sampling_rate", args.q),
        "local_dataset_size": check_int("local_dataset_size", args.d, minimum=0),
    }


def _auto(args: argparse.Namespace) -> None:
    """``--accountant auto`` is the default (None below): pld with ``--iterations``, else the closed forms."""
    if args.accountant == "auto":
        args.accountant = None


def _epsilon(
    name: str, mech: dict[str, Any], z: float, delta: float, t: int | None, kind: str | None
) -> float:
    """ε(δ) of ``name``: closed form per iteration (``t``, ``kind`` None), else composed on ``kind``."""
    from ampfl.accounting import random_checkin as rc

    if t is None and (kind is None or name == "paper"):
        return rc.epsilon_per_iteration(analysis=name, **mech, noise_multiplier=z, delta=delta)
    return rc.epsilon_composed(
        analysis=name, **mech, noise_multiplier=z, iterations=t or 1, delta=delta, accountant=kind or "pld"
    )


def _delta(name: str, mech: dict[str, Any], z: float, epsilon: float, kind: str | None) -> float:
    """Per-iteration δ(ε) of ``name``: closed form, or one event on ``kind``."""
    from ampfl.accounting import random_checkin as rc

    if kind is None or name == "paper":
        return rc.delta_per_iteration(analysis=name, **mech, noise_multiplier=z, epsilon=epsilon)
    return rc.delta_composed(
        analysis=name, **mech, noise_multiplier=z, iterations=1, epsilon=epsilon, accountant=kind
    )


def _entries(values: dict[str, tuple[float | None, float | None, str]]) -> dict[str, dict[str, Any]]:
    """``analyses`` of the report from {name: (epsilon, delta, extra note)}."""
    from ampfl.accounting import random_checkin as rc

    out = {}
    for name in rc.ANALYSES:
        eps, dlt, extra = values[name]
        note = rc.NOTES[name] + (f"; {extra}" if extra else "")
        out[name] = {"epsilon": eps, "delta": dlt, "sound": rc.SOUND[name], "note": note}
    return out


HIDDEN = "hidden-participation"
_HIDDEN_NOTE = (
    "Thm 5.2's pair refined for participation hidden from the observer (004 §3.1: trusted server, secure "
    "channels; only the models released) with --d an upper bound on the client's other records; PLD "
    "accountant, the smaller of the empty-sample refinement and the per-count noise split; what ampfl runs "
    "account (docs/pld_random_checkin.md)"
)


def _hidden(
    mech: dict[str, Any], z: float, *, delta: float | None, epsilon: float | None, t: int | None
) -> dict[str, Any]:
    """The ``hidden-participation`` entry: ε(δ) composed over ``t`` iterations, or one iteration's δ(ε)."""
    from ampfl.accounting.accountants import composed
    from ampfl.accounting.events import RandomCheckInEvent

    event = RandomCheckInEvent(**mech, noise_multiplier=z, participation_hidden=True)
    acc = composed(event, t or 1, "pld")
    if epsilon is not None:
        return {"epsilon": epsilon, "delta": acc.get_delta(epsilon), "sound": True, "note": _HIDDEN_NOTE}
    assert delta is not None
    return {"epsilon": acc.get_epsilon(delta), "delta": delta, "sound": True, "note": _HIDDEN_NOTE}


def _each(fn: Any) -> dict[str, tuple[float | None, float | None, str]]:
    """``fn(name) -> (epsilon, delta)`` per analysis; failures of non-recommended ones become notes (
    a listed analysis that cannot be computed says so in ``analyses``, it never fails the command; bad input
    fails the recommended analysis too, which re-raises)."""
    from ampfl.accounting import random_checkin as rc
    from ampfl.accounting._checks import NumericalError

    out: dict[str, tuple[float | None, float | None, str]] = {}
    for name in rc.ANALYSES:
        try:
            eps, dlt = fn(name)
            out[name] = (eps, dlt, "")
        except (NumericalError, ArithmeticError, ValueError) as exc:
            if name == rc.RECOMMENDED_ANALYSIS:
                raise
            reason = " ".join(str(exc).split()) or type(exc).__name__
            out[name] = (None, None, f"not computed: {reason}")
    return out


def _report(
    args: argparse.Namespace,
    values: dict[str, tuple[float | None, float | None, str]],
    hidden: dict[str, Any],
    *,
    z: float,
    kind: str | None,
    **extra: Any,
) -> dict[str, Any]:
    """The common report of both commands: the recommended analysis on top, every analysis listed."""
    from ampfl.accounting import random_checkin as rc
    from ampfl.accounting.report import privacy_report

    top_eps, top_delta, _ = values[rc.RECOMMENDED_ANALYSIS]
    # The recommended analysis raises rather than fail to compute; calibrated without noise, epsilon is 0.
    assert top_eps is not None and top_delta is not None
    return privacy_report(
        epsilon=top_eps,
        delta=top_delta,
        analysis=rc.RECOMMENDED_ANALYSIS,
        accountant=kind or "closed-form",
        noise_multiplier=z,
        clip=args.clip,
        analyses={**_entries(values), HIDDEN: hidden},
        **extra,
    )


@flag_errors(_FLAGS)
def _account(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_delta, check_int, check_nonnegative, check_positive

    mech = _mechanism(args)
    _auto(args)
    z = check_positive("noise_multiplier", args.noise_multiplier)
    if args.iterations is None:
        if args.epsilon is None:
            raise ValueError(
                "--epsilon is required (or give --iterations T and --delta DL for the composed epsilon)."
            )
        if args.delta is not None:
            raise ValueError("--delta needs --iterations (per-iteration accounting takes --epsilon only).")
        eps = check_nonnegative("epsilon", args.epsilon)
        kind = args.accountant
        values = _each(lambda name: (eps, _delta(name, mech, z, eps, kind)))
        t = 1
        hidden = _hidden(mech, z, delta=None, epsilon=eps, t=1)
    else:
        if args.epsilon is not None:
            raise ValueError(
                "--iterations takes --delta, not --epsilon (the composed epsilon is the output)."
            )
        if args.delta is None:
            raise ValueError("--delta is required with --iterations (target delta in (0, 1)).")
        t = check_int("iterations", args.iterations, minimum=1, maximum=MAX_ITERATIONS)
        dlt = check_delta("delta", args.delta)
        kind = args.accountant or "pld"
        values = _each(lambda name: (_epsilon(name, mech, z, dlt, t, kind), dlt))
        hidden = _hidden(mech, z, delta=dlt, epsilon=None, t=t)
    return _report(args, values, hidden, z=z, kind=kind, iterations=t)


@flag_errors(_FLAGS)
def _calibrate(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting import random_checkin as rc
    from ampfl.accounting._checks import check_int

    mech = _mechanism(args)
    _auto(args)
    if args.iterations is not None:
        check_int("iterations", args.iterations, minimum=1, maximum=MAX_ITERATIONS)
    z = rc.calibrate_noise_multiplier(
        analysis=rc.RECOMMENDED_ANALYSIS,
        **mech,
        epsilon=args.epsilon,
        delta=args.delta,
        iterations=args.iterations,
        accountant=args.accountant,
    )
    t, dlt = args.iterations, float(args.delta)
    kind = args.accountant if t is None else (args.accountant or "pld")

    def at_z(name: str) -> tuple[float | None, float]:
        if z > 0.0:
            return _epsilon(name, mech, z, dlt, t, kind), dlt
        # No noise: (0, δ)-DP iff δ ≥ P(the record is used at all); otherwise unbounded.
        rate = mech["sampling_rate"] * (1.0 if name == "ols" else mech["participation"])
        used = 1.0 if rate == 1.0 else -math.expm1((t or 1) * math.log1p(-rate))
        return (0.0 if dlt >= used else None), dlt

    values = _each(at_z)
    for name, (eps, _, note) in values.items():
        if eps is None and not note:
            values[name] = (None, dlt, "unbounded without noise")
    if z > 0.0:
        hidden = _hidden(mech, z, delta=dlt, epsilon=None, t=t)
    else:  # no noise: as wcs, (0, δ) iff δ ≥ P(the record is used at all)
        wcs_eps = values[rc.RECOMMENDED_ANALYSIS][0]
        hidden = {"epsilon": wcs_eps, "delta": dlt, "sound": True, "note": _HIDDEN_NOTE}
    return _report(
        args,
        values,
        hidden,
        z=z,
        kind=kind,
        target_epsilon=float(args.epsilon),
        target_delta=dlt,
        iterations=t or 1,
    )


def register(registry: Registry) -> None:
    """Add ``account random-checkin`` and ``calibrate random-checkin``."""
    account = registry.command(
        "account",
        "random-checkin",
        _account,
        help="per-iteration delta(epsilon) or composed epsilon of DP-DSGD with random check-in (paper 004)",
    )
    _add_common(account)
    add_noise_multiplier(account)
    account.add_argument("--epsilon", type=float, default=None, help="per-iteration epsilon (>= 0)")
    account.add_argument("--iterations", type=int, default=None, help="number of iterations T to compose")
    add_delta(account, required=False, note="the total delta, with --iterations")

    calibrate = registry.command(
        "calibrate",
        "random-checkin",
        _calibrate,
        help="smallest noise multiplier for a target (epsilon, delta) under random check-in (paper 004)",
    )
    _add_common(calibrate)
    add_target_epsilon(calibrate)
    add_delta(calibrate)
    calibrate.add_argument(
        "--iterations", type=int, default=None, help="number of iterations T (default: one iteration)"
    )
