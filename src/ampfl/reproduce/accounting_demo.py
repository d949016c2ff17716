"""The accounting demo of ``make demo``: paper 004's Section 6 table and Fig. 1 curves.

:func:`run_accounting_demo` writes ``hasircioglu_sec6.{csv,png}`` and ``hasircioglu_fig1.{csv,png}`` into
``out`` and returns a summary dict (``files``, the Section 6 noise multipliers, the recommended analysis).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_accounting_demo(out: Path) -> dict[str, Any]:
    """Write the Section 6 table (σ/C per analysis, both scenarios) and the Fig. 1 curves into ``out``."""
    from ampfl.accounting.random_checkin import RECOMMENDED_ANALYSIS
    from ampfl.reproduce.hasircioglu import fig1, section6

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = section6(out)
    curves = fig1(out)
    return {
        "files": [*table["files"], *curves["files"]],
        "noise_multiplier": table["noise_multiplier"],
        "recommended_analysis": RECOMMENDED_ANALYSIS,
    }


FIGURES = {"accounting-demo": run_accounting_demo}
