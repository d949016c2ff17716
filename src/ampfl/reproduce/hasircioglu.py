"""Figures 1, 2, 3, 5 and the Section 6 table of paper 004 (Hasırcıoğlu & Gündüz, arXiv:2205.01556v1).

Stated parameters (004 Section 5.2): C = 1, σ = 1, p = q = 0.1 unless varied; curves for the proposed scheme
(``paper``, Thm 4.1) at d = 1, 10, 100 and the baselines CS (Cor. 5.3), WCS (Thm 5.2), OLS (Thm 5.1). Fig. 5
(Section 5.4): pq = 1e-4 fixed, q varied, C = σ = 1. With C = 1 the paper's σ is ampfl's noise multiplier
z = σ/C (``noise_multiplier``); axes and CSV columns say so. The text does not state the δ of Figs. 2 and 5
or the ε of Fig. 3; we use δ = 1e-5 and ε = 1 and say so on each figure. ``paper`` curves are Thm 4.1
evaluated exactly (it is not a sound bound; see docs/accounting.md), so they need not look like the
published ones.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ampfl.accounting import random_checkin as rc
from ampfl.io import atomic_write_csv
from ampfl.reproduce._plot import NOT_SOUND

BASE = {"participation": 0.1, "sampling_rate": 0.1, "noise_multiplier": 1.0}
PAPER_D = (1, 10, 100)
BASELINES = ("cs", "wcs", "ols")
#: Legend/CSV labels of the baselines; Cor. 5.3 is the exact δ of one dataset, hence a lower bound here.
BASELINE_LABELS = {"cs": "CS (Cor. 5.3, lower bound here)", "wcs": "WCS (Thm 5.2)", "ols": "OLS (Thm 5.1)"}
#: Lowest value drawn on a log axis (Thm 4.1 at d = 100 falls far below; the CSV has every value).
LOG_FLOOR = 1e-16
FIG2_DELTA = 1e-5  # not stated in 004
FIG3_EPSILON = 1.0  # not stated in 004
FIG5_DELTA = 1e-5  # not stated in 004
SECTION6_TARGET: dict[str, Any] = {"epsilon": 0.015, "delta": 1e-6}
SECTION6_SCENARIOS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "6.1 many clients, small datasets",
        {"participation": 0.001, "sampling_rate": 0.1, "local_dataset_size": 30},
    ),
    (
        "6.2 few clients, large datasets",
        {"participation": 0.1, "sampling_rate": 0.001, "local_dataset_size": 1000},
    ),
)
#: σ printed in 004 Section 6 (6.1, 6.2; C = 1, so σ is the noise multiplier); CS is not printed.
SECTION6_PRINTED: dict[str, tuple[float | None, float | None]] = {
    "paper": (1.065, 0.646),
    "wcs": (7.65, 0.873),
    "ols": (22.4, 1.103),
    "cs": (None, None),
}


def _curves() -> list[tuple[str, str, int]]:
    """(label, analysis, d) for every curve of Figs. 1–3."""
    return [(f"proposed (Thm 4.1, {NOT_SOUND}), d={d}", "paper", d) for d in PAPER_D] + [
        (BASELINE_LABELS[name], name, 1) for name in BASELINES
    ]


def _plot(
    path: Path,
    xs: np.ndarray,
    series: dict[str, list[float]],
    axis: _Axis,
    measure: _Measure,
    text: tuple[str, str],
) -> Path:
    """One plot of ``series`` against ``axis`` (log or linear), y on a log scale, capped at 1 if ``measure``
    is a probability (a δ axis); ``text`` is the title and the footer note.

    On the log axis, zeros and values below :data:`LOG_FLOOR` cannot be drawn: the legend names the curves
    with zeros and those entirely below the floor.
    """
    from ampfl.reproduce._plot import cap_probability_axis, legend_below, new_figure, save

    title, note = text
    fig, ax = new_figure(width=6.5, height=4.2)
    if any(0.0 < y < LOG_FLOOR for ys in series.values() for y in ys):
        note += f" Values below {LOG_FLOOR:g} are not drawn; the CSV has every value."
    for label, ys in series.items():
        values = np.array([y if y >= LOG_FLOOR else np.nan for y in ys])
        zeros = sum(1 for y in ys if y == 0.0)
        below = sum(1 for y in ys if 0.0 < y < LOG_FLOOR)
        hidden = []
        if zeros:
            hidden.append(f"= 0 at {zeros} of {len(ys)} points")
        if below == len(ys):
            hidden.append(f"below {LOG_FLOOR:g} everywhere")
        if hidden:
            label += " [" + "; ".join(hidden) + ": not drawn, see CSV]"
        ax.plot(xs, values, label=label, marker=".", ms=6 if len(xs) < 15 else 3)  # isolated points show
    ax.set_xscale("log" if axis.log else "linear")
    ax.set_xlim(float(xs[0]), float(xs[-1]))
    ax.set_yscale("log")
    ax.set_ylim(bottom=max(ax.get_ylim()[0], LOG_FLOOR))
    if measure.probability:
        cap_probability_axis(ax, bottom=LOG_FLOOR)
    ax.set_xlabel(axis.label)
    ax.set_ylabel(measure.label)
    ax.set_title(title, fontsize=10)
    legend_below(ax, ncol=1)
    ax.grid(True, which="both", alpha=0.3)
    return save(fig, path, note=note)


def _write(out: Path, name: str, xname: str, xs: np.ndarray, series: dict[str, list[float]]) -> Path:
    header = [xname, *series]
    rows = [[float(x), *(float(series[k][j]) for k in series)] for j, x in enumerate(xs)]
    return atomic_write_csv(out / f"{name}.csv", header, rows)


class _Axis(NamedTuple):
    """The x axis of Figs. 1, 2, 3 and 5: CSV column, label, log scale, and the parameters a point sets."""

    column: str
    label: str
    log: bool
    sets: Callable[[float], dict[str, float]]


class _Measure(NamedTuple):
    """What Figs. 1, 2, 3 and 5 plot: δ(ε) or ε(δ) per iteration, at the ``fixed`` parameters the axis
    leaves; a δ axis (``probability``) is capped at 1."""

    function: Callable[..., float]
    label: str
    fixed: dict[str, float]
    probability: bool


def _checkin_at_pq(q: float) -> dict[str, float]:
    """Fig. 5's point: record sampling probability q, client participation p = 1e-4 / q (at most 1)."""
    return {"participation": min(1.0, 1e-4 / q), "sampling_rate": q}


