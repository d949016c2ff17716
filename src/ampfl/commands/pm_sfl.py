"""``ampfl account pm-sfl-smashed``: paper 003 (PM-SFL) Thm 2, the masked Laplace release of smashed data.

Recommended: the Laplace mechanism's own ε, unless ``--domain-includes-zero`` asserts the condition the
proof needs (then the proof-corrected amplified bound). Theorem 2 as printed and the corrected form are listed
in ``analyses`` with their conditions (docs/pm_sfl.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from ampfl.commands import Registry, flag_errors

# Keyword of the Python API -> flag, so that one-line errors name the flag.
_FLAGS = {"epsilon": "--epsilon", "c": "--c", "dim": "--dim"}

_NOTES = {
    "no-amplification": "the Laplace mechanism's own epsilon: sound for every domain",
    "proof-corrected": (
        "Thm 2's proof with the factor e^-eps of (53) kept; only under its conditions: the zero input in "
        "the domain and the sensitivity covering every fixed mask, |(w*M).(x - x')| <= sensitivity for all "
        "inputs x, x' (0 included) and masks M (docs/pm_sfl.md)"
    ),
    "theorem-2-as-printed": (
        "Eq. 33 as printed; refuted: step (54) drops e^-eps, and without the zero input in the domain the "
        "exact epsilon is the un-amplified one (w=1, x=10, x'=10.1, theta=0.9: exact 1.0 > 0.935)"
    ),
}


def register(registry: Registry) -> None:
    parser = registry.command(
        "account",
        "pm-sfl-smashed",
        _account,
        help="PM-SFL (paper 003) Thm 2: masked Laplace release of smashed data (see docs/pm_sfl.md)",
    )
    parser.add_argument("--epsilon", type=float, required=True, help="epsilon of the Laplace mechanism (> 0)")
    parser.add_argument("--c", type=float, required=True, help="keep-probability bound c in (0, 0.5)")
    parser.add_argument("--dim", type=int, required=True, help="number d of masked parameters (>= 1)")
    parser.add_argument(
        "--domain-includes-zero",
        action="store_true",
        help="assert Thm 2's conditions: the zero input is in the domain and the sensitivity covers every "
        "fixed mask (|(w*M).(x - x')| <= sensitivity for all inputs, 0 included); then the amplified, "
        "proof-corrected bound is recommended",
    )


@flag_errors(_FLAGS)
def _account(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting.pm_sfl import (
        amplified_epsilon_smashed,
        smashed_epsilon_proof_corrected,
        smashed_recommended,
    )
    from ampfl.accounting.report import analysis_entry, privacy_report

    name, eps = smashed_recommended(
        epsilon=args.epsilon, c=args.c, dim=args.dim, domain_includes_zero=args.domain_includes_zero
    )
    values = {
        "no-amplification": (args.epsilon, True),
        "proof-corrected": (
            smashed_epsilon_proof_corrected(epsilon=args.epsilon, c=args.c, dim=args.dim),
            bool(args.domain_includes_zero),
        ),
        "theorem-2-as-printed": (
            amplified_epsilon_smashed(epsilon=args.epsilon, c=args.c, dim=args.dim),
            False,
        ),
    }
    analyses = {
        key: analysis_entry(epsilon=value, delta=0.0, sound=sound, note=_NOTES[key])
        for key, (value, sound) in values.items()
    }
    return privacy_report(
        epsilon=eps,
        delta=0.0,
        analysis=name,
        accountant="closed-form",
        analyses=analyses,
        domain_includes_zero=bool(args.domain_includes_zero),
        epsilon_amplified=values["theorem-2-as-printed"][0],
        epsilon_proof_corrected=values["proof-corrected"][0],
    )
