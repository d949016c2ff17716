"""Smoke tests of the MS-PAFL privacy figures (small grids; full grids run with ``ampfl reproduce``)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from ampfl.reproduce import figure_names, run_figure
from ampfl.reproduce import ms_pafl as figs


@pytest.fixture
def small_grids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figs, "ROUNDS", (1, 10))
    monkeypatch.setattr(figs, "TIGHT_ROUNDS", (1, 10))
    monkeypatch.setattr(figs, "EPS_LOCAL_GRID", (0.5, 1.0))


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_names_registered() -> None:
    names = figure_names()
    for name in ("ms-pafl-fig3", "ms-pafl-fig4", "ms-pafl-fig5", "ms-pafl-fig6"):
        assert name in names
    # The training figure ms-pafl-fig2 is the simulator's, registered once by reproduce/ms_pafl_training.py.
    assert "ms-pafl-fig2" not in figs.FIGURES


@pytest.mark.parametrize("name", ["ms-pafl-fig3", "ms-pafl-fig4", "ms-pafl-fig5", "ms-pafl-fig6"])
def test_figure_writes_png_and_csv(name: str, tmp_path: Path, small_grids: None) -> None:
    result = run_figure(name, tmp_path)
    png, table = tmp_path / f"{name}.png", tmp_path / f"{name}.csv"
    assert str(png) in result["files"] and str(table) in result["files"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = _rows(table)
    assert rows and len(rows) == result["rows"]
    paper_cols = [c for c in rows[0] if c.endswith("_paper")]
    assert paper_cols, "every figure records the paper's formula"
    assert {"epsilon_amplified", "epsilon_recommended", "epsilon_first_use"} <= set(rows[0])
    for row in rows:
        for col in paper_cols:
            assert float(row[col]) >= 0.0
        amp, rec, fu = (
            float(row[c]) for c in ("epsilon_amplified", "epsilon_recommended", "epsilon_first_use")
        )
        if not math.isnan(fu):  # the sound bounds: first-use <= recommended (public-participation)
            assert fu <= rec * (1 + 1e-3) + 1e-9
        if not math.isnan(amp):  # the amplified analysis never claims more than the sound one
            assert amp <= rec * (1 + 1e-3) + 1e-9


def test_fig6_wr_is_below_wor(tmp_path: Path, small_grids: None) -> None:
    run_figure("ms-pafl-fig6", tmp_path)
    rows = _rows(tmp_path / "ms-pafl-fig6.csv")
    by = {(r["panel"], r["curve"].split()[0], r["rounds"]): float(r["epsilon_total_paper"]) for r in rows}
    for (panel, curve, rounds), value in by.items():
        if panel == "wr":
            assert value <= by[("wor", curve, rounds)]