_EPSILON = _Axis("epsilon", "ε per iteration (nats)", False, lambda e: {"epsilon": e})
_NOISE = _Axis(
    "noise_multiplier", "noise multiplier z = σ/C (C = 1)", True, lambda z: {"noise_multiplier": z}
)
_PQ = _Axis("q", "record sampling probability q (client participation p = 1e-4 / q)", True, _checkin_at_pq)


def _delta_at(**fixed: float) -> _Measure:
    return _Measure(rc.delta_per_iteration, "δ per iteration", fixed, True)


def _epsilon_at(**fixed: float) -> _Measure:
    return _Measure(rc.epsilon_per_iteration, "ε per iteration (nats)", fixed, False)


#: Title and footer note of each of Figs. 1, 2, 3 and 5.
_TEXT = {
    "fig1": (
        "004 Fig. 1: δ vs ε per iteration (p = q = 0.1, σ = C = 1)",
        "ampfl reproduction of 004 Fig. 1. 'proposed' = Thm 4.1 as printed: NOT a sound bound "
        "(explicit datasets exceed it; docs/accounting.md, docs/audit.md). CS = Cor. 5.3, exact for one "
        "dataset, hence a lower bound here. All parameters as stated in 004 Sec. 5.2.",
    ),
    "fig2": (
        f"004 Fig. 2: ε vs σ/C at δ = {FIG2_DELTA:g} (p = q = 0.1, C = 1)",
        f"δ = {FIG2_DELTA:g} per iteration (not stated in 004; chosen by ampfl). 'proposed' = Thm 4.1 "
        "as printed, NOT a sound bound (docs/accounting.md). CS = Cor. 5.3, a lower bound here.",
    ),
    "fig3": (
        f"004 Fig. 3: δ vs σ/C at ε = {FIG3_EPSILON:g} (p = q = 0.1, C = 1)",
        f"ε = {FIG3_EPSILON:g} nats per iteration (not stated in 004; chosen by ampfl). 'proposed' = "
        "Thm 4.1 as printed, NOT a sound bound (docs/accounting.md). CS = Cor. 5.3, a lower bound here.",
    ),
    "fig5": (
        f"004 Fig. 5: ε vs q at pq = 1e-4, δ = {FIG5_DELTA:g} (σ = C = 1)",
        f"δ = {FIG5_DELTA:g} per iteration (not stated in 004; chosen by ampfl). 'proposed' = Thm 4.1 "
        "as printed, NOT a sound bound (ε = 0 means it claims no privacy loss; docs/accounting.md). "
        "CS = Cor. 5.3, a lower bound here.",
    ),
}


