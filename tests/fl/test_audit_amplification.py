"""Amplification audited with Dirac canaries: DP-FedAvg with Poisson client sampling seen with participation
hidden (against the amplified ε) and revealed (against the revealed-participation ε), and DP-DSGD-RP at
participation 1 with local (record) sampling q < 1: exact scores without noise, independent presence coins,
the revealed accounting, no VIOLATION on honest runs in either view."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ampfl.accounting.accountants import make_accountant
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent, RandomCheckInEvent
from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.audit.run import audit_run
from ampfl.fl.config import RunConfig, parse_config

ROUNDS, Z, Q = 10, 3.16, 0.5


def _digits(algorithm: dict[str, Any]) -> RunConfig:
    return parse_config(
        {
            "seed": 0,
            "rounds": ROUNDS,
            "eval_every": ROUNDS,
            "checkpoint_every": 0,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": 20},
            "model": {"name": "logreg"},
            "algorithm": algorithm,
            "privacy": {"delta": 1e-5},
        }
    )


def _fedavg(rate: float = Q) -> RunConfig:
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
            "noise_multiplier": Z,
        }
    )


def _dp_sgd(rate: float = Q) -> RunConfig:
    """DP-DSGD at participation 1 (every client every step), each record in a step with probability q."""
    return _digits(
        {
            "name": "dp_dsgd_rp",
            "participation": 1.0,
            "sampling_rate": rate,
            "clip": 1.0,
            "noise_multiplier": Z,
            "learning_rate": 0.5,
            "local_dataset_size": 120,
        }
    )


class _SilentFedAvg(ALGORITHMS["dp_fedavg"]):  # type: ignore[misc,valid-type]
    """Broken on purpose: accounts z, adds no noise."""

    def _set_noise_multiplier(self, z: float) -> None:
        super()._set_noise_multiplier(z)
        self.noise_std = 0.0


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


def _epsilon(event: Any, count: int = ROUNDS) -> float:
    accountant = make_accountant("pld")
    accountant.compose(event, count)
    return float(accountant.get_epsilon(1e-5))


def test_revealed_accounting_is_the_exact_mixture():
    """The revealed event (the Gaussian behind a public Bern(q) coin) composed by PLD equals
    δ(ε) = Σ_m Bin(m; T, q) δ_G(ε; √m/z) solved for ε (3.39 here), between the amplified 2.21 and the
    unamplified 4.38."""
    from scipy import optimize, stats

    def gaussian_delta(eps: float, mu: float) -> float:
        if mu == 0.0:
            return 0.0
        return float(stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))

    def mixture(eps: float) -> float:
        weights = stats.binom.pmf(np.arange(ROUNDS + 1), ROUNDS, Q)
        return sum(w * gaussian_delta(eps, math.sqrt(m) / Z) for m, w in enumerate(weights)) - 1e-5

    exact = optimize.brentq(mixture, 0.0, 20.0, xtol=1e-10)
    revealed = RandomCheckInEvent(
        participation=Q, sampling_rate=1.0, noise_multiplier=Z, participation_hidden=False
    )
    assert _epsilon(revealed) == pytest.approx(exact, rel=1e-6)
    hidden = _epsilon(PoissonSampledEvent(sampling_rate=Q, event=GaussianEvent(noise_multiplier=Z)))
    assert hidden == pytest.approx(2.215, abs=0.01)
    assert hidden < exact < _epsilon(GaussianEvent(noise_multiplier=Z)) == pytest.approx(4.38, abs=0.01)


def test_at_participation_1_the_accounted_pair_ignores_d():
    """DP-DSGD-RP at p = 1: the accounted ε does not depend on the client's other records (d), so canary
    records beyond d at one client stay within the accounted relation; it is the Poisson-subsampled one."""
    poisson = _epsilon(PoissonSampledEvent(sampling_rate=Q, event=GaussianEvent(noise_multiplier=Z)))
    for d in (None, 0, 5, 120, 10_000):
        event = RandomCheckInEvent(
            participation=1.0, sampling_rate=Q, noise_multiplier=Z, local_dataset_size=d
        )
        assert _epsilon(event) == pytest.approx(poisson, rel=1e-6)


def test_revealed_scores_without_noise_are_exact(tmp_path):
    """No noise added (accounted z = 3.16): in units of C/(2 z √T) an included canary reads T + |S_k| and an
    excluded one T − |S_k|, |S_k| ~ Bin(T, q) its rounds sampled (each canary its own coins: the counts
    spread as the binomial, not one shared count); the revealed view then beats the hidden one."""
    report = _audit(_fedavg(), tmp_path, _SilentFedAvg, canaries=4000, participation="revealed")
    scores, coins = _scores(tmp_path)
    units = scores * 2 * Z * math.sqrt(ROUNDS)
    present = np.where(coins, units - ROUNDS, ROUNDS - units)
    assert np.allclose(present, np.round(present), atol=1e-6)
    assert present.min() >= -1e-6 and present.max() <= ROUNDS + 1e-6
    assert present.mean() == pytest.approx(Q * ROUNDS, abs=0.15)
    assert present.std() == pytest.approx(math.sqrt(ROUNDS * Q * (1 - Q)), abs=0.1)
    assert report["participation"] == "revealed" and "which canary clients" in report["observer"]
    hidden = report["hidden_view"]
    assert report["verdict"] == "VIOLATION" and hidden["verdict"] == "VIOLATION"
    assert report["epsilon_lower"] > hidden["epsilon_lower"]


def test_revealed_beats_hidden_on_the_same_run_and_both_are_consistent(tmp_path):
    """Honest DP-FedAvg, Poisson q = 0.5, z = 3.16, one run of 40 000 canaries: the hidden view (amplified
    ε 2.21) and the revealed view (revealed ε 3.39) of the same noised sums and coins are both consistent,
    and the revealed bound is the higher (measured 1.39-1.50 against 0.91-1.09)."""
    report = _audit(_fedavg(), tmp_path, canaries=40_000, participation="revealed")
    hidden = report["hidden_view"]
    assert report["epsilon_accounted"] == pytest.approx(3.39, abs=0.01)
    assert hidden["epsilon_accounted"] == pytest.approx(2.21, abs=0.01)
    assert report["verdict"] == "consistent" and hidden["verdict"] == "consistent"
    assert hidden["epsilon_lower"] < report["epsilon_lower"] <= report["epsilon_accounted"]
    assert hidden["epsilon_lower"] <= hidden["epsilon_accounted"]


def test_local_sampling_without_noise_is_each_records_own_coin(tmp_path):
    """DP-DSGD-RP at p = 1, q = 0.5, no noise added: an excluded canary reads exactly 0, an included one
    m/(z √T) with m ~ Bin(T, q) the steps its record was sampled in, independently of the other canaries."""
    _audit(_dp_sgd(), tmp_path, _SilentSGD, canaries=2000)
    scores, coins = _scores(tmp_path)
    assert np.all(scores[~coins] == 0.0)
    steps = scores[coins] * Z * math.sqrt(ROUNDS)
    assert np.allclose(steps, np.round(steps), atol=1e-6)
    assert steps.mean() == pytest.approx(Q * ROUNDS, abs=0.25)
    assert steps.std() == pytest.approx(math.sqrt(ROUNDS * Q * (1 - Q)), abs=0.15)


def test_local_sampling_honest_is_consistent(tmp_path):
    """DP-DSGD-RP at p = 1, q = 0.5, z = 3.16: accounted 2.21 (the Poisson-subsampled Gaussian),
    consistent."""
    report = _audit(_dp_sgd(), tmp_path, canaries=4000)
    assert report["epsilon_accounted"] == pytest.approx(2.215, abs=0.01)
    assert report["verdict"] == "consistent" and report["privacy_unit"] == "record"
    assert 0.0 <= report["epsilon_lower"] <= report["epsilon_accounted"]


@pytest.mark.parametrize(
    ("config", "participation", "message"),
    [
        (lambda: _dp_sgd(), "revealed", "participation: 'revealed' with canary 'dirac' applies to dp_fedavg"),
        (
            lambda: _dp_sgd().model_copy(
                update={
                    "algorithm": _dp_sgd().algorithm.model_copy(
                        update={
                            "params": _dp_sgd().algorithm.params.model_copy(update={"participation": 0.5})
                        }
                    )
                }
            ),
            "as-accounted",
            "canary: 'dirac' audits dp_dsgd_rp at full participation",
        ),
    ],
    ids=["revealed-dp-sgd", "partial-participation"],
)
def test_refused(tmp_path, config, participation, message):
    with pytest.raises(ValueError, match=r"^(participation|canary): ") as info:
        _audit(config(), tmp_path, canaries=10, participation=participation)
    assert message in str(info.value) and "\n" not in str(info.value)
