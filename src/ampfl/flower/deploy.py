"""``ampfl deploy``'s Python API: one run of a ``ampfl run`` config on a Flower federation.

:func:`deploy` writes the run folder's ``config.json`` and ``config.toml`` (as ``ampfl run`` does), a Flower
app folder (``pyproject.toml`` naming :mod:`ampfl.flower.server_app` and :mod:`ampfl.flower.client_app`,
with the resolved config and the run folder in ``[tool.flwr.app.config]``), then either starts a local
federation (:class:`~ampfl.flower.local.LocalFederation`) or uses ``superlink``, and runs
``flwr run APP ampfl --stream``.
The ServerApp writes ``metrics.jsonl`` (released), ``diagnostics.jsonl`` (NOT differentially private: keep it
on the trusted side), ``ledger.sqlite``, ``summary.json`` and the plots into the run folder;
the logs of ``flwr run``, the SuperLink and the SuperNodes go to ``logs/``. The local federation is torn down
in a ``finally`` (also on Ctrl-C and on failure).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampfl.fl.run.lock import acquire, release
from ampfl.fl.run.release import TIMING
from ampfl.flower.common import (
    CONFIG_KEY,
    OUT_KEY,
    RESUME_KEY,
    SECAGG_KEY,
    TOKEN_KEY,
    check_deployable,
    encode_config,
)
from ampfl.flower.local import LocalFederation, flower_env, flwr_run

if TYPE_CHECKING:
    from ampfl.fl.config import RunConfig

#: Default seconds ``flwr run`` may take before it is stopped.
RUN_TIMEOUT = 3600.0
#: Memory of one idle local SuperNode: ``flower-supernode`` and its ``flower-superexec``, PSS (flwr 1.41: 94
#: + 88 MB; ``bench/deploy.py --idle-nodes 16``).
NODE_MEMORY_MB = 190
#: Memory of one message process while many run at once (``flwr-clientapp`` with torch, ampfl and the node's
#: shard, logreg on digits): 207 MB private after the imports plus Flower's runtime and the training (peak
#: RSS 381 MB alone; ``bench/deploy.py``). A bigger model or shard needs more.
MESSAGE_MEMORY_MB = 280
#: Most SuperNodes a local federation starts whatever the memory: each is two processes, a round adds one per
#: asked node, and bring-up costs about 3.5 CPU-s per node.
MAX_LOCAL_CLIENTS = 256


def available_memory_mb() -> float | None:
    """This machine's ``MemAvailable`` in MB (None where ``/proc/meminfo`` cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def local_capacity(asked: int | None, available_mb: float | None) -> int:
    """Most SuperNodes a local federation fits in ``available_mb`` when ``asked`` nodes train at once (None:
    every node): N · :data:`NODE_MEMORY_MB` + min(asked, N) · :data:`MESSAGE_MEMORY_MB` ≤ available, and
    N ≤ :data:`MAX_LOCAL_CLIENTS` (that alone where the memory is unknown)."""
    if available_mb is None:
        return MAX_LOCAL_CLIENTS
    if asked is None:
        most = available_mb // (NODE_MEMORY_MB + MESSAGE_MEMORY_MB)
    else:
        together = min(asked, available_mb // (NODE_MEMORY_MB + MESSAGE_MEMORY_MB))
        most = (available_mb - together * MESSAGE_MEMORY_MB) // NODE_MEMORY_MB
    return int(max(1, min(MAX_LOCAL_CLIENTS, most)))


def check_local_size(num_clients: int, asked: int | None, available_mb: float | None) -> None:
    """ValueError (one line naming ``partition.num_clients``) when ``num_clients`` local SuperNodes, ``asked``
    of them training at once (None: all), do not fit in ``available_mb`` (:func:`local_capacity`)."""
    most = local_capacity(asked, available_mb)
    if num_clients > most:
        memory = "" if available_mb is None else f" in the {available_mb / 1024:.1f} GiB available here"
        raise ValueError(
            f"partition.num_clients: a local federation runs one SuperNode per client ({NODE_MEMORY_MB} MB "
            f"each, plus {MESSAGE_MEMORY_MB} MB per node training at once); at most {most} fit{memory} "
            f"(use --superlink for more). Found {num_clients}."
        )


_APP_TOML = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "ampfl-deploy"
version = "0.1.0"
description = "ampfl algorithms as a Flower app (written by ampfl deploy)"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "ampfl"

[tool.flwr.app.components]
serverapp = "ampfl.flower.server_app:app"
clientapp = "{clientapp}"

[tool.flwr.app.config]
{config_key} = "{config}"
{out_key} = {out}
{resume_key} = {resume}
reply-timeout = {reply_timeout}
{secagg_key} = "{secagg}"
{token_key} = "{token}"
"""


def write_app(
    app_dir: Path,
    resolved: dict[str, Any],
    out: Path,
    *,
    resume: bool = False,
    reply_timeout: float = 600.0,
    secure_aggregation: str = "none",
    token: str = "",
) -> Path:
    """The Flower app folder of one run (module docstring); SecAgg+ runs :mod:`ampfl.flower.secagg`'s
    ClientApp."""
    app_dir.mkdir(parents=True, exist_ok=True)
    text = _APP_TOML.format(
        config_key=CONFIG_KEY,
        config=encode_config(resolved),
        out_key=OUT_KEY,
        out=json.dumps(str(out.resolve())),
        resume_key=RESUME_KEY,
        resume="true" if resume else "false",
        reply_timeout=float(reply_timeout),
        clientapp="ampfl.flower."
        + ("secagg:app" if secure_aggregation == "secaggplus" else "client_app:app"),
        secagg_key=SECAGG_KEY,
        secagg=secure_aggregation,
        token_key=TOKEN_KEY,
        token=token,
    )
    (app_dir / "pyproject.toml").write_text(text, encoding="utf-8")
    return app_dir


def validate_run(config: RunConfig) -> None:
    """Build the task, the algorithm and the run's accountant exactly as ``ampfl run`` does, before any
    process starts, so a config ``ampfl run`` refuses fails here with the same one-line ValueError
   ."""
    from ampfl.fl.data import DataUnavailableError
    from ampfl.fl.run.experiment import build_calibrated, build_task

    try:
        task = build_task(config)
    except DataUnavailableError as exc:
        raise ValueError(f"dataset {config.dataset.name!r} is not available: {exc}") from None
    build_calibrated(config, task)


def server_notice(config: RunConfig, secure_aggregation: str) -> str | None:
    """The one line ``ampfl deploy`` prints at start about what the server sees (None under SecAgg+)."""
    if secure_aggregation != "none":
        return None
    from ampfl.fl.algorithms import ALGORITHMS

    name = config.algorithm.name
    if ALGORITHMS[name].noised_on_client:
        return (
            "ampfl deploy: without --secure-aggregation secaggplus the server sees every client's noised "
            f"public part and who checked in; {name}'s client-side noise still covers the server "
            "(docs/threat_model.md)."
        )
    return (
        "ampfl deploy: without --secure-aggregation secaggplus the server sees every client update, so "
        f"epsilon does not protect against the server ({name}; docs/threat_model.md)."
    )


def deploy(
    config: RunConfig,
    out_dir: str | Path,
    *,
    superlink: str | None = None,
    timeout: float = RUN_TIMEOUT,
    resume: bool = False,
    secure_aggregation: str = "none",
    announce: Callable[[str], None] | None = None,
    progress: bool = False,
    tls: bool = False,
    root_certificates: Path | None = None,
) -> dict[str, Any]:
    """Run ``config`` on Flower and return the summary (``summary.json``, plus bring-up/teardown seconds).

    Args:
        config: a validated run configuration (``ampfl.fl.config.load_config``).
        out_dir: the run folder (refused when it already holds a run).
        superlink: ``HOST:PORT`` of an existing SuperLink (insecure); None starts a local federation.
        timeout: seconds ``flwr run`` may take.
        resume: continue the run folder's last checkpoint (written after every round) with the same config;
            the ledger keeps every released round and drops the rows of a round that was never released.
        secure_aggregation: ``none`` or ``secaggplus`` (DP-DSGD-RP, DP-FedAvg with Poisson sampling: every
            node adds its noise share before masking, the server decodes only the noised sum and ε protects
            against it too; :mod:`ampfl.flower.secagg`, :mod:`ampfl.flower.noise_shares`).
        announce: called once, after the checks and before anything starts, with :func:`server_notice`'s
            line (without SecAgg+).
        tls: a local federation over TLS on loopback with SuperNode authentication (a throw-away CA, server
            certificate and node keys, :mod:`ampfl.flower.tls`) instead of ``--insecure``.
        root_certificates: with ``superlink``: connect with TLS, verifying the SuperLink against this CA.
        progress: show a progress bar on stderr (rounds done, accuracy, ε, read from ``metrics.jsonl``).

    Raises:
        ValueError: an algorithm or setting deploy does not support, or a used run folder (one line).
        RuntimeError: the Flower run failed, or a SuperLink/SuperNode process died (checked every
            half second; the message names the process and its log; the run keeps its last checkpoint).
    """
    from ampfl.fl.config import config_to_dict
    from ampfl.fl.run.experiment import CONFIG_JSON, METRICS, SUMMARY
    from ampfl.flower.secagg import SECURE_AGGREGATION, check_secure_aggregation

    if secure_aggregation in SECURE_AGGREGATION:  # else the next check names the flag
        check_deployable(config, secure_aggregation)  # an algorithm that cannot deploy says why first
    check_secure_aggregation(secure_aggregation, config.algorithm.name, config.partition.num_clients)
    validate_run(config)
    if superlink is None:  # a fixed-size cohort asks cohort_size nodes a round; the other samplers every node
        params = config.algorithm.params
        fixed = getattr(params, "client_sampling", None) == "fixed" and secure_aggregation == "none"
        cohort_size = getattr(params, "cohort_size", None)
        asked = int(cohort_size) if fixed and cohort_size is not None else None
        check_local_size(config.partition.num_clients, asked, available_memory_mb())
    out = Path(out_dir)
    resolved = config_to_dict(config)
    if resume:
        _check_resumable(out, resolved)
    else:
        used = [name for name in (CONFIG_JSON, METRICS, SUMMARY) if (out / name).exists()]
        if used:
            raise ValueError(f"{out} already holds a run ({used[0]}); pass --resume or choose another --out.")
    notice = server_notice(config, secure_aggregation)
    if announce is not None and notice is not None:
        announce(notice)
    token = acquire(out)  # one writer per run folder: a second deploy or run into it fails in one line
    try:
        return _deploy(
            config,
            out,
            resolved,
            token,
            superlink,
            timeout,
            resume,
            secure_aggregation,
            progress,
            tls,
            root_certificates,
        )
    finally:
        release(out, token)


def _deploy(
    config: RunConfig,
    out: Path,
    resolved: dict[str, Any],
    token: str,
    superlink: str | None,
    timeout: float,
    resume: bool,
    secure_aggregation: str,
    progress: bool,
    tls: bool = False,
    root_certificates: Path | None = None,
) -> dict[str, Any]:
    """:func:`deploy` once the checks passed and the folder's lock is held (``token``)."""
    from ampfl.fl.config import to_toml
    from ampfl.fl.run.experiment import CONFIG_JSON, CONFIG_TOML, SUMMARY
    from ampfl.io import atomic_write_json, atomic_write_text

    marker = f"{out.resolve()}#{token}"  # this run's processes only (the watchdog sweeps by it)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    atomic_write_json(out / CONFIG_JSON, resolved)
    atomic_write_text(out / CONFIG_TOML, to_toml(resolved))
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ampfl-flower-") as tmp:
        app_dir = write_app(
            Path(tmp) / "app",
            resolved,
            out,
            resume=resume,
            secure_aggregation=secure_aggregation,
            token=token,
        )
        begun = time.perf_counter()
        if superlink is None:
            federation = LocalFederation(
                config.partition.num_clients,
                logs,
                Path(tmp) / "flwr-home",
                marker=marker,
                state_dir=out / "node-state",
                tls_dir=Path(tmp) / "tls" if tls else None,
            )
            try:
                with _progress(progress, out, config.rounds, federation) as show:
                    federation.start()
                    timings["bring_up_seconds"] = federation.started_seconds

                    def on_poll() -> None:
                        dead = federation.dead()
                        if dead:
                            raise RuntimeError(
                                f"a Flower process died: {dead[0]}; the run folder keeps its last "
                                "checkpoint (--resume continues it)"
                            )
                        show()

                    code = flwr_run(app_dir, federation.env, logs / "flwr-run.log", timeout, on_poll=on_poll)
            finally:
                stop_begun = time.perf_counter()
                federation.stop()
                timings["teardown_seconds"] = time.perf_counter() - stop_begun
        else:
            env = flower_env(
                Path(tmp) / "flwr-home", superlink, marker=marker, root_certificates=root_certificates
            )
            with _progress(progress, out, config.rounds) as show:
                code = flwr_run(app_dir, env, logs / "flwr-run.log", timeout, on_poll=show)
        timings["deploy_seconds"] = time.perf_counter() - begun
    if code != 0 or not (out / SUMMARY).is_file():
        raise RuntimeError(f"the Flower run failed (flwr run exit code {code}); see {logs / 'flwr-run.log'}")
    summary: dict[str, Any] = json.loads((out / SUMMARY).read_text(encoding="utf-8"))
    timing_path = out / TIMING
    timing = json.loads(timing_path.read_text(encoding="utf-8")) if timing_path.is_file() else {}
    atomic_write_json(timing_path, {**timing, **timings})
    if summary.get("protects_against") == []:  # no guarantee: the launcher's timings are reported too
        summary.update(timings)
        atomic_write_json(out / SUMMARY, summary)
    return summary


@contextmanager
def _progress(
    enabled: bool, out: Path, rounds: int, federation: LocalFederation | None = None
) -> Iterator[Callable[[], None]]:
    """A rich progress bar on stderr fed from the run folder's ``metrics.jsonl`` (released lines only); with
    a local ``federation``, node discovery until the first round ("n of N SuperNodes connected")."""
    from ampfl.fl.run.experiment import progress

    metrics = out / "metrics.jsonl"
    with progress(enabled) as bar:
        task = bar.add_task("flower", total=rounds, status="starting the federation")

        def show() -> None:
            try:
                lines = metrics.read_text(encoding="utf-8").splitlines() if metrics.exists() else []
                last = json.loads(lines[-1]) if lines else None
            except (OSError, ValueError):  # a line being written
                return
            if last is None:  # the ServerApp has not released a round yet
                status = "waiting for the first round"
                if federation is not None:
                    status = f"{federation.connected()} of {federation.num_clients} SuperNodes connected"
                bar.update(task, status=status)
                return
            accuracy, epsilon = last.get("accuracy", math.nan), last.get("epsilon", math.nan)
            status = f"acc {accuracy:.3f}  ε {epsilon:.3g}"
            bar.update(task, completed=int(last["round"]), status=status)

        yield show
        show()


def _check_resumable(out: Path, resolved: dict[str, Any]) -> None:
    from ampfl.fl.run.experiment import CHECKPOINT, CONFIG_JSON, SUMMARY
    from ampfl.io import dumps_json

    if (out / SUMMARY).exists():
        raise ValueError(f"--resume: the run in {out} is complete ({SUMMARY}).")
    if not (out / CHECKPOINT).is_file() or not (out / CONFIG_JSON).is_file():
        raise ValueError(f"--resume: no checkpoint in {out} (expected {CHECKPOINT}).")
    saved = json.loads((out / CONFIG_JSON).read_text(encoding="utf-8"))
    if saved != json.loads(dumps_json(resolved)):
        raise ValueError(f"--resume: the config differs from the one of {out}.")
