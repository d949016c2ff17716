"""GDPFed / GDPFed− / GDPFed+ / P-FedAvg (paper 001): noise, per-group budgets, secure sums, masks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import dp_accounting
import numpy as np
import pytest
import torch

from ampfl.accounting.groups import group_epsilon
from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.algorithms.gdpfed import GroupFederatedAlgorithm
from ampfl.fl.config import parse_config
from ampfl.fl.privacy.secure_sum import GroupSums, noise_shares, secure_group_sums
from ampfl.fl.run.experiment import build_algorithm, build_task, run_experiment
from ampfl.fl.run.folder import read_lines
from ampfl.sparsify import kept_count

DELTA = 1e-5


def _config(name: str, rounds: int = 4, privacy: dict[str, Any] | None = None, **algorithm: Any) -> Any:
    params = {"name": name, "participation": 0.4, "learning_rate": 0.2, "num_local_steps": 2, "batch_size": 8}
    if name != "p_fedavg":
        params.update(group_budgets=[1.0, 4.0], group_sizes=[8, 12], expected_group_sizes=[8, 12])
    params.update(algorithm)
    return parse_config(
        {
            "seed": 3,
            "rounds": rounds,
            "eval_every": rounds,
            "checkpoint_every": 0,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": 20},
            "model": {"name": "logreg"},
            "algorithm": params,
            "privacy": {"accountant": "rdp", "delta": DELTA, "reproducible": True, **(privacy or {})},
        }
    )


def _run(tmp_path: Path, config: Any, name: str = "run") -> dict[str, Any]:
    return run_experiment(config, tmp_path / name, progress=False, plots=False)


def _final(tmp_path: Path, name: str = "run") -> dict[str, Any]:
    """The run's last line with its diagnostics (noise energy, rounds per group: not released)."""
    return read_lines(tmp_path / name, diagnostics=True)[-1]


def _dp_accounting_epsilon(q: float, z: float, rounds: int) -> float:
    """ε of ``rounds`` Poisson-subsampled Gaussian rounds, by dp-accounting's PLD accountant (independent)."""
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)  # pessimistic: an upper bound
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    acc.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
    return float(acc.get_epsilon(DELTA))


def test_group_epsilon_within_budget_by_dp_accounting_and_noise_is_tight(tmp_path: Path) -> None:
    config = _config("gdpfed", rounds=4)
    summary = _run(tmp_path, config)
    alg = build_algorithm(config, build_task(config))
    assert summary["privacy_unit"] == "client"
    assert summary["budget_by_group"] == {"0": 1.0, "1": 4.0}
    for g, budget in enumerate((1.0, 4.0)):
        q, z = float(alg.rates[g]), float(alg.noise_multipliers[g])
        assert _dp_accounting_epsilon(q, z, 4) <= budget
        assert _dp_accounting_epsilon(q, 0.9 * z, 4) > budget  # calibrated, not over-noised
        assert summary["epsilon_by_group"][str(g)] <= budget * (1 + 1e-9)
    assert summary["epsilon"] == pytest.approx(max(summary["epsilon_by_group"].values()))
    assert alg.noise_multipliers[0] > alg.noise_multipliers[1]  # the stricter group gets more noise


def test_measured_noise_energy_matches_expectation(tmp_path: Path) -> None:
    config = _config("gdpfed", rounds=6)
    _run(tmp_path, config)
    final = _final(tmp_path)
    alg = build_algorithm(config, build_task(config))
    d = alg.global_params.numel()
    for g in range(2):
        expected = d * float(alg.noise_multipliers[g]) ** 2  # C = 1, κ = 1: d z² C²
        assert final[f"noise_energy_expected_g{g}"] == pytest.approx(expected)
        assert final[f"noise_rounds_g{g}"] == 6
        # χ² with 6 d degrees of freedom: relative sd sqrt(2 / (6 d)) < 2%
        assert final[f"noise_energy_mean_g{g}"] == pytest.approx(expected, rel=0.08)


