"""Test accuracy of one or several models in flat form: the engine's evaluation.

:meth:`ampfl.fl.engine.vectorised.Engine.accuracy` and
:meth:`~ampfl.fl.engine.vectorised.Engine.class_accuracy` delegate to an :class:`Evaluator` on the engine's
device. Everything is counted from correct predictions per model and label ``[K, C]`` and test examples per
label ``[C]`` (:meth:`Evaluator.class_counts`), on one of two paths that give the same counts:

- **one model of ``nn.Linear`` layers only, on the CPU** (a global model evaluated every round: logistic
  regression, the MLP): one forward pass per batch under ``torch.inference_mode``, through
  :meth:`~ampfl.fl.engine.functional_model.FunctionalModel.direct_outputs` (the tensors ``functional_call``
  passes, without its per-call set-up), predictions counted in NumPy, and the accuracies divided in NumPy
  (integer counts and IEEE divisions: the batched path's float64 and float32 values, bit for bit; tested by
  tests/fl/test_engine_eval.py and tests/fl/test_evaluation.py). A round of the 200-round digits benchmark
  (bench/eval_every.py) spends about a third of the time of the batched path on it (docs/performance.md);
- **otherwise, batched**: chunks of models through ``vmap`` of the outputs, or the model's own
  ``forward_stacked`` (the CNN's channels-last convolutions, about 2× the NCHW ones ``vmap`` runs; outputs
  equal to float rounding), on the engine's device; the counts come back to the device of the parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.func import vmap

from ampfl.fl.engine.device import model_on, on_device
from ampfl.fl.engine.functional_model import FunctionalModel

__all__ = ["Evaluator"]


@dataclass(frozen=True)
class Evaluator:
    """The evaluation of stacked models ``[K, d]`` (or one model ``[d]``) on a test set.

    Attributes:
        device: where the batched path computes (the engine's resolved device, ``"cpu"`` or ``"cuda:N"``).
        memory_cap_mb: budget of one chunk of models' activations, in MiB.
        model_fast_path: evaluate models that have a ``forward_stacked`` (and are not exact without ``vmap``)
            through it.
    """

    device: str = "cpu"
    memory_cap_mb: float = 1024.0
    model_fast_path: bool = True

    def accuracy(
        self,
        model: FunctionalModel,
        params: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        batch_size: int = 4096,
        label_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Test accuracy of each model in ``params`` (``[d]`` → scalar tensor, ``[K, d]`` → ``[K]``).

        Args:
            label_mask: optional ``[K, num_classes]`` booleans; model i is then scored only on the test
                examples whose label is marked in row i (e.g. the labels client i holds); a row with no such
                example scores 0.
        """
        single = params.dim() == 1
        stacked = params[None] if single else params
        num_classes = int(label_mask.shape[1]) if label_mask is not None else int(y.max()) + 1
        if label_mask is None and self._direct(model, stacked, y):
            hits, counted = _one_model_hits(model, stacked[0], x, y, num_classes, batch_size)
            value = np.float32(float(hits.sum()) / max(float(counted.sum()), 1.0))
            acc = torch.from_numpy(np.array([value], dtype=np.float32))
            return acc[0] if single else acc
        correct, counted_t = self.class_counts(model, stacked, x, y, num_classes, batch_size)
        if label_mask is not None:
            keep = label_mask.to(torch.float64)
            hits_t, total = (correct * keep).sum(1), (counted_t[None] * keep).sum(1)
        else:
            hits_t, total = correct.sum(1), counted_t.sum().expand(stacked.shape[0])
        acc = (hits_t / total.clamp(min=1.0)).to(torch.float32)
        return acc[0] if single else acc

    def class_accuracy(
        self, model: FunctionalModel, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, num_classes: int
    ) -> torch.Tensor:
        """Accuracy of each model in ``params`` (``[K, d]``) on the test examples of each label: ``[K, C]``.

        A label without test examples scores 0. Weighting the columns by a client's label proportions gives
        the model's accuracy on that client's own data distribution (``local_accuracy`` of the algorithms).
        """
        if self._direct(model, params, y):
            hits, counted = _one_model_hits(model, params[0], x, y, num_classes, 4096)
            return torch.from_numpy((hits / np.maximum(counted, 1)).astype(np.float32))[None]
        correct, counted_t = self.class_counts(model, params, x, y, num_classes, 4096)
        return (correct / counted_t.clamp(min=1.0)[None]).to(torch.float32)

    def class_counts(
        self,
        model: FunctionalModel,
        stacked: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        num_classes: int,
        batch_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Correct predictions per model and label ``[K, C]`` and test examples per label ``[C]`` (float64, on
        the device of ``stacked``; counted on the evaluator's device)."""
        if self._direct(model, stacked, y):
            hits, per_label = _one_model_hits(model, stacked[0], x, y, num_classes, batch_size)
            as_float = torch.from_numpy(np.stack([hits, per_label]).astype(np.float64))
            return as_float[:1], as_float[1]
        home = stacked.device
        if torch.device(self.device) != home:
            model, x, y = model_on(model, self.device), on_device(x, self.device), on_device(y, self.device)
            stacked = stacked.to(self.device)
        counted = torch.bincount(y, minlength=num_classes)[:num_classes].to(torch.float64)
        correct = torch.zeros((stacked.shape[0], num_classes), dtype=torch.float64, device=y.device)
        per_model = max(1, int(self.memory_cap_mb * 2**20 // (4 * 4 * model.activation_numel * batch_size)))
        # convolutional models with a stacked forward pass (the CNN: channels-last convolutions, about 2x the
        # NCHW ones vmap runs) are evaluated through it; the outputs equal vmap's to float rounding
        stacked_forward = (
            getattr(model.module, "forward_stacked", None)
            if self.model_fast_path and not model.exact_without_vmap
            else None
        )
        with torch.no_grad():
            for lo in range(0, stacked.shape[0], per_model):
                chunk = stacked[lo : lo + per_model]
                for s in range(0, x.shape[0], batch_size):
                    xb, yb = x[s : s + batch_size], y[s : s + batch_size]
                    if chunk.shape[0] == 1 and model.exact_without_vmap:  # chunks of one model: no vmap
                        out = model.outputs(chunk[0], xb)[None]
                    elif stacked_forward is not None:
                        out = stacked_forward(
                            model.spec.unflatten(chunk), xb.unsqueeze(0).expand(chunk.shape[0], *xb.shape)
                        )
                    else:
                        out = vmap(model.outputs, in_dims=(0, None))(chunk, xb)
                    hit = (torch.stack([model.module.predict(o) for o in out]) == yb).to(torch.float64)
                    correct[lo : lo + per_model].index_add_(1, yb, hit)
        return correct.to(home), counted.to(home)

    def _direct(self, model: FunctionalModel, stacked: torch.Tensor, y: torch.Tensor) -> bool:
        """Whether one model is evaluated directly (CPU, ``nn.Linear`` layers only, nothing to move)."""
        return (
            stacked.shape[0] == 1
            and stacked.device.type == "cpu"
            and y.device.type == "cpu"
            and self.device == "cpu"
            and model.exact_without_vmap
        )


def _one_model_hits(
    model: FunctionalModel, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, num_classes: int, batch: int
) -> tuple[np.ndarray, np.ndarray]:
    """Correct predictions per label and test examples per label (int64 ``[C]`` each) of one model on the
    CPU: its outputs without ``vmap`` (equal, bit for bit, to ``vmap``'s for ``nn.Linear`` layers:
    :attr:`FunctionalModel.exact_without_vmap`) and the hits counted in NumPy (an evaluation of a small
    model is tens of microseconds of arithmetic and several microseconds per torch call on top)."""
    labels = y.numpy()
    hits = np.zeros(num_classes, dtype=np.int64)
    with torch.inference_mode():
        for s in range(0, x.shape[0], batch):
            predicted = model.module.predict(model.direct_outputs(flat, x[s : s + batch])).numpy()
            part = labels[s : s + batch]
            hits += np.bincount(part[predicted == part], minlength=num_classes)[:num_classes]
    return hits, np.bincount(labels, minlength=num_classes)[:num_classes]
