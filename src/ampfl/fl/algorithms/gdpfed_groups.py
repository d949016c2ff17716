"""Shared machinery of the group methods of paper 001 (GDPFed family, P-FedAvg): budget groups, per-group
Poisson sampling, noise shares through :mod:`ampfl.fl.privacy.secure_sum`, the λ_g-reweighted server step, and
the noise-energy measurements. The algorithms and their math are described in
:mod:`ampfl.fl.algorithms.gdpfed`; their deploy round (client and server halves, one sum per group):
:mod:`ampfl.fl.algorithms.gdpfed_protocol`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import Field, model_validator

from ampfl.fl.algorithms._common import FederatedAlgorithm, LocalTrainingParams, clip_rows
from ampfl.fl.algorithms.base import ROLE_NOISE, ROLE_SAMPLING
from ampfl.fl.algorithms.gdpfed_protocol import SECAGG_MIN_CLIENTS as SECAGG_MIN_CLIENTS
from ampfl.fl.algorithms.gdpfed_protocol import GroupRoundProtocol
from ampfl.fl.privacy.secure_sum import GroupSums, noise_shares, secure_group_sums
from ampfl.sparsify import kept_count, top_kappa

__all__ = ["ROLE_GROUPS", "GroupFederatedAlgorithm", "GroupParams", "top_kappa_noise_share"]

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


class GroupFederatedAlgorithm(GroupRoundProtocol, FederatedAlgorithm):
    """Clients in budget groups, per-group Poisson sampling and the λ_g-reweighted server step; the deploy
    round protocol from :class:`~ampfl.fl.algorithms.gdpfed_protocol.GroupRoundProtocol`."""

    #: whether updates are clipped and noised (p_fedavg: False)
    private: ClassVar[bool] = True

    def set_up(self) -> None:
        super().set_up()
        self.p: GroupParams = self.params  # type: ignore[assignment]
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
        the noise and its scale (docs/threat_model.md): a private run must declare them, unless
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
        if self.sizes_from_data_allowed(self.private):
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
            result = self.cohort_local_sgd(self.global_params, clients, round_index, self.p)
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
