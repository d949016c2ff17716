"""Client-level DP-FedAvg with random check-in inside a Flower app ampfl did not write (extra ``flower``).

Two pieces, sharing one declared :class:`CheckInMechanism` (clip C, noise multiplier z, check-in probability
p, population N, all public constants):

- :class:`PrivacyMod`, a Flower client Mod (``ClientApp(client_fn=..., mods=[secaggplus_mod,
  PrivacyMod(mechanism)])``). On every train message the node flips its own check-in coin B ~ Bern(p) from
  OS entropy. If it checks in, the user's app trains as usual and the Mod turns the returned weights into the
  update Δ = w_local − w, clipped to norm C; else Δ = 0. Under secure aggregation a node whose coin said no
  still runs the app's fit and discards it (its ``context.state`` restored): the server sees when each reply
  arrives, and a node that skipped the work would reply sooner. Without secure aggregation the server sees
  each update anyway and the app is not called. With secure aggregation
  the node then adds its noise share ξ ~ N(0, (zC)²/n · I) (n: the nodes asked this round, told by the
  server and checked to lie in [1, N]) and encodes (Δ + ξ)/R on SecAgg+'s [-1, 1], R = C + 10·zC/√n
  (:data:`ampfl.flower.noise_shares.TAIL`: an entry is clipped with probability 1.5e-23). Every node replies
  every round with weight 1 and no metrics, so neither the weight nor a metric reveals its coin. Client-side
  evaluation is refused unless allowed (its loss and accuracy are statistics of the node's data, released
  un-noised).
- :class:`PrivateStrategy`, a wrapper of the user's legacy ``flwr.server.strategy.Strategy`` for
  ``DefaultWorkflow``: it asks every node every round (the coin is the node's, so participation stays
  hidden), takes the inner strategy's initial parameters and centralised evaluation, and replaces its
  aggregation: the noised sum S of the updates (decoded from SecAgg+; without secure aggregation, the sum of
  the clipped updates plus N(0, (zC)² I) drawn by the server from OS entropy) gives the model
  w + S / (p·N), divided by the public expected cohort, never by a count of replies. Each round's
  event, ``PoissonSampledEvent(p, GaussianEvent(z'))`` with z' = z·√(c/n) when only c of the n asked
  nodes' shares reached the sum (:mod:`ampfl.flower.noise_shares`), is composed by ampfl's accountant and
  committed to the SQLite ledger (:class:`ampfl.flower.ledger.PrivacyLedger`) before the new model is
  returned; with ``max_epsilon`` a round is not started when its worst case (c at SecAgg+'s reconstruction
  threshold) would pass the budget.

Guarantee: client level, add/remove one client, for every party that sees released models; with SecAgg+ also
against the server (which decodes only the noised sum). Its ε is that of ``ampfl account poisson --rate p
--noise-multiplier z --steps ROUNDS`` when no node drops out. Not covered: anything the user's app sends
outside the train reply (a custom message type, logs), and client-side evaluation if allowed.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from flwr.app import Context, Message
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    MessageType,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common import recorddict_compat as compat
from flwr.server.strategy import Strategy

from ampfl.accounting._checks import check_int, check_positive, check_probability
from ampfl.accounting.accountants.base import NeighboringRelation
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent, PrivacyEvent
from ampfl.flower.fit_only import FitOnlyStrategy
from ampfl.flower.noise_shares import RECONSTRUCTION_THRESHOLD, min_completed, range_of, realised

if TYPE_CHECKING:
    from flwr.common import Scalar
    from flwr.server.client_manager import ClientManager
    from flwr.server.client_proxy import ClientProxy
    from flwr.server.workflow import SecAggPlusWorkflow

__all__ = ["ASKED_KEY", "CheckInMechanism", "PrivacyMod", "PrivateStrategy"]

#: The train config key by which the server tells each node how many nodes it asked (n).
ASKED_KEY = "ampfl-asked"


@dataclass(frozen=True)
class CheckInMechanism:
    """The public constants both sides declare (module docstring).

    Args:
        clip: C, the L2 bound of a client's update.
        noise_multiplier: z, the noise std of the sum over C.
        participation: p, each node's check-in probability per round.
        num_clients: N, the population (nodes of the federation).
        secure_aggregation: whether the nodes add noise shares under SecAgg+ (else the server adds the noise).
    """

    clip: float
    noise_multiplier: float
    participation: float
    num_clients: int
    secure_aggregation: bool = True

    def __post_init__(self) -> None:
        check_positive("clip", self.clip)
        check_positive("noise_multiplier", self.noise_multiplier)
        check_probability("participation", self.participation)
        check_int("num_clients", self.num_clients, minimum=1)

    @property
    def noise_std(self) -> float:
        return float(self.noise_multiplier * self.clip)

    def encoding_range(self, asked: int) -> float:
        """R = C + TAIL·σ/√n with shares; C without (a clipped update on [-1, 1])."""
        if not self.secure_aggregation:
            return float(self.clip)
        return range_of(self.clip, self.noise_std, asked)

    def check_asked(self, asked: object) -> int:
        try:
            n = int(str(asked))
        except ValueError:
            n = -1
        if not 1 <= n <= self.num_clients:
            raise ValueError(f"{ASKED_KEY} must be in [1, {self.num_clients}] (num_clients). Found {asked}.")
        return n

    def event(self, asked: int | None = None, completed: int | None = None) -> PrivacyEvent:
        """One round's event at the noise the sum carries (c of n shares: z·√(c/n))."""
        z = self.noise_multiplier
        if self.secure_aggregation and asked is not None and completed is not None:
            z = realised(z, asked, completed)
        return PoissonSampledEvent(sampling_rate=self.participation, event=GaussianEvent(noise_multiplier=z))

    def secaggplus_workflow(self, timeout: float | None = None) -> SecAggPlusWorkflow:
        """The ``SecAggPlusWorkflow`` these encodings need: weight 1, entries on [-1, 1], SecAgg among all."""
        from flwr.server.workflow import SecAggPlusWorkflow

        return SecAggPlusWorkflow(
            num_shares=1.0,
            reconstruction_threshold=RECONSTRUCTION_THRESHOLD,
            max_weight=1.0,
            clipping_range=1.0,
            timeout=timeout,
        )


