"""``ampfl plan groups``: the JSON contract of issue 4 (units per issue 10) and one-line errors."""

import pytest

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
]


def test_json_contract(cli_json):
    result = cli_json(BASE)
    assert {"groups", "system_epsilon", "objective", "baseline"} <= set(result)
    assert len(result["groups"]) == 3
    for group, eps in zip(result["groups"], [1.0, 2.0, 4.0], strict=True):
        assert {"epsilon", "size", "q", "sigma", "kappa", "expected_noise"} <= set(group)
        assert group["epsilon"] == eps and group["size"] == 100
        assert group["kappa"] == 1.0
        assert group["expected_noise"] > 0
        # issue 10 units: the noise is a multiplier; "sigma" (issue 4's key) is the same number
        assert group["noise_multiplier"] == group["sigma"] and group["noise_std"] == group["noise_multiplier"]
    assert set(result["baseline"]) >= {"sigma", "noise_multiplier", "expected_noise", "objective"}
    assert result["objective"] <= result["baseline"]["objective"]
    assert sum(g["q"] * g["size"] for g in result["groups"]) == pytest.approx(0.1 * 300, rel=1e-9)
    assert result["system_epsilon"] <= 4.0
    assert result["analysis"] == "sound" and result["accountant"] == "rdp"


def test_kappa_and_paper_analysis(cli_json):
    argv = [*BASE, "--kappa", "0.2,0.5,1", "--analysis", "paper", "--clip", "0.5", "--min-rate", "0.02"]
    result = cli_json(argv)
    assert [g["kappa"] for g in result["groups"]] == [0.2, 0.5, 1.0]
    assert result["analysis"] == "paper" and "inferred" in result["analysis_label"]
    assert result["accountant"] == "closed-form"
    assert all(g["q"] >= 0.02 - 1e-12 for g in result["groups"])
    g = result["groups"][2]
    assert g["expected_noise"] == pytest.approx(1.0 * 1000 * g["noise_multiplier"] ** 2 * 0.25, rel=1e-12)
    assert g["noise_std"] == pytest.approx(0.5 * g["noise_multiplier"])


def test_sparsify_auto(cli_json):
    result = cli_json([*BASE, "--sparsify", "auto"])
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
        (["--rounds", "0"], "--rounds must be an integer"),
        (["--dim", "0"], "dim"),
    ],
)
def test_errors_are_one_line_exit_2(extra, needle, run_cli):
    code, out, err = run_cli([*BASE, *extra, "--json"])
    assert code == 2
    assert out == ""
    assert err.startswith("ampfl: error:") and err.count("\n") == 1
    assert needle in err


def test_unreachable_budget_exits_1(run_cli):
    argv = [*BASE, "--budgets", "0.0001,2,4", "--delta", "1e-10", "--json"]
    code, out, err = run_cli(argv)
    assert code == 1 and out == ""
    assert err.startswith("ampfl: numerical error:") and "unreachable" in err and err.count("\n") == 1


def test_plan_groups_with_a_hundred_million_rounds_is_quick(cli_json):
    # issue 17: composition over T is linear in RDP; the PLD cross-check is skipped above 10^4 rounds (its
    # self-composition grows with T): this plan ran for more than 5 minutes, it now takes seconds.
    argv = "plan groups --budgets 1,2,4 --sizes 100,100,100 --participation 0.1 --rounds 100000000"
    out = cli_json([*argv.split(), "--delta", "1e-5", "--dim", "10000"])
    assert all(g["epsilon_guaranteed"] <= g["epsilon"] * (1 + 1e-9) for g in out["groups"])
