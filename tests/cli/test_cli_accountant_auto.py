"""``--accountant auto`` on every command that has ``--accountant`` (issue 11): the default, resolved in JSON.

``auto`` gives exactly the output of the default (no flag), whose ``accountant`` names the resolved one:
pld where a PLD applies, rdp with RDP-only settings (``--orders``, ``--bound``); random check-in per
iteration keeps the paper's closed forms; MS-PAFL's sound analysis is the PLD.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

CliJson = Callable[[list[str]], dict[str, Any]]

MS_PAFL = "account ms-pafl --p 0.5 --eps-local 1 --delta-local 1e-4 --clients 100 --beta 0.25 "
MS_PAFL += "--local-steps 5 --batch 5 --dataset-size 325 --sampling wor"
CASES = [  # (command, resolved accountant)
    ("account poisson --rate 0.1 --noise-multiplier 4 --steps 10 --delta 1e-5", "pld"),
    ("account poisson --rate 0.1 --noise-multiplier 4 --steps 10 --delta 1e-5 --orders 2,4,8", "rdp"),
    ("account model-split --submodels 2 --noise-multiplier 4 --steps 5 --delta 1e-5", "pld"),
    ("account bis --iterations 4 --k 1 --noise-multiplier 4 --delta 1e-5 --orders 2,4,8", "rdp"),
    ("account random-checkin --p 0.5 --q 0.5 --d 10 --noise-multiplier 4 --epsilon 1", "closed-form"),
    (MS_PAFL, "pld"),
]


@pytest.mark.parametrize(("argv", "kind"), CASES, ids=[" ".join(c[0].split()[:2]) for c in CASES])
def test_auto_is_the_default_and_json_names_the_resolved_accountant(
    cli_json: CliJson, argv: str, kind: str
) -> None:
    default = cli_json(argv.split())
    auto = cli_json([*argv.split(), "--accountant", "auto"])
    assert auto == default and auto["accountant"] == kind
    if kind == "rdp":  # naming the resolved accountant gives the same report (cheap here)
        assert cli_json([*argv.split(), "--accountant", kind]) == auto


def test_unknown_accountant_lists_auto(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    code, _, err = run_cli(
        "account poisson --rate 0.1 --noise-multiplier 4 --steps 3 --delta 1e-5 --accountant x".split()
    )
    assert code == 2 and "'auto', 'rdp', 'pld'" in err
