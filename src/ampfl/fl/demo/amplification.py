"""``ampfl demo``: how much accuracy does amplification buy, at one record-level (ε, δ) and across ε?

The embedded default task (offline): scikit-learn's digits split over 100 clients with two labels each (~14
training examples per client, equal sizes so that 004's "N clients with d records" holds without dropping
data). A client alone learns its own two labels and nothing else (local-only training: ~0.2 on the test set
against FedAvg's ~0.92): collaboration matters, and so does how much noise privacy costs it. Every private
run is calibrated to the same record-level target ε = 2 at δ = 1e-5 after the same number of rounds, by
:func:`ampfl.fl.privacy.run_accountant.calibrate_noise` on the event the run then composes (one accountant,
the run's ``[privacy]``), twice:

- ``accounting = "amplified"``: the algorithm's recommended sound analysis, which uses the randomness of who
  takes part and which records a step uses (004: random check-in with local Poisson sampling; 000: the server
  sees who uploads and the private submodel persists, so only participation helps);
- ``accounting = "no-amplification"``: the same algorithm, clipping and learning rate, accounted as if the
  record were used and seen in every round (:func:`ampfl.accounting.unamplified.without_amplification`).

So the noise multiplier each twin needs, and the accuracy it reaches, show what the amplification is worth.
The same comparison at every ε of a grid (``FRONTIER_EPSILONS``, doubling from 0.5 to 8192; the table's
ε = 2 runs are its points at 2) draws the privacy–utility frontier: same helper, accountant, rounds, seed and
hyper-parameters at every point, no per-point tuning. What it yields (ε and noise saved) is in
:mod:`ampfl.fl.demo.frontier`.
FedAvg (no privacy) and local-only training (no communication, nothing released) are the two ends; they
carry ε = ∞ and ``accounting = "none"``. DP-FedAvg is left out on purpose: its guarantee is client-level and
cannot be compared with these record-level ones.

``final_accuracy`` is the released model's accuracy on the whole test set (MS-PAFL: its public model; the
noise it carries is reported per round as ``noise_to_signal`` in its diagnostics.jsonl); ``local_accuracy`` is
the mean accuracy of the model each client actually uses (global, personal or local) on its own data
distribution, 000's personal metric: a diagnostic (computed with the clients' private label distributions and
private submodels, not covered by ε; read from each run's ``diagnostics.jsonl``).

The demo is an experiment, not a release: its runs set ``[privacy] reproducible = true`` (privacy randomness
derived from the seed, so every machine prints the same table; the summaries say so).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampfl.fl.config import RunConfig, parse_config
from ampfl.fl.demo.frontier import (
    FRONTIER_EPSILONS,
    FRONTIER_KEYS,
    QUICK_EPSILONS,
    check_epsilons,
    plot_frontier,
    render_frontier,
    savings,
)
from ampfl.io import atomic_save_figure, atomic_write_csv, atomic_write_json

if TYPE_CHECKING:
    from ampfl.fl.task import Task

TARGET_EPSILON = 2.0
TARGET_DELTA = 1e-5
ROUNDS = 40
EVAL_EVERY = 4
REDUCED_ROUNDS = 3
NUM_CLIENTS = 100
LABELS = 2
SEED = 0

#: The runs of the demo in table order: (algorithm, accounting).
RUNS: tuple[tuple[str, str], ...] = (
    ("fedavg", "none"),
    ("local_only", "none"),
    ("dp_dsgd_rp", "amplified"),
    ("dp_dsgd_rp", "no-amplification"),
    ("ms_pafl", "amplified"),
    ("ms_pafl", "no-amplification"),
)

#: Hyper-parameters, one set per algorithm shared by both of its accountings (the noise multiplier is set by
#: calibration). Chosen once on digits for the non-private setting; never tuned per accounting.
ALGORITHM_PARAMS: dict[str, dict[str, Any]] = {
    "fedavg": {
        "client_sampling": "poisson",
        "sampling_rate": 0.5,
        "num_local_steps": 5,
        "batch_size": 5,
        "learning_rate": 0.5,
    },
    "local_only": {"num_local_steps": 5, "batch_size": 5, "learning_rate": 0.5},
    "ms_pafl": {
        "participation": 0.5,
        "num_local_steps": 5,
        "batch_size": 2,
        "local_sampling": "wor",
        "private_fraction": 0.5,
        "learning_rate": 0.5,
        "clip": 1.0,
        "noise_multiplier": 10.0,  # sigma / C; replaced by the calibrated value
    },
    "dp_dsgd_rp": {
        "participation": 0.5,
        "sampling_rate": 0.5,
        "clip": 1.0,
        "noise_multiplier": 1.0,
        "learning_rate": 2.0,
        "momentum": 0.5,
        "local_dataset_size": 16,  # d: the declared bound on a client's records (13-16 here), public
    },
}

RESULT_KEYS = (
    "algorithm",
    "accounting",
    "final_accuracy",
    "local_accuracy",
    "epsilon",
    "delta",
    "privacy_unit",
    "noise_multiplier",
)


def run_name(algorithm: str, accounting: str) -> str:
    """The run's folder name and label: ``dp_dsgd_rp-amplified``, ``fedavg``."""
    return algorithm if accounting == "none" else f"{algorithm}-{accounting}"


