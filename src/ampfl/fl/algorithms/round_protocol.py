"""A round in two halves, client and server, for engines that run the clients elsewhere.

``Algorithm.run_round`` runs a whole round in-process (the simulator, vectorised over the cohort). An
algorithm that deploys (``ampfl deploy``: each client on its own Flower SuperNode) also implements
:class:`RoundProtocol` — the shape of pfl-research's round — and returns itself from
:meth:`~ampfl.fl.algorithms.base.Algorithm.round_protocol`:

1. server: :meth:`RoundProtocol.plan_round` names the clients asked in round r (the run's sampler, seeded by
   the secret privacy key, or every eligible client when each client flips its own participation coin,
   :meth:`RoundProtocol.own_coin`) and :meth:`RoundProtocol.broadcast` is the model they receive;
2. client: :meth:`RoundProtocol.client_update` — local training, clipping, and for an algorithm that noises
   on the client (MS-PAFL) the noise — returns a :class:`ClientMessage` (one flat vector and diagnostics)
   and the client's new private state (MS-PAFL's private submodel; it never leaves the client);
3. server: :meth:`RoundProtocol.aggregate` on the sum of the messages: with the server's own Gaussian noise
   (a ``generator``: the trusted-server mode), or on a sum the clients already noised (their noise shares
   under secure summation, :meth:`RoundProtocol.gaussian_shares`, or client-side noise), dividing only by
   public constants.

An algorithm that is its own protocol mixes in :class:`OwnRoundProtocol`, the pieces they share (it deploys,
a default server-sampled :meth:`RoundProtocol.plan_round`). A transport (``ampfl.flower``) calls these and
nothing algorithm-specific: the vectors it sums, the bound of their entries
(:meth:`RoundProtocol.message_bound`, for SecAgg+'s encoding) and whether the server may learn how many
clients contributed (:attr:`RoundProtocol.sum_reveals_count`) are the algorithm's to say.

Several sums (paper 001's privacy groups): a protocol that also implements :class:`GroupedSums` says which
sum each client's message enters (:meth:`GroupedSums.sum_groups`, :meth:`GroupedSums.sum_of`), the noise of
each sum (:meth:`GroupedSums.sum_shares`: its own z, std, public mask and events), the server step on one
:class:`RoundSum` per sum (:meth:`GroupedSums.aggregate_sums`) and which of a round's events concern a client
(:meth:`GroupedSums.client_events`, for the per-client ledger). The transport sums (trusted server) or runs
one SecAgg+ round (noise shares) per sum, and accounts a sum that lost noise shares at its own realised
multiplier. Every other protocol is one sum: :func:`grouped` wraps it so that the transport has one path
and calls its ``gaussian_shares`` and ``aggregate`` exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ampfl.accounting.events import PrivacyEvent


@dataclass(frozen=True)
class ClientInstructions:
    """What the server tells a client in round ``round_index``.

    Attributes:
        round_index: the round (0-based).
        cohort: the sorted ids of the clients asked this round (a client whose participation the server
            samples draws the same mini-batches as in the simulator from it).
        client: the id of the client that runs the update.
        own_coin: the client joined by its own coin (:meth:`RoundProtocol.own_coin`), not by the server's
            sampling: its random draws come from its own randomness only.
    """

    round_index: int
    cohort: np.ndarray
    client: int
    own_coin: bool = False

    def cohort_row(self) -> tuple[np.ndarray, int]:
        """``(cohort, row)``: the sorted cohort as int64 ids and the client's row in it (the row of the
        simulator's cohort-wide draws that are the client's).

        Raises:
            ValueError: the client is not in the round's cohort.
        """
        import numpy as np

        cohort = np.asarray(self.cohort, dtype=np.int64)
        row = int(np.searchsorted(cohort, self.client))
        if row >= len(cohort) or int(cohort[row]) != self.client:
            raise ValueError(f"client {self.client} is not in the round's cohort.")
        return cohort, row


@dataclass
class ClientMessage:
    """What one client sends the server: ``vector`` (the contribution the server sums: a local model, a
    clipped update, a clipped gradient sum or a noised public part) and ``metrics`` (diagnostics of its
    private data: never released, never sent under secure summation)."""

    vector: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GaussianShares:
    """The Gaussian noise of one sum of an algorithm whose clients may add it as shares before a secure sum.

    Attributes:
        noise_multiplier: z, the noise std over the sensitivity of the summed messages.
        std: σ, the noise std of the whole sum (each of n asked clients adds N(0, σ²/n)).
        event_at: the round's privacy event at a noise multiplier (the realised one when shares are missing),
            for a sum whose round is one event; None when ``events_at`` says it.
        mask: boolean ``[d]``: the noise (and each share) is zero outside it (GDPFed+'s public mask); None:
            every coordinate.
        events_at: the privacy events (``(event, count)`` pairs) of the round of this sum at a noise
            multiplier, for a sum whose round is several events (IDP-FedAvg: one per privacy group).
    """

    noise_multiplier: float
    std: float
    event_at: Callable[[float], PrivacyEvent] | None = None
    mask: torch.Tensor | None = None
    events_at: Callable[[float], list[tuple[PrivacyEvent, int]]] | None = None

    def events(self, noise_multiplier: float) -> list[tuple[PrivacyEvent, int]]:
        """The events of this sum's round at ``noise_multiplier`` (``events_at``, else ``event_at`` once)."""
        if self.events_at is not None:
            return self.events_at(noise_multiplier)
        if self.event_at is None:
            raise ValueError("GaussianShares: give event_at or events_at.")
        return [(self.event_at(noise_multiplier), 1)]


@dataclass(frozen=True)
class RoundSum:
    """One sum of a round as the server holds it before the server step.

    Attributes:
        total: the sum of the messages of this sum's clients: un-noised from a trusted server's transport,
            noised by the clients' shares (or client-side noise) after a secure sum; None when nothing was
            decoded (a halted secure sum) or nobody was asked: the sum is then absent from the step.
        count: the number of messages in ``total`` when the server knows it (trusted server; a secure sum
            whose analysis makes participation public), else None.
        asked: the number of clients asked for this sum.
    """

    total: torch.Tensor | None
    count: int | None
    asked: int


class RoundProtocol(Protocol):
    """The two halves of a round (module docstring); implemented by the algorithms that deploy."""

    #: Whether the server learns the number of contributing clients from a secure sum (MS-PAFL: its
    #: Eq. (13) divides by it, and its analysis holds with participation public to the server).
    sum_reveals_count: ClassVar[bool]
    #: Whether the clients may add the Gaussian noise as shares (:meth:`gaussian_shares` is not None).
    noise_shares: ClassVar[bool]
    #: Whether each client noises its own message in full (MS-PAFL, Eq. 12): a sum of messages is then
    #: noised whoever sums it, and the server's ``aggregate`` adds nothing.
    noised_on_client: ClassVar[bool]

    def broadcast(self) -> torch.Tensor:
        """The flat model the server sends the asked clients."""
        ...

    def own_coin(self, client: int, *, noise_shares: bool) -> float | None:
        """The probability with which ``client`` joins a round by its own coin (drawn on the client from its
        own entropy); None when the server samples the cohort. ``noise_shares``: under secure summation with
        client noise shares."""
        ...

    def plan_round(self, round_index: int, eligible: Sequence[int], *, noise_shares: bool) -> list[int]:
        """The sorted clients the server asks in round ``round_index`` among ``eligible``."""
        ...

    def client_update(
        self,
        broadcast: torch.Tensor,
        instructions: ClientInstructions,
        client_state: torch.Tensor | None,
        rng: np.random.Generator,
    ) -> tuple[ClientMessage, torch.Tensor | None]:
        """One client's half of the round from the server's ``broadcast``; ``client_state``: its private state
        (None: the initial one); ``rng``: its own randomness. Returns its message and new private state."""
        ...

    def aggregate(
        self, total: torch.Tensor, *, count: int | None, asked: int, generator: torch.Generator | None
    ) -> None:
        """The server's half on ``total``, the sum of ``count`` clients' messages (None: unknown to the
        server) of the ``asked`` ones: adds the Gaussian noise from ``generator`` (None: ``total`` is noised
        already, by the clients) and updates the model."""
        ...

    def message_bound(self) -> float:
        """The largest absolute entry of a message vector (w.h.p. for a message noised on the client)."""
        ...

    def gaussian_shares(self) -> GaussianShares | None:
        """The noise the clients may add as shares before a secure sum; None when they may not."""
        ...

    def reduce_metrics(self, metrics: Sequence[Mapping[str, float]]) -> dict[str, float]:
        """The round's diagnostics from the clients' message metrics."""
        ...

    def server_evaluate(self) -> dict[str, Any]:
        """Evaluation of what the server holds (MS-PAFL: the public model only; the private parts are on
        the clients)."""
        ...


class OwnRoundProtocol:
    """Mixin of an algorithm that is its own :class:`RoundProtocol` (``ampfl deploy`` runs it): the pieces
    every such algorithm shares. It deploys; the server learns no contributor count from a secure sum
    (MS-PAFL says otherwise); the server samples the cohort unless :meth:`own_coin` says each client flips
    its own coin. Listed before the algorithm's base so that its ``deploys`` replaces the base's False."""

    deploys: ClassVar[bool] = True
    sum_reveals_count: ClassVar[bool] = False

    def round_protocol(self) -> RoundProtocol:
        return cast("RoundProtocol", self)

    def own_coin(self, client: int, *, noise_shares: bool) -> float | None:
        """None: the server samples the cohort (the default)."""
        return None

    def plan_round(self, round_index: int, eligible: Sequence[int], *, noise_shares: bool) -> list[int]:
        """Every eligible client when each joins by its own coin (:meth:`own_coin` is not None; asked of
        client 0, the choice being the same for every client), else the clients the simulator samples in
        round ``round_index`` (:meth:`sampled_clients`) that are eligible."""
        if self.own_coin(0, noise_shares=noise_shares) is not None:
            return sorted(int(c) for c in eligible)
        allowed = {int(c) for c in eligible}
        return [int(c) for c in self.sampled_clients(round_index) if int(c) in allowed]

    def sampled_clients(self, round_index: int) -> np.ndarray:
        """The sorted ids the simulator samples in round ``round_index``: the cohort the server asks when it
        samples (an algorithm whose clients always flip their own coins never calls it)."""
        raise NotImplementedError(f"{type(self).__name__} samples no cohort on the server.")


@runtime_checkable
class GroupedSums(Protocol):
    """The extension of a :class:`RoundProtocol` whose server sums the messages in several separate sums.

    Paper 001 (GDPFed, arXiv:2505.13655v3, Algorithm 1 lines 13–17): the clients of each privacy group form
    their own secure sum, each group's noise N(0, z_g² C² I) is added by the group's clients as shares (or by
    a trusted server), and the server step sees only the per-group noised sums. A transport sums (or runs
    one SecAgg+ round) per sum, accounts a sum that lost noise shares at its own realised multiplier, and
    hands every sum to :meth:`aggregate_sums`. A protocol without these methods has one sum
    (:func:`grouped` wraps it).
    """

    def sum_groups(self, cohort: Sequence[int]) -> list[list[int]]:
        """The asked ``cohort`` split by sum: one list per sum of the algorithm (index = the sum), in the
        order of ``cohort``; an empty list for a sum nobody is asked in."""
        ...

    def sum_of(self, client: int) -> int:
        """The sum ``client``'s message enters."""
        ...

    def sum_shares(self, broadcast: torch.Tensor) -> list[GaussianShares | None]:
        """Per sum, the noise its clients may add as shares when the model is ``broadcast`` (a mask may depend
        on it); None for a sum without noise shares this round (no privacy, or a retired group)."""
        ...

    def aggregate_sums(self, sums: Sequence[RoundSum], *, generator: torch.Generator | None) -> None:
        """The server step on one :class:`RoundSum` per sum: adds each sum's Gaussian noise from
        ``generator`` (the trusted server), or (None) the sums are noised already; divides only by public
        constants."""
        ...

    def client_events(
        self, client: int, events: Sequence[tuple[PrivacyEvent, int]]
    ) -> list[tuple[PrivacyEvent, int]]:
        """The events of a round (``events``: all of them) that concern ``client`` (its group's)."""
        ...


class _OneSum:
    """:class:`GroupedSums` of a protocol whose server sums every message in one sum (bit-identical calls
    to its ``gaussian_shares`` and ``aggregate``)."""

    def __init__(self, protocol: RoundProtocol) -> None:
        self.protocol = protocol

    def sum_groups(self, cohort: Sequence[int]) -> list[list[int]]:
        return [[int(c) for c in cohort]]

    def sum_of(self, client: int) -> int:
        return 0

    def sum_shares(self, broadcast: torch.Tensor) -> list[GaussianShares | None]:
        return [self.protocol.gaussian_shares()]

    def aggregate_sums(self, sums: Sequence[RoundSum], *, generator: torch.Generator | None) -> None:
        (one,) = sums
        if one.total is None:  # nothing decoded: the model is kept
            return
        self.protocol.aggregate(one.total, count=one.count, asked=one.asked, generator=generator)

    def client_events(
        self, client: int, events: Sequence[tuple[PrivacyEvent, int]]
    ) -> list[tuple[PrivacyEvent, int]]:
        return list(events)


def grouped(protocol: RoundProtocol) -> GroupedSums:
    """``protocol``'s sums: itself when it implements :class:`GroupedSums`, else one sum of every message."""
    if isinstance(protocol, GroupedSums):
        return protocol
    return _OneSum(protocol)


def noised_by_clients(protocol: RoundProtocol) -> bool:
    """Whether the clients may add the protocol's Gaussian noise as shares (some sum has them)."""
    return any(s is not None for s in grouped(protocol).sum_shares(protocol.broadcast()))


def check_noised(protocol: RoundProtocol, *, private: bool) -> None:
    """Refuse (ValueError) a server step without server noise for a private algorithm whose sum the clients
    did not noise (neither noise shares nor client-side noise): that sum would be released un-noised."""
    if private and not noised_by_clients(protocol) and not protocol.noised_on_client:
        raise ValueError(
            "secure aggregation: this algorithm's noise is added by the server; a sum without it would be "
            "released un-noised."
        )


def mean_metrics(metrics: Sequence[Mapping[str, float]], *, clipped: bool) -> dict[str, float]:
    """``train_loss`` averaged over the clients and, for a private run (``clipped``), ``clipped_fraction``."""
    if not metrics:
        return {}
    out = {"train_loss": sum(float(m["train_loss"]) for m in metrics) / len(metrics)}
    if clipped:
        out["clipped_fraction"] = sum(float(m.get("clipped", 0.0)) for m in metrics) / len(metrics)
    return out
