"""The round loop both engines share (ampfl.fl.run.loop): a backend that cannot replay a round (Flower: the
server's noise comes from the operating system) has every round checkpointed before its line is written, and
the loop's numbers do not depend on which kind of backend runs the rounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ampfl.fl.config import parse_config
from ampfl.fl.run import experiment as run_module
from ampfl.fl.run import loop as loop_module
from ampfl.fl.run.experiment import load_checkpoint, run_experiment


def _config(**privacy: Any) -> Any:
    return parse_config(
        {
            "seed": 2,
            "rounds": 5,
            "eval_every": 2,
            "checkpoint_every": 0,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": 8},
            "model": {"name": "logreg"},
            "algorithm": {
                "name": "dp_dsgd_rp",
                "noise_multiplier": 2.0,
                "participation": 0.5,
                "local_dataset_size": 230,
            },
            "privacy": {"accountant": "rdp", "reproducible": True, **privacy},
        }
    )


def _lines(folder: Path, name: str = "metrics.jsonl") -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (folder / name).read_text().splitlines()]
    for line in lines:
        line.pop("wall_seconds", None)
    return lines


class _NotReplayable(run_module.SimulatorBackend):
    replayable = False


@pytest.mark.parametrize("max_epsilon", [None, 0.6])  # 0.6: stops after round 3, not evaluated
def test_a_round_that_cannot_replay_is_checkpointed_before_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_epsilon: float | None
) -> None:
    # Arrange: record the rounds of every checkpoint and, at every appended line, the last checkpoint's round
    config = _config(max_epsilon=max_epsilon)
    reference = run_experiment(config, tmp_path / "replayable", progress=False, plots=False)
    saved: list[int] = []
    real_save = loop_module.save_checkpoint

    def save(out: Path, algorithm: Any, **kwargs: Any) -> Path:
        saved.append(int(kwargs["rounds_done"]))
        return real_save(out, algorithm, **kwargs)

    shown: list[tuple[int, int]] = []  # (line's round, rounds in the checkpoint when it was appended)
    real_append = loop_module.AppendLog.append

    def append(self: Any, text: str) -> None:
        if '"round"' in text and "NOT differentially private" not in text:
            shown.append((int(json.loads(text)["round"]), saved[-1] if saved else -1))
        real_append(self, text)

    monkeypatch.setattr(loop_module, "save_checkpoint", save)
    monkeypatch.setattr(loop_module.AppendLog, "append", append)
    monkeypatch.setattr(run_module, "SimulatorBackend", _NotReplayable)
    # Execute
    summary = run_experiment(config, tmp_path / "not_replayable", progress=False, plots=False)
    # Assert: every round checkpointed, each line shown only after the checkpoint holding its round, and the
    # same lines, ε and stop as the replayable loop's (the simulator's rounds are the same either way)
    # (a budget stop checkpoints its last round again, with the line that states the ε it stopped at)
    assert sorted(set(saved)) == list(range(1, summary["rounds_completed"] + 1)) and saved == sorted(saved)
    assert shown and all(checkpointed >= round_ for round_, checkpointed in shown)
    assert _lines(tmp_path / "not_replayable") == _lines(tmp_path / "replayable")
    assert _lines(tmp_path / "not_replayable", "diagnostics.jsonl") == _lines(
        tmp_path / "replayable", "diagnostics.jsonl"
    )
    for key in ("epsilon", "stopped", "rounds_completed"):
        assert summary[key] == reference[key]
    if max_epsilon is not None:
        assert summary["stopped"] == "budget"
    state = load_checkpoint(tmp_path / "not_replayable")
    assert state["metrics"][-1]["round"] == summary["rounds_completed"]
