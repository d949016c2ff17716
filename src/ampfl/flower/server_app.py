"""The ServerApp of ``ampfl deploy``: the simulator's round loop over a Flower Grid, with a privacy ledger.

Its own Grid loop (Flower's built-in ``FedAvg`` strategy fails when a client declines). For each round r, in
the order of ``ampfl.fl.run``:

1. the algorithm's events of round r (:meth:`~ampfl.fl.algorithms.base.Algorithm.round_events`); stop
   (``stopped = "budget"``) if the run-level accountant would exceed ``[privacy] max_epsilon`` (under SecAgg+
   noise shares on the worst case of dropouts, :func:`ampfl.flower.noise_shares.worst_case_events`);
   clients whose own ε would exceed it are no longer asked (:meth:`PrivacyLedger.eligible`);
2. the cohort: the simulator's sampler, seeded as in ``ampfl run`` (``Algorithm.rng(r, ROLE_SAMPLING)``),
   restricted to the eligible clients; for DP-DSGD-RP and MS-PAFL (and DP-FedAvg under SecAgg+) every
   eligible client (each flips its own coin on its node);
3. one ``train`` message to each node of the cohort; replies that are empty, failed or late (``reply-timeout``
   of the run config, default 600 s) are dropped. With the run config ``secure-aggregation = "secaggplus"``
   one SecAgg+ round instead (:func:`ampfl.flower.secagg.secure_sum`): for DP-DSGD-RP and DP-FedAvg every
   asked node adds its share of the Gaussian noise before masking, so the server decodes only the noised sum
   (:mod:`ampfl.flower.noise_shares`); a round where shares dropped out is accounted at the realised noise
   multiplier;
4. the round's events committed to ``ledger.sqlite`` and composed by the run's accountant, **then** the
   aggregate released: FedAvg averages the local models (000 Eq. 3); DP-FedAvg sums the clipped updates and
   adds the Gaussian noise in :meth:`DPFedAvg.server_update`, from a generator seeded by the operating system
   (the run seed is in the config every client holds, so noise drawn from it could be subtracted);
   DP-DSGD-RP: :meth:`DPDSGDRandomParticipation.server_update`; under noise shares both apply the decoded
   noised sum (``apply_noised_sum``) and add nothing; MS-PAFL: :meth:`MSPAFL.aggregate_public` of the
   clients' noised public parts;
5. ``checkpoint.pt`` (the simulator's checkpoint) before the new model is shown anywhere, then every
   ``eval_every`` rounds one line split by :func:`ampfl.fl.release.split_line`: ``metrics.jsonl`` gets the
   released part (test accuracy of the global model, for MS-PAFL of the public model, ε, δ, wall time) and
   ``diagnostics.jsonl`` (header :data:`~ampfl.fl.release.DIAGNOSTICS_HEADER`, NOT differentially private)
   the rest (participants, asked, examples, train loss, clipped fraction, completed nodes, realised noise
   multiplier). With the run config ``resume = true`` the loop continues from the checkpoint
   (:meth:`PrivacyLedger.resume`); lines after the checkpoint are dropped from both files.

At the end ``summary.json`` (the keys of ``ampfl run``'s summary plus ``engine = "flower"``; ``final_metrics``
holds released keys only; ``protects_against``/``participation_hidden_from`` from :func:`run_threat_model`)
and the plots (from the released lines).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flwr.app import Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from ampfl.fl.folder_lock import owns
from ampfl.fl.release import DIAGNOSTICS, DIAGNOSTICS_HEADER, split_line
from ampfl.fl.run_summary import run_threat_model
from ampfl.flower.common import (
    OUT_KEY,
    QUERY,
    RESUME_KEY,
    SECAGG_KEY,
    TOKEN_KEY,
    algorithm_from_run_config,
)
from ampfl.flower.ledger import LEDGER, PrivacyLedger
from ampfl.flower.transport import budgeted_events, collect_round, release_round, uses_noise_shares
from ampfl.io import dumps_json

if TYPE_CHECKING:
    from ampfl.fl.algorithms.round_protocol import RoundProtocol

app = ServerApp()

#: Seconds to wait for every SuperNode of the federation to connect: this, plus
#: :data:`CONNECT_SECONDS_PER_NODE` per node (a local SuperNode's bring-up costs about 3.5 CPU-s).
CONNECT_TIMEOUT = 120.0
CONNECT_SECONDS_PER_NODE = 2.0


def _wait_for_nodes(grid: Grid, count: int) -> list[int]:
    limit = CONNECT_TIMEOUT + CONNECT_SECONDS_PER_NODE * count
    deadline = time.monotonic() + limit
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(nodes)} of {count} SuperNodes connected in {limit:.0f} s")
        time.sleep(1.0)


def _discover(grid: Grid, count: int, timeout: float) -> dict[int, int]:
    """Client id → node id, asking every connected node which partition it holds."""
    nodes = _wait_for_nodes(grid, count)
    asks = [Message(RecordDict(), dst_node_id=n, message_type=QUERY) for n in nodes]
    clients: dict[int, int] = {}
    for reply in grid.send_and_receive(asks, timeout=timeout):
        if reply.has_error():
            raise RuntimeError(f"node {reply.metadata.src_node_id}: {reply.error.reason}")
        pid = int(reply.content.metric_records["metrics"]["partition-id"])  # type: ignore[arg-type]
        if pid in clients:
            raise RuntimeError(f"two SuperNodes hold partition-id {pid}")
        clients[pid] = reply.metadata.src_node_id
    missing = sorted(set(range(count)) - set(clients))
    if missing:
        raise RuntimeError(f"no SuperNode holds partition-id {missing[0]} (of {count} clients)")
    return clients


def _line(
    protocol: RoundProtocol, done: int, metrics: Mapping[str, float], fields: Mapping[str, float]
) -> dict[str, Any]:
    """One evaluated round's line (released and diagnostic keys together; ``split_line`` divides it)."""
    line: dict[str, Any] = {"round": done, **metrics}
    line.update({key: float(value) for key, value in protocol.server_evaluate().items()})
    line.update(fields)
    return line


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the configured rounds (module docstring)."""
    import torch

    from ampfl.fl.config import config_to_dict
    from ampfl.fl.privacy import RunAccountant
    from ampfl.fl.run import (
        CHECKPOINT,
        CONFIG_JSON,
        CONFIG_TOML,
        METRICS,
        SUMMARY,
        load_checkpoint,
        save_checkpoint,
    )
    from ampfl.fl.run_plots import write_plots
    from ampfl.fl.run_summary import build_summary, write_summary

    started = time.perf_counter()
    torch.set_num_threads(1)
    config, algorithm = algorithm_from_run_config(context.run_config)
    out = Path(str(context.run_config[OUT_KEY]))
    token = str(context.run_config.get(TOKEN_KEY, ""))

    def guard() -> None:
        """Write only while this run owns the folder (a new run took over a dead deploy's folder)."""
        if token and not owns(out, token):
            raise RuntimeError(f"{out} is owned by another run now: this ServerApp stops without writing.")

    guard()
    timeout = float(context.run_config.get("reply-timeout", 600.0))
    secure = str(context.run_config.get(SECAGG_KEY, "none")) == "secaggplus"
    protocol = algorithm.round_protocol()
    # clients add the noise as shares under SecAgg+ (ampfl.flower.noise_shares)
    shares = uses_noise_shares(algorithm, secure)
    n = config.partition.num_clients
    nodes = _discover(grid, n, timeout)
    bring_up = time.perf_counter() - started
    run_accountant = RunAccountant(config.privacy, algorithm)
    threats = run_threat_model(algorithm, private=run_accountant.private, noise_shares=shares)
    ledger = PrivacyLedger(
        out / LEDGER, config.privacy, algorithm, range(n), protects_against=threats["protects_against"]
    )
    released = tuple(algorithm.released_metrics)
    metrics: list[dict[str, Any]] = []
    diagnostics: list[dict[str, Any]] = []
    round_seconds: list[float] = []
    done, stopped = 0, "rounds"
    if bool(context.run_config.get(RESUME_KEY, False)):
        state = load_checkpoint(out)
        algorithm.load_state_dict(state["algorithm"])
        algorithm.privacy_key = int(state.get("privacy_key", algorithm.privacy_key))
        run_accountant.load_state_dict(state["privacy"])
        done, metrics = int(state["rounds_done"]), list(state["metrics"])
        diagnostics = list(state.get("diagnostics", []))
    ledger.resume(done)  # drops rows of a round that was committed but never released
    resolved = config_to_dict(config)

    def fields() -> dict[str, float]:
        wall = time.perf_counter() - started
        return {"epsilon": run_accountant.epsilon(), "delta": run_accountant.delta, "wall_seconds": wall}

    # Lines written after the last checkpoint by an interrupted run are dropped here (as ampfl run does).
    guard()
    with (
        open(out / METRICS, "w", encoding="utf-8") as handle,
        open(out / DIAGNOSTICS, "w", encoding="utf-8") as diagnostics_handle,
    ):
        handle.write("".join(dumps_json(line) + "\n" for line in metrics))
        header = [DIAGNOSTICS_HEADER, *diagnostics]
        diagnostics_handle.write("".join(dumps_json(line) + "\n" for line in header))

        def write(line: dict[str, Any]) -> None:
            release, diagnostic = split_line(line, released)
            metrics.append(release)
            diagnostics.append(diagnostic)

        def flush() -> None:
            handle.write(dumps_json(metrics[-1]) + "\n")
            handle.flush()
            diagnostics_handle.write(dumps_json(diagnostics[-1]) + "\n")
            diagnostics_handle.flush()

        for round_index in range(done, config.rounds):
            guard()
            round_started = time.perf_counter()
            events = algorithm.round_events(round_index)
            budgeted = budgeted_events(algorithm, events, n, secure)
            if run_accountant.would_exceed(budgeted):
                stopped = "budget"
                break
            eligible = sorted(ledger.eligible(budgeted))
            # the sampler's cohort, or every eligible client when each flips its own coin
            cohort = protocol.plan_round(round_index, eligible, noise_shares=shares)
            collected = collect_round(
                grid, context, algorithm, nodes, cohort, round_index, timeout, events, secure=secure
            )
            ledger.record(round_index, eligible, collected.events)  # committed before the release below
            run_accountant.compose(collected.events)
            release_round(algorithm, collected)
            round_metrics = collected.metrics
            done = round_index + 1
            round_seconds.append(time.perf_counter() - round_started)
            evaluated = done % config.eval_every == 0 or done == config.rounds
            if evaluated:
                write(_line(protocol, done, round_metrics, fields()))
            # The new model is checkpointed before anything shows it (the metrics line, the next broadcast).
            guard()
            save_checkpoint(
                out,
                algorithm,
                rounds_done=done,
                metrics=metrics,
                diagnostics=diagnostics,
                config=resolved,
                wall=time.perf_counter() - started,
                privacy=run_accountant,
            )
            if evaluated:
                flush()
        if not metrics or metrics[-1]["round"] != done:  # as ampfl run: the last line states ε at the stop
            write(_line(protocol, done, {}, fields()))
            flush()
    ledger.close()
    title = f"{config.algorithm.name} on {config.dataset.name} (Flower)"
    headline = released[0] if released else "accuracy"
    files = write_plots(out, metrics, title=title, metric=headline)  # released lines only
    summary = build_summary(
        engine="flower",
        config=config,
        algorithm=algorithm,
        ledger=run_accountant,
        metrics=metrics,
        final=metrics[-1],
        rounds_completed=done,
        stopped=stopped,
        wall_seconds=time.perf_counter() - started,
        round_seconds=round_seconds,
        threats=threats,
        num_clients=n,
        out=out,
        files=(CONFIG_JSON, CONFIG_TOML, METRICS, DIAGNOSTICS, LEDGER, CHECKPOINT, SUMMARY, *files),
        secure_aggregation="secaggplus" if secure else None,
        discovery_seconds=bring_up,
    )
    guard()
    write_summary(out, summary)