def _figure(out: Path, name: str, axis: _Axis, xs: np.ndarray, measure: _Measure) -> dict[str, Any]:
    """Figs. 1, 2, 3 and 5: every curve of :func:`_curves` at the points ``xs`` of ``axis`` (the other
    parameters :data:`BASE` and ``measure.fixed``), as ``hasircioglu_<name>`` CSV and PNG."""
    series = {
        label: [
            measure.function(
                analysis=a, local_dataset_size=d, **{**BASE, **measure.fixed, **axis.sets(float(x))}
            )
            for x in xs
        ]
        for label, a, d in _curves()
    }
    csv = _write(out, f"hasircioglu_{name}", axis.column, xs, series)
    png = _plot(out / f"hasircioglu_{name}.png", xs, series, axis, measure, _TEXT[name])
    return {"files": [str(csv), str(png)]}


def fig1(out: Path, *, points: int = 40) -> dict[str, Any]:
    """Fig. 1: δ vs ε, C = σ = 1, p = q = 0.1."""
    return _figure(out, "fig1", _EPSILON, np.linspace(0.05, 2.0, points), _delta_at())


def fig2(out: Path, *, points: int = 30) -> dict[str, Any]:
    """Fig. 2: ε vs σ/C at δ = 1e-5 (δ not stated in 004), p = q = 0.1, C = 1."""
    return _figure(out, "fig2", _NOISE, np.geomspace(0.5, 10.0, points), _epsilon_at(delta=FIG2_DELTA))


def fig3(out: Path, *, points: int = 40) -> dict[str, Any]:
    """Fig. 3: δ vs σ/C at ε = 1 (ε not stated in 004), p = q = 0.1, C = 1."""
    return _figure(out, "fig3", _NOISE, np.geomspace(0.3, 10.0, points), _delta_at(epsilon=FIG3_EPSILON))


def fig5(out: Path, *, points: int = 25) -> dict[str, Any]:
    """Fig. 5: ε vs q with pq = 1e-4 fixed, C = σ = 1, δ = 1e-5 (δ not stated in 004)."""
    return _figure(out, "fig5", _PQ, np.geomspace(1e-4, 1.0, points), _epsilon_at(delta=FIG5_DELTA))


def section6_rows() -> list[dict[str, Any]]:
    """Noise multiplier per analysis for both Section 6 scenarios (ε = 0.015, δ = 1e-6 per iteration, C = 1,
    the paper's closed forms), ours vs printed."""
    rows = []
    for k, (scenario, params) in enumerate(SECTION6_SCENARIOS):
        for analysis in rc.ANALYSES:
            with warnings.catch_warnings():  # the figure note says what z = 0 from Thm 4.1 means
                warnings.filterwarnings("ignore", message=re.escape(rc.PAPER_NO_NOISE_NOTE))
                z = rc.calibrate_noise_multiplier(analysis=analysis, **params, **SECTION6_TARGET)
            printed = SECTION6_PRINTED[analysis][k]
            rel = None if printed is None else z / printed - 1.0
            rows.append(
                {
                    "scenario": scenario,
                    **params,
                    "analysis": analysis,
                    "noise_multiplier_ampfl": z,
                    "noise_multiplier_printed": printed,
                    "relative_difference": rel,
                }
            )
    return rows


