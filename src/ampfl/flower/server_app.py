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

import math
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from ampfl.fl.algorithms.dp_dsgd_rp import DPDSGDRandomParticipation
from ampfl.fl.algorithms.dp_fedavg import DPFedAvg
from ampfl.fl.algorithms.ms_pafl import MSPAFL
from ampfl.fl.folder_lock import owns
from ampfl.fl.release import DIAGNOSTICS, DIAGNOSTICS_HEADER, privacy_randomness, split_line, threat_model
from ampfl.flower.common import (
    OUT_KEY,
    QUERY,
    RESUME_KEY,
    SECAGG_KEY,
    TOKEN_KEY,
    algorithm_from_run_config,
)
from ampfl.flower.ledger import LEDGER, Events, PrivacyLedger
from ampfl.flower.noise_shares import (
    NOISE_SHARE_ALGORITHMS,
    realised_events,
    realised_multiplier,
    worst_case_events,
)
from ampfl.io import atomic_write_json, dumps_json

if TYPE_CHECKING:
    import torch

    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.flower.secagg import SecureSum

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


def _train_round(
    grid: Grid,
    algorithm: Algorithm,
    nodes: Mapping[int, int],
    cohort: list[int],
    round_index: int,
    timeout: float,
) -> tuple[list[tuple[int, torch.Tensor]], dict[str, float]]:
    """Send round ``round_index`` to the cohort; returns ``(client, update)`` of every reply and metrics."""
    import torch

    # MS-PAFL broadcasts the public submodel w̄_p only (Eq. 14); the others the whole model.
    model = algorithm.public if isinstance(algorithm, MSPAFL) else algorithm.global_params  # type: ignore[attr-defined]
    params = ArrayRecord({"params": Array(model.numpy())})
    settings = ConfigRecord({"round": round_index, "cohort": list(cohort)})
    messages = [
        Message(
            RecordDict({"arrays": params, "config": settings}),
            dst_node_id=nodes[c],
            message_type="train",
            group_id=str(round_index),
        )
        for c in cohort
    ]
    client_of = {node: c for c, node in nodes.items()}
    updates, losses, clipped, examples = [], [], [], []
    for reply in grid.send_and_receive(messages, timeout=timeout) if messages else []:
        if reply.has_error() or "arrays" not in reply.content.array_records:
            continue  # failed or declined
        update = torch.from_numpy(reply.content.array_records["arrays"]["update"].numpy().copy())
        updates.append((client_of[reply.metadata.src_node_id], update))
        metrics = reply.content.metric_records["metrics"]
        losses.append(float(metrics["train_loss"]))  # type: ignore[arg-type]
        clipped.append(float(metrics.get("clipped", 0.0)))  # type: ignore[arg-type]
        examples.append(float(metrics.get("examples", 0.0)))  # type: ignore[arg-type]
    updates.sort(key=lambda pair: pair[0])
    out = {"participants": float(len(updates)), "asked": float(len(cohort))}
    if isinstance(algorithm, DPDSGDRandomParticipation):  # losses are sums over the local samples S_i
        out["examples"] = sum(examples, 0.0)
        if out["examples"] > 0:
            out["train_loss"] = sum(losses) / out["examples"]
    elif losses:
        out["train_loss"] = sum(losses) / len(losses)
        if algorithm.privacy_unit is not None:
            out["clipped_fraction"] = sum(clipped) / len(clipped)
    return updates, out


def _release(algorithm: Algorithm, updates: list[tuple[int, torch.Tensor]], asked: int) -> None:
    """The simulator's server step on the individual replies (no secure aggregation): the new global model;
    the Gaussian noise comes from a generator seeded by the operating system."""
    import torch

    current: torch.Tensor = algorithm.global_params  # type: ignore[attr-defined]
    total = torch.stack([u for _, u in updates]).sum(0) if updates else torch.zeros_like(current)
    noise = torch.Generator().manual_seed(secrets.randbits(63))
    if isinstance(algorithm, DPFedAvg):
        algorithm.global_params = algorithm.server_update(total, asked, noise)
    elif isinstance(algorithm, DPDSGDRandomParticipation):
        algorithm.server_update(total, noise)
    elif isinstance(algorithm, MSPAFL):
        if updates:  # nobody checked in: w̄_p is kept
            algorithm.aggregate_public(total, len(updates))
    elif updates:  # FedAvg, 000 Eq. (3); an empty cohort leaves the model unchanged
        algorithm.global_params = total / len(updates)  # type: ignore[attr-defined]


