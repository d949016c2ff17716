"""Several seeds of one training reproduction (``ampfl reproduce NAME --medium [--seeds N]``).

:func:`run_seeds` runs a figure function once per seed ``0 .. N-1`` into ``OUT/seed<s>`` (finished runs of
the same configuration are reused, so an interrupted command resumes), times each seed (wall, CPU of this
process, the load average before and after) and :func:`aggregate` turns the seeds' ``results`` rows into one
row per method: mean, sample standard deviation (n − 1; 0 for one seed) and the per-seed values of every
metric in :data:`METRICS`. A row's identity is its :data:`KEY_FIELDS` (``method``, and ``dataset`` /
``target_epsilon`` where a figure has them); a metric that is a dict (GDPFed's per-group ε and z) is
aggregated per key. Values every seed agrees on (a calibrated noise multiplier, ε = ∞ of a non-private
run) come out with standard deviation 0 and the value itself as the mean, never NaN.

A figure that makes claims comparing two of its rows lists them in its summary as ``"paired"``: dicts with
``claim``, ``minuend`` and ``subtrahend`` (two ``method`` labels); :func:`run_seeds` then adds, per claim,
:func:`paired_interval` of the final accuracies, minuend minus subtrahend, paired by seed.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Fields that identify a results row across seeds.
KEY_FIELDS = ("dataset", "method", "target_epsilon")
#: Fields aggregated over seeds when a row has them (numbers, or dicts of numbers).
METRICS = (
    "final_accuracy",
    "best_accuracy",
    "personal_accuracy_mean",
    "global_accuracy",
    "psnr",
    "ssim",
    "epsilon",
    "noise_multiplier",
    "noise_std_over_clip",
    "learning_rate",
)
#: Fields copied from the first seed's row unchanged (the paper's number and where it comes from).
CARRIED = ("published", "published_metric", "published_source")
MAX_SEEDS = 20


def check_seeds(seeds: int) -> int:
    """``seeds`` if it is an integer in [1, MAX_SEEDS]; else ValueError naming ``--seeds``."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise ValueError(f"--seeds must be an integer in [1, {MAX_SEEDS}]. Found {seeds!r}.")
    return seeds


def mean_std(values: list[float]) -> dict[str, Any]:
    """``{"mean", "std", "values"}`` of ``values``: the sample standard deviation (n − 1), 0 for one value
    or when all values are equal (also for infinite ones)."""
    if not values:
        raise ValueError("mean_std needs at least one value.")
    floats = [float(v) for v in values]
    if all(v == floats[0] for v in floats):
        return {"mean": floats[0], "std": 0.0, "values": floats}
    mean = math.fsum(floats) / len(floats)
    var = math.fsum((v - mean) ** 2 for v in floats) / (len(floats) - 1)
    return {"mean": mean, "std": math.sqrt(var), "values": floats}


def paired_interval(
    minuend: list[float], subtrahend: list[float], *, confidence: float = 0.95
) -> dict[str, Any]:
    """Mean of the per-seed differences ``minuend[s] - subtrahend[s]`` and its two-sided Student-t interval.

    The interval is mean ± t_{(1+confidence)/2, n-1} · std / √n over the n seeds (std: n − 1); it is
    (−∞, ∞) for one seed and the mean itself when every difference is equal. Returns ``{"mean", "low",
    "high", "confidence", "seeds", "differences"}``.

    Raises:
        ValueError: the lists are empty or of different lengths, or ``confidence`` is outside (0, 1).
    """
    if not minuend or len(minuend) != len(subtrahend):
        raise ValueError(
            f"paired_interval needs two equally long, non-empty lists. Found {len(minuend)} and "
            f"{len(subtrahend)} values."
        )
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1). Found {confidence}.")
    differences = [float(a) - float(b) for a, b in zip(minuend, subtrahend, strict=True)]
    stat = mean_std(differences)
    n = len(differences)
    if n == 1:
        low, high = -math.inf, math.inf
    else:
        from scipy import stats

        half = float(stats.t.ppf((1.0 + confidence) / 2.0, n - 1)) * stat["std"] / math.sqrt(n)
        low, high = stat["mean"] - half, stat["mean"] + half
    return {
        "mean": stat["mean"],
        "low": low,
        "high": high,
        "confidence": confidence,
        "seeds": n,
        "differences": differences,
    }


