"""The demo's privacy–utility frontier: accuracy against the record-level ε, amplified and not.

:func:`ampfl.fl.demo.amplification.run_demo` trains each private algorithm of the demo at every ε of a grid,
calibrated as its table runs are (same helper, accountant, rounds, seed and hyper-parameters at every point),
under both accountings. This module holds what is computed from those points: the savings of amplification
(pure functions, no torch), the figure and the console table.

Savings, per algorithm (both computed from the measured points only, never extrapolated past the grid):

- ``noise_saved_at_equal_epsilon``: at each grid ε, the **ratio** z(no-amplification) / z(amplified) of the
  calibrated noise multipliers (≥ 1 when amplification helps; 1 = no saving).
- ``epsilon_saved_at_equal_accuracy``: the horizontal gap between the two accuracy curves. At each accuracy
  the no-amplification curve reaches at a grid ε, the ε each curve needs for it, and their **ratio**
  ε(no-amplification) / ε(amplified). A curve's ε for an accuracy is read by
  :func:`epsilon_at_accuracy` (first crossing, linear interpolation in log ε); ``null`` where the amplified
  curve never reaches that accuracy inside the grid or already reaches it at the grid's smallest ε (the curves
  do not overlap there), and at the no-amplification curve's own first point (censored in the same way).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ampfl.io import atomic_save_figure

#: The frontier's ε grid (record level, δ = the demo's): doubling from 0.5, past the issue's 32 up to where
#: MS-PAFL's public model learns (its per-client noise needs ε in the thousands: README).
FRONTIER_EPSILONS: tuple[float, ...] = tuple(2.0**k for k in range(-1, 14))  # 0.5, 1, 2, ..., 8192
#: The grid of ``--quick`` (tests): the smallest, the table's and a large ε.
QUICK_EPSILONS: tuple[float, ...] = (0.5, 2.0, 8.0)
AMPLIFIED, UNAMPLIFIED = "amplified", "no-amplification"
FRONTIER_KEYS = ("algorithm", "accounting", "epsilon", "noise_multiplier", "final_accuracy", "local_accuracy")


def check_epsilons(epsilons: Sequence[float]) -> tuple[float, ...]:
    """The grid as a tuple; raises ValueError unless it is finite, positive and strictly increasing."""
    grid = tuple(float(e) for e in epsilons)
    if not grid or any(not (math.isfinite(e) and e > 0) for e in grid):
        raise ValueError(f"epsilons must be finite numbers > 0 (at least one). Found {list(epsilons)}.")
    if any(b <= a for a, b in itertools.pairwise(grid)):
        raise ValueError(f"epsilons must be strictly increasing. Found {list(grid)}.")
    return grid


def epsilon_at_accuracy(
    epsilons: Sequence[float], accuracies: Sequence[float], accuracy: float
) -> float | None:
    """The smallest ε at which a measured curve reaches ``accuracy`` (first crossing, interpolated in log ε).

    The curve is the points (ε_i, a_i) joined by straight lines in (log ε, a). Provided a_1 < ``accuracy``,
    with j the first index where a_j ≥ ``accuracy`` (so j ≥ 2 and a_{j-1} < ``accuracy``):
    ε = exp(log ε_{j-1} + (accuracy − a_{j-1}) / (a_j − a_{j-1}) · (log ε_j − log ε_{j-1})).

    Args:
        epsilons: the grid, strictly increasing, > 0.
        accuracies: the curve's accuracy at each grid ε (any shape: the first crossing is taken).
        accuracy: the accuracy to reach.

    Returns:
        The ε, or None when the curve never reaches ``accuracy`` on the grid, or already reaches it at the
        grid's smallest ε (a_1 ≥ ``accuracy``: the first crossing lies at or below ε_1, where is unknown).
    """
    grid = check_epsilons(epsilons)
    if len(accuracies) != len(grid):
        raise ValueError(
            f"accuracies must have one value per epsilon ({len(grid)}). Found {len(accuracies)}."
        )
    if accuracies[0] >= accuracy:
        return None  # reached at or below the grid's smallest ε: where exactly is unknown
    for j, a_j in enumerate(accuracies):
        if a_j == accuracy:
            return grid[j]  # exactly (no exp(log) round-off)
        if a_j > accuracy:
            a_prev, lo, hi = accuracies[j - 1], math.log(grid[j - 1]), math.log(grid[j])
            return math.exp(lo + (accuracy - a_prev) / (a_j - a_prev) * (hi - lo))
    return None


def epsilon_saved_at_equal_accuracy(
    epsilons: Sequence[float], amplified: Sequence[float], unamplified: Sequence[float]
) -> list[dict[str, float | None]]:
    """The horizontal gap between two accuracy curves on the same ε grid, at each no-amplification point.

    For grid point i, accuracy = ``unamplified[i]``; ``epsilon_no_amplification`` and
    ``epsilon_amplified`` are each curve's :func:`epsilon_at_accuracy` of it (the no-amplification one is
    ε_i wherever that curve is rising to ε_i, None at i = 1; on a noisy plateau it is the earlier ε where the
    curve first got there), and ``ratio`` = ε(no-amplification) / ε(amplified): the factor of ε
    amplification saves (> 1) at equal accuracy. Fields are None where a curve's ε is undefined.
    """
    rows: list[dict[str, float | None]] = []
    for epsilon, accuracy in zip(epsilons, unamplified, strict=True):
        e_no = epsilon_at_accuracy(epsilons, unamplified, accuracy)
        e_amp = epsilon_at_accuracy(epsilons, amplified, accuracy)
        ratio = None if e_no is None or e_amp is None else e_no / e_amp
        rows.append(
            {
                "epsilon": epsilon,
                "accuracy": accuracy,
                "epsilon_no_amplification": e_no,
                "epsilon_amplified": e_amp,
                "ratio": ratio,
            }
        )
    return rows


def noise_saved_at_equal_epsilon(
    epsilons: Sequence[float], amplified: Sequence[float], unamplified: Sequence[float]
) -> list[dict[str, float]]:
    """At each grid ε: both calibrated noise multipliers and their ``ratio`` = z(no-amplification) /
    z(amplified) (the factor of noise amplification saves at equal ε)."""
    return [
        {
            "epsilon": epsilon,
            "noise_multiplier_amplified": z_amp,
            "noise_multiplier_no_amplification": z_no,
            "ratio": z_no / z_amp,
        }
        for epsilon, z_amp, z_no in zip(epsilons, amplified, unamplified, strict=True)
    ]


def curve(frontier: Sequence[dict[str, Any]], algorithm: str, accounting: str) -> list[dict[str, Any]]:
    """The frontier points of one (algorithm, accounting), in increasing ε."""
    points = [p for p in frontier if p["algorithm"] == algorithm and p["accounting"] == accounting]
    return sorted(points, key=lambda p: float(p["epsilon"]))


def savings(frontier: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Per algorithm with both accountings on the same grid: ``epsilon_saved_at_equal_accuracy`` and
    ``noise_saved_at_equal_epsilon`` (see the module docstring)."""
    result: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for algorithm in dict.fromkeys(p["algorithm"] for p in frontier):
        amp, no = curve(frontier, algorithm, AMPLIFIED), curve(frontier, algorithm, UNAMPLIFIED)
        grid = [p["epsilon"] for p in amp]
        if not amp or grid != [p["epsilon"] for p in no]:
            continue
        result[algorithm] = {
            "epsilon_saved_at_equal_accuracy": list(
                epsilon_saved_at_equal_accuracy(
                    grid, [p["final_accuracy"] for p in amp], [p["final_accuracy"] for p in no]
                )
            ),
            "noise_saved_at_equal_epsilon": list(
                noise_saved_at_equal_epsilon(
                    grid, [p["noise_multiplier"] for p in amp], [p["noise_multiplier"] for p in no]
                )
            ),
        }
    return result


