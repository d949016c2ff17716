"""One training run in its run folder: rounds, metrics, checkpoints, summary and plots.

A run folder holds:

- ``config.json`` and ``config.toml``: the resolved configuration (every default filled in; the TOML file
  can be given back to ``ampfl run``);
- ``metrics.jsonl`` (released): one JSON object per evaluated round: ``round`` (rounds done), the metrics of
  released models on held-out data (the algorithm's ``released_metrics``, always ``accuracy`` for a global
  model), ``epsilon`` (composed so far, at the run's δ), ``delta`` and ``wall_seconds``;
- ``diagnostics.jsonl`` (NOT differentially private, keep it on the trusted side): a header line, then per
  evaluated round the statistics of the private training data (participants, examples, train loss, clipped
  fraction, accuracy on clients' own data, ...): :mod:`ampfl.fl.run.release`;
- ``checkpoint.pt`` (private): the latest checkpoint (``torch.save`` of the algorithm's ``state_dict()``, the
  run accountant's ``state_dict()``, the privacy key, the number of rounds done, the lines so far, the global
  torch RNG state and the configuration), replaced atomically;
- ``summary.json`` (released) and the plots ``accuracy.png`` and ``epsilon.png`` at the end; the summary
  states ``protects_against``, ``participation_hidden_from``, ``neighbouring`` and ``privacy_randomness``.

docs/threat_model.md has the table of every file and whether ε covers it. The privacy randomness comes from
a per-run secret key (``Algorithm.privacy_key``), kept only in the checkpoint, unless ``[privacy]
reproducible = true``.

Privacy (``ampfl.fl.privacy.run_accountant``): the run owns one accountant (``[privacy] accountant``). Before
round r it asks the algorithm for the round's events, stops if they would push ε above ``[privacy]
max_epsilon`` (``stopped = "budget"`` in the summary), runs the round and composes its events once; ε at every
evaluation is read from the accountant, never recomputed from the history. The ledger's operations run in
order on a thread of their own (:mod:`ampfl.fl.privacy.ledger_thread`), so a reading overlaps the next round's
training; the numbers are those of the sequential loop bit for bit. A non-private run (FedAvg, zero noise)
reports ε = ∞ (``1e999`` in JSON) and ``privacy_unit = null``.

Every file is written atomically (temporary file + ``os.replace``), so a run stopped at any point resumes from
its last checkpoint; because every random draw of round r is derived from ``(seed, r, role)``, the resumed run
ends bit-identical to an uninterrupted one.

Checkpoints are loaded with ``torch.load(..., weights_only=False)``: resume only run folders you trust.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampfl.fl.config import RunConfig, config_to_dict, to_toml
from ampfl.fl.run.folder import (
    CHECKPOINT,
    CONFIG_JSON,
    CONFIG_TOML,
    METRICS,
    RESUMABLE_CHANGES,
    SUMMARY,
    clear_run_folder,
    load_checkpoint,
    open_run_folder,
    save_checkpoint,
)
from ampfl.fl.run.lines import evaluation_line
from ampfl.fl.run.loop import RoundOutcome, RunState, finish_run, restore, run_rounds
from ampfl.fl.run.release import DIAGNOSTICS, TIMING
from ampfl.fl.run.summary import run_threat_model
from ampfl.io import dumps_json, write_text_if_changed

__all__ = [  # the run folder's names and checkpoint functions are re-exported from ampfl.fl.run.folder
    "CHECKPOINT",
    "CONFIG_JSON",
    "CONFIG_TOML",
    "DIAGNOSTICS",
    "METRICS",
    "RESUMABLE_CHANGES",
    "SUMMARY",
    "build_algorithm",
    "build_calibrated",
    "build_engine",
    "build_task",
    "clear_run_folder",
    "construct_algorithm",
    "load_checkpoint",
    "run_experiment",
    "run_or_reuse",
    "run_privacy_key",
    "save_checkpoint",
    "seeded_without_guarantee",
]

if TYPE_CHECKING:
    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.engine.vectorised import Engine
    from ampfl.fl.privacy.run_accountant import RunAccountant
    from ampfl.fl.task import Task

Events = Sequence[tuple["PrivacyEvent", int]]


def build_task(config: RunConfig, *, model: Any = None, dataset: Any = None) -> Task:
    """Load the dataset and split it into clients as the config says.

    Args:
        config: the run config (``[dataset]``, ``[partition]``, ``[model]``).
        model: a model factory of the caller's (``(*, input_shape, num_classes, **options) -> nn.Module``)
            used instead of ``[model]``'s name or factory; ``[model] options`` are passed to it.
        dataset: the caller's data instead of ``[dataset]``: a :class:`~ampfl.fl.data.Dataset` or a mapping
            of arrays ``x_train, y_train, x_test, y_test`` (optional ``client_train``).

    Raises:
        ValueError: one line naming the key (a natural partition the data lacks, a client count that
            contradicts it, a model that is not functional).
    """
    from collections.abc import Mapping as _Mapping

    from ampfl.fl.data import Dataset, load_dataset, partition_clients
    from ampfl.fl.data.user import dataset_from_arrays
    from ampfl.fl.task import Task

    if dataset is None:
        data = load_dataset(config.dataset.name, path=config.dataset.path, seed=config.seed)
    elif isinstance(dataset, Dataset):
        data = dataset
    elif isinstance(dataset, _Mapping):
        data = dataset_from_arrays(config.dataset.name, dataset)
    else:
        raise ValueError(f"dataset must be a Dataset or a mapping of arrays. Found {type(dataset).__name__}.")
    part = config.partition
    natural = data.natural_partition()
    if part.scheme == "natural" or (natural is not None and "scheme" not in part.model_fields_set):
        if natural is None:
            raise ValueError(
                f"partition.scheme = 'natural' needs a dataset with a client partition (client_train); "
                f"dataset {data.name!r} has none"
            )
        if "num_clients" in part.model_fields_set and part.num_clients != len(natural):
            raise ValueError(
                f"partition.num_clients ({part.num_clients}) contradicts the dataset's natural partition "
                f"({len(natural)} clients in client_train)"
            )
        indices: Any = natural
    else:
        indices = partition_clients(
            data.y_train,
            scheme=part.scheme,
            num_clients=part.num_clients,
            seed=config.seed,
            alpha=part.alpha,
            labels_per_client=part.labels_per_client,
            samples_per_client=part.samples_per_client,
        )
    reference = config.model.reference
    if model is not None:
        if not callable(model):
            raise ValueError(f"model must be a callable factory of nn.Modules. Found {type(model).__name__}.")
        from ampfl.fl.models import register_model

        reference = f"python:{getattr(model, '__qualname__', type(model).__name__)}:{id(model)}"
        register_model(reference, model, replace=True)
    options = dict(config.model.options)
    task = Task(dataset=data, client_indices=indices, model=reference, model_options=options)
    _check_model(task)
    return task


def _check_model(task: Task) -> None:
    """Build the task's model once (a user's model is refused here, before any folder is written)."""
    from ampfl.fl.models import BUILT_IN, MODELS, build_model

    if task.model in BUILT_IN or (":" not in task.model and task.model not in MODELS):
        return  # a built-in, or a name the algorithm builds itself (the split model) or refuses
    import torch

    with torch.random.fork_rng(devices=[]):
        build_model(
            task.model,
            input_shape=task.dataset.input_shape,
            num_classes=task.dataset.num_classes,
            **task.model_options,
        )


def build_engine(config: RunConfig) -> Engine:
    """The engine described by ``[engine]`` (engine defaults for unset options)."""
    from ampfl.fl.engine.vectorised import Engine, EngineOptions

    settings = config.engine.model_dump(exclude={"threads"})  # threads: set around the run, not the engine
    options = {key: value for key, value in settings.items() if value is not None}
    return Engine(EngineOptions(**options))


def build_algorithm(
    config: RunConfig,
    task: Task,
    *,
    algorithms: Mapping[str, type[Algorithm]] | None = None,
    privacy_key: int | None = None,
) -> Algorithm:
    """Instantiate the configured algorithm on ``task``, its noise calibrated (``privacy_key``: the root of
    its privacy randomness; None: the seed under ``[privacy] reproducible``, else a fresh secret key)."""
    return build_calibrated(config, task, algorithms=algorithms, privacy_key=privacy_key)[0]


def build_calibrated(
    config: RunConfig,
    task: Task,
    *,
    algorithms: Mapping[str, type[Algorithm]] | None = None,
    privacy_key: int | None = None,
) -> tuple[Algorithm, RunAccountant]:
    """The configured algorithm on ``task`` and the run's accountant: the algorithm built once, then its
    target ε calibrated by the run's accountant (:func:`ampfl.fl.privacy.calibration.calibrate_algorithm`)."""
    from ampfl.fl.privacy.calibration import calibrate_algorithm

    algorithm = construct_algorithm(config, task, algorithms=algorithms, privacy_key=privacy_key)
    return algorithm, calibrate_algorithm(algorithm, config.privacy)