def paired_claims(results: list[dict[str, Any]], claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`paired_interval` of the final accuracy for each claim (module docstring) over ``results``
    (the rows :func:`aggregate` returns, whose per-seed values are in seed order). A claim with a
    ``dataset`` key compares that dataset's rows (figures over several datasets repeat the method labels)."""
    by_dataset = {(row.get("dataset"), row["method"]): row for row in results}
    by_method = {row["method"]: row for row in results}

    def row(claim: dict[str, Any], key: str) -> dict[str, Any]:
        found = by_dataset[(claim["dataset"], claim[key])] if "dataset" in claim else by_method[claim[key]]
        return dict(found["final_accuracy"])

    out = []
    for claim in claims:
        a, b = row(claim, "minuend"), row(claim, "subtrahend")
        out.append({**claim, **paired_interval(a["values"], b["values"])})
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _aggregate_field(values: list[Any]) -> Any:
    """mean_std of numbers, per key for dicts of numbers; None when a seed lacks the value."""
    if any(v is None for v in values):
        return None
    if all(_is_number(v) for v in values):
        return mean_std(values)
    if all(isinstance(v, dict) for v in values):
        keys = list(values[0])
        if all(list(v) == keys for v in values) and all(_is_number(v[k]) for v in values for k in keys):
            return {k: mean_std([v[k] for v in values]) for k in keys}
    return None


def row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """The identity of a results row across seeds."""
    return tuple(row.get(field) for field in KEY_FIELDS)


def aggregate(per_seed: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per method over the seeds' ``results`` lists (module docstring), in first-seen order.

    Raises:
        ValueError: the seeds do not produce the same rows.
    """
    if not per_seed:
        raise ValueError("aggregate needs the results of at least one seed.")
    keys = [row_key(row) for row in per_seed[0]]
    for rows in per_seed[1:]:
        if sorted(map(repr, (row_key(r) for r in rows))) != sorted(map(repr, keys)):
            raise ValueError("The seeds of a reproduction produced different rows.")
    out = []
    for key in keys:
        rows = [next(r for r in seed_rows if row_key(r) == key) for seed_rows in per_seed]
        merged: dict[str, Any] = {
            field: value for field, value in zip(KEY_FIELDS, key, strict=True) if value is not None
        }
        merged["seeds"] = len(rows)
        for field in METRICS:
            if field in rows[0]:
                merged[field] = _aggregate_field([r.get(field) for r in rows])
        for field in CARRIED:
            if field in rows[0]:
                merged[field] = rows[0][field]
        out.append(merged)
    return out


def run_seeds(
    function: Callable[..., dict[str, Any]], out: Path, seeds: int, options: dict[str, Any]
) -> dict[str, Any]:
    """Run ``function(out / f"seed{s}", seed=s, **options)`` for ``s`` in ``0 .. seeds-1``; aggregate."""
    check_seeds(seeds)
    summaries: list[dict[str, Any]] = []
    timing: list[dict[str, Any]] = []
    files: list[str] = []
    walls: list[float] = []
    cpus: list[float] = []
    for seed in range(seeds):
        load_before = os.getloadavg()[0]
        wall, cpu = time.monotonic(), time.process_time()
        summary = function(out / f"seed{seed}", seed=seed, **options)
        walls.append(time.monotonic() - wall)
        cpus.append(time.process_time() - cpu)
        timing.append(
            {
                "seed": seed,
                "wall_seconds": walls[-1],
                "cpu_seconds": cpus[-1],
                "load_average_1min": [load_before, os.getloadavg()[0]],
            }
        )
        summaries.append(summary)
        files.extend(summary.get("files", []))
    first = summaries[0]
    result = {
        key: value
        for key, value in first.items()
        if key not in {"files", "results", "runs", "seconds", "paired"}
    }
    result.update(
        {
            "files": files,
            "seeds": list(range(seeds)),
            "results": aggregate([s["results"] for s in summaries]),
            "per_seed_results": [s["results"] for s in summaries],
            "timing": timing,
            "wall_seconds": math.fsum(walls),
            "cpu_seconds": math.fsum(cpus),
        }
    )
    if first.get("paired"):
        result["paired"] = paired_claims(result["results"], first["paired"])
    return result