def section6(out: Path) -> dict[str, Any]:
    """The Section 6 table (CSV) and a bar chart (PNG): σ/C per analysis, ampfl vs 004's printed values."""
    from ampfl.reproduce._plot import new_figure, save

    rows = section6_rows()
    header = list(rows[0])
    csv = atomic_write_csv(
        out / "hasircioglu_sec6.csv", header, [["" if r[h] is None else r[h] for h in header] for r in rows]
    )
    fig, _ = new_figure(width=9.0, height=4.0)
    fig.clf()
    names = {
        "paper": f"Thm 4.1\n({NOT_SOUND})",
        "wcs": "WCS\n(Thm 5.2)",
        "ols": "OLS\n(Thm 5.1)",
        "cs": "CS (Cor. 5.3)\nlower bound",
    }
    for k, (scenario, params) in enumerate(SECTION6_SCENARIOS):
        ax = fig.add_subplot(1, 2, k + 1)
        sub = [r for r in rows if r["scenario"] == scenario]
        x = np.arange(len(sub))
        ours = [r["noise_multiplier_ampfl"] for r in sub]
        printed = [r["noise_multiplier_printed"] for r in sub]
        ax.bar(x - 0.2, ours, width=0.4, label="computed by ampfl")
        ax.bar(x + 0.2, [v or 0.0 for v in printed], width=0.4, label="printed in 004 Sec. 6")
        for xi, value in zip(x, ours, strict=True):
            ax.annotate(f"{value:.3g}", (xi - 0.2, value), ha="center", va="bottom", fontsize=6)
        for xi, value in zip(x, printed, strict=True):
            text = "not printed" if value is None else f"{value:.3g}"
            ax.annotate(text, (xi + 0.2, value or 0.0), ha="center", va="bottom", fontsize=6)
        ax.set_xticks(x, [names[r["analysis"]] for r in sub], fontsize=7)
        ax.set_yscale("symlog", linthresh=0.1)
        ax.set_ylim(0.0, 3.0 * max(max(ours), max(v or 0.0 for v in printed)))
        p, q, d = params["participation"], params["sampling_rate"], params["local_dataset_size"]
        ax.set_title(f"{scenario}: p = {p:g}, q = {q:g}, d = {d}", fontsize=8)
        ax.set_ylabel("noise multiplier σ/C, symlog scale")
    fig.legend(
        *ax.get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=7
    )
    fig.suptitle(
        "004 Sec. 6: σ/C for ε = 0.015, δ = 1e-6 per iteration, each analysis (ampfl vs printed)", fontsize=10
    )
    fig.tight_layout()
    png = save(
        fig,
        out / "hasircioglu_sec6.png",
        note="ε = 0.015 nats, δ = 1e-6 per iteration, C = 1 (004 Sec. 6). Thm 4.1 as printed is NOT a sound "
        "bound; σ = 0 means it claims no noise is needed. The printed Thm 4.1 σ (1.065 / 0.646) does not "
        "follow from Thm 4.1 and misses the target (docs/accounting.md). CS is not printed in 004.",
    )
    summary = {f"{r['analysis']}@{r['scenario'][:3]}": r["noise_multiplier_ampfl"] for r in rows}
    return {"files": [str(csv), str(png)], "noise_multiplier": summary}


FIGURES = {
    "hasircioglu-fig1": fig1,
    "hasircioglu-fig2": fig2,
    "hasircioglu-fig3": fig3,
    "hasircioglu-fig5": fig5,
    "hasircioglu-sec6": section6,
}
