"""What a run releases (issue 26): the privacy randomness is secret, diagnostics are apart, the threat model
is stated. Real algorithms on a tiny task, through ``run_experiment``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch

import ampfl.fl.algorithms.base as base
from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.algorithms.base import PUBLIC_ROLES, ROLE_EVAL, ROLE_INIT, ROLE_NOISE
from ampfl.fl.config import PrivacyConfig, parse_config
from ampfl.fl.data import Dataset
from ampfl.fl.run.experiment import load_checkpoint, run_experiment
from ampfl.fl.run.release import split_line, threat_model
from ampfl.fl.task import Task

#: Keys that are statistics of private training data: never in metrics.jsonl or summary.json.
PRIVATE_KEYS = ("train_loss", "participants", "examples", "clipped_fraction", "local_accuracy_mean")


def _task(clients: int = 6, per_client: int = 10) -> Task:
    rng = np.random.default_rng(0)
    n = clients * per_client
    x = rng.normal(size=(n + 20, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    data = Dataset("tiny", x[:n], y[:n], x[n:], y[n:], 2)
    parts = [np.arange(i * per_client, (i + 1) * per_client) for i in range(clients)]
    return Task(data, parts, model="logreg")


def _config(privacy: dict[str, Any] | None = None, rounds: int = 4) -> Any:
    return parse_config(
        {
            "seed": 5,
            "rounds": rounds,
            "eval_every": 1,
            "checkpoint_every": 2,
            "algorithm": {"name": "dp_fedavg", "noise_multiplier": 1.0, "cohort_size": 3, "batch_size": 4},
            "privacy": {"accountant": "rdp", **(privacy or {})},
        }
    )


def _run(tmp_path: Any, name: str, privacy: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    return run_experiment(_config(privacy), tmp_path / name, task=_task(), progress=False, plots=False, **kw)


def _released_text(folder: Any) -> str:
    return "".join((folder / name).read_text() for name in ("summary.json", "metrics.jsonl", "config.json"))


def test_default_run_releases_no_training_statistics_and_no_key(tmp_path):
    # Execute
    summary = _run(tmp_path, "a")
    # Assert
    folder = tmp_path / "a"
    released = _released_text(folder)
    for key in PRIVATE_KEYS:
        assert key not in released
    diagnostics = [json.loads(line) for line in (folder / "diagnostics.jsonl").read_text().splitlines()]
    assert diagnostics[0]["diagnostics"] == "NOT differentially private"
    assert all("participants" in line and "train_loss" in line for line in diagnostics[1:])
    key = load_checkpoint(folder)["privacy_key"]
    assert key != 5 and str(key) not in released
    assert summary["privacy_randomness"].startswith("secret")
    assert summary["protects_against"] == ["model consumers"]
    assert summary["participation_hidden_from"] == ["model consumers"]


def test_the_noise_is_not_a_function_of_the_published_seed(tmp_path):
    # Execute: two default runs of one config (same seed) draw different privacy randomness
    a, b = _run(tmp_path, "a"), _run(tmp_path, "b")
    # Assert
    assert load_checkpoint(tmp_path / "a")["privacy_key"] != load_checkpoint(tmp_path / "b")["privacy_key"]
    wa = load_checkpoint(tmp_path / "a")["algorithm"]["global_params"]
    wb = load_checkpoint(tmp_path / "b")["algorithm"]["global_params"]
    assert not torch.equal(wa, wb)
    assert a["seed"] == b["seed"]


def test_reproducible_runs_are_seeded_and_say_so(tmp_path):
    # Execute
    a = _run(tmp_path, "a", {"reproducible": True})
    _run(tmp_path, "b", {"reproducible": True})
    # Assert
    assert a["privacy_randomness"] == "seeded: a simulation, not a release"
    wa = load_checkpoint(tmp_path / "a")["algorithm"]["global_params"]
    wb = load_checkpoint(tmp_path / "b")["algorithm"]["global_params"]
    assert torch.equal(wa, wb)


def test_resume_keeps_the_secret_key_and_is_bit_identical(tmp_path, monkeypatch):
    # Prepare: one key for the uninterrupted and the interrupted run; resuming must never draw another
    monkeypatch.setattr(base, "new_privacy_key", lambda: 123456789123456789)
    full = _run(tmp_path, "full")
    _run(tmp_path, "cut", stop_after=2)

    def fail() -> int:
        raise AssertionError("a resumed run drew a new privacy key")

    monkeypatch.setattr(base, "new_privacy_key", fail)
    # Execute
    resumed = _run(tmp_path, "cut", resume=True)
    # Assert
    assert resumed["epsilon"] == full["epsilon"]
    wf = load_checkpoint(tmp_path / "full")["algorithm"]["global_params"]
    wc = load_checkpoint(tmp_path / "cut")["algorithm"]["global_params"]
    assert torch.equal(wf, wc)
    assert (tmp_path / "full" / "metrics.jsonl").read_text().count("\n") == 4
    cut_lines = [json.loads(x) for x in (tmp_path / "cut" / "diagnostics.jsonl").read_text().splitlines()]
    assert [line.get("round") for line in cut_lines[1:]] == [1, 2, 3, 4]


def test_public_roles_follow_the_seed_and_secret_roles_the_key():
    # Prepare
    task, cls = _task(), ALGORITHMS["dp_fedavg"]
    params = cls.Params(noise_multiplier=1.0, cohort_size=3)
    a = cls(params, task, seed=1, privacy_key=11)
    b = cls(params, task, seed=1, privacy_key=12)
    # Assert: initialisation and evaluation are public; the noise is not
    assert PUBLIC_ROLES == {ROLE_INIT, ROLE_EVAL}
    assert torch.equal(a.global_params, b.global_params)
    assert a.rng(0, ROLE_EVAL).integers(2**62) == b.rng(0, ROLE_EVAL).integers(2**62)
    assert a.rng(0, ROLE_NOISE).integers(2**62) != b.rng(0, ROLE_NOISE).integers(2**62)
    # an algorithm built without a key under reproducible = true uses the seed as the key
    seeded = cls(params, task, seed=1, privacy=PrivacyConfig.model_validate({"reproducible": True}))
    assert seeded.privacy_key == 1


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_a_bad_privacy_key_is_refused(bad):
    cls = ALGORITHMS["dp_fedavg"]
    with pytest.raises(ValueError, match="privacy_key"):
        cls(cls.Params(noise_multiplier=1.0, cohort_size=3), _task(), seed=0, privacy_key=bad)


def test_split_line_and_threat_model():
    line = {"round": 3, "accuracy": 0.5, "epsilon": 1.0, "delta": 1e-5, "train_loss": 0.1}
    line["wall_seconds"] = 2.0
    release, diagnostics = split_line(line, ("accuracy",))
    assert release == {"round": 3, "accuracy": 0.5, "epsilon": 1.0, "delta": 1e-5}  # time is not released
    assert diagnostics == {"round": 3, "train_loss": 0.1, "wall_seconds": 2.0}
    assert threat_model(private=False) == {"protects_against": [], "participation_hidden_from": []}
    both = threat_model(private=True, server_sees_only_noised_sum=True)
    assert both["protects_against"] == ["model consumers", "server"]


#: Every private algorithm, configured small (digits, 12 clients): a default run of each releases no
#: statistic of its training data and no privacy key.
PRIVATE_RUNS: dict[str, dict[str, Any]] = {
    "dp_fedavg": {
        "client_sampling": "poisson",
        "sampling_rate": 0.5,
        "noise_multiplier": 1.0,
        "expected_clients": 6,
    },
    "dp_dsgd_rp": {"participation": 0.5, "noise_multiplier": 1.0, "local_dataset_size": 200},
    "ms_pafl": {"participation": 0.5},
    "dp_sgd_split": {
        "sampling_rate": 0.5,
        "noise_multiplier": 1.0,
        "expected_clients": 6,
        "num_submodels": 2,
    },
    "gdpfed": {"group_budgets": [2.0, 6.0], "group_sizes": [6, 6], "expected_group_sizes": [6, 6]},
    "gdpfed_plus": {"group_budgets": [2.0, 6.0], "group_sizes": [6, 6], "expected_group_sizes": [6, 6]},
    "idp_fedavg": {"group_budgets": [2.0, 6.0], "group_sizes": [6, 6], "expected_group_sizes": [6, 6]},
    "splitfed_dp": {"noise_multiplier": 1.0, "smashed_noise_multiplier": 1.0, "eval_clients": 3},
}


@pytest.mark.parametrize("name", list(PRIVATE_RUNS))
def test_every_private_algorithm_releases_only_model_values(tmp_path, name):
    # Prepare
    model: dict[str, Any] = {"name": "logreg"}
    if name == "splitfed_dp":
        model = {"name": "split_cnn", "options": {"channels": [4, 8, 8], "groups": 2, "split_layer": 2}}
    config = parse_config(
        {
            "seed": 0,
            "rounds": 2,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": 12},
            "model": model,
            "algorithm": {"name": name, **PRIVATE_RUNS[name]},
            "privacy": {"accountant": "rdp"},
        }
    )
    # Execute
    summary = run_experiment(config, tmp_path / name, progress=False, plots=False)
    # Assert
    folder = tmp_path / name
    released = _released_text(folder)
    assert (
        summary["privacy_unit"] in ("record", "client") and "model consumers" in summary["protects_against"]
    )
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    keys = {k for line in [*metrics, summary["final_metrics"]] for k in line} | set(summary)
    assert keys.isdisjoint(PRIVATE_KEYS)
    assert not [k for k in keys if k.startswith(("personal_accuracy", "noise_energy", "noise_to_signal"))]
    assert str(load_checkpoint(folder)["privacy_key"]) not in released
    lines = [json.loads(line) for line in (folder / "diagnostics.jsonl").read_text().splitlines()]
    assert lines[0]["diagnostics"] == "NOT differentially private" and len(lines) == 3


def test_a_checkpoint_without_a_privacy_key_is_refused_on_resume(tmp_path):
    """A checkpoint written before runs had a key followed the public seed: resuming it as a secret run would
    say "secret" of seeded randomness. Refused in one line; a reproducible (seeded) run resumes."""
    for name, privacy in (("secret", None), ("seeded", {"reproducible": True})):
        _run(tmp_path, name, privacy, stop_after=2)
        path = tmp_path / name / "checkpoint.pt"
        state = torch.load(path, weights_only=False)
        del state["privacy_key"]
        torch.save(state, path)
    refused = r"^privacy\.reproducible: the checkpoint holds no privacy key"
    with pytest.raises(ValueError, match=refused) as info:
        _run(tmp_path, "secret", resume=True)
    assert "\n" not in str(info.value)
    done = _run(tmp_path, "seeded", {"reproducible": True}, resume=True)
    assert done["privacy_randomness"] == "seeded: a simulation, not a release"


def test_a_run_without_a_guarantee_follows_its_seed(tmp_path):
    """FedAvg (ε = ∞) has no randomness to keep secret: two runs of one config and seed are identical."""
    config = parse_config(
        {
            "seed": 5,
            "rounds": 3,
            "eval_every": 1,
            "algorithm": {"name": "fedavg", "cohort_size": 3, "batch_size": 4},
        }
    )
    a = run_experiment(config, tmp_path / "a", task=_task(), progress=False, plots=False)
    run_experiment(config, tmp_path / "b", task=_task(), progress=False, plots=False)
    assert a["privacy_randomness"].startswith("seeded: no privacy guarantee")
    wa = load_checkpoint(tmp_path / "a")["algorithm"]["global_params"]
    wb = load_checkpoint(tmp_path / "b")["algorithm"]["global_params"]
    assert torch.equal(wa, wb) and load_checkpoint(tmp_path / "a")["privacy_key"] == 5
