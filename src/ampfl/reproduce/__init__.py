"""Paper figures and tables, one module per paper (figure functions are registered by name).

Each module (names not starting with ``_``) defines ``FIGURES: dict[str, Callable[[Path], dict]]``.
A figure function writes its PNG and CSV files into the given folder and returns a JSON-able dict with at
least ``files`` (the paths written). Modules keep module-level imports light (stdlib, numpy, ampfl
accounting); matplotlib and torch are imported inside the functions (see :mod:`ampfl.reproduce._plot`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

FigureFunction = Callable[[Path], dict[str, Any]]


def _registry() -> dict[str, FigureFunction]:
    figures: dict[str, FigureFunction] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, fn in getattr(module, "FIGURES", {}).items():
            if name in figures:
                raise RuntimeError(f"figure {name!r} is registered twice")
            figures[name] = fn
    return figures


def figure_names() -> list[str]:
    """Names accepted by ``ampfl reproduce``."""
    return sorted(_registry())


def run_figure(name: str, out: Path) -> dict[str, Any]:
    """Produce figure ``name`` into folder ``out``; returns the figure's summary dict."""
    figures = _registry()
    if name not in figures:
        raise ValueError(f"NAME must be one of {', '.join(sorted(figures))}. Found {name!r}.")
    out.mkdir(parents=True, exist_ok=True)
    result = dict(figures[name](out))
    result.setdefault("figure", name)
    return result
