"""The released noise's scale does not depend on the data (issue 26, docs/threat_model.md).

Under add/remove neighbouring a server step that divides the noisy sum by a size computed from the data
(the largest local dataset, qN, Σ q_g N_g) changes the scale of the released noise when one record (or
client) is added: on a coordinate that every record leaves at zero the released change is pure scaled noise,
so its scale is a membership signal (measured before the fix: ε ≥ 1770 where 14.5 was reported). Here D and
D′ = D plus one record (record-level) or one client (client-level) are trained for one round with the same
seed and the same privacy key; the released change on the always-zero coordinates must carry the same noise
scale. For DP-DSGD-RP, DP-FedAvg and ``dp_sgd_split`` the noise draws are the same on D and D′, so the change
is bit-identical; GDPFed draws one noise share per participant (secure aggregation), so its noise scale is
compared exactly, and its released change bit for bit on a pair where the added client sits out the round.
Each test also shows that it can fail: with the sizes declared public (``neighbouring = "replace-one"``) the
normaliser comes from the data and the change differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.config import PrivacyConfig
from ampfl.fl.data import Dataset
from ampfl.fl.privacy.calibration import calibrate_algorithm
from ampfl.fl.task import Task

KEY = 2**100 + 12345
FEATURES = 40  # the last ZERO features are 0 in every record (their weights get a zero gradient)
ZERO = 30


def _dataset(n: int, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + 30, FEATURES)).astype(np.float32)
    x[:, FEATURES - ZERO :] = 0.0
    y = (x[:, 0] + 0.3 * x[:, 1] > 0).astype(np.int64)
    return Dataset("zeros", x[:n], y[:n], x[n:], y[n:], 2)


def _task(sizes: list[int], model: str = "logreg") -> Task:
    data = _dataset(sum(sizes))
    edges = np.cumsum([0, *sizes])
    parts = [np.arange(edges[i], edges[i + 1]) for i in range(len(sizes))]
    options = {"hidden": [8]} if model == "mlp" else {}
    return Task(data, parts, model=model, model_options=options)


def _released_change(name: str, task: Task, params: dict[str, Any], privacy: dict[str, Any]) -> torch.Tensor:
    cls = ALGORITHMS[name]
    config = PrivacyConfig.model_validate({"accountant": "rdp", **privacy})
    algorithm: Any = cls(cls.Params(**params), task, seed=7, privacy=config, privacy_key=KEY)
    before = algorithm.global_params.clone()
    algorithm.run_round(0)
    change: torch.Tensor = algorithm.global_params - before
    return change


def _zero_coordinates(name: str, task: Task, params: dict[str, Any]) -> torch.Tensor:
    """Coordinates the round leaves at exactly zero without noise (the always-zero features' weights)."""
    quiet = _released_change(name, task, {**params, "noise_multiplier": 0.0}, {})
    zero = quiet == 0.0
    assert int(zero.sum()) >= ZERO  # at least one weight per zero feature
    return zero


CASES: dict[str, tuple[list[int], list[int], dict[str, Any], str]] = {
    # record level: one record added to the largest client (d would grow from 12 to 13)
    "dp_dsgd_rp": (
        [12, 9, 7],
        [13, 9, 7],
        {"participation": 1.0, "sampling_rate": 0.8, "noise_multiplier": 1.0, "local_dataset_size": 20},
        "logreg",
    ),
    # client level: one client added (qN would grow from 3.0 to 3.6)
    "dp_fedavg": (
        [8] * 5,
        [8] * 6,
        {
            "client_sampling": "poisson",
            "sampling_rate": 0.6,
            "noise_multiplier": 1.0,
            "expected_clients": 3.0,
            "batch_size": 4,
        },
        "logreg",
    ),
    # record level, DP-SGD (one example per client): one record = one client added (qN from 6 to 6.3)
    "dp_sgd_split": (
        [1] * 20,
        [1] * 21,
        {
            "sampling": "poisson",
            "sampling_rate": 0.3,
            "num_submodels": 2,
            "noise_multiplier": 1.0,
            "expected_clients": 6.0,
            "num_local_steps": 1,
            "batch_size": 1,
            "learning_rate": 1.0,
        },
        "mlp",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_released_noise_on_always_zero_coordinates_is_the_same_on_neighbours(name: str) -> None:
    # Prepare
    sizes, plus_one, params, model = CASES[name]
    d, d_prime = _task(sizes, model), _task(plus_one, model)
    zero = _zero_coordinates(name, d, params) & _zero_coordinates(name, d_prime, params)
    # Execute
    on_d = _released_change(name, d, params, {})[zero]
    on_d_prime = _released_change(name, d_prime, params, {})[zero]
    # Assert: pure noise, the same noise and the same scale
    assert float(on_d.abs().min()) > 0.0
    assert torch.equal(on_d, on_d_prime)


@pytest.mark.parametrize("name", list(CASES))
def test_a_normaliser_from_the_data_would_show_in_the_release(name: str) -> None:
    # With the sizes declared public (replace-one) the normaliser comes from the data: the same test fails.
    sizes, plus_one, params, model = CASES[name]
    declared = "local_dataset_size" if name == "dp_dsgd_rp" else "expected_clients"
    params = {key: value for key, value in params.items() if key != declared}
    d, d_prime = _task(sizes, model), _task(plus_one, model)
    zero = _zero_coordinates(name, d, params) & _zero_coordinates(name, d_prime, params)
    public = {"neighbouring": "replace-one"}
    on_d = _released_change(name, d, params, public)[zero]
    on_d_prime = _released_change(name, d_prime, params, public)[zero]
    assert not torch.equal(on_d, on_d_prime)
    ratio = float((on_d / on_d_prime).mean())  # the scale ratio, exactly the normalisers' ratio
    assert ratio != pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("name", list(CASES))
def test_a_private_config_without_the_declared_constant_fails_in_one_line(name: str) -> None:
    sizes, _, params, model = CASES[name]
    declared = "local_dataset_size" if name == "dp_dsgd_rp" else "expected_clients"
    params = {key: value for key, value in params.items() if key != declared}
    with pytest.raises(ValueError, match=rf"^algorithm\.{declared}: required") as caught:
        _released_change(name, _task(sizes, model), params, {})
    assert "\n" not in str(caught.value)


def _gdpfed(sizes: list[int], groups: list[int], privacy: dict[str, Any], declared: bool = True) -> Any:
    params: dict[str, Any] = {
        "participation": 0.6,
        "group_budgets": [2.0, 6.0],
        "group_sizes": groups,
        "num_rounds": 5,
        "batch_size": 4,
    }
    if declared:
        params["expected_group_sizes"] = [5, 5]
    cls = ALGORITHMS["gdpfed"]
    config = PrivacyConfig.model_validate({"accountant": "rdp", **privacy})
    algorithm = cls(cls.Params(**params), _task(sizes), seed=7, privacy=config, privacy_key=KEY)
    calibrate_algorithm(algorithm, config)  # replace-one: z_g calibrated by the run's accountant
    return algorithm


def _released_scale(algorithm: Any) -> list[float]:
    """Std of the released noise per group sum: z_g C η_s / Σ_g q_g N̂_g (no momentum)."""
    cohort = float((algorithm.rates * algorithm.public_sizes).sum())
    return [
        float(z) * algorithm.p.clip * algorithm.p.server_learning_rate / cohort
        for z in algorithm.noise_multipliers
    ]


def test_gdpfed_plans_and_divides_by_declared_group_sizes() -> None:
    # Prepare: D (10 clients, groups 5 + 5) and D′ (one more client in group 1)
    on_d = _gdpfed([8] * 10, [5, 5], {})
    on_d_prime = _gdpfed([8] * 11, [5, 6], {})
    # Assert: the same plan (q_g, z_g) and the same scale of the released noise, bit for bit
    assert np.array_equal(on_d.rates, on_d_prime.rates)
    assert np.array_equal(on_d.noise_multipliers, on_d_prime.noise_multipliers)
    assert _released_scale(on_d) == _released_scale(on_d_prime)
    # the realised noise on the always-zero coordinates has that scale (one round, 2 × 30 coordinates)
    p_fedavg = ALGORITHMS["p_fedavg"]
    quiet = p_fedavg(
        p_fedavg.Params(participation=0.6, batch_size=4), _task([8] * 10), seed=7, privacy_key=KEY
    )
    before = quiet.global_params.clone()
    quiet.run_round(0)
    zero = (quiet.global_params - before) == 0.0
    changes = []
    for algorithm in (on_d, on_d_prime):
        start = algorithm.global_params.clone()
        algorithm.run_round(0)
        changes.append((algorithm.global_params - start)[zero])
    expected = float(np.sqrt(np.sum(np.square(_released_scale(on_d)))))  # both groups' sums (if sampled)
    for change in changes:
        assert float(change.std()) == pytest.approx(expected, rel=0.35)
    # without the declaration a private run is refused in one line; with replace-one the data's sizes are used
    with pytest.raises(ValueError, match=r"^algorithm\.expected_group_sizes: required"):
        _gdpfed([8] * 10, [5, 5], {}, declared=False)
    public = _gdpfed([8] * 11, [5, 6], {"neighbouring": "replace-one"}, declared=False)
    assert public.public_sizes.tolist() == [5, 6]


# -- GDPFed bit for bit ---------------------------------------------------------------------------------
#: A privacy key under which the client added to D′ is not sampled in round 0 (checked below): GDPFed's
#: noise is the sum of one share per participant (secure aggregation), so equal cohorts draw the same shares;
#: when the added client is sampled, D′'s noise has one share more (equal in distribution, compared above by
#: its scale).
GDPFED_KEY = KEY + 4


def _gdpfed_budgets(name: str, extra: int, declared: bool = True, key: int = GDPFED_KEY) -> Any:
    """Groups by budget (client order kept): D has 5 + 5 clients, D′ one more in the second group."""
    params: dict[str, Any] = {
        "participation": 0.4,  # gdpfed_minus plans q_g = 0.04, 0.76 (not 1: the added client may sit out)
        "client_budgets": [2.0] * 5 + [6.0] * (5 + extra),
        "num_rounds": 5,
        "batch_size": 4,
    }
    if declared:
        params["expected_group_sizes"] = [5, 5]
    cls = ALGORITHMS[name]
    config = PrivacyConfig.model_validate({"accountant": "rdp"})
    return cls(cls.Params(**params), _task([8] * (10 + extra)), seed=7, privacy=config, privacy_key=key)


@pytest.mark.parametrize("name", ["gdpfed", "gdpfed_minus"])
def test_gdpfed_releases_the_same_noise_on_neighbours_bit_for_bit(name: str) -> None:
    from ampfl.fl.algorithms.base import ROLE_SAMPLING

    # Prepare: D and D′ = D plus one client (group 1), the same seed and privacy key
    on_d, on_d_prime = _gdpfed_budgets(name, 0), _gdpfed_budgets(name, 1)
    coins = on_d_prime.rng(0, ROLE_SAMPLING)
    coins.random(5)  # group 0's coins; then group 1's, the added client's last
    assert coins.random(6)[5] >= float(on_d_prime.rates[1])  # precondition: the added client is not sampled
    zero = _zero_feature_weights(on_d)
    # Execute
    changes = []
    for algorithm in (on_d, on_d_prime):
        before = algorithm.global_params.clone()
        algorithm.run_round(0)
        changes.append((algorithm.global_params - before)[zero])
    # Assert: pure noise, the same noise and the same scale
    assert float(changes[0].abs().min()) > 0.0
    assert torch.equal(changes[0], changes[1])


def _zero_feature_weights(algorithm: Any) -> torch.Tensor:
    """The logreg weights of the always-zero features (their gradient is exactly zero)."""
    spec = algorithm.model.spec
    zero = torch.zeros(spec.dim, dtype=torch.bool)
    for name, shape, offset in zip(spec.names, spec.shapes, spec.offsets, strict=True):
        if name.endswith("weight") and shape[-1] == FEATURES:
            size = int(np.prod(shape))
            zero[offset : offset + size].view(-1, FEATURES)[:, FEATURES - ZERO :] = True
    assert int(zero.sum()) >= ZERO
    return zero


def test_gdpfed_with_group_sizes_from_the_data_shows_in_the_release() -> None:
    # The same pair with the sizes declared public (replace-one): Σ q_g N_g from the data, 6.0 vs 6.6.
    def build(extra: int) -> Any:
        cls = ALGORITHMS["gdpfed"]
        config = PrivacyConfig.model_validate({"accountant": "rdp", "neighbouring": "replace-one"})
        params = cls.Params(
            participation=0.6, client_budgets=[2.0] * 5 + [6.0] * (5 + extra), num_rounds=5, batch_size=4
        )
        algorithm = cls(params, _task([8] * (10 + extra)), seed=7, privacy=config, privacy_key=GDPFED_KEY)
        calibrate_algorithm(algorithm, config)  # replace-one: z_g calibrated by the run's accountant
        return algorithm

    changes = []
    for algorithm in (build(0), build(1)):
        before = algorithm.global_params.clone()
        algorithm.run_round(0)
        changes.append((algorithm.global_params - before)[_zero_feature_weights(algorithm)])
    assert float((changes[0] / changes[1]).mean()) == pytest.approx(6.6 / 6.0, rel=1e-5)


# -- replace-one: runs, accounted at sensitivity 2C, and says so ----------------------------------------
REPLACE_ONE: dict[str, dict[str, Any]] = {
    "dp_dsgd_rp": {"participation": 1.0, "sampling_rate": 0.8, "noise_multiplier": 4.0},
    "dp_fedavg": {
        "client_sampling": "poisson",
        "sampling_rate": 0.6,
        "noise_multiplier": 4.0,
        "batch_size": 4,
    },
    "dp_sgd_split": {
        "sampling": "poisson",
        "sampling_rate": 0.3,
        "num_submodels": 2,
        "noise_multiplier": 4.0,
        "num_local_steps": 1,
        "batch_size": 1,
        "learning_rate": 1.0,
        "split_credit": "split",
    },
    "gdpfed": {"participation": 0.6, "client_budgets": [2.0] * 3 + [6.0] * 3, "batch_size": 4},
}


@pytest.mark.parametrize("name", list(REPLACE_ONE))
def test_replace_one_runs_and_reports_the_relation(tmp_path: Path, name: str) -> None:
    from ampfl.accounting.accountants import NeighboringRelation, RDPAccountant
    from ampfl.accounting.events import ComposedEvent, GaussianEvent
    from ampfl.fl.config import parse_config
    from ampfl.fl.run.experiment import run_experiment

    # Prepare: no declared normaliser, the dataset sizes declared public
    rounds = 3
    model = "mlp" if name == "dp_sgd_split" else "logreg"
    task = _task([1] * 20 if name == "dp_sgd_split" else [6, 8, 7, 9, 5, 8], model)
    config = parse_config(
        {
            "seed": 3,
            "rounds": rounds,
            "checkpoint_every": 0,
            "model": {"name": model, "options": {"hidden": [8]} if model == "mlp" else {}},
            "algorithm": {"name": name, **REPLACE_ONE[name]},
            "privacy": {"neighbouring": "replace-one", "reproducible": True},
        }
    )
    # Execute
    summary = run_experiment(config, tmp_path / name, progress=False, plots=False, task=task)
    # Assert: every round ran, accounted under replace-one, and the summary says so
    assert summary["rounds_completed"] == rounds and summary["stopped"] == "rounds"
    assert summary["neighbouring"] == "replace-one"
    assert "replace_one" in summary["analysis"] and summary["accountant"] == "rdp"  # no replace-one PLD
    if name == "gdpfed":  # z_g calibrated for the replace-one event: each group meets its budget
        by_group = summary["epsilon_by_group"]
        assert [by_group[g] for g in ("0", "1")] == pytest.approx([2.0, 6.0], rel=0.01)
        assert all(by_group[g] <= budget * (1 + 1e-9) for g, budget in (("0", 2.0), ("1", 6.0)))
        return
    # the unamplified Gaussian at sensitivity 2C (z/2; model split: each part's, here one part), T times
    half = GaussianEvent(noise_multiplier=2.0)
    event = ComposedEvent(events=(half,)) if name == "dp_sgd_split" else half
    reference = RDPAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    reference.compose(event, rounds)
    assert summary["epsilon"] == pytest.approx(reference.get_epsilon(summary["delta"]), rel=1e-9)


@pytest.mark.parametrize(
    "name,params,privacy",
    [
        ("dp_fedavg", REPLACE_ONE["dp_fedavg"], {"accountant": "pld"}),  # no replace-one PLD accountant
        ("gdpfed_minus", REPLACE_ONE["gdpfed"], {}),  # the planner assumes add/remove amplification
        ("gdpfed", {**REPLACE_ONE["gdpfed"], "analysis": "paper"}, {}),
        (
            "dp_dsgd_rp",
            {"participation": 0.5, "sampling_rate": 0.5, "round_epsilon": 0.5, "analysis": "ols"},
            {},
        ),
    ],
)
def test_what_replace_one_cannot_account_fails_in_one_line_naming_neighbouring(
    tmp_path: Path, name: str, params: dict[str, Any], privacy: dict[str, Any]
) -> None:
    from ampfl.fl.config import parse_config
    from ampfl.fl.run.experiment import run_experiment

    config = parse_config(
        {
            "seed": 3,
            "rounds": 2,
            "algorithm": {"name": name, **params},
            "privacy": {"neighbouring": "replace-one", "reproducible": True, **privacy},
        }
    )
    task = _task([6, 8, 7, 9, 5, 8])
    with pytest.raises(ValueError, match=r"^privacy\.neighbouring: ") as caught:
        run_experiment(config, tmp_path / name, progress=False, plots=False, task=task)
    assert "\n" not in str(caught.value)
