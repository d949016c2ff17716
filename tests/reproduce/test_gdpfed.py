"""Smoke test of ``ampfl reproduce gdpfed-fig1`` (paper 001, Figure 1) on a shrunken setting."""

import csv

import pytest

from ampfl.reproduce import gdpfed


@pytest.mark.slow
def test_figure1_smoke(tmp_path, monkeypatch):
    small = {
        "tiny": {
            "eps12": (1.0, 2.0),
            "eps3_max": 6.0,
            "size": 50,
            "q": 0.2,
            "rounds": 5,
            "delta": 1e-5,
            "dim": 500,
        }
    }
    monkeypatch.setattr(gdpfed, "SETTINGS", small)
    result = gdpfed.figure1(tmp_path, num_points=3)
    assert (tmp_path / "gdpfed_fig1.png").stat().st_size > 0
    with open(tmp_path / "gdpfed_fig1.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert result["rows"] == len(rows) == 4  # eps3 in {1, 3.5, 6} plus eps2 = 2
    for row in rows:
        total = (float(row["q1"]) + float(row["q2"]) + float(row["q3"])) * 50
        assert abs(total - 0.2 * 150) < 1e-6
    by_eps3 = {float(r["eps3"]): r for r in rows}
    assert by_eps3[2.0]["q2"] == by_eps3[2.0]["q3"]  # equal budgets, equal rates (paper's observation)
    assert float(by_eps3[6.0]["q3"]) > float(by_eps3[2.0]["q3"])  # q3 rises with eps3
    assert float(by_eps3[6.0]["q1"]) < float(by_eps3[2.0]["q1"]) + 1e-12
