"""gdpfed-table2 in a shortened quick mode on digits: files, per-group ε, noise energy, the JSON results."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from ampfl.reproduce import figure_names, gdpfed_training, run_figure


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    small = {
        "digits": {**gdpfed_training.SETTINGS["digits"], "quick_clients": 90, "quick_rounds": 3},
        "fmnist": {**gdpfed_training.SETTINGS["fmnist"], "quick_clients": 90, "quick_rounds": 1},
    }
    monkeypatch.setattr(gdpfed_training, "SETTINGS", small)
    monkeypatch.setattr(gdpfed_training, "QUICK_LEARNING_RATES", (0.3,))
    methods = {k: v for k, v in gdpfed_training.METHODS.items() if k != "gdpfed_plus"}  # planner κ: slow
    monkeypatch.setattr(gdpfed_training, "METHODS", methods)
    original = gdpfed_training.table2
    monkeypatch.setattr(
        gdpfed_training,
        "table2",
        lambda out, *, quick=False: original(out, quick=quick, datasets=("digits",)),
    )


def test_gdpfed_table2_quick(tiny: None, tmp_path: Path) -> None:
    assert "gdpfed-table2" in figure_names()
    result = run_figure("gdpfed-table2", tmp_path, quick=True)
    assert result["quick"] is True
    for path in result["files"]:
        assert Path(path).is_file()
    with open(tmp_path / "gdpfed_table3.csv", encoding="utf-8") as handle:
        assert len(list(csv.DictReader(handle))) == len(gdpfed_training.METHODS)
    by_method = {r["method"]: r for r in result["results"]}
    assert set(by_method) == set(gdpfed_training.METHODS)
    for name, r in by_method.items():
        assert set(r) >= {"method", "final_accuracy", "epsilon", "noise_energy"}
        for g, budget in enumerate(gdpfed_training.BUDGETS):
            eps = r["epsilon"][str(g)]
            if name == "p_fedavg":
                assert eps == math.inf
            elif name in ("dp_fedavg", "dp_fedavg_per_group"):
                assert eps <= min(gdpfed_training.BUDGETS) * (1 + 1e-9)  # everyone at the strictest budget
            else:
                assert eps <= budget * (1 + 1e-9)
    for name in ("dp_fedavg", "gdpfed", "gdpfed_minus"):  # κ = 1: measured vs d z² C² (χ², 3 rounds)
        energy = by_method[name]["noise_energy"]
        assert energy["measured"] == pytest.approx(energy["expected"], rel=0.1)
    # GDPFed's strictest group is DP-FedAvg's mechanism (same q, budget, T): it cannot carry less noise
    assert by_method["gdpfed"]["noise_multiplier"]["0"] == pytest.approx(
        by_method["dp_fedavg"]["noise_multiplier"]["0"], rel=0.01
    )
    assert (
        by_method["gdpfed"]["noise_energy"]["expected"] > by_method["dp_fedavg"]["noise_energy"]["expected"]
    )
    # the per-group baseline: GDPFed's round with every group at the strictest budget, z_g = z(ε_min),
    # so its aggregate noise is G times one sum's, against the same public cohort
    per_group = by_method["dp_fedavg_per_group"]
    assert per_group["budget"] == {str(g): min(gdpfed_training.BUDGETS) for g in range(3)}
    for g in range(3):
        assert per_group["noise_multiplier"][str(g)] == pytest.approx(
            by_method["gdpfed"]["noise_multiplier"]["0"]
        )
    for name in ("dp_fedavg", "dp_fedavg_per_group", "gdpfed"):
        energy = by_method[name]["noise_energy"]
        assert energy["cohort"] == pytest.approx(gdpfed_training.SETTINGS["digits"]["participation"] * 90)
        assert energy["aggregate_expected"] == pytest.approx(energy["expected"] / energy["cohort"] ** 2)
    assert per_group["noise_energy"]["aggregate_expected"] == pytest.approx(
        3 * by_method["dp_fedavg"]["noise_energy"]["aggregate_expected"], rel=0.02
    )
    assert by_method["gdpfed_plus_ranked"]["kappa"] == {"0": 0.25, "1": 0.5, "2": 0.75}
    verdicts = {v["comparison"]: v for v in result["verdicts"]["digits"]}
    assert len(verdicts) == 4  # the planner's κ row is left out here
    versus_b = verdicts["GDPFed vs DP-FedAvg, one noisy sum per group at the strictest ε"]
    assert versus_b["noise_energy_ratio"] == pytest.approx(
        by_method["gdpfed"]["noise_energy"]["aggregate"] / per_group["noise_energy"]["aggregate"]
    )
    assert versus_b["noise_energy_ratio"] < 1  # looser groups need less noise than ε_min's
    plus = by_method["gdpfed_plus_kappa0.5"]["noise_energy"]  # top-κ after the noise keeps κ + 2tφ(t) of it
    assert plus["measured"] == pytest.approx(plus["expected_topk"], rel=0.1)
    assert plus["measured"] > 1.5 * plus["expected"]
