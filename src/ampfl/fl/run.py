"""One training run in its run folder: rounds, metrics, checkpoints, summary and plots.

A run folder holds:

- ``config.json`` and ``config.toml``: the resolved configuration (every default filled in; the TOML file
  can be given back to ``ampfl run``);
- ``metrics.jsonl``: one JSON object per evaluated round: ``round`` (rounds done), the round's training
  metrics, the test metrics (always ``accuracy``), ``epsilon`` (composed so far, at the run's δ), ``delta``
  and ``wall_seconds``;
- ``checkpoint.pt``: the latest checkpoint (``torch.save`` of the algorithm's ``state_dict()``, the run
  accountant's ``state_dict()``, the number of rounds done, the metrics so far, the global torch RNG state and
  the configuration), replaced atomically;
- ``summary.json`` and the plots ``accuracy.png`` and ``epsilon.png`` at the end.

Privacy (``ampfl.fl.privacy``): the run owns one accountant (``[privacy] accountant``). Before round r it asks
the algorithm for the round's events, stops if they would push ε above ``[privacy] max_epsilon``
(``stopped = "budget"`` in the summary), runs the round and composes its events once; ε at every evaluation is
read from the accountant, never recomputed from the history. A non-private run (FedAvg, zero noise) reports
ε = ∞ (``1e999`` in JSON) and ``privacy_unit = null``.

Every file is written atomically (temporary file + ``os.replace``), so a run stopped at any point resumes from
its last checkpoint; because every random draw of round r is derived from ``(seed, r, role)``, the resumed run
ends bit-identical to an uninterrupted one.

Checkpoints are loaded with ``torch.load(..., weights_only=False)``: resume only run folders you trust.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampfl.fl.config import RunConfig, config_to_dict, to_toml
from ampfl.fl.divergence import TrainingDiverged, diverged_message, numerical_failure
from ampfl.fl.run_plots import ACCURACY_PNG, EPSILON_PNG, write_plots
from ampfl.io import atomic_write_bytes, atomic_write_json, atomic_write_text, dumps_json

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.engine import Engine
    from ampfl.fl.privacy import RunAccountant
    from ampfl.fl.task import Task

CONFIG_JSON = "config.json"
CONFIG_TOML = "config.toml"
METRICS = "metrics.jsonl"
CHECKPOINT = "checkpoint.pt"
SUMMARY = "summary.json"

#: Config keys that may change between an interrupted run and its resumption (they change no numbers).
RESUMABLE_CHANGES = frozenset({"rounds", "eval_every", "checkpoint_every", "privacy.max_epsilon"})

_CHECKPOINT_FORMAT = 2


def build_task(config: RunConfig) -> Task:
    """Load the dataset and split it into clients as the config says."""
    from ampfl.fl.data import load_dataset, partition_clients
    from ampfl.fl.task import Task

    dataset = load_dataset(config.dataset.name, path=config.dataset.path, seed=config.seed)
    part = config.partition
    indices = partition_clients(
        dataset.y_train,
        scheme=part.scheme,
        num_clients=part.num_clients,
        seed=config.seed,
        alpha=part.alpha,
        labels_per_client=part.labels_per_client,
        samples_per_client=part.samples_per_client,
    )
    return Task(
        dataset=dataset,
        client_indices=indices,
        model=config.model.name,
        model_options=dict(config.model.options),
    )


def build_engine(config: RunConfig) -> Engine:
    """The engine described by ``[engine]`` (engine defaults for unset options)."""
    from ampfl.fl.engine import Engine, EngineOptions

    settings = config.engine.model_dump(exclude={"threads"})  # threads: set around the run, not the engine
    options = {key: value for key, value in settings.items() if value is not None}
    return Engine(EngineOptions(**options))


def build_algorithm(
    config: RunConfig, task: Task, *, algorithms: Mapping[str, type[Algorithm]] | None = None
) -> Algorithm:
    """Instantiate the configured algorithm on ``task``."""
    if algorithms is None:
        from ampfl.fl.algorithms import ALGORITHMS

        algorithms = ALGORITHMS
    cls = algorithms[config.algorithm.name]
    return cls(
        config.algorithm.params, task, seed=config.seed, engine=build_engine(config), privacy=config.privacy
    )


def _run_experiment(
    config: RunConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    stop_after: int | None = None,
    algorithms: Mapping[str, type[Algorithm]] | None = None,
    task: Task | None = None,
    plots: bool = True,
    label: str | None = None,
) -> dict[str, Any]:
    """Run (or resume) the configured training in ``out_dir`` and return its summary.

    Args:
        config: the validated run configuration.
        out_dir: the run folder (created if needed). A fresh run refuses a folder that already holds a run.
        resume: continue from the folder's last checkpoint (model, client store, RNG states, metrics).
        progress: show a rich progress bar on stderr.
        stop_after: stop (with a checkpoint) once this many rounds are done, as an interruption would; the
            returned dict then has ``completed = False`` and no summary or plots are written.
        algorithms: the algorithm registry (default ``ampfl.fl.algorithms.ALGORITHMS``).
        task: the task to train on (default: built from the config's dataset and partition).
        plots: write ``accuracy.png`` and ``epsilon.png`` at the end.
        label: the progress bar's label (default: the algorithm's name).

    Returns:
        The summary (also written to ``summary.json``): ``algorithm``, ``dataset``, ``rounds``,
        ``rounds_completed``, ``stopped`` (``"rounds"`` or ``"budget"``), ``final_accuracy``, ``epsilon``,
        ``delta``, ``privacy_unit``, ``accountant``, ``analysis``, ``wall_seconds`` and more.

    Raises:
        ValueError: a fresh run in a used folder, a resume without checkpoint or with a different config, or
            a ``[privacy]`` setting the algorithm cannot meet (one line naming the key).
    """
    if stop_after is not None and stop_after < 0:
        raise ValueError(f"stop_after must be a non-negative integer. Found {stop_after}.")
    out = Path(out_dir)
    resolved = config_to_dict(config)
    started = time.perf_counter()
    checkpoint = _open_run_folder(out, resolved, resume=resume)
    # Data, algorithm and accountant first: a config that cannot start leaves no run folder behind.
    if task is None:
        task = build_task(config)
    from ampfl.fl.privacy import algorithm_and_ledger

    def build(privacy: Any) -> Algorithm:  # "auto" resolved once: the ledger's accountant calibrates too
        return build_algorithm(config.model_copy(update={"privacy": privacy}), on, algorithms=algorithms)

    on = task
    algorithm, ledger = algorithm_and_ledger(build, config.privacy)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / CONFIG_JSON, resolved)
    atomic_write_text(out / CONFIG_TOML, to_toml(resolved))
    metrics: list[dict[str, Any]] = []
    rounds_done = 0
    wall_before = 0.0
    if checkpoint is not None:
        import torch

        algorithm.load_state_dict(checkpoint["algorithm"])
        ledger.load_state_dict(checkpoint["privacy"])
        torch.set_rng_state(checkpoint["torch_rng_state"])
        rounds_done = int(checkpoint["rounds_done"])
        metrics = list(checkpoint["metrics"])
        wall_before = float(checkpoint["wall_seconds"])
    # Lines written after the last checkpoint by an interrupted run are dropped here.
    atomic_write_text(out / METRICS, "".join(dumps_json(line) + "\n" for line in metrics))

    last = config.rounds if stop_after is None else min(config.rounds, max(stop_after, rounds_done))

    def wall() -> float:
        return wall_before + time.perf_counter() - started

    def evaluate(done: int, round_metrics: Mapping[str, Any]) -> dict[str, Any]:
        line = _evaluation_line(algorithm, done, round_metrics, wall(), ledger)
        metrics.append(line)
        handle.write(dumps_json(line) + "\n")
        handle.flush()
        return line

    def checkpoint_now(done: int) -> None:
        save_checkpoint(
            out, algorithm, rounds_done=done, metrics=metrics, config=resolved, wall=wall(), privacy=ledger
        )

    saved_at = rounds_done if checkpoint is not None else -1
    done, stopped = rounds_done, "rounds"
    with _progress_bar(progress, config.rounds, rounds_done, label or config.algorithm.name) as advance:
        with open(out / METRICS, "a", encoding="utf-8") as handle:
            for round_index in range(rounds_done, last):
                events = algorithm.round_events(round_index)
                over = ledger.groups_over_budget(events, algorithm.group_budgets())
                if over:  # per-group budgets (paper 001): those groups stop being sampled
                    algorithm.retire_groups(over)
                    events = algorithm.round_events(round_index)
                    if not events:
                        stopped = "budget"
                        break
                if ledger.would_exceed(events):
                    stopped = "budget"
                    break
                try:
                    round_metrics = algorithm.run_round(round_index)
                except (RuntimeError, ArithmeticError) as exc:
                    if not numerical_failure(exc):
                        raise
                    raise TrainingDiverged(
                        diverged_message(config, round_index + 1, saved_at, out, exc)
                    ) from None
                if not algorithm.parameters_finite():
                    raise TrainingDiverged(diverged_message(config, round_index + 1, saved_at, out, None))
                ledger.compose(events)  # once per round, never the history again
                done = round_index + 1
                text = ""
                if done % config.eval_every == 0 or done == config.rounds:
                    line = evaluate(done, round_metrics)
                    text = f"acc {line['accuracy']:.3f}  ε {line['epsilon']:.3g}"
                if config.checkpoint_every and done % config.checkpoint_every == 0:
                    checkpoint_now(done)
                    saved_at = done
                advance(text)
            if stopped == "budget" and (not metrics or metrics[-1]["round"] != done):
                evaluate(done, {})  # the last line states the ε the run stopped at
                saved_at = -1
    if saved_at != done:
        checkpoint_now(done)
    if stopped == "rounds" and done < config.rounds:
        return {"completed": False, "rounds_done": done, "rounds": config.rounds, "out_dir": str(out)}

    final = metrics[-1] if metrics else _evaluation_line(algorithm, done, {}, wall(), ledger)
    files = (
        write_plots(out, metrics, title=f"{config.algorithm.name} on {config.dataset.name}") if plots else []
    )
    summary: dict[str, Any] = {
        "algorithm": config.algorithm.name,
        "dataset": config.dataset.name,
        "rounds": config.rounds,
        "rounds_completed": done,
        "stopped": stopped,
        "final_accuracy": final["accuracy"],
        "epsilon": ledger.epsilon(),
        "delta": ledger.delta,
        "max_epsilon": config.privacy.max_epsilon,
        "privacy_unit": algorithm.privacy_unit,
        "accountant": ledger.kind,  # the resolved one ("pld" or "rdp"; None without a guarantee)
        "accountant_requested": config.privacy.accountant if ledger.private else None,
        "accounting": config.privacy.accounting if ledger.private else "none",
        "analysis": ledger.analysis(),
        "wall_seconds": wall(),
        "best_accuracy": max((m["accuracy"] for m in metrics), default=final["accuracy"]),
        "final_metrics": final,
        "num_clients": task.num_clients,
        "partition": config.partition.scheme,
        "model": config.model.name,
        "seed": config.seed,
        "params": config.algorithm.params.model_dump(mode="json"),
        "noise": _noise_levels(algorithm),
        **_group_privacy(algorithm, ledger),
        "completed": True,
        "out_dir": str(out),
        "files": [
            str(out / name) for name in (CONFIG_JSON, CONFIG_TOML, METRICS, CHECKPOINT, SUMMARY, *files)
        ],
    }
    atomic_write_json(out / SUMMARY, summary)
    return summary


def run_experiment(config: RunConfig, out_dir: str | Path, **kwargs: Any) -> dict[str, Any]:
    """Run (or resume) ``config`` in ``out_dir`` with ``[engine] threads`` torch threads (see
    :func:`_run_experiment` for the arguments); the caller's thread setting is restored afterwards."""
    import torch

    from ampfl.fl.config import DEFAULT_THREADS

    previous = torch.get_num_threads()
    torch.set_num_threads(config.engine.threads or DEFAULT_THREADS)
    try:
        return _run_experiment(config, out_dir, **kwargs)
    finally:
        torch.set_num_threads(previous)


