"""A failed write leaves the run folder as its last checkpoint left it (issue 32, part 5).

A full disk is simulated by an ``os.write`` that writes half of a line and then fails with ENOSPC
(appends are the only ``os.write`` callers of a run; atomic files go through ``tempfile`` + ``os.replace``).
"""

from __future__ import annotations

import errno
import json
import os

import pytest

from ampfl import io as io_module
from ampfl.fl.config import parse_config
from ampfl.fl.run.experiment import load_checkpoint, run_experiment
from ampfl.fl.run.folder import CONFIG_JSON, CONFIG_TOML, DIAGNOSTICS, METRICS

DATA = {
    "seed": 3,
    "rounds": 4,
    "eval_every": 1,
    "checkpoint_every": 2,
    "dataset": {"name": "synthetic"},
    "partition": {"scheme": "iid", "num_clients": 8},
    "algorithm": {"name": "dp_fedavg", "noise_multiplier": 2.0, "cohort_size": 4},
}


def _lines(path):
    text = path.read_text("utf-8")
    assert text == "" or text.endswith("\n"), "a half-written line was left"
    return [json.loads(line) for line in text.splitlines()]


def test_a_failed_append_rolls_the_lines_back_to_the_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "run"
    real_write = os.write
    calls = {"n": 0}

    def full_disk(fd, data):  # rounds 1-2 write 4 lines; round 3's metrics line lands, its diagnostics fails
        calls["n"] += 1
        if calls["n"] == 6:
            return real_write(fd, bytes(data)[: len(data) // 2])
        if calls["n"] >= 7:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(io_module.os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        run_experiment(parse_config(DATA), out, progress=False, plots=False)
    monkeypatch.undo()
    # the folder is exactly its round-2 checkpoint: no line past it, no half line
    checkpoint = load_checkpoint(out)
    assert checkpoint["rounds_done"] == 2
    assert _lines(out / METRICS) == checkpoint["metrics"] and [m["round"] for m in checkpoint["metrics"]] == [
        1,
        2,
    ]
    assert _lines(out / DIAGNOSTICS)[1:] == checkpoint["diagnostics"]
    # resuming with the same config rewrites neither config file (a full disk could not fail on them)
    before = {name: os.stat(out / name).st_ino for name in (CONFIG_JSON, CONFIG_TOML)}
    summary = run_experiment(parse_config(DATA), out, progress=False, plots=False, resume=True)
    assert summary["completed"] and [m["round"] for m in _lines(out / METRICS)] == [1, 2, 3, 4]
    assert {name: os.stat(out / name).st_ino for name in (CONFIG_JSON, CONFIG_TOML)} == before


def test_the_rolled_back_run_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    config = parse_config({**DATA, "privacy": {"reproducible": True}})
    run_experiment(config, tmp_path / "ref", progress=False, plots=False)
    calls = {"n": 0}
    real_write = os.write

    def full_disk(fd, data):
        calls["n"] += 1
        if calls["n"] == 6:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(io_module.os, "write", full_disk)
    with pytest.raises(OSError):
        run_experiment(config, tmp_path / "run", progress=False, plots=False)
    monkeypatch.undo()
    run_experiment(config, tmp_path / "run", progress=False, plots=False, resume=True)
    resumed, reference = _lines(tmp_path / "run" / METRICS), _lines(tmp_path / "ref" / METRICS)
    assert [(m["round"], m["accuracy"], m["epsilon"]) for m in resumed] == [
        (m["round"], m["accuracy"], m["epsilon"]) for m in reference
    ]
