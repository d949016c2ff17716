"""The two PNG plots of a run folder: accuracy over rounds (global and personal models) and ε over rounds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ampfl.io import atomic_save_figure

ACCURACY_PNG = "accuracy.png"
EPSILON_PNG = "epsilon.png"


def write_plots(
    out: Path, metrics: list[dict[str, Any]], *, title: str, metric: str = "accuracy"
) -> list[str]:
    """Accuracy (``metric``) over rounds and ε over rounds as PNG files in ``out``; returns the file names.

    The plots are released with the run: draw only released lines (``metrics.jsonl``, never diagnostics).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [m["round"] for m in metrics]
    fig, ax = plt.subplots(figsize=(6, 4))
    label = "global model" if metric == "accuracy" else metric.replace("_", " ")
    ax.plot(rounds, [m.get(metric, math.nan) for m in metrics], marker=".", label=label)
    for prefix, text in (
        ("personal_accuracy", "personal models, whole test set"),
        ("local_accuracy", "model each client uses, on its own distribution"),
    ):
        if metrics and f"{prefix}_mean" in metrics[0]:
            mean = [m[f"{prefix}_mean"] for m in metrics]
            std = [m.get(f"{prefix}_std", 0.0) for m in metrics]
            (line,) = ax.plot(rounds, mean, marker=".", label=f"{text} (mean ± std over clients)")
            ax.fill_between(
                rounds,
                [a - s for a, s in zip(mean, std, strict=True)],
                [a + s for a, s in zip(mean, std, strict=True)],
                color=line.get_color(),
                alpha=0.15,
            )
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.0, 1.0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    atomic_save_figure(fig, out / ACCURACY_PNG)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    finite = [(m["round"], m["epsilon"]) for m in metrics if math.isfinite(m["epsilon"])]
    if finite:
        ax.plot([r for r, _ in finite], [e for _, e in finite], marker=".")
        deltas = {m["delta"] for m in metrics}
        final = metrics[-1]["delta"]
        ax.set_ylabel(
            f"ε (δ = {final:.3g})" if len(deltas) == 1 else f"ε (δ grows with the rounds, final {final:.3g})"
        )
    else:
        ax.text(0.5, 0.5, "non-private run: ε = ∞", ha="center", va="center", transform=ax.transAxes)
        ax.set_ylabel("ε")
    ax.set_xlabel("round")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    atomic_save_figure(fig, out / EPSILON_PNG)
    plt.close(fig)
    return [ACCURACY_PNG, EPSILON_PNG]