def _flat(arrays: Sequence[np.ndarray]) -> np.ndarray:
    return (
        np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays]) if arrays else np.zeros(0)
    )


def _shaped(vector: np.ndarray, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    out, at = [], 0
    for a in like:
        out.append(vector[at : at + a.size].reshape(a.shape))
        at += a.size
    return out


class PrivacyMod:
    """The client Mod (module docstring). ``rng`` draws the coin and the noise share (default: OS entropy;
    never a published seed)."""

    def __init__(
        self,
        mechanism: CheckInMechanism,
        *,
        allow_evaluate: bool = False,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.allow_evaluate = bool(allow_evaluate)
        self._rng = rng

    def __call__(self, msg: Message, context: Context, call_next: Any) -> Message:
        kind = msg.metadata.message_type
        if kind == MessageType.EVALUATE and not self.allow_evaluate:
            raise ValueError(
                "PrivacyMod: client-side evaluation releases statistics of the node's data un-noised; "
                "evaluate on the server, or pass allow_evaluate=True (outside the guarantee)"
            )
        if kind != MessageType.TRAIN:
            return call_next(msg, context)  # type: ignore[no-any-return]
        mech = self.mechanism
        if mech.secure_aggregation and RECORD_KEY_CONFIGS not in msg.content.config_records:
            raise ValueError(
                "PrivacyMod: noise shares need secure aggregation: put secaggplus_mod before this mod "
                "(ClientApp(mods=[secaggplus_mod, PrivacyMod(...)])) and run SecAggPlusWorkflow, or declare "
                "secure_aggregation=False (the server adds the noise)"
            )
        fitins: FitIns = compat.recorddict_to_fitins(msg.content, keep_input=True)
        asked = mech.check_asked(fitins.config.get(ASKED_KEY, -1))
        rng = self._rng if self._rng is not None else np.random.default_rng()
        start = [np.asarray(a) for a in parameters_to_ndarrays(fitins.parameters)]
        update = np.zeros(sum(a.size for a in start))
        joined = bool(rng.random() < mech.participation)  # the node's own check-in coin
        if joined or mech.secure_aggregation:  # the same work whatever the coin (module docstring)
            state = None if joined else copy.deepcopy(context.state)
            reply = call_next(msg, context)
            if state is not None:
                context.state = state
            if reply.has_error():
                return reply  # type: ignore[no-any-return]
            trained = parameters_to_ndarrays(
                compat.recorddict_to_fitres(reply.content, keep_input=True).parameters
            )
            if [np.shape(a) for a in trained] != [a.shape for a in start]:
                raise ValueError(
                    "PrivacyMod: the app's fit returned arrays of other shapes than it received; the update "
                    "is their difference"
                )
            update = _flat(trained) - _flat(start)
            norm = float(np.linalg.norm(update))
            if norm > mech.clip:
                update *= mech.clip / norm
            if not joined:
                update = np.zeros_like(update)
        if mech.secure_aggregation:  # the share goes out whatever the coin said
            update = update + rng.normal(0.0, mech.noise_std / math.sqrt(asked), size=update.size)
        sent = _shaped(update / mech.encoding_range(asked), start)
        fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(sent), num_examples=1, metrics={})
        return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)


