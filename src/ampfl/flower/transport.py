"""The Flower transport of a round: ship the round to the SuperNodes, collect what comes back, release it.

:mod:`ampfl.flower.server_app` runs the run's round loop; for each round it calls, in this order,

1. :func:`budgeted_events`: the events the budget check uses (under SecAgg+ noise shares the worst case of
   dropouts, :func:`ampfl.flower.noise_shares.worst_case_events`);
2. :func:`collect_round`: one ``train`` message to each node of the cohort (replies that are empty, failed or
   late are dropped), summed per sum of the round protocol (one, or one per privacy group:
   :class:`~ampfl.fl.algorithms.round_protocol.GroupedSums`), or with ``secure`` one SecAgg+ round per sum
   (:func:`ampfl.flower.secagg.secure_sum`, side by side), whose noise shares may have dropped out: the
   returned :class:`CollectedRound` holds the round's events **as the server saw them** (each sum's at its
   realised noise multiplier) and its diagnostics;
3. the loop commits those events (ledger, run accountant), **then** :func:`release_round`: the round
   protocol's ``aggregate_sums`` (one sum: its ``aggregate``) with the server's Gaussian noise from a
   generator seeded by the operating system (the run seed is in the config every client holds, so noise
   drawn from it could be subtracted), or on the decoded sums the clients noised already (noise shares,
   client-side noise), to which it adds nothing.

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

from ampfl.flower.noise_shares import realised_multiplier, realised_sum_events, worst_case_events

if TYPE_CHECKING:
    import torch

    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.algorithms.round_protocol import RoundProtocol, RoundSum
    from ampfl.flower.secagg import SecureSum

Events = Sequence[tuple["PrivacyEvent", int]]


@dataclass
class CollectedRound:
    """One round's replies as the server holds them before the release.

    Attributes:
        events: the round's privacy events as the server saw it (at the realised noise multiplier of every
            sum whose noise shares dropped out); the loop commits them before :func:`release_round`.
        metrics: the round's diagnostics (participants, asked, completed nodes, the protocol's reduced client
            metrics, the realised noise multipliers): never released.
        asked: the number of clients asked.
        sums: one :class:`~ampfl.fl.algorithms.round_protocol.RoundSum` per sum of the protocol (one, unless
            it sums by group: :class:`~ampfl.fl.algorithms.round_protocol.GroupedSums`): without secure
            aggregation the sum of the replies' message vectors, with it what SecAgg+ decoded (noised).
        secure: whether the sums came from secure aggregation (the server adds no noise to them).
        decoded: with secure aggregation, each sum's SecAgg+ outcome (None: nobody asked in that sum).
    """

    events: list[tuple[PrivacyEvent, int]]
    metrics: dict[str, float] = field(default_factory=dict)
    asked: int = 0
    sums: list[RoundSum] = field(default_factory=list)
    secure: bool = False
    decoded: list[SecureSum | None] = field(default_factory=list)


def uses_noise_shares(algorithm: Algorithm, secure: bool) -> bool:
    """Whether the clients add the Gaussian noise as shares (under SecAgg+, for an algorithm that may)."""
    from ampfl.fl.algorithms.round_protocol import noised_by_clients

    return secure and noised_by_clients(algorithm.round_protocol())


def budgeted_events(
    algorithm: Algorithm, events: Events, num_clients: int, secure: bool
) -> list[tuple[PrivacyEvent, int]]:
    """The events the budget check uses: under noise shares a round can be noised less than planned
    (dropouts), so the worst case of every sum; else ``events``."""
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
    """Run round ``round_index`` on the ``cohort`` (client ids; ``nodes``: client id → node id): one sum per
    sum of the round protocol (:func:`~ampfl.fl.algorithms.round_protocol.grouped`)."""
    if secure:
        return _secure_round(grid, context, algorithm, nodes, list(cohort), round_index, timeout, planned)
    protocol = algorithm.round_protocol()
    sums, metrics = _train_round(grid, protocol, nodes, list(cohort), round_index, timeout)
    return CollectedRound(list(planned), metrics, asked=len(cohort), sums=sums)


def release_round(algorithm: Algorithm, collected: CollectedRound) -> None:
    """The server step on a committed round (module docstring)."""
    import torch

    from ampfl.fl.algorithms.round_protocol import check_noised, grouped

    protocol = algorithm.round_protocol()
    if not collected.secure:
        noise = torch.Generator().manual_seed(secrets.randbits(63))
        grouped(protocol).aggregate_sums(collected.sums, generator=noise)
        return
    if all(s.total is None for s in collected.sums):  # a halted protocol (nothing decoded) keeps the model
        return
    check_noised(protocol, private=algorithm.privacy_unit is not None)
    grouped(protocol).aggregate_sums(collected.sums, generator=None)


def _train_round(
    grid: Grid,
    protocol: RoundProtocol,
    nodes: Mapping[int, int],
    cohort: list[int],
    round_index: int,
    timeout: float,
) -> tuple[list[RoundSum], dict[str, float]]:
    """Send round ``round_index`` to the cohort; returns, per sum of the protocol, the sum of its replies'
    message vectors and their number, and the round's diagnostics (:meth:`RoundProtocol.reduce_metrics` of
    the replies' metrics; with several sums the replies per sum, ``participants_g<s>``)."""
    import torch

    from ampfl.fl.algorithms.round_protocol import RoundSum, grouped

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
    parts = grouped(protocol)
    groups = parts.sum_groups(cohort)
    sums = []
    out = {"participants": float(len(replies)), "asked": float(len(cohort))}
    for s, members in enumerate(groups):
        vectors = [v for c, v, _ in replies if parts.sum_of(c) == s]
        total = torch.stack(vectors).sum(0) if vectors else torch.zeros_like(broadcast)
        sums.append(RoundSum(total, len(vectors), len(members)))
        if len(groups) > 1:
            out[f"participants_g{s}"] = float(len(vectors))
    out.update(protocol.reduce_metrics([m for _, _, m in replies]))
    return sums, out


