"""Markdown tables of multi-seed reproductions: ``python -m ampfl.reproduce._report FILE.json ...``.

Each FILE is the ``--json`` output of ``ampfl reproduce NAME --medium`` (or ``--seeds N``); one table per
file, one line per row: mean ± sample std of the accuracy (or PSNR / SSIM for the attack) over the seeds,
the noise multiplier z and ε (per group where a method has groups), the learning rate each seed chose, and
the paper's number (or ``—`` when the paper prints none; the source says why), then, where the figure
makes claims comparing two rows, one line per claim: the mean difference paired by seed, its t-interval
and the per-seed differences (:func:`ampfl.reproduce._seeds.paired_interval`). docs/reproductions.md is
written from this output, so no number there is copied by hand.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any


def _num(value: float, digits: int = 3) -> str:
    if math.isinf(value):
        return "∞"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.{digits}f}"


def cell(stat: Any, digits: int = 3) -> str:
    """``mean ± std`` of a :func:`ampfl.reproduce._seeds.mean_std` dict (per key for dicts of them)."""
    if stat is None:
        return "—"
    if "mean" not in stat:  # per group
        return " / ".join(cell(v, digits) for v in stat.values())
    if stat["std"] == 0.0:
        return _num(stat["mean"], digits)
    return f"{_num(stat['mean'], digits)} ± {_num(stat['std'], digits)}"


def as_seeds(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` itself when it is a multi-seed result; a single run's summary (``ampfl reproduce NAME
    --json`` without ``--seeds``) as a one-seed result (its rows aggregated over that one seed, its claims
    with an interval of (−∞, ∞))."""
    if all("seeds" in row for row in result["results"]):  # rows aggregated over seeds already
        return result
    from ampfl.reproduce._seeds import aggregate, paired_claims

    rows = aggregate([result["results"]])
    claims = paired_claims(rows, result["paired"]) if result.get("paired") else []
    return {**result, "results": rows, "paired": claims}


def table(result: dict[str, Any]) -> str:
    """One markdown table of a multi-seed result (or of one run, :func:`as_seeds`)."""
    result = as_seeds(result)
    rows = result["results"]
    attack = any("psnr" in r for r in rows)
    personal = any(r.get("personal_accuracy_mean") for r in rows)
    head = ["method", "seeds"]
    head += ["PSNR (dB)", "SSIM", "model accuracy"] if attack else ["accuracy (mean ± std)"]
    head += ["personal models' accuracy"] if personal else []
    head += ["z", "ε", "η per seed", "published"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        name = r["method"]
        if "dataset" in r:
            name = f"{r['dataset']}: {name}"
        if "target_epsilon" in r:
            name = f"{name} (target ε = {r['target_epsilon']:g})"
        metrics = (
            [cell(r.get("psnr"), 2), cell(r.get("ssim")), cell(r.get("final_accuracy"))]
            if attack
            else [f"**{cell(r.get('final_accuracy'))}**"]
        ) + ([cell(r.get("personal_accuracy_mean"))] if personal else [])
        lr = r.get("learning_rate")
        etas = ", ".join(f"{v:g}" for v in lr["values"]) if lr else "—"
        published = r.get("published")
        lines.append(
            "| "
            + " | ".join(
                [
                    name,
                    str(r["seeds"]),
                    *metrics,
                    cell(r.get("noise_multiplier")),
                    cell(r.get("epsilon")),
                    etas,
                    "—" if published is None else f"{published:.4f}",
                ]
            )
            + " |"
        )
    sources = sorted({r["published_source"] for r in rows if r.get("published_source")})
    walls = [t["wall_seconds"] for t in result.get("timing", [])]
    cpus = [t["cpu_seconds"] for t in result.get("timing", [])]
    loads = [x for t in result.get("timing", []) for x in t["load_average_1min"]]
    foot = [f"Published: {s}." for s in sources]
    if walls:
        foot.append(
            f"Measured: {len(walls)} seeds, {sum(walls) / 60:.1f} min wall, "
            f"{sum(cpus) / 60:.1f} min CPU in all "
            f"(per seed {min(walls) / 60:.1f}–{max(walls) / 60:.1f} min wall), 1-min load average "
            f"{min(loads):.1f}–{max(loads):.1f} on 2 cores."
        )
    return "\n".join(lines) + "\n\n" + "\n".join(foot) + "\n" + paired_table(result.get("paired", []))


def paired_table(claims: list[dict[str, Any]]) -> str:
    """The claims paired by seed as a markdown table (empty string when there are none)."""
    if not claims:
        return ""
    level = {f"{c['confidence']:.0%}" for c in claims}
    lines = [
        "",
        f"| claim (minuend − subtrahend, paired by seed) | mean difference | {' / '.join(sorted(level))} "
        "t-interval | per seed |",
        "|---|---|---|---|",
    ]
    for c in claims:
        interval = f"[{c['low']:+.4f}, {c['high']:+.4f}]" if math.isfinite(c["low"]) else "—"
        per_seed = ", ".join(f"{d:+.4f}" for d in c["differences"])
        lines.append(
            f"| {c['claim']}: {c['minuend']} − {c['subtrahend']} | {c['mean']:+.4f} | {interval} | "
            f"{per_seed} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    for path in argv:
        result = json.loads(Path(path).read_text())
        print(f"### {result.get('figure', path)} ({result.get('scale', '?')})\n")
        print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
