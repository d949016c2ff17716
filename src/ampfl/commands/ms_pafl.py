"""``ampfl account ms-pafl``: paper 000 (MS-PAFL) accounting as printed, plus the tight alternative."""

from __future__ import annotations

import argparse
from typing import Any

from ampfl.commands import Registry, flag_errors

# Keyword of account_ms_pafl -> flag, so that one-line errors name the flag.
_FLAGS = {
    "p": "--p",
    "eps_local": "--eps-local",
    "delta_local": "--delta-local",
    "num_clients": "--clients",
    "beta": "--beta",
    "local_steps": "--local-steps",
    "batch_size": "--batch",
    "dataset_size": "--dataset-size",
    "sampling": "--sampling",
    "rounds": "--rounds",
    "delta_tilde": "--delta-tilde",
    "clip": "--clip",
}


def register(registry: Registry) -> None:
    parser = registry.command(
        "account",
        "ms-pafl",
        _account,
        help="MS-PAFL (paper 000): Eq. 9 q, Lemma 1 sigma, Cor. 1 round CDP, Thms 3-4 totals, tight PLD",
    )
    parser.add_argument("--p", type=float, required=True, help="client check-in probability p in (0, 1]")
    parser.add_argument("--eps-local", type=float, required=True, help="per-round LDP epsilon_l in (0, 1]")
    parser.add_argument("--delta-local", type=float, required=True, help="per-round LDP delta_l in (0, 1)")
    parser.add_argument("--clients", type=int, required=True, help="number of clients N")
    parser.add_argument("--beta", type=float, required=True, help="Hoeffding parameter beta > 0")
    parser.add_argument("--local-steps", type=int, required=True, help="local SGD steps Q")
    parser.add_argument("--batch", type=int, required=True, help="mini-batch size b")
    parser.add_argument("--dataset-size", type=int, required=True, help="local dataset size |D_i|")
    parser.add_argument("--sampling", choices=("wor", "wr"), required=True, help="data subsampling scheme")
    parser.add_argument("--rounds", type=int, default=None, help="number of rounds T (needs --delta-tilde)")
    parser.add_argument("--delta-tilde", type=float, default=None, help="delta~ of Thm 4 (needs --rounds)")
    parser.add_argument(
        "--clip", type=float, default=1.0, help="clipping threshold C (default 1, as the paper)"
    )


@flag_errors(_FLAGS)
def _account(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_delta
    from ampfl.accounting.ms_pafl import account_ms_pafl

    if (args.rounds is None) != (args.delta_tilde is None):
        raise ValueError("--rounds and --delta-tilde must be given together (both or neither).")
    if args.delta_tilde is not None:
        # Thm 4's slack adds to the total delta: delta~ = 1 would make the guarantee vacuous.
        check_delta("--delta-tilde", args.delta_tilde)
    result = account_ms_pafl(
        p=args.p,
        eps_local=args.eps_local,
        delta_local=args.delta_local,
        num_clients=args.clients,
        beta=args.beta,
        local_steps=args.local_steps,
        batch_size=args.batch,
        dataset_size=args.dataset_size,
        sampling=args.sampling,
        rounds=args.rounds,
        delta_tilde=args.delta_tilde,
        clip=args.clip,
    )
    out: dict[str, Any] = {
        "q": result.q,
        "sigma": result.sigma,
        "noise_multiplier": result.noise_multiplier,
        "epsilon_round": result.epsilon_round,
        "delta_round": result.delta_round,
        "epsilon_round_tight": result.epsilon_round_tight,
    }
    if args.rounds is not None:
        out.update(
            epsilon_total=result.epsilon_total,
            delta_total=result.delta_total,
            epsilon_client_total=result.epsilon_client_total,
            epsilon_total_tight=result.epsilon_total_tight,
            epsilon_client_total_tight=result.epsilon_client_total_tight,
        )
    out.update(analysis=result.analysis, tight_analysis=result.tight_analysis, recommended=result.recommended)
    return out