def _secure_round(
    grid: Grid,
    context: Context,
    algorithm: Algorithm,
    nodes: Mapping[int, int],
    cohort: list[int],
    round_index: int,
    timeout: float,
    planned: Events,
) -> CollectedRound:
    """One SecAgg+ round per sum of the protocol over its asked nodes: what the server holds (each sum's
    decoded total, and nothing per node), the round's events as it saw them (each sum that lost noise shares
    at its realised multiplier: :mod:`ampfl.flower.noise_shares`) and the round's diagnostics."""
    from ampfl.fl.algorithms.round_protocol import RoundSum, grouped
    from ampfl.flower.secagg import secure_sum

    groups = grouped(algorithm.round_protocol()).sum_groups(cohort)
    several = len(groups) > 1

    def one(s: int) -> SecureSum | None:
        members = groups[s]
        if not members:
            return None
        return secure_sum(grid, context, algorithm, [nodes[c] for c in members], round_index, timeout, part=s)

    if sum(1 for members in groups if members) > 1:
        # The sums' node sets are disjoint and their SecAgg+ rounds independent: run them side by side, so
        # that a round waits for its slowest group, not for the sum over groups of Flower's polling.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            decoded = list(pool.map(one, range(len(groups))))
    else:
        decoded = [one(s) for s in range(len(groups))]
    ran = [r for r in decoded if r is not None]
    metrics = {"asked": float(sum(r.asked for r in ran)), "completed": float(sum(r.completed for r in ran))}
    events = list(planned)
    outcomes = [None if r is None or r.total is None else (r.asked, r.completed) for r in decoded]
    if uses_noise_shares(algorithm, True) and planned and any(o is not None for o in outcomes):
        events = realised_sum_events(algorithm, planned, outcomes)
        for s, outcome in enumerate(outcomes):
            if outcome is not None:
                key = f"noise_multiplier_realised_g{s}" if several else "noise_multiplier_realised"
                metrics[key] = realised_multiplier(algorithm, outcome[0], outcome[1], part=s)
    if several:
        for s, r in enumerate(decoded):
            if r is not None:
                metrics[f"completed_g{s}"] = float(r.completed)
    joined = [r.joined for r in ran if r.joined is not None]
    if joined:
        metrics["participants"] = float(sum(joined))
    sums = [RoundSum(None, None, 0) if r is None else RoundSum(r.total, r.joined, r.asked) for r in decoded]
    return CollectedRound(events, metrics, asked=len(cohort), sums=sums, secure=True, decoded=decoded)
