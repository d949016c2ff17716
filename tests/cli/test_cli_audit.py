"""``ampfl audit random-checkin``: the JSON contract and one-line usage errors."""

from __future__ import annotations

import math

import pytest

from ampfl.accounting.gaussian import gaussian_delta

BASE = [
    "audit",
    "random-checkin",
    "--p",
    "0.1",
    "--q",
    "0.1",
    "--d",
    "10",
    "--noise-multiplier",
    "1",
    "--epsilon",
    "0.1",
]


def test_json_contract(cli_json):
    out = cli_json([*BASE, "--grid", "11"])
    assert {"noise_multiplier", "epsilon", "max_delta", "worst_a", "direction", "analyses"} <= set(out)
    assert out["noise_multiplier"] == 1.0 and out["epsilon"] == 0.1
    assert out["direction"] in ("add", "remove")
    assert -1.0 <= out["worst_a"] <= 1.0
    assert out["max_delta"] > 0.0
    assert set(out["analyses"]) == {"paper", "wcs", "ols", "cs"}
    for check in out["analyses"].values():
        assert {"delta", "violated"} <= set(check)
        assert isinstance(check["violated"], bool)
    assert not out["analyses"]["wcs"]["violated"]


def test_no_participation_sampling_matches_the_gaussian(cli_json):
    """p = q = 1, d = 0: the output is N(0, z²) vs N(1, z²); δ is the Gaussian mechanism's δ(ε)."""
    argv = ["audit", "random-checkin", "--p", "1", "--q", "1", "--d", "0", "--noise-multiplier", "0.5"]
    out = cli_json([*argv, "--epsilon", "0.5"])
    assert out["max_delta"] == pytest.approx(gaussian_delta(sigma=0.5, epsilon=0.5), rel=1e-9)


def test_a_zero_only_grid_without_refinement(cli_json):
    """--grid 1 searches a = 0 (plus the log-spaced points near 0); with --no-refine the count is fixed."""
    out = cli_json([*BASE, "--grid", "1", "--no-refine"])
    assert out["max_delta"] >= 0.1 * 0.1 * gaussian_delta(
        sigma=1.0, epsilon=math.log1p(math.expm1(0.1) / 0.01)
    )


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["audit", "random-checkin", "--p", "0.1"], "required"),
        ([*BASE[:3], "1.5", *BASE[4:]], "--p must be in (0, 1]"),
        ([*BASE[:5], "0", *BASE[6:]], "--q must be in (0, 1]"),
        ([*BASE[:9], "0", *BASE[10:]], "--noise-multiplier must be in (0, inf)"),
        ([*BASE[:7], "-3", *BASE[8:]], "--d must be an integer"),
        ([*BASE, "--epsilon", "abc"], "invalid float value"),
        ([*BASE, "--grid", "0"], "--grid must be an integer"),
        ([*BASE, "--sigma", "1"], "--sigma"),  # removed (issue 10 part 4): unrecognized
        ([*BASE, "--clip", "2"], "--clip"),  # the audit is in units of the clip norm
    ],
)
def test_usage_errors_are_one_line_exit_2(argv, needle, run_cli):
    code, out, err = run_cli(argv)
    assert code == 2 and out == ""
    assert err.startswith("ampfl: error:")
    assert err.count("\n") == 1
    assert needle in err
    assert "Traceback" not in err
