"""``ampfl demo`` on a reduced setting: the JSON contract, the files, and the common privacy target."""

from __future__ import annotations

import json
import math

import pytest

from ampfl.cli import main
from ampfl.fl.demo import RUNS, TARGET_DELTA, TARGET_EPSILON, run_name


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
