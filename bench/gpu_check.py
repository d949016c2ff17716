"""The engine on the CPU vs a CUDA device: ONE prepared check for a session with a GPU.

Runs the logreg (Adult) and CNN (Fashion-MNIST) workloads of ``bench/compare.py`` — R rounds of FedAvg and
DP-FedAvg (C = 1, z = 1), K clients per round, Q = 5 local steps of b = 10, one evaluation at the end —
through
``ampfl.fl.run.experiment.run_experiment`` with ``[engine] device = "cpu"`` (``--cpu-threads`` torch threads,
default all cores) and ``"cuda"``, interleaved (one warm-up run each, then ``--repeats`` pairs; medians), and
prints a markdown table for docs/performance.md: seconds per round (the summary's ``round_seconds_mean``:
client work, server step, accounting), CPU ÷ GPU, final accuracy on each device (the same privacy randomness
on both: the noise is drawn on the CPU; only the clients' float rounding differs), whether two CUDA runs gave
the same ``metrics.jsonl`` bit for bit, and the peak CUDA memory. It also lists the determinism warnings torch
raised on CUDA (operations without a deterministic kernel under ``torch.use_deterministic_algorithms(True,
warn_only=True)``), and times one quick reproduction on the device (``--reproduction``; ``--device cuda``
when ``ampfl reproduce`` has the flag, else its configs' default ``"auto"``).

Where: ``bench/gpu_check.sh`` (prepare here, run there). Alone:
``PYTHONPATH=src python3 bench/gpu_check.py [--models logreg,cnn] [--ks 100,1000] [--rounds 3] [--repeats 2]
[--reproduction hasircioglu-fig6] [--out DIR]``. Writes ``gpu_check.md`` and ``gpu_check.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ampfl.fl.config import RunConfig
from ampfl.fl.run.experiment import build_task, clear_run_folder, run_experiment
from compare import _config


def _on(config: Any, device: str, threads: int | None) -> RunConfig:
    """``config`` on ``device``, its privacy randomness seeded (the same draws on both devices and in every
    repeat: a comparison, not a release)."""
    engine = config.engine.model_copy(update={"device": device, "threads": threads})
    privacy = config.privacy.model_copy(update={"reproducible": True})
    return config.model_copy(update={"engine": engine, "privacy": privacy})  # type: ignore[no-any-return]


def _metrics(folder: Path) -> list[dict[str, Any]]:
    lines = [json.loads(t) for t in (folder / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if k != "wall_seconds"} for line in lines]


def _one(config: RunConfig, task: Any, folder: Path) -> dict[str, Any]:
    clear_run_folder(folder)
    started = time.perf_counter()
    summary = run_experiment(config, folder, task=task, progress=False, plots=False)
    return {
        "wall": time.perf_counter() - started,
        "round": json.loads((folder / "timing.json").read_text())["round_seconds_mean"],  # kept apart
        "accuracy": summary["final_accuracy"],
        "device": summary["device"],
        "metrics": _metrics(folder),
    }


def workload(model: str, k: int, dp: bool, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    base = _config(model, k, args.rounds, dp)
    task = build_task(base)  # type: ignore[arg-type]
    cpu, gpu = _on(base, "cpu", args.cpu_threads), _on(base, args.gpu_device, None)
    cuda = args.gpu_device != "cpu"
    runs: dict[str, list[dict[str, Any]]] = {"cpu": [], "cuda": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _one(gpu, task, tmp / "warm-gpu")  # CUDA context, cuDNN plans, resident data
        _one(cpu, task, tmp / "warm-cpu")
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        for _ in range(args.repeats):  # interleaved
            runs["cpu"].append(_one(cpu, task, tmp / "cpu"))
            runs["cuda"].append(_one(gpu, task, tmp / "cuda"))
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0
    cpu_round = statistics.median(r["round"] for r in runs["cpu"])
    gpu_round = statistics.median(r["round"] for r in runs["cuda"])
    return {
        "model": model,
        "K": k,
        "dp": dp,
        "cpu_round_s": cpu_round,
        "gpu_round_s": gpu_round,
        "speedup": cpu_round / gpu_round,
        "cpu_accuracy": runs["cpu"][-1]["accuracy"],
        "gpu_accuracy": runs["cuda"][-1]["accuracy"],
        "cpu_repeat_identical": all(r["metrics"] == runs["cpu"][0]["metrics"] for r in runs["cpu"]),
        "gpu_repeat_identical": all(r["metrics"] == runs["cuda"][0]["metrics"] for r in runs["cuda"]),
        "gpu_device": runs["cuda"][0]["device"],
        "peak_gpu_mib": peak,
        "warnings": sorted({str(w.message).splitlines()[0][:200] for w in caught}),
    }


def reproduction(name: str, tmp: Path, device: str) -> dict[str, Any]:
    """``ampfl reproduce NAME --quick --json`` on the device, in a subprocess (its own torch state)."""
    cli = [sys.executable, "-m", "ampfl.cli"]
    helps = subprocess.run([*cli, "reproduce", "--help"], capture_output=True, text=True).stdout
    flag = ["--device", device] if "--device" in helps else []  # else the configs' default: "auto"
    command = [*cli, "reproduce", name, "--quick", "--json", "--out", str(tmp / name), *flag]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    devices = sorted(
        {json.loads(p.read_text()).get("device", "?") for p in (tmp / name).rglob("summary.json")}
    )
    return {
        "name": name,
        "command": " ".join(command[3:]),
        "rc": done.returncode,
        "wall_s": wall,
        "devices": devices,
        "stderr_tail": done.stderr[-600:],
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | K | DP | CPU s/round | GPU s/round | CPU ÷ GPU | CPU acc. | GPU acc."
        " | GPU repeats bit-identical | peak GPU MiB |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['K']} | {'yes' if r['dp'] else 'no'} | {r['cpu_round_s']:.3f} | "
            f"{r['gpu_round_s']:.4f} | {r['speedup']:.1f}× | {r['cpu_accuracy']:.4f} | "
            f"{r['gpu_accuracy']:.4f} | {'yes' if r['gpu_repeat_identical'] else 'NO'} | "
            f"{r['peak_gpu_mib']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="logreg,cnn")
    parser.add_argument("--ks", default="100,1000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cpu-threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-dp", action="store_true")
    parser.add_argument("--reproduction", default="hasircioglu-fig6", help="'' to skip")
    parser.add_argument("--out", type=Path, default=Path("runs") / "gpu_check")
    parser.add_argument("--gpu-device", default="cuda", help="'cpu': a dry run of this script without a GPU")
    args = parser.parse_args(argv)
    if args.gpu_device != "cpu" and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device; nothing to compare", file=sys.stderr)
        return 2
    card = torch.cuda.get_device_name(0) if args.gpu_device != "cpu" else "DRY RUN (cpu vs cpu)"
    head = (
        f"{card}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), CPU runs at "
        f"{args.cpu_threads} threads, {args.rounds} rounds, medians of {args.repeats} interleaved pairs, "
        f"load average {os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(head, flush=True)
    rows: list[dict[str, Any]] = []
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for k in (int(v) for v in args.ks.split(",")):
                for dp in (False,) if args.no_dp else (False, True):
                    rows.append(workload(model, k, dp, args, Path(tmp)))
                    r = rows[-1]
                    print(
                        f"  {model} K={k} dp={dp}: {r['cpu_round_s']:.3f} s vs {r['gpu_round_s']:.4f} s",
                        flush=True,
                    )
        repro = reproduction(args.reproduction, Path(tmp), args.gpu_device) if args.reproduction else None
    warned = sorted({w for r in rows for w in r["warnings"]})
    text = [head, "", table(rows), ""]
    text += ["Determinism warnings on CUDA:" if warned else "No determinism warnings on CUDA."]
    text += [f"- {w}" for w in warned]
    if repro is not None:
        text += [
            "",
            f"Reproduction `{repro['command']}`: exit {repro['rc']}, {repro['wall_s']:.1f} s wall, "
            f"summary devices {repro['devices']}",
        ]
        if repro["rc"]:
            text += ["```", repro["stderr_tail"], "```"]
    report = "\n".join(text) + "\n"
    print(report)
    (args.out / "gpu_check.md").write_text(report)
    (args.out / "gpu_check.json").write_text(
        json.dumps({"head": head, "rows": rows, "reproduction": repro}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
