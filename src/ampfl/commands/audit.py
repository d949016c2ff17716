"""``ampfl audit random-checkin``: exact δ(ε) of explicit datasets against the paper-004 analyses.

The auditor (:func:`ampfl.accounting.audit.audit_random_checkin`) integrates the true output densities of
one iteration of 004 Algorithm 1 for datasets in which client 1's other ``--d`` samples all have gradient
``a·C·u`` (u the direction of x''s gradient), searches a ∈ [-1, 1] and both directions, and flags each
analysis whose claimed δ(ε) lies below the audited lower bound. Everything scales with the clip norm C, so
the noise enters only as ``--noise-multiplier`` z = σ/C. A progress bar goes to stderr.
"""

from __future__ import annotations

import argparse
from typing import Any

from ampfl.commands import Registry, flag_errors

# Keyword of the Python API -> flag, so that one-line errors name the flag.
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
    parser.add_argument("--p", type=float, required=True, help="client participation probability in (0, 1]")
    parser.add_argument("--q", type=float, required=True, help="local sampling probability in (0, 1]")
    parser.add_argument("--d", type=int, required=True, help="samples of the client besides x' (>= 0)")
    parser.add_argument(
        "--noise-multiplier",
        type=float,
        required=True,
        help="noise std / clip norm (the paper's sigma/C, > 0)",
    )
    parser.add_argument("--epsilon", type=float, required=True, help="epsilon >= 0 (nats)")
    parser.add_argument(
        "--grid", type=int, default=41, help="equally spaced a values in [-1, 1] (default 41)"
    )
    parser.add_argument("--no-refine", action="store_true", help="skip the local refinement of the best a")


@flag_errors(_FLAGS)
def _audit_random_checkin(args: argparse.Namespace) -> dict[str, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ampfl.accounting.audit import audit_random_checkin

    console = Console(stderr=True)
    kwargs: dict[str, Any] = {
        "participation": args.p,
        "sampling_rate": args.q,
        "local_dataset_size": args.d,
        "noise_multiplier": args.noise_multiplier,
        "epsilon": args.epsilon,
        "grid": args.grid,
        "refine": not args.no_refine,
    }
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
