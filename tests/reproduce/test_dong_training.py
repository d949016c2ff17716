"""``ampfl reproduce dong-table1-training`` (002 Table 1 as training, issue 14) on a tiny setting.

Checks the result objects, the files, that every method's spent ε (from the run's accountant) meets the
common target, and that the split method runs with less noise than standard DP-SGD at that ε.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from ampfl.reproduce import dong_training, figure_names
from ampfl.reproduce.dong_training import QUICK, table1_training

TINY = dataclasses.replace(
    QUICK,
    pretrain_examples=300,
    pretrain_epochs=1,
    finetune_examples=100,
    test_examples=200,
    sampling_rate=0.02,
    epochs=1,
    epsilons=(3.0,),
    learning_rates=(0.5,),
    methods=("standard", "split-8-no-amplification", "split-8"),
)


def test_registered() -> None:
    assert "dong-table1-training" in figure_names()
    assert "dong-table1-regime" in figure_names()


@pytest.mark.parametrize("name", ["FULL", "MEDIUM", "QUICK", "REGIME", "REGIME_QUICK"])
def test_paired_claims_name_existing_rows(name: str) -> None:
    s = getattr(dong_training, name)
    claims = dong_training.paired_claims(s)
    for claim in claims:
        assert {"claim", "minuend", "subtrahend"} <= set(claim)
        assert claim["minuend"] in s.methods and claim["subtrahend"] in s.methods, claim
    pairs = {(c["minuend"], c["subtrahend"]) for c in claims}
    splits = [m for m in s.methods if m.startswith("split-")]
    assert {("standard", m) for m in splits} <= pairs
    for d in (3, 8):
        if f"split-{d}" in s.methods:
            assert (f"split-{d}", f"split-{d}-no-amplification") in pairs
    assert (("standard-bis", "standard") in pairs) == ("standard-bis" in s.methods)


def test_medium_grid_and_regime() -> None:
    m, r = dong_training.MEDIUM, dong_training.REGIME
    assert len(m.learning_rates) >= 3 and len(r.learning_rates) >= 3
    assert dong_training.QUICK.learning_rates == (0.05, 0.1)  # the quick setting is unchanged
    # the regime is 002 Table 1's: q = 0.25, 400 steps, epsilon = 8, with an amplified/unamplified pair
    assert r.sampling_rate == 0.25 and round(r.epochs / r.sampling_rate) == 400 and r.epsilons == (8.0,)
    assert {"standard", "split-8", "split-8-no-amplification"} <= set(r.methods)


@pytest.mark.slow
def test_tiny_table(tmp_path: Path) -> None:
    from ampfl.fl.data import DataUnavailableError, load_dataset

    try:
        load_dataset("fmnist")
    except DataUnavailableError as exc:
        pytest.skip(f"Fashion-MNIST unavailable: {exc}")
    out = table1_training(tmp_path, setting=TINY)
    results = {r["method"]: r for r in out["results"]}
    assert set(results) == set(TINY.methods)
    for r in results.values():
        assert {"method", "final_accuracy", "epsilon", "noise_multiplier"} <= set(r)
        assert 0.0 <= r["final_accuracy"] <= 1.0
        assert 2.9 < r["epsilon"] <= 3.0 * 1.0001  # calibrated to the common target, composed by the run
    standard, baseline, split = results["standard"], results["split-8-no-amplification"], results["split-8"]
    assert split["split_credit"] == "split" and baseline["split_credit"] == "none"
    # at equal ε: the split credit buys less noise; without it the split run has the standard noise
    assert split["noise_std_over_clip"] < standard["noise_std_over_clip"]
    assert baseline["noise_std_over_clip"] == pytest.approx(standard["noise_std_over_clip"], rel=0.01)
    assert split["paper_reading_noise_std_over_clip"] < split["noise_std_over_clip"]
    assert out["paired"] == dong_training.paired_claims(TINY)
    for f in out["files"]:
        assert Path(f).exists()
    with open(tmp_path / "dong_table1_training.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(TINY.methods) * len(TINY.learning_rates)
    # a second run into the same folder reuses the finished fine-tuning runs (the stored results)
    stored = sorted((tmp_path / "finetune").glob("*.json"))
    assert len(stored) == len(rows)
    again = table1_training(tmp_path, setting=TINY)
    assert [r["final_accuracy"] for r in again["results"]] == [r["final_accuracy"] for r in out["results"]]


def test_regime_accountant_gives_the_split_its_credit() -> None:
    """At the regime's q = 0.25 and 400 steps, the PLD accountant certifies split-8 at ε ≈ 8 with a noise
    multiplier for which the RDP bound exceeds 8 by far: the regime's runs compose with PLD."""
    from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
    from ampfl.accounting.events import ModelSplitEvent, PoissonSampledEvent

    r = dong_training.REGIME
    assert r.accountant == "pld" and dong_training.MEDIUM.accountant == "rdp"
    steps = round(r.epochs / r.sampling_rate)
    z = 3.34  # split-8's calibrated z under PLD at ε = 8 (σ/C = z/√2 ≈ 2.36; standard DP-SGD: 3.12)
    inner = ModelSplitEvent(num_submodels=8, noise_multiplier=z, nonsplit_noise_multiplier=z)
    event = PoissonSampledEvent(sampling_rate=r.sampling_rate, event=inner)
    pld = PLDAccountant().compose(event, steps).get_epsilon(dong_training.DELTA)
    rdp = RDPAccountant().compose(event, steps).get_epsilon(dong_training.DELTA)
    assert pld <= 8.0 < 12.0 < rdp