def test_group_stops_at_its_budget_and_run_stops_when_all_are_spent(tmp_path: Path) -> None:
    # calibrated for T = 4; max_epsilon = 3.2 caps group 1 (budget 4) earlier, group 0 (budget 1) runs on
    config = _config("gdpfed", rounds=6, privacy={"max_epsilon": 3.2}, num_rounds=4)
    summary = _run(tmp_path, config)
    spent, final = summary["epsilon_by_group"], _final(tmp_path)
    alg = build_algorithm(config, build_task(config))
    q1, z1 = float(alg.rates[1]), float(alg.noise_multipliers[1])
    ran_1 = int(final["noise_rounds_g1"])
    assert 1 <= ran_1 < 4 and final["noise_rounds_g0"] == 4  # group 1 was retired before group 0
    assert _dp_accounting_epsilon(q1, z1, ran_1) <= 3.2
    assert group_epsilon(z1, sampling_rate=q1, rounds=ran_1 + 1, target_delta=DELTA) > 3.2  # it had to stop
    assert spent["1"] <= 3.2 * (1 + 1e-9) and spent["0"] <= 1.0 * (1 + 1e-9)
    assert summary["stopped"] == "budget" and summary["rounds_completed"] == 4  # then group 0 ran out


def test_secure_sum_server_sees_only_group_sums(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TypeError):
        GroupSums(torch.zeros(2, 3), (1, 1), (True, True))  # only secure_group_sums can make one
    config = _config("gdpfed", rounds=2)
    alg = build_algorithm(config, build_task(config))
    seen: list[Any] = []
    original = GroupFederatedAlgorithm.server_update

    def spy(self: GroupFederatedAlgorithm, sums: Any) -> Any:
        seen.append(sums)
        return original(self, sums)

    monkeypatch.setattr(GroupFederatedAlgorithm, "server_update", spy)
    metrics = alg.run_round(0)
    d = alg.global_params.numel()
    assert len(seen) == 1 and isinstance(seen[0], GroupSums)
    assert tuple(seen[0].sums.shape) == (2, d)  # one row per group, never one per client
    assert seen[0].counts == (int(metrics["participants_g0"]), int(metrics["participants_g1"]))
    with pytest.raises(TypeError):
        original(alg, seen[0].sums)  # a raw tensor is refused
    kept = [v for v in vars(alg).values() if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[1] == d]
    assert not kept  # no per-client update survives the round on the algorithm


def test_secure_group_sums_and_noise_shares() -> None:
    rows = torch.arange(12.0).reshape(4, 3)
    out = secure_group_sums(rows, [1, 0, 1, 1], num_groups=3, is_client=[True, True, True, False])
    assert torch.equal(out.sums, torch.stack([rows[1], rows[0] + rows[2] + rows[3], torch.zeros(3)]))
    assert out.counts == (1, 2, 0)
    gen = torch.Generator().manual_seed(0)
    mask = torch.tensor([True, False] * 2000)
    shares = noise_shares(gen, [5, 0], [2.0, 3.0], 4000, masks=[mask, None])
    assert shares.shape == (6, 4000)
    group0 = shares[:5].sum(0)
    assert torch.all(group0[~mask] == 0)  # noise only on the mask
    assert float(group0[mask].var()) == pytest.approx(4.0, rel=0.1)  # five shares sum to σ² = 4
    assert float(shares[5].var()) == pytest.approx(9.0, rel=0.1)  # empty group: one full share


