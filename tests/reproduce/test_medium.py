"""``ampfl reproduce NAME --medium [--seeds N]``: parsing, the mean ± std over seeds, and the medium settings.

No training here: the seed loop runs a stand-in figure function; the medium settings are checked as
configurations (they parse, they differ from quick, one grid per figure).
"""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ampfl.reproduce import figure_function, figure_names, has_medium, has_quick, run_figure
from ampfl.reproduce._seeds import (
    MAX_SEEDS,
    aggregate,
    check_seeds,
    mean_std,
    paired_interval,
    run_seeds,
)

TRAINING = sorted(name for name in figure_names() if has_quick(figure_function(name)))


# --- parsing and validation ------------------------------------------------------------------------------


def test_every_training_figure_has_a_medium_setting() -> None:
    assert len(TRAINING) == 11
    assert [name for name in figure_names() if has_medium(figure_function(name))] == TRAINING


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["reproduce", "ms-pafl-fig2", "--medium", "--quick"], "--medium and --quick"),
        (["reproduce", "ms-pafl-fig2", "--medium", "--seeds", "0"], "--seeds"),
        (["reproduce", "ms-pafl-fig2", "--medium", "--seeds", str(MAX_SEEDS + 1)], "--seeds"),
        (["reproduce", "ms-pafl-fig2", "--seeds", "two"], "--seeds"),
        (["reproduce", "dong-fig1", "--medium"], "--medium"),
        (["reproduce", "dong-fig1", "--seeds", "2"], "--seeds"),
        (["reproduce", "dong-fig1", "--device", "cpu"], "--device"),
        (["reproduce", "ms-pafl-fig2", "--medium", "--device", "gpu"], "--device"),
    ],
)
def test_bad_medium_flags_exit_2_with_one_line(
    run_cli: Any, tmp_path: Path, argv: list[str], named: str
) -> None:
    code, out, err = run_cli([*argv, "--out", str(tmp_path / "out")])
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("bad", [0, -1, MAX_SEEDS + 1, 2.0, True, "3"])
def test_check_seeds_rejects(bad: Any) -> None:
    with pytest.raises(ValueError, match="--seeds"):
        check_seeds(bad)


# --- mean ± std over seeds --------------------------------------------------------------------------------


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=2, max_size=12))
def test_mean_std_matches_statistics(values: list[float]) -> None:
    got = mean_std(values)
    assert got["values"] == values
    assert got["mean"] == pytest.approx(statistics.fmean(values), rel=1e-9, abs=1e-6)
    assert got["std"] == pytest.approx(statistics.stdev(values), rel=1e-7, abs=1e-6)


def test_mean_std_known_values_and_edge_cases() -> None:
    got = mean_std([0.70, 0.74, 0.78])
    assert got["mean"] == pytest.approx(0.74) and got["std"] == pytest.approx(0.04)
    assert mean_std([0.5]) == {"mean": 0.5, "std": 0.0, "values": [0.5]}
    infinite = mean_std([math.inf] * 3)  # a non-private run's ε: agreed by every seed, never NaN
    assert infinite["mean"] == math.inf and infinite["std"] == 0.0
    with pytest.raises(ValueError):
        mean_std([])


def _row(method: str, acc: float, **extra: Any) -> dict[str, Any]:
    return {"method": method, "final_accuracy": acc, "noise_multiplier": 1.25, "epsilon": 2.0, **extra}


def test_aggregate_groups_rows_by_method_and_key_fields() -> None:
    rng = random.Random(7)
    accs = {(m, e): [rng.random() for _ in range(4)] for m in ("a", "b") for e in (2.0, 8.0)}
    per_seed = [
        [_row(m, accs[(m, e)][s], target_epsilon=e, published=0.8, published_source="p") for (m, e) in accs]
        for s in range(4)
    ]
    per_seed[2].reverse()  # the order of a seed's rows does not matter
    rows = aggregate(per_seed)
    assert [(r["method"], r["target_epsilon"]) for r in rows] == list(accs)
    for r in rows:
        values = accs[(r["method"], r["target_epsilon"])]
        assert r["seeds"] == 4
        assert r["final_accuracy"]["values"] == values
        assert r["final_accuracy"]["mean"] == pytest.approx(sum(values) / 4)
        assert r["final_accuracy"]["std"] == pytest.approx(statistics.stdev(values))
        assert r["noise_multiplier"] == {"mean": 1.25, "std": 0.0, "values": [1.25] * 4}
        assert r["published"] == 0.8 and r["published_source"] == "p"


