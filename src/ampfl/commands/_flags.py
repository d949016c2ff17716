"""The flags that several commands share, each declared once: one name, one type and one help text per
quantity across the CLI (docs/units.md). A command adds its own words to the common help with ``note``.

Range checks stay with the Python API (``ampfl.accounting._checks``, :mod:`ampfl.numeric_ranges`); these
helpers only declare the flags, so they import nothing heavy (``ampfl --help`` stays fast).
"""

from __future__ import annotations

import argparse
from typing import Any

#: The accountants every ``--accountant`` offers; ``auto`` resolves to the tightest sound one that applies.
ACCOUNTANTS = ("auto", "rdp", "pld")


def _help(text: str, note: str | None) -> str:
    return text if note is None else f"{text}; {note}"


def add_noise_multiplier(parser: Any, *, required: bool = True, note: str | None = None) -> None:
    """``--noise-multiplier`` z = σ/C (float). ``parser`` may be a mutually exclusive group."""
    parser.add_argument(
        "--noise-multiplier",
        type=float,
        required=required,
        help=_help("noise multiplier z = sigma/C: noise std over the clip norm (> 0)", note),
    )


def add_delta(parser: argparse.ArgumentParser, *, required: bool = True, note: str | None = None) -> None:
    """``--delta`` (float): the δ of the guarantee, required unless a command has a default."""
    parser.add_argument(
        "--delta",
        type=float,
        required=required,
        default=None,
        help=_help("delta of the (epsilon, delta) guarantee, in (0, 1)", note),
    )


def add_target_epsilon(parser: argparse.ArgumentParser) -> None:
    """``--epsilon`` (float, required) of a ``calibrate`` command: the ε the noise is calibrated to."""
    parser.add_argument("--epsilon", type=float, required=True, help="target epsilon (> 0)")


def add_clip(
    parser: argparse.ArgumentParser, *, default: float | None = None, note: str | None = None
) -> None:
    """``--clip`` C (float). Without a default it only adds ``noise_std`` = z·C to the report."""
    text = (
        "clip norm C (> 0): reports noise_std = z*C"
        if default is None
        else f"clip norm C (> 0, default {default:g})"
    )
    parser.add_argument("--clip", type=float, default=default, help=_help(text, note))


def add_rounds(parser: argparse.ArgumentParser, *, required: bool = True, note: str | None = None) -> None:
    """``--rounds`` T (int): federated rounds."""
    parser.add_argument(
        "--rounds", type=int, required=required, default=None, help=_help("number of rounds T (>= 1)", note)
    )


def add_accountant(parser: argparse.ArgumentParser, *, auto: str, default: str | None = None) -> None:
    """``--accountant auto|rdp|pld``; ``auto`` says what ``auto`` resolves to for this command."""
    shown = "auto" if default is None else default
    parser.add_argument(
        "--accountant",
        choices=ACCOUNTANTS,
        default=default,
        help=f"accountant (default {shown}; auto: {auto})",
    )


def add_participation(parser: argparse.ArgumentParser) -> None:
    """``--p`` (float, required): the probability that a client takes part in (checks in to) a round."""
    parser.add_argument("--p", type=float, required=True, help="client participation probability p in (0, 1]")


def add_checkin(parser: argparse.ArgumentParser) -> None:
    """The random check-in mechanism of paper 004: ``--p``, ``--q``, ``--d`` (all required)."""
    add_participation(parser)
    parser.add_argument(
        "--q", type=float, required=True, help="local record sampling probability q in (0, 1]"
    )
    parser.add_argument("--d", type=int, required=True, help="records held by the client besides x' (>= 0)")
