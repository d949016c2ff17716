"""The 003 sweep (pm-sfl-sweep) at a tiny size on the bundled digits: rows, data shares, paired gaps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ampfl.fl.run.folder import load_checkpoint
from ampfl.reproduce import figure_function, figure_names
from ampfl.reproduce import pm_sfl_sweep as w
from ampfl.reproduce._seeds import run_seeds

TINY: dict[str, Any] = {
    "rounds": 2,
    "local_steps": 1,
    "evaluations": 1,
    "eval_examples": 100,
    "eval_clients": 3,
}


@pytest.fixture
def tiny_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(w, "CLIENTS", {6: 0.5})
    monkeypatch.setattr(w, "DATA_FRACTIONS", (1.0, 0.25))
    monkeypatch.setattr(w, "WIDTHS", ((4, 4, 4), (8, 8, 8)))


def _figure(out: Path, *, seed: int = 0) -> dict[str, Any]:
    return w._sweep(
        out, TINY, dataset="digits", seed=seed, scale={"quick": True, "medium": False, "seed": seed}
    )


@pytest.mark.usefixtures("tiny_grid")
def test_the_sweep_gives_one_row_per_cell_and_method_and_paired_gaps(tmp_path: Path) -> None:
    result = run_seeds(_figure, tmp_path, 2, {})
    cells = [w.cell_label(6, f, width) for f in (1.0, 0.25) for width in ((4, 4, 4), (8, 8, 8))]
    labels = [f"{m} | {c}" for c in cells for m in w.METHODS]
    assert [r["method"] for r in result["results"]] == labels
    for rows in result["per_seed_results"]:
        for row in rows:
            assert 0.0 <= row["final_accuracy"] <= 1.0 and 0.0 <= row["uniform_accuracy"] <= 1.0
    full, quarter = result["cells"]
    assert quarter["examples_per_client_mean"] == pytest.approx(full["examples_per_client_mean"] / 4, rel=0.1)
    gaps = w.gaps(result)
    assert len(gaps) == len(labels)
    for g in gaps:
        assert g["seeds"] == 2
        if g["method"] == "Standalone":
            assert g["gap"] is None
        else:  # paired by seed: the mean of the per-seed differences, within their range
            per_seed = [
                next(r for r in seed if r["method"] == f"Standalone | {g['cell']}")["final_accuracy"]
                - next(r for r in seed if r["method"] == f"{g['method']} | {g['cell']}")["final_accuracy"]
                for seed in result["per_seed_results"]
            ]
            assert g["gap"]["mean"] == pytest.approx(sum(per_seed) / 2)
            assert g["gap"]["differences"] == pytest.approx(per_seed)
            assert g["gap"]["low"] <= g["gap"]["mean"] <= g["gap"]["high"]
    table = w.table(result)
    assert table.count("\n| ") == len(labels) and "examples per client" in table
    for fraction in ("1", "0.25"):  # each width trains its own model (the task carries the model options)
        folders = [
            tmp_path / "seed0" / "n6" / f"data{fraction}" / width / "splitfed" for width in ("4-4-4", "8-8-8")
        ]
        narrow, wide = (load_checkpoint(f)["algorithm"]["bottom"].numel() for f in folders)
        assert narrow < wide
    again = run_seeds(_figure, tmp_path, 2, {})  # finished runs are reused, rows unchanged
    assert again["per_seed_results"] == result["per_seed_results"]


def test_the_sweep_is_registered_with_seeds() -> None:
    assert "pm-sfl-sweep" in figure_names()
    assert figure_function("pm-sfl-sweep") is w.sweep
    assert w.QUICK["rounds"] < w.MEDIUM["rounds"] < w.FULL["rounds"]
    for method in w.METHODS:  # every method and cell of the medium grid is a valid config
        for clients in w.CLIENTS:
            config = w._config(method, clients, 0.2, w.WIDTHS[-1], w.MEDIUM, "fmnist", 1)
            assert config.partition.num_clients == clients and config.seed == 1
