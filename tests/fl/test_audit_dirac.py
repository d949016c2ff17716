"""White-box Dirac (gradient) canaries scored from every noised sum: exact scores without noise, known verdict
values (violation, inconclusive, consistent), power close to the accounted ε on unamplified DP-FedAvg and
DP-SGD, and deliberately broken runs caught.

Amplification audited with the same canaries: DP-FedAvg with Poisson client sampling seen with participation
hidden (against the amplified ε) and revealed (against the revealed-participation ε), and DP-DSGD-RP at
participation 1 with local (record) sampling q < 1: exact scores without noise, independent presence coins,
the revealed accounting, no VIOLATION on honest runs in either view."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from ampfl.accounting.accountants import make_accountant
from ampfl.accounting.audit.power import canaries_needed, certifiable_epsilon, ladder
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent, RandomCheckInEvent
from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.audit.dirac import CUTS
from ampfl.fl.audit.run import audit_run
from ampfl.fl.config import RunConfig, parse_config

ROUNDS = 10
Q = 0.5  # the sampling rate of the amplification rows
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


def _dp_sgd(z: float = Z, participation: float = 1.0, rate: float = 1.0) -> RunConfig:
    """DP-DSGD with participation p, each record in a step with probability ``rate`` (defaults: every client,
    every record, every step: DP-SGD with full batches)."""
    return _digits(
        {
            "name": "dp_dsgd_rp",
            "participation": participation,
            "sampling_rate": rate,
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


# -- amplification audited ------------------------------------------------------------------------------
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
    report = _audit(_fedavg(rate=Q), tmp_path, _SilentFedAvg, canaries=4000, participation="revealed")
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
    report = _audit(_fedavg(rate=Q), tmp_path, canaries=40_000, participation="revealed")
    hidden = report["hidden_view"]
    assert report["epsilon_accounted"] == pytest.approx(3.39, abs=0.01)
    assert hidden["epsilon_accounted"] == pytest.approx(2.21, abs=0.01)
    assert report["verdict"] == "consistent" and hidden["verdict"] == "consistent"
    assert hidden["epsilon_lower"] < report["epsilon_lower"] <= report["epsilon_accounted"]
    assert hidden["epsilon_lower"] <= hidden["epsilon_accounted"]


def test_local_sampling_without_noise_is_each_records_own_coin(tmp_path):
    """DP-DSGD-RP at p = 1, q = 0.5, no noise added: an excluded canary reads exactly 0, an included one
    m/(z √T) with m ~ Bin(T, q) the steps its record was sampled in, independently of the other canaries."""
    _audit(_dp_sgd(rate=Q), tmp_path, _SilentSGD, canaries=2000)
    scores, coins = _scores(tmp_path)
    assert np.all(scores[~coins] == 0.0)
    steps = scores[coins] * Z * math.sqrt(ROUNDS)
    assert np.allclose(steps, np.round(steps), atol=1e-6)
    assert steps.mean() == pytest.approx(Q * ROUNDS, abs=0.25)
    assert steps.std() == pytest.approx(math.sqrt(ROUNDS * Q * (1 - Q)), abs=0.15)


def test_local_sampling_honest_is_consistent(tmp_path):
    """DP-DSGD-RP at p = 1, q = 0.5, z = 3.16: accounted 2.21 (the Poisson-subsampled Gaussian),
    consistent."""
    report = _audit(_dp_sgd(rate=Q), tmp_path, canaries=4000)
    assert report["epsilon_accounted"] == pytest.approx(2.215, abs=0.01)
    assert report["verdict"] == "consistent" and report["privacy_unit"] == "record"
    assert 0.0 <= report["epsilon_lower"] <= report["epsilon_accounted"]


@pytest.mark.parametrize(
    ("config", "participation", "message"),
    [
        (
            lambda: _dp_sgd(rate=Q),
            "revealed",
            "participation: 'revealed' with canary 'dirac' applies to dp_fedavg",
        ),
        (
            lambda: _dp_sgd(participation=0.5, rate=Q),
            "as-accounted",
            "canary: 'dirac' audits dp_dsgd_rp at full participation",
        ),
    ],
    ids=["revealed-dp-sgd", "partial-participation"],
)
def test_refused_views(tmp_path, config, participation, message):
    with pytest.raises(ValueError, match=r"^(participation|canary): ") as info:
        _audit(config(), tmp_path, canaries=10, participation=participation)
    assert message in str(info.value) and "\n" not in str(info.value)
