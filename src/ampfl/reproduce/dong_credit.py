"""002's split credit against the noise level: how much less noise the model split needs, where.

The credit of a model split with d blocks is 1 − z_split / z_plain: the noise multiplier the recommended sound
analysis calibrates for ``steps`` Poisson-subsampled split steps (:func:`ampfl.accounting.partition.reports.
calibrate_split`, ``subsampled-split-pld``: 002 Thm 3.4's mixture through the PLD accountant), over the plain
subsampled Gaussian's at the same (ε, δ). The split here is full (every coordinate in one of the d secret
blocks); a split with a shared, non-split part (as in ``dong-table1-training``) earns less. Sweeping the
target ε moves z_plain = σ/C; two operating points: 002 Table 1's (q = 0.25, 400 steps: the setting
``dong-table1`` finds for 002's σ = 3.31) and ampfl's medium training run (q = 0.005, 400 steps).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ampfl.accounting.partition.reports import calibrate_split
from ampfl.io import atomic_write_csv

DELTA = 1e-5
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
SUBMODELS = (3, 8)
#: (label, sampling rate q, steps): 002 Table 1's setting and ampfl's medium training run.
REGIMES = (
    ("002 Table 1 (q = 0.25, 400 steps)", 0.25, 400),
    ("ampfl medium (q = 0.005, 400 steps)", 0.005, 400),
)


def credit_rows(
    epsilons: tuple[float, ...] = EPSILONS, submodels: tuple[int, ...] = SUBMODELS
) -> list[dict[str, Any]]:
    """One row per (regime, d, target ε): z_plain, z_split and the credit 1 − z_split / z_plain."""
    rows = []
    for label, rate, steps in REGIMES:
        for d in submodels:
            for epsilon in epsilons:
                report = calibrate_split(
                    target_epsilon=epsilon,
                    delta=DELTA,
                    num_submodels=d,
                    steps=steps,
                    accountant="pld",
                    sampling_rate=rate,
                )
                split, plain = report["noise_multiplier"], report["analyses"]["no-split"]["noise_multiplier"]
                rows.append(
                    {
                        "regime": label,
                        "sampling_rate": rate,
                        "steps": steps,
                        "submodels": d,
                        "target_epsilon": epsilon,
                        "noise_multiplier_plain": plain,
                        "noise_multiplier_split": split,
                        "analysis": report["analysis"],
                        "credit": 1.0 - split / plain,
                    }
                )
    return rows


def credit(out: Path) -> dict[str, Any]:
    """The credit against z_plain = σ/C, per regime and d (CSV and figure; about two minutes)."""
    from ampfl.reproduce._plot import legend_below, new_figure, save

    rows = credit_rows()
    header = list(rows[0])
    csv = atomic_write_csv(out / "dong_credit.csv", header, [[row[k] for k in header] for row in rows])
    fig, ax = new_figure()
    for label, _, _ in REGIMES:
        for d in SUBMODELS:
            line = [r for r in rows if r["regime"] == label and r["submodels"] == d]
            ax.plot(
                [r["noise_multiplier_plain"] for r in line],
                [100.0 * r["credit"] for r in line],
                marker="o",
                label=f"d = {d}, {label}",
            )
    ax.set_xscale("log")
    ax.set_xlabel("noise multiplier of plain DP-SGD z = σ/C at the same (ε, δ)")
    ax.set_ylabel("split credit 1 − z_split / z_plain (%)")
    ax.set_title("002: the model split's noise credit against the noise level", fontsize=9)
    ax.grid(alpha=0.3)
    legend_below(ax, ncol=1, fontsize=7)
    note = (
        f"Sound analyses only: subsampled-split-pld vs the plain subsampled Gaussian (PLD), δ = {DELTA:g}, "
        f"target ε ∈ {list(EPSILONS)}; each point is one target ε."
    )
    png = save(fig, out / "dong_credit.png", note=note)
    return {"files": [str(png), str(csv)], "rows": rows}


FIGURES = {"dong-credit": credit}
