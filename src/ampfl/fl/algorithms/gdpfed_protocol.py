"""The client and server halves of a round of paper 001's group algorithms (GDPFed family, IDP-FedAvg, PFA,
P-FedAvg) for ``ampfl deploy``: the :class:`~ampfl.fl.algorithms.round_protocol.RoundProtocol` and
:class:`~ampfl.fl.algorithms.round_protocol.GroupedSums` methods of
:class:`~ampfl.fl.algorithms.gdpfed_groups.GroupFederatedAlgorithm`, as the mixin :class:`GroupRoundProtocol`.

One secure sum per privacy group (IDP-FedAvg: one for the whole cohort); each group's noise N(0, z_g² C² I)
is added by a trusted server (:meth:`~GroupRoundProtocol.aggregate_sums` with a generator) or, under
SecAgg+, as the group's clients' shares (:meth:`~GroupRoundProtocol.sum_shares`); each sum carries the
per-group events of its groups for the ledger (:meth:`~GroupRoundProtocol.client_events`: a client's own
group's). The simulator's half of the same algorithms (groups, sampling, the server step, the noise-energy
measurements) stays in :mod:`ampfl.fl.algorithms.gdpfed_groups`.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from ampfl.fl.algorithms._common import clip_rows
from ampfl.fl.algorithms.round_protocol import ClientMessage, GaussianShares, OwnRoundProtocol, RoundSum
from ampfl.fl.privacy.secure_sum import noise_shares, secure_group_sums

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pydantic import BaseModel

    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms._common import FederatedAlgorithm as _Base
    from ampfl.fl.algorithms.gdpfed_groups import GroupParams
    from ampfl.fl.engine.vectorised import LocalResult
    from ampfl.fl.privacy.secure_sum import GroupSums
else:
    _Base = object

__all__ = ["SECAGG_MIN_CLIENTS", "GroupRoundProtocol"]

#: Fewest clients of one SecAgg+ sum (``ampfl.flower.secagg.MIN_CLIENTS``; fl does not import flower).
SECAGG_MIN_CLIENTS = 3


class GroupRoundProtocol(OwnRoundProtocol, _Base):
    """The round protocol (:mod:`ampfl.fl.algorithms.round_protocol`) of a
    :class:`~ampfl.fl.algorithms.gdpfed_groups.GroupFederatedAlgorithm`, one sum per aggregate (module
    docstring). A mixin: at run time its only base is ``object``; the state it reads is the group
    algorithm's (declared below for the type checker)."""

    if TYPE_CHECKING:
        # the types mypy infers from GroupFederatedAlgorithm.__init__ (a declaration here takes precedence)
        p: GroupParams
        private: ClassVar[bool]
        labels: np.ndarray
        rates: np.ndarray[tuple[int], np.dtype[Any]]
        active: np.ndarray[tuple[int], np.dtype[Any]]
        sum_index: np.ndarray[tuple[int], np.dtype[np.signedinteger[Any]]]
        noise_multipliers: np.ndarray[tuple[int], np.dtype[np.float64]]

        def _aggregates(self) -> list[tuple[int, int]]: ...
        def masks_at(self, params: torch.Tensor) -> list[torch.Tensor | None]: ...
        def sampled(self, round_index: int) -> list[np.ndarray]: ...
        def server_update(self, sums: GroupSums) -> list[torch.Tensor | None]: ...

    #: ``sum_reveals_count`` stays False: every asked node sends its noise share whether its own coin said
    #: yes, so no count is decoded.
    noise_shares: ClassVar[bool] = True

    @classmethod
    def deploy_problem(cls, params: BaseModel, *, secure_aggregation: bool) -> str | None:
        """Under SecAgg+ each secure sum (a privacy group; IDP-FedAvg: the whole cohort) runs its own
        SecAgg+ round, which needs at least 3 clients (with two, the sum and one's own vector reveal the
        other's)."""
        if not secure_aggregation or not cls.private:
            return None
        sizes = cls.declared_sum_sizes(params)
        if sizes and min(sizes) < SECAGG_MIN_CLIENTS:
            return (
                f"algorithm.group_sizes: --secure-aggregation secaggplus runs one SecAgg+ sum per group of "
                f"{cls.name}, each needing at least {SECAGG_MIN_CLIENTS} clients. Found sizes {sizes}."
            )
        return None

    @classmethod
    def declared_sum_sizes(cls, params: BaseModel) -> list[int]:
        """The number of clients of each secure sum from ``params`` (group sizes, or one group per distinct
        client budget); empty when the params do not say."""
        p: GroupParams = params  # type: ignore[assignment]
        if p.group_sizes is not None:
            return [int(s) for s in p.group_sizes]
        if p.client_budgets is not None:
            return [int(c) for c in np.unique(np.asarray(p.client_budgets), return_counts=True)[1]]
        return []

    def own_coin(self, client: int, *, noise_shares: bool) -> float | None:
        """Under noise shares each client flips its own coin Bern(q_g) of its group g (Poisson sampling,
        hidden from the server: the shares go out whatever the coin said); otherwise None: the server samples
        each group (the simulator's draws)."""
        return float(self.rates[int(self.labels[int(client)])]) if noise_shares else None

    def plan_round(self, round_index: int, eligible: Sequence[int], *, noise_shares: bool) -> list[int]:
        """The eligible clients of the active groups (noise shares: each flips its own coin), else the
        simulator's per-group Poisson sample restricted to them."""
        allowed = {int(c) for c in eligible}
        if noise_shares:
            return sorted(c for c in allowed if self.active[int(self.labels[c])])
        return [int(c) for c in np.sort(np.concatenate(self.sampled(round_index))) if int(c) in allowed]

    def local_message(
        self, broadcast: torch.Tensor, client: int, result: LocalResult, trained: torch.Tensor | None
    ) -> ClientMessage:
        """Δ_i = w_i − w^t after Q local steps (:meth:`client_update`: the simulator's mini-batches of the
        cohort when the server sampled it, else from the client's own randomness), restricted to the group's
        public mask (GDPFed+ ``mask = "public"``) and, for a private algorithm, clipped to C: the message the
        group's sum adds up."""
        row = result.params - broadcast
        mask = self.masks_at(broadcast)[int(self.labels[client])]
        if mask is not None:
            row *= mask.to(row.dtype)
        metrics = {"train_loss": float(result.loss.mean())}
        if self.private:
            clip = float(self.p.clip)  # type: ignore[attr-defined]
            row, norms = clip_rows(row, clip)
            metrics["clipped"] = float(norms[0] > clip)
        return ClientMessage(row[0], metrics)

    def message_bound(self) -> float:
        """‖Δ̃_i‖ ≤ C for a private algorithm (every entry within [-C, C]); unbounded without clipping."""
        return float(self.p.clip) if self.private else math.inf  # type: ignore[attr-defined]

    def gaussian_shares(self) -> GaussianShares | None:
        """The shares of the one sum of an algorithm with a single secure sum (IDP-FedAvg); None otherwise:
        the noise is per sum (:meth:`sum_shares`), and a caller unaware of sums would refuse a secure round
        rather than release a sum it believes un-noised."""
        shares = self.sum_shares(self.global_params)
        return shares[0] if len(shares) == 1 else None

    def aggregate(
        self, total: torch.Tensor, *, count: int | None, asked: int, generator: torch.Generator | None
    ) -> None:
        """The server step of an algorithm with one secure sum (:meth:`aggregate_sums`)."""
        if int(self.sum_index.max()) != 0:
            raise ValueError(
                f"{self.name}: one sum per group; the server step takes them all (aggregate_sums)."
            )
        self.aggregate_sums([RoundSum(total, count, asked)], generator=generator)

    def sum_groups(self, cohort: Sequence[int]) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(int(self.sum_index.max()) + 1)]
        for c in cohort:
            out[self.sum_of(int(c))].append(int(c))
        return out

    def sum_of(self, client: int) -> int:
        return int(self.sum_index[int(self.labels[int(client)])])

    def sum_shares(self, broadcast: torch.Tensor) -> list[GaussianShares | None]:
        """Per aggregate with an active group: N(0, z² C² I) on the lead group's mask, with the events of its
        active groups at a multiplier (a noise share lost to a dropout lowers it for every group of the
        sum); None without privacy or for a retired aggregate."""
        out: list[GaussianShares | None] = [None] * (int(self.sum_index.max()) + 1)
        if not self.private:
            return out
        clip = float(self.p.clip)  # type: ignore[attr-defined]
        masks = self.masks_at(broadcast)
        for a, lead in self._aggregates():
            groups = [int(g) for g in np.flatnonzero((self.sum_index == a) & self.active)]
            z = float(self.noise_multipliers[lead])
            out[a] = GaussianShares(
                z, z * clip, mask=masks[lead], events_at=functools.partial(self._sum_events, groups)
            )
        return out

    def _sum_events(self, groups: list[int], noise_multiplier: float) -> list[tuple[PrivacyEvent, int]]:
        """The events of ``groups`` (one sum) at ``noise_multiplier`` (as :meth:`round_events`)."""
        from ampfl.accounting.events import GroupRoundEvent

        return [
            (
                GroupRoundEvent(
                    sampling_rate=float(self.rates[g]), noise_multiplier=noise_multiplier, group=g
                ),
                1,
            )
            for g in groups
        ]

    def aggregate_sums(self, sums: Sequence[RoundSum], *, generator: torch.Generator | None) -> None:
        """The server step (:meth:`server_update`) on the per-aggregate sums: with ``generator`` (a trusted
        server, which summed the clipped messages) each active aggregate's noise N(0, z² C² I) on its mask,
        drawn here, one row per aggregate (:func:`~ampfl.fl.privacy.secure_sum.noise_shares` with no client);
        else the sums carry the clients' shares already. A sum with ``total`` None (nothing decoded) is
        absent. The server sees only the per-aggregate sums: no count travels (``GroupSums.counts`` are 0)."""
        num = int(self.sum_index.max()) + 1
        if len(sums) != num:
            raise ValueError(f"sums must hold one RoundSum per aggregate ({num}). Found {len(sums)}.")
        active = self._aggregates()
        d = self.global_params.numel()
        noise = None
        if generator is not None and self.private and active:
            masks = self.masks_at(self.global_params)  # w^t: before this step
            clip = float(self.p.clip)  # type: ignore[attr-defined]
            noise = noise_shares(
                generator,
                [0] * len(active),
                [float(self.noise_multipliers[lead]) * clip for _, lead in active],
                d,
                masks=[masks[lead] for _, lead in active],
            )
        rows, labels = [], []
        for i, (a, _) in enumerate(active):
            total = sums[a].total
            if total is None:
                continue
            total = total.to(self.global_params.dtype)
            rows.append(total if noise is None else total + noise[i])
            labels.append(a)
        present = [a in labels for a in range(num)]
        contributions = torch.stack(rows) if rows else torch.zeros((0, d), dtype=self.global_params.dtype)
        received = secure_group_sums(
            contributions, labels, num_groups=num, is_client=[False] * len(rows), present=present
        )
        self.server_update(received)

    def client_events(
        self, client: int, events: Sequence[tuple[PrivacyEvent, int]]
    ) -> list[tuple[PrivacyEvent, int]]:
        """The events of ``client``'s group (its per-group accountant's; Corollary 1: groups are disjoint)."""
        from ampfl.accounting.events import GroupRoundEvent

        g = int(self.labels[int(client)])
        return [(e, c) for e, c in events if not isinstance(e, GroupRoundEvent) or int(e.group) == g]
