"""``ampfl deploy`` of dp_sgd_split (002 Algorithms 1-2, issue 28 item 3) on real SuperLink/SuperNodes.

One federation (3 clients, 2 rounds, a small MLP: ~25 s on an idle core, Flower polls every 3 s): the
per-round ε equals ``ampfl run``'s for the same config, the server's cohort is the simulator's, and nothing
outlives the deployment. The client and server halves are checked in-process in
tests/fl/test_dp_sgd_split_protocol.py.
"""

from __future__ import annotations

import json
import math
import sqlite3
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from ampfl.fl.config import parse_config
from ampfl.fl.run.experiment import build_algorithm, build_task, run_experiment
from ampfl.fl.run.folder import read_lines
from ampfl.fl.run.release import MODEL_CONSUMERS
from ampfl.flower.deploy import deploy
from ampfl.flower.ledger import LEDGER
from ampfl.flower.local import marked_processes

CONFIG = """
seed = 5
rounds = 2
eval_every = 1

[dataset]
name = "digits"

[partition]
scheme = "iid"
num_clients = 3

[model]
name = "mlp"
options = {hidden = [8]}

[algorithm]
name = "dp_sgd_split"
num_submodels = 2
shared = ["net.2"]
clip = 1.0
nonsplit_clip = 0.5
sampling = "poisson"
sampling_rate = 0.8
expected_clients = 2.4
noise_multiplier = 1.0
num_rounds = 2
num_local_steps = 2
batch_size = 10
learning_rate = 0.5

[privacy]
reproducible = true
"""


@pytest.mark.slow
def test_dp_sgd_split_deploys_with_the_simulators_epsilon(tmp_path: Path) -> None:
    config = parse_config(tomllib.loads(CONFIG))
    out = tmp_path / "flower"
    summary = deploy(config, out)
    simulated = run_experiment(config, tmp_path / "sim", progress=False, plots=False)

    assert summary["engine"] == "flower" and summary["rounds_completed"] == simulated["rounds_completed"] == 2
    ours = read_lines(out)
    theirs = read_lines(tmp_path / "sim")
    assert [line["round"] for line in ours] == [line["round"] for line in theirs] == [1, 2]
    for mine, sim in zip(ours, theirs, strict=True):
        assert mine["epsilon"] == pytest.approx(sim["epsilon"], rel=1e-9, abs=0.0)
        assert math.isfinite(mine["accuracy"])
    assert summary["epsilon"] == pytest.approx(simulated["epsilon"], rel=1e-9, abs=0.0)
    assert math.isfinite(summary["epsilon"]) and summary["epsilon"] > 0
    # The server samples the cohort as the simulator does (same privacy key under reproducible).
    algorithm = build_algorithm(config, build_task(config))
    for line, r in zip(read_lines(out, diagnostics=True), range(2), strict=True):
        assert line["asked"] == line["participants"] == float(len(algorithm.participants_of(r)))
        assert set(line) & {"block", "mask"} == set()
    # Central noise: the server saw each update, so ε covers the model consumers only.
    assert summary["protects_against"] == [MODEL_CONSUMERS]
    with sqlite3.connect(out / LEDGER) as db:
        events = {row[0] for row in db.execute("SELECT DISTINCT event FROM privacy_events")}
    assert events == {json.dumps(algorithm.round_events(0)[0][0].to_dict(), sort_keys=True)}
    assert marked_processes(str(out.resolve())) == []
