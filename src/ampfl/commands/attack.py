"""``ampfl attack dlg RUN``: the DLG-style smashed-data reconstruction attack of paper 003 on a trained run.

``RUN`` is the run folder of a split algorithm (``splitfed``, ``standalone``, ``pm_sfl``, ``splitfed_pm``):
its ``config.toml`` and final ``checkpoint.pt``. The attack (:func:`ampfl.fl.split.attack.attack_client`)
reconstructs the first ``--images`` training images of ``--client`` from their smashed data (and with
``--grad-weight W`` > 0 also from the bottom's gradient, where the case's weights are known) and reports
PSNR and SSIM per case; it writes ``attack.png`` (originals and reconstructions) and ``attack.csv``.
Checkpoints are loaded with ``torch.load(weights_only=False)``: attack only run folders you trust.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ampfl.commands import Registry


def register(registry: Registry) -> None:
    parser = registry.command(
        None, "attack", _attack, help="reconstruction attack on a trained split run (paper 003): dlg"
    )
    parser.add_argument("method", choices=["dlg"], help="dlg: match the smashed data with dummy inputs")
    parser.add_argument("run", type=Path, metavar="RUN", help="run folder of a split algorithm")
    parser.add_argument("--client", type=int, default=0, help="victim client id (default 0)")
    parser.add_argument("--images", type=int, default=6, help="victim images (>= 1, default 6)")
    parser.add_argument(
        "--steps", type=int, default=400, help="attack optimisation steps (>= 1, default 400)"
    )
    parser.add_argument(
        "--tv", type=float, default=0.0, help="total-variation prior weight (>= 0, default 0)"
    )
    parser.add_argument(
        "--grad-weight",
        type=float,
        default=0.0,
        help="weight of the gradient-matching term (>= 0, default 0: smashed data only)",
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default RUN/attack)")


def _attack(args: argparse.Namespace) -> dict[str, Any]:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ValueError(
            "ampfl attack needs the 'train' extra (torch): pip install 'ampfl[train]'."
        ) from None
    from ampfl.fl.config import load_config
    from ampfl.fl.run.experiment import build_algorithm, build_task, load_checkpoint
    from ampfl.fl.split.attack import attack_client
    from ampfl.fl.split.common import SplitAlgorithm
    from ampfl.io import atomic_write_csv
    from ampfl.reproduce._plot import save_image_grid

    run: Path = args.run
    if args.steps < 1:
        raise ValueError(f"--steps must be >= 1. Found {args.steps}.")
    config = load_config(run / "config.toml")
    task = build_task(config)
    algorithm = build_algorithm(config, task)
    if not isinstance(algorithm, SplitAlgorithm):
        raise ValueError(f"RUN must hold a split algorithm's run. Found {config.algorithm.name!r}.")
    try:
        algorithm.load_state_dict(load_checkpoint(run)["algorithm"])
    except ValueError as exc:
        raise ValueError(str(exc).replace("--resume: ", "RUN: ")) from None
    try:
        x, found = attack_client(
            algorithm,
            args.client,
            images=args.images,
            steps=args.steps,
            tv_weight=args.tv,
            grad_weight=getattr(args, "grad_weight", 0.0),
        )
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
    out: Path = args.out if args.out is not None else run / "attack"
    out.mkdir(parents=True, exist_ok=True)
    label = config.algorithm.name
    png = save_image_grid(
        out / "attack.png", x, {f"{label} ({case})": r["reconstruction"] for case, r in found.items()}
    )
    rows = [
        [case, i, p, q]
        for case, r in found.items()
        for i, (p, q) in enumerate(zip(r["psnr_per_image"], r["ssim_per_image"], strict=True))
    ]
    table = atomic_write_csv(out / "attack.csv", ["case", "image", "psnr", "ssim"], rows)
    return {
        "method": "dlg",
        "algorithm": label,
        "client": args.client,
        "steps": args.steps,
        "tv": args.tv,
        "grad_weight": getattr(args, "grad_weight", 0.0),
        "results": [
            {"case": case, "psnr": r["psnr"], "ssim": r["ssim"], "gradient_matching": r["gradient_matching"]}
            for case, r in found.items()
        ],
        "files": [str(png), str(table)],
    }
