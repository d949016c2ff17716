"""``ampfl reproduce NAME --out DIR``: regenerate a paper figure or table as PNG + CSV."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ampfl.commands import Registry
from ampfl.reproduce import figure_names, run_figure


def register(registry: Registry) -> None:
    parser = registry.command(None, "reproduce", _reproduce, help="reproduce a paper figure (PNG + CSV)")
    parser.add_argument(
        "name", choices=figure_names(), metavar="NAME", help="one of: " + ", ".join(figure_names())
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default runs/reproduce/NAME)")


def _reproduce(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out if args.out is not None else Path("runs") / "reproduce" / args.name
    return run_figure(args.name, out)
