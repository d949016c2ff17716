"""CLI contract of ``ampfl account|calibrate random-checkin`` (issue 2, section 3)."""

import json

import pytest

from ampfl.accounting import random_checkin as rc
from ampfl.cli import main
from ampfl.commands import random_checkin as command


def _run_json(argv, capsys):
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_cli_mirrors_the_library_constants():
    assert command.ANALYSES == rc.ANALYSES
    assert command.RECOMMENDED_ANALYSIS == rc.RECOMMENDED_ANALYSIS


@pytest.mark.parametrize("analysis", rc.ANALYSES)
def test_account_per_iteration(analysis, capsys):
    argv = ["account", "random-checkin", "--analysis", analysis, "--p", "0.1", "--q", "0.1", "--d", "10"]
    out = _run_json([*argv, "--sigma", "1", "--epsilon", "1", "--clip", "1"], capsys)
    assert out["analysis"] == analysis
    assert out["epsilon"] == 1.0
    expected = rc.delta_per_iteration(analysis=analysis, p=0.1, q=0.1, d=10, sigma=1.0, epsilon=1.0)
    assert out["delta"] == pytest.approx(expected, rel=1e-12)


def test_account_default_analysis_is_recommended(capsys):
    out = _run_json(
        [
            "account",
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
            "1",
        ],
        capsys,
    )
    assert out["analysis"] == rc.RECOMMENDED_ANALYSIS


def test_account_composed(capsys):
    argv = [
        "account",
        "random-checkin",
        "--analysis",
        "cs",
        "--p",
        "0.1",
        "--q",
        "0.1",
        "--d",
        "10",
        "--sigma",
        "1",
    ]
    out = _run_json([*argv, "--iterations", "5", "--delta", "1e-5"], capsys)
    assert set(out) >= {"analysis", "epsilon", "delta", "iterations"}
    assert out["iterations"] == 5 and out["delta"] == 1e-5
    expected = rc.epsilon_composed(analysis="cs", p=0.1, q=0.1, d=10, sigma=1.0, iterations=5, delta=1e-5)
    assert out["epsilon"] == pytest.approx(expected, rel=1e-9)


def test_calibrate(capsys):
    argv = ["calibrate", "random-checkin", "--analysis", "ols", "--p", "0.001", "--q", "0.1", "--d", "30"]
    out = _run_json([*argv, "--epsilon", "0.015", "--delta", "1e-6"], capsys)
    assert out["sigma"] == pytest.approx(22.4, rel=0.01)  # 004 Section 6.1 prints 22.4 for OLS


def test_calibrate_clip_scales_sigma(capsys):
    argv = ["calibrate", "random-checkin", "--p", "0.1", "--q", "0.001", "--d", "1000", "--epsilon", "0.015"]
    a = _run_json([*argv, "--delta", "1e-6"], capsys)["sigma"]
    b = _run_json([*argv, "--delta", "1e-6", "--clip", "2"], capsys)["sigma"]
    assert b == pytest.approx(2 * a, rel=1e-9)


def test_calibrate_paper_zero_sigma_has_note(capsys):
    # 004 Section 6.2: Thm 4.1 as printed needs no noise; the JSON keeps its keys and adds a note.
    argv = ["calibrate", "random-checkin", "--analysis", "paper", "--p", "0.1", "--q", "0.001", "--d", "1000"]
    out = _run_json([*argv, "--epsilon", "0.015", "--delta", "1e-6"], capsys)
    assert out["sigma"] == 0.0 and out["analysis"] == "paper"
    assert out["epsilon"] == 0.015 and out["delta"] == 1e-6
    assert out["note"] == rc.PAPER_NO_NOISE_NOTE
    assert "refutes" in out["note"] and "docs/audit.md" in out["note"]
    wcs = _run_json([*argv[:3], "wcs", *argv[4:], "--epsilon", "0.015", "--delta", "1e-6"], capsys)
    assert wcs["sigma"] > 0.0 and "note" not in wcs
    assert set(wcs) == {"analysis", "sigma", "epsilon", "delta"}


_BASE = ["account", "random-checkin", "--p", "0.1", "--q", "0.1", "--d", "10", "--sigma", "1"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (_BASE, "--epsilon"),  # neither --epsilon nor --iterations
        ([*_BASE, "--iterations", "5"], "--delta"),
        ([*_BASE, "--iterations", "5", "--delta", "1e-5", "--epsilon", "1"], "--epsilon"),
        ([*_BASE, "--epsilon", "1", "--delta", "1e-5"], "--delta"),
        ([*_BASE, "--epsilon", "1", "--analysis", "bogus"], "--analysis"),
        (
            [
                "account",
                "random-checkin",
                "--p",
                "1.5",
                "--q",
                "0.1",
                "--d",
                "3",
                "--sigma",
                "1",
                "--epsilon",
                "1",
            ],
            "p must be in (0, 1]",
        ),
        (
            [
                "account",
                "random-checkin",
                "--p",
                "0.5",
                "--q",
                "0",
                "--d",
                "3",
                "--sigma",
                "1",
                "--epsilon",
                "1",
            ],
            "q must be in (0, 1]",
        ),
        (
            [
                "account",
                "random-checkin",
                "--p",
                "0.5",
                "--q",
                "0.1",
                "--d",
                "3",
                "--sigma",
                "0",
                "--epsilon",
                "1",
            ],
            "sigma must be in (0, inf)",
        ),
        ([*_BASE, "--iterations", "0", "--delta", "1e-5"], "iterations must be an integer"),
        ([*_BASE, "--iterations", "3", "--delta", "1.0"], "delta must be in (0, 1)"),
        (
            [
                "calibrate",
                "random-checkin",
                "--p",
                "0.1",
                "--q",
                "0.1",
                "--d",
                "3",
                "--epsilon",
                "1",
                "--delta",
                "0",
            ],
            "delta must be in (0, 1)",
        ),
        (
            [
                "calibrate",
                "random-checkin",
                "--p",
                "0.1",
                "--q",
                "0.1",
                "--d",
                "3",
                "--epsilon",
                "0",
                "--delta",
                "1e-5",
            ],
            "epsilon must be in (0, inf)",
        ),
        (
            ["calibrate", "random-checkin", "--p", "0.1", "--q", "0.1", "--epsilon", "1", "--delta", "1e-5"],
            "--d",
        ),
    ],
)
def test_usage_errors_are_one_line_exit_2(argv, needle, capsys):
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err.startswith("ampfl: error:")
    assert captured.err.count("\n") == 1
    assert needle in captured.err
