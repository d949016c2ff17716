"""``ampfl run CONFIG.toml`` (one training run in a run folder) and ``ampfl demo`` (the embedded comparison:
a table at one ε and the privacy–utility frontier, :mod:`ampfl.fl.demo.amplification`).

Both need the ``train`` extra (torch, scikit-learn); they import the simulator inside their handlers only.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ampfl.commands import Registry
from ampfl.commands._out import check_out_dir

_NEEDS_TRAIN = "needs the 'train' extra (torch, scikit-learn): pip install 'ampfl[train]'"


def register(registry: Registry) -> None:
    parser = registry.command(None, "run", _run, help="train one federated run from a TOML config")
    parser.add_argument("config", type=Path, metavar="CONFIG.toml", help="run configuration (see examples/)")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default runs/<config name>)")
    parser.add_argument("--resume", action="store_true", help="continue the run folder's last checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--no-plots", action="store_true", help="write no accuracy.png / epsilon.png (config: plots = false)"
    )
    _device_flag(parser, "overrides the config's [engine] device (default there: auto)")

    demo = registry.command(
        None,
        "demo",
        _demo,
        help="what amplification buys: accuracy against epsilon, amplified vs unamplified accounting",
    )
    demo.add_argument(
        "--out", type=Path, default=Path("runs") / "demo", help="output folder (default runs/demo)"
    )
    demo.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    demo.add_argument(
        "--quick",
        action="store_true",
        help="a few rounds and three epsilons only (a smoke test of the whole pipeline)",
    )
    _device_flag(demo, "default cpu: the README's numbers")


def _device_flag(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--device",
        default=None,
        metavar="DEVICE",
        help=f"where the clients train: auto, cpu, cuda or cuda:N ({default})",
    )


def _device(args: argparse.Namespace) -> str | None:
    """``--device`` checked against this machine (one line naming the flag), or None when not given."""
    if args.device is None:
        return None
    from ampfl.fl.engine.device import resolve_device

    resolve_device(args.device, setting="--device")
    return str(args.device)


def _require_train_extra(command: str, modules: tuple[str, ...] = ("torch",)) -> None:
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            raise ValueError(f"ampfl {command} {_NEEDS_TRAIN}.") from None


def _run(args: argparse.Namespace) -> dict[str, Any]:
    _require_train_extra("run")
    from ampfl.fl.config import load_config
    from ampfl.fl.data import DataUnavailableError
    from ampfl.fl.run.experiment import run_experiment

    config = load_config(args.config)
    device = _device(args)
    if device is not None:
        from ampfl.fl.config import with_device

        config = with_device(config, device)
    out = check_out_dir(args.out if args.out is not None else Path("runs") / args.config.stem)
    progress = not args.no_progress
    try:
        summary = run_experiment(config, out, resume=args.resume, progress=progress, plots=not args.no_plots)
    except DataUnavailableError as exc:
        raise ValueError(f"dataset {config.dataset.name!r} is not available: {exc}") from None
    if args.json:
        return summary
    keys = (
        "algorithm",
        "dataset",
        "device",
        "rounds",
        "rounds_completed",
        "stopped",
        "final_accuracy",
        "epsilon",
        "delta",
        "privacy_unit",
        "analysis",
        "wall_seconds",
        "out_dir",
    )
    return {key: summary[key] for key in keys}


def _demo(args: argparse.Namespace) -> dict[str, Any]:
    _require_train_extra("demo", ("torch", "sklearn"))
    from ampfl.fl.demo.amplification import render_table, run_demo

    device = _device(args)
    out = check_out_dir(args.out)
    result = run_demo(out, reduced=args.quick, progress=not args.no_progress, device=device or "cpu")
    if not args.json:
        render_table(result)
        return {"out_dir": result["out_dir"], "wall_seconds": result["wall_seconds"]}
    return result
