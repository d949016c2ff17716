"""Smoke tests of the training figures (ms-pafl-fig2, hasircioglu-fig6/7) in quick mode.

Each runs the figure's ``quick`` setting, shortened further (a few rounds per run), and checks that the
PNG and the CSVs are written with the expected columns. The datasets are real (UCI Adult, Fashion-MNIST); a
test skips, saying why, when its dataset cannot be loaded. To stay fast, the test set used for evaluation is
cut to its first :data:`TEST_EXAMPLES` examples, and the CNN figures run one iteration per run (noise
calibration and accounting are unchanged).
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from ampfl.reproduce import figure_names, run_figure

TEST_EXAMPLES = 500

MS_PAFL_COLUMNS = [
    "scheme",
    "p",
    "round",
    "accuracy",
    "personal_accuracy_mean",
    "personal_accuracy_std",
    "local_accuracy_mean",
    "epsilon",
    "delta",
]
HASIRCIOGLU_COLUMNS = [
    "analysis",
    "learning_rate",
    "noise_multiplier",
    "iteration",
    "accuracy",
    "epsilon",
    "delta",
]
HASIRCIOGLU_SIGMA_COLUMNS = [
    "analysis",
    "noise_multiplier_printed",
    "noise_multiplier_paper_rates",
    "noise_multiplier_fmnist_rates",
]


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Quick mode, a small evaluation set, and a skip (with the reason) when the dataset is unavailable."""
    import ampfl.fl.run.experiment as fl_run
    from ampfl.fl.data import DataUnavailableError

    original = fl_run.build_task

    def small_test_set(config: Any) -> Any:
        try:
            task = original(config)
        except DataUnavailableError as exc:
            pytest.skip(f"dataset {config.dataset.name!r} cannot be loaded offline: {exc}")
        data = task.dataset
        task.dataset = dataclasses.replace(
            data, x_test=data.x_test[:TEST_EXAMPLES], y_test=data.y_test[:TEST_EXAMPLES]
        )
        return task

    monkeypatch.setattr(fl_run, "build_task", small_test_set)


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_training_figures_are_registered() -> None:
    assert {"ms-pafl-fig2", "hasircioglu-fig6", "hasircioglu-fig7"} <= set(figure_names())


@pytest.mark.slow
@pytest.mark.realdata
def test_ms_pafl_fig2_quick(tmp_path: Path, quick: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from ampfl.reproduce import ms_pafl_training

    monkeypatch.setattr(ms_pafl_training, "QUICK_ROUNDS", 3)
    result = run_figure("ms-pafl-fig2", tmp_path, quick=True)
    png, table = tmp_path / "ms_pafl_fig2.png", tmp_path / "ms_pafl_fig2.csv"
    assert {str(png), str(table)} == set(result["files"])
    assert result["quick"] is True and result["rounds"] == ms_pafl_training.QUICK_ROUNDS
    assert _is_png(png)
    header, rows = _read(table)
    assert header == MS_PAFL_COLUMNS
    runs = {(r["scheme"], float(r["p"])) for r in rows}
    assert runs == {(s, p) for s in ms_pafl_training.SCHEMES for p in ms_pafl_training.PROBABILITIES}
    for row in rows:
        assert 0.0 <= float(row["accuracy"]) <= 1.0
        assert 0.0 < float(row["epsilon"]) < float("inf") and float(row["delta"]) == ms_pafl_training.DELTA
    # results: the 6 runs and the controls; σ = 0 has no guarantee, the variant keeps the paper's ε
    methods = {r["method"]: r for r in result["results"]}
    assert len(methods) == 6 + len(ms_pafl_training.CONTROLS)
    assert methods["control: sigma=0 (Eq. 11 clipping)"]["epsilon"] == float("inf")
    assert methods["control: update clipping (variant)"]["epsilon"] == methods["ms_pafl wor p=0.3"]["epsilon"]
    assert 0.5 <= result["majority_class_accuracy"] <= 1.0


@pytest.mark.slow
@pytest.mark.realdata
@pytest.mark.parametrize("figure", ["fig6", "fig7"])
def test_hasircioglu_training_figure_quick(
    figure: str, tmp_path: Path, quick: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ampfl.reproduce import hasircioglu_training

    monkeypatch.setattr(hasircioglu_training, "QUICK_ITERATIONS", 1)  # 4 CNN runs: keep each short
    monkeypatch.setattr(hasircioglu_training, "QUICK_LEARNING_RATES", (2e-3,))
    result = run_figure(f"hasircioglu-{figure}", tmp_path, quick=True)
    png = tmp_path / f"hasircioglu_{figure}.png"
    table = tmp_path / f"hasircioglu_{figure}.csv"
    sigma_table = tmp_path / f"hasircioglu_{figure}_sigma.csv"
    assert {str(png), str(table), str(sigma_table)} == set(result["files"])
    assert result["quick"] is True and result["iterations"] == hasircioglu_training.QUICK_ITERATIONS
    assert _is_png(png)
    header, rows = _read(table)
    assert header == HASIRCIOGLU_COLUMNS
    assert {r["analysis"] for r in rows} == {"non-private", "paper", "wcs", "ols"}
    for row in rows:
        assert 0.0 <= float(row["accuracy"]) <= 1.0
        z, epsilon = float(row["noise_multiplier"]), float(row["epsilon"])
        assert z >= 0.0
        # the run's accountant: finite ε exactly when there is noise
        assert (0.0 < epsilon < float("inf")) if z > 0.0 else epsilon == float("inf")
        assert float(row["delta"]) == hasircioglu_training.DELTA_TOTAL
    assert all(float(r["noise_multiplier"]) == 0.0 for r in rows if r["analysis"] == "non-private")
    header, checks = _read(sigma_table)
    assert header == HASIRCIOGLU_SIGMA_COLUMNS
    wcs = next(r for r in checks if r["analysis"] == "wcs")
    # σ/C of WCS (Thm 5.2) at the paper's own rates: 004 Sec. 6 prints 7.65 (6.1) and 0.873 (6.2)
    assert float(wcs["noise_multiplier_paper_rates"]) == pytest.approx(
        float(wcs["noise_multiplier_printed"]), rel=0.01
    )
    # the wcs run uses Thm 5.2's closed-form z at the rescaled rates (participation revealed, as in 004)
    run = next(r for r in result["runs"] if r["method"] == "wcs")
    assert run["noise_multiplier"] == pytest.approx(float(wcs["noise_multiplier_fmnist_rates"]), rel=0.01)
    # the paper's curve uses the σ 004 prints for Thm 4.1, never σ = 0
    paper = next(r for r in result["results"] if r["method"] == "paper")
    assert paper["noise_multiplier"] == hasircioglu_training.PRINTED_SIGMA[figure]["paper"] > 0.0
    assert [r["method"] for r in result["results"]] == ["non-private", "paper", "wcs", "ols"]
