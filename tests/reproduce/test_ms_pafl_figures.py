"""Smoke tests of the MS-PAFL privacy figures (small grids; full grids run with ``ampfl reproduce``)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from types import SimpleNamespace

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


# --- ms-pafl-fig2 (training): the grid, the controls and the paired claims, without training ----------------


def test_fig2_grid_and_controls_configs() -> None:
    from ampfl.reproduce import ms_pafl_training as m

    assert len(m.LEARNING_RATES) >= 3 and m.LEARNING_RATE in m.LEARNING_RATES  # 000 states no η
    assert m.grid_of(quick=True) == (m.LEARNING_RATE,) and m.grid_of() == m.LEARNING_RATES
    assert {"sigma=0 (Eq. 11 clipping)", "update clipping (variant)"} <= set(m.CONTROLS)
    assert "sigma=0, no split, update clipping (FedAvg)" in m.CONTROLS  # the earlier labels are kept
    assert set(m.LONG_CONTROLS) <= set(m.CONTROLS)
    for label, overrides in m.CONTROLS.items():
        params = m._config(0.3, "wor", 4, overrides, learning_rate=m.LEARNING_RATES[-1]).algorithm.params
        assert params.learning_rate == m.LEARNING_RATES[-1]
        assert params.clip == (m.NO_CLIP if "no clipping" in label else 1.0)
        assert params.private_fraction == (0.0 if "no split" in label else 0.5)
        if label in m.LONG_CONTROLS:
            assert params.noise_multiplier == 0.0


def test_fig2_best_of_grid_takes_the_first_best() -> None:
    from ampfl.reproduce import ms_pafl_training as m

    accuracy = {0.05: 0.7, 0.5: 0.8, 2.0: 0.8, 8.0: 0.6}
    lr, summary, lines, grid = m._best_of_grid(
        lambda lr: ({"final_accuracy": accuracy[lr]}, [lr]), (*accuracy,)
    )
    assert lr == 0.5 and summary["final_accuracy"] == 0.8 and lines == [0.5]
    assert grid == {f"{k:g}": v for k, v in accuracy.items()}


@pytest.fixture
def fake_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """fig2 without training: each run's accuracy is a fixed function of its configuration."""
    import numpy as np

    import ampfl.fl.run.experiment as experiment
    import ampfl.fl.run.folder as folder

    task = SimpleNamespace(dataset=SimpleNamespace(y_test=np.array([0, 0, 0, 1])))

    lines: dict[Path, list[dict[str, float]]] = {}

    def run_or_reuse(config: object, where: Path, *, task: object, label: str) -> dict[str, object]:
        algo = config.algorithm.params  # type: ignore[attr-defined]
        acc = (hash((algo.participation, algo.learning_rate, algo.clip, config.seed)) % 997) / 997  # type: ignore[attr-defined]
        eps = math.inf if algo.noise_multiplier == 0.0 else 1.0
        line = {"accuracy": acc, "personal_accuracy_mean": acc, "epsilon": eps, "delta": 1e-5}
        lines[where] = [{"round": r, **line} for r in range(1, config.rounds + 1)]  # type: ignore[attr-defined]
        return {"final_accuracy": acc, "epsilon": eps, "delta": 1e-5, "noise": {"noise_multiplier": 1.0}}

    monkeypatch.setattr(experiment, "build_task", lambda config: task)
    monkeypatch.setattr(experiment, "run_or_reuse", run_or_reuse)
    monkeypatch.setattr(folder, "read_lines", lambda where, diagnostics=False: lines[where])


def test_fig2_rows_grid_sweep_and_paired_claims(tmp_path: Path, fake_training: None) -> None:
    from ampfl.reproduce import ms_pafl_training as m

    # Execute: the medium setting, two seeds
    result = run_figure("ms-pafl-fig2", tmp_path, medium=True, seeds=2)
    # Assert
    assert result["learning_rates"] == list(m.LEARNING_RATES) and result["long_rounds"] == m.LONG_FACTOR * 60
    rows = {r["method"]: r for r in result["results"]}
    main = [f"ms_pafl {s} p={p:g}" for s in m.SCHEMES for p in m.PROBABILITIES]
    controls = [f"control: {label}" for label in m.CONTROLS]
    long = [m.long_label(label, result["long_rounds"]) for label in m.LONG_CONTROLS]
    sweep = [f"{method} at η = {lr:g}" for method in m.SWEEP for lr in m.LEARNING_RATES]
    assert list(rows) == main + controls + long + sweep
    for per_seed in result["per_seed_results"]:  # every row on the whole grid, at its best η
        for row in per_seed:
            assert list(row["grid_accuracy"]) == [f"{lr:g}" for lr in m.LEARNING_RATES]
            if " at η = " not in row["method"]:
                assert row["final_accuracy"] == max(row["grid_accuracy"].values())
                assert row["grid_accuracy"][f"{row['learning_rate']:g}"] == row["final_accuracy"]
    claims = result["paired"]
    assert {c["claim"] for c in claims} == {
        "accuracy rises with p (WOR)",
        "accuracy rises with p (WR)",
        "WR above WOR",
        "clip off − clip on",
    }
    for c in claims:
        a, b = (
            rows[c["minuend"]]["final_accuracy"]["values"],
            rows[c["subtrahend"]]["final_accuracy"]["values"],
        )
        assert c["differences"] == pytest.approx([x - y for x, y in zip(a, b, strict=True)])