def construct_algorithm(
    config: RunConfig,
    task: Task,
    *,
    algorithms: Mapping[str, type[Algorithm]] | None = None,
    privacy_key: int | None = None,
) -> Algorithm:
    """The configured algorithm's constructor on ``task``; a target ε is not calibrated yet (its
    ``noise_targets``: :func:`build_calibrated` does it)."""
    if algorithms is None:
        from ampfl.fl.algorithms import ALGORITHMS

        algorithms = ALGORITHMS
    cls = algorithms[config.algorithm.name]
    return cls(
        config.algorithm.params,
        task,
        seed=config.seed,
        engine=build_engine(config),
        privacy=config.privacy,
        privacy_key=privacy_key,
    )


def run_privacy_key(config: RunConfig, checkpoint: Mapping[str, Any] | None) -> int:
    """The privacy key of a run: the checkpoint's on resume, the seed under ``[privacy] reproducible``, else a
    fresh key from the operating system (:func:`seeded_without_guarantee` then keys a run without a guarantee
    by its seed).

    Raises:
        ValueError: resuming a checkpoint that holds no key (written before runs had one: its privacy
            randomness followed the public seed) of a run without ``[privacy] reproducible``.
    """
    from ampfl.fl.algorithms.base import new_privacy_key

    if checkpoint is not None:
        if "privacy_key" not in checkpoint:
            if not config.privacy.reproducible:
                raise ValueError(
                    "privacy.reproducible: the checkpoint holds no privacy key, so its privacy randomness "
                    "followed the public seed and the run cannot go on as a secret one; start afresh"
                )
            return config.seed
        return int(checkpoint["privacy_key"])
    return config.seed if config.privacy.reproducible else new_privacy_key()


