"""``ampfl account pm-sfl-smashed``: paper 003 (PM-SFL) Theorem 2 as printed, and the proof-corrected one."""

from __future__ import annotations

import argparse
from typing import Any

from ampfl.commands import Registry, flag_errors

# Keyword of the Python API -> flag, so that one-line errors name the flag.
_FLAGS = {"epsilon": "--epsilon", "c": "--c", "dim": "--dim"}


def register(registry: Registry) -> None:
    parser = registry.command(
        "account",
        "pm-sfl-smashed",
        _account,
        help="PM-SFL (paper 003) Thm 2: eps_amp = ln((1 - c^d) e^eps + c^d), as printed (see docs/pm_sfl.md)",
    )
    parser.add_argument("--epsilon", type=float, required=True, help="epsilon of the Laplace mechanism (> 0)")
    parser.add_argument("--c", type=float, required=True, help="keep-probability bound c in (0, 0.5)")
    parser.add_argument("--dim", type=int, required=True, help="number d of masked parameters (>= 1)")


@flag_errors(_FLAGS)
def _account(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting.pm_sfl import amplified_epsilon_smashed, smashed_epsilon_proof_corrected

    return {
        "epsilon_amplified": amplified_epsilon_smashed(epsilon=args.epsilon, c=args.c, dim=args.dim),
        "epsilon_proof_corrected": smashed_epsilon_proof_corrected(
            epsilon=args.epsilon, c=args.c, dim=args.dim
        ),
        "analysis": "paper 003 Theorem 2 as printed (Eq. 33); not a valid bound when a fixed mask's "
        "sensitivity exceeds the unmasked sensitivity of Eq. 32, see docs/pm_sfl.md",
    }
