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


def _shares(algorithm: Algorithm) -> GaussianShares:
    """The algorithm's Gaussian noise as client shares (its round protocol's ``gaussian_shares``)."""
    shares = algorithm.round_protocol().gaussian_shares()
    if shares is None:
        raise ValueError(f"algorithm.name: the noise of {algorithm.name} cannot be split into client shares.")
    return shares


def contribution_bound(algorithm: Algorithm) -> float:
    """B: the largest absolute entry of an un-noised contribution u_i (the protocol's ``message_bound``)."""
    return algorithm.round_protocol().message_bound()


def share_std(algorithm: Algorithm, asked: int) -> float:
    """σ/√n: the std of one node's noise share."""
    if asked < 1:
        raise ValueError(f"asked must be >= 1. Found {asked}.")
    return _shares(algorithm).std / math.sqrt(asked)


def encoding_range(algorithm: Algorithm, asked: int) -> float:
    """R = B + TAIL · σ/√n (module docstring)."""
    return contribution_bound(algorithm) + TAIL * share_std(algorithm, asked)


def noise_share(algorithm: Algorithm, asked: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """ξ_i ~ N(0, σ²/n · I_size) from the node's own generator (OS entropy, never the run seed)."""
    return rng.standard_normal(size) * share_std(algorithm, asked)


def min_completed(asked: int) -> int:
    """The fewest nodes with which SecAgg+ (every node sharing with every other) still decodes a sum."""
    return max(round(RECONSTRUCTION_THRESHOLD * asked), 2)


def realised_multiplier(algorithm: Algorithm, asked: int, completed: int) -> float:
    """z·√(c/n): the noise multiplier of a sum to which c of the n noise shares contributed."""
    if not 0 <= completed <= asked:
        raise ValueError(f"completed must be in [0, {asked}]. Found {completed}.")
    return _shares(algorithm).noise_multiplier * math.sqrt(completed / asked)


def realised_events(
    algorithm: Algorithm, planned: Events, asked: int, completed: int
) -> list[tuple[PrivacyEvent, int]]:
    """The round's events as the server saw them: ``planned`` (the algorithm's ``round_events``) when every
    asked node completed, else the one event at :func:`realised_multiplier` (module docstring)."""
    if completed >= asked or not planned:
        return list(planned)
    z = realised_multiplier(algorithm, asked, completed)
    return [(_shares(algorithm).event_at(z), 1)]


def worst_case_events(algorithm: Algorithm, planned: Events, asked: int) -> list[tuple[PrivacyEvent, int]]:
    """The events of a round in which only :func:`min_completed` nodes complete (for budget checks)."""
    return realised_events(algorithm, planned, asked, min(min_completed(asked), asked))