def seeded_without_guarantee(key: int, config: RunConfig, private: bool, fresh: bool) -> int | None:
    """The key a fresh run without a privacy guarantee (ε = ∞) must use instead of ``key``: its seed, so
    that ``seed`` reproduces it; ``None`` when ``key`` stands (a private run, a resume, or already the
    seed)."""
    if private or not fresh or key == config.seed:
        return None
    return int(config.seed)


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
    model: Any = None,
    dataset: Any = None,
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
        model: a model factory of the caller's, instead of ``[model]`` (:func:`build_task`).
        dataset: the caller's data (a ``Dataset`` or a mapping of arrays), instead of ``[dataset]``.
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
    checkpoint = open_run_folder(out, resolved, resume=resume)
    # Data, algorithm and accountant first: a config that cannot start leaves no run folder behind.
    if task is None:
        overrides = {k: v for k, v in (("model", model), ("dataset", dataset)) if v is not None}
        task = build_task(config, **overrides)
    key = run_privacy_key(config, checkpoint)
    algorithm, ledger = build_calibrated(config, task, algorithms=algorithms, privacy_key=key)
    seeded = seeded_without_guarantee(key, config, ledger.private, checkpoint is None)
    if seeded is not None:  # no guarantee: every draw follows the seed, so the run reproduces
        algorithm, ledger = build_calibrated(config, task, algorithms=algorithms, privacy_key=seeded)
    out.mkdir(parents=True, exist_ok=True)
    # left untouched on a resume unless rounds/eval_every/checkpoint_every changed (a full disk cannot hit it)
    write_text_if_changed(out / CONFIG_JSON, dumps_json(resolved, indent=2) + "\n")
    write_text_if_changed(out / CONFIG_TOML, to_toml(resolved))
    state = RunState() if checkpoint is None else restore(checkpoint, algorithm, ledger)
    last = config.rounds if stop_after is None else min(config.rounds, max(stop_after, state.rounds_done))
    backend = SimulatorBackend(algorithm)
    state.wall_before += time.perf_counter() - started  # set-up (data, calibration) counts in the wall
    with progress_bar(progress, config.rounds, state.rounds_done, label or config.algorithm.name) as advance:
        state = run_rounds(
            config, algorithm, ledger, backend, out, state, resolved=resolved, last=last, progress=advance
        )
    done, stopped = state.rounds_done, state.stopped
    if stopped == "rounds" and done < config.rounds:
        return {"completed": False, "rounds_done": done, "rounds": config.rounds, "out_dir": str(out)}

    return finish_run(
        config,
        algorithm,
        ledger,
        backend,
        state,
        out,
        engine="simulator",
        threats=run_threat_model(algorithm, private=ledger.private),
        num_clients=task.num_clients,
        files=(CONFIG_JSON, CONFIG_TOML, METRICS, DIAGNOSTICS, TIMING, CHECKPOINT, SUMMARY),
        plots=plots and config.plots,
    )


