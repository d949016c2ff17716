"""``ampfl deploy`` of depthfl (issue 28 item 3) on real SuperLink/SuperNodes.

One federation (3 clients of depths 1, 2, 3, one round, the small split CNN on digits): the deployed model
after the round scores as ``ampfl run``'s (the clients train on the simulator's mini-batches; the sum is
divided per coordinate by its holders) and, as there, ε is infinite and no unit is protected. The client and
server halves are checked in-process in tests/fl/test_depthfl_protocol.py.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from ampfl.fl.config import parse_config
from ampfl.fl.run.experiment import run_experiment
from ampfl.fl.run.folder import read_lines
from ampfl.flower.deploy import deploy
from ampfl.flower.local import marked_processes

CONFIG = """
seed = 2
rounds = 1
eval_every = 1

[dataset]
name = "digits"

[partition]
scheme = "iid"
num_clients = 3

[model]
name = "split_cnn"
options = {channels = [4, 8, 8], groups = 2}

[algorithm]
name = "depthfl"
client_fraction = 1.0
client_splits = [1, 2, 3]
num_local_steps = 5
batch_size = 16
learning_rate = 0.01
eval_clients = 3

[privacy]
reproducible = true
"""


@pytest.mark.slow
# FedAvg's shape (trusted server, weights in the clear); the protocol: tests/fl/test_depthfl_protocol.py
def test_depthfl_deploys_and_scores_as_ampfl_run(tmp_path: Path) -> None:
    config = parse_config(tomllib.loads(CONFIG))
    out = tmp_path / "flower"
    summary = deploy(config, out)
    simulated = run_experiment(config, tmp_path / "sim", progress=False, plots=False)

    assert summary["engine"] == "flower" and summary["rounds_completed"] == simulated["rounds_completed"] == 1
    assert math.isinf(summary["epsilon"]) and math.isinf(simulated["epsilon"])
    assert summary["privacy_unit"] is None and simulated["privacy_unit"] is None
    ours = read_lines(out, diagnostics=True)
    theirs = read_lines(tmp_path / "sim", diagnostics=True)
    assert [line["round"] for line in ours] == [line["round"] for line in theirs] == [1]
    assert ours[0]["participants"] == ours[0]["asked"] == 3.0
    for key in ("accuracy", "global_accuracy", "own_depth_accuracy"):
        assert abs(ours[0][key] - theirs[0][key]) <= 0.005, key
    assert abs(summary["final_accuracy"] - simulated["final_accuracy"]) <= 0.005
    assert summary["protects_against"] == summary["participation_hidden_from"] == []  # no guarantee
    assert marked_processes(str(out.resolve())) == []  # nothing outlives the deployment
