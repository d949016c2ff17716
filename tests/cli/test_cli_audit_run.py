"""``ampfl audit run``: the JSON contract, the exit code of a violation and one-line usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "digits_dp_fedavg.toml")
KEYS = {
    "epsilon_accounted",
    "delta",
    "epsilon_lower",
    "estimator",
    "canaries",
    "runs",
    "guesses_correct",
    "ratio",
    "verdict",
}


def test_example_is_consistent(cli_json, tmp_path):
    out = cli_json(["audit", "run", EXAMPLE, "--out", str(tmp_path), "--rounds", "10", "--no-progress"])
    assert KEYS <= set(out)
    assert out["verdict"] == "consistent" and out["runs"] == 1 and out["canaries"] == 500
    assert 0.0 <= out["epsilon_lower"] <= out["epsilon_accounted"]
    assert out["ratio"] == pytest.approx(out["epsilon_lower"] / out["epsilon_accounted"])
    assert (tmp_path / "audit.png").is_file()


def test_noise_removed_is_a_violation(run_cli, tmp_path):
    config = tmp_path / "z0.toml"
    config.write_text(Path(EXAMPLE).read_text().replace("target_epsilon = 2.0", "noise_multiplier = 0.0"))
    code, out, err = run_cli(
        [
            "audit",
            "run",
            str(config),
            "--out",
            str(tmp_path / "a"),
            "--rounds",
            "10",
            "--no-progress",
            "--json",
        ]
    )
    assert code == 1
    report = json.loads(out)
    assert report["verdict"] == "VIOLATION" and report["epsilon_lower"] > 2.5  # measured: 3.91
    assert err.count("\n") == 1 and "VIOLATION" in err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--canaries", "1", "--canaries must be an integer in [2, 100000]"),
        ("--runs", "0", "--runs must be an integer in [1, 10000]"),
        ("--confidence", "1", "--confidence must be in (0, 1)"),
        ("--rounds", "0", "--rounds must be an integer in [1, inf)"),
    ],
)
def test_bad_flags_exit_2(run_cli, tmp_path, flag, value, message):
    code, out, err = run_cli(["audit", "run", EXAMPLE, "--out", str(tmp_path), flag, value])
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1


def test_revealed_participation_needs_dp_dsgd_rp(run_cli, tmp_path):
    code, out, err = run_cli(["audit", "run", EXAMPLE, "--out", str(tmp_path), "--participation", "revealed"])
    assert code == 2 and out == ""
    assert "--participation: 'revealed' applies to dp_dsgd_rp only" in err and err.count("\n") == 1


def test_canaries_auto_plans_the_count(cli_json, tmp_path):
    """--canaries auto: the example at 10 rounds forecasts epsilon 0.948; the smallest ladder count whose
    planned ceiling reaches it is 36 (the new keys beside the old ones)."""
    out = cli_json(
        [
            "audit",
            "run",
            EXAMPLE,
            "--out",
            str(tmp_path),
            "--rounds",
            "10",
            "--no-progress",
            "--canaries",
            "auto",
        ]
    )
    assert KEYS <= set(out)
    assert out["canaries_requested"] == "auto" and out["max_canaries"] == 5000
    assert out["epsilon_forecast"] == pytest.approx(out["epsilon_accounted"], rel=1e-9)
    assert out["canaries"] == 36
    assert out["verdict"] in ("consistent", "inconclusive")  # inconclusive only if the coins fell unbalanced
    assert out["verdict"] == (
        "consistent" if out["epsilon_max_certifiable"] >= out["epsilon_accounted"] else "inconclusive"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--canaries", "auto", "--max-canaries", "10"],
            "--max-canaries: certifying the accounted epsilon 1.99",
        ),
        (["--canaries", "many"], "--canaries must be an integer in [2, 100000] or auto. Found 'many'."),
        (["--max-canaries", "1"], "--max-canaries must be an integer in [2, 100000]. Found 1."),
        (["--canary", "dirac", "--score", "loss"], "--canary: 'dirac' is scored from the noised sums"),
    ],
)
def test_auto_and_dirac_usage_errors_exit_2(run_cli, tmp_path, argv, message):
    code, out, err = run_cli(["audit", "run", EXAMPLE, "--out", str(tmp_path), *argv])
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1


def test_auto_refusal_names_what_it_needs(run_cli, tmp_path):
    code, _, err = run_cli(
        ["audit", "run", EXAMPLE, "--out", str(tmp_path), "--canaries", "auto", "--max-canaries", "10"]
    )
    assert code == 2 and "needs 88 canaries, above --max-canaries = 10" in err


def test_dirac_canaries_from_the_cli(cli_json, tmp_path):
    out = cli_json(
        [
            "audit",
            "run",
            EXAMPLE,
            "--out",
            str(tmp_path),
            "--rounds",
            "5",
            "--no-progress",
            "--canary",
            "dirac",
        ]
    )
    assert out["canary"] == "dirac" and out["score"] == "noised-sums" and out["verdict"] != "VIOLATION"
    assert out["estimator"].startswith("likelihood-ratio over dirac canaries")
    assert 0.0 <= out["epsilon_lower"] <= out["epsilon_accounted"]


def test_dirac_revealed_participation_gives_both_views(cli_json, tmp_path):
    """The example (Poisson q = 0.5) with its participation revealed: accounted with participation revealed
    (above the amplified ε of the same noise), and the same run's hidden view beside it; neither is a
    VIOLATION."""
    argv = ["audit", "run", EXAMPLE, "--out", str(tmp_path), "--rounds", "5", "--no-progress"]
    out = cli_json([*argv, "--canary", "dirac", "--canaries", "2000", "--participation", "revealed"])
    hidden = out["hidden_view"]
    assert out["participation"] == "revealed" and "which canary clients" in out["observer"]
    assert hidden["epsilon_accounted"] < out["epsilon_accounted"]
    assert out["verdict"] != "VIOLATION" and hidden["verdict"] != "VIOLATION"
    assert 0.0 <= out["epsilon_lower"] <= out["epsilon_accounted"]


def test_dirac_revealed_participation_needs_dp_fedavg(run_cli, tmp_path):
    config = tmp_path / "sgd.toml"
    config.write_text(
        'seed = 0\nrounds = 2\n[dataset]\nname = "digits"\n[partition]\nscheme = "iid"\nnum_clients = 4\n'
        '[model]\nname = "logreg"\n[algorithm]\nname = "dp_dsgd_rp"\nparticipation = 1.0\n'
        "sampling_rate = 0.5\n"
        "clip = 1.0\nnoise_multiplier = 3.0\nlocal_dataset_size = 500\n",
        "utf-8",
    )
    argv = ["audit", "run", str(config), "--out", str(tmp_path / "out"), "--canary", "dirac"]
    code, out, err = run_cli([*argv, "--participation", "revealed"])
    assert code == 2 and out == ""
    assert (
        "--participation: 'revealed' with canary 'dirac' applies to dp_fedavg" in err and err.count("\n") == 1
    )