def run_or_reuse(
    config: RunConfig, folder: Path, *, task: Task | None = None, label: str | None = None
) -> dict[str, Any]:
    """Reuse a finished run of the same configuration, continue an interrupted one, or start afresh.

    For callers that own their run folders (figure reproductions): a finished run whose ``config.json`` equals
    ``config`` is returned as is (its ``summary.json``); an interrupted one resumes from its checkpoint; any
    other content written by a run is deleted first (:func:`clear_run_folder`). No plots are written.
    """
    summary_path, config_path = folder / "summary.json", folder / "config.json"
    if summary_path.is_file() and config_path.is_file():
        same = json.loads(dumps_json(config_to_dict(config))) == json.loads(config_path.read_text("utf-8"))
        if same:
            summary: dict[str, Any] = json.loads(summary_path.read_text("utf-8"))
            return summary
    elif (folder / "checkpoint.pt").is_file():
        try:
            return run_experiment(config, folder, task=task, resume=True, plots=False, label=label)
        except ValueError:
            pass  # another configuration (e.g. a quick run): start again
    clear_run_folder(folder)
    return run_experiment(config, folder, task=task, plots=False, label=label)


def clear_run_folder(folder: str | Path) -> None:
    """Delete the files a run writes in ``folder`` (and the folder if that leaves it empty); nothing else.

    Used by the demo and the figure reproductions, which own their run folders and may run again.
    """
    path = Path(folder)
    for name in (CONFIG_JSON, CONFIG_TOML, METRICS, CHECKPOINT, SUMMARY, ACCURACY_PNG, EPSILON_PNG):
        (path / name).unlink(missing_ok=True)
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()