def test_aggregate_per_group_dicts_and_missing_values() -> None:
    per_seed = [[_row("g", 0.5, epsilon={"0": 1.0, "1": e}, personal_accuracy_mean=None)] for e in (2.0, 4.0)]
    (row,) = aggregate(per_seed)
    assert row["epsilon"]["0"] == {"mean": 1.0, "std": 0.0, "values": [1.0, 1.0]}
    assert row["epsilon"]["1"]["mean"] == 3.0 and row["epsilon"]["1"]["std"] == pytest.approx(math.sqrt(2))
    assert row["personal_accuracy_mean"] is None


def test_aggregate_rejects_seeds_with_different_rows() -> None:
    with pytest.raises(ValueError, match="different rows"):
        aggregate([[_row("a", 0.1)], [_row("b", 0.2)]])


# --- paired intervals by seed ------------------------------------------------------------------------------


def test_paired_interval_known_values_and_edge_cases() -> None:
    # differences 1, 2, 3: mean 2, std 1; t_{0.975, 2} = 4.303 (Student t table, two-sided 95 %, 2 df)
    got = paired_interval([1.5, 2.5, 3.5], [0.5, 0.5, 0.5])
    assert got["differences"] == [1.0, 2.0, 3.0] and got["seeds"] == 3 and got["mean"] == 2.0
    assert got["high"] - 2.0 == pytest.approx(4.303 / math.sqrt(3), rel=1e-3)
    assert got["low"] == pytest.approx(4.0 - got["high"])
    one = paired_interval([0.7], [0.6])  # one seed: no interval
    assert one["mean"] == pytest.approx(0.1) and one["low"] == -math.inf and one["high"] == math.inf
    same = paired_interval([0.75, 1.0], [0.5, 0.75])  # equal differences: the interval is the point
    assert same["low"] == same["high"] == same["mean"]
    for bad in (([], []), ([0.1], [0.1, 0.2])):
        with pytest.raises(ValueError, match="paired_interval"):
            paired_interval(*bad)
    with pytest.raises(ValueError, match="confidence"):
        paired_interval([0.1], [0.2], confidence=1.0)


def test_run_seeds_adds_the_paired_claims(tmp_path: Path) -> None:
    from ampfl.reproduce._report import table

    claim = {"claim": "b above a", "minuend": "b", "subtrahend": "a"}

    def figure(out: Path, *, seed: int = 0) -> dict[str, Any]:
        rows = [_row("a", 0.5 + 0.1 * seed), _row("b", 0.6 + 0.1 * seed + 0.01 * seed)]
        return {"files": [], "results": rows, "paired": [claim]}

    result = run_seeds(figure, tmp_path, 3, {})
    (paired,) = result["paired"]
    assert paired["minuend"] == "b" and paired["subtrahend"] == "a"
    assert paired["differences"] == pytest.approx([0.1, 0.11, 0.12])
    assert paired["low"] < paired["mean"] < paired["high"]
    assert "b above a: b − a" in table(result)
    assert "paired" not in run_seeds(lambda out, seed=0: {"results": [_row("a", 0.5)]}, tmp_path, 2, {})


