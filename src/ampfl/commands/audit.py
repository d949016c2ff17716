"""``ampfl audit random-checkin``: exact δ(ε) of explicit datasets against the paper-004 analyses;
``ampfl audit run``: an empirical ε lower bound of a training run from canaries (:mod:`ampfl.fl.audit.run`).

The auditor (:func:`ampfl.accounting.audit.audit_random_checkin`) integrates the true output densities of
one iteration of 004 Algorithm 1 for datasets in which client 1's other ``--d`` samples all have gradient
``a·C·u`` (u the direction of x''s gradient), searches a ∈ [-1, 1] and both directions, and flags each
analysis whose claimed δ(ε) lies below the audited lower bound. Everything scales with the clip norm C, so
the noise enters only as ``--noise-multiplier`` z = σ/C. A progress bar goes to stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ampfl.commands import (
    CommandFailed,
    Registry,
    add_checkin,
    add_noise_multiplier,
    add_rounds,
    flag_errors,
    keywords,
)

# Keyword of the Python API -> flag: the handler reads each keyword from its flag (`keywords`) and one-line
# errors name the flag.
_FLAGS = {
    "participation": "--p",
    "sampling_rate": "--q",
    "local_dataset_size": "--d",
    "noise_multiplier": "--noise-multiplier",
    "epsilon": "--epsilon",
    "grid": "--grid",
}


def register(registry: Registry) -> None:
    parser = registry.command(
        "audit",
        "random-checkin",
        _audit_random_checkin,
        help="exact per-iteration delta of explicit datasets vs the paper-004 analyses",
    )
    add_checkin(parser)
    add_noise_multiplier(parser)
    parser.add_argument("--epsilon", type=float, required=True, help="epsilon >= 0 (nats)")
    parser.add_argument(
        "--grid", type=int, default=41, help="equally spaced a values in [-1, 1] (default 41)"
    )
    parser.add_argument("--no-refine", action="store_true", help="skip the local refinement of the best a")

    run = registry.command(
        "audit",
        "run",
        _audit_run,
        help="train a run with secret canaries and give an empirical epsilon lower bound (exit 1 if above)",
    )
    run.add_argument("config", type=Path, metavar="CONFIG.toml", help="run configuration (see examples/)")
    run.add_argument("--out", type=Path, required=True, help="audit folder (runs, audit.json, audit.png)")
    run.add_argument(
        "--canaries",
        default="500",
        help="canaries per run, in [2, 100000], or auto: the fewest that can certify the accounted epsilon "
        "(default 500)",
    )
    run.add_argument(
        "--max-canaries",
        type=int,
        default=5000,
        help="with --canaries auto: refuse (exit 2) when more would be needed, in [2, 100000] (default 5000)",
    )
    run.add_argument(
        "--runs",
        type=int,
        default=1,
        help="training runs in [1, 10000]; 1: one-run estimator, more: likelihood-ratio test (default 1)",
    )
    run.add_argument("--confidence", type=float, default=0.95, help="confidence in (0, 1) (default 0.95)")
    add_rounds(run, required=False, note="train this many instead of the config's")
    run.add_argument(
        "--score", choices=("delta", "loss"), default="delta", help="white box (delta, default) or loss"
    )
    run.add_argument(
        "--canary",
        choices=("auto", "feature", "input", "dirac"),
        default="auto",
        help="a dedicated input feature per canary (flat inputs), a random input record (any model), "
        "gradient canaries scored from every noised sum (dirac: dp_fedavg, dp_dsgd_rp), or auto",
    )
    run.add_argument(
        "--participation",
        choices=("as-accounted", "revealed"),
        default="as-accounted",
        help="revealed: account and audit with participation public (dp_dsgd_rp; dp_fedavg with Poisson "
        "sampling and --canary dirac, whose report also carries the hidden view); default as-accounted",
    )
    run.add_argument("--no-progress", action="store_true", help="hide the progress bars")


@flag_errors(_FLAGS)
def _audit_random_checkin(args: argparse.Namespace) -> dict[str, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ampfl.accounting.audit import audit_random_checkin

    console = Console(stderr=True)
    kwargs: dict[str, Any] = {**keywords(args, _FLAGS, *_FLAGS), "refine": not args.no_refine}
    if not console.is_terminal:  # no bar (and no stray newline) when stderr is a file or a pipe
        result = audit_random_checkin(**kwargs)
    else:
        columns = (
            TextColumn("auditing a in [-1, 1]"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} integrations"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("audit", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            result = audit_random_checkin(**kwargs, progress=progress)
    return {
        "noise_multiplier": float(args.noise_multiplier),
        "epsilon": float(args.epsilon),
        "max_delta": result.max_delta,
        "worst_a": result.worst_a,
        "direction": result.direction,
        "integration_error": result.integration_error,
        "lower_bound": result.lower_bound,
        "analyses": {
            name: {"delta": check.delta, "violated": check.violated, "ratio": check.ratio}
            | ({"note": check.note} if check.note else {})
            for name, check in result.analyses.items()
        },
        "by_direction": {
            name: {"max_delta": r.max_delta, "worst_a": r.worst_a, "error": r.error}
            for name, r in result.by_direction.items()
        },
        "evaluations": result.evaluations,
    }


_RUN_FLAGS = {
    "max_canaries": "--max-canaries",
    "canaries": "--canaries",
    "runs": "--runs",
    "confidence": "--confidence",
    "rounds": "--rounds",
    "participation": "--participation",
    "score": "--score",
    "canary": "--canary",
}


@flag_errors(_RUN_FLAGS)
def _audit_run(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.commands._out import check_out_dir

    canaries: int | str = str(args.canaries).strip().lower()
    if canaries != "auto":
        try:
            canaries = int(str(canaries))
        except ValueError:
            raise ValueError(
                f"--canaries must be an integer in [2, 100000] or auto. Found {args.canaries!r}."
            ) from None
        if not 2 <= canaries <= 100_000:
            raise ValueError(f"--canaries must be an integer in [2, 100000] or auto. Found {canaries}.")
    if not 2 <= args.max_canaries <= 100_000:
        raise ValueError(f"--max-canaries must be an integer in [2, 100000]. Found {args.max_canaries}.")
    if not 1 <= args.runs <= 10_000:
        raise ValueError(f"--runs must be an integer in [1, 10000]. Found {args.runs}.")
    if not 0.0 < args.confidence < 1.0:
        raise ValueError(f"--confidence must be in (0, 1). Found {args.confidence}.")
    if args.rounds is not None and args.rounds < 1:
        raise ValueError(f"--rounds must be an integer in [1, inf). Found {args.rounds}.")
    out = check_out_dir(args.out)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ValueError(
            "ampfl audit run needs the 'train' extra (torch): pip install 'ampfl[train]'."
        ) from None
    from ampfl.fl.audit.run import audit_run
    from ampfl.fl.config import load_config
    from ampfl.fl.data import DataUnavailableError

    config = load_config(args.config)
    if args.rounds is not None:
        config = config.model_copy(update={"rounds": args.rounds})
    try:
        report = audit_run(
            config,
            out,
            canaries=canaries,
            **keywords(
                args, _RUN_FLAGS, "max_canaries", "runs", "confidence", "score", "participation", "canary"
            ),
            progress=not args.no_progress,
        )
    except DataUnavailableError as exc:
        raise ValueError(f"dataset {config.dataset.name!r} is not available: {exc}") from None
    if report["verdict"] == "VIOLATION":
        accounted = report["epsilon_accounted"]
        claim = (
            f"above the accounted epsilon {accounted:.3g}"
            if accounted != float("inf")
            else "and the run has no guarantee (epsilon = inf, no noise)"
        )
        raise CommandFailed(
            [
                f"VIOLATION: the audit shows epsilon >= {report['epsilon_lower']:.3g} at confidence "
                f"{report['confidence']:g}, {claim} ({report['guesses_correct']} of {report['guesses']} "
                f"guesses correct; {out / 'audit.png'})"
            ],
            result=report,
        )
    return report
