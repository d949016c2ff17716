"""CLI contract of ``ampfl account ms-pafl`` and ``ampfl account pm-sfl-smashed`` (issue 2, section 3)."""

from __future__ import annotations

import json
import math

import pytest

from ampfl.accounting.ms_pafl import account_ms_pafl
from ampfl.accounting.pm_sfl import amplified_epsilon_smashed
from ampfl.cli import main

BASE = [
    "account", "ms-pafl", "--p", "0.5", "--eps-local", "1", "--delta-local", "1e-4", "--clients", "100",
    "--beta", "0.25", "--local-steps", "5", "--batch", "5", "--dataset-size", "325", "--sampling", "wor",
]  # fmt: skip
REQUIRED_ROUND = {"q", "sigma", "epsilon_round", "delta_round"}
REQUIRED_TOTAL = {"epsilon_total", "delta_total", "epsilon_client_total"}


def _run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("\n") == 1
    return dict(json.loads(out))


def test_single_round_keys_and_values(capsys: pytest.CaptureFixture[str]) -> None:
    got = _run_json(BASE, capsys)
    assert REQUIRED_ROUND <= set(got)
    assert not REQUIRED_TOTAL & set(got)
    ref = account_ms_pafl(
        p=0.5, eps_local=1.0, delta_local=1e-4, num_clients=100, beta=0.25, local_steps=5, batch_size=5,
        dataset_size=325, sampling="wor",
    )  # fmt: skip
    assert got["q"] == pytest.approx(25 / 325)
    assert got["sigma"] == pytest.approx(ref.sigma)
    assert got["epsilon_round"] == pytest.approx(ref.epsilon_round)
    assert got["delta_round"] == pytest.approx(ref.delta_round)


def test_rounds_add_total_keys(capsys: pytest.CaptureFixture[str]) -> None:
    got = _run_json([*BASE, "--rounds", "50", "--delta-tilde", "1e-4"], capsys)
    assert REQUIRED_ROUND | REQUIRED_TOTAL <= set(got)
    assert float(str(got["epsilon_total"])) > float(str(got["epsilon_round"]))
    assert got["delta_total"] == pytest.approx(50 * float(str(got["delta_round"])) + 1e-4)
    assert math.isfinite(float(str(got["epsilon_total_tight"])))


def test_wr_gives_smaller_q(capsys: pytest.CaptureFixture[str]) -> None:
    wor = _run_json(BASE, capsys)
    wr = _run_json([*BASE[:-1], "wr"], capsys)
    assert float(str(wr["q"])) < float(str(wor["q"]))


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--rounds", "10"], "--rounds and --delta-tilde"),
        (["--delta-tilde", "1e-5"], "--rounds and --delta-tilde"),
        (["--p", "1.5"], "p must be in (0, 1]"),
        (["--eps-local", "1.5"], "--eps-local"),
        (["--delta-local", "1"], "--delta-local must be in (0, 1)"),
        (["--batch", "100"], "--dataset-size"),
        (["--beta", "0.01"], "beta"),
        (["--sampling", "poisson"], "--sampling"),
        (["--clients", "ten"], "--clients"),
    ],
    ids=[
        "rounds-alone",
        "tilde-alone",
        "p",
        "eps-local",
        "delta-local",
        "wor-too-big",
        "beta",
        "sampling",
        "int",
    ],
)
def test_errors_are_one_line_exit_2(
    extra: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*BASE, *extra, "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err.startswith("ampfl: error:")
    assert captured.err.count("\n") == 1
    assert fragment in captured.err
    assert "Traceback" not in captured.err


def test_missing_flag_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["account", "ms-pafl", "--p", "0.5", "--json"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "required" in err


def test_pm_sfl_smashed_contract(capsys: pytest.CaptureFixture[str]) -> None:
    got = _run_json(["account", "pm-sfl-smashed", "--epsilon", "1", "--c", "0.1", "--dim", "2"], capsys)
    assert got["epsilon_amplified"] == pytest.approx(amplified_epsilon_smashed(epsilon=1.0, c=0.1, dim=2))
    assert got["epsilon_amplified"] == pytest.approx(math.log(0.99 * math.e + 0.01))  # hand


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--epsilon", "1", "--c", "0.6", "--dim", "2"], "c must be in (0, 0.5)"),
        (["--epsilon", "0", "--c", "0.1", "--dim", "2"], "epsilon must be in (0, inf)"),
        (["--epsilon", "1", "--c", "0.1", "--dim", "0"], "dim must be an integer"),
        (["--epsilon", "1", "--c", "0.1"], "required"),
    ],
    ids=["c", "epsilon", "dim", "missing"],
)
def test_pm_sfl_errors(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["account", "pm-sfl-smashed", *argv, "--json"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("ampfl: error:") and err.count("\n") == 1
    assert fragment in err
