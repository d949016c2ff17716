"""``ampfl deploy CONFIG.toml --out DIR``: the same run as ``ampfl run`` on a Flower federation.

Needs the ``flower`` and ``train`` extras; flwr and the simulator are imported inside the handler only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ampfl.commands import CommandFailed, Registry
from ampfl.commands._out import check_out_dir


def register(registry: Registry) -> None:
    parser = registry.command(
        None, "deploy", _deploy, help="run a TOML config on Flower (a local federation or --superlink)"
    )
    parser.add_argument(
        "config", type=Path, metavar="CONFIG.toml", help="run configuration (as for ampfl run)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="run folder (default runs/<config name>-flower)"
    )
    parser.add_argument(
        "--superlink",
        default=None,
        metavar="HOST:PORT",
        help="submit to this existing SuperLink (insecure) instead of starting a local federation",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue the run folder's last checkpoint (same config)"
    )
    parser.add_argument(
        "--secure-aggregation",
        default="none",
        choices=("none", "secaggplus"),
        help=(
            "secaggplus: Flower's SecAgg+ (dp_dsgd_rp, dp_fedavg with poisson sampling, ms_pafl): clients "
            "add their noise shares, the server sees only the noised sum, not who checked in"
        ),
    )
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds the Flower run may take (default 3600)"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _deploy(args: argparse.Namespace) -> dict[str, Any]:
    import importlib.util

    for module, extra in (("torch", "train"), ("flwr", "flower")):
        if importlib.util.find_spec(module) is None:
            raise ValueError(f"ampfl deploy needs the '{extra}' extra: pip install 'ampfl[{extra}]'.")
    if args.superlink is not None:
        host, _, port = str(args.superlink).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"--superlink must be HOST:PORT with PORT in [1, 65535]. Found {args.superlink!r}."
            )
    if not args.timeout > 0:
        raise ValueError(f"--timeout must be > 0. Found {args.timeout}.")
    from ampfl.fl.config import load_config
    from ampfl.flower.deploy import deploy

    config = load_config(args.config)
    out = check_out_dir(args.out if args.out is not None else Path("runs") / f"{args.config.stem}-flower")
    try:
        summary = deploy(
            config,
            out,
            superlink=args.superlink,
            timeout=args.timeout,
            resume=args.resume,
            secure_aggregation=args.secure_aggregation,
            announce=lambda line: print(line, file=sys.stderr, flush=True),
            progress=not args.no_progress,
        )
    except RuntimeError as exc:
        raise CommandFailed([str(exc)]) from None
    if args.json:
        return summary
    keys = (
        "engine",
        "algorithm",
        "dataset",
        "rounds_completed",
        "stopped",
        "final_accuracy",
        "epsilon",
        "delta",
        "round_seconds_mean",
        "bring_up_seconds",
        "teardown_seconds",
        "out_dir",
    )
    return {key: summary[key] for key in keys if key in summary}