def test_run_seeds_runs_each_seed_in_its_folder(tmp_path: Path) -> None:
    calls: list[tuple[Path, int, dict[str, Any]]] = []

    def figure(out: Path, *, seed: int = 0, medium: bool = False) -> dict[str, Any]:
        calls.append((out, seed, {"medium": medium}))
        return {"files": [str(out / "f.png")], "quick": False, "results": [_row("m", 0.1 * (seed + 1))]}

    result = run_seeds(figure, tmp_path, 3, {"medium": True})
    assert [(c[0], c[1]) for c in calls] == [(tmp_path / f"seed{s}", s) for s in range(3)]
    assert all(c[2]["medium"] for c in calls)
    assert result["seeds"] == [0, 1, 2] and len(result["timing"]) == 3
    assert result["results"][0]["final_accuracy"]["mean"] == pytest.approx(0.2)
    assert result["results"][0]["final_accuracy"]["std"] == pytest.approx(0.1)
    assert result["files"] == [str(tmp_path / f"seed{s}" / "f.png") for s in range(3)]


def test_run_figure_medium_uses_seed_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ampfl.reproduce as reproduce

    seen: list[tuple[int, bool]] = []

    def figure(out: Path, *, quick: bool = False, medium: bool = False, seed: int = 0) -> dict[str, Any]:
        seen.append((seed, medium))
        return {"files": [], "quick": quick, "results": [_row("m", 0.5)]}

    monkeypatch.setattr(reproduce, "figure_function", lambda name: figure)
    result = run_figure("ms-pafl-fig2", tmp_path, medium=True, seeds=2)
    assert seen == [(0, True), (1, True)] and result["scale"] == "medium"
    seen.clear()
    result = run_figure("ms-pafl-fig2", tmp_path, quick=True, seeds=2)  # --seeds with quick: no medium
    assert seen == [(0, False), (1, False)] and result["scale"] == "quick"
    with pytest.raises(ValueError, match="mutually exclusive"):
        run_figure("ms-pafl-fig2", tmp_path, quick=True, medium=True)


# --- the medium settings ------------------------------------------------------------------------------------


def test_ms_pafl_medium() -> None:
    from ampfl.reproduce import ms_pafl_training as m

    medium = m.rounds_of(medium=True)
    assert m.rounds_of(quick=True) < medium < m.rounds_of()
    config = m._config(0.3, "wr", medium, seed=2)
    assert config.rounds == medium and config.seed == 2
    assert config.algorithm.params.num_local_steps == 5 and config.partition.num_clients == 100  # 000


@pytest.mark.parametrize("figure", ["fig6", "fig7"])
def test_hasircioglu_medium(figure: str) -> None:
    from ampfl.reproduce import hasircioglu_training as h

    quick, medium, full = h.scale(quick=True), h.scale(medium=True), h.scale()
    assert medium != quick and quick["iterations"] < medium["iterations"] < full["iterations"]
    assert set(medium["grid"]) <= set(full["grid"]) | set(quick["grid"]) and medium["grid"]
    for label in ("non-private", "paper", "wcs", "ols"):  # one grid, every method
        config = h._config(figure, label, medium["iterations"], medium["grid"][0], medium["evaluations"], 1)
        assert config.seed == 1 and config.rounds == medium["iterations"]
        assert config.partition.num_clients == h.scenario(figure)["num_clients"]  # the full scenario


@pytest.mark.parametrize("dataset", ["digits", "fmnist", "shakespeare"])
def test_gdpfed_medium(dataset: str) -> None:
    from ampfl.reproduce import gdpfed_training as g

    grid = g._grid(dataset, False, True)
    # one grid for every method: at least 3 values, the quick grid among them (widened at chosen edges)
    assert len(grid) >= 3 and set(g._grid(dataset, True, False)) <= set(grid)
    quick = g._config(dataset, "gdpfed", grid[0], quick=True, clients=300)
    for method in g.METHODS:
        medium = g._config(dataset, method, grid[0], quick=False, medium=True, clients=300, seed=3)
        assert medium.seed == 3 and medium.rounds > quick.rounds
        assert medium.rounds <= g.SETTINGS[dataset]["rounds"]


