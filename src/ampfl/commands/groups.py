"""``ampfl plan groups``: GDPFed / GDPFed+ per-group sampling, noise and sparsification (paper 001).

Keys (its JSON contract): ``groups`` (per group: ``epsilon``, ``size``, ``q`` = the group's client sampling
rate, ``noise_multiplier`` = noise std / C, ``noise_std`` = z·C, ``sigma`` (the same multiplier, kept for the
contract), ``kappa``, ``expected_noise`` = κ d z² C², ...), ``system_epsilon``, ``objective`` and
``baseline`` (DP-FedAvg at the strictest budget). ``--participation`` is the global ratio q (Σ q_g N_g = qN).
"""

from __future__ import annotations

import argparse
from typing import Any

from ampfl.commands import Registry, add_clip, add_delta, add_rounds, flag_errors, keywords, parse_float_list

# Keyword of plan_groups / ErrorModel -> flag, so that one-line errors name the flag.
_FLAGS = {
    "epsilons": "--budgets",
    "budgets": "--budgets",
    "sizes": "--sizes",
    "participation": "--participation",
    "rounds": "--rounds",
    "target_delta": "--delta",
    "dim": "--dim",
    "clip_norm": "--clip",
    "signal_norm": "--signal-norm",
    "heterogeneity": "--heterogeneity",
    "omega": "--omega",
    "sparsify": "--sparsify",
    "kappa": "--kappa",
    "analysis": "--analysis",
    "min_rate": "--min-rate",
    "merge": "--merge",
}

_LABELS = {
    "sound": "sound: RDP accountant, T rounds of a Poisson-subsampled Gaussian per group, add/remove clients",
    "paper": "paper: 001 Theorem 1 as inferred ([I], RECOVERED_MATH 2.2); may under-noise (docs/planner.md)",
}


def _sizes(text: str) -> list[int]:
    values = parse_float_list("--sizes")(text)
    if any(not v.is_integer() or v < 1 for v in values):
        raise argparse.ArgumentTypeError(
            f"--sizes must be a comma-separated list of integers >= 1. Found {text!r}."
        )
    return [int(v) for v in values]


def register(registry: Registry) -> None:
    parser = registry.command(
        "plan",
        "groups",
        _plan_groups,
        help="GDPFed+ per-group client sampling rates, noise and top-kappa (paper 001)",
    )
    parser.add_argument(
        "--budgets", type=parse_float_list("--budgets"), required=True, help="group budgets E1,E2,..."
    )
    parser.add_argument("--sizes", type=_sizes, required=True, help="group sizes N1,N2,...")
    parser.add_argument(
        "--participation",
        type=float,
        required=True,
        help="global participation ratio q: expected cohort q*N, each group sampled at its own rate q_g",
    )
    add_rounds(parser)
    add_delta(parser, note="the same for every group")
    parser.add_argument("--dim", type=int, required=True, help="model dimension d")
    add_clip(parser, default=1.0, note="per client")
    sparse = parser.add_mutually_exclusive_group()
    sparse.add_argument("--sparsify", choices=("none", "auto"), default=None, help="top-kappa: none or auto")
    sparse.add_argument(
        "--kappa", type=parse_float_list("--kappa"), default=None, help="per-group kappa K1,K2,..."
    )
    parser.add_argument("--analysis", choices=("sound", "paper"), default="sound", help="noise analysis")
    parser.add_argument("--min-rate", type=float, default=None, help="smallest per-group rate (default q/10)")
    parser.add_argument(
        "--merge",
        choices=("auto", "equal", "none"),
        default="auto",
        help="auto: may merge adjacent budget groups into one aggregate; equal: only equal budgets; none",
    )
    parser.add_argument(
        "--signal-norm", type=float, default=1.0, help="group mean-update norm / C (default 1)"
    )
    parser.add_argument(
        "--heterogeneity", type=float, default=0.0, help="between-group drift / C (default 0)"
    )
    parser.add_argument(
        "--omega", choices=("squared", "worst-case"), default="squared", help="omega(kappa) model"
    )


@flag_errors(_FLAGS)
def _plan_groups(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting.groups import ErrorModel, plan_groups

    if len(args.budgets) != len(args.sizes):
        raise ValueError(
            "--budgets and --sizes must have the same length. "
            f"Found {len(args.budgets)} and {len(args.sizes)}."
        )
    if args.kappa is not None:
        sparsify = "given"
    else:
        sparsify = args.sparsify or "none"
    model = ErrorModel(**keywords(args, _FLAGS, "dim", "clip_norm", "signal_norm", "heterogeneity", "omega"))
    settings = keywords(
        args, _FLAGS, "participation", "rounds", "target_delta", "kappa", "analysis", "min_rate", "merge"
    )
    plan = plan_groups(args.budgets, args.sizes, model=model, sparsify=sparsify, **settings)
    clip = float(args.clip)
    groups = [
        {
            "epsilon": float(plan.epsilons[i]),
            "size": int(plan.sizes[i]),
            "q": float(plan.q[i]),
            "noise_multiplier": float(plan.noise_multiplier[i]),
            "noise_std": float(plan.noise_multiplier[i]) * clip,
            "sigma": float(plan.noise_multiplier[i]),  # the contract's key (= noise_multiplier)
            "kappa": float(plan.kappa[i]),
            "expected_noise": float(plan.expected_noise[i]),
            "weight": float(plan.weights[i]),
            "aggregate": int(plan.aggregate[i]),
            "epsilon_guaranteed": float(plan.aggregate_epsilon[i]),
            "epsilon_rdp": float(plan.epsilon_rdp[i]),
        }
        for i in range(plan.epsilons.size)
    ]
    base = plan.baseline
    return {
        "groups": groups,
        "system_epsilon": plan.system_epsilon,
        "objective": plan.objective,
        "baseline": {
            "noise_multiplier": base.noise_multiplier,
            "noise_std": base.noise_multiplier * clip,
            "sigma": base.noise_multiplier,  # the contract's key (= noise_multiplier)
            "expected_noise": base.expected_noise,
            "objective": base.objective,
        },
        "uniform_objective": plan.uniform_objective,
        "terms": plan.terms,
        "total_noise": float(plan.expected_noise.sum()),
        "delta": args.delta,
        "accountant": "rdp" if plan.analysis == "sound" else "closed-form",
        "analysis": plan.analysis,
        "analysis_label": _LABELS[plan.analysis],
        "error_model": (
            "ampfl design (docs/planner.md): MSE of one aggregated update, not the paper's Problem 1"
        ),
        "warnings": list(plan.warnings),
    }
