"""Shared machinery of the group methods of paper 001 (GDPFed family, P-FedAvg): budget groups, per-group
Poisson sampling, noise shares through :mod:`ampfl.fl.secure_sum`, the λ_g-reweighted server step, and the
noise-energy measurements. The algorithms and their math are described in :mod:`ampfl.fl.algorithms.gdpfed`.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel, Field, model_validator

from ampfl.fl.algorithms._common import FederatedAlgorithm, LocalTrainingParams, clip_rows
from ampfl.fl.algorithms.base import ROLE_NOISE, ROLE_SAMPLING
from ampfl.fl.algorithms.round_protocol import ClientMessage, GaussianShares, RoundSum
from ampfl.fl.secure_sum import GroupSums, noise_shares, secure_group_sums
from ampfl.sparsify import kept_count, top_kappa

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms.round_protocol import ClientInstructions, RoundProtocol
    from ampfl.fl.config import PrivacyConfig
    from ampfl.fl.engine import Engine
    from ampfl.fl.task import Task

__all__ = ["ROLE_GROUPS", "GroupFederatedAlgorithm", "GroupParams", "top_kappa_noise_share"]

#: Fewest clients of one SecAgg+ sum (``ampfl.flower.secagg.MIN_CLIENTS``; fl does not import flower).
SECAGG_MIN_CLIENTS = 3

#: Seed role of the client-to-group assignment (distinct from base.py's 0..5 and from other modules' roles).
ROLE_GROUPS = 21


def top_kappa_noise_share(kappa: float) -> float:
    """Share of a pure-noise vector's energy that top-κ keeps: κ + 2tφ(t), t = Φ⁻¹(1 − κ/2) (large d).

    For i.i.d. Gaussian coordinates, top-κ keeps those with |x| > t σ, whose energy share is
    E[x² 1{|x| > t}] / E[x²] = 2(tφ(t) + 1 − Φ(t)) = κ + 2tφ(t): the noise-dominated limit of top-κ after the
    noise (docs/planner.md, A5), 0.93 at κ = 0.5, 0.084 at κ = 0.01; the planner assumes κ.
    """
    from scipy.stats import norm

    k = float(kappa)
    if k >= 1.0:
        return 1.0
    t = float(norm.ppf(1.0 - k / 2.0))
    return k + 2.0 * t * float(norm.pdf(t))


class GroupParams(LocalTrainingParams):
    """Budgets per client: ``group_budgets`` + ``group_sizes`` (clients assigned to groups by a seeded
    permutation), or ``client_budgets`` (one per client; one group per distinct budget)."""

    participation: float = Field(0.1, gt=0.0, le=1.0, description="q, global participation ratio")
    group_budgets: list[float] | None = Field(None, description="ε_g per group (nats)")
    group_sizes: list[int] | None = Field(None, description="N_g per group (sum = number of clients)")
    client_budgets: list[float] | None = Field(None, description="ε_i per client")
    expected_group_sizes: list[int] | None = Field(
        None,
        description=(
            "N̂_g per group: declared public sizes the plan and the server step use (Σ_g q_g N̂_g); "
            "required for a private run"
        ),
    )
    server_learning_rate: float = Field(1.0, gt=0.0, description="η_s")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="server momentum on the aggregated update")

    @model_validator(mode="after")
    def _budgets_once(self) -> GroupParams:
        grouped = self.group_budgets is not None or self.group_sizes is not None
        if grouped and self.client_budgets is not None:
            raise ValueError("give group_budgets with group_sizes, or client_budgets, not both")
        if grouped and (
            self.group_budgets is None
            or self.group_sizes is None
            or len(self.group_budgets) != len(self.group_sizes)
            or not self.group_budgets
        ):
            raise ValueError("group_budgets and group_sizes must be given together, with the same length")
        for name, values in (("group_budgets", self.group_budgets), ("client_budgets", self.client_budgets)):
            if values is not None and not all(math.isfinite(v) and v > 0 for v in values):
                raise ValueError(f"{name} must be finite and > 0")
        if self.group_sizes is not None and any(s < 1 for s in self.group_sizes):
            raise ValueError("group_sizes must be >= 1")
        if self.expected_group_sizes is not None and any(s < 1 for s in self.expected_group_sizes):
            raise ValueError("expected_group_sizes must be >= 1")
        return self


class GroupFederatedAlgorithm(FederatedAlgorithm):
    """Clients in budget groups, per-group Poisson sampling and the λ_g-reweighted server step."""

    #: whether updates are clipped and noised (p_fedavg: False)
    private: ClassVar[bool] = True

    def __init__(
        self,
        params: BaseModel,
        task: Task,
        *,
        seed: int,
        engine: Engine | None = None,
        privacy: PrivacyConfig | None = None,
        privacy_key: int | None = None,
    ) -> None:
        super().__init__(params, task, seed=seed, engine=engine, privacy=privacy, privacy_key=privacy_key)
        self.p: GroupParams = params  # type: ignore[assignment]
        self.labels, self.budgets = self._groups()
        g = self.budgets.size
        self.members = [np.flatnonzero(self.labels == k) for k in range(g)]
        self.sizes = np.array([m.size for m in self.members], dtype=np.int64)
        self.public_sizes = self._public_sizes()
        self.rates = np.full(g, self.p.participation)
        self.noise_multipliers = np.zeros(g)
        self.kappa = np.ones(g)
        self.active = np.ones(g, dtype=bool)
        #: secure-aggregation sum of each group (GDPFed: its own; IDP-FedAvg: one sum for every group)
        self.sum_index = np.arange(g)
        self.noise_sum = np.zeros(g)  # Σ over rounds of the measured ‖ξ_g‖² (after the mask)
        self.noise_rounds = np.zeros(g, dtype=np.int64)
        self.velocity = torch.zeros_like(self.global_params)

    # -- groups ---------------------------------------------------------------------------------------
    def _groups(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.task.num_clients
        p = self.p
        if p.client_budgets is not None:
            from ampfl.accounting.groups import group_by_edges

            if len(p.client_budgets) != n:
                raise ValueError(f"client_budgets must list one budget per client ({n}).")
            edges = np.unique(np.asarray(p.client_budgets))[1:].tolist()
            groups = group_by_edges(p.client_budgets, edges=edges)
            return np.asarray(groups.labels, dtype=np.int64), np.asarray(groups.epsilons, dtype=float)
        if p.group_budgets is None or p.group_sizes is None:  # p_fedavg without budgets: one group
            return np.zeros(n, dtype=np.int64), np.array([math.inf])
        if sum(p.group_sizes) != n:
            raise ValueError(f"group_sizes must sum to num_clients = {n}. Found {sum(p.group_sizes)}.")
        # Public (the seed, not the privacy key): a client's group follows from its declared budget, which the
        # server and the client both know (the server runs one sum per group); the draw is data-independent.
        public = np.random.SeedSequence([self.seed, 0, ROLE_GROUPS])
        order = np.random.Generator(np.random.PCG64(public)).permutation(n)
        labels = np.empty(n, dtype=np.int64)
        labels[order] = np.repeat(np.arange(len(p.group_sizes)), p.group_sizes)
        return labels, np.asarray(p.group_budgets, dtype=float)

    def _public_sizes(self) -> np.ndarray:
        """N̂_g: the declared ``expected_group_sizes`` (public), used by the plan (q_g, z_g) and the server
        step's 1 / Σ_g q_g N̂_g. Sizes counted from the data would change with one added client, and with them
        the noise and its scale (issue 26, docs/threat_model.md): a private run must declare them, unless
        ``[privacy] neighbouring = "replace-one"`` declares the sizes public."""
        declared = self.p.expected_group_sizes
        g = self.sizes.size
        if declared is not None:
            if len(declared) != g:
                raise ValueError(
                    "algorithm.expected_group_sizes: must list one size per group "
                    f"({g}). Found {len(declared)}."
                )
            return np.asarray(declared, dtype=np.int64)
        if not self.private or self.privacy.neighbouring == "replace-one":
            return self.sizes.copy()
        raise ValueError(
            "algorithm.expected_group_sizes: required: the plan and the server step use the group sizes, so "
            "a private run must declare them as public constants (from this data they would be "
            f'{self.sizes.tolist()}); or set [privacy] neighbouring = "replace-one" to declare them public'
        )

    def group_budgets(self) -> dict[int, float]:
        return {g: float(e) for g, e in enumerate(self.budgets)} if self.private else {}

    def retire_groups(self, groups: list[int]) -> None:
        for g in groups:
            self.active[int(g)] = False

    def weights(self) -> np.ndarray:
        """λ_g = q_g N_g / Σ_{active} q_g' N_g' (0 for retired groups)."""
        w = np.where(self.active, self.rates * self.public_sizes, 0.0)
        return w / w.sum() if w.sum() > 0 else w

    # -- one round ------------------------------------------------------------------------------------
    def _aggregates(self) -> list[tuple[int, int]]:
        """(aggregate, its first group: whose z and κ it uses) for every aggregate with an active group."""
        out = []
        for a in range(int(self.sum_index.max()) + 1):
            members = np.flatnonzero(self.sum_index == a)
            if members.size and self.active[members].any():
                out.append((a, int(members[0])))
        return out

    def masks(self, round_index: int) -> list[torch.Tensor | None]:
        """Per-group public masks (boolean ``[d]``) at the current global model (:meth:`masks_at`)."""
        return self.masks_at(self.global_params)

    def masks_at(self, params: torch.Tensor) -> list[torch.Tensor | None]:
        """Per-group public masks (boolean ``[d]``) at the global model ``params``, or None (no masking
        before the noise)."""
        return [None] * self.budgets.size

    def sampled(self, round_index: int) -> list[np.ndarray]:
        """Each group's Poisson-sampled clients of round ``round_index`` (retired groups: none), from the
        sampling role's generator (the simulator's draws)."""
        rng = self.rng(round_index, ROLE_SAMPLING)
        return [
            m[rng.random(m.size) < q] if a else m[:0]
            for m, q, a in zip(self.members, self.rates, self.active, strict=True)
        ]

    def run_round(self, round_index: int) -> dict[str, float]:
        chosen = self.sampled(round_index)
        clients = np.sort(np.concatenate(chosen))
        labels = self.labels[clients]
        d = self.global_params.numel()
        metrics: dict[str, float] = {"participants": float(clients.size)}
        for g, c in enumerate(chosen):
            metrics[f"participants_g{g}"] = float(c.size)
        masks = self.masks(round_index)
        rows = torch.zeros((clients.size, d))
        if clients.size:
            result = self.engine.local_sgd(
                self.model,
                self.global_params,
                self.x_train,
                self.y_train,
                self.batches(clients, round_index, self.p),
                learning_rate=self.p.learning_rate,
                client_ids=clients,
            )
            rows = result.params - self.global_params
            metrics["train_loss"] = float(result.loss.mean())
            for g, mask in enumerate(masks):
                if mask is not None:
                    rows[labels == g] *= mask.to(rows.dtype)
            if self.private:
                clip = float(self.p.clip)  # type: ignore[attr-defined]
                rows, norms = clip_rows(rows, clip)
                metrics["clipped_fraction"] = float((norms > clip).to(torch.float32).mean())
        agg_labels = self.sum_index[labels]
        contributions, group_of, is_client = rows, agg_labels, np.ones(clients.size, dtype=bool)
        noise_by_group = None
        if self.private:
            contributions, group_of, is_client, noise_by_group = self._add_noise(
                round_index, rows, agg_labels, masks
            )
        present = {a for a, _ in self._aggregates()}
        sums = secure_group_sums(
            contributions,
            group_of,
            num_groups=int(self.sum_index.max()) + 1,
            is_client=is_client,
            present=[a in present for a in range(int(self.sum_index.max()) + 1)],
        )
        kept = self.server_update(sums)
        if noise_by_group is not None:
            self._measure(noise_by_group, kept, metrics)
        return metrics

    def _add_noise(
        self,
        round_index: int,
        rows: torch.Tensor,
        labels: np.ndarray,
        masks: list[torch.Tensor | None],
    ) -> tuple[torch.Tensor, np.ndarray, np.ndarray, torch.Tensor]:
        """Clients' rows plus their noise shares, by aggregate; one noise-only row per active empty one."""
        active = self._aggregates()
        counts = [int((labels == a).sum()) for a, _ in active]
        clip = float(self.p.clip)  # type: ignore[attr-defined]
        shares = noise_shares(
            self.torch_generator(round_index, ROLE_NOISE),
            counts,
            [float(self.noise_multipliers[lead]) * clip for _, lead in active],
            rows.shape[1],
            masks=[masks[lead] for _, lead in active],
        )
        blocks, group_of, is_client = [], [], []
        noise_by_group = torch.zeros((self.budgets.size, rows.shape[1]))
        start = 0
        for (a, _), m in zip(active, counts, strict=True):
            share = shares[start : start + max(m, 1)]
            start += max(m, 1)
            noise_by_group[a] = share.sum(0)  # diagnostics only (the simulator's, never the server's)
            blocks.append(rows[labels == a] + share if m else share)
            group_of.append(np.full(max(m, 1), a, dtype=np.int64))
            is_client.append(np.full(max(m, 1), m > 0))
        return (
            torch.cat(blocks) if blocks else rows,
            np.concatenate(group_of) if group_of else labels,
            np.concatenate(is_client) if is_client else np.ones(0, dtype=bool),
            noise_by_group,
        )

    def server_update(self, sums: GroupSums) -> list[torch.Tensor | None]:
        """The server step: it sees only the secure sums; returns the post-noise masks (if any)."""
        if not isinstance(sums, GroupSums):
            raise TypeError(f"server_update takes GroupSums only. Found {type(sums).__name__}.")
        # λ_g / (q_g N_g) = 1 / Σ_{active} q N for every group: one factor for every (aggregated) sum
        cohort = float(np.where(self.active, self.rates * self.public_sizes, 0.0).sum())
        total = torch.zeros_like(self.global_params)
        kept: list[torch.Tensor | None] = [None] * sums.num_groups
        for a, lead in self._aggregates():
            if not sums.present[a]:
                continue
            u = sums.sums[a]
            if self.sparsify_after_noise():
                u = torch.from_numpy(top_kappa(u.numpy(), float(self.kappa[lead])))
                kept[a] = u != 0
            total += u / cohort
        step = self.p.server_learning_rate * total
        self.velocity = self.p.momentum * self.velocity + step
        self.global_params = self.global_params + self.velocity
        return kept

    def sparsify_after_noise(self) -> bool:
        return False

    def _measure(
        self, noise: torch.Tensor, kept: list[torch.Tensor | None], metrics: dict[str, float]
    ) -> None:
        for g, _ in self._aggregates():
            xi = noise[g] if kept[g] is None else noise[g] * kept[g].to(noise.dtype)  # type: ignore[union-attr]
            energy = float(xi.double().square().sum())
            self.noise_sum[g] += energy
            self.noise_rounds[g] += 1
            metrics[f"noise_energy_g{g}"] = energy

    # -- the round protocol (ampfl.fl.algorithms.round_protocol), one sum per aggregate -------------------
    deploys: ClassVar[bool] = True
    #: Every asked node sends its noise share whether its own coin said yes: no count is decoded.
    sum_reveals_count: ClassVar[bool] = False
    noise_shares: ClassVar[bool] = True

    def round_protocol(self) -> RoundProtocol:
        return self

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

    def client_update(
        self,
        broadcast: torch.Tensor,
        instructions: ClientInstructions,
        client_state: torch.Tensor | None,
        rng: np.random.Generator,
    ) -> tuple[ClientMessage, torch.Tensor | None]:
        """Δ_i = w_i − w^t after Q local steps (the simulator's mini-batches of the cohort when the server
        sampled it, else from ``rng``), restricted to the group's public mask (GDPFed+ ``mask = "public"``)
        and, for a private algorithm, clipped to C: the message the group's sum adds up."""
        result = self.local_update(broadcast, instructions, self.p, rng if instructions.own_coin else None)
        row = result.params - broadcast
        mask = self.masks_at(broadcast)[int(self.labels[instructions.client])]
        if mask is not None:
            row *= mask.to(row.dtype)
        metrics = {"train_loss": float(result.loss.mean())}
        if self.private:
            clip = float(self.p.clip)  # type: ignore[attr-defined]
            row, norms = clip_rows(row, clip)
            metrics["clipped"] = float(norms[0] > clip)
        return ClientMessage(row[0], metrics), None

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
        drawn here, one row per aggregate (:func:`~ampfl.fl.secure_sum.noise_shares` with no client); else
        the sums carry the clients' shares already. A sum with ``total`` None (nothing decoded) is absent.
        The server sees only the per-aggregate sums: no count travels (``GroupSums.counts`` are 0)."""
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

    # -- reporting and state --------------------------------------------------------------------------
    def expected_noise_energy(self) -> np.ndarray:
        """E‖ξ_a‖² per round and aggregate = ⌈κ d⌉ z² C² (the planner's κ d z² C², with the kept count)."""
        d = self.global_params.numel()
        kept = np.array([kept_count(float(k), d) for k in self.kappa], dtype=float)
        clip = float(getattr(self.p, "clip", 1.0))
        leads = [int(np.flatnonzero(self.sum_index == a)[0]) for a in range(int(self.sum_index.max()) + 1)]
        return (kept * self.noise_multipliers**2 * clip * clip)[leads]

    def evaluate(self) -> dict[str, float]:
        out = super().evaluate()
        expected = self.expected_noise_energy()
        d, clip = self.global_params.numel(), float(getattr(self.p, "clip", 1.0))
        for g in range(self.budgets.size):
            out[f"q_g{g}"] = float(self.rates[g])
            if self.private:
                out[f"noise_multiplier_g{g}"] = float(self.noise_multipliers[g])
                out[f"kappa_g{g}"] = float(self.kappa[g])
            if self.private and g < expected.size:  # noise per secure-aggregation sum (g = aggregate)
                rounds = int(self.noise_rounds[g])
                out[f"noise_energy_mean_g{g}"] = float(self.noise_sum[g] / rounds) if rounds else 0.0
                out[f"noise_energy_expected_g{g}"] = float(expected[g])
                if self.sparsify_after_noise():  # the noise-dominated limit of top-κ after the noise (A5)
                    full = d * float(self.noise_multipliers[g]) ** 2 * clip * clip
                    out[f"noise_energy_expected_topk_g{g}"] = full * top_kappa_noise_share(
                        float(self.kappa[g])
                    )
                out[f"noise_rounds_g{g}"] = float(rounds)
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(
            active=self.active.copy(),
            noise_sum=self.noise_sum.copy(),
            noise_rounds=self.noise_rounds.copy(),
            velocity=self.velocity.clone(),
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.active = np.asarray(state["active"], dtype=bool).copy()
        self.noise_sum = np.asarray(state["noise_sum"], dtype=float).copy()
        self.noise_rounds = np.asarray(state["noise_rounds"], dtype=np.int64).copy()
        self.velocity = state["velocity"].clone()