def _secure_round(
    grid: Grid,
    context: Context,
    algorithm: Algorithm,
    asked: list[int],
    round_index: int,
    timeout: float,
    planned: Events,
) -> tuple[SecureSum, list[tuple[PrivacyEvent, int]], dict[str, float]]:
    """One SecAgg+ round over the ``asked`` nodes: what the server holds, the round's events as it saw
    them (at the realised noise multiplier when noise shares dropped out: :mod:`ampfl.flower.noise_shares`)
    and the round's diagnostics."""
    from ampfl.flower.secagg import secure_sum

    result = secure_sum(grid, context, algorithm, asked, round_index, timeout)
    metrics = {"asked": float(result.asked), "completed": float(result.completed)}
    events = list(planned)
    if algorithm.name in NOISE_SHARE_ALGORITHMS and result.total is not None and planned:
        events = realised_events(algorithm, planned, result.asked, result.completed)
        metrics["noise_multiplier_realised"] = realised_multiplier(algorithm, result.asked, result.completed)
    if result.joined is not None:
        metrics["participants"] = float(result.joined)
    return result, events, metrics


def _release_secure(algorithm: Algorithm, result: SecureSum) -> None:
    """The server step on what SecAgg+ decoded: the noised sum (DP-DSGD-RP, DP-FedAvg: the algorithm's
    ``apply_noised_sum``, no noise added here) or MS-PAFL's sum of noised public parts. A halted protocol
    (nothing decoded) keeps the model."""
    if result.total is None:
        return
    if isinstance(algorithm, DPFedAvg):
        algorithm.global_params = algorithm.apply_noised_sum(result.total)
    elif isinstance(algorithm, DPDSGDRandomParticipation):
        algorithm.apply_noised_sum(result.total)
    elif isinstance(algorithm, MSPAFL) and result.joined:  # nobody checked in: w̄_p is kept
        algorithm.aggregate_public(result.total, result.joined)


def run_threat_model(algorithm: Algorithm, secure: bool) -> dict[str, list[str]]:
    """``protects_against`` and ``participation_hidden_from`` of a deployment: the server is protected
    against where it sees only noised values — under SecAgg+ with the clients' noise shares, or MS-PAFL's
    client-side noise (:meth:`MSPAFL.threat_model`) — otherwise ε covers the model consumers only."""
    if algorithm.privacy_unit is None:
        return threat_model(private=False)
    if isinstance(algorithm, MSPAFL):
        return algorithm.threat_model()
    shares = secure and algorithm.name in NOISE_SHARE_ALGORITHMS
    return threat_model(private=True, server_sees_only_noised_sum=shares)


