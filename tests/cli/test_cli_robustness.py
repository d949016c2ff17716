"""No tracebacks for what a new user types (issue 17, part 6): diverging training and unusable --out paths."""

from __future__ import annotations

import os

import pytest

from ampfl.cli import main

TINY = """
seed = 1
rounds = 4
eval_every = 1
checkpoint_every = 1

[dataset]
name = "synthetic"

[partition]
scheme = "iid"
num_clients = 10

[algorithm]
name = "fedavg"
learning_rate = {lr}
"""


def _config(tmp_path, lr: str):
    path = tmp_path / "cfg.toml"
    path.write_text(TINY.format(lr=lr), encoding="utf-8")
    return path


def _one_line(capsys, code: int, expected: int) -> str:
    captured = capsys.readouterr()
    assert code == expected, captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    return captured.err


def test_diverging_learning_rate_is_one_line_naming_round_and_cause(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", str(_config(tmp_path, "1e100")), "--out", str(out), "--no-progress", "--json"])
    err = _one_line(capsys, code, 1)
    assert "round 1" in err and "diverged" in err and "learning_rate" in err
    assert (out / "config.toml").is_file()  # the run folder is kept


def test_non_finite_parameters_are_detected_after_the_round(tmp_path, capsys):
    # 3e38 fits in float32, so the step runs; the parameters it produces are not finite.
    out = tmp_path / "run"
    code = main(["run", str(_config(tmp_path, "3e38")), "--out", str(out), "--no-progress", "--json"])
    err = _one_line(capsys, code, 1)
    assert "round 1" in err and "non-finite model parameters" in err
    assert not (out / "checkpoint.pt").exists()  # a diverged state is never checkpointed


@pytest.mark.parametrize("command", ["run", "demo", "reproduce"])
def test_out_that_is_a_file_or_under_a_file(tmp_path, capsys, command):
    afile = tmp_path / "afile"
    afile.write_text("x")
    prefix = {
        "run": ["run", str(_config(tmp_path, "0.1"))],
        "demo": ["demo"],
        "reproduce": ["reproduce", "dong-fig1"],
    }[command]
    for out, needle in [(afile, "must be a folder"), (afile / "sub", "under the file")]:
        code = main([*prefix, "--out", str(out)])
        err = _one_line(capsys, code, 2)
        assert "--out" in err and needle in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_out_in_a_read_only_folder(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code = main(["run", str(_config(tmp_path, "0.1")), "--out", str(locked / "run")])
        err = _one_line(capsys, code, 2)
        assert "--out" in err and "writable" in err
    finally:
        locked.chmod(0o700)


def test_unwritable_path_is_one_line_even_for_root(tmp_path, capsys):
    # /proc refuses new folders whoever asks: the OSError becomes one line, exit 2.
    code = main(["run", str(_config(tmp_path, "0.1")), "--out", "/proc/ampfl-test-run", "--no-progress"])
    err = _one_line(capsys, code, 2)
    assert "/proc/ampfl-test-run" in err
