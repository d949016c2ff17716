"""GDPFed, GDPFed− and GDPFed+ (paper 001, Xu, Hu, Kotevska, arXiv:2505.13655v3, Sec. III–V, Algorithm 1).

Clients are partitioned into privacy groups g (budget ε_g = the smallest budget among the group's clients).
Round t, for every group g still within its budget:

1. the server samples each client of g independently with probability q_g (Poisson; see below);
2. each sampled client runs Q local SGD steps from w^t, forms Δ_i = w_i − w^t, (GDPFed+ with the public
   mask: keeps only the mask's coordinates,) clips to C and adds its noise share N(0, z_g² C² / m_g)
   (m_g = the group's participants), so the secure sum carries N(0, z_g² C² I)
   (:mod:`ampfl.fl.privacy.secure_sum`);
3. the server receives only the group sums U_g (:class:`~ampfl.fl.privacy.secure_sum.GroupSums`), (GDPFed+
   with ``mask = "after_noise"``: Û_g = top_κ(U_g), Algorithm 1 line 17,) and updates
   w^{t+1} = w^t + η_s Σ_g λ_g Û_g / (q_g N_g) with λ_g = q_g N_g / Σ_{g' active} q_g' N_g' (the paper's one
   reweighting rule for every group method, [I], :func:`ampfl.accounting.groups.reweighting`), i.e.
   η_s Σ_g Û_g / (Σ_{g' active} q_g' N_g').

Variants (``name``): ``gdpfed``: q_g = q for every group, κ_g = 1; ``gdpfed_minus``: the planner's optimised
q_g (:func:`ampfl.accounting.groups.plan_groups`, ``sparsify="none"``), κ_g = 1; ``gdpfed_plus``: the
planner's q_g and κ_g (``sparsify="auto"``, or ``kappa`` given). z_g is calibrated for (ε_g, q_g, T, δ) by
the planner's sound RDP calibration (``analysis = "paper"``: the inferred Theorem 1, labelled, can
under-noise). Every group is its own secure-aggregation sum (``merge="none"``).

Sparsification order (``mask``): the paper applies top-κ on the server to the *noisy* sum (post-processing,
``"after_noise"``, the default); then top-κ also selects large noise coordinates and keeps more than a κ
share of the noise energy (docs/planner.md, A5). ``"public"`` fixes the mask before the noise: group g's
mask is the top-⌈κ_g d⌉ support of |w^t|, the magnitude of the current global model (the paper's
importance criterion, absolute magnitude; w^t is public, a post-processing of earlier DP releases), clients
sparsify, clip and add noise on the mask only, and the noise energy is exactly ⌈κ_g d⌉ z_g² C² per round.

Sampling: the paper samples q_g N_g clients *without replacement*; ampfl samples Poisson at rate q_g, the
mechanism :class:`~ampfl.accounting.events.GroupRoundEvent` accounts and the planner calibrates (fixed-size
group sampling would need replace-one accounting, which the planner does not offer). The number of
participants per group is disclosed by secure aggregation, as in any such protocol.

Privacy (unit: one client): each round reports one ``GroupRoundEvent(q_g, z_g, group=g)`` per active group;
the run keeps one accountant per group (``ampfl.fl.privacy.run_accountant``), reports ``epsilon_by_group``
against :meth:`GDPFed.group_budgets`, and retires a group (:meth:`GDPFed.retire_groups`) before a round that
would take it over its budget; run ε = max over groups (Corollary 1, disjoint client datasets).

Deployment (``ampfl deploy``, :class:`~ampfl.fl.algorithms.round_protocol.GroupedSums`; every variant, and
IDP-FedAvg, PFA and P-FedAvg): one sum per secure-aggregation aggregate. With a trusted server the server
samples each group as the simulator does, the asked clients send their clipped (masked) updates, and the
server sums them per group and adds each group's N(0, z_g² C² I) itself from an OS-seeded generator. Under
``--secure-aggregation secaggplus`` every client of an active group flips its own coin Bern(q_g) (Poisson
participation hidden from the server) and every asked client of group g adds its share N(0, z_g² C² / n_g)
(on the public mask: GDPFed+ ``mask = "public"``) before its group's own SecAgg+ round; the server decodes
only the per-group noised sums (no count), then applies top-κ to them for ``mask = "after_noise"``. A group
whose SecAgg+ round lost noise shares is accounted at its realised multiplier z_g √(c_g/n_g), the budget
on the worst case; each group's SecAgg+ sum needs at least 3 clients (:meth:`deploy_problem`). The
client-to-group assignment comes from the public seed (the server and the clients must agree on it).

Public normalisation (docs/threat_model.md): the plan (q_g, z_g) and the server step's
1 / Σ_g q_g N̂_g use the declared group sizes ``expected_group_sizes`` N̂_g, public constants, one per group
(their number must match the groups, else a one-line refusal); group sizes counted from the data would
change with one added client, and with them the plan and the released noise's scale. (``group_sizes`` is not
that constant: it is the simulator's partition, which must sum to the number of clients, private under
add/remove one client.) A private config without ``expected_group_sizes`` is refused in one line
(``algorithm.expected_group_sizes: required: ...``) unless ``[privacy] neighbouring = "replace-one"``
declares the group sizes public: N̂_g are then the partition's sizes, the run accounts every
``GroupRoundEvent`` as the Gaussian at sensitivity 2C without the group-sampling amplification (noise
multiplier z_g/2, :func:`ampfl.fl.privacy.run_accountant.replace_one_event`), and z_g is calibrated for that
event over ``num_rounds`` by the run's accountant (:meth:`GDPFed.noise_targets`,
:mod:`ampfl.fl.privacy.calibration`), so ε_g is met. The
planner's variants (``gdpfed_minus``, ``gdpfed_plus``, IDP-FedAvg) and ``analysis = "paper"`` plan for
add/remove with amplification and are refused under replace-one in one line naming ``privacy.neighbouring``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import BaseModel, Field, model_validator

from ampfl.accounting.events import GroupRoundEvent, PrivacyEvent
from ampfl.fl.algorithms.gdpfed_groups import (
    ROLE_GROUPS,
    GroupFederatedAlgorithm,
    GroupParams,
    top_kappa_noise_share,
)
from ampfl.sparsify import kept_count

if TYPE_CHECKING:
    from ampfl.fl.privacy.calibration import CalibratedNoise, NoiseTarget

#: Plans by their inputs (plan_groups is deterministic given them and costs seconds).
_PLANS: dict[tuple[Any, ...], Any] = {}

__all__ = [
    "ROLE_GROUPS",
    "GDPFed",
    "GDPFedMinus",
    "GDPFedParams",
    "GDPFedPlus",
    "GroupFederatedAlgorithm",
    "GroupParams",
    "top_kappa_noise_share",
]


class GDPFedParams(GroupParams):
    """Hyper-parameters of GDPFed / GDPFed− / GDPFed+ (module docstring)."""

    clip: float = Field(1.0, gt=0.0, description="C, L2 bound of each client's update")
    num_rounds: int = Field(100, ge=1, description="T, the horizon the noise is calibrated for")
    analysis: Literal["sound", "paper"] = "sound"
    kappa: list[float] | None = Field(None, description="κ_g per group (gdpfed_plus; default: planner)")
    signal_norm: float = Field(1.0, ge=0.0, description="m / C of the planner's error model (κ auto)")
    mask: Literal["after_noise", "public"] = "after_noise"

    @model_validator(mode="after")
    def _budgets_required(self) -> GDPFedParams:
        if self.group_budgets is None and self.client_budgets is None:
            raise ValueError("give group_budgets with group_sizes, or client_budgets")
        if self.kappa is not None and not all(0.0 < k <= 1.0 for k in self.kappa):
            raise ValueError("kappa must be in (0, 1]")
        return self


class GDPFed(GroupFederatedAlgorithm):
    """GDPFed: per-group noise for the group's smallest budget, q_g = q, κ_g = 1 (module docstring)."""

    name: ClassVar[str] = "gdpfed"
    Params: ClassVar[type[BaseModel]] = GDPFedParams
    #: how q_g and κ_g are chosen: "uniform" (q_g = q), "optimised" (planner, κ = 1), "sparse" (planner, κ)
    variant: ClassVar[str] = "uniform"

    def set_up(self) -> None:
        super().set_up()
        self.p: GDPFedParams = self.params  # type: ignore[assignment]
        if self.p.kappa is not None and (self.variant != "sparse" or len(self.p.kappa) != self.budgets.size):
            raise ValueError(f"kappa: only for gdpfed_plus, one value per group ({self.budgets.size}).")
        planned = self.variant != "uniform" or self.p.analysis != "sound"
        if self.privacy.neighbouring == "replace-one" and planned:
            raise ValueError(
                f'privacy.neighbouring: {self.name} with analysis = "{self.p.analysis}" plans its noise for '
                'add/remove-one accounting with amplification by group sampling, which "replace-one" drops; '
                'use gdpfed with analysis = "sound", or neighbouring = "add-remove" with '
                "algorithm.expected_group_sizes."
            )
        self._plan()
        self.privacy_unit = "client"

    def _plan(self) -> None:
        from ampfl.accounting.groups import ErrorModel, group_sigma, plan_groups

        p, delta = self.p, float(self.privacy.delta)
        if self.privacy.neighbouring == "replace-one":  # z_g calibrated by the run (noise_targets, set_noise)
            self.noise_multipliers = np.full(self.budgets.size, np.nan)
            return
        if self.variant == "uniform":
            self.noise_multipliers = np.array(
                [
                    group_sigma(
                        float(e),
                        sampling_rate=p.participation,
                        rounds=p.num_rounds,
                        target_delta=delta,
                        analysis=p.analysis,
                    )
                    for e in self.budgets
                ]
            )
            return
        sparse = self.variant == "sparse"
        key = (
            tuple(self.budgets.tolist()),
            tuple(self.public_sizes.tolist()),
            p.participation,
            p.num_rounds,
            delta,
            self.global_params.numel(),
            p.clip,
            p.signal_norm,
            ("given" if p.kappa is not None else "auto") if sparse else "none",
            tuple(p.kappa) if sparse and p.kappa is not None else None,
            p.analysis,
            self.seed,
        )
        if key not in _PLANS:  # deterministic in its inputs: a learning-rate grid plans once
            _PLANS[key] = plan_groups(
                list(key[0]),
                list(key[1]),
                participation=p.participation,
                rounds=p.num_rounds,
                target_delta=delta,
                model=ErrorModel(dim=key[5], clip_norm=p.clip, signal_norm=p.signal_norm),
                sparsify=key[8],
                kappa=None if key[9] is None else list(key[9]),
                analysis=p.analysis,
                merge="none",
                seed=self.seed,
                check_pld=False,  # the run's per-group accountant certifies ε ≤ ε_g round by round
            )
        plan = _PLANS[key]
        self.rates = np.array(plan.q, dtype=float)
        self.noise_multipliers = np.array(plan.noise_multiplier, dtype=float)
        self.kappa = np.array(plan.kappa, dtype=float)

    def noise_targets(self) -> list[NoiseTarget]:
        """Under ``neighbouring = "replace-one"``: z_g for ε_g after ``num_rounds`` rounds of the group's
        event, one target per group (``"group g"``), calibrated by the run's accountant; otherwise none (the
        planner's calibration, a named analysis: module docstring)."""
        if self.privacy.neighbouring != "replace-one":
            return []
        from ampfl.fl.privacy.calibration import NoiseTarget

        def event(g: int) -> Callable[[float], PrivacyEvent]:
            rate = float(self.rates[g])
            return lambda z: GroupRoundEvent(sampling_rate=rate, noise_multiplier=z, group=g)

        return [
            NoiseTarget(f"group {g}", event(g), float(e), self.p.num_rounds, who=self.name)
            for g, e in enumerate(self.budgets)
        ]

    def set_noise(self, resolved: Mapping[str, CalibratedNoise]) -> None:
        zs = [resolved[f"group {g}"].noise_multiplier for g in range(self.budgets.size)]
        self.noise_multipliers = np.array(zs, dtype=float)

    def round_events(self, round_index: int) -> list[tuple[PrivacyEvent, int]]:
        return [
            (
                GroupRoundEvent(
                    sampling_rate=float(self.rates[g]),
                    noise_multiplier=float(self.noise_multipliers[g]),
                    group=int(g),
                ),
                1,
            )
            for g in np.flatnonzero(self.active)
        ]


class GDPFedMinus(GDPFed):
    """GDPFed−: the planner's optimised q_g, κ_g = 1 (Table III of paper 001)."""

    name: ClassVar[str] = "gdpfed_minus"
    variant: ClassVar[str] = "optimised"


class GDPFedPlus(GDPFed):
    """GDPFed+: the planner's q_g and κ_g, per-group top-κ (Algorithm 1; ``mask`` chooses the order)."""

    name: ClassVar[str] = "gdpfed_plus"
    variant: ClassVar[str] = "sparse"

    def sparsify_after_noise(self) -> bool:
        return self.p.mask == "after_noise"

    def masks_at(self, params: torch.Tensor) -> list[torch.Tensor | None]:
        if self.p.mask == "after_noise":
            return [None] * self.budgets.size
        d = params.numel()
        # magnitude of the current global model w^t: public (a post-processing of earlier DP releases)
        order = torch.argsort(params.abs(), descending=True, stable=True)
        out: list[torch.Tensor | None] = []
        for k in self.kappa:
            mask = torch.zeros(d, dtype=torch.bool)
            mask[order[: kept_count(float(k), d)]] = True
            out.append(mask)
        return out