def test_pm_sfl_medium() -> None:
    from ampfl.reproduce import pm_sfl_training as p

    medium = p.setting_of(medium=True)
    assert medium != p.QUICK and p.QUICK["rounds"] < medium["rounds"] < p.FULL["rounds"]
    assert set(medium) == set(p.QUICK) == set(p.FULL)
    assert len(medium["learning_rates"]) >= 3 and 1e-3 in medium["learning_rates"]  # 003's Adam rate
    for algorithm, extra in {**p.METHODS, **p.HETERO_METHODS}.values():
        for lr in medium["learning_rates"]:
            config = p.pm_sfl_config(algorithm, extra, lr, medium, seed=4)
            assert config.seed == 4 and config.rounds == medium["rounds"]


def test_dong_medium() -> None:
    import dataclasses

    from ampfl.reproduce import dong_training as d

    assert d.MEDIUM != d.QUICK
    assert d.QUICK.pretrain_examples <= d.MEDIUM.pretrain_examples <= d.FULL.pretrain_examples
    assert d.PUBLISHED_EPSILON in d.MEDIUM.epsilons  # 002's column, so the published number sits beside
    for field in dataclasses.fields(d.Setting):
        value = getattr(d.MEDIUM, field.name)
        assert value, field.name
    for method in d.MEDIUM.methods:
        for eps in d.MEDIUM.epsilons:
            params = d._params(method, d.MEDIUM, eps, d.MEDIUM.learning_rates[0])
            assert params["num_rounds"] == round(d.MEDIUM.epochs / d.MEDIUM.sampling_rate)


def test_report_table_prints_mean_std_z_epsilon_and_published() -> None:
    from ampfl.reproduce._report import table

    rows = aggregate(
        [
            [_row("m", acc, learning_rate=lr, published=0.8, published_source="src")]
            for acc, lr in ((0.70, 0.1), (0.74, 0.1), (0.78, 0.05))
        ]
    )
    text = table(
        {
            "results": rows,
            "timing": [{"wall_seconds": 60.0, "cpu_seconds": 30.0, "load_average_1min": [5.0, 6.0]}],
        }
    )
    line = next(x for x in text.splitlines() if x.startswith("| m |"))
    assert (
        "**0.740 ± 0.040**" in line and "| 1.250 |" in line and "0.1, 0.1, 0.05" in line and "0.8000" in line
    )
    assert "Published: src." in text and "1 seeds, 1.0 min wall, 0.5 min CPU" in text


def test_device_reaches_every_run_config_during_the_figure_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ampfl.reproduce as reproduce
    from ampfl.reproduce import dong_training, engine_section, ms_pafl_training

    seen: list[Any] = []

    def figure(out: Path, *, quick: bool = False, medium: bool = False, seed: int = 0) -> dict[str, Any]:
        config = ms_pafl_training._config(0.3, "wor", 2, seed=seed)
        seen.append((engine_section(), config.engine.device, dong_training._engine().device))
        return {"files": [], "quick": quick, "results": [_row("m", 0.5)]}

    monkeypatch.setattr(reproduce, "figure_function", lambda name: figure)
    run_figure("ms-pafl-fig2", tmp_path, medium=True, seeds=1, device="cpu")
    assert seen == [({"device": "cpu"}, "cpu", "cpu")]
    assert engine_section() == {} and dong_training._engine() is None  # reset after the figure
    assert ms_pafl_training._config(0.3, "wor", 2).engine.device == "auto"


def test_report_table_of_a_single_run() -> None:
    """A summary without --seeds (rows of plain numbers) prints as one seed, its claims without interval."""
    from ampfl.reproduce._report import table

    rows = [
        _row("a", 0.70, learning_rate=0.1, published=None, published_source="src"),
        _row("b", 0.60, learning_rate=0.2, published=None, published_source="src"),
    ]
    text = table({"results": rows, "paired": [{"claim": "a above b", "minuend": "a", "subtrahend": "b"}]})
    line = next(x for x in text.splitlines() if x.startswith("| a |"))
    assert "| 1 | **0.700** |" in line and "| 0.1 |" in line
    claim = next(x for x in text.splitlines() if x.startswith("| a above b"))
    assert "+0.1000 | — | +0.1000 |" in claim
