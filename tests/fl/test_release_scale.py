"""The released noise's scale does not depend on the data (issue 26, docs/threat_model.md).

Under add/remove neighbouring a server step that divides the noisy sum by a size computed from the data
(the largest local dataset, qN, Σ q_g N_g) changes the scale of the released noise when one record (or
client) is added: on a coordinate that every record leaves at zero the released change is pure scaled noise,
so its scale is a membership signal (measured before the fix: ε ≥ 1770 where 14.5 was reported). Here D and
D′ = D plus one record (record-level) or one client (client-level) are trained for one round with the same
seed and the same privacy key; the released change on the always-zero coordinates must carry the same noise
scale. For DP-DSGD-RP, DP-FedAvg and ``dp_sgd_split`` the noise draws are the same on D and D′, so the change
is bit-identical; GDPFed draws one noise share per participant (the cohorts of D and D′ differ), so its
noise scale is compared exactly and the realised noise statistically. Each test also shows that it can fail:
with the sizes declared public (``neighbouring = "replace-one"``) the normaliser comes from the data and the
change differs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.config import PrivacyConfig
from ampfl.fl.data import Dataset
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
    return algorithm.global_params - before


def _zero_coordinates(name: str, task: Task, params: dict[str, Any]) -> torch.Tensor:
    """Coordinates the round leaves at exactly zero without noise (the always-zero features' weights)."""
    quiet = _released_change(name, task, {**params, "noise_multiplier": 0.0}, {})
    zero = quiet == 0.0
    assert int(zero.sum()) >= ZERO  # at least one weight per zero feature
    return zero


CASES = {
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
    return cls(cls.Params(**params), _task(sizes), seed=7, privacy=config, privacy_key=KEY)


def _released_scale(algorithm: Any) -> list[float]:
    """Std of the released noise per group sum: z_g C η_s / Σ_g q_g N̂_g (no momentum)."""
    cohort = float((algorithm.rates * algorithm.public_sizes).sum())
    return [
        float(z) * algorithm.p.clip * algorithm.p.server_learning_rate / cohort
        for z in algorithm.noise_multipliers
    ]


def test_gdpfed_plans_and_divides_by_declared_group_sizes():
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
