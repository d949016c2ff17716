"""``ampfl demo`` on a reduced setting: the JSON contract, the files, and the common privacy target."""

from __future__ import annotations

import json
import math

import pytest

from ampfl.cli import main
from ampfl.fl.demo import TARGET_DELTA, TARGET_EPSILON, UNITS


@pytest.mark.slow
def test_demo_json_contract_on_a_reduced_setting(tmp_path, capsys):
    # Execute
    code = main(["demo", "--out", str(tmp_path / "demo"), "--json", "--quick", "--no-progress"])
    # Assert
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    results = result["results"]
    assert [r["algorithm"] for r in results] == list(UNITS)
    for r in results:
        assert {"algorithm", "epsilon", "delta", "final_accuracy"} <= set(r)
        assert 0.0 <= r["final_accuracy"] <= 1.0
        if r["algorithm"] == "fedavg":
            assert r["epsilon"] == math.inf  # written as 1e999 in the JSON
        else:
            # Every private algorithm is calibrated to the common target (never above it, within 1%),
            # at the common δ, by the run's accountant.
            assert TARGET_EPSILON * 0.99 <= r["epsilon"] <= TARGET_EPSILON * (1 + 1e-9)
            assert r["delta"] == TARGET_DELTA and r["analysis"].startswith("rdp accountant")
            assert r["noise"]["noise_multiplier"] > 0.0
    by_name = {r["algorithm"]: r for r in results}
    assert "personal_accuracy_mean" in by_name["ms_pafl"]
    folder = tmp_path / "demo"
    assert (folder / "accuracy.png").is_file() and (folder / "results.csv").is_file()
    assert json.loads((folder / "results.json").read_text())["results"] == results
    for name in UNITS:
        assert (folder / name / "summary.json").is_file()
