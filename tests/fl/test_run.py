"""The run folder of ``run_experiment``: files, metrics lines, summary keys, the run-level accountant (ε on
every line, composed once per round, budget stop, checkpointed), and bit-identical resumption."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from pydantic import BaseModel, ConfigDict, Field

from ampfl.accounting.accountants import RDPAccountant
from ampfl.accounting.events import GaussianEvent
from ampfl.fl.algorithms.base import ROLE_NOISE, ROLE_SAMPLING, Algorithm
from ampfl.fl.config import parse_config
from ampfl.fl.run import experiment as run_module
from ampfl.fl.run import summary as run_summary
from ampfl.fl.run.experiment import load_checkpoint, run_experiment
from ampfl.fl.task import Task

SUMMARY_KEYS = {
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
    "accountant",
}


@dataclass(frozen=True)
class _TinyDataset:
    """Two Gaussian blobs; stands in for ``ampfl.fl.data.Dataset`` (same attributes)."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int = 2


def _tiny_task(num_clients: int = 8) -> Task:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=240)
    x = (rng.normal(size=(240, 5)) + 1.5 * y[:, None]).astype(np.float32)
    data = _TinyDataset("tiny", x[:160], y[:160].astype(np.int64), x[160:], y[160:].astype(np.int64))
    return Task(dataset=data, client_indices=list(np.array_split(np.arange(160), num_clients)))  # type: ignore[arg-type]


