"""``ampfl audit random-checkin``: the JSON contract and one-line usage errors."""

from __future__ import annotations

import json
import math

import pytest

from ampfl.accounting.gaussian import gaussian_delta
from ampfl.cli import main

BASE = [
    "audit",
    "random-checkin",
    "--p",
    "0.1",
    "--q",
    "0.1",
    "--d",
    "10",
    "--sigma",
    "1",
    "--epsilon",
    "0.1",
]


def test_json_contract(capsys):
    # Execute
    code = main([*BASE, "--grid", "11", "--json"])
    out = json.loads(capsys.readouterr().out)
    # Assert
    assert code == 0
    assert {"max_delta", "worst_a", "direction", "analyses"} <= set(out)
    assert out["direction"] in ("add", "remove")
    assert -1.0 <= out["worst_a"] <= 1.0
    assert out["max_delta"] > 0.0
    for check in out["analyses"].values():
        assert {"delta", "violated"} <= set(check)
        assert isinstance(check["violated"], bool)


def test_no_participation_sampling_matches_the_gaussian(capsys):
    """p = q = 1, d = 0: the output is N(0) vs N(C); δ is the Gaussian mechanism's δ(ε)."""
    code = main(
        [
            "audit",
            "random-checkin",
            "--p",
            "1",
            "--q",
            "1",
            "--d",
            "0",
            "--sigma",
            "2",
            "--epsilon",
            "0.5",
            "--clip",
            "3",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["max_delta"] == pytest.approx(
        gaussian_delta(sigma=2.0, epsilon=0.5, sensitivity=3.0), rel=1e-9
    )


def test_a_zero_only_grid_without_refinement(capsys):
    """--grid 1 searches a = 0 (plus the log-spaced points near 0); with --no-refine the count is fixed."""
    code = main([*BASE, "--grid", "1", "--no-refine", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["max_delta"] >= 0.1 * 0.1 * gaussian_delta(
        sigma=1.0, epsilon=math.log1p(math.expm1(0.1) / 0.01)
    )


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["audit", "random-checkin", "--p", "0.1"], "required"),
        ([*BASE[:3], "1.5", *BASE[4:]], "p must be in (0, 1]"),
        ([*BASE[:9], "0", *BASE[10:]], "sigma must be in (0, inf)"),
        ([*BASE[:7], "-3", *BASE[8:]], "d must be an integer"),
        ([*BASE, "--clip", "-1"], "clip must be in (0, inf)"),
        ([*BASE, "--epsilon", "abc"], "invalid float value"),
    ],
)
def test_usage_errors_are_one_line_exit_2(argv, needle, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith("ampfl: error:")
    assert captured.err.count("\n") == 1
    assert needle in captured.err
    assert "Traceback" not in captured.err
