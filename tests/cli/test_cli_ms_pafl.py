"""CLI contract of ``ampfl account ms-pafl`` (issues 2 and 10) and ``ampfl account pm-sfl-smashed`` (issue 2).

ms-pafl: one ``privacy_report`` object whose top level is the recommended, sound ``public-participation``
analysis (issue 10 part 7c), every other analysis in ``analyses``, and the contract's extra keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from ampfl.accounting import ms_pafl
from ampfl.accounting.pm_sfl import amplified_epsilon_smashed

BASE = [
    "account",
    "ms-pafl",
    "--p",
    "0.5",
    "--eps-local",
    "1",
    "--delta-local",
    "1e-4",
    "--clients",
    "100",
    "--beta",
    "0.25",
    "--local-steps",
    "5",
    "--batch",
    "5",
    "--dataset-size",
    "325",
    "--sampling",
    "wor",
]
REQUIRED_ROUND = {"q", "epsilon_round", "delta_round"}
REQUIRED_TOTAL = {"epsilon_total", "delta_total", "epsilon_client_total"}
COMMON = {"epsilon", "delta", "analysis", "accountant", "noise_multiplier", "noise_std", "analyses"}
CliJson = Callable[[list[str]], dict[str, Any]]
RunCli = Callable[[list[str]], tuple[int, str, str]]


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def test_single_round_shape_and_values(cli_json: CliJson) -> None:
    got = cli_json(BASE)
    assert COMMON | REQUIRED_ROUND <= set(got)
    assert not REQUIRED_TOTAL & set(got)
    assert list(got)[:4] == ["epsilon", "delta", "analysis", "accountant"]
    assert got["analysis"] == "public-participation" and got["accountant"] == "pld"
    sigma = ms_pafl.ldp_sigma(eps_local=1.0, delta_local=1e-4, clip=1.0)  # Lemma 1, C = 1
    assert got["noise_multiplier"] == pytest.approx(sigma)  # z = sigma/C (issue 28, item 5)
    assert got["noise_std"] == pytest.approx(sigma)
    assert "sigma" not in got  # one name per quantity: noise_std
    ref = ms_pafl.account_ms_pafl(
        participation=0.5,
        eps_local=1.0,
        delta_local=1e-4,
        num_clients=100,
        beta=0.25,
        local_steps=5,
        batch_size=5,
        dataset_size=325,
        sampling="wor",
    )
    assert got["epsilon"] == ref.epsilon and got["delta"] == ref.delta == ref.delta_round
    assert got["q"] == pytest.approx(25 / 325)
    assert got["epsilon_round"] == pytest.approx(ref.epsilon_round)
    assert set(got["analyses"]) == {"first-use", "amplified", "paper-theorem1", "paper-corollary1"}
    for entry in got["analyses"].values():
        assert set(entry) == {"epsilon", "delta", "sound", "note"} and entry["note"]
    assert got["analyses"]["first-use"]["sound"] is True
    assert got["analyses"]["amplified"]["sound"] is False
    assert got["analyses"]["paper-corollary1"]["sound"] is False


def test_issue_10_value(cli_json: CliJson) -> None:
    # Issue 10 part 7c: T = 40, p = 0.5, eps_l = 0.902, delta_l = 1e-4 gives eps ~ 4.24 at delta = 1e-5.
    argv = [
        *_with(BASE, "--eps-local", "0.902"),
        "--rounds",
        "40",
        "--delta-tilde",
        "1e-5",
        "--delta",
        "1e-5",
    ]
    got = cli_json(argv)
    assert got["epsilon"] == pytest.approx(4.2355, abs=2e-3) and got["delta"] == 1e-5
    a = got["analyses"]
    assert a["amplified"]["epsilon"] < a["first-use"]["epsilon"] < got["epsilon"]
    assert [name for name, entry in a.items() if entry["sound"]] == ["first-use"]
    rdp = cli_json([*argv, "--accountant", "rdp"])
    assert rdp["accountant"] == "rdp" and rdp["epsilon"] >= got["epsilon"]


def test_rounds_add_total_keys(cli_json: CliJson) -> None:
    got = cli_json([*BASE, "--rounds", "50", "--delta-tilde", "1e-4"])
    assert REQUIRED_ROUND | REQUIRED_TOTAL <= set(got)
    assert got["rounds"] == 50
    assert got["epsilon_total"] > got["epsilon_round"]
    assert got["delta_total"] == pytest.approx(50 * got["delta_round"] + 1e-4)
    assert got["delta"] == pytest.approx(got["delta_total"])  # default: the paper's delta at the same horizon
    assert {"paper-theorem3", "paper-theorem4"} <= set(got["analyses"])
    assert math.isfinite(got["epsilon"]) and got["epsilon"] > got["analyses"]["amplified"]["epsilon"]


def test_wr_gives_smaller_q(cli_json: CliJson) -> None:
    wor = cli_json([*BASE, "--delta", "1e-5"])
    wr = cli_json([*_with(BASE, "--sampling", "wr"), "--delta", "1e-5"])
    assert wr["q"] < wor["q"]
    assert wr["epsilon"] == wor["epsilon"]  # no amplification by local subsampling in the sound analysis


def test_noise_multiplier_flag(cli_json: CliJson) -> None:
    # --noise-multiplier is sigma/C: Lemma 1's sigma/C for eps_l = 0.8 gives the --eps-local numbers, and
    # the analyses compose sigma/(2C) (the upload's sensitivity is 2C).
    sigma = ms_pafl.ldp_sigma(eps_local=0.8, delta_local=1e-4, clip=1.0)
    by_eps = cli_json([*_with(BASE, "--eps-local", "0.8"), "--delta", "1e-6"])
    argv = [a for a in BASE if a not in ("--eps-local", "1")]
    by_z = cli_json([*argv, "--noise-multiplier", repr(sigma), "--delta", "1e-6", "--clip", "2"])
    assert by_z["epsilon"] == pytest.approx(by_eps["epsilon"], rel=1e-9)
    assert by_z["eps_local"] == pytest.approx(0.8, rel=1e-9)
    assert by_z["noise_multiplier"] == pytest.approx(sigma) == pytest.approx(by_eps["noise_multiplier"])
    assert by_z["noise_std"] == pytest.approx(2 * sigma)  # C z with C = 2
    expected = ms_pafl.public_participation_epsilon(
        participation=0.5, noise_multiplier=sigma / 2, rounds=1, delta=1e-6
    )
    assert by_z["epsilon"] == expected
    loud = cli_json([*argv, "--noise-multiplier", "1", "--delta", "1e-6"])  # Lemma 1's eps_l > 1
    assert set(loud["analyses"]) == {"first-use", "amplified"} and "epsilon_round" not in loud


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--rounds", "10"], "--rounds and --delta-tilde"),
        (["--delta-tilde", "1e-5"], "--rounds and --delta-tilde"),
        (["--p", "1.5"], "--p must be in (0, 1]"),
        (["--eps-local", "1.5"], "--eps-local"),
        (["--delta-local", "1"], "--delta-local must be in (0, 1)"),
        (["--batch", "100"], "--dataset-size"),
        (["--beta", "0.01"], "beta"),
        (["--sampling", "poisson"], "--sampling"),
        (["--clients", "ten"], "--clients"),
        (["--delta", "1"], "--delta must be in (0, 1)"),
        (["--accountant", "exact"], "--accountant"),
        (["--noise-multiplier", "2"], "not allowed with argument"),
        (["--clip", "0"], "--clip must be in (0, inf)"),
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
        "delta",
        "accountant",
        "two-noises",
        "clip",
    ],
)
def test_errors_are_one_line_exit_2(extra: list[str], fragment: str, run_cli: RunCli) -> None:
    argv = list(BASE)
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        argv = (
            _with(argv, flag, value)
            if flag in argv and flag != "--noise-multiplier"
            else [*argv, flag, value]
        )
    code, out, err = run_cli([*argv, "--json"])
    assert code == 2
    assert out == ""
    assert err.startswith("ampfl: error:") and err.count("\n") == 1
    assert fragment in err
    assert "Traceback" not in err


def test_bad_noise_multiplier_names_the_flag(run_cli: RunCli) -> None:
    argv = [a for a in BASE if a not in ("--eps-local", "1")]
    code, _, err = run_cli([*argv, "--noise-multiplier", "0", "--json"])
    assert code == 2 and "--noise-multiplier must be in (0, inf)" in err


def test_missing_flag_is_exit_2(run_cli: RunCli) -> None:
    code, _, err = run_cli(["account", "ms-pafl", "--p", "0.5", "--json"])
    assert code == 2 and err.count("\n") == 1 and "required" in err


def test_help_documents_the_units(capsys: pytest.CaptureFixture[str]) -> None:
    from ampfl.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["account", "ms-pafl", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exc.value.code == 0 and "z = sigma/C" in out and "sigma/(2C)" in out and "--sigma " not in out


def test_pm_sfl_smashed_contract(cli_json: CliJson) -> None:
    got = cli_json(["account", "pm-sfl-smashed", "--epsilon", "1", "--c", "0.1", "--dim", "2"])
    assert got["epsilon"] == 1.0 and got["analysis"] == "no-amplification"  # issue 10 7b
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
def test_pm_sfl_errors(argv: list[str], fragment: str, run_cli: RunCli) -> None:
    code, _, err = run_cli(["account", "pm-sfl-smashed", *argv, "--json"])
    assert code == 2
    assert err.startswith("ampfl: error:") and err.count("\n") == 1
    assert fragment in err
