"""Numbers the docs quote from a command are what the command prints now (docs drift)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

#: (doc, command, key of the JSON report, the number as the doc writes it)
QUOTED = [
    ("docs/partition.md", "calibrate poisson --epsilon 0.01 --delta 1e-5 --rate 0.001 --steps 100",
     "noise_multiplier", "2.6592"),
    ("docs/partition.md", "calibrate poisson --epsilon 0.01 --delta 1e-5 --rate 0.001 --steps 100",
     "epsilon", "0.009988"),
    ("docs/partition.md", "calibrate poisson --accountant rdp --epsilon 0.01 --delta 1e-5 --rate 0.001 "
     "--steps 100", "noise_multiplier", "5.8595"),
    ("docs/pld.md", "calibrate poisson --epsilon 0.01 --delta 1e-5 --rate 0.001 --steps 100",
     "noise_multiplier", "2.6592"),
    ("docs/pld.md", "calibrate poisson --epsilon 0.01 --delta 1e-5 --rate 0.001 --steps 100",
     "epsilon", "0.009988"),
    ("README.md", "account random-checkin --p 0.1 --q 0.01 --d 1000 --noise-multiplier 1.0 --iterations 1000 "
     "--delta 1e-5", "epsilon", "0.7202"),
    ("README.md", "calibrate poisson --rate 0.001 --steps 100 --epsilon 0.01 --delta 1e-5",
     "noise_multiplier", "2.6592"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "command", "key", "written"), QUOTED)
def test_a_quoted_number_is_what_the_command_prints(
    cli_json: Any, doc: str, command: str, key: str, written: str
) -> None:
    assert written in (REPO / doc).read_text(), f"{doc} no longer quotes {written}"
    value = cli_json([*command.split(), "--json"])[key]
    decimals = len(written.split(".")[1])
    assert f"{value:.{decimals}f}" == written, (doc, command, key, value)


def test_deploy_help_lists_every_secure_algorithm(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("flwr")
    from ampfl.cli import main
    from ampfl.flower.secagg import secure_algorithms

    with pytest.raises(SystemExit):
        main(["deploy", "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert all(name in text for name in secure_algorithms()), text