def save_checkpoint(
    out: Path,
    algorithm: Algorithm,
    *,
    rounds_done: int,
    metrics: list[dict[str, Any]],
    config: dict[str, Any],
    wall: float,
    privacy: RunAccountant,
) -> Path:
    """Write ``checkpoint.pt`` atomically (the previous one stays valid until the new one is complete)."""
    import torch

    state = {
        "format": _CHECKPOINT_FORMAT,
        "rounds_done": rounds_done,
        "algorithm": algorithm.state_dict(),
        "privacy": privacy.state_dict(),
        "metrics": list(metrics),
        "torch_rng_state": torch.get_rng_state(),
        "config": config,
        "wall_seconds": wall,
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return atomic_write_bytes(out / CHECKPOINT, buffer.getvalue())


def load_checkpoint(out: Path) -> dict[str, Any]:
    """Read the run folder's checkpoint (ValueError when there is none or it is unreadable)."""
    import torch

    path = out / CHECKPOINT
    if not path.is_file():
        raise ValueError(f"--resume: no checkpoint in {out} (expected {path.name}).")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # a damaged file: say so in one line
        raise ValueError(
            f"--resume: cannot read {path}: {type(exc).__name__}: {exc}".splitlines()[0]
        ) from None
    if not isinstance(state, dict) or state.get("format") != _CHECKPOINT_FORMAT:
        raise ValueError(f"--resume: {path} is not an ampfl checkpoint of format {_CHECKPOINT_FORMAT}.")
    return state


def _open_run_folder(out: Path, resolved: dict[str, Any], *, resume: bool) -> dict[str, Any] | None:
    if resume:
        checkpoint = load_checkpoint(out)
        changed = _changed_keys(checkpoint["config"], resolved) - RESUMABLE_CHANGES
        if changed:
            raise ValueError(
                f"--resume: the config differs from the one of {out} in {', '.join(sorted(changed))}; "
                "only rounds, eval_every and checkpoint_every may change."
            )
        done = int(checkpoint["rounds_done"])
        if done > int(resolved["rounds"]):
            raise ValueError(
                f"--resume: rounds must be at least the {done} rounds already done. "
                f"Found {resolved['rounds']}."
            )
        return checkpoint
    used = [name for name in (CONFIG_JSON, METRICS, CHECKPOINT, SUMMARY) if (out / name).exists()]
    if used:
        raise ValueError(
            f"{out} already holds a run ({used[0]}); pass --resume to continue it or choose another --out."
        )
    return None


def _changed_keys(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> set[str]:
    changed: set[str] = set()
    for key in set(old) | set(new):
        a, b = old.get(key), new.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            changed |= _changed_keys(a, b, prefix=f"{name}.")
        elif json.dumps(a, sort_keys=True, default=str) != json.dumps(b, sort_keys=True, default=str):
            changed.add(name)
    return changed


#: Attributes through which an algorithm exposes the noise it actually uses (after any calibration):
#: the noise multiplier z and the absolute std σ (z times the sensitivity).
NOISE_ATTRIBUTES = ("noise_multiplier", "noise_std")


def _noise_levels(algorithm: Algorithm) -> dict[str, float]:
    return {name: float(getattr(algorithm, name)) for name in NOISE_ATTRIBUTES if hasattr(algorithm, name)}


def _scalar(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return float(value)


def _evaluation_line(
    algorithm: Algorithm, done: int, round_metrics: Mapping[str, Any], wall: float, ledger: RunAccountant
) -> dict[str, Any]:
    evaluation = algorithm.evaluate()
    if "accuracy" not in evaluation:
        raise ValueError(f"{type(algorithm).__name__}.evaluate() must return 'accuracy'.")
    line: dict[str, Any] = {"round": done}
    line.update({key: _scalar(value) for key, value in round_metrics.items()})
    line.update({key: _scalar(value) for key, value in evaluation.items()})
    line.update({"epsilon": ledger.epsilon(), "delta": ledger.delta, "wall_seconds": wall})
    line.update(_group_privacy(algorithm, ledger))
    return line


def _group_privacy(algorithm: Algorithm, ledger: RunAccountant) -> dict[str, Any]:
    """``epsilon_by_group`` and ``budget_by_group`` (keys: group ids) for per-group algorithms (paper 001)."""
    budgets = algorithm.group_budgets()
    if not budgets:
        return {}
    spent = ledger.epsilon_by_group()
    return {
        "epsilon_by_group": {str(g): spent.get(g, 0.0) for g in sorted(budgets)},
        "budget_by_group": {str(g): budgets[g] for g in sorted(budgets)},
    }


@contextmanager
def _progress_bar(enabled: bool, total: int, completed: int, name: str) -> Iterator[Any]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
    )
    with Progress(*columns, console=Console(stderr=True), disable=not enabled, transient=False) as bar:
        task_id = bar.add_task(name, total=total, completed=completed, status="")

        def advance(status: str) -> None:
            if status:
                bar.update(task_id, advance=1, status=status)
            else:
                bar.update(task_id, advance=1)

        yield advance
