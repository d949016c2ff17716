"""The ServerApp of ``ampfl deploy``: the run's round loop (:mod:`ampfl.fl.run.loop`, the one ``ampfl run``
uses) over a Flower Grid, with a per-client privacy ledger.

:func:`main` discovers which SuperNode holds which client (``partition-id``), builds the algorithm and the
run's accountant from the config exactly as ``ampfl run`` does, opens the per-client ledger
(``ledger.sqlite``, :class:`~ampfl.flower.ledger.PrivacyLedger`), resumes from ``checkpoint.pt`` with the run
config ``resume = true`` (the ledger drops the rows of a round committed but never released) and hands the
rounds to :func:`ampfl.fl.run.loop.run_rounds` with a :class:`FlowerBackend`. Per round the backend

1. asks only the clients whose own ε stays within ``[privacy] max_epsilon`` (:meth:`PrivacyLedger.eligible`,
   on the worst case of dropouts under SecAgg+ noise shares) and the round protocol's cohort among them
   (``plan_round``: the simulator's sampler from the secret privacy key, or every eligible client when each
   flips its own coin on its node);
2. runs the round on the nodes (:func:`ampfl.flower.transport.collect_round`: one ``train`` message each, or
   SecAgg+ with the clients' noise shares), whose events are the round as the server saw it;
3. commits them to the ledger, and the loop composes them, **before** the release
   (:func:`ampfl.flower.transport.release_round`: the protocol's ``aggregate``, with server noise from the
   operating system's entropy, or on a sum the clients noised).

The backend is not replayable (that noise is not derived from the run's key), so the loop checkpoints every
round before its line is written or its model broadcast. At the end ``summary.json`` (the simulator's
keys, :mod:`ampfl.fl.run.summary`, ``engine = "flower"``) and the plots from the released lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flwr.app import Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from ampfl.fl.run.lock import owns
from ampfl.fl.run.loop import RoundOutcome, RunState, finish_run, restore, run_rounds
from ampfl.fl.run.release import DIAGNOSTICS, TIMING
from ampfl.fl.run.summary import run_threat_model
from ampfl.flower.common import (
    CONFIG_KEY,
    OUT_KEY,
    QUERY,
    RESUME_KEY,
    SECAGG_KEY,
    TOKEN_KEY,
    algorithm_from_config,
    decode_config,
)
from ampfl.flower.ledger import LEDGER, PrivacyLedger
from ampfl.flower.polling import PromptGrid
from ampfl.flower.transport import budgeted_events, collect_round, release_round, uses_noise_shares

if TYPE_CHECKING:
    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms.base import Algorithm

Events = Sequence[tuple["PrivacyEvent", int]]

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


class FlowerBackend:
    """A round on the SuperNodes (:class:`ampfl.fl.run.loop.RoundBackend`): the eligible clients (per-client
    ledger), the round protocol's cohort, :func:`~ampfl.flower.transport.collect_round`, the ledger's commit,
    then :func:`~ampfl.flower.transport.release_round`. Not ``replayable``: the server's noise (or the
    clients' shares) comes from the operating system, so every round is checkpointed before it is shown."""

    replayable = False

    def __init__(
        self,
        grid: Grid,
        context: Context,
        algorithm: Algorithm,
        ledger: PrivacyLedger,
        nodes: Mapping[int, int],
        *,
        secure: bool,
        timeout: float,
        guard: Callable[[], None],
    ) -> None:
        self.grid, self.context, self.algorithm, self.ledger, self.nodes = (
            grid,
            context,
            algorithm,
            ledger,
            nodes,
        )
        self.secure, self.timeout, self.guard = secure, timeout, guard
        self.protocol = algorithm.round_protocol()
        self.shares = uses_noise_shares(algorithm, secure)
        self._budgeted: tuple[Events, list[tuple[PrivacyEvent, int]]] | None = None

    def budgeted(self, events: Events) -> list[tuple[PrivacyEvent, int]]:
        """The round's budgeted events (worst case under noise shares), computed once per round: the loop's
        budget check and :meth:`collect` ask for the same ``events``."""
        if self._budgeted is None or self._budgeted[0] is not events:
            self._budgeted = (events, budgeted_events(self.algorithm, events, len(self.nodes), self.secure))
        return self._budgeted[1]

    def collect(self, round_index: int, events: Events) -> RoundOutcome:
        eligible = sorted(self.ledger.eligible(self.budgeted(events)))
        # the sampler's cohort, or every eligible client when each flips its own coin
        cohort = self.protocol.plan_round(round_index, eligible, noise_shares=self.shares)
        collected = collect_round(
            self.grid,
            self.context,
            self.algorithm,
            self.nodes,
            cohort,
            round_index,
            self.timeout,
            events,
            secure=self.secure,
        )
        return RoundOutcome(collected.events, dict(collected.metrics), (collected, eligible))

    def commit(self, round_index: int, outcome: RoundOutcome) -> None:
        """The round's events in the per-client ledger, for the clients that were eligible this round."""
        _, eligible = outcome.payload
        self.ledger.record(round_index, eligible, outcome.events)

    def release(self, outcome: RoundOutcome) -> None:
        collected, _ = outcome.payload
        release_round(self.algorithm, collected)

    def evaluation_line(self, done: int, round_metrics: Mapping[str, Any]) -> dict[str, Any]:
        """What the server holds (MS-PAFL: the public model only; the private parts are on the nodes)."""
        line: dict[str, Any] = {"round": done, **round_metrics}
        line.update({key: float(value) for key, value in self.protocol.server_evaluate().items()})
        return line


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the configured rounds (module docstring)."""
    import torch

    from ampfl.fl.config import config_to_dict
    from ampfl.fl.privacy.run_accountant import RunAccountant
    from ampfl.fl.run.experiment import (
        CHECKPOINT,
        CONFIG_JSON,
        CONFIG_TOML,
        METRICS,
        SUMMARY,
        load_checkpoint,
        run_privacy_key,
        seeded_without_guarantee,
    )

    started = time.perf_counter()
    torch.set_num_threads(1)
    grid = PromptGrid(grid)  # replies noticed within 0.2 s, not on Flower's 3 s poll (ampfl.flower.polling)
    config = decode_config(str(context.run_config[CONFIG_KEY]))
    out = Path(str(context.run_config[OUT_KEY]))
    token = str(context.run_config.get(TOKEN_KEY, ""))

    def guard() -> None:
        """Write only while this run owns the folder (a new run took over a dead deploy's folder)."""
        if token and not owns(out, token):
            raise RuntimeError(f"{out} is owned by another run now: this ServerApp stops without writing.")

    guard()
    checkpoint = load_checkpoint(out) if bool(context.run_config.get(RESUME_KEY, False)) else None
    # a resumed run keeps its privacy key from the start, as ampfl run's resume: construction may draw from it
    key = run_privacy_key(config, checkpoint)
    algorithm = algorithm_from_config(config, privacy_key=key)
    seeded = seeded_without_guarantee(key, config, algorithm.privacy_unit is not None, checkpoint is None)
    if seeded is not None:  # no guarantee: every draw follows the seed, as ampfl run's
        algorithm = algorithm_from_config(config, privacy_key=seeded)
    timeout = float(context.run_config.get("reply-timeout", 600.0))
    secure = str(context.run_config.get(SECAGG_KEY, "none")) == "secaggplus"
    n = config.partition.num_clients
    nodes = _discover(grid, n, timeout)
    bring_up = time.perf_counter() - started
    run_accountant = RunAccountant(config.privacy, algorithm)
    shares = uses_noise_shares(algorithm, secure)
    threats = run_threat_model(algorithm, private=run_accountant.private, noise_shares=shares)
    ledger = PrivacyLedger(
        out / LEDGER, config.privacy, algorithm, range(n), protects_against=threats["protects_against"]
    )
    state = RunState()
    if checkpoint is not None:
        state = restore(checkpoint, algorithm, run_accountant)
    ledger.resume(state.rounds_done)  # drops rows of a round that was committed but never released
    state.wall_before += time.perf_counter() - started
    backend = FlowerBackend(
        grid, context, algorithm, ledger, nodes, secure=secure, timeout=timeout, guard=guard
    )
    state = run_rounds(
        config, algorithm, run_accountant, backend, out, state, resolved=config_to_dict(config)
    )
    ledger.close()
    finish_run(
        config,
        algorithm,
        run_accountant,
        backend,
        state,
        out,
        engine="flower",
        threats=threats,
        num_clients=n,
        files=(CONFIG_JSON, CONFIG_TOML, METRICS, DIAGNOSTICS, TIMING, LEDGER, CHECKPOINT, SUMMARY),
        secure_aggregation="secaggplus" if secure else None,
        discovery_seconds=bring_up,
        plots=config.plots,
    )
