"""``ampfl reproduce NAME --out DIR``: regenerate a paper figure or table as PNG + CSV.

The names and help lines come from the static table :data:`ampfl.reproduce.FIGURES`; the figure's module
(numpy/scipy accounting, matplotlib, torch for the training figures) is imported only when it runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ampfl.commands import Registry
from ampfl.commands._out import check_out_dir
from ampfl.reproduce import figure_help, figure_names


def register(registry: Registry) -> None:
    parser = registry.command(None, "reproduce", _reproduce, help="reproduce a paper figure (PNG + CSV)")
    names = figure_names()
    width = max(len(name) for name in names)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "figures:\n" + "\n".join(f"  {name:<{width}}  {figure_help(name)}" for name in names)
    parser.add_argument("name", choices=names, metavar="NAME", help="a figure name (listed below)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default runs/reproduce/NAME)")
    parser.add_argument(
        "--quick", action="store_true", help="training figures: a reduced setting (minutes), same ordering"
    )
    parser.add_argument(
        "--medium",
        action="store_true",
        help="training figures: the paper's protocol at reduced size (docs/reproductions.md), several seeds",
    )
    parser.add_argument(
        "--seeds",
        type=_seeds,
        default=None,
        help="training figures: seeds 0..N-1, mean ± std per row (1-20; default 3 with --medium)",
    )
    parser.add_argument(
        "--device",
        default=None,
        metavar="DEVICE",
        help="training figures: where the clients train: auto, cpu, cuda or cuda:N (default auto)",
    )
    parser.add_argument(
        "--dataset", default=None, help="pm-sfl-*: fmnist (default), fmnist_styles, femnist, cifar100"
    )
    parser.add_argument("--data-path", default=None, help="pm-sfl-*: folder of femnist / cifar100")


def _reproduce(args: argparse.Namespace) -> dict[str, Any]:
    import importlib.util

    from ampfl.reproduce import run_figure

    if importlib.util.find_spec("matplotlib") is None:  # every reproduction draws its figure
        raise ValueError("ampfl reproduce needs the 'plot' extra (matplotlib): pip install 'ampfl[plot]'")
    if args.quick and args.medium:  # before the output folder is created
        raise ValueError("--medium and --quick are mutually exclusive: give one of them.")
    out = check_out_dir(args.out if args.out is not None else Path("runs") / "reproduce" / args.name)
    options = {"dataset": getattr(args, "dataset", None), "data_path": getattr(args, "data_path", None)}
    return run_figure(
        args.name, out, quick=args.quick, medium=args.medium, seeds=args.seeds, device=args.device, **options
    )


def _seeds(text: str) -> int:
    """``--seeds`` parser: an integer in [1, 20] (argparse ``type=``; the range is checked by run_figure)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer in [1, 20]. Found {text!r}.") from None
