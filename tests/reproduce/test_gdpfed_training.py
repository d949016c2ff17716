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
    # the claims compared by seed name rows of this run, of their own dataset
    rows = {(r["dataset"], r["method"]) for r in result["results"]}
    assert result["paired"]
    for claim in result["paired"]:
        assert (claim["dataset"], claim["minuend"]) in rows
        assert (claim["dataset"], claim["subtrahend"]) in rows
        assert claim["claim"].startswith(f"{claim['dataset']}: ")


def test_gdpfed_paired_claims_name_rows() -> None:
    from ampfl.reproduce._gdpfed_rows import PAIRED, paired_claims

    datasets = tuple(gdpfed_training.SETTINGS)
    claims = paired_claims(datasets, list(gdpfed_training.METHODS))
    assert len(claims) == len(PAIRED) * len(datasets)  # every claim's rows are methods of the figure
    for claim in claims:
        assert {claim["minuend"], claim["subtrahend"]} <= set(gdpfed_training.METHODS)
        assert claim["minuend"] != claim["subtrahend"]
    pairs = {(c["minuend"], c["subtrahend"]) for c in claims}
    for baseline in ("dp_fedavg", "dp_fedavg_per_group"):  # both readings of DP-FedAvg
        assert ("gdpfed", baseline) in pairs
    for plus in ("gdpfed_plus", "gdpfed_plus_kappa0.5", "gdpfed_plus_ranked"):  # every κ rule
        assert (plus, "gdpfed") in pairs
    # a row left out of the run drops the claims that name it
    assert all(
        "gdpfed_plus" not in (c["minuend"], c["subtrahend"])
        for c in paired_claims(["digits"], ["gdpfed", "gdpfed_minus"])
    )


def test_gdpfed_paired_by_dataset() -> None:
    """The same method labels on two datasets: each claim pairs its own dataset's rows, by seed."""
    from ampfl.reproduce._gdpfed_rows import paired_claims
    from ampfl.reproduce._seeds import paired_claims as paired_by_dataset

    def row(dataset: str, method: str, values: list[float]) -> dict[str, object]:
        return {"dataset": dataset, "method": method, "final_accuracy": {"values": values}}

    results = [
        row("digits", "gdpfed", [0.9, 0.8, 0.7]),
        row("digits", "dp_fedavg", [0.8, 0.8, 0.8]),
        row("fmnist", "gdpfed", [0.5, 0.5, 0.5]),
        row("fmnist", "dp_fedavg", [0.6, 0.65, 0.7]),
    ]
    claims = paired_claims(["digits", "fmnist"], ["gdpfed", "dp_fedavg"])
    out = {c["dataset"]: c for c in paired_by_dataset(results, claims)}
    assert out["digits"]["differences"] == pytest.approx([0.1, 0.0, -0.1])
    assert out["fmnist"]["differences"] == pytest.approx([-0.1, -0.15, -0.2])
    assert out["fmnist"]["mean"] == pytest.approx(-0.15)
    assert out["fmnist"]["low"] < out["fmnist"]["mean"] < out["fmnist"]["high"] < 0


def test_gdpfed_medium_grids() -> None:
    """At least three learning rates per dataset at medium scale, the quick grid among them."""
    for dataset in gdpfed_training.SETTINGS:
        medium = gdpfed_training._grid(dataset, False, True)
        assert len(medium) >= 3 and list(medium) == sorted(set(medium))
        assert set(gdpfed_training._grid(dataset, True, False)) <= set(medium)
