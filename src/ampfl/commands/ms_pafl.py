"""``ampfl account ms-pafl``: paper 000 (MS-PAFL) — the recommended sound analysis plus every other one.

Top level (``privacy_report``): the ``public-participation`` analysis, sound with MS-PAFL's persistent private
submodel (Eq. 14), against the server (it sees each upload and who sent it). ``analyses`` holds ``first-use``
(sound, tighter), ``amplified`` (amplification by local subsampling; valid only if the private part carries
nothing from earlier rounds) and the paper's Theorem 1, Corollary 1, Theorems 3–4 as printed (``sound:
false``). ``noise_multiplier`` is z = σ/C (std / clip norm, as every command: before, it was
σ/(2C)) and ``noise_std`` is Lemma 1's σ = C·z; the analyses take σ/(2C) = z/2, the upload's sensitivity
being 2C (:func:`~ampfl.accounting.ms_pafl.account_ms_pafl` converts). Extra keys for the CLI
contract: ``q``, ``eps_local``, ``rounds``, ``epsilon_round``, ``delta_round`` and, with ``--rounds``,
``epsilon_total``, ``delta_total``, ``epsilon_client_total``.
"""

from __future__ import annotations

import argparse
from typing import Any

from ampfl.commands import (
    Registry,
    add_accountant,
    add_clip,
    add_delta,
    add_noise_multiplier,
    add_participation,
    add_rounds,
    flag_errors,
    keywords,
)

# Keyword of account_ms_pafl -> flag: the handler reads each keyword from its flag (`keywords`) and one-line
# errors name the flag.
_FLAGS = {
    "participation": "--p",
    "eps_local": "--eps-local",
    "noise_multiplier": "--noise-multiplier",
    "delta_local": "--delta-local",
    "num_clients": "--clients",
    "beta": "--beta",
    "local_steps": "--local-steps",
    "batch_size": "--batch",
    "dataset_size": "--dataset-size",
    "sampling": "--sampling",
    "rounds": "--rounds",
    "delta_tilde": "--delta-tilde",
    "delta": "--delta",
    "clip": "--clip",
    "accountant": "--accountant",
}


def register(registry: Registry) -> None:
    parser = registry.command(
        "account",
        "ms-pafl",
        _account,
        help="MS-PAFL (paper 000): sound public-participation epsilon (persistent private submodel), plus "
        "first-use, amplified and the paper's Eq. 9 / Lemma 1 / Thm 1 / Cor. 1 / Thms 3-4 as printed",
    )
    add_participation(parser)
    noise = parser.add_mutually_exclusive_group(required=True)
    noise.add_argument(
        "--eps-local", type=float, help="per-round LDP epsilon_l in (0, 1]; Lemma 1 sets the noise"
    )
    add_noise_multiplier(
        noise,
        required=False,
        note="instead of --eps-local; multiply an older sigma/(2C) value by 2 (the analyses use sigma/(2C), "
        "the upload's sensitivity being 2C)",
    )
    parser.add_argument("--delta-local", type=float, required=True, help="per-round LDP delta_l in (0, 1)")
    parser.add_argument("--clients", type=int, required=True, help="number of clients N")
    parser.add_argument("--beta", type=float, required=True, help="Hoeffding parameter beta > 0")
    parser.add_argument("--local-steps", type=int, required=True, help="local SGD steps Q")
    parser.add_argument("--batch", type=int, required=True, help="mini-batch size b")
    parser.add_argument("--dataset-size", type=int, required=True, help="local dataset size |D_i|")
    parser.add_argument("--sampling", choices=("wor", "wr"), required=True, help="data subsampling scheme")
    add_rounds(parser, required=False, note="needs --delta-tilde")
    parser.add_argument("--delta-tilde", type=float, default=None, help="delta~ of Thm 4 (needs --rounds)")
    add_delta(
        parser,
        required=False,
        note="default: the paper's, Cor. 1 delta_c or Thm 4 T*delta_c+delta~",
    )
    add_clip(parser, default=1.0, note="the paper's clipping threshold; sigma = C z")
    add_accountant(parser, auto="pld, the tightest sound one", default="pld")


def _account(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.accounting._checks import check_delta
    from ampfl.accounting.ms_pafl import account_ms_pafl
    from ampfl.accounting.report import analysis_entry, privacy_report

    with flag_errors(_FLAGS):
        if (args.rounds is None) != (args.delta_tilde is None):
            raise ValueError("--rounds and --delta-tilde must be given together (both or neither).")
        if args.delta_tilde is not None:
            # Thm 4's slack adds to the total delta: delta~ = 1 would make the guarantee vacuous.
            check_delta("--delta-tilde", args.delta_tilde)
        given = keywords(args, _FLAGS, *(name for name in _FLAGS if name != "accountant"))
        result = account_ms_pafl(**given, accountant="pld" if args.accountant == "auto" else args.accountant)
    analyses = {
        name: analysis_entry(epsilon=a.epsilon, delta=a.delta, sound=a.sound, note=a.note)
        for name, a in result.analyses.items()
    }
    extra: dict[str, Any] = {
        "q": result.sampling_rate,
        "eps_local": result.eps_local,
        "rounds": 1 if result.rounds is None else result.rounds,
    }
    if result.epsilon_round is not None:
        extra.update(epsilon_round=result.epsilon_round, delta_round=result.delta_round)
    if result.epsilon_total is not None:
        extra.update(
            epsilon_total=result.epsilon_total,
            delta_total=result.delta_total,
            epsilon_client_total=result.epsilon_client_total,
        )
    return privacy_report(
        epsilon=result.epsilon,
        delta=result.delta,
        analysis=result.analysis,
        accountant=result.accountant,
        noise_multiplier=result.noise_multiplier,
        clip=result.clip,  # noise_std = C z = Lemma 1's sigma
        analyses=analyses,
        **extra,
    )
