"""Smoke tests of the paper 004 reproductions (ampfl.reproduce.hasircioglu, accounting_demo)."""

import csv

import pytest

from ampfl.reproduce import figure_names
from ampfl.reproduce import hasircioglu as h
from ampfl.reproduce.accounting_demo import run_accounting_demo


def test_figures_are_registered():
    names = set(figure_names())
    assert {"hasircioglu-fig1", "hasircioglu-fig2", "hasircioglu-fig3", "hasircioglu-fig5"} <= names
    assert {"hasircioglu-sec6", "accounting-demo"} <= names


@pytest.mark.parametrize("fn", [h.fig1, h.fig2, h.fig3, h.fig5], ids=["fig1", "fig2", "fig3", "fig5"])
def test_figure_writes_png_and_csv(fn, tmp_path):
    result = fn(tmp_path, points=3)
    paths = sorted(result["files"])
    assert [p[-4:] for p in paths] == [".csv", ".png"]
    for p in paths:
        assert (tmp_path / p.split("/")[-1]).stat().st_size > 0
    with open(paths[0]) as handle:
        rows = list(csv.reader(handle))
    assert len(rows) == 4 and len(rows[0]) == 7  # x + 3 Thm 4.1 curves + CS, WCS, OLS
    assert rows[0][0] in ("epsilon", "noise_multiplier", "q")  # the x axis, never an absolute "sigma"


def test_accounting_demo_writes_section6_and_fig1(tmp_path):
    result = run_accounting_demo(tmp_path)
    names = {p.split("/")[-1] for p in result["files"]}
    assert names == {
        "hasircioglu_sec6.csv",
        "hasircioglu_sec6.png",
        "hasircioglu_fig1.csv",
        "hasircioglu_fig1.png",
    }
    assert result["recommended_analysis"] == "wcs"
    with open(tmp_path / "hasircioglu_sec6.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 8
    wcs = {r["scenario"][:3]: float(r["noise_multiplier_ampfl"]) for r in rows if r["analysis"] == "wcs"}
    assert wcs["6.1"] == pytest.approx(7.65, rel=0.01)  # 004 Section 6.1 (C = 1: σ is the noise multiplier)
    assert wcs["6.2"] == pytest.approx(0.873, rel=0.01)  # 004 Section 6.2
    assert wcs["6.1"] == pytest.approx(7.6651, rel=1e-4) and wcs["6.2"] == pytest.approx(0.8739, rel=1e-4)
    assert result["noise_multiplier"]["wcs@6.1"] == pytest.approx(wcs["6.1"])


@pytest.mark.parametrize("figure", ["fig6", "fig7"])
def test_training_grids_hold_the_paper_learning_rates(figure):
    from ampfl.reproduce import hasircioglu_training as t

    medium, full = t.scale(medium=True, figure=figure)["grid"], t.scale()["grid"]
    assert len(medium) >= 3 and list(medium) == sorted(medium) and set(medium) <= set(full)
    assert set(t.PAPER_LEARNING_RATES[figure].values()) <= set(medium)  # 004 App. B.2
    assert set(t.PAPER_LEARNING_RATES[figure]) == set(t.LABELS)
    assert t.scale(quick=True, figure=figure)["grid"] == t.QUICK_LEARNING_RATES  # quick: unchanged


@pytest.mark.parametrize("figure", ["fig6", "fig7"])
def test_training_paired_claims_name_existing_rows(figure):
    from ampfl.reproduce import hasircioglu_training as t

    claims = t.paired_claims(figure)
    steps = [(c["minuend"], c["subtrahend"]) for c in claims if "above" in c["claim"]]
    assert steps == list(zip(t.LABELS, t.LABELS[1:], strict=False))  # each adjacent step of 004's ordering
    for claim in claims:
        assert set(claim) == {"claim", "minuend", "subtrahend"} and claim["claim"]
        assert claim["minuend"] in t.LABELS and claim["subtrahend"] in t.LABELS  # the results rows' methods
    assert any("close" in c["claim"] for c in claims) == (figure == "fig7")
    with pytest.raises(ValueError, match="fig6 or fig7"):
        t.paired_claims("fig8")
