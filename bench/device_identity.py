"""CPU results before and after a change, bit for bit (``[engine] device`` moves no bit).

Runs five quick configurations — the ``digits_dp_fedavg``, ``digits_dp_sgd_split`` and ``digits_ms_pafl``
examples cut to 3 rounds, FedAvg and DP-FedAvg with the CNN on Fashion-MNIST (20 of 30 clients, 2 rounds) —
with seeded privacy randomness, once with the ``src/`` of commit ``--before`` (``git archive`` into a
temporary folder, its own interpreter) and once with this tree for each ``--devices`` setting (``absent``: no
``[engine] device``), and compares every line of ``metrics.jsonl`` and ``diagnostics.jsonl`` but
``wall_seconds``. Prints one line per variant and exits 1 on any difference.

Usage: ``.venv/bin/python bench/device_identity.py [--before 442da55] [--devices absent,cpu,auto]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CNN = {
    "dataset": {"name": "fmnist"},
    "partition": {"scheme": "iid", "num_clients": 30},
    "model": {"name": "cnn"},
}
CASES = {
    "dp_fedavg": "examples/digits_dp_fedavg.toml",
    "dp_sgd_split": "examples/digits_dp_sgd_split.toml",
    "ms_pafl": "examples/digits_ms_pafl.toml",
    "cnn_fedavg": {"rounds": 2, **CNN, "algorithm": {"name": "fedavg", "cohort_size": 20}},
    "cnn_dp_fedavg": {
        "rounds": 2,
        **CNN,
        "algorithm": {"name": "dp_fedavg", "cohort_size": 20, "clip": 1.0, "noise_multiplier": 1.0},
    },
}


def lines(device: str) -> dict[str, list[dict[str, object]]]:
    """Every case's released and diagnostic lines (the child process's work)."""
    from ampfl.fl.config import parse_config
    from ampfl.fl.run.experiment import run_experiment

    out: dict[str, list[dict[str, object]]] = {}
    for name, case in CASES.items():
        data = tomllib.loads((ROOT / case).read_text()) if isinstance(case, str) else dict(case)
        data.update(seed=0, rounds=min(int(data.get("rounds", 3)), 3), checkpoint_every=0)
        privacy = data.setdefault("privacy", {})
        privacy["reproducible"] = True
        privacy.pop("max_epsilon", None)
        if device != "absent":
            data.setdefault("engine", {})["device"] = device
        with tempfile.TemporaryDirectory() as tmp:
            run_experiment(parse_config(data), Path(tmp) / "r", progress=False, plots=False)
            rows = []
            for file in ("metrics.jsonl", "diagnostics.jsonl"):
                for text in (Path(tmp) / "r" / file).read_text().splitlines():
                    row = json.loads(text)
                    row.pop("wall_seconds", None)
                    rows.append(row)
        out[name] = rows
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="442da55", help="the commit whose src/ is the reference")
    parser.add_argument("--devices", default="absent,cpu,auto")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(lines(args.child), sort_keys=True))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", args.before, "src"], cwd=ROOT, check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)

        def child(src: Path, device: str) -> str:
            env = {**os.environ, "PYTHONPATH": str(src)}
            command = [sys.executable, __file__, "--child", device]
            return subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout

        reference = child(Path(tmp) / "src", "absent")
    failed = False
    for device in args.devices.split(","):
        same = child(ROOT / "src", device) == reference
        failed |= not same
        print(
            f"{args.before} vs this tree, device {device}: {'bit-identical' if same else 'DIFFERENT'}",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