class SimulatorBackend:
    """The simulator's round (:class:`ampfl.fl.run.loop.RoundBackend`): ``Algorithm.run_round`` in this
    process, vectorised over the cohort. Every draw comes from the run's key, so a round re-run from a
    checkpoint is bit-identical (``replayable``); the release is the round's own update (nothing is shown
    before the loop writes a line)."""

    replayable = True

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm

    def budgeted(self, events: Events) -> list[tuple[PrivacyEvent, int]]:
        return list(events)

    def collect(self, round_index: int, events: Events) -> RoundOutcome:
        return RoundOutcome(list(events), dict(self.algorithm.run_round(round_index)))

    def commit(self, round_index: int, outcome: RoundOutcome) -> None:
        pass

    def release(self, outcome: RoundOutcome) -> None:
        pass

    def evaluation_line(self, done: int, round_metrics: Mapping[str, Any]) -> dict[str, Any]:
        return evaluation_line(self.algorithm, done, round_metrics)

    def guard(self) -> None:
        pass


def run_experiment(config: RunConfig, out_dir: str | Path, **kwargs: Any) -> dict[str, Any]:
    """Run (or resume) ``config`` in ``out_dir`` with ``[engine] threads`` torch threads (see
    :func:`_run_experiment` for the arguments); the caller's thread setting is restored afterwards. The run
    holds the folder's lock (:mod:`ampfl.fl.run.lock`) while it runs."""
    import torch

    from ampfl.fl.config import DEFAULT_THREADS
    from ampfl.fl.run.lock import locked

    previous = torch.get_num_threads()
    torch.set_num_threads(config.engine.threads or DEFAULT_THREADS)
    try:
        with locked(out_dir):  # one writer per run folder (a second run into it fails in one line)
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


def progress(enabled: bool) -> Any:
    """The rich progress bar of ``run`` and ``deploy`` on stderr: name, bar, rounds done of all, time
    elapsed, and a ``status`` field (unstarted: enter it as a context manager)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
    )
    return Progress(*columns, console=Console(stderr=True), disable=not enabled, transient=False)


@contextmanager
def progress_bar(enabled: bool, total: int, completed: int, name: str) -> Iterator[Any]:
    """A progress bar of ``total`` steps named ``name`` (``completed`` already done; nothing shown unless
    ``enabled``); yields ``advance(status)``, one step with an optional status text."""
    with progress(enabled) as bar:
        task_id = bar.add_task(name, total=total, completed=completed, status="")

        def advance(status: str) -> None:
            if status:
                bar.update(task_id, advance=1, status=status)
            else:
                bar.update(task_id, advance=1)

        yield advance