def base_config(
    name: str,
    *,
    rounds: int,
    accounting: str = "amplified",
    params: dict[str, Any] | None = None,
    device: str = "cpu",
) -> RunConfig:
    """The demo's run config for algorithm ``name`` (``params`` override the demo's hyper-parameters) on
    ``device`` (``[engine] device``; the CPU unless asked: the README's numbers are the CPU's)."""
    return parse_config(
        {
            "seed": SEED,
            "rounds": rounds,
            "eval_every": min(EVAL_EVERY, rounds),
            "checkpoint_every": 0,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "label_skew", "num_clients": NUM_CLIENTS, "labels_per_client": LABELS},
            "model": {"name": "logreg"},
            "algorithm": {"name": name, **ALGORITHM_PARAMS[name], **(params or {})},
            "engine": {"device": device},
            "privacy": {
                "accountant": "rdp",  # not "auto" (PLD: ~8% less noise, 1.3-1.7x the demo's time)
                "delta": TARGET_DELTA,
                "accounting": "amplified" if accounting == "none" else accounting,
                "reproducible": True,  # an experiment: the same numbers on every machine (not a release)
            },
        }
    )


def calibrated_config(
    name: str,
    accounting: str,
    *,
    rounds: int,
    task: Task,
    target_epsilon: float = TARGET_EPSILON,
    device: str = "cpu",
) -> tuple[RunConfig, float | None]:
    """The config of ``name`` with its noise multiplier z calibrated to ``target_epsilon`` (at the demo's δ)
    under ``accounting``.

    Returns the config and z (None for a run without noise). The calibration composes the algorithm's own
    per-round event (``event_at``), mapped as the run maps it, with the run's accountant and δ.
    """
    from ampfl.fl.privacy.run_accountant import calibrate_noise
    from ampfl.fl.run.experiment import build_algorithm

    config = base_config(name, rounds=rounds, accounting=accounting, device=device)
    if accounting == "none":
        return config, None
    algorithm: Any = build_algorithm(config, task)
    z = calibrate_noise(
        algorithm.event_at,
        target_epsilon=target_epsilon,
        rounds=rounds,
        privacy=config.privacy,
        relation=algorithm.neighboring_relation,
        who=name,
    )
    params = {"noise_multiplier": z}
    return base_config(name, rounds=rounds, accounting=accounting, params=params, device=device), z