class _DeclaredAlgorithm:
    """What :class:`~ampfl.flower.ledger.PrivacyLedger` asks of an algorithm, for the declared mechanism."""

    name = "flower_app"
    privacy_unit = "client"
    neighboring_relation = NeighboringRelation.ADD_OR_REMOVE_ONE

    def __init__(self, mechanism: CheckInMechanism) -> None:
        self.mechanism = mechanism

    def round_events(self, round_index: int) -> list[tuple[PrivacyEvent, int]]:
        return [(self.mechanism.event(), 1)]

    def round_protocol(self) -> object:
        return object()  # one sum of every message (round_protocol.grouped)


class PrivateStrategy(FitOnlyStrategy):
    """The server wrapper (module docstring).

    Args:
        strategy: the user's strategy: its ``initialize_parameters`` and centralised ``evaluate`` are used.
        mechanism: the declared constants (the nodes' :class:`PrivacyMod` must declare the same).
        delta: the δ of the reported ε.
        ledger: the SQLite ledger file (default: none written).
        max_epsilon: the budget: no round starts whose worst case would pass it.
        accountant: ``"pld"`` (default) or ``"rdp"``.
        wait_seconds: how long a round waits for all ``num_clients`` nodes to connect.
    """

    def __init__(
        self,
        strategy: Strategy,
        mechanism: CheckInMechanism,
        *,
        delta: float,
        ledger: str | Path | None = None,
        max_epsilon: float | None = None,
        accountant: Literal["auto", "rdp", "pld"] = "pld",
        wait_seconds: float = 120.0,
    ) -> None:
        from ampfl.fl.config import PrivacyConfig

        self.inner = strategy
        self.wait_seconds = float(wait_seconds)
        self.mechanism = mechanism
        self.privacy = PrivacyConfig(delta=delta, max_epsilon=max_epsilon, accountant=accountant)
        self.ledger_path = None if ledger is None else Path(ledger)
        self._ledger: Any = None
        self._accountant: Any = None
        self.parameters: list[np.ndarray] | None = None
        self.asked: list[int] = []
        self.rounds = 0
        self.stopped = False
        self._rng = np.random.default_rng()  # the server's noise without secure aggregation (OS entropy)

    # -- accounting
    def _open(self, node_ids: Sequence[int]) -> None:
        from ampfl.fl.privacy.run_accountant import RunAccountant
        from ampfl.flower.ledger import PrivacyLedger

        declared: Any = _DeclaredAlgorithm(self.mechanism)
        self._accountant = RunAccountant(self.privacy, declared)
        if self.ledger_path is not None and self._ledger is None:
            against = (
                ["model consumers", "server"] if self.mechanism.secure_aggregation else ["model consumers"]
            )
            self._ledger = PrivacyLedger(
                self.ledger_path, self.privacy, declared, node_ids, protects_against=against
            )

    def epsilon(self) -> float:
        """ε at δ of every client so far (all clients share the population's events)."""
        return 0.0 if self._accountant is None else float(self._accountant.epsilon())

    # -- Strategy
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return self.inner.initialize_parameters(client_manager)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        client_manager.wait_for(self.mechanism.num_clients, timeout=math.ceil(self.wait_seconds))
        proxies = sorted(client_manager.all().values(), key=lambda p: p.node_id)
        if len(proxies) != self.mechanism.num_clients:
            raise ValueError(
                f"num_clients ({self.mechanism.num_clients}) is declared but {len(proxies)} nodes are "
                "connected"
            )
        if self._accountant is None:
            self._open([p.node_id for p in proxies])
        n = len(proxies)
        worst = self.mechanism.event(n, min_completed(n))
        if self._accountant.would_exceed([(worst, 1)]):
            self.stopped = True
            return []
        self.parameters = [np.asarray(a) for a in parameters_to_ndarrays(parameters)]
        self.asked = [p.node_id for p in proxies]
        fitins = FitIns(parameters, {ASKED_KEY: n, "server_round": server_round})
        return [(proxy, fitins) for proxy in proxies]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        mech, n = self.mechanism, len(self.asked)
        assert self.parameters is not None, "aggregate_fit before configure_fit"
        total: np.ndarray | None = None
        if results:
            first = results[0][1].parameters
            decoded = all(res.parameters is first for _, res in results)  # SecAgg+ hands one aggregate to all
            if mech.secure_aggregation and not decoded:
                raise RuntimeError(
                    "PrivateStrategy: noise shares arrived as individual updates; run SecAggPlusWorkflow "
                    "(mechanism.secaggplus_workflow())"
                )
            if mech.secure_aggregation:  # the workflow's mean over the c completed nodes
                total = _flat(parameters_to_ndarrays(first)) * len(results) * mech.encoding_range(n)
            else:  # the clipped updates' sum plus the server's noise
                sent = [_flat(parameters_to_ndarrays(res.parameters)) for _, res in results]
                updates = np.sum(sent, axis=0) * mech.encoding_range(n)
                total = updates + self._rng.normal(0.0, mech.noise_std, size=updates.size)
        completed = len(results) if total is not None else n  # halted: nothing decoded, the planned event
        events = [(mech.event(n, completed), 1)]
        self._accountant.compose(events)
        if self._ledger is not None:  # committed before the new model leaves this function
            self._ledger.record(self.rounds, self.asked, events)
        self.rounds += 1
        if total is None:
            return None, {}
        model = _flat(self.parameters) + total / (mech.participation * mech.num_clients)
        return ndarrays_to_parameters(_shaped(model, self.parameters)), {"epsilon": self.epsilon()}

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        return self.inner.evaluate(server_round, parameters)

    def summary(self) -> dict[str, Any]:
        """ε, δ, rounds and the declared constants (what a run's summary would say)."""
        mech = self.mechanism
        return {
            "epsilon": self.epsilon(),
            "delta": float(self.privacy.delta),
            "privacy_unit": "client",
            "rounds_accounted": self.rounds,
            "stopped_by_budget": self.stopped,
            "noise_multiplier": mech.noise_multiplier,
            "clip": mech.clip,
            "participation": mech.participation,
            "num_clients": mech.num_clients,
            "secure_aggregation": mech.secure_aggregation,
        }

    def write_summary(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.summary(), sort_keys=True) + "\n", encoding="utf-8")
