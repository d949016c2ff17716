"""``ampfl run`` and ``ampfl demo`` on the command line: exit codes, one-line errors, the JSON contract."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ampfl.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TINY = """
seed = 1
rounds = 4
eval_every = 2
checkpoint_every = 2

[dataset]
name = "synthetic"

[partition]
scheme = "iid"
num_clients = 10

[algorithm]
name = "fedavg"
"""


def _one_line_error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("ampfl: error:") and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_run_json_summary_and_resume(tmp_path, capsys):
    # Prepare
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    out = tmp_path / "run"
    # Execute
    code = main(["run", str(config), "--out", str(out), "--json", "--no-progress"])
    # Assert
    captured = capsys.readouterr()
    assert code == 0
    summary = json.loads(captured.out)
    assert {
        "algorithm",
        "dataset",
        "rounds",
        "final_accuracy",
        "epsilon",
        "delta",
        "analysis",
        "wall_seconds",
        "rounds_completed",
        "stopped",
        "privacy_unit",
    } <= set(summary)
    assert summary["algorithm"] == "fedavg" and summary["rounds"] == 4 and summary["epsilon"] == float("inf")
    assert (
        summary["privacy_unit"] is None
        and summary["stopped"] == "rounds"
        and summary["rounds_completed"] == 4
    )
    assert (out / "summary.json").is_file() and (out / "metrics.jsonl").is_file()
    # Running again into the same folder needs --resume; with it, the finished run is summarised again.
    code = main(["run", str(config), "--out", str(out), "--no-progress"])
    assert "already holds a run" in _one_line_error(capsys, code)
    assert main(["run", str(config), "--out", str(out), "--resume", "--json", "--no-progress"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["final_accuracy"] == summary["final_accuracy"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            TINY.replace('name = "fedavg"', 'name = "fedavg"\nlearning_rat = 0.1'),
            "algorithm.learning_rat: unknown key",
        ),
        (TINY.replace("rounds = 4", "rounds = -4"), "rounds: Input should be greater than or equal to 1"),
        (TINY.replace("num_clients = 10", "num_clients = 10\nsize = 3"), "partition.size: unknown key"),
        ("rounds = [", "invalid TOML"),
        (
            TINY + '[privacy]\naccountant = "moments"\n',
            "privacy.accountant: Input should be 'auto', 'rdp' or 'pld'",
        ),
        (TINY + "[privacy]\nmax_epsilon = 1.0\n", "privacy.max_epsilon: fedavg gives no privacy guarantee"),
        (
            TINY.replace('name = "fedavg"', 'name = "dp_fedavg"\nnoise_multiplier = 1.0')
            + '[privacy]\naccountant = "pld"\n',
            "privacy.accountant: the 'pld' accountant cannot account dp_fedavg's events",
        ),
    ],
    ids=[
        "unknown-param",
        "bad-rounds",
        "unknown-partition-key",
        "bad-toml",
        "bad-accountant",
        "budget-without-privacy",
        "unsupported-events",
    ],
)
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, text, expected):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    code = main(["run", str(config), "--out", str(tmp_path / "run")])
    assert expected in _one_line_error(capsys, code)
    assert not (tmp_path / "run").exists()


def test_unknown_or_unavailable_dataset_is_one_line_and_leaves_no_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AMPFL_DATA", str(tmp_path / "empty-cache"))
    for name, expected in [("nosuch", "dataset must be one of"), ("cifar10", "is not available")]:
        config = tmp_path / f"{name}.toml"
        config.write_text(TINY.replace('name = "synthetic"', f'name = "{name}"'))
        out = tmp_path / name
        code = main(["run", str(config), "--out", str(out), "--no-progress"])
        assert expected in _one_line_error(capsys, code)
        assert not (out / "config.json").exists()


def test_missing_config_and_resume_without_checkpoint(tmp_path, capsys):
    code = main(["run", str(tmp_path / "nope.toml")])
    assert "cannot read the config file" in _one_line_error(capsys, code)
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    code = main(["run", str(config), "--out", str(tmp_path / "empty"), "--resume"])
    assert "no checkpoint" in _one_line_error(capsys, code)


@pytest.mark.parametrize("argv", [["run", "cfg.toml"], ["demo"]])
def test_missing_torch_names_the_train_extra(monkeypatch, capsys, argv):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    code = main(argv)
    assert "'train' extra" in _one_line_error(capsys, code)


def test_example_config_runs_from_the_cli(tmp_path, capsys):
    # The shipped example, shortened to two rounds so that the test stays fast.
    text = (EXAMPLES / "digits_dp_fedavg.toml").read_text()
    lines = [("rounds = 2" if line.startswith("rounds") else line) for line in text.splitlines()]
    config = tmp_path / "short.toml"
    config.write_text("\n".join(lines) + "\n")
    code = main(["run", str(config), "--out", str(tmp_path / "run"), "--json", "--no-progress"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["algorithm"] == "dp_fedavg" and summary["rounds"] == 2
    assert 0 < summary["epsilon"] < float("inf") and summary["privacy_unit"] == "client"


def test_budget_stop_from_the_cli(tmp_path, capsys):
    # DP-DSGD with random participation, stopped by [privacy] max_epsilon before round 4.
    text = TINY.replace(
        'name = "fedavg"',
        'name = "dp_dsgd_rp"\nnoise_multiplier = 1.0\nparticipation = 0.5\nlocal_dataset_size = 200',
    )
    config = tmp_path / "budget.toml"
    # between RDP's ε after 2 and after 3 rounds (the default "auto" would be the tighter PLD here)
    config.write_text(text + '[privacy]\naccountant = "rdp"\nmax_epsilon = 2.4\n')
    code = main(["run", str(config), "--out", str(tmp_path / "run"), "--json", "--no-progress"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["stopped"] == "budget" and summary["rounds_completed"] == 2
    assert (
        2.2 < summary["epsilon"] <= 2.4 and summary["privacy_unit"] == "record" and summary["delta"] == 1e-5
    )


def test_no_plots_flag_and_config_key_write_no_png(tmp_path, run_cli):  # type: ignore[no-untyped-def]
    text = """seed = 0
rounds = 2
[partition]
num_clients = 4
scheme = "iid"
[algorithm]
name = "fedavg"
cohort_size = 2
"""
    (tmp_path / "a.toml").write_text(text)
    (tmp_path / "b.toml").write_text("plots = false\n" + text)
    code, _, err = run_cli(["run", str(tmp_path / "a.toml"), "--out", str(tmp_path / "a"), "--no-plots",
                            "--no-progress", "--json"])  # fmt: skip
    assert code == 0, err
    code, _, err = run_cli(["run", str(tmp_path / "b.toml"), "--out", str(tmp_path / "b"), "--no-progress",
                            "--json"])  # fmt: skip
    assert code == 0, err
    for name in ("a", "b"):
        assert (tmp_path / name / "summary.json").is_file()
        assert not list((tmp_path / name).glob("*.png"))