def test_gdpfed_plus_masks_then_noises(tmp_path: Path) -> None:
    config = _config("gdpfed_plus", rounds=3, kappa=[0.2, 0.5], mask="public")
    alg = build_algorithm(config, build_task(config))
    d = alg.global_params.numel()
    assert list(alg.kappa) == [0.2, 0.5]
    masks = alg.masks(0)
    w0 = alg.global_params.clone()
    expected_support = torch.argsort(w0.abs(), descending=True, stable=True)[: kept_count(0.5, d)]
    assert torch.equal(
        torch.sort(torch.nonzero(masks[1]).flatten()).values, torch.sort(expected_support).values
    )
    metrics = alg.run_round(0)
    change = alg.global_params - w0
    union = masks[0] | masks[1]
    assert torch.all(change[~union] == 0)  # neither update nor noise outside the public masks
    for g in range(2):
        energy = metrics[f"noise_energy_g{g}"]
        assert energy == pytest.approx(
            kept_count(float(alg.kappa[g]), d) * alg.noise_multipliers[g] ** 2, rel=0.5
        )
    # the paper's order (default): top-κ of each noisy group sum on the server; ≤ Σ⌈κ_g d⌉ coordinates move
    paper = build_algorithm(_config("gdpfed_plus", rounds=3, kappa=[0.2, 0.5]), build_task(config))
    before = paper.global_params.clone()
    paper.run_round(0)
    moved = int(((paper.global_params - before) != 0).sum())
    assert kept_count(0.5, d) <= moved <= kept_count(0.2, d) + kept_count(0.5, d)
    assert np.all(alg.rates > 0) and math.isclose(
        float((alg.rates * alg.sizes).sum()), 0.4 * 20, rel_tol=1e-6
    )


def test_p_fedavg_is_non_private_and_resume_is_bit_identical(tmp_path: Path) -> None:
    summary = _run(tmp_path, _config("p_fedavg", rounds=3))
    assert summary["privacy_unit"] is None and summary["epsilon"] == math.inf
    assert "epsilon_by_group" not in summary
    config = _config("gdpfed", rounds=4)
    full = _run(tmp_path, config, "full")
    run_experiment(config, tmp_path / "part", progress=False, plots=False, stop_after=2)
    resumed = run_experiment(config, tmp_path / "part", progress=False, plots=False, resume=True)
    assert resumed["final_accuracy"] == full["final_accuracy"]
    assert resumed["epsilon_by_group"] == full["epsilon_by_group"]
    key = "noise_energy_mean_g0"
    assert _final(tmp_path, "part")[key] == _final(tmp_path, "full")[key]


def test_bad_budgets_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="group_budgets"):
        _config("gdpfed", group_budgets=[1.0], group_sizes=[10, 10])
    with pytest.raises(ValueError, match="budgets"):
        parse_config({"rounds": 1, "algorithm": {"name": "gdpfed"}})
    config = _config("gdpfed", group_sizes=[5, 5])
    with pytest.raises(ValueError, match="group_sizes"):
        build_algorithm(config, build_task(config))
    assert {"p_fedavg", "gdpfed", "gdpfed_minus", "gdpfed_plus"} <= set(ALGORITHMS)


def test_idp_fedavg_one_sum_one_noise_rates_per_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config("idp_fedavg", rounds=3)
    alg = build_algorithm(config, build_task(config))
    z = float(alg.noise_multipliers[0])
    assert np.all(alg.noise_multipliers == z) and alg.rates[0] < alg.rates[1]  # looser budget: sampled more
    assert float(alg.rates @ alg.sizes) == pytest.approx(0.4 * 20, rel=0.05)
    for g, budget in enumerate((1.0, 4.0)):
        assert _dp_accounting_epsilon(float(alg.rates[g]), z, 3) <= budget
    seen: list[Any] = []
    original = GroupFederatedAlgorithm.server_update
    monkeypatch.setattr(
        GroupFederatedAlgorithm, "server_update", lambda self, s: seen.append(s) or original(self, s)
    )
    alg.run_round(0)
    assert seen[0].sums.shape[0] == 1  # one secure sum over every group


def test_pfa_projects_private_sums_onto_public_span(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config("pfa", rounds=2, pfa_rank=1)
    alg = build_algorithm(config, build_task(config))
    seen: list[Any] = []
    original = GroupFederatedAlgorithm.server_update
    monkeypatch.setattr(
        GroupFederatedAlgorithm, "server_update", lambda self, s: seen.append(s) or original(self, s)
    )
    before = alg.global_params.clone()
    alg.run_round(0)
    public = seen[0].sums[1]  # group 1 has the larger budget
    change = alg.global_params - before
    cosine = float(change @ public) / float(change.norm() * public.norm())
    assert abs(cosine) == pytest.approx(1.0, abs=1e-4)  # private group 0 was projected onto span(public)
    assert torch.allclose(seen[0].sums[0], (seen[0].sums[0] @ public) / (public @ public) * public, atol=1e-4)
