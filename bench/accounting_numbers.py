"""Every ``account``/``calibrate`` example of the README and docs, run with ``--json``: a snapshot of the
numbers, and a before/after table against an earlier snapshot (a refactor of the accounting core keeps
every number or documents the change).

    python bench/accounting_numbers.py --out before.json              # on the old tree
    python bench/accounting_numbers.py --out after.json --compare before.json --markdown table.md

Run it against another checkout with ``PYTHONPATH=/path/to/checkout/src``. Each command's numbers are the
scalars of its JSON report (``epsilon``, ``delta``, ``noise_multiplier`` and those of every analysis),
flattened to dotted keys; the table lists, per command, the keys that changed and the largest relative change.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

#: (name, arguments after ``ampfl``): the README's examples, then the docs' (docs/partition.md, docs/pld.md).
COMMANDS: tuple[tuple[str, str], ...] = (
    (
        "rc-one-iteration",
        "account random-checkin --p 0.1 --q 0.001 --d 1000 --noise-multiplier 0.8739 --epsilon 0.015",
    ),
    ("rc-calibrate", "calibrate random-checkin --p 0.001 --q 0.1 --d 30 --epsilon 0.015 --delta 1e-6"),
    (
        "rc-composed",
        "account random-checkin --p 0.1 --q 0.01 --d 1000 --noise-multiplier 1.0 --iterations 1000 "
        "--delta 1e-5",
    ),
    (
        "rc-calibrate-rdp",
        "calibrate random-checkin --p 0.1 --q 0.01 --d 1000 --epsilon 1 --delta 1e-5 --iterations "
        "1000 --accountant rdp",
    ),
    (
        "rc-hidden-pld",
        "account random-checkin --p 0.2 --q 0.9 --d 2 --noise-multiplier 0.6 --iterations 30 --delta 1e-5",
    ),
    (
        "ms-pafl",
        "account ms-pafl --p 0.5 --eps-local 0.902 --delta-local 1e-4 --clients 100 --beta 0.25 "
        "--local-steps 5 --batch 5 --dataset-size 325 --sampling wor --rounds 40 --delta-tilde 1e-5 "
        "--delta 1e-5",
    ),
    ("pm-sfl-smashed", "account pm-sfl-smashed --epsilon 1 --c 0.1 --dim 2"),
    ("split-d8", "account model-split --submodels 8 --noise-multiplier 1.0 --steps 1000 --delta 1e-5"),
    ("split-calibrate-d2", "calibrate model-split --submodels 2 --steps 1000 --epsilon 2 --delta 1e-5"),
    (
        "split-table1-d3",
        "account model-split --submodels 3 --noise-multiplier 3.8467 --nonsplit-noise-multiplier "
        "3.8467 --rate 0.25 --steps 400 --delta 1e-5",
    ),
    (
        "split-table1-d8",
        "account model-split --submodels 8 --noise-multiplier 3.5214 --nonsplit-noise-multiplier "
        "3.5214 --rate 0.25 --steps 400 --delta 1e-5",
    ),
    (
        "split-calibrate-table1",
        "calibrate model-split --submodels 3 --rate 0.25 --steps 400 --epsilon 8 --delta 1e-5",
    ),
    (
        "split-calibrate-orders",
        "calibrate model-split --epsilon 8 --delta 1e-5 --submodels 3 --steps 400 --rate 0.25 "
        "--orders 2,3,4,5,6,8,10,12,16,20,24,32,48,64",
    ),
    ("dropout", "account dropout --noise-multiplier 1.0 --steps 100 --delta 1e-5"),
    ("bis-k1", "account bis --iterations 100 --k 1 --noise-multiplier 1 --delta 1e-5"),
    ("bis-k10", "account bis --iterations 100 --k 10 --noise-multiplier 1 --epochs 5 --delta 1e-5"),
    ("bis-k2-z2", "account bis --iterations 100 --k 2 --noise-multiplier 2 --epochs 5 --delta 1e-5"),
    ("bis-calibrate-k1", "calibrate bis --iterations 100 --k 1 --epsilon 2 --delta 1e-5"),
    ("bis-calibrate-k10", "calibrate bis --iterations 100 --k 10 --epochs 5 --epsilon 8 --delta 1e-5"),
    (
        "dropout-nonsplit",
        "account dropout --noise-multiplier 1.0 --nonsplit-noise-multiplier 2.0 --steps 100 --delta 1e-5",
    ),
    (
        "rc-revealed",
        "account random-checkin --p 0.2 --q 0.9 --d 2 --noise-multiplier 0.6 --iterations 30 "
        "--delta 1e-5 --accountant rdp",
    ),
    ("poisson-calibrate", "calibrate poisson --rate 0.001 --steps 100 --epsilon 0.01 --delta 1e-5"),
    (
        "poisson-calibrate-pld",
        "calibrate poisson --rate 0.01 --steps 1000 --epsilon 1 --delta 1e-5 --accountant pld",
    ),
    (
        "poisson-account-rdp",
        "account poisson --rate 0.01 --noise-multiplier 1.1 --steps 1000 --delta 1e-5 --accountant rdp",
    ),
    (
        "poisson-account-pld",
        "account poisson --rate 0.01 --noise-multiplier 1.1 --steps 1000 --delta 1e-5 --accountant pld",
    ),
    (
        "plan-groups",
        "plan groups --budgets 1,2,4 --sizes 100,100,100 --participation 0.1 --rounds 200 --delta "
        "1e-5 --dim 10000",
    ),
)


def numbers(report: object, prefix: str = "") -> dict[str, float]:
    """The report's numeric leaves as ``{dotted.key: value}`` (lists indexed by position)."""
    out: dict[str, float] = {}
    if isinstance(report, dict):
        for key, value in report.items():
            out.update(numbers(value, f"{prefix}{key}."))
    elif isinstance(report, list):
        for i, value in enumerate(report):
            out.update(numbers(value, f"{prefix}{i}."))
    elif isinstance(report, bool):
        pass
    elif isinstance(report, int | float):
        out[prefix.rstrip(".")] = float(report)
    return out


