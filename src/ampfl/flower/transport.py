"""The Flower transport of a round: ship the round to the SuperNodes, collect what comes back, release it.

:mod:`ampfl.flower.server_app` runs the run's round loop; for each round it calls, in this order,

1. :func:`budgeted_events`: the events the budget check uses (under SecAgg+ noise shares the worst case of
   dropouts, :func:`ampfl.flower.noise_shares.worst_case_events`);
2. :func:`collect_round`: one ``train`` message to each node of the cohort (replies that are empty, failed or
   late are dropped), or with ``secure`` one SecAgg+ round (:func:`ampfl.flower.secagg.secure_sum`), whose
   noise shares may have dropped out: the returned :class:`CollectedRound` holds the round's events **as the
   server saw them** (at the realised noise multiplier) and its diagnostics;
3. the loop commits those events (ledger, run accountant), **then** :func:`release_round`: the round
   protocol's ``aggregate`` with the server's Gaussian noise from a generator seeded by the operating system
   (the run seed is in the config every client holds, so noise drawn from it could be subtracted), or on the
   decoded sum the clients noised already (noise shares, client-side noise), which adds nothing.

Nothing here names an algorithm: the round protocol (:mod:`ampfl.fl.algorithms.round_protocol`) says what
is summed, its bound and who adds the noise.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid

from ampfl.flower.noise_shares import realised_events, realised_multiplier, worst_case_events

if TYPE_CHECKING:
    import torch

    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.algorithms.round_protocol import RoundProtocol
    from ampfl.flower.secagg import SecureSum

Events = Sequence[tuple["PrivacyEvent", int]]


@dataclass
class CollectedRound:
    """One round's replies as the server holds them before the release.

    Attributes:
        events: the round's privacy events as the server saw it (at the realised noise multiplier when noise
            shares dropped out); the loop commits them before :func:`release_round`.
        metrics: the round's diagnostics (participants, asked, completed nodes, the protocol's reduced client
            metrics, the realised noise multiplier): never released.
        asked: the number of clients asked.
        total: without secure aggregation, the sum of the replies' message vectors.
        count: without secure aggregation, the number of replies.
        secure: with secure aggregation, what SecAgg+ decoded.
    """

    events: list[tuple[PrivacyEvent, int]]
    metrics: dict[str, float] = field(default_factory=dict)
    asked: int = 0
    total: torch.Tensor | None = None
    count: int = 0
    secure: SecureSum | None = None


def uses_noise_shares(algorithm: Algorithm, secure: bool) -> bool:
    """Whether the clients add the Gaussian noise as shares (under SecAgg+, for an algorithm that may)."""
    return secure and algorithm.round_protocol().gaussian_shares() is not None


def budgeted_events(
    algorithm: Algorithm, events: Events, num_clients: int, secure: bool
) -> list[tuple[PrivacyEvent, int]]:
    """The events the budget check uses: under noise shares a round can be noised less than planned
    (dropouts), so the worst case; else ``events``."""
    if uses_noise_shares(algorithm, secure):
        return worst_case_events(algorithm, events, num_clients)
    return list(events)


def collect_round(
    grid: Grid,
    context: Context,
    algorithm: Algorithm,
    nodes: Mapping[int, int],
    cohort: Sequence[int],
    round_index: int,
    timeout: float,
    planned: Events,
    *,
    secure: bool,
) -> CollectedRound:
    """Run round ``round_index`` on the ``cohort`` (client ids; ``nodes``: client id → node id)."""
    if secure:
        return _secure_round(
            grid, context, algorithm, [nodes[c] for c in cohort], round_index, timeout, planned
        )
    protocol = algorithm.round_protocol()
    total, count, metrics = _train_round(grid, protocol, nodes, list(cohort), round_index, timeout)
    return CollectedRound(list(planned), metrics, asked=len(cohort), total=total, count=count)


def release_round(algorithm: Algorithm, collected: CollectedRound) -> None:
    """The server step on a committed round (module docstring)."""
    import torch

    protocol = algorithm.round_protocol()
    if collected.secure is None:
        assert collected.total is not None
        noise = torch.Generator().manual_seed(secrets.randbits(63))
        protocol.aggregate(collected.total, count=collected.count, asked=collected.asked, generator=noise)
        return
    result = collected.secure
    if result.total is None:  # a halted protocol (nothing decoded) keeps the model
        return
    from ampfl.fl.algorithms.round_protocol import check_noised

    check_noised(protocol, private=algorithm.privacy_unit is not None)
    protocol.aggregate(result.total, count=result.joined, asked=result.asked, generator=None)


def _train_round(
    grid: Grid,
    protocol: RoundProtocol,
    nodes: Mapping[int, int],
    cohort: list[int],
    round_index: int,
    timeout: float,
) -> tuple[torch.Tensor, int, dict[str, float]]:
    """Send round ``round_index`` to the cohort; returns the sum of the replies' message vectors, their
    number and the round's diagnostics (:meth:`RoundProtocol.reduce_metrics` of the replies' metrics)."""
    import torch

    broadcast = protocol.broadcast()  # MS-PAFL: the public submodel w̄_p only (Eq. 14)
    params = ArrayRecord({"params": Array(broadcast.numpy())})
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
    replies: list[tuple[int, torch.Tensor, dict[str, float]]] = []
    for reply in grid.send_and_receive(messages, timeout=timeout) if messages else []:
        if reply.has_error() or "arrays" not in reply.content.array_records:
            continue  # failed or declined
        vector = torch.from_numpy(reply.content.array_records["arrays"]["update"].numpy().copy())
        metrics = reply.content.metric_records["metrics"]
        values = {key: float(value) for key, value in metrics.items()}  # type: ignore[arg-type]
        replies.append((client_of[reply.metadata.src_node_id], vector, values))
    replies.sort(key=lambda reply: reply[0])
    total = torch.stack([v for _, v, _ in replies]).sum(0) if replies else torch.zeros_like(broadcast)
    out = {"participants": float(len(replies)), "asked": float(len(cohort))}
    out.update(protocol.reduce_metrics([m for _, _, m in replies]))
    return total, len(replies), out


def _secure_round(
    grid: Grid,
    context: Context,
    algorithm: Algorithm,
    asked: list[int],
    round_index: int,
    timeout: float,
    planned: Events,
) -> CollectedRound:
    """One SecAgg+ round over the ``asked`` nodes: what the server holds, the round's events as it saw
    them (at the realised noise multiplier when noise shares dropped out: :mod:`ampfl.flower.noise_shares`)
    and the round's diagnostics."""
    from ampfl.flower.secagg import secure_sum

    result = secure_sum(grid, context, algorithm, asked, round_index, timeout)
    metrics = {"asked": float(result.asked), "completed": float(result.completed)}
    events = list(planned)
    if uses_noise_shares(algorithm, True) and result.total is not None and planned:
        events = realised_events(algorithm, planned, result.asked, result.completed)
        metrics["noise_multiplier_realised"] = realised_multiplier(algorithm, result.asked, result.completed)
    if result.joined is not None:
        metrics["participants"] = float(result.joined)
    return CollectedRound(events, metrics, asked=len(asked), secure=result)