class NoisyAveraging(Algorithm):
    """A small but genuine algorithm obeying the ABC: sampled clients take one noisy gradient step each.

    It keeps a per-client counter (like a client store) so that resumption must restore more than the model.
    Its privacy event (one Gaussian mechanism per round, noise multiplier ``event_noise``) only exercises the
    run's accountant.
    """

    name: ClassVar[str] = "noisy_avg"
    privacy_unit = "client"

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")
        learning_rate: float = Field(0.5, gt=0)
        noise_std: float = Field(0.05, ge=0)
        cohort_size: int = Field(3, ge=1)
        event_noise: float = Field(4.0, gt=0)

    def __init__(
        self,
        params: BaseModel,
        task: Task,
        *,
        seed: int,
        engine: Any = None,
        privacy: Any = None,
        privacy_key: int | None = None,
    ) -> None:
        super().__init__(params, task, seed=seed, engine=engine, privacy=privacy, privacy_key=privacy_key)
        generator = self.torch_generator(-1, 0)
        self.weights = torch.randn(task.dataset.x_train.shape[1], generator=generator) * 0.01
        self.visits = np.zeros(task.num_clients, dtype=np.int64)

    def run_round(self, round_index: int) -> dict[str, float]:
        p = self.params
        chosen = self.rng(round_index, ROLE_SAMPLING).choice(
            self.task.num_clients, p.cohort_size, replace=False
        )
        noise = torch.randn(
            len(chosen), self.weights.numel(), generator=self.torch_generator(round_index, ROLE_NOISE)
        )
        updates = []
        for k, client in enumerate(chosen):
            idx = self.task.client_indices[client]
            x = torch.from_numpy(self.task.dataset.x_train[idx])
            y = torch.from_numpy(self.task.dataset.y_train[idx]).float()
            grad = x.T @ (torch.sigmoid(x @ self.weights) - y) / len(idx)
            updates.append(-p.learning_rate * grad + p.noise_std * noise[k])
            self.visits[client] += 1
        self.weights = self.weights + torch.stack(updates).mean(0)
        return {"participants": float(len(chosen))}

    def evaluate(self) -> dict[str, float]:
        x = torch.from_numpy(self.task.dataset.x_test)
        y = torch.from_numpy(self.task.dataset.y_test)
        predicted = (x @ self.weights > 0).long()
        return {"accuracy": float((predicted == y).float().mean())}

    def round_events(self, round_index: int) -> list[tuple[GaussianEvent, int]]:
        return [(GaussianEvent(noise_multiplier=self.params.event_noise), 1)]

    def state_dict(self) -> dict[str, Any]:
        return {"weights": self.weights.clone(), "visits": self.visits.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weights = state["weights"].clone()
        self.visits = np.array(state["visits"], dtype=np.int64)


REGISTRY = {NoisyAveraging.name: NoisyAveraging}


def _epsilon(rounds: int, z: float = 4.0, delta: float = 1e-5) -> float:
    """ε of ``rounds`` Gaussian mechanisms with multiplier z, composed independently of the run."""
    return RDPAccountant().compose(GaussianEvent(noise_multiplier=z), rounds).get_epsilon(delta)


def _config(**overrides: Any):
    data: dict[str, Any] = {
        "seed": 3,
        "rounds": 6,
        "eval_every": 2,
        "checkpoint_every": 3,
        "dataset": {"name": "tiny"},
        "algorithm": {"name": "noisy_avg", "noise_std": 0.05},
    }
    # The RDP numbers below need the RDP accountant ("auto", the default: tests/fl/test_privacy_auto.py).
    # Reproducible: these tests compare separate runs bit for bit (tests/fl/test_release.py: the secret key).
    privacy = {"accountant": "rdp", "reproducible": True, **overrides.pop("privacy", {})}
    data.update(overrides, privacy=privacy)
    return parse_config(data, algorithms=REGISTRY)


@pytest.fixture(autouse=True)
def _fake_tests_need_no_engine(request, monkeypatch):
    if "real" not in request.node.name:
        monkeypatch.setattr(run_module, "build_engine", lambda config: object())


def _run(config, out, **kwargs):
    return run_experiment(config, out, progress=False, algorithms=REGISTRY, task=_tiny_task(), **kwargs)


def test_run_folder_contents_metrics_and_summary(tmp_path):
    # Prepare
    config = _config(rounds=5)
    # Execute
    summary = _run(config, tmp_path / "run")
    # Assert
    folder = tmp_path / "run"
    for name in (
        "config.json",
        "config.toml",
        "metrics.jsonl",
        "diagnostics.jsonl",
        "checkpoint.pt",
        "summary.json",
        "accuracy.png",
        "epsilon.png",
    ):
        assert (folder / name).is_file(), name
    assert SUMMARY_KEYS <= set(summary)
    # One writer for both engines (issue 28): exactly its keys; the Flower-only ones are null here.
    assert tuple(summary) == run_summary.SUMMARY_KEYS and summary["engine"] == "simulator"
    assert summary["secure_aggregation"] is None and summary["discovery_seconds"] is None
    # timing depends on who took part: a private run keeps it apart (timing.json), its summary says null
    assert summary["round_seconds_mean"] is None and summary["wall_seconds"] is None
    timing = json.loads((folder / "timing.json").read_text())
    assert 0.0 < timing["round_seconds_mean"] < timing["wall_seconds"]
    assert json.loads((folder / "summary.json").read_text()) == json.loads(json.dumps(summary))
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    # eval_every = 2 and the last round is always evaluated: rounds 2, 4, 5.
    assert [line["round"] for line in lines] == [2, 4, 5]
    for line in lines:
        assert set(line) == {"round", "accuracy", "epsilon", "delta"}  # released values only
        assert line["epsilon"] == pytest.approx(_epsilon(line["round"]), rel=1e-12)
        assert line["delta"] == 1e-5
    assert summary["final_accuracy"] == lines[-1]["accuracy"]
    text = (folder / "diagnostics.jsonl").read_text()
    header, *diagnostics = [json.loads(line) for line in text.splitlines()]
    assert header["diagnostics"] == "NOT differentially private"
    assert [line["round"] for line in diagnostics] == [2, 4, 5]
    assert all("participants" in line and "epsilon" not in line for line in diagnostics)
    assert summary["protects_against"] == ["model consumers"] and summary["neighbouring"] == "add-remove"
    assert summary["epsilon"] == lines[-1]["epsilon"] == pytest.approx(_epsilon(5), rel=1e-12)
    assert summary["stopped"] == "rounds" and summary["rounds_completed"] == 5
    assert summary["privacy_unit"] == "client" and summary["accountant"] == "rdp"
    assert summary["rounds"] == 5 and summary["algorithm"] == "noisy_avg" and summary["dataset"] == "tiny"
    assert summary["final_accuracy"] > 0.6  # the blobs are easy: the fake algorithm does learn
    assert json.loads((folder / "config.json").read_text())["algorithm"] == {
        "name": "noisy_avg",
        "learning_rate": 0.5,
        "noise_std": 0.05,
        "cohort_size": 3,
        "event_noise": 4.0,
    }
    assert json.loads((folder / "config.json").read_text())["privacy"] == {
        "accountant": "rdp",
        "accounting": "amplified",
        "delta": 1e-5,
        "max_epsilon": None,
        "neighbouring": "add-remove",
        "reproducible": True,
    }
    assert load_checkpoint(folder)["rounds_done"] == 5


def test_resolved_toml_is_a_valid_config(tmp_path):
    # Prepare
    config = _config()
    _run(config, tmp_path / "run")
    # Execute
    from ampfl.fl.config import load_config

    again = load_config(tmp_path / "run" / "config.toml", algorithms=REGISTRY)
    # Assert
    assert again == config


def test_interrupted_then_resumed_run_is_bit_identical(tmp_path):
    # Prepare
    config = _config()
    full = _run(config, tmp_path / "full")
    # Execute: stop after 3 rounds (checkpoint), then resume to the end.
    partial = _run(config, tmp_path / "split", stop_after=3)
    assert partial["completed"] is False and partial["rounds_done"] == 3
    assert not (tmp_path / "split" / "summary.json").exists()
    resumed = _run(config, tmp_path / "split", resume=True)
    # Assert
    a = load_checkpoint(tmp_path / "full")
    b = load_checkpoint(tmp_path / "split")
    assert torch.equal(a["algorithm"]["weights"], b["algorithm"]["weights"])
    np.testing.assert_array_equal(a["algorithm"]["visits"], b["algorithm"]["visits"])
    strip = [{k: v for k, v in m.items() if k != "wall_seconds"} for m in a["metrics"]]
    assert strip == [{k: v for k, v in m.items() if k != "wall_seconds"} for m in b["metrics"]]
    assert full["final_accuracy"] == resumed["final_accuracy"] and full["epsilon"] == resumed["epsilon"]
    assert a["privacy"] == b["privacy"]  # the accountant continued: same composed state, same ε
    lines = (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in lines] == [2, 4, 6]


def test_resumed_pld_run_reports_the_same_epsilon(tmp_path):
    # The PLD accountant's state is its composition history, replayed on load in the same order.
    config = _config(eval_every=1, privacy={"accountant": "pld"})
    full = _run(config, tmp_path / "full")
    _run(config, tmp_path / "split", stop_after=2)
    resumed = _run(config, tmp_path / "split", resume=True)
    a, b = load_checkpoint(tmp_path / "full"), load_checkpoint(tmp_path / "split")
    assert [m["epsilon"] for m in a["metrics"]] == [m["epsilon"] for m in b["metrics"]]
    assert full["epsilon"] == resumed["epsilon"] and a["privacy"] == b["privacy"]


def test_resume_drops_metric_lines_written_after_the_last_checkpoint(tmp_path):
    # Prepare: a run stopped at round 4 with checkpoint_every = 3 leaves a checkpoint at round 4 (the stop);
    # simulate a crash after round 5 by appending a line the checkpoint does not know.
    config = _config()
    _run(config, tmp_path / "run", stop_after=4)
    with open(tmp_path / "run" / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"round": 5, "accuracy": 0.0, "epsilon": 0.0}) + "\n")
    # Execute
    _run(config, tmp_path / "run", resume=True)
    # Assert
    rounds = [
        json.loads(line)["round"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert rounds == [2, 4, 6]


def test_fresh_run_refuses_a_used_folder(tmp_path):
    config = _config(rounds=2)
    _run(config, tmp_path / "run")
    with pytest.raises(ValueError, match="already holds a run"):
        _run(config, tmp_path / "run")


def test_resume_without_checkpoint_or_with_another_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint"):
        _run(_config(), tmp_path / "empty", resume=True)
    _run(_config(), tmp_path / "run", stop_after=3)
    with pytest.raises(ValueError, match=r"algorithm\.noise_std"):
        _run(_config(algorithm={"name": "noisy_avg", "noise_std": 0.5}), tmp_path / "run", resume=True)
    with pytest.raises(ValueError, match="rounds must be at least the 3 rounds already done"):
        _run(_config(rounds=2), tmp_path / "run", resume=True)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["rounds"] == 6  # left untouched


def test_resume_may_extend_the_number_of_rounds(tmp_path):
    # Prepare
    _run(_config(rounds=3), tmp_path / "short")
    # Execute
    summary = _run(_config(rounds=6), tmp_path / "short", resume=True)
    full = _run(_config(rounds=6, eval_every=1), tmp_path / "full")
    # Assert: the extended run reaches the same final state as a 6-round run.
    assert summary["rounds"] == 6 and summary["final_accuracy"] == full["final_accuracy"]
    assert summary["epsilon"] == full["epsilon"] == pytest.approx(_epsilon(6), rel=1e-12)
    a, b = load_checkpoint(tmp_path / "short"), load_checkpoint(tmp_path / "full")
    assert torch.equal(a["algorithm"]["weights"], b["algorithm"]["weights"])


def test_run_or_reuse_reuses_resumes_or_restarts(tmp_path, monkeypatch):
    # Prepare
    monkeypatch.setattr(run_module, "build_task", lambda config: _tiny_task())
    monkeypatch.setattr(run_module, "construct_algorithm", _registry_algorithm)
    folder = tmp_path / "run"
    first = run_module.run_or_reuse(_config(), folder)
    # Execute / Assert: the same config is reused (not rerun: the summary is read back unchanged) ...
    timing = (folder / "timing.json").read_text()
    assert run_module.run_or_reuse(_config(), folder) == first
    assert (folder / "timing.json").read_text() == timing
    # ... another config starts afresh ...
    other = run_module.run_or_reuse(_config(rounds=4), folder)
    assert other["rounds"] == 4
    # ... and an interrupted run resumes and ends as an uninterrupted one.
    run_module.clear_run_folder(folder)
    assert not folder.exists()
    _run(_config(), folder, stop_after=3)
    resumed = run_module.run_or_reuse(_config(), folder)
    assert resumed["final_accuracy"] == first["final_accuracy"] and resumed["completed"] is True


def test_each_round_is_composed_exactly_once(tmp_path, monkeypatch):
    # Prepare: count the accountant's compositions and ε queries.
    calls = {"compose": 0, "epsilon": 0}
    compose, get_epsilon = RDPAccountant.compose, RDPAccountant.get_epsilon

    def counting_compose(self, event, count=1):
        calls["compose"] += 1
        return compose(self, event, count)

    def counting_epsilon(self, delta):
        calls["epsilon"] += 1
        return get_epsilon(self, delta)

    monkeypatch.setattr(RDPAccountant, "compose", counting_compose)
    monkeypatch.setattr(RDPAccountant, "get_epsilon", counting_epsilon)
    # Execute: 20 rounds, evaluated after every round.
    summary = _run(_config(rounds=20, eval_every=1, checkpoint_every=0), tmp_path / "run")
    # Assert: one composition per round (the history is never composed again), one ε per line + summary.
    assert calls["compose"] == 20 and calls["epsilon"] == 21
    state = load_checkpoint(tmp_path / "run")["privacy"]
    assert state["rounds_composed"] == 20 and state["accountant"]["calls"] == [[0, 1]] * 20
    assert summary["epsilon"] == pytest.approx(_epsilon(20), rel=1e-12)


def test_budget_stops_before_the_round_that_would_exceed_it(tmp_path):
    # Prepare: a budget between ε after 3 rounds and ε after 4.
    budget = (_epsilon(3) + _epsilon(4)) / 2
    config = _config(rounds=6, eval_every=2, privacy={"max_epsilon": budget})
    # Execute
    summary = _run(config, tmp_path / "run")
    # Assert
    assert summary["stopped"] == "budget" and summary["rounds_completed"] == 3 and summary["rounds"] == 6
    assert summary["epsilon"] == pytest.approx(_epsilon(3), rel=1e-12) and summary["epsilon"] <= budget
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == [2, 3]  # the stop is evaluated too
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stopped"] == "budget"
    assert load_checkpoint(tmp_path / "run")["rounds_done"] == 3
    # Resuming with the same budget stops again at once; a larger budget (a resumable change) continues.
    again = _run(config, tmp_path / "run", resume=True)
    assert again["rounds_completed"] == 3 and again["epsilon"] == summary["epsilon"]
    more = _run(
        _config(rounds=6, eval_every=2, privacy={"max_epsilon": 100.0}), tmp_path / "run", resume=True
    )
    full = _run(_config(rounds=6, eval_every=2), tmp_path / "full")
    assert more["stopped"] == "rounds" and more["rounds_completed"] == 6
    assert more["epsilon"] == full["epsilon"] and more["final_accuracy"] == full["final_accuracy"]


def test_a_budget_below_the_first_round_runs_nothing(tmp_path):
    summary = _run(_config(privacy={"max_epsilon": _epsilon(1) / 2}), tmp_path / "run")
    assert summary["stopped"] == "budget" and summary["rounds_completed"] == 0 and summary["epsilon"] == 0.0


def test_pld_accountant_and_privacy_errors(tmp_path):
    # The PLD accountant composes the same events (tighter than RDP).
    pld = _run(_config(rounds=4, privacy={"accountant": "pld", "delta": 1e-6}), tmp_path / "pld")
    rdp = _run(_config(rounds=4, privacy={"delta": 1e-6}), tmp_path / "rdp")
    assert pld["accountant"] == "pld" and pld["delta"] == 1e-6 and 0 < pld["epsilon"] < rdp["epsilon"]
    # A budget for a run without any guarantee is refused before anything is written.
    with pytest.raises(ValueError, match=r"^privacy\.max_epsilon: "):
        run_experiment(
            _fedavg_config(privacy={"max_epsilon": 1.0}), tmp_path / "fedavg", progress=False, plots=False
        )
    assert not (tmp_path / "fedavg" / "config.json").exists()
    # Unknown keys and bad values of [privacy] name the dotted key.
    with pytest.raises(ValueError, match=r"privacy\.accountant: Input should be 'auto', 'rdp' or 'pld'"):
        _config(privacy={"accountant": "moments"})
    with pytest.raises(ValueError, match=r"privacy\.target: unknown key"):
        _config(privacy={"target": 1.0})


def test_unsupported_events_fail_naming_privacy_accountant(tmp_path):
    # Fixed-size cohorts are replace-one, which the PLD accountant does not support (yet).
    config = parse_config(
        {
            "rounds": 2,
            "dataset": {"name": "synthetic"},
            "partition": {"scheme": "iid", "num_clients": 12},
            "algorithm": {"name": "dp_fedavg", "cohort_size": 4, "noise_multiplier": 1.0},
            "privacy": {"accountant": "pld"},
        }
    )
    with pytest.raises(
        ValueError, match=r"^privacy\.accountant: the 'pld' accountant cannot account dp_fedavg"
    ):
        run_experiment(config, tmp_path / "run", progress=False, plots=False)
    assert not (tmp_path / "run" / "config.json").exists()


def _fedavg_config(**overrides: Any):
    data: dict[str, Any] = {
        "rounds": 2,
        "dataset": {"name": "synthetic"},
        "partition": {"scheme": "iid", "num_clients": 12},
        "algorithm": {"name": "fedavg", "cohort_size": 4},
    }
    data.update(overrides)
    return parse_config(data)


def _registry_algorithm(config, task, *, algorithms=None, privacy_key=None):
    return NoisyAveraging(
        config.algorithm.params, task, seed=config.seed, engine=object(), privacy_key=privacy_key
    )
