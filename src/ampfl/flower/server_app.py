"""The ServerApp of ``ampfl deploy``: the simulator's round loop over a Flower Grid, with a privacy ledger.

Its own Grid loop (Flower's built-in ``FedAvg`` strategy fails when a client declines). For each round r, in
the order of ``ampfl.fl.run``:

1. the algorithm's events of round r (:meth:`~ampfl.fl.algorithms.base.Algorithm.round_events`); stop
   (``stopped = "budget"``) if the run-level accountant would exceed ``[privacy] max_epsilon``; clients whose
   own ε would exceed it are no longer asked (:meth:`PrivacyLedger.eligible`);
2. the cohort: the simulator's sampler, seeded as in ``ampfl run`` (``Algorithm.rng(r, ROLE_SAMPLING)``),
   restricted to the eligible clients; for DP-DSGD-RP and MS-PAFL every eligible client (each checks in with
   its own coin on its node);
3. one ``train`` message to each node of the cohort; replies that are empty, failed or late (``reply-timeout``
   of the run config, default 600 s) are dropped. With the run config ``secure-aggregation = "secaggplus"``
   (DP-DSGD-RP, MS-PAFL) one SecAgg+ round instead, and the server gets only the sum of the contributions
   (:func:`ampfl.flower.secagg.secure_sum`);
4. the round's events committed to ``ledger.sqlite`` and composed by the run's accountant, **then** the
   aggregate released: FedAvg averages the local models (000 Eq. 3); DP-FedAvg sums the clipped updates and
   adds the Gaussian noise in :meth:`DPFedAvg.server_update`, from a generator seeded by the operating system
   (unlike the simulator: the run seed is in the config every client holds, so noise drawn from it could be
   subtracted); DP-DSGD-RP: :meth:`DPDSGDRandomParticipation.server_update`; MS-PAFL:
   :meth:`MSPAFL.aggregate_public` of the clients' noised public parts;
5. ``checkpoint.pt`` (the simulator's checkpoint) before the new model is shown anywhere, then every
   ``eval_every`` rounds one line of ``metrics.jsonl`` (test accuracy of the global model, for MS-PAFL of the
   public model, ε, δ). With the run config ``resume = true`` the loop continues from the checkpoint
   (:meth:`PrivacyLedger.resume`).

At the end ``summary.json`` (the keys of ``ampfl run``'s summary plus ``engine = "flower"``) and the plots.
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
from ampfl.flower.common import OUT_KEY, QUERY, RESUME_KEY, SECAGG_KEY, algorithm_from_run_config
from ampfl.flower.ledger import LEDGER, PrivacyLedger
from ampfl.io import atomic_write_json, dumps_json

if TYPE_CHECKING:
    import torch

    from ampfl.fl.algorithms.base import Algorithm

app = ServerApp()

#: Seconds to wait for every SuperNode of the federation to connect.
CONNECT_TIMEOUT = 120.0


def _wait_for_nodes(grid: Grid, count: int) -> list[int]:
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"only {len(nodes)} of {count} SuperNodes connected in {CONNECT_TIMEOUT:.0f} s"
            )
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


def _release(
    algorithm: Algorithm, updates: list[tuple[int, torch.Tensor]], asked: int, joined: int | None = None
) -> None:
    """The simulator's server step on the replies: the new global model. Under SecAgg+ ``updates`` is the
    one securely summed vector and ``joined`` the number of clients that checked in."""
    import torch

    current: torch.Tensor = algorithm.global_params  # type: ignore[attr-defined]
    total = torch.stack([u for _, u in updates]).sum(0) if updates else torch.zeros_like(current)
    noise = torch.Generator().manual_seed(secrets.randbits(63))
    if isinstance(algorithm, DPFedAvg):
        algorithm.global_params = algorithm.server_update(total, asked, noise)
    elif isinstance(algorithm, DPDSGDRandomParticipation):
        algorithm.server_update(total, noise)
    elif isinstance(algorithm, MSPAFL):
        count = len(updates) if joined is None else joined
        if count:  # nobody checked in: w̄_p is kept
            algorithm.aggregate_public(total, count)
    elif updates:  # FedAvg, 000 Eq. (3); an empty cohort leaves the model unchanged
        algorithm.global_params = total / len(updates)  # type: ignore[attr-defined]


def _line(
    algorithm: Algorithm, done: int, metrics: Mapping[str, float], epsilon: float, delta: float, wall: float
) -> dict[str, Any]:
    line: dict[str, Any] = {"round": done, **metrics}
    if isinstance(algorithm, MSPAFL):  # the private submodels are on the nodes: the public model only
        evaluation = {"accuracy": algorithm.global_accuracy(algorithm.public_model())}
    else:
        evaluation = algorithm.evaluate()
    line.update({key: float(value) for key, value in evaluation.items()})
    line.update({"epsilon": epsilon, "delta": delta, "wall_seconds": wall})
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
    timeout = float(context.run_config.get("reply-timeout", 600.0))
    secure = str(context.run_config.get(SECAGG_KEY, "none")) == "secaggplus"
    n = config.partition.num_clients
    nodes = _discover(grid, n, timeout)
    bring_up = time.perf_counter() - started
    run_accountant = RunAccountant(config.privacy, algorithm)
    ledger = PrivacyLedger(out / LEDGER, config.privacy, algorithm, range(n))
    sampler = algorithm.sampler  # type: ignore[attr-defined]
    metrics: list[dict[str, Any]] = []
    round_seconds: list[float] = []
    done, stopped = 0, "rounds"
    if bool(context.run_config.get(RESUME_KEY, False)):
        state = load_checkpoint(out)
        algorithm.load_state_dict(state["algorithm"])
        run_accountant.load_state_dict(state["privacy"])
        done, metrics = int(state["rounds_done"]), list(state["metrics"])
    ledger.resume(done)  # drops rows of a round that was committed but never released
    resolved = config_to_dict(config)
    with open(out / METRICS, "w", encoding="utf-8") as handle:
        handle.write("".join(dumps_json(line) + "\n" for line in metrics))
        for round_index in range(done, config.rounds):
            round_started = time.perf_counter()
            events = algorithm.round_events(round_index)
            if run_accountant.would_exceed(events):
                stopped = "budget"
                break
            eligible = set(ledger.eligible(events))
            if isinstance(algorithm, DPDSGDRandomParticipation | MSPAFL):
                cohort = sorted(eligible)  # every client is asked; each checks in with its own coin
            else:
                drawn = sampler.sample(round_index, algorithm.rng(round_index, ROLE_SAMPLING))
                cohort = [int(c) for c in drawn if int(c) in eligible]
            if secure:  # SecAgg+: the sum of the cohort's contributions only (ampfl.flower.secagg)
                from ampfl.flower.secagg import secure_sum

                asked = [nodes[c] for c in cohort]
                total, round_metrics = secure_sum(grid, context, algorithm, asked, round_index, timeout)  # type: ignore[arg-type]
                updates = [(-1, total)]
            else:
                updates, round_metrics = _train_round(grid, algorithm, nodes, cohort, round_index, timeout)
            ledger.record(round_index, sorted(eligible), events)  # committed before the release below
            run_accountant.compose(events)
            joined = int(round_metrics.get("participants", 0)) if secure else None
            _release(algorithm, updates, len(cohort), joined)
            done = round_index + 1
            round_seconds.append(time.perf_counter() - round_started)
            wall = time.perf_counter() - started
            if done % config.eval_every == 0 or done == config.rounds:
                metrics.append(
                    _line(
                        algorithm, done, round_metrics, run_accountant.epsilon(), run_accountant.delta, wall
                    )
                )
            # The new model is checkpointed before anything shows it (the metrics line, the next broadcast).
            save_checkpoint(
                out,
                algorithm,
                rounds_done=done,
                metrics=metrics,
                config=resolved,
                wall=wall,
                privacy=run_accountant,
            )
            if metrics and metrics[-1]["round"] == done:
                handle.write(dumps_json(metrics[-1]) + "\n")
                handle.flush()
        if (
            not metrics or metrics[-1]["round"] != done
        ):  # as ampfl run: the last line states the ε it stopped at
            wall = time.perf_counter() - started
            metrics.append(_line(algorithm, done, {}, run_accountant.epsilon(), run_accountant.delta, wall))
            handle.write(dumps_json(metrics[-1]) + "\n")
    ledger.close()
    final = metrics[-1]
    files = write_plots(out, metrics, title=f"{config.algorithm.name} on {config.dataset.name} (Flower)")
    summary: dict[str, Any] = {
        "engine": "flower",
        "secure_aggregation": "secaggplus" if secure else None,
        "algorithm": config.algorithm.name,
        "dataset": config.dataset.name,
        "rounds": config.rounds,
        "rounds_completed": done,
        "stopped": stopped,
        "final_accuracy": final["accuracy"],
        "epsilon": run_accountant.epsilon(),
        "delta": run_accountant.delta,
        "max_epsilon": config.privacy.max_epsilon,
        "privacy_unit": algorithm.privacy_unit,
        "accountant": run_accountant.kind,  # resolved ("auto" never appears)
        "analysis": run_accountant.analysis(),
        "wall_seconds": time.perf_counter() - started,
        "discovery_seconds": bring_up,
        "round_seconds_mean": sum(round_seconds) / len(round_seconds) if round_seconds else math.nan,
        "final_metrics": final,
        "num_clients": n,
        "seed": config.seed,
        "params": config.algorithm.params.model_dump(mode="json"),
        "noise": {
            k: float(getattr(algorithm, k))
            for k in ("noise_multiplier", "noise_std")
            if hasattr(algorithm, k)
        },
        "completed": True,
        "out_dir": str(out),
        "files": [str(out / name) for name in (METRICS, LEDGER, CHECKPOINT, SUMMARY, *files)],
    }
    atomic_write_json(out / SUMMARY, summary)
