"""Audit-time subclasses that record what a stronger observer sees, and the scores it computes.

:func:`ampfl.fl.audit.run.audit_run` scores most runs from the released model only. Two analyses cover an
observer that sees more, and the audit gives that observer what it sees (never more):

- **DP-DSGD-RP with participation revealed** (:func:`revealed_participation`). The same algorithm code,
  accounted with each round's :class:`~ampfl.accounting.events.RandomCheckInEvent` at
  ``participation_hidden=False`` (004 Thm 5.2's worst-case-sampling pair: a larger ε than the hidden-
  participation accounting) and ``participation_hidden_from = []``. The observer sees every released model
  w_t and who checked in at round t; the local samples stay hidden (the event hides them too). Score of a
  record canary whose (public) home client is h: the sum, over the rounds in which h checked in, of the
  round's released change of the canary's column projected on its direction. Rounds without h carry only
  noise for that canary, and dropping them is what revealing participation gives away.
- **SplitFed-DP** (:func:`smashed_observer`, :func:`insert_slot_canaries`). Its relation is replace-one of
  an example's *features* (label, client and batch positions public: nothing of those is hidden), and its
  ε protects against the server, which receives every noised clipped smashed row q̃_i = clip(f_w(x_i)) +
  N(0, (z_s C_s)² I). A canary is a *slot*: a record at a public client with a public label, whose features
  are a public random image x_k (coin 1) or the blank image 0 (coin 0, f_w(0) = 0: conv without bias,
  GroupNorm, ReLU). The server's score of slot k: Σ over the steps in which the slot's row was sent of
  ⟨q̃, u_k⟩ with u_k = clip(f_w(x_k))/‖·‖ at the round's global bottom w (the server averages the bottoms,
  so it holds w; the batch positions are public), divided by √(number of appearances) (0 when the slot was
  never sent). What this does not score: the noised gradient sums of the bottom's DP-SGD (nor the averaged
  bottom and the top, which carry them): the audit attacks the smashed channel only, so its lower bound
  can only sit further below the whole run's ε, which also composes the gradient events.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.task import Task

#: SplitFed-DP's batch draw, wrapped for one round so that the observer knows which rows a step sent (where
#: the module draws them itself; else its ``cohort_batches`` method is wrapped).
_BATCHES = "local_batches"

__all__ = ["SlotPlan", "insert_slot_canaries", "revealed_participation", "slot_scores", "smashed_observer"]


#: What each observer's scores read (the report's ``observer``).
OBSERVERS = {
    "model": "the released model",
    "revealed": "every released model and who checked in at each round",
    "smashed": "the noised clipped smashed rows the server receives (not the gradient sums)",
    "noised-sums": "every noised sum the server forms (equivalently every released model)",
    "noised-sums-revealed": (
        "every noised sum the server forms and, each round, which canary clients it sampled"
    ),
}


def revealed_participation(cls: type[Algorithm]) -> type[Algorithm]:
    """``cls`` (DP-DSGD-RP) accounted and observed with participation revealed (module docstring).

    The subclass records, after every round, who checked in (``revealed``: one id array per round) and the
    released model (``released``: w_1, …, w_T; w_0 is the public initial model)."""
    from ampfl.fl.algorithms.dp_dsgd_rp import DPDSGDRandomParticipation
    from ampfl.fl.run.release import threat_model

    if not issubclass(cls, DPDSGDRandomParticipation):
        raise ValueError(f"participation: 'revealed' applies to dp_dsgd_rp only. Found {cls.name!r}.")

    class Revealed(cls):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.revealed: list[np.ndarray] = []
            self.released: list[torch.Tensor] = []
            inner = self.sampler.sample

            def sample(round_index: int, rng: np.random.Generator) -> np.ndarray:
                joined: np.ndarray = inner(round_index, rng)
                self.revealed.append(joined.copy())
                return joined

            self.sampler.sample = sample

        def event_at(self, noise_multiplier: float) -> Any:
            return dataclasses.replace(super().event_at(noise_multiplier), participation_hidden=False)

        def threat_model(self) -> dict[str, list[str]]:
            return threat_model(private=self.privacy_unit is not None, participation_hidden=False)

        def run_round(self, round_index: int) -> dict[str, float]:
            metrics: dict[str, float] = super().run_round(round_index)
            self.released.append(self.global_params.detach().clone())
            return metrics

    Revealed.__name__ = cls.__name__
    return Revealed


@dataclasses.dataclass(frozen=True)
class SlotPlan:
    """Slot canaries: record ``rows[k]`` of the training set holds ``images[k]`` (coin 1) or 0 (coin 0)."""

    rows: np.ndarray
    images: np.ndarray
    labels: np.ndarray
    homes: np.ndarray
    included: np.ndarray


def insert_slot_canaries(task: Task, *, included: np.ndarray, seed: int) -> tuple[Task, SlotPlan]:
    """A copy of ``task`` with one record per canary appended, spread round robin over a public permutation
    of the clients: features a public random image (pixels uniform in [0, 1], the data's range) when its
    coin is 1, the blank image when 0; label public. Only ``included`` is secret."""
    from ampfl.fl.task import Task

    data = task.dataset
    k = int(included.size)
    n = int(data.x_train.shape[0])
    public = np.random.default_rng([seed, 27, 3])
    images = public.random((k, *data.x_train.shape[1:])).astype(np.float32)
    labels = public.integers(0, data.num_classes, size=k)
    indices = [np.asarray(ix, dtype=np.int64) for ix in task.client_indices]
    homes = public.permutation(np.resize(public.permutation(len(indices)), k))
    rows = np.arange(n, n + k)
    for c in range(k):
        indices[homes[c]] = np.append(indices[homes[c]], rows[c])
    features = images * np.asarray(included, dtype=np.float32).reshape(-1, *([1] * (images.ndim - 1)))
    x_train = np.concatenate([data.x_train, features.astype(data.x_train.dtype)])
    y_train = np.concatenate([data.y_train, labels.astype(data.y_train.dtype)])
    dataset = dataclasses.replace(data, x_train=x_train, y_train=y_train)
    new_task = Task(dataset, indices, model=task.model, model_options=dict(task.model_options))
    return new_task, SlotPlan(rows, images, labels, homes, np.asarray(included, dtype=bool))


def smashed_observer(cls: type[Algorithm], plan: SlotPlan) -> type[Algorithm]:
    """``cls`` (SplitFed-DP) with the server's view of the slots recorded: per slot, Σ ⟨q̃, u_k⟩ over the
    steps that sent its row, and the number of those steps (module docstring)."""
    import torch

    import ampfl.fl.split.splitfed_dp as module
    from ampfl.fl.models.split_cnn import bottom_forward
    from ampfl.fl.split.common import unflatten

    if not issubclass(cls, module.SplitFedDP):
        raise ValueError(f"smashed-data scores apply to splitfed_dp only. Found {cls.name!r}.")
    slot_of = {int(r): k for k, r in enumerate(plan.rows)}

    class Observed(cls):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.slot_sum = np.zeros(plan.rows.size)
            self.slot_count = np.zeros(plan.rows.size, dtype=np.int64)
            self._images = torch.from_numpy(plan.images).view(-1, *self.x_train.shape[1:])

        def run_round(self, round_index: int) -> dict[str, float]:
            with torch.no_grad():  # u_k at the round's global bottom (the server holds it)
                smashed = bottom_forward(unflatten(self.bottom, self.shapes), self._images, self.spec.groups)
                clipped = module.clip_rows(smashed, self.dp.smashed_clip).flatten(1)
                self._directions = clipped / clipped.norm(dim=1, keepdim=True).clamp(min=1e-12)
            self._step = 0
            original = getattr(module, _BATCHES, None)
            if original is None:  # the round draws its batches through ``cohort_batches`` (recorded below)
                return dict(super().run_round(round_index))

            def recording(*args: Any, **kwargs: Any) -> torch.Tensor:
                batches: torch.Tensor = original(*args, **kwargs)
                self._batches = batches.numpy().copy()
                return batches

            setattr(module, _BATCHES, recording)  # the round draws its batches through it
            try:
                metrics: dict[str, float] = super().run_round(round_index)
            finally:
                setattr(module, _BATCHES, original)
            return metrics

        def cohort_batches(self, *args: Any, **kwargs: Any) -> torch.Tensor:
            batches: torch.Tensor = super().cohort_batches(*args, **kwargs)
            self._batches = batches.numpy().copy()
            return batches

        def dp_step(
            self, local: torch.Tensor, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator
        ) -> tuple[torch.Tensor, torch.Tensor]:
            seen: list[torch.Tensor] = []
            hook = self.top.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
            try:
                out: tuple[torch.Tensor, torch.Tensor] = super().dp_step(local, x, y, gen)
            finally:
                hook.remove()
            rows = self._batches[:, self._step].reshape(-1)
            self._step += 1
            received = seen[0].flatten(1)  # [K·b, smashed], in the order of ``rows``
            for position, row in enumerate(rows.tolist()):
                k = slot_of.get(int(row))
                if k is not None:
                    self.slot_sum[k] += float(received[position] @ self._directions[k])
                    self.slot_count[k] += 1
            return out

    Observed.__name__ = cls.__name__
    return Observed


def slot_scores(algorithm: Algorithm) -> np.ndarray:
    """The server's score of every slot: Σ⟨q̃, u_k⟩ / √appearances, 0 for a slot never sent."""
    total = np.asarray(algorithm.slot_sum, dtype=np.float64)  # type: ignore[attr-defined]
    count = np.asarray(algorithm.slot_count, dtype=np.float64)  # type: ignore[attr-defined]
    return np.where(count > 0, total / np.sqrt(np.maximum(count, 1.0)), 0.0)