def snapshot(ampfl: str, only: list[str] | None = None) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for name, args in COMMANDS:
        if only and name not in only:
            continue
        start = time.perf_counter()
        proc = subprocess.run([ampfl, *args.split(), "--json"], capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        entry: dict[str, object] = {"command": f"ampfl {args}", "rc": proc.returncode, "seconds": seconds}
        if proc.returncode == 0:
            entry["numbers"] = numbers(json.loads(proc.stdout))
        else:
            entry["error"] = (proc.stderr.strip().splitlines() or [""])[-1]
        out[name] = entry
        print(f"{name}: rc {proc.returncode}, {seconds:.1f} s", file=sys.stderr)
    return out


def _relative(a: float, b: float) -> float:
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def compare(before: dict[str, dict[str, object]], after: dict[str, dict[str, object]]) -> str:
    """A markdown table: per command, how many numbers, how many changed, the largest relative change."""
    rows = ["| example | numbers | changed | largest relative change | key |", "|---|---:|---:|---:|---|"]
    for name in [n for n, _ in COMMANDS if n in before or n in after]:
        b, a = before.get(name, {}), after.get(name, {})
        bn = b.get("numbers", {})
        an = a.get("numbers", {})
        assert isinstance(bn, dict) and isinstance(an, dict)
        keys = sorted(set(bn) | set(an))
        changed = [(k, _relative(bn.get(k, math.nan), an.get(k, math.nan))) for k in keys]
        changed = [(k, r) for k, r in changed if r != 0.0 or (k in bn) != (k in an)]
        worst = max(changed, key=lambda kr: kr[1] if not math.isnan(kr[1]) else math.inf, default=("", 0.0))
        rows.append(
            f"| `{name}` | {len(keys)} | {len(changed)} | {worst[1]:.3g} | {worst[0] or '—'} |"
            if b.get("rc") == 0 and a.get("rc") == 0
            else f"| `{name}` | rc {b.get('rc')} → {a.get('rc')} | | | {a.get('error', b.get('error', ''))} |"
        )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write this snapshot (JSON)")
    parser.add_argument("--ampfl", default=str(Path(sys.executable).with_name("ampfl")))
    parser.add_argument("--compare", type=Path, help="an earlier snapshot: print the before/after table")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument("--only", nargs="+", choices=[n for n, _ in COMMANDS], help="these examples only")
    args = parser.parse_args(argv)
    snap = snapshot(args.ampfl, args.only)
    args.out.write_text(json.dumps(snap, indent=1, sort_keys=True))
    if args.compare:
        table = compare(json.loads(args.compare.read_text()), snap)
        print(table)
        if args.markdown:
            args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
