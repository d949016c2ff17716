"""Model-split DP-SGD (002 Algorithm 1), dropout (002 Algorithm 2) and their unsplit baseline, on the engine.

The flat parameter vector is divided into a **split part** and an optional **non-split (shared) part**
(002 §3.2.2: the parameter tensors whose names start with one of ``shared``). The split part is cut into
fixed groups (``granularity``: every coordinate, or every output unit of a tensor: row i of a weight and
element i of the same layer's bias) and, for ``partition = "blocks"``, the groups are dealt into d disjoint
blocks of (nearly) equal size by a fixed random permutation drawn from the privacy key (the partitioning is
public, 002 §3.2.1). Round t (one DP-SGD step):

1. the server samples units (``sampling``: Poisson at rate q, Balanced Iteration Subsampling with k of T
   rounds per epoch, or ``"full"``: every unit); ``round_events`` reports the matching event;
2. each sampled unit i gets a secret mask: ``"blocks"`` one block b_i uniform in {1..d} (Alg. 1),
   ``"dropout"`` every group kept independently with probability 1/2 (Alg. 2, rate exactly 1/2); the shared
   part is always trained;
3. the unit runs Q local SGD steps (engine, vectorised over units) with the gradient of every parameter
   outside its mask set to 0 (those parameters are frozen: the unit trains its sub-model), and forms
   Δ_i = w_i − w^t; the split part and the shared part are clipped **separately**,
   Δ_i^s ← Δ_i^s·min(1, C_s/‖Δ_i^s‖), Δ_i^ns ← Δ_i^ns·min(1, C_ns/‖Δ_i^ns‖);
4. w^{t+1} = w^t + η_s (Σ_i Δ_i + ξ)/m̄ with ξ ~ N(0, z²C_s²) on **every** split coordinate (all blocks: which
   block a unit trained stays hidden) and N(0, z²C_ns²) on the shared coordinates, m̄ the expected cohort:
   a public constant, the declared ``expected_clients`` (qN, Nk/T or N computed from the data would change
   with one added unit, and with it the released noise's scale: docs/threat_model.md); a private
   config without it is refused in one line unless ``[privacy] neighbouring = "replace-one"`` declares N
   public (then m̄ comes from the data and the run accounts every event under replace-one, sensitivity 2C
   with no sampling, BIS or split amplification: each part's Gaussian at z/2, k of them per BIS epoch,
   :func:`ampfl.fl.privacy.run_accountant.replace_one_event`; ``target_epsilon`` calibrates z for that). The
   sampled units are clients (one record each in the DP-SGD case below), hence one key, as DP-FedAvg's.

DP-SGD is the special case Q = 1, b = 1, local learning rate 1 and one example per client (Δ_i = −∇ℓ_i, so
C clips per-example gradients and η_s is the learning rate); the privacy unit is then one record
(``privacy_unit = "record"`` when every client holds exactly one example), otherwise one client.
d = 1 without a shared part is standard DP-SGD / DP-FedAvg and is accounted exactly as such. When a round is
exactly one unmasked DP-SGD step (Q = 1, b = 1, d = 1 blocks or nothing to split, vectorised engine) it runs
at the one shared model (:meth:`DPSGDPartition._fast_round`, :mod:`ampfl.fl.engine.per_example`: no per-unit
weight copies, masks or ``[K, d]`` buffers; the same release).

Privacy (add/remove one unit; one noise multiplier z for both parts, each relative to its own clip norm):

- ``sampling = "full"``: ``ModelSplitEvent(d, z, z)`` per round (Thms 3.4/3.5 + §3.2.2) or
  ``DropoutEvent(z, z)`` (Thm 3.7);
- ``"poisson"``: ``PoissonSampledEvent(q, ModelSplitEvent | DropoutEvent)`` (Zhu–Wang's general bound over
  the partition bound: sound, loose at large q) or the Poisson-subsampled Gaussian at the unsplit multiplier
  (``partition.no_split_poisson_event``: split credit ignored); ``split_credit = "auto"`` reports whichever
  certifies the smaller ε over ``num_rounds`` (as ``ampfl account model-split --rate``). The paper's own
  Table 1 expansion is proven for one direction only and is never used for training (docs/partition.md);
- ``"bis"``: one ``BalancedIterationSubsamplingEvent(T, k, z_unsplit)`` per epoch, charged in the epoch's
  first round (no bound combines BIS with the split credit, so the split credit is ignored: sound).

``target_epsilon`` (with ``num_rounds``) is calibrated by the run (:mod:`ampfl.fl.privacy.calibration`) on the
very event it composes (under ``split_credit = "auto"``: both descriptions, the smaller z kept).

Deployment (``ampfl deploy``): :mod:`ampfl.fl.algorithms.dp_sgd_partition_protocol`, a round in two halves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
import torch
from pydantic import BaseModel, Field, model_validator

from ampfl.accounting.events import (
    DropoutEvent,
    GaussianEvent,
    ModelSplitEvent,
    PoissonSampledEvent,
    PrivacyEvent,
)
from ampfl.fl.algorithms._common import FederatedAlgorithm, LocalTrainingParams, check_noise_given_once
from ampfl.fl.algorithms.base import ROLE_CHECKIN, ROLE_NOISE, ROLE_SAMPLING
from ampfl.fl.algorithms.dp_sgd_partition_protocol import DPSGDPartitionProtocol, clip_parts
from ampfl.fl.sampling import BalancedIterationSampler, PoissonSampler

if TYPE_CHECKING:
    from ampfl.fl.privacy.calibration import CalibratedNoise, NoiseTarget

#: Role of the per-unit masks (block choice / dropout coins); the check-in role id is unused here.
ROLE_MASK = ROLE_CHECKIN


class DPSGDPartitionParams(LocalTrainingParams):
    """Hyper-parameters of model-split DP-SGD. Give ``noise_multiplier`` or ``target_epsilon``."""

    partition: Literal["blocks", "dropout"] = Field("blocks", description="Alg. 1 blocks or Alg. 2 dropout")
    num_submodels: int = Field(1, ge=1, description="d, disjoint blocks of the split part (blocks)")
    granularity: Literal["coordinate", "unit"] = Field("unit", description="the groups dealt into blocks")
    shared: list[str] = Field(default_factory=list, description="name prefixes of the non-split part")
    clip: float = Field(1.0, gt=0.0, description="C_s, L2 bound of the split part of each update")
    nonsplit_clip: float = Field(1.0, gt=0.0, description="C_ns, L2 bound of the shared part")
    noise_multiplier: float | None = Field(None, ge=0.0, description="z = noise std / clip (both parts)")
    target_epsilon: float | None = Field(None, gt=0.0, description="calibrate z for this ε after num_rounds")
    num_rounds: int | None = Field(None, ge=1, description="T of the run (calibration, split_credit)")
    sampling: Literal["poisson", "bis", "full"] = "poisson"
    sampling_rate: float | None = Field(None, gt=0.0, le=1.0, description="q (sampling = 'poisson')")
    bis_iterations: int | None = Field(None, ge=1, description="T_e, rounds per BIS epoch")
    bis_participations: int | None = Field(None, ge=1, description="k, rounds per unit per BIS epoch")
    split_credit: Literal["auto", "split", "none"] = "auto"
    expected_clients: float | None = Field(
        None, gt=0.0, description="m̄, the public constant the server divides by (about qN, Nk/T or N)"
    )
    server_learning_rate: float = Field(1.0, gt=0.0, description="η_s")

    @model_validator(mode="after")
    def _consistent(self) -> DPSGDPartitionParams:
        check_noise_given_once(self.noise_multiplier, self.target_epsilon, self.num_rounds)
        if self.sampling == "poisson" and self.sampling_rate is None:
            raise ValueError("sampling_rate is required when sampling = 'poisson'")
        if self.sampling == "bis":
            t, k = self.bis_iterations, self.bis_participations
            if t is None or k is None or k > t:
                raise ValueError("sampling = 'bis' needs bis_iterations T and bis_participations k <= T")
        if self.partition == "dropout" and self.num_submodels != 1:
            raise ValueError("num_submodels applies to partition = 'blocks' only (dropout: rate 1/2)")
        return self


class DPSGDPartition(DPSGDPartitionProtocol, FederatedAlgorithm):
    """Model-split DP-SGD / dropout with separate clipping of the split and shared parts (002 Algs. 1-2)."""

    name: ClassVar[str] = "dp_sgd_split"
    Params: ClassVar[type[BaseModel]] = DPSGDPartitionParams

    def set_up(self) -> None:
        super().set_up()
        self.p: DPSGDPartitionParams = self.params  # type: ignore[assignment]
        p = self.p
        n = self.task.num_clients
        self._build_groups()
        if p.num_submodels > max(1, self.num_groups):
            raise ValueError(f"num_submodels must be <= the {self.num_groups} groups of the split part.")
        if p.sampling == "poisson":
            assert p.sampling_rate is not None
            self.sampler = PoissonSampler(n, p.sampling_rate)
            from_data = p.sampling_rate * n
        elif p.sampling == "bis":
            assert p.bis_iterations is not None and p.bis_participations is not None
            from_data = n * p.bis_participations / p.bis_iterations
        else:
            from_data = float(n)
        self.expected = self.public_constant(
            p.expected_clients, key="expected_clients", from_data=from_data, private=p.noise_multiplier != 0.0
        )
        self._epoch: tuple[int, BalancedIterationSampler] | None = None
        self.credit = self._choose_credit()
        #: One DP-SGD step at the shared model (:meth:`_fast_round`) when a round is exactly that; False
        #: forces the general path (per-unit weights, masks), e.g. to compare the two.
        self.fast_path = self._fast_path_applies()
        self._one_record = bool(np.all(self.task.client_sizes() == 1))
        # a target_epsilon is calibrated by the run (noise_targets, set_noise), hence private
        self._set_noise_multiplier(math.nan if p.noise_multiplier is None else p.noise_multiplier)

    def _set_noise_multiplier(self, z: float) -> None:
        self.noise_multiplier = float(z)
        unit = "record" if self._one_record else "client"
        self.privacy_unit = None if self.noise_multiplier == 0.0 else unit

    def noise_targets(self) -> list[NoiseTarget]:
        """z for ``target_epsilon`` after ``num_rounds`` rounds (BIS: the epochs they start), calibrated by
        the run; under ``split_credit = "auto"`` for both descriptions of the round, the one needing the
        smaller z is used (:meth:`set_noise`)."""
        if self.p.target_epsilon is None:
            return []
        from ampfl.fl.privacy.calibration import NoiseTarget

        choices: dict[str, Callable[[float], PrivacyEvent]] = {}
        if self.p.split_credit == "auto" and self._split_counts():
            choices = {credit: partial(self.event_at, credit=credit) for credit in ("split", "none")}
        return [
            NoiseTarget(
                "noise_multiplier",
                self.event_at,
                self.p.target_epsilon,
                self._event_count(),
                self.neighboring_relation,
                choices=choices,
                who=self.name,
            )
        ]

    def set_noise(self, resolved: Mapping[str, CalibratedNoise]) -> None:
        calibrated = resolved["noise_multiplier"]
        if calibrated.choice is not None:
            self.credit = calibrated.choice
        self._set_noise_multiplier(calibrated.noise_multiplier)

    # -- the partition ---------------------------------------------------------------------------------
    def _build_groups(self) -> None:
        """``group_of[j]``: the group of coordinate j (−1: shared part); ``block_of_group`` (blocks mode)."""
        spec = self.model.spec
        group_of = torch.full((spec.dim,), -1, dtype=torch.int64)
        unit_ids: dict[tuple[str, int], int] = {}
        count = 0
        unknown = [s for s in self.p.shared if not any(name.startswith(s) for name in spec.names)]
        if unknown:
            raise ValueError(f"shared: {unknown[0]!r} matches no parameter; names: {', '.join(spec.names)}.")
        for name, shape, off in zip(spec.names, spec.shapes, spec.offsets, strict=True):
            size = math.prod(shape)
            if any(name.startswith(s) for s in self.p.shared):
                continue
            if self.p.granularity == "coordinate" or not shape:
                group_of[off : off + size] = torch.arange(count, count + size)
                count += size
                continue
            layer = name.rsplit(".", 1)[0]
            rows = torch.empty(shape[0], dtype=torch.int64)
            for i in range(shape[0]):
                key = (layer, i)
                if key not in unit_ids:
                    unit_ids[key] = count
                    count += 1
                rows[i] = unit_ids[key]
            group_of[off : off + size] = rows.repeat_interleave(size // shape[0])
        self.group_of = group_of
        self.num_groups = count
        self.split_coords = group_of >= 0
        perm = self.rng(-1, ROLE_MASK).permutation(max(count, 1))
        self.block_of_group = torch.from_numpy(perm % self.p.num_submodels)[:count]

    def masks(self, round_index: int, clients: np.ndarray) -> torch.Tensor:
        """``[K, dim]`` booleans: the coordinates each participant trains this round (its sub-model)."""
        rng = self.rng(round_index, ROLE_MASK)
        k = len(clients)
        if self.num_groups == 0:  # everything shared: plain DP-SGD
            return torch.ones((k, self.model.dim), dtype=torch.bool)
        if self.p.partition == "blocks":
            blocks = torch.from_numpy(rng.integers(0, self.p.num_submodels, size=k))
            keep = self.block_of_group[None, :] == blocks[:, None]
        else:
            keep = torch.from_numpy(rng.random((k, self.num_groups)) < 0.5)
        return self._coordinates(keep)

    def _coordinates(self, keep: torch.Tensor) -> torch.Tensor:
        """``[K, dim]`` masks from ``[K, groups]`` kept groups: a split coordinate follows its group, the
        shared part is always trained."""
        index = self.group_of.clamp(min=0).expand(keep.shape[0], -1)
        return torch.where(self.split_coords[None, :], torch.gather(keep, 1, index), True)

    # -- sampling ----------------------------------------------------------------------------------------
    def participants_of(self, round_index: int) -> np.ndarray:
        """Sorted ids of round ``round_index``'s participants."""
        p = self.p
        if p.sampling == "poisson":
            return self.participants(self.sampler, round_index)
        if p.sampling == "full":
            return np.arange(self.task.num_clients, dtype=np.int64)
        return self.bis_epoch(round_index // self._bis_t()).sample(round_index % self._bis_t())

    def _bis_t(self) -> int:
        assert self.p.bis_iterations is not None
        return self.p.bis_iterations

    def bis_epoch(self, epoch: int) -> BalancedIterationSampler:
        """The balanced schedule of one epoch (drawn from the sampling role of the epoch's first round)."""
        if self._epoch is None or self._epoch[0] != epoch:
            assert self.p.bis_participations is not None
            t = self._bis_t()
            rng = self.rng(epoch * t, ROLE_SAMPLING)
            self._epoch = (
                epoch,
                BalancedIterationSampler(self.task.num_clients, t, self.p.bis_participations, rng),
            )
        return self._epoch[1]

    # -- privacy events ------------------------------------------------------------------------------------
    @property
    def has_shared(self) -> bool:
        return bool(self.p.shared)

    def _split_mechanism(self, z: float) -> PrivacyEvent:
        z_ns = z if self.has_shared else None
        if self.p.partition == "dropout":
            return DropoutEvent(noise_multiplier=z, nonsplit_noise_multiplier=z_ns)
        return ModelSplitEvent(
            num_submodels=self.p.num_submodels, noise_multiplier=z, nonsplit_noise_multiplier=z_ns
        )

    def _unsplit(self, z: float) -> float:
        """The multiplier of the plain Gaussian dominating one step (1/z² = 1/z_s² + 1/z_ns²)."""
        return z / math.sqrt(2.0) if self.has_shared and self.num_groups > 0 else z

    def _event_count(self) -> int:
        """How many events the run composes over ``num_rounds`` (BIS: one per started epoch)."""
        assert self.p.num_rounds is not None
        if self.p.sampling == "bis":
            return -(-self.p.num_rounds // self._bis_t())
        return self.p.num_rounds

    def _split_counts(self) -> bool:
        """Whether the block choice can be credited at all (not for d = 1 blocks, nor under BIS)."""
        if self.p.sampling == "bis" or self.num_groups == 0:
            return False
        return self.p.partition == "dropout" or self.p.num_submodels > 1

    def event_at(self, noise_multiplier: float, credit: str | None = None) -> PrivacyEvent:
        """The event of one round (BIS: of one epoch) at noise multiplier z (module docstring)."""
        z = float(noise_multiplier)
        use_split = (credit or self.credit) == "split"
        p = self.p
        if p.sampling == "bis":
            return self.bis_epoch_event(z)
        if use_split:
            inner = self._split_mechanism(z)
        else:
            inner = GaussianEvent(noise_multiplier=self._unsplit(z))
        if p.sampling == "full":
            return inner
        assert p.sampling_rate is not None
        return PoissonSampledEvent(sampling_rate=p.sampling_rate, event=inner)

    def bis_epoch_event(self, z: float) -> PrivacyEvent:
        from ampfl.accounting.events import BalancedIterationSubsamplingEvent

        assert self.p.bis_participations is not None
        return BalancedIterationSubsamplingEvent(
            iterations=self._bis_t(),
            participations=self.p.bis_participations,
            noise_multiplier=self._unsplit(z),
        )

    def _choose_credit(self) -> str:
        """``"split"`` or ``"none"``: ``split_credit``, or under ``"auto"`` the one with the smaller ε."""
        if not self._split_counts():
            return "none"
        if self.p.split_credit != "auto":
            return self.p.split_credit
        if self.p.num_rounds is None:
            return "split"
        if self.p.target_epsilon is not None:  # the run calibrates both and keeps the smaller z (set_noise)
            return "split"
        from ampfl.fl.privacy.run_accountant import planned_epsilon

        assert self.p.noise_multiplier is not None
        eps = {
            c: planned_epsilon(
                [(self.event_at(self.p.noise_multiplier, c), self._event_count())],
                privacy=self.privacy,
                relation=self.neighboring_relation,
            )
            for c in ("split", "none")
        }
        return "split" if eps["split"] <= eps["none"] else "none"

    def round_events(self, round_index: int) -> list[tuple[PrivacyEvent, int]]:
        if self.privacy_unit is None:
            return []
        if self.p.sampling == "bis":
            return [(self.event_at(self.noise_multiplier), 1)] if round_index % self._bis_t() == 0 else []
        return [(self.event_at(self.noise_multiplier), 1)]

    # -- training ------------------------------------------------------------------------------------------
    def _fast_path_applies(self) -> bool:
        """Whether a round is one step of DP-SGD at the shared model: Q = 1, b = 1, every mask all ones
        (d = 1 blocks, or nothing to split), on the vectorised engine (the sequential one stays the
        reference)."""
        p = self.p
        unmasked = (p.partition == "blocks" and p.num_submodels == 1) or self.num_groups == 0
        return p.num_local_steps == 1 and p.batch_size == 1 and unmasked and self.engine.options.vectorized

    def _fast_round(self, round_index: int, clients: np.ndarray) -> tuple[torch.Tensor, dict[str, float]]:
        """Σ_i of the clipped updates Δ_i = −η ∇ℓ(w; x_i, y_i) of one-example steps, computed at the one
        shared model (:func:`ampfl.fl.engine.per_example.clipped_gradient_sum`: no per-unit weight copies, no
        masks); the same numbers as the general path up to float rounding (tests/fl/test_dp_sgd_fast_path.py).
        Clipping Δ_i to C is clipping ∇ℓ_i to C/η."""
        from ampfl.fl.engine.per_example import clipped_gradient_sum

        p = self.p
        lr = p.learning_rate
        rows = self.batches(clients, round_index, p).reshape(-1)  # the same ROLE_DATA draws
        spec = self.model.spec
        part_of = [0 if bool(self.split_coords[off]) else 1 for off in spec.offsets]
        result = clipped_gradient_sum(
            self.model,
            self.global_params,
            self.x_train.index_select(0, rows),
            self.y_train.index_select(0, rows),
            clips=[p.clip / lr, p.nonsplit_clip / lr],
            part_of=part_of,
            memory_cap_mb=self.engine.memory_cap_mb,
            device=self.engine.device,
        )
        over = result.norms * lr > torch.tensor([p.clip, p.nonsplit_clip])
        parts = 1 if bool(self.split_coords.all()) else 2
        clipped = sum(float(over[:, i].to(torch.float32).mean()) for i in range(parts)) / parts
        return -lr * result.total, {"train_loss": float(result.losses.mean()), "clipped_fraction": clipped}

    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.participants_of(round_index)
        p = self.p
        total = torch.zeros_like(self.global_params)
        metrics = {"participants": float(len(clients))}
        split = self.split_coords
        if len(clients) and self.fast_path:
            total, more = self._fast_round(round_index, clients)
            metrics.update(more)
        elif len(clients):
            masks = self.masks(round_index, clients)
            position = {int(c): i for i, c in enumerate(clients)}
            mask_f = masks.to(self.global_params.dtype)

            def hook(step: int, ids: np.ndarray, grads: torch.Tensor) -> torch.Tensor:
                rows = torch.as_tensor([position[int(c)] for c in ids], dtype=torch.int64)
                return grads * mask_f[rows]

            result = self.cohort_local_sgd(self.global_params, clients, round_index, p, grad_hook=hook)
            delta = (result.params - self.global_params) * mask_f
            total, clipped = clip_parts(delta, split, p.clip, p.nonsplit_clip)
            metrics["train_loss"] = float(result.loss.mean())
            metrics["clipped_fraction"] = clipped
        self.global_params = self.server_update(total, self.torch_generator(round_index, ROLE_NOISE))
        return metrics

    def server_update(self, total: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Server side (step 4): w + η_s (Σ_i Δ_i + ξ)/m̄, ``total`` = Σ_i Δ_i, ξ from ``generator``:
        N(0, z²C_s²) on every split coordinate, N(0, z²C_ns²) on the shared ones."""
        p = self.p
        noise = torch.randn(self.global_params.shape, generator=generator)
        scale = (
            torch.where(self.split_coords, p.clip, p.nonsplit_clip).to(noise.dtype) * self.noise_multiplier
        )
        return self.apply_noised_sum(total + noise * scale)

    def apply_noised_sum(self, noised: torch.Tensor) -> torch.Tensor:
        """The new global model w + η_s · noised / m̄ from Σ_i Δ_i + ξ, however it was noised (by
        :meth:`server_update`, or by the clients' noise shares under secure aggregation)."""
        return self.global_params + self.p.server_learning_rate * noised / self.expected
