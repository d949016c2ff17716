"""White-box Dirac (gradient) canaries scored from every noised sum: exact scores without noise, known verdict
values (violation, inconclusive, consistent), power close to the accounted ε on unamplified DP-FedAvg and
DP-SGD, and deliberately broken runs caught."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from ampfl.accounting.audit.power import canaries_needed, certifiable_epsilon, ladder
from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.audit.dirac import CUTS
from ampfl.fl.audit.run import audit_run
from ampfl.fl.config import RunConfig, parse_config

ROUNDS = 10
Z = 3.16  # 10 rounds of the Gaussian at z = 3.16: mu = 1.0, epsilon 4.38 at delta 1e-5


def _digits(algorithm: dict[str, Any], rounds: int = ROUNDS) -> RunConfig:
    return parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "eval_every": rounds,
            "checkpoint_every": 0,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": 20},
            "model": {"name": "logreg"},
            "algorithm": algorithm,
            "privacy": {"delta": 1e-5},
        }
    )


def _fedavg(z: float | None = Z, rate: float = 1.0, **extra: Any) -> RunConfig:
    return _digits(
        {
            "name": "dp_fedavg",
            "client_sampling": "poisson",
            "sampling_rate": rate,
            "expected_clients": 20 * rate,
            "num_local_steps": 2,
            "batch_size": 8,
            "learning_rate": 0.5,
            "clip": 1.0,
            "noise_multiplier": z,
            **extra,
        }
    )


def _dp_sgd(z: float = Z, participation: float = 1.0) -> RunConfig:
    """DP-DSGD at full participation (every client, every record, every step): DP-SGD with full batches."""
    return _digits(
        {
            "name": "dp_dsgd_rp",
            "participation": participation,
            "sampling_rate": 1.0,
            "clip": 1.0,
            "noise_multiplier": z,
            "learning_rate": 0.5,
            "local_dataset_size": 120,
        }
    )


class _SilentFedAvg(ALGORITHMS["dp_fedavg"]):  # type: ignore[misc,valid-type]
    """Broken on purpose: accounts z, adds ``factor`` times its noise."""

    factor = 0.0

    def _set_noise_multiplier(self, z: float) -> None:
        super()._set_noise_multiplier(z)
        self.noise_std = self.noise_std * self.factor


class _HalfNoiseFedAvg(_SilentFedAvg):
    factor = 0.5


class _SilentSGD(ALGORITHMS["dp_dsgd_rp"]):  # type: ignore[misc,valid-type]
    """Broken on purpose: accounts z, adds no noise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.noise_std = 0.0


def _audit(config: RunConfig, out: Path, cls: type | None = None, **kwargs: Any) -> dict[str, Any]:
    algorithms = dict(ALGORITHMS)
    if cls is not None:
        algorithms[config.algorithm.name] = cls
    return audit_run(config, out, canary="dirac", progress=False, plot=False, algorithms=algorithms, **kwargs)


def _scores(out: Path) -> tuple[np.ndarray, np.ndarray]:
    data = np.loadtxt(out / "scores.csv", delimiter=",", skiprows=1)
    return data[:, 3], data[:, 2].astype(bool)


def _perfect_bound(n_in: int, n_out: int, delta: float = 1e-5, confidence: float = 0.95) -> float:
    """The likelihood-ratio bound of a perfect separation at the fixed cuts, from scipy's beta quantiles:
    TPR_lo = Beta(level; n, 1), FPR_hi = Beta(1 - level; 1, n), level = (1 - c) / (2 G)."""
    level = (1 - confidence) / (2 * CUTS.size)
    tpr_lo = stats.beta.ppf(level, n_in, 1)
    fpr_hi = stats.beta.ppf(1 - level, 1, n_out)
    return max(math.log((tpr_lo - delta) / fpr_hi), math.log((1 - fpr_hi - delta) / (1 - tpr_lo)))


def test_without_noise_the_scores_are_exact(tmp_path):
    """z = 0 (no guarantee): an excluded canary reads exactly 0 (the data leave its coordinate at zero), an
    included one exactly √T (C·T / (C √T)); the bound is the perfect-separation value: a VIOLATION."""
    report = _audit(_fedavg(0.0), tmp_path, canaries=300)
    scores, coins = _scores(tmp_path)
    assert np.all(scores[~coins] == 0.0)
    assert scores[coins] == pytest.approx(math.sqrt(ROUNDS), rel=1e-6)
    assert report["epsilon_accounted"] == math.inf and report["verdict"] == "VIOLATION"
    expected = _perfect_bound(int(coins.sum()), int((~coins).sum()))
    assert report["epsilon_lower"] == pytest.approx(expected, rel=1e-6)
    assert report["epsilon_max_certifiable"] == pytest.approx(expected, rel=1e-6)
    assert report["observer"].startswith("every noised sum") and report["score"] == "noised-sums"


@pytest.mark.parametrize(("canaries", "verdict"), [(2000, "VIOLATION"), (200, "inconclusive")])
def test_verdicts_of_a_run_without_its_noise(tmp_path, canaries, verdict):
    """Accounted ε 4.38, no noise added: the included canaries read exactly √T/z = 1 in units of the claimed
    σ√T, so the bound is the perfect-separation value: 4.9 with 2000 canaries (above 4.38: VIOLATION), 2.6
    with 200 (below: the audit cannot tell, inconclusive, never consistent)."""
    report = _audit(_fedavg(), tmp_path, _SilentFedAvg, canaries=canaries)
    _, coins = _scores(tmp_path)
    expected = _perfect_bound(int(coins.sum()), int((~coins).sum()))
    assert report["epsilon_lower"] == pytest.approx(expected, rel=1e-6)
    assert report["epsilon_max_certifiable"] == pytest.approx(expected, rel=1e-6)
    assert report["epsilon_accounted"] == pytest.approx(4.38, abs=0.01)
    assert report["verdict"] == verdict
    if verdict == "inconclusive":
        assert report["note"].startswith("no power")


