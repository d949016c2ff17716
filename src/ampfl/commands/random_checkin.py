"""``ampfl account random-checkin`` and ``ampfl calibrate random-checkin`` (paper 004, random participation).

Flags speak the paper's notation: ``--p`` participation probability, ``--q`` local sampling probability,
``--d`` records of the client besides x′, ``--sigma`` absolute noise std, ``--clip`` per-record gradient
norm C.
The default ``--analysis`` is :data:`ampfl.accounting.random_checkin.RECOMMENDED_ANALYSIS` (a sound bound).
"""

from __future__ import annotations

import argparse
from typing import Any

from ampfl.commands import Registry, flag_errors

# Mirrors of ampfl.accounting.random_checkin.ANALYSES / RECOMMENDED_ANALYSIS, so that building the parser does
# not import scipy.stats and dp-accounting (tests check that they agree).
ANALYSES = ("paper", "wcs", "ols", "cs")
RECOMMENDED_ANALYSIS = "wcs"

# Keyword of the Python API -> flag, so that one-line errors name the flag.
_FLAGS = {
    name: f"--{name}"
    for name in ("analysis", "p", "q", "d", "sigma", "clip", "epsilon", "delta", "iterations")
}


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--analysis",
        choices=ANALYSES,
        default=RECOMMENDED_ANALYSIS,
        help=f"which published analysis to use (default: {RECOMMENDED_ANALYSIS}, the sound one)",
    )
    parser.add_argument("--p", type=float, required=True, help="client participation probability in (0, 1]")
    parser.add_argument("--q", type=float, required=True, help="local record sampling probability in (0, 1]")
    parser.add_argument("--d", type=int, required=True, help="records held by the client besides x' (>= 0)")
    parser.add_argument(
        "--clip", type=float, default=1.0, help="per-record gradient norm bound C (default 1)"
    )


@flag_errors(_FLAGS)
def _account(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting import random_checkin as rc

    common = {
        "analysis": args.analysis,
        "p": args.p,
        "q": args.q,
        "d": args.d,
        "sigma": args.sigma,
        "clip": args.clip,
    }
    if args.iterations is None:
        if args.epsilon is None:
            raise ValueError(
                "--epsilon is required (or give --iterations T and --delta DL for the composed epsilon)."
            )
        if args.delta is not None:
            raise ValueError("--delta needs --iterations (per-iteration accounting takes --epsilon only).")
        delta = rc.delta_per_iteration(**common, epsilon=args.epsilon)
        return {"analysis": args.analysis, "epsilon": args.epsilon, "delta": delta, "iterations": 1}
    if args.epsilon is not None:
        raise ValueError("--iterations takes --delta, not --epsilon (the composed epsilon is the output).")
    if args.delta is None:
        raise ValueError("--delta is required with --iterations (target delta in (0, 1)).")
    epsilon = rc.epsilon_composed(**common, iterations=args.iterations, delta=args.delta)
    return {
        "analysis": args.analysis,
        "epsilon": epsilon,
        "delta": args.delta,
        "iterations": args.iterations,
        "composition": rc.COMPOSITION_METHODS[args.analysis],
    }


@flag_errors(_FLAGS)
def _calibrate(args: argparse.Namespace) -> dict[str, Any]:
    import warnings

    from ampfl.accounting import random_checkin as rc

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sigma = rc.calibrate_sigma(
            analysis=args.analysis,
            p=args.p,
            q=args.q,
            d=args.d,
            epsilon=args.epsilon,
            delta=args.delta,
            clip=args.clip,
        )
    out: dict[str, Any] = {
        "analysis": args.analysis,
        "sigma": sigma,
        "epsilon": args.epsilon,
        "delta": args.delta,
    }
    for w in caught:
        if str(w.message) == rc.PAPER_NO_NOISE_NOTE:
            out["note"] = rc.PAPER_NO_NOISE_NOTE
        else:  # not ours to swallow
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return out


def register(registry: Registry) -> None:
    """Add ``account random-checkin`` and ``calibrate random-checkin``."""
    account = registry.command(
        "account",
        "random-checkin",
        _account,
        help="per-iteration delta(epsilon) or composed epsilon of DP-DSGD with random participation (004)",
    )
    _add_common(account)
    account.add_argument("--sigma", type=float, required=True, help="absolute Gaussian noise std (> 0)")
    account.add_argument("--epsilon", type=float, default=None, help="per-iteration epsilon (>= 0)")
    account.add_argument("--iterations", type=int, default=None, help="number of iterations T to compose")
    account.add_argument("--delta", type=float, default=None, help="target total delta (with --iterations)")

    calibrate = registry.command(
        "calibrate",
        "random-checkin",
        _calibrate,
        help="smallest noise std for a per-iteration (epsilon, delta) under random participation (paper 004)",
    )
    _add_common(calibrate)
    calibrate.add_argument("--epsilon", type=float, required=True, help="target per-iteration epsilon (> 0)")
    calibrate.add_argument("--delta", type=float, required=True, help="target per-iteration delta in (0, 1)")
