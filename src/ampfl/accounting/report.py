"""One JSON shape for every ``account`` and ``calibrate`` report (privacy-spine issue, part 5).

Top level: ``epsilon``, ``delta``, ``analysis`` (the recommended, sound analysis), ``accountant``
(``"rdp"``, ``"pld"`` or ``"closed-form"``), ``noise_multiplier`` where noise exists, ``noise_std`` where a
clip norm makes the absolute std defined, and ``analyses``: ``{name: {epsilon, delta, sound, note}}`` for
every other analysis (published bounds "as printed" included, labelled ``sound: false`` when a check refutes
them). The top-level numbers are always the recommended analysis's. Report-specific keys may follow.
Built by the Python API's report functions (e.g. :mod:`ampfl.accounting.partition.reports`) and printed by
the CLI's ``account``/``calibrate`` commands.
"""

from __future__ import annotations

import math
from typing import Any

ACCOUNTANT_KINDS = ("rdp", "pld", "closed-form")


def analysis_entry(*, epsilon: float, delta: float, sound: bool, note: str = "") -> dict[str, Any]:
    """One entry of ``analyses``."""
    return {"epsilon": float(epsilon), "delta": float(delta), "sound": bool(sound), "note": str(note)}


def privacy_report(
    *,
    epsilon: float,
    delta: float,
    analysis: str,
    accountant: str,
    noise_multiplier: float | None = None,
    clip: float | None = None,
    analyses: dict[str, dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The common ``account``/``calibrate`` JSON object (keys in a fixed order, extras after)."""
    if accountant not in ACCOUNTANT_KINDS:
        raise ValueError(f"accountant must be one of {', '.join(ACCOUNTANT_KINDS)}. Found {accountant!r}.")
    out: dict[str, Any] = {
        "epsilon": float(epsilon),
        "delta": float(delta),
        "analysis": analysis,
        "accountant": accountant,
    }
    if noise_multiplier is not None:
        out["noise_multiplier"] = float(noise_multiplier)
        if clip is not None and math.isfinite(float(noise_multiplier)):
            out["noise_std"] = float(noise_multiplier) * float(clip)
    # "every other analysis": the recommended one is the top level, not repeated
    out["analyses"] = {name: entry for name, entry in (analyses or {}).items() if name != analysis}
    for key, value in extra.items():
        if key in out:
            raise ValueError(f"extra key {key!r} would overwrite a common key")
        out[key] = value
    return out
