"""Paper 003 (PM-SFL): why Standalone leads ``pm-sfl-table1`` on Dirichlet Fashion-MNIST, as a sweep.

``pm-sfl-table1 --medium`` ranks Standalone (a personal bottom per client under the server's shared top)
above PM-SFL, unlike 003 Table 1. This figure trains Standalone, SplitFed and PM-SFL (the algorithms and
Table 1 settings of :mod:`ampfl.reproduce.pm_sfl_training`; LG-FedAvg left out for time) over a grid of
cells, one factor per hypothesis:

- clients N with their share C per round (``CLIENTS``: 20 at the medium run's 25 %, 100 at 003's 10 %);
- data per client (``DATA_FRACTIONS``): every client keeps a seeded random share of its Dirichlet(α = 0.3)
  examples, so its label mix stays and only the amount changes (20 clients × 1/5 holds as much per client as
  100 clients × all: the pair separates the client count from the data per client);
- the width of the split CNN (``WIDTHS``, channels of the three blocks; split after block 2 throughout);
- the metric: besides 003's (``final_accuracy``: each scored client's own model on the test set reweighted
  to its own training label shares), ``uniform_accuracy`` scores the same models on the whole test
  distribution (the finished run's checkpoint, re-evaluated with every client's label shares set to the
  test set's).

Each method runs at one client learning rate (``METHODS``), the one ``pm-sfl-table1 --medium`` chose for it
in most seeds (Standalone and SplitFed 0.01, PM-SFL 0.1, each in 3 of 3 seeds), so no
grid search. Row labels are ``"<method> | <cell>"`` (:func:`cell_label`).
``python -m ampfl.reproduce.pm_sfl_sweep FILE.json`` prints the table of a ``--medium --json`` result: per
row the mean ± std over seeds of both accuracies and the gap Standalone minus the row's method paired by
seed (mean, 95 % t-interval and per-seed differences, :func:`ampfl.reproduce._seeds.paired_interval`).

``medium=True``: ``MEDIUM`` (the medium Table 1's local steps, batch and scoring, but 30 rounds instead of 60
so that 3 seeds × 8 cells × 3 methods fit about 25 CPU-minutes; one evaluation, at the end).
``quick=True``: ``QUICK`` (20 rounds). Without either: ``FULL`` (003's 300 rounds × 50 local steps; not
run on 2 cores). ``seed``: the runs' seed (partition, data share, initialisation, sampling).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from ampfl.reproduce._seeds import mean_std, paired_interval
from ampfl.reproduce.pm_sfl_training import ALPHA, BATCH, MODEL, C

#: Method label -> (algorithm, extra parameters, client learning rate: the medium Table 1's choice).
METHODS: dict[str, tuple[str, dict[str, Any], float]] = {
    "Standalone": ("standalone", {}, 1e-2),
    "SplitFed": ("splitfed", {}, 1e-2),
    "PM-SFL": ("pm_sfl", {"personalization": "fine"}, 1e-1),
}
#: Clients N -> share C of them per round (the medium Table 1's 20 at 25 %; 003's 100 at 10 %).
CLIENTS: dict[int, float] = {20: 0.25, 100: 0.1}
#: Share of its Dirichlet examples every client keeps.
DATA_FRACTIONS: tuple[float, ...] = (1.0, 0.2)
#: Channels of the split CNN's three blocks (the medium Table 1's, and half of it).
WIDTHS: tuple[tuple[int, ...], ...] = ((8, 16, 16), (4, 8, 8))
MEDIUM: dict[str, Any] = {
    "rounds": 30,
    "local_steps": 10,
    "evaluations": 1,
    "eval_examples": 1000,
    "eval_clients": 20,
}
QUICK: dict[str, Any] = {**MEDIUM, "rounds": 20}
FULL: dict[str, Any] = {**MEDIUM, "rounds": 300, "local_steps": 50, "evaluations": 10, "eval_examples": 0}


def cell_label(clients: int, fraction: float, width: tuple[int, ...]) -> str:
    """The cell part of a row label, e.g. ``"N=20 C=0.25, data 1/5, 8/16/16"``."""
    data = "all data" if fraction == 1.0 else f"data 1/{round(1 / fraction)}"
    return f"N={clients} C={CLIENTS.get(clients, 0.0):g}, {data}, {'/'.join(map(str, width))}"


def _config(
    method: str,
    clients: int,
    fraction: float,
    width: tuple[int, ...],
    s: dict[str, Any],
    dataset: str,
    seed: int,
) -> Any:
    """The run's config (as ``pm-sfl-table1``'s; the data share is applied to the task, :func:`_task`)."""
    from ampfl.fl.config import parse_config
    from ampfl.reproduce import engine_section

    algorithm, extra, lr = METHODS[method]
    rounds = int(s["rounds"])
    params: dict[str, Any] = {
        "name": algorithm,
        "client_fraction": CLIENTS[clients],
        "num_local_steps": s["local_steps"],
        "batch_size": BATCH,
        "learning_rate": lr,
        "eval_examples": s["eval_examples"],
        "eval_clients": s["eval_clients"],
        **extra,
    }
    if algorithm == "pm_sfl":
        params["c"] = C
        params["agreement_rounds"] = max(1, rounds // 10)  # 003 Sec. 6.5.1: 10% of the rounds
    return parse_config(
        {
            "seed": seed,
            "rounds": rounds,
            "eval_every": max(1, rounds // int(s["evaluations"])),
            "dataset": {"name": dataset},
            "partition": {"num_clients": clients, "scheme": "dirichlet", "alpha": ALPHA},
            "model": {"name": "split_cnn", "options": {"channels": list(width), **MODEL}},
            "algorithm": params,
            "engine": engine_section(),  # reproduce --device
            "privacy": {"accountant": "rdp", "delta": 1e-5, "reproducible": True},  # an experiment
        }
    )


def _task(config: Any, fraction: float) -> Any:
    """The config's Dirichlet task, every client keeping a seeded random ``fraction`` (at least one) of its
    examples."""
    import numpy as np

    from ampfl.fl.data import DataUnavailableError
    from ampfl.fl.data.partitions import ClientPartition
    from ampfl.fl.run.experiment import build_task

    try:
        task = build_task(config)
    except DataUnavailableError as exc:
        raise ValueError(
            f"pm-sfl-sweep needs {config.dataset.name}: {exc} (try: ampfl data fetch fmnist)"
        ) from None
    if fraction < 1.0:
        rng = np.random.default_rng([config.seed, 3])
        parts = [
            np.sort(rng.permutation(ix)[: max(1, round(fraction * len(ix)))]) for ix in task.client_indices
        ]
        task.client_indices = ClientPartition.from_arrays(parts)
    return task


def _uniform_accuracy(config: Any, task: Any, folder: Path, own: float) -> float:
    """Mean over the scored clients of each client's own model on the whole test distribution: the finished
    run re-evaluated with every client's label shares replaced by the test set's."""
    import torch

    from ampfl.fl.run.experiment import build_algorithm, load_checkpoint

    alg: Any = build_algorithm(config, task)  # a split algorithm (its evaluation state is read below)
    alg.load_state_dict(load_checkpoint(folder)["algorithm"])
    again = alg.evaluate()["accuracy"]
    if abs(again - own) > 1e-6:
        raise RuntimeError(f"{folder}: re-evaluation gives {again}, the run logged {own}.")
    counts = torch.bincount(alg._eval_y, minlength=task.dataset.num_classes).float()
    alg._proportions = (counts / counts.sum()).expand_as(alg._proportions).clone()
    return float(alg.evaluate()["accuracy"])


def _sweep(out: Path, s: dict[str, Any], *, dataset: str, seed: int, scale: dict[str, Any]) -> dict[str, Any]:
    from ampfl.fl.run.experiment import run_or_reuse
    from ampfl.fl.run.folder import read_lines
    from ampfl.io import atomic_write_csv

    results: list[dict[str, Any]] = []
    cells: list[dict[str, Any]] = []
    for clients in CLIENTS:
        for fraction in DATA_FRACTIONS:
            data = None
            for width in WIDTHS:
                cell = cell_label(clients, fraction, width)
                for method in METHODS:
                    config = _config(method, clients, fraction, width, s, dataset, seed)
                    if data is None:  # one partition per (N, fraction): the model options do not change it
                        data = _task(config, fraction)
                        sizes = data.client_sizes()
                        cells.append(
                            {
                                "num_clients": clients,
                                "client_fraction": CLIENTS[clients],
                                "data_fraction": fraction,
                                "examples_per_client_mean": float(sizes.mean()),
                                "examples_per_client_median": float(sorted(sizes)[len(sizes) // 2]),
                            }
                        )
                    # the split algorithms build their model from the task's options: this width's
                    task = dataclasses.replace(data, model_options=dict(config.model.options))
                    folder = (
                        out
                        / f"n{clients}"
                        / f"data{fraction:g}"
                        / "-".join(map(str, width))
                        / METHODS[method][0]
                    )
                    summary = run_or_reuse(config, folder, task=task, label=f"{method} | {cell}")
                    own = read_lines(folder, diagnostics=True)[-1]["accuracy"]
                    results.append(
                        {
                            "method": f"{method} | {cell}",
                            "final_accuracy": own,
                            "uniform_accuracy": _uniform_accuracy(config, task, folder, own),
                            "epsilon": summary["epsilon"],
                            "learning_rate": METHODS[method][2],
                            "wall_seconds": summary.get("wall_seconds"),
                        }
                    )
    header = ["method", "final_accuracy", "uniform_accuracy", "learning_rate"]
    csv = atomic_write_csv(out / "pm_sfl_sweep.csv", header, [[r[k] for k in header] for r in results])
    return {
        "files": [str(csv)],
        **scale,
        "dataset": dataset,
        "setting": dict(s) | {"alpha": ALPHA, "batch": BATCH, "split_layer": MODEL["split_layer"]},
        "cells": cells,
        "results": results,
    }


def sweep(out: Path, *, quick: bool = False, medium: bool = False, seed: int = 0) -> dict[str, Any]:
    """Standalone, SplitFed and PM-SFL over clients × data per client × width (module docstring)."""
    from ampfl.reproduce._plot import scale_fields

    s = QUICK if quick else MEDIUM if medium else FULL
    return _sweep(
        out, s, dataset="fmnist", seed=seed, scale=scale_fields(quick=quick, medium=medium, seed=seed)
    )


def gaps(result: dict[str, Any], reference: str = "Standalone") -> list[dict[str, Any]]:
    """Per row of a multi-seed result: both accuracies over the seeds and the gap ``reference`` minus the
    row's method in the same cell, paired by seed (:func:`ampfl.reproduce._seeds.paired_interval`: the mean
    difference, its 95 % t-interval and the per-seed differences)."""
    per_seed = result["per_seed_results"]
    labels = [r["method"] for r in per_seed[0]]
    out = []
    for label in labels:
        method, cell = label.split(" | ", 1)
        rows = [next(r for r in seed if r["method"] == label) for seed in per_seed]
        refs = [next(r for r in seed if r["method"] == f"{reference} | {cell}") for seed in per_seed]
        out.append(
            {
                "cell": cell,
                "method": method,
                "seeds": len(rows),
                "accuracy": mean_std([r["final_accuracy"] for r in rows]),
                "uniform_accuracy": mean_std([r["uniform_accuracy"] for r in rows]),
                "gap": None
                if method == reference
                else paired_interval(
                    [r["final_accuracy"] for r in refs], [r["final_accuracy"] for r in rows]
                ),
            }
        )
    return out


def table(result: dict[str, Any]) -> str:
    """The markdown table of :func:`gaps`, with the cells' data per client and the timing."""
    from ampfl.reproduce._report import cell

    head = (
        "| cell | method | own-distribution accuracy | whole-test accuracy "
        "| Standalone − method: paired mean [95 % t-interval] (per seed) |"
    )
    lines = [head, "|---|---|---|---|---|"]
    for g in gaps(result):
        gap = g["gap"]
        shown = (
            "—"
            if gap is None
            else f"{gap['mean']:+.3f} [{gap['low']:+.3f}, {gap['high']:+.3f}] "
            f"({' / '.join(f'{d:+.3f}' for d in gap['differences'])})"
        )
        accuracies = f"**{cell(g['accuracy'])}** | {cell(g['uniform_accuracy'])}"
        lines.append(f"| {g['cell']} | {g['method']} | {accuracies} | {shown} |")
    foot = []
    seed = result.get("seeds", [result.get("seed", 0)])[0]
    for c in result.get("cells", []):
        foot.append(
            f"N = {c['num_clients']}, data × {c['data_fraction']:g}: {c['examples_per_client_mean']:.0f} "
            f"examples per client on average (median {c['examples_per_client_median']:.0f}, seed {seed})."
        )
    timing = result.get("timing", [])
    if timing:
        walls = [t["wall_seconds"] for t in timing]
        cpus = [t["cpu_seconds"] for t in timing]
        loads = [x for t in timing for x in t["load_average_1min"]]
        foot.append(
            f"Measured: {len(walls)} seeds, {sum(walls) / 60:.1f} min wall, {sum(cpus) / 60:.1f} min CPU "
            f"in all, 1-min load average {min(loads):.1f}–{max(loads):.1f} on 2 cores."
        )
    return "\n".join(lines) + "\n\n" + "\n".join(foot) + "\n"


def main(argv: list[str]) -> int:
    for path in argv:
        print(table(json.loads(Path(path).read_text())))
    return 0


FIGURES = {"pm-sfl-sweep": sweep}

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
