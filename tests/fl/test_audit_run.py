"""``ampfl.fl.audit.run``: canaries, power (a broken algorithm is caught) and consistency (issue 27)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.audit.run import audit_run, insert_canaries, secret_coins
from ampfl.fl.config import RunConfig, parse_config
from ampfl.fl.run.experiment import build_task

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


def _fedavg(rounds: int = 10, **params: Any) -> RunConfig:
    algorithm = {
        "name": "dp_fedavg",
        "client_sampling": "poisson",
        "sampling_rate": 0.5,
        "expected_clients": 50,
        "num_local_steps": 5,
        "batch_size": 5,
        "learning_rate": 0.5,
        "clip": 1.0,
        "target_epsilon": 2.0,
    }
    algorithm.update(params)
    return parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "eval_every": rounds,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "label_skew", "num_clients": 100, "labels_per_client": 2},
            "model": {"name": "logreg"},
            "algorithm": algorithm,
            "privacy": {"delta": 1e-5},
        }
    )


def _dsgd_rp(rounds: int = 20) -> RunConfig:
    return parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "eval_every": rounds,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": 20},
            "model": {"name": "logreg"},
            "algorithm": {
                "name": "dp_dsgd_rp",
                "participation": 0.5,
                "sampling_rate": 0.5,
                "clip": 1.0,
                "noise_multiplier": 1.0,
                "learning_rate": 0.5,
                "local_dataset_size": 120,
            },
            "privacy": {"delta": 1e-5},
        }
    )


class _Silent(ALGORITHMS["dp_fedavg"]):  # type: ignore[misc,valid-type]
    """Broken on purpose: accounts the calibrated noise but adds none."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.noise_std = 0.0

    def set_noise(self, resolved: Any) -> None:  # a target ε: the run sets the noise after __init__
        super().set_noise(resolved)
        self.noise_std = 0.0


class _DataNormaliser(ALGORITHMS["dp_fedavg"]):  # type: ignore[misc,valid-type]
    """Broken on purpose (the issue-26 defect re-introduced): the noise is divided by the realised cohort
    size, a number computed from the data, while the sum is divided by the declared m̄."""

    def server_update(
        self, total: torch.Tensor, num_clients: int, generator: torch.Generator
    ) -> torch.Tensor:
        noise = torch.randn(self.global_params.shape, generator=generator) * self.noise_std
        return self.apply_noised_sum(total + noise * self.normaliser / max(num_clients, 1))


def test_canaries_touch_only_their_own_feature():
    task = build_task(_fedavg())
    coins = np.array([True, False, True, True])
    new, plan = insert_canaries(task, included=coins, unit="client", scale=2.0, seed=0)
    d = task.dataset.x_train.shape[1]
    assert new.dataset.x_train.shape[1] == d + 4 and new.num_clients == task.num_clients + 3
    assert not new.dataset.x_train[: task.dataset.x_train.shape[0], d:].any()  # data never has them
    assert not new.dataset.x_test[:, d:].any()
    canary_client = new.dataset.x_train[new.client_indices[-1]]
    assert np.all(canary_client[:, d + 3] == 2.0) and not canary_client[:, :d].any()
    records, _ = insert_canaries(task, included=coins, unit="record", scale=2.0, seed=0)
    assert records.num_clients == task.num_clients
    assert sum(len(ix) for ix in records.client_indices) == sum(len(ix) for ix in task.client_indices) + 3
    assert plan.columns.tolist() == [d, d + 1, d + 2, d + 3]


def test_coins_are_secret():
    assert not np.array_equal(secret_coins(256), secret_coins(256))


def test_power_no_noise_is_a_violation(tmp_path):
    # accounted ε ≈ 2 but no noise: every canary is seen; the one-run bound is limited only by m
    report = audit_run(
        _fedavg(),
        tmp_path,
        canaries=500,
        progress=False,
        plot=False,
        algorithms={**ALGORITHMS, "dp_fedavg": _Silent},
    )
    assert KEYS <= set(report)
    assert report["verdict"] == "VIOLATION"
    # an included canary client never sampled in 10 rounds (p = 2^-10 each) ties with the excluded ones
    assert report["epsilon_lower"] > 1.25 * report["epsilon_accounted"]  # measured: 3.91 (250 of 250 right)


def test_power_data_dependent_normaliser_raises_the_bound(tmp_path):
    honest = audit_run(_fedavg(20), tmp_path / "honest", canaries=1000, progress=False, plot=False)
    broken = audit_run(
        _fedavg(20),
        tmp_path / "broken",
        canaries=1000,
        progress=False,
        plot=False,
        algorithms={**ALGORITHMS, "dp_fedavg": _DataNormaliser},
    )
    assert honest["verdict"] == "consistent"
    assert broken["epsilon_lower"] > honest["epsilon_lower"] + 1.0
    assert broken["verdict"] == "VIOLATION"  # measured: 4.0 against 2.0 accounted


@pytest.mark.parametrize("config", [_fedavg, _dsgd_rp], ids=["dp_fedavg", "dp_dsgd_rp"])
def test_consistency_lower_bound_below_accounted(tmp_path, config):
    """No false VIOLATION; where the accounted ε is above what 500 canaries can certify, the verdict says the
    audit cannot tell (DP-DSGD-RP here), instead of "consistent"."""
    report = audit_run(config(), tmp_path, canaries=500, progress=False)
    can_tell = report["epsilon_accounted"] <= report["epsilon_max_certifiable"]
    assert report["verdict"] == ("consistent" if can_tell else "inconclusive")
    assert can_tell == (config is _fedavg)  # measured: DP-FedAvg 2.0 accounted, DP-DSGD-RP above 4
    if not can_tell:
        assert report["note"].startswith("no power") and str(500) in report["note"]
    assert 0.0 <= report["epsilon_lower"] <= report["epsilon_accounted"]
    assert report["privacy_unit"] == ("client" if config is _fedavg else "record")
    assert (tmp_path / "audit.png").is_file() and (tmp_path / "audit.json").is_file()


def test_multi_run_likelihood_ratio(tmp_path):
    report = audit_run(_fedavg(5), tmp_path, canaries=50, runs=2, progress=False, plot=False, score="loss")
    assert report["estimator"].startswith("likelihood-ratio") and report["runs"] == 2
    assert report["epsilon_lower"] <= report["epsilon_accounted"]


def test_max_certifiable_is_the_all_correct_bound():
    """Known value (δ = 0): every one of r = m guesses right has p-value p_ε^m, tested at 0.05 / 12 (the
    Bonferroni share of the 12 guess rules for m = 500), so ε_max = logit((0.05/12)^(1/500)) = 4.5079."""
    from ampfl.fl.audit.run import max_certifiable

    coins = np.arange(500) % 2 == 0
    p = (0.05 / 12) ** (1 / 500)
    assert max_certifiable(coins, runs=1, delta=0.0, confidence=0.95) == pytest.approx(
        math.log(p / (1 - p)), abs=1e-5
    )
    more = np.arange(2000) % 2 == 0  # more trials certify more
    assert max_certifiable(more, runs=4, delta=1e-5, confidence=0.95) > max_certifiable(
        coins, runs=1, delta=1e-5, confidence=0.95
    )
