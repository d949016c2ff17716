"""``ampfl deploy --secure-aggregation secaggplus`` of GDPFed (paper 001) on real Flower processes.

The noise is calibrated for ``num_rounds = 4`` and the run has 1 round: under SecAgg+ each group's budget is
checked on the worst case of dropouts (z_g·√(2/3) for a sum of 3 nodes), which a plan spent to its last round
would fail (the run would stop a round early, ``stopped = "budget"``).

One real federation (6 SuperNodes in 2 privacy groups of 3, one round, to keep ``make test`` short: each
Flower message starts a ClientApp process that imports torch, 6 × 5 of them here; one SecAgg+ round per
group): the run completes and writes its summary; its per-round ε equals ``ampfl run``'s for the same config;
the server-side strategy receives, per round and group, only that group's aggregate (the same vector from
every node of the group, equal to the sum of what the group's nodes sent), with no per-node weight or
metric; every node sent into its own group's sum; the ledger gives each client its group's ε.
"""

from __future__ import annotations

import json
import sqlite3
import tomllib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from ampfl.fl.config import parse_config
from ampfl.fl.run.experiment import build_algorithm, build_task, run_experiment
from ampfl.fl.run.release import MODEL_CONSUMERS, SERVER
from ampfl.flower.deploy import deploy
from ampfl.flower.ledger import LEDGER
from ampfl.flower.local import marked_processes
from ampfl.flower.secagg import SPY_ENV

CONFIG = """
seed = 11
rounds = 1
eval_every = 1

[dataset]
name = "digits"

[partition]
scheme = "iid"
num_clients = 6

[model]
name = "logreg"

[algorithm]
name = "gdpfed"
participation = 0.5
group_budgets = [2.0, 8.0]
group_sizes = [3, 3]
expected_group_sizes = [3, 3]
num_rounds = 4
clip = 1.0
learning_rate = 0.5
num_local_steps = 3
batch_size = 10
"""


def _read(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_gdpfed_under_secaggplus_one_sum_per_group_and_the_simulators_epsilon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    spy = tmp_path / "spy"
    monkeypatch.setenv(SPY_ENV, str(spy))
    config = parse_config(tomllib.loads(CONFIG))
    labels = build_algorithm(config, build_task(config)).labels  # type: ignore[attr-defined]
    members = [sorted(np.flatnonzero(labels == g).tolist()) for g in range(2)]
    # Execute
    out = tmp_path / "flower"
    summary = deploy(config, out, secure_aggregation="secaggplus")
    simulated = run_experiment(config, tmp_path / "sim", progress=False, plots=False)
    # Assert: completed, summary written, ε per round = ampfl run's (to 1e-9)
    assert summary["completed"] and summary["rounds_completed"] == 1 and (out / "summary.json").is_file()
    assert summary["secure_aggregation"] == "secaggplus"
    ours = [line["epsilon"] for line in _read(out / "metrics.jsonl")]
    theirs = [line["epsilon"] for line in _read(tmp_path / "sim" / "metrics.jsonl")]
    assert len(ours) == len(theirs) == 1
    assert ours == pytest.approx(theirs, rel=0.0, abs=1e-9)
    assert summary["epsilon"] == pytest.approx(simulated["epsilon"], rel=0.0, abs=1e-9)
    assert summary["protects_against"] == [MODEL_CONSUMERS, SERVER]
    # The strategy saw one SecAgg+ round per (round, group), each over that group's 3 nodes only.
    server = _read(spy / "server.jsonl")
    assert sorted((entry["round"], entry["part"]) for entry in server) == [(0, 0), (0, 1)]
    own = {c: _read(spy / f"client-{c}.jsonl") for c in range(6)}
    for c, rows in own.items():
        assert [row["part"] for row in rows] == [int(labels[c])]  # every node noised its own group's sum
    for entry in server:
        results = entry["results"]
        assert entry["failures"] == 0 and len(results) == 3
        assert {r["num_examples"] for r in results} == {1} and all(r["metrics"] == {} for r in results)
        vectors = [np.asarray(r["parameters"][0]) for r in results]
        assert all(np.array_equal(v, vectors[0]) for v in vectors)  # one aggregate, no individual vector
        sent = np.stack([np.asarray(own[c][entry["round"]]["vector"]) for c in members[entry["part"]]])
        np.testing.assert_allclose(vectors[0] * 3, sent.sum(0), atol=3 * 2 / 2**22 * 3)
    diagnostics = _read(out / "diagnostics.jsonl")[1:]
    assert all(not {"participants", "train_loss"} & set(line) for line in diagnostics)  # nothing decoded
    # The ledger: each client's ε is its group's.
    with sqlite3.connect(out / LEDGER) as db:
        spent = dict(db.execute("SELECT client, epsilon FROM privacy_spent").fetchall())
        groups = db.execute("SELECT client, event FROM privacy_events").fetchall()
    for c in range(6):
        g = int(labels[c])
        assert spent[str(c)] == pytest.approx(simulated["epsilon_by_group"][str(g)], rel=1e-9)
        assert {json.loads(event)["group"] for client, event in groups if client == str(c)} == {g}
    assert marked_processes(str(out.resolve())) == []