def run_demo(
    out: str | Path = Path("runs") / "demo",
    *,
    reduced: bool = False,
    progress: bool = True,
    runs: tuple[tuple[str, str], ...] = RUNS,
    epsilons: Sequence[float] | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train the demo's runs into ``out/<run name>/``, its frontier into ``out/frontier/``, and compare them.

    Args:
        out: output folder (one run folder per run, plus ``results.json``, ``results.csv``, ``frontier.csv``,
            ``accuracy.png`` (a bar chart of the table at ε = 2) and ``frontier.png``
            (:func:`ampfl.fl.demo.frontier.plot_frontier`)).
        reduced: a few rounds and a three-point grid only (for tests); every ε is recalibrated for that
            length.
        progress: one rich progress bar across the runs, on stderr.
        runs: which of the demo's (algorithm, accounting) runs to train; the frontier covers the private ones.
        epsilons: the frontier's record-level ε grid (default ``FRONTIER_EPSILONS``, ``QUICK_EPSILONS`` when
            ``reduced``). The table's ε = 2 runs are its points at ε = 2 (not trained twice).
        device: every run's ``[engine] device`` (``ampfl demo --device``; the noise calibration does not
            depend on it).

    Returns:
        ``{"results": [{"algorithm", "accounting", "final_accuracy", "epsilon", "delta", "privacy_unit",
        "noise_multiplier", ...}, ...], "frontier": [{"algorithm", "accounting", "epsilon",
        "noise_multiplier", "final_accuracy", "local_accuracy", ...}, ...], "savings": {algorithm:
        {"epsilon_saved_at_equal_accuracy": [...], "noise_saved_at_equal_epsilon": [...]}}, ...}`` (savings:
        :mod:`ampfl.fl.demo.frontier`).
    """
    from ampfl.fl.run.experiment import build_task, progress_bar

    unknown = [run for run in runs if run not in RUNS]
    if unknown:
        raise ValueError(f"runs must be among {RUNS}. Found {unknown[0]!r}.")
    default = QUICK_EPSILONS if reduced else FRONTIER_EPSILONS
    grid = check_epsilons(default if epsilons is None else epsilons)
    started = time.perf_counter()
    folder = Path(out)
    rounds = REDUCED_ROUNDS if reduced else ROUNDS
    task = build_task(base_config("fedavg", rounds=rounds))
    jobs: list[tuple[str, str, float]] = [(name, accounting, TARGET_EPSILON) for name, accounting in runs]
    jobs += [
        (name, accounting, epsilon)
        for name, accounting in runs
        if accounting != "none"
        for epsilon in grid
        if epsilon != TARGET_EPSILON
    ]
    trained: dict[tuple[str, str, float], dict[str, Any]] = {}
    with progress_bar(progress, len(jobs), 0, "ampfl demo: runs") as advance:
        for name, accounting, epsilon in jobs:
            table = epsilon == TARGET_EPSILON
            label = (
                run_name(name, accounting)
                if table
                else f"frontier/{run_name(name, accounting)}-eps{epsilon:g}"
            )
            row = _train(
                name,
                accounting,
                epsilon,
                folder / label,
                rounds=rounds,
                task=task,
                plots=table and not reduced,
                device=device,
            )
            trained[name, accounting, epsilon] = {**row, "run": label}
            z = "" if row["noise_multiplier"] is None else f" ε={epsilon:g}: z {row['noise_multiplier']:.3g},"
            advance(f"{run_name(name, accounting)}{z} acc. {row['final_accuracy']:.3f}")
    results = [trained[name, accounting, TARGET_EPSILON] for name, accounting in runs]
    # A point's epsilon is its grid target; epsilon_accounted the run's reported ε (≤ the target, within 1%).
    frontier = [
        {key: trained[name, accounting, epsilon][key] for key in FRONTIER_KEYS}
        | {"epsilon": epsilon, "epsilon_accounted": trained[name, accounting, epsilon]["epsilon"]}
        | {"run": trained[name, accounting, epsilon]["run"]}
        for name, accounting in runs
        if accounting != "none"
        for epsilon in grid
    ]
    result = {
        "results": results,
        "target_epsilon": TARGET_EPSILON,
        "target_delta": TARGET_DELTA,
        "rounds": rounds,
        "dataset": "digits",
        "num_clients": NUM_CLIENTS,
        "partition": f"label_skew ({LABELS} labels per client)",
        "frontier_epsilons": list(grid),
        "frontier": frontier,
        "savings": savings(frontier),
        "out_dir": str(folder),
    }
    files = [
        _plot(folder / "accuracy.png", results, rounds=rounds),
        plot_frontier(folder / "frontier.png", result),
        atomic_write_csv(
            folder / "results.csv",
            [*RESULT_KEYS, "analysis"],
            [[_csv(r[key]) for key in (*RESULT_KEYS, "analysis")] for r in results],
        ),
        atomic_write_csv(
            folder / "frontier.csv",
            [*FRONTIER_KEYS, "epsilon_accounted", "run"],
            [[_csv(p[key]) for key in (*FRONTIER_KEYS, "epsilon_accounted", "run")] for p in frontier],
        ),
    ]
    result["wall_seconds"] = time.perf_counter() - started
    result["files"] = [str(path) for path in (*files, folder / "results.json")]
    atomic_write_json(folder / "results.json", result)
    return result


def _train(
    name: str,
    accounting: str,
    epsilon: float,
    folder: Path,
    *,
    rounds: int,
    task: Task,
    plots: bool,
    device: str = "cpu",
) -> dict[str, Any]:
    """One demo run at record-level ``epsilon`` (ignored without privacy) into ``folder``: its table row."""
    from ampfl.fl.run.experiment import clear_run_folder, run_experiment
    from ampfl.fl.run.folder import read_lines

    config, z = calibrated_config(
        name, accounting, rounds=rounds, task=task, target_epsilon=epsilon, device=device
    )
    clear_run_folder(folder)
    summary = run_experiment(config, folder, progress=False, task=task, plots=plots)
    final = read_lines(folder, diagnostics=True)[-1]  # local accuracy: a diagnostic
    return {
        "algorithm": name,
        "accounting": accounting,
        "final_accuracy": summary["final_accuracy"],
        "local_accuracy": final.get("local_accuracy_mean"),
        "epsilon": summary["epsilon"],
        "delta": summary["delta"],
        "privacy_unit": summary["privacy_unit"],
        "noise_multiplier": z,
        "analysis": summary["analysis"],
        "wall_seconds": summary["wall_seconds"],
    }


def _csv(value: Any) -> Any:
    return "" if value is None else value


def _plot(path: Path, results: list[dict[str, Any]], *, rounds: int) -> Path:
    """Grouped bars: test-set and own-distribution accuracy of each run, its z and ε written under it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8))
    xs = range(len(results))
    width = 0.38
    test = [r["final_accuracy"] for r in results]
    local = [r["local_accuracy"] or 0.0 for r in results]
    ax.bar([x - width / 2 for x in xs], test, width, label="released model, whole test set")
    ax.bar([x + width / 2 for x in xs], local, width, label="model each client uses, own distribution")
    for x, (a, b) in enumerate(zip(test, local, strict=True)):
        ax.text(x - width / 2, a + 0.01, f"{a:.2f}", ha="center", fontsize=7)
        ax.text(x + width / 2, b + 0.01, f"{b:.2f}", ha="center", fontsize=7)
    ax.set_xticks(list(xs), [_bar_label(r) for r in results], fontsize=7)
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.0, 1.08)
    ax.set_title(
        f"digits, {NUM_CLIENTS} clients ({LABELS} labels each), {rounds} rounds; "
        f"private runs at record-level ε = {TARGET_EPSILON:g}, δ = {TARGET_DELTA:g}",
        fontsize=9,
    )
    ax.grid(alpha=0.3, axis="y")
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    written = atomic_save_figure(fig, path)
    plt.close(fig)
    return written


