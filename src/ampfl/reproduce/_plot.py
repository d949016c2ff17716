"""Small plotting helpers for figure modules (matplotlib with the Agg backend, atomic PNG output)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ampfl.io import atomic_save_figure


def new_figure(*, width: float = 6.0, height: float = 4.0) -> tuple[Any, Any]:
    """A fresh (figure, axes) pair on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    return fig, ax


def save(fig: Any, path: Path, *, note: str | None = None) -> Path:
    """Save ``fig`` as PNG atomically, with ``note`` (e.g. the stated parameters) as a footer; close it."""
    import matplotlib.pyplot as plt

    if note:
        fig.text(0.01, -0.02, note, fontsize=7, ha="left", va="top", wrap=True)
    written = atomic_save_figure(fig, path)
    plt.close(fig)
    return written
