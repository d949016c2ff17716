"""Small plotting helpers for figure modules (matplotlib with the Agg backend, atomic PNG output).

Conventions of every reproduced figure: a title saying what is shown, axes labelled with their units (ε in
nats, σ as the absolute noise std with the clipping norm C stated), log scales where values span decades, δ
axes capped at 1, legends placed off the data (:func:`legend_below`), and a footer note stating the
parameters the paper omitted and ampfl chose. Curves of a published bound that fails a check
(docs/accounting.md, summary table) carry :data:`NOT_SOUND` in their label.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ampfl.io import atomic_save_figure

#: Label suffix of a published bound that fails a numerical check (see docs/accounting.md).
NOT_SOUND = "as printed, not sound"


def new_figure(*, width: float = 6.0, height: float = 4.0) -> tuple[Any, Any]:
    """A fresh (figure, axes) pair on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    return fig, ax


def legend_below(ax: Any, *, ncol: int = 2, fontsize: float = 7.0) -> Any:
    """Put the legend of ``ax`` under its x-axis label, so it never covers a curve."""
    return ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=ncol,
        fontsize=fontsize,
        frameon=False,
    )


def cap_probability_axis(ax: Any, *, bottom: float | None = None) -> None:
    """Cap a δ (probability) axis at 1: δ > 1 is meaningless; optionally fix the bottom too."""
    low, _ = ax.get_ylim()
    ax.set_ylim(bottom=low if bottom is None else bottom, top=1.0)


def scale_note(*, quick: bool, medium: bool, seed: int) -> str:
    """The end of a training figure's note: which scale ran (none said: the full one) and its seed."""
    scale = " QUICK RUN (--quick)." if quick else " MEDIUM RUN (--medium)." if medium else ""
    return f"{scale} Seed {seed}."


def scale_fields(*, quick: bool, medium: bool, seed: int) -> dict[str, Any]:
    """The keys by which a training figure's result says which scale ran and with which seed."""
    return {"quick": quick, "medium": medium, "seed": seed}


def plot_accuracy(ax: Any, lines: list[dict[str, Any]], **style: Any) -> Any:
    """Draw a run's accuracy against the round from its metrics lines; ``style`` goes to ``ax.plot``."""
    return ax.plot([m["round"] for m in lines], [m["accuracy"] for m in lines], **style)[0]


def save(fig: Any, path: Path, *, note: str | None = None) -> Path:
    """Save ``fig`` as PNG atomically, with ``note`` (e.g. the stated parameters) as a footer; close it.

    The footer goes under everything already drawn (legends placed below the axes included).
    """
    import matplotlib.pyplot as plt

    if note:
        fig.canvas.draw()
        box = fig.get_tightbbox(fig.canvas.get_renderer())
        y = min(0.0, box.y0 / fig.get_figheight()) - 0.02
        fig.text(0.01, y, note, fontsize=7, ha="left", va="top", wrap=True)
    written = atomic_save_figure(fig, path)
    plt.close(fig)
    return written


def save_image_grid(path: Path, originals: Any, rows: dict[str, Any], *, note: str | None = None) -> Path:
    """PNG grid: the original images on the first row, one row of reconstructions per method.

    Each batch is ``[n, channels, height, width]`` with values in [0, 1] (NumPy arrays or CPU tensors).
    """
    import textwrap

    import numpy as np

    def pixels(image: Any) -> Any:
        detach = getattr(image, "detach", None)
        return np.asarray(detach().cpu().numpy() if detach is not None else image)

    labels = ["original", *rows]
    images = [originals, *rows.values()]
    n = originals.shape[0]
    fig, _ = new_figure(width=1.1 * n + 1.2, height=1.15 * len(labels) + 0.3)
    fig.clf()
    axes = fig.subplots(len(labels), n, squeeze=False)
    for r, (label, batch) in enumerate(zip(labels, images, strict=True)):
        for col in range(n):
            ax = axes[r][col]
            img = pixels(batch[col])
            ax.imshow(
                img[0] if img.shape[0] == 1 else img.transpose(1, 2, 0), cmap="gray", vmin=0.0, vmax=1.0
            )
            ax.set_xticks([])
            ax.set_yticks([])
            if col == 0:
                ax.set_ylabel(textwrap.fill(label, 18), fontsize=6)
    return save(fig, path, note=note)