def test_honest_fedavg_reaches_half_the_accounted_epsilon(tmp_path):
    """Unamplified DP-FedAvg (every client every round), ε 4.38: 4 runs × 100 000 canaries (400 000 trials)
    give ≥ 0.5 × ε (measured 0.63-0.68 ×), consistent: never above the accounted ε."""
    report = _audit(_fedavg(), tmp_path, canaries=100_000, runs=4)
    assert report["verdict"] == "consistent"
    assert 0.5 * report["epsilon_accounted"] <= report["epsilon_lower"] <= report["epsilon_accounted"]
    scores, coins = _scores(tmp_path)  # N(0, 1) excluded, N(√T/z, 1) included
    assert abs(scores[~coins].mean()) < 0.02 and scores[~coins].std() == pytest.approx(1.0, abs=0.02)
    assert scores[coins].mean() == pytest.approx(math.sqrt(ROUNDS) / Z, abs=0.02)


def test_half_the_noise_is_a_violation(tmp_path):
    """Accounted at z = 3.16 (ε 4.38) but adding half that noise (true ε 10.0): VIOLATION."""
    report = _audit(_fedavg(), tmp_path, _HalfNoiseFedAvg, canaries=100_000, runs=4)
    assert report["verdict"] == "VIOLATION"
    assert report["epsilon_lower"] > report["epsilon_accounted"]


def test_dp_sgd_full_batch(tmp_path):
    """DP-SGD (dp_dsgd_rp at full participation, full batches), ε 4.38: consistent and well above 0; without
    its noise, a VIOLATION at the perfect-separation value."""
    honest = _audit(_dp_sgd(), tmp_path / "honest", canaries=20_000, runs=2)
    assert honest["verdict"] == "consistent" and honest["privacy_unit"] == "record"
    assert 0.3 * honest["epsilon_accounted"] <= honest["epsilon_lower"] <= honest["epsilon_accounted"]
    broken = _audit(_dp_sgd(), tmp_path / "broken", _SilentSGD, canaries=2000)
    assert broken["verdict"] == "VIOLATION"
    assert broken["epsilon_lower"] == pytest.approx(broken["epsilon_max_certifiable"], rel=1e-9)


def test_auto_picks_the_count_that_can_certify(tmp_path):
    """--canaries auto on the run without its noise: the smallest ladder count whose planned ceiling reaches
    the forecast 4.38, and the verdict follows the realised ceiling (VIOLATION when it reaches 4.38)."""
    report = _audit(_fedavg(), tmp_path, _SilentFedAvg, canaries="auto")
    eps = report["epsilon_forecast"]
    assert eps == pytest.approx(report["epsilon_accounted"], rel=1e-9)
    m = report["canaries"]
    assert report["canaries_requested"] == "auto"
    assert m == canaries_needed(eps, delta=1e-5, cuts=CUTS)
    below = [k for k in ladder(m) if k < m]
    assert (
        certifiable_epsilon(below[-1], delta=1e-5, cuts=CUTS)
        < eps
        <= certifiable_epsilon(m, delta=1e-5, cuts=CUTS)
    )
    ceiling_reached = report["epsilon_max_certifiable"] >= report["epsilon_accounted"]
    assert report["verdict"] == ("VIOLATION" if ceiling_reached else "inconclusive")


def test_auto_refuses_above_the_budget(tmp_path):
    with pytest.raises(
        ValueError, match=r"^max_canaries: certifying the accounted epsilon 4.38 .* needs \d+"
    ):
        _audit(_fedavg(), tmp_path, canaries="auto", max_canaries=100)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (lambda: _fedavg(client_sampling="fixed", cohort_size=10), "client_sampling = 'poisson'"),
        (lambda: _dp_sgd(participation=0.5), "full participation"),
    ],
    ids=["fixed-cohort", "partial-participation"],
)
def test_refused_configurations(tmp_path, config, message):
    with pytest.raises(ValueError, match=r"^canary: 'dirac' ") as info:
        _audit(config(), tmp_path, canaries=10)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_noise_off_at_epsilon_7_5_is_never_consistent(tmp_path):
    """DP-FedAvg calibrated to ε 7.5, no noise added: 500 feature canaries in one run certify at most about
    3.8, so the one-run audit says inconclusive (it used to say consistent); Dirac canaries (4 runs × 50 000)
    separate perfectly and certify 9.5: VIOLATION."""
    config = _fedavg(None, target_epsilon=7.5, num_rounds=ROUNDS)
    one_run = audit_run(
        config,
        tmp_path / "feature",
        canaries=500,
        progress=False,
        plot=False,
        algorithms={**ALGORITHMS, "dp_fedavg": _SilentFedAvg},
    )
    assert one_run["epsilon_accounted"] == pytest.approx(7.5, abs=0.05)
    assert one_run["verdict"] == "inconclusive" and one_run["epsilon_max_certifiable"] < 5.0
    dirac = _audit(config, tmp_path / "dirac", _SilentFedAvg, canaries=50_000, runs=4)
    assert dirac["verdict"] == "VIOLATION" and dirac["epsilon_lower"] > 9.0