def _bar_label(r: dict[str, Any]) -> str:
    if r["accounting"] == "none":
        return f"{r['algorithm']}\nno privacy"
    return f"{r['algorithm']}\n{r['accounting']}\nz = {r['noise_multiplier']:.3g}, ε = {r['epsilon']:.3g}"


def render_table(result: dict[str, Any], *, print_fn: Callable[..., None] | None = None) -> None:
    """Print the demo's table (the same numbers as the bar chart) with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"ampfl demo: digits, {result['num_clients']} clients ({result['partition']}), "
        f"{result['rounds']} rounds, record-level target ε = {result['target_epsilon']:g}, "
        f"δ = {result['target_delta']:g}"
    )
    for column in ("algorithm", "accounting", "z", "ε", "unit", "acc.", "own acc."):
        table.add_column(column, no_wrap=True)
    for r in result["results"]:
        eps = "∞" if not math.isfinite(r["epsilon"]) else f"{r['epsilon']:.3g}"
        z = "-" if r["noise_multiplier"] is None else f"{r['noise_multiplier']:.3g}"
        local = "-" if r["local_accuracy"] is None else f"{r['local_accuracy']:.3f}"
        table.add_row(
            r["algorithm"],
            r["accounting"],
            z,
            eps,
            r["privacy_unit"] or "-",
            f"{r['final_accuracy']:.3f}",
            local,
        )
    show = print_fn or Console().print
    show(table)
    show(
        "z: noise multiplier calibrated to the target under each accounting; acc.: the released model "
        "(MS-PAFL: its public model) on the whole test set; own acc.: the model each client uses, on its own "
        "data distribution (mean over clients).",
        soft_wrap=True,
    )
    if result.get("frontier"):
        render_frontier(result, show)
    show(f"Figures and run folders: {result['out_dir']}", soft_wrap=True)


def read_results(out: str | Path) -> dict[str, Any]:
    """The ``results.json`` of a demo folder."""
    return dict(json.loads((Path(out) / "results.json").read_text(encoding="utf-8")))
