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
        help="submit to this existing SuperLink instead of starting a local federation (TLS with "
        "--root-certificates; plain only with --insecure)",
    )
    parser.add_argument(
        "--root-certificates",
        type=Path,
        default=None,
        metavar="CA.pem",
        help="with --superlink: verify the SuperLink's TLS certificate against this CA",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="with --superlink on another host: connect without TLS (everything travels in the clear)",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="local federation over TLS with SuperNode authentication (a throw-away CA and node keys)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue the run folder's last checkpoint (same config)"
    )
    parser.add_argument(
        "--secure-aggregation",
        default="none",
        choices=("none", "secaggplus"),
        help=(
            "secaggplus: Flower's SecAgg+ (dp_dsgd_rp, dp_fedavg with poisson sampling, ms_pafl, "
            "dp_sgd_split, gdpfed, gdpfed_minus, gdpfed_plus, idp_fedavg, pfa): clients add their noise "
            "shares, the server sees only the noised sum, not who checked in"
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
    if args.superlink is None and (args.root_certificates is not None or args.insecure):
        raise ValueError("--root-certificates and --insecure apply to --superlink only (use --tls locally).")
    if args.superlink is not None:
        if args.tls:
            raise ValueError("--tls starts a local federation; with --superlink use --root-certificates.")
        if args.root_certificates is not None and args.insecure:
            raise ValueError("--root-certificates and --insecure exclude each other.")
        if args.root_certificates is not None and not args.root_certificates.is_file():
            raise ValueError(f"--root-certificates: no such file {args.root_certificates}.")
        loopback = str(args.superlink).rpartition(":")[0] in ("127.0.0.1", "localhost", "::1")
        if args.root_certificates is None and not args.insecure and not loopback:
            raise ValueError(
                f"--superlink {args.superlink}: a remote SuperLink needs TLS (--root-certificates CA.pem), "
                "or --insecure to send everything in the clear."
            )
    from ampfl.fl.config import load_config
    from ampfl.flower.deploy import deploy

    config = load_config(args.config)
    out = check_out_dir(args.out if args.out is not None else Path("runs") / f"{args.config.stem}-flower")
    try:
        summary = deploy(
            config,
            out,
            superlink=args.superlink,
            root_certificates=args.root_certificates,
            tls=args.tls,
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
