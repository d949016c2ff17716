"""``ampfl demo`` on a reduced setting: the JSON contract, the files, the privacy target, the frontier."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from ampfl.cli import main
from ampfl.fl.demo.amplification import RUNS, TARGET_DELTA, TARGET_EPSILON, run_demo, run_name
from ampfl.fl.demo.frontier import QUICK_EPSILONS


@pytest.mark.slow
def test_demo_json_contract_on_a_reduced_setting(tmp_path, capsys):
    # Execute
    code = main(["demo", "--out", str(tmp_path / "demo"), "--json", "--quick", "--no-progress"])
    # Assert
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    results = result["results"]
    assert [(r["algorithm"], r["accounting"]) for r in results] == list(RUNS)
    for r in results:
        assert {"algorithm", "accounting", "final_accuracy", "epsilon", "delta", "privacy_unit"} <= set(r)
        assert "noise_multiplier" in r
        assert 0.0 <= r["final_accuracy"] <= 1.0 and 0.0 <= r["local_accuracy"] <= 1.0
        if r["accounting"] == "none":
            assert r["epsilon"] == math.inf and r["noise_multiplier"] is None and r["privacy_unit"] is None
        else:
            # Every private run is calibrated to the common record-level target (never above it, within
            # 1%), at the common δ, by the run's accountant, under its own accounting.
            assert TARGET_EPSILON * 0.99 <= r["epsilon"] <= TARGET_EPSILON * (1 + 1e-9)
            assert r["delta"] == TARGET_DELTA and r["privacy_unit"] == "record"
            assert r["analysis"].startswith("rdp accountant")
            assert ("no amplification" in r["analysis"]) == (r["accounting"] == "no-amplification")
    noise = {(r["algorithm"], r["accounting"]): r["noise_multiplier"] for r in results}
    # Amplification never needs more noise for the same target; for 004 it needs clearly less.
    assert noise["ms_pafl", "amplified"] <= noise["ms_pafl", "no-amplification"]
    assert noise["dp_dsgd_rp", "amplified"] < 0.7 * noise["dp_dsgd_rp", "no-amplification"]
    folder = tmp_path / "demo"
    assert (folder / "accuracy.png").is_file() and (folder / "results.csv").is_file()
    assert json.loads((folder / "results.json").read_text())["results"] == results
    for algorithm, accounting in RUNS:
        summary = json.loads((folder / run_name(algorithm, accounting) / "summary.json").read_text())
        assert summary["accounting"] == accounting
    assert (folder / "frontier.png").is_file() and (folder / "frontier.csv").is_file()
    _check_frontier(result)


def _check_frontier(result):
    frontier, grid = result["frontier"], list(QUICK_EPSILONS)
    private = [run for run in RUNS if run[1] != "none"]
    assert result["frontier_epsilons"] == grid
    assert [(p["algorithm"], p["accounting"], p["epsilon"]) for p in frontier] == [
        (*run, epsilon) for run in private for epsilon in grid
    ]
    table = {(r["algorithm"], r["accounting"]): r for r in result["results"]}
    for p in frontier:
        assert {
            "algorithm",
            "accounting",
            "epsilon",
            "noise_multiplier",
            "final_accuracy",
            "local_accuracy",
        } <= set(p)
        assert 0.0 <= p["final_accuracy"] <= 1.0 and 0.0 <= p["local_accuracy"] <= 1.0
        # calibrated to its grid ε as the table's runs are: never above it, within 1%
        assert p["epsilon"] * 0.99 <= p["epsilon_accounted"] <= p["epsilon"] * (1 + 1e-9)
        if p["epsilon"] == TARGET_EPSILON:  # the table's run is the frontier's point (not trained twice)
            row = table[p["algorithm"], p["accounting"]]
            assert p["run"] == row["run"] and p["final_accuracy"] == row["final_accuracy"]
            assert p["noise_multiplier"] == row["noise_multiplier"]
    for algorithm in dict.fromkeys(name for name, _ in private):
        z = {
            accounting: [
                p["noise_multiplier"]
                for p in frontier
                if p["algorithm"] == algorithm and p["accounting"] == accounting
            ]
            for accounting in ("amplified", "no-amplification")
        }
        # Monotone sanity: amplification never needs more noise at equal ε; more ε never needs more noise.
        assert all(a <= b for a, b in zip(z["amplified"], z["no-amplification"], strict=True))
        for curve in z.values():
            assert all(later < earlier for earlier, later in itertools.pairwise(curve))
        saved = result["savings"][algorithm]
        noise = saved["noise_saved_at_equal_epsilon"]
        assert [r["epsilon"] for r in noise] == grid
        for r, a, b in zip(noise, z["amplified"], z["no-amplification"], strict=True):
            assert r["ratio"] == pytest.approx(b / a, rel=1e-12) and r["ratio"] >= 1.0
        gaps = saved["epsilon_saved_at_equal_accuracy"]
        assert [r["epsilon"] for r in gaps] == grid
        for r in gaps:
            assert {"accuracy", "epsilon_no_amplification", "epsilon_amplified", "ratio"} <= set(r)
            if r["ratio"] is not None:
                assert grid[0] <= r["epsilon_amplified"] <= grid[-1]
                assert r["ratio"] == pytest.approx(r["epsilon_no_amplification"] / r["epsilon_amplified"])


def test_a_bad_frontier_grid_is_refused_before_any_run(tmp_path):
    with pytest.raises(ValueError, match="epsilons must be strictly increasing"):
        run_demo(tmp_path / "demo", reduced=True, progress=False, epsilons=[2.0, 1.0])
    assert not (tmp_path / "demo").exists()