def _line(
    algorithm: Algorithm, done: int, metrics: Mapping[str, float], fields: Mapping[str, float]
) -> dict[str, Any]:
    """One evaluated round's line (released and diagnostic keys together; ``split_line`` divides it)."""
    line: dict[str, Any] = {"round": done, **metrics}
    if isinstance(algorithm, MSPAFL):  # the private submodels are on the nodes: the public model only
        evaluation = {"accuracy": algorithm.global_accuracy(algorithm.public_model())}
    else:
        evaluation = algorithm.evaluate()
    line.update({key: float(value) for key, value in evaluation.items()})
    line.update(fields)
    return line


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the configured rounds (module docstring)."""
    import torch

    from ampfl.fl.algorithms.base import ROLE_SAMPLING
    from ampfl.fl.config import config_to_dict
    from ampfl.fl.privacy import RunAccountant
    from ampfl.fl.run import CHECKPOINT, METRICS, SUMMARY, load_checkpoint, save_checkpoint
    from ampfl.fl.run_plots import write_plots

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
    shares = secure and algorithm.name in NOISE_SHARE_ALGORITHMS  # clients add the noise (noise_shares)
    n = config.partition.num_clients
    nodes = _discover(grid, n, timeout)
    bring_up = time.perf_counter() - started
    run_accountant = RunAccountant(config.privacy, algorithm)
    threats = run_threat_model(algorithm, secure)
    ledger = PrivacyLedger(
        out / LEDGER, config.privacy, algorithm, range(n), protects_against=threats["protects_against"]
    )
    sampler = algorithm.sampler  # type: ignore[attr-defined]
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
            # Under noise shares a round can be noised less than planned (dropouts): budget the worst case.
            budgeted = worst_case_events(algorithm, events, n) if shares else events
            if run_accountant.would_exceed(budgeted):
                stopped = "budget"
                break
            eligible = set(ledger.eligible(budgeted))
            if isinstance(algorithm, DPDSGDRandomParticipation | MSPAFL) or shares:
                cohort = sorted(eligible)  # every client is asked; each flips its own coin
            else:
                drawn = sampler.sample(round_index, algorithm.rng(round_index, ROLE_SAMPLING))
                cohort = [int(c) for c in drawn if int(c) in eligible]
            if secure:  # SecAgg+: a sum of the cohort's contributions only (ampfl.flower.secagg)
                asked = [nodes[c] for c in cohort]
                result, events, round_metrics = _secure_round(
                    grid, context, algorithm, asked, round_index, timeout, events
                )
            else:
                updates, round_metrics = _train_round(grid, algorithm, nodes, cohort, round_index, timeout)
            ledger.record(round_index, sorted(eligible), events)  # committed before the release below
            run_accountant.compose(events)
            if secure:
                _release_secure(algorithm, result)
            else:
                _release(algorithm, updates, len(cohort))
            done = round_index + 1
            round_seconds.append(time.perf_counter() - round_started)
            evaluated = done % config.eval_every == 0 or done == config.rounds
            if evaluated:
                write(_line(algorithm, done, round_metrics, fields()))
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
            write(_line(algorithm, done, {}, fields()))
            flush()
    ledger.close()
    final = metrics[-1]
    title = f"{config.algorithm.name} on {config.dataset.name} (Flower)"
    files = write_plots(out, metrics, title=title)  # released lines only
    private = run_accountant.private
    summary: dict[str, Any] = {
        "engine": "flower",
        "secure_aggregation": "secaggplus" if secure else None,
        "algorithm": config.algorithm.name,
        "dataset": config.dataset.name,
        "rounds": config.rounds,
        "rounds_completed": done,
        "stopped": stopped,
        "final_accuracy": final.get("accuracy"),
        "accuracy_metric": "accuracy",
        "epsilon": run_accountant.epsilon(),
        "delta": run_accountant.delta,
        "max_epsilon": config.privacy.max_epsilon,
        "privacy_unit": algorithm.privacy_unit,
        "neighbouring": config.privacy.neighbouring if private else None,
        **threats,
        "privacy_randomness": privacy_randomness(config.privacy.reproducible),
        "accountant": run_accountant.kind,  # resolved ("auto" never appears)
        "analysis": run_accountant.analysis(),
        "wall_seconds": time.perf_counter() - started,
        "discovery_seconds": bring_up,
        "round_seconds_mean": sum(round_seconds) / len(round_seconds) if round_seconds else math.nan,
        "final_metrics": final,
        # N itself is private under a client-level guarantee (add/remove one client): not released then
        "num_clients": None if algorithm.privacy_unit == "client" else n,
        "seed": config.seed,
        "params": config.algorithm.params.model_dump(mode="json"),
        "noise": {
            k: float(getattr(algorithm, k))
            for k in ("noise_multiplier", "noise_std")
            if hasattr(algorithm, k)
        },
        "completed": True,
        "out_dir": str(out),
        "files": [str(out / name) for name in (METRICS, DIAGNOSTICS, LEDGER, CHECKPOINT, SUMMARY, *files)],
    }
    guard()
    atomic_write_json(out / SUMMARY, summary)
