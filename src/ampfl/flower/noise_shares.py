"""Distributed Gaussian noise under SecAgg+: each asked node adds its share, the server decodes a noised sum.

``ampfl deploy --secure-aggregation secaggplus`` for ``dp_dsgd_rp`` (004) and ``dp_fedavg`` (client level,
Poisson sampling by the clients' own coins). With n the number of nodes asked in a round and σ the
algorithm's ``noise_std`` (z·C), every asked node sends

    v_i = (u_i + ξ_i) / R,   ξ_i ~ N(0, σ²/n · I)   (:func:`noise_share`, the node's own OS entropy),

u_i its un-noised contribution (DP-DSGD-RP: g_i, the sum of its per-example clipped gradients; DP-FedAvg: its
clipped update Δ̃_i) or **zeros** when it did not check in / was not sampled or its local sample is empty:
the share is sent whatever the node's coin, so the n shares sum to N(0, σ² I), the calibrated noise, whatever
the realised cohort. The server decodes Σ_i v_i · R = Σ_i u_i + N(0, σ² I) and hands it to the algorithm's
``apply_noised_sum``; it never holds Σ_i u_i, nor any count, sample total or loss (nothing else is summed).

Quantisation range. SecAgg+ clips every entry of v_i to [-1, 1] before quantising it (2^22 levels), so
R = B + :data:`TAIL` · σ/√n (:func:`encoding_range`), with B the bound of an entry of u_i (DP-DSGD-RP:
‖g_i‖ ≤ |S_i| C ≤ d C, d = ``local_dataset_size``; DP-FedAvg: ‖Δ̃_i‖ ≤ C). An entry is clipped only when its
noise share exceeds TAIL = 10 standard deviations: probability erfc(10/√2) ≈ 1.5e-23 per entry
(:data:`CLIP_PROBABILITY`). Over a run of T rounds, n nodes and m coordinates, the released sums differ from
the unclipped Gaussian mechanism's with probability at most T·n·m·1.5e-23 (1e-11 for T = n = 1000,
m = 1e7), which adds at most (1 + e^ε) times that to δ: negligible, and not added to the reported δ. The
quantisation step is 2R/2^22 per node and coordinate (stochastic rounding, unbiased), far below σ/√n for
the settings here; like floating-point Gaussian sampling, the rounding is not part of the analysis (a
distributed *discrete* Gaussian would be; not done).

Dropouts. SecAgg+ reconstructs the masks of a node that drops out, but its vector — and so its noise share —
is missing from the sum: with c of the n asked nodes completing the masked-vector stage, the decoded sum
carries N(0, σ² c/n), i.e. noise multiplier z·√(c/n). The server, which has then seen that sum, composes
the round's event at that **realised** multiplier (:func:`realised_events`) in the ledger and the run's
accountant **before** the model is released; no round is silently accounted at the calibrated z. SecAgg+
halts when fewer than its threshold t = max(round(2n/3), 2) nodes remain (:func:`min_completed`): then
nothing is decoded, the model is kept, and the round's planned event is still composed (conservative). With
``[privacy] max_epsilon`` the budget is checked before each round on the worst case, the event at
z·√(t/n) (:func:`worst_case_events`), so dropouts cannot take ε past the budget (the run may stop a round
earlier than the simulator would).

Several sums (paper 001, one SecAgg+ round per privacy group: :class:`~ampfl.fl.algorithms.round_protocol.
GroupedSums`): each sum s has its own σ_s = z_s·C, n_s asked nodes and shares N(0, σ_s²/n_s) (zero outside a
public mask); a sum that lost shares is accounted at z_s·√(c_s/n_s) for its own groups only
(:func:`realised_sum_events`), and the budget check takes every sum at z_s·√(min over n ≤ N_s of t(n)/n)
(:func:`worst_case_events`, N_s the sum's clients: fewer of them may be asked).

Trust: the server is honest but curious. It tells each node n (``asked`` of the round's config); a node
refuses an n outside [1, N]. A server lying about n (or a coalition of nodes that subtract their own shares)
lowers the noise the server sees; SecAgg+ does not prevent that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.algorithms.round_protocol import GaussianShares

Events = Sequence[tuple["PrivacyEvent", int]]

#: Standard deviations of a noise share the encoding range covers.
TAIL = 10.0
#: Probability that one entry of one node's vector is clipped by SecAgg+ (a noise share beyond TAIL σ/√n).
CLIP_PROBABILITY = math.erfc(TAIL / math.sqrt(2.0))
#: SecAgg+'s reconstruction threshold as a fraction of the nodes (``ampfl.flower.secagg.secure_sum``).
RECONSTRUCTION_THRESHOLD = 2.0 / 3.0


def _shares(algorithm: Algorithm, part: int = 0, broadcast: torch.Tensor | None = None) -> GaussianShares:
    """The Gaussian noise of sum ``part`` as client shares (the round protocol's ``sum_shares`` at the model
    ``broadcast``, default the server's; one sum: its ``gaussian_shares``)."""
    from ampfl.fl.algorithms.round_protocol import grouped

    protocol = algorithm.round_protocol()
    model = protocol.broadcast() if broadcast is None else broadcast
    parts = grouped(protocol).sum_shares(model)
    shares = parts[part] if 0 <= part < len(parts) else None
    if shares is None:
        raise ValueError(f"algorithm.name: the noise of {algorithm.name} cannot be split into client shares.")
    return shares


def contribution_bound(algorithm: Algorithm) -> float:
    """B: the largest absolute entry of an un-noised contribution u_i (the protocol's ``message_bound``)."""
    return algorithm.round_protocol().message_bound()


def share_std(algorithm: Algorithm, asked: int, *, part: int = 0) -> float:
    """σ/√n: the std of one node's noise share in sum ``part`` of n asked nodes."""
    if asked < 1:
        raise ValueError(f"asked must be >= 1. Found {asked}.")
    return _shares(algorithm, part).std / math.sqrt(asked)


def range_of(bound: float, noise_std: float, asked: int) -> float:
    """R = B + TAIL · σ/√n: entries bounded by ``bound`` plus a share of N(0, ``noise_std``²) split n ways."""
    if asked < 1:
        raise ValueError(f"asked must be >= 1. Found {asked}.")
    return float(bound + TAIL * (noise_std / math.sqrt(asked)))


def encoding_range(algorithm: Algorithm, asked: int, *, part: int = 0) -> float:
    """R = B + TAIL · σ/√n (module docstring) of sum ``part``."""
    return range_of(contribution_bound(algorithm), _shares(algorithm, part).std, asked)


def noise_share(
    algorithm: Algorithm,
    asked: int,
    size: int,
    rng: np.random.Generator,
    *,
    part: int = 0,
    broadcast: torch.Tensor | None = None,
) -> np.ndarray:
    """ξ_i ~ N(0, σ²/n · I_size) of sum ``part`` from the node's own generator (OS entropy, never the run
    seed), zero outside the sum's public mask at the model ``broadcast`` (GDPFed+ ``mask = "public"``)."""
    if asked < 1:
        raise ValueError(f"asked must be >= 1. Found {asked}.")
    shares = _shares(algorithm, part, broadcast)
    share: np.ndarray = rng.standard_normal(size) * (shares.std / math.sqrt(asked))
    if shares.mask is not None:
        share = share * shares.mask.numpy().astype(share.dtype)
    return share


def min_completed(asked: int) -> int:
    """The fewest nodes with which SecAgg+ (every node sharing with every other) still decodes a sum."""
    return max(round(RECONSTRUCTION_THRESHOLD * asked), 2)


def realised(noise_multiplier: float, asked: int, completed: int) -> float:
    """z·√(c/n): the noise multiplier of a sum to which c of the n noise shares contributed."""
    if not 0 <= completed <= asked:
        raise ValueError(f"completed must be in [0, {asked}]. Found {completed}.")
    return float(noise_multiplier * math.sqrt(completed / asked))


def realised_multiplier(algorithm: Algorithm, asked: int, completed: int, *, part: int = 0) -> float:
    """z·√(c/n): the noise multiplier of sum ``part`` to which c of the n noise shares contributed."""
    return realised(_shares(algorithm, part).noise_multiplier, asked, completed)


def realised_events(
    algorithm: Algorithm, planned: Events, asked: int, completed: int
) -> list[tuple[PrivacyEvent, int]]:
    """The round's events as the server saw them, for an algorithm with one sum: ``planned`` (the
    algorithm's ``round_events``) when every asked node completed, else the one event at
    :func:`realised_multiplier` (module docstring; several sums: :func:`realised_sum_events`)."""
    return realised_sum_events(algorithm, planned, [(asked, completed)])


def realised_sum_events(
    algorithm: Algorithm, planned: Events, outcomes: Sequence[tuple[int, int] | None]
) -> list[tuple[PrivacyEvent, int]]:
    """The round's events as the server saw them, sum by sum (``outcomes[s]``: (asked n_s, completed c_s)
    of sum s, None when it did not run or decoded nothing): ``planned`` when no sum lost a share, else each
    sum's events (:meth:`~ampfl.fl.algorithms.round_protocol.GaussianShares.events`) at its realised
    multiplier z_s·√(c_s/n_s), or at z_s when it lost none or did not run (its planned events: conservative).
    A dropout in one group's sum lowers that group's noise only (paper 001: one secure sum per group)."""
    from ampfl.fl.algorithms.round_protocol import grouped

    lost = [o is not None and o[1] < o[0] for o in outcomes]
    if not any(lost) or not planned:
        return list(planned)
    protocol = algorithm.round_protocol()
    parts = grouped(protocol).sum_shares(protocol.broadcast())
    if len(parts) != len(outcomes):
        raise ValueError(f"outcomes must list one entry per sum ({len(parts)}). Found {len(outcomes)}.")
    events: list[tuple[PrivacyEvent, int]] = []
    for s, (shares, outcome) in enumerate(zip(parts, outcomes, strict=True)):
        if shares is None:
            continue  # no noise shares in this sum this round (a retired group): no event
        z = shares.noise_multiplier
        if outcome is not None and lost[s]:
            z = realised_multiplier(algorithm, outcome[0], outcome[1], part=s)
        events.extend(shares.events(z))
    return events


def worst_ratio(size: int) -> float:
    """min over n ≤ ``size`` asked nodes of t(n)/n (:func:`min_completed`): the smallest share of a sum's
    noise a decoded SecAgg+ sum of at most ``size`` nodes can carry (0.6 at n = 5)."""
    return min(min(min_completed(n), n) / n for n in range(1, max(int(size), 1) + 1))


def worst_case_events(algorithm: Algorithm, planned: Events, asked: int) -> list[tuple[PrivacyEvent, int]]:
    """The events of a round in which only :func:`min_completed` nodes complete each sum (for budget
    checks). One sum of ``asked`` nodes: the event at z·√(t/n); several sums (``asked``: the population):
    each at z_s·√(min over n ≤ N_s of t(n)/n), N_s the sum's clients (fewer of them may be asked)."""
    from ampfl.fl.algorithms.round_protocol import GroupedSums

    protocol = algorithm.round_protocol()
    if not isinstance(protocol, GroupedSums):
        return realised_events(algorithm, planned, asked, min(min_completed(asked), asked))
    if not planned:
        return []
    parts = protocol.sum_shares(protocol.broadcast())
    sizes = [len(members) for members in protocol.sum_groups(range(asked))]
    events: list[tuple[PrivacyEvent, int]] = []
    for shares, size in zip(parts, sizes, strict=True):
        if shares is not None:
            events.extend(shares.events(shares.noise_multiplier * math.sqrt(worst_ratio(size))))
    return events
