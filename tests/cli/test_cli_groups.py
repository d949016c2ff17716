"""``ampfl plan groups``: the JSON contract of issue 4 and one-line errors."""

import json

import pytest

from ampfl.cli import main

BASE = [
    "plan",
    "groups",
    "--budgets",
    "1,2,4",
    "--sizes",
    "100,100,100",
    "--participation",
    "0.1",
    "--rounds",
    "20",
    "--delta",
    "1e-5",
    "--dim",
    "1000",
    "--json",
]


def _run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_contract(capsys):
    code, out, _ = _run(BASE, capsys)
    assert code == 0
    result = json.loads(out)
    assert {"groups", "system_epsilon", "objective", "baseline"} <= set(result)
    assert len(result["groups"]) == 3
    for group, eps in zip(result["groups"], [1.0, 2.0, 4.0], strict=True):
        assert {"epsilon", "size", "q", "sigma", "kappa", "expected_noise"} <= set(group)
        assert group["epsilon"] == eps and group["size"] == 100
        assert group["kappa"] == 1.0
        assert group["expected_noise"] > 0
    assert set(result["baseline"]) >= {"sigma", "expected_noise", "objective"}
    assert result["objective"] <= result["baseline"]["objective"]
    assert sum(g["q"] * g["size"] for g in result["groups"]) == pytest.approx(0.1 * 300, rel=1e-9)
    assert result["system_epsilon"] <= 4.0
    assert result["analysis"] == "sound"


def test_kappa_and_paper_analysis(capsys):
    argv = [*BASE, "--kappa", "0.2,0.5,1", "--analysis", "paper", "--clip", "0.5", "--min-rate", "0.02"]
    code, out, _ = _run(argv, capsys)
    assert code == 0
    result = json.loads(out)
    assert [g["kappa"] for g in result["groups"]] == [0.2, 0.5, 1.0]
    assert result["analysis"] == "paper" and "inferred" in result["analysis_label"]
    assert all(g["q"] >= 0.02 - 1e-12 for g in result["groups"])
    g = result["groups"][2]
    assert g["expected_noise"] == pytest.approx(1.0 * 1000 * g["sigma"] ** 2 * 0.25, rel=1e-12)


def test_sparsify_auto(capsys):
    code, out, _ = _run([*BASE, "--sparsify", "auto"], capsys)
    assert code == 0
    result = json.loads(out)
    assert all(0 < g["kappa"] <= 1 for g in result["groups"])


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--sizes", "100,100"], "same length"),
        (["--sizes", "100,1.5,100"], "--sizes"),
        (["--sparsify", "auto", "--kappa", "0.5,0.5,0.5"], "not allowed"),
        (["--kappa", "0.5,0.5"], "kappa"),
        (["--participation", "1.5"], "participation"),
        (["--min-rate", "0.5"], "--min-rate"),
        (["--budgets", "1,x,3"], "--budgets"),
        (["--analysis", "paper", "--budgets", "1,2,40"], "2 log"),
        (["--delta", "0"], "--delta must be in (0, 1)"),
        (["--dim", "0"], "dim"),
    ],
)
def test_errors_are_one_line_exit_2(extra, needle, capsys):
    code, out, err = _run([*BASE, *extra], capsys)
    assert code == 2
    assert out == ""
    assert err.startswith("ampfl: error:") and err.count("\n") == 1
    assert needle in err