def plot_frontier(path: Path, result: dict[str, Any]) -> Path:
    """Accuracy (left) and calibrated noise multiplier (right) against ε, log x: one colour per algorithm,
    solid = amplified, dashed = no-amplification; FedAvg, local-only and chance as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frontier = result["frontier"]
    fig, (ax, az) = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [3, 2]})
    colours = {name: f"C{i}" for i, name in enumerate(dict.fromkeys(p["algorithm"] for p in frontier))}
    for name, colour in colours.items():
        for accounting, style in ((AMPLIFIED, "-"), (UNAMPLIFIED, "--")):
            points = curve(frontier, name, accounting)
            if not points:
                continue
            xs = [p["epsilon"] for p in points]
            label = f"{name}, {accounting}"
            ax.plot(
                xs, [p["final_accuracy"] for p in points], style, marker="o", ms=3.5, c=colour, label=label
            )
            az.plot(
                xs, [p["noise_multiplier"] for p in points], style, marker="o", ms=3.5, c=colour, label=label
            )
    for r, style, colour in (("fedavg", ":", "black"), ("local_only", "-.", "grey")):
        for row in result["results"]:
            if row["algorithm"] == r:
                value = row["final_accuracy"]
                ax.axhline(value, ls=style, c=colour, lw=1.2, label=f"{r} (no privacy): {value:.2f}")
    ax.axhline(0.1, c="lightgrey", lw=0.8, label="chance (10 classes)")
    ax.axvline(result["target_epsilon"], c="grey", lw=0.8, ls=":")
    ax.text(result["target_epsilon"] * 1.08, 0.02, "the table's ε", fontsize=7, color="grey")
    grid = sorted({p["epsilon"] for p in frontier})
    for axis, every in ((ax, 1), (az, 1 if len(grid) <= 8 else 2)):  # the narrow panel labels every other ε
        axis.set_xscale("log", base=2)
        axis.set_xlabel(f"record-level ε (δ = {result['target_delta']:g})")
        axis.grid(alpha=0.3, which="both")
        axis.set_xticks(grid, [f"{e:g}" if i % every == 0 else "" for i, e in enumerate(grid)], fontsize=7)
    ax.set_ylabel("test accuracy (released model)")
    ax.set_ylim(0.0, 1.0)
    ax.legend(loc="center right", bbox_to_anchor=(1.0, 0.55), fontsize=7, handlelength=3.5)
    az.set_yscale("log")
    az.set_ylabel("calibrated noise multiplier z")
    fig.suptitle(
        f"privacy–utility frontier: digits, {result['num_clients']} clients, {result['partition']}, "
        f"{result['rounds']} rounds; solid = amplified accounting, dashed = no amplification",
        fontsize=9,
    )
    fig.tight_layout()
    written = atomic_save_figure(fig, path)
    plt.close(fig)
    return written


def render_frontier(result: dict[str, Any], show: Callable[..., None]) -> None:
    """Print the frontier (accuracy and z per grid ε, one column per curve) and each algorithm's savings."""
    from rich.table import Table

    frontier = result["frontier"]
    grid = sorted({p["epsilon"] for p in frontier})
    names = list(dict.fromkeys(p["algorithm"] for p in frontier))
    curves = [(name, accounting) for name in names for accounting in (AMPLIFIED, UNAMPLIFIED)]
    points = {key: {p["epsilon"]: p for p in curve(frontier, *key)} for key in curves}
    table = Table(title="privacy–utility frontier: test accuracy (noise multiplier z) at each record-level ε")
    table.add_column("ε", justify="right", no_wrap=True)
    for name, accounting in curves:
        table.add_column(f"{name}\n{accounting}", justify="right", no_wrap=True)
    for epsilon in grid:
        cells = [
            f"{points[key][epsilon]['final_accuracy']:.3f} ({points[key][epsilon]['noise_multiplier']:.3g})"
            if epsilon in points[key]
            else "-"
            for key in curves
        ]
        table.add_row(f"{epsilon:g}", *cells)
    show(table)
    for name, saved in result["savings"].items():
        noise = saved["noise_saved_at_equal_epsilon"]
        gaps = [r for r in saved["epsilon_saved_at_equal_accuracy"] if r["ratio"] is not None]
        first, last = noise[0], noise[-1]
        line = (
            f"{name}: noise saved (z no-amplification / amplified) {first['ratio']:.2f}× at ε = "
            f"{first['epsilon']:g} … {last['ratio']:.2f}× at ε = {last['epsilon']:g}; "
            "ε saved at equal accuracy: "
        )
        for r in gaps:
            if r["epsilon"] == result["target_epsilon"]:
                line += (
                    f"{r['ratio']:.2f}× at the table's accuracy {r['accuracy']:.3f} (ε "
                    f"{r['epsilon_no_amplification']:.3g} → {r['epsilon_amplified']:.3g}), "
                )
        if gaps:
            low, high = min(r["ratio"] for r in gaps), max(r["ratio"] for r in gaps)
            accuracies = f"{gaps[0]['accuracy']:.2f}–{gaps[-1]['accuracy']:.2f}"
            line += f"{low:.2f}–{high:.2f}× where the curves overlap (accuracies {accuracies})"
        else:
            line += "none (the curves do not overlap)"
        show(line, soft_wrap=True)
