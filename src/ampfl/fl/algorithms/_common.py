"""Shared machinery of the simulator's algorithms: model set-up, data tensors, samplers, evaluation, state.

:class:`FederatedAlgorithm` builds the model (initialised from the run seed, never the global RNG), keeps the
global flat parameter vector, and offers the steps most algorithms share. Subclasses implement the paper's
client step, privatisation and server step in :meth:`run_round`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ampfl.fl.algorithms.base import ROLE_DATA, ROLE_EVAL, ROLE_INIT, ROLE_SAMPLING, Algorithm
from ampfl.fl.data.partitions import ClientPartition
from ampfl.fl.engine.clipping import clip_rows as clip_rows  # each row of [K, d] clipped (re-exported)
from ampfl.fl.engine.vectorised import FunctionalModel
from ampfl.fl.models import build_model
from ampfl.fl.sampling import FixedSizeSampler, PoissonSampler, Sampler, local_batches

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ampfl.fl.algorithms.round_protocol import ClientInstructions, ClientMessage
    from ampfl.fl.engine.vectorised import GradHook, LocalResult


#: At most this many clients are scored by the per-client metrics (a fixed random subset beyond it).
MAX_EVAL_CLIENTS = 1000


def check_noise_given_once(
    noise_multiplier: float | None, target_epsilon: float | None, num_rounds: int | None
) -> None:
    """The noise settings of an algorithm with one noise multiplier: exactly one of ``noise_multiplier`` and
    ``target_epsilon`` (which the run calibrates), and with a target its horizon ``num_rounds``.

    Raises:
        ValueError: both or neither given, or a target without ``num_rounds``.
    """
    if (noise_multiplier is None) == (target_epsilon is None):
        raise ValueError("give exactly one of noise_multiplier and target_epsilon")
    if target_epsilon is not None and num_rounds is None:
        raise ValueError("num_rounds is required with target_epsilon")


def masked_gradients(mask: torch.Tensor) -> GradHook:
    """The engine's gradient hook that zeroes each step's gradients outside ``mask`` (002: a client trains
    its secret sub-model only)."""

    def hook(step: int, ids: np.ndarray, grads: torch.Tensor) -> torch.Tensor:
        return grads * mask

    return hook


class LocalTrainingParams(BaseModel):
    """Local SGD settings shared by the algorithms (000 Eq. 2: Q steps of size-b mini-batches, rate η)."""

    model_config = ConfigDict(extra="forbid")

    num_local_steps: int = Field(5, ge=1, description="Q, local SGD steps per round")
    batch_size: int = Field(10, ge=1, description="b, examples per local step")
    learning_rate: float = Field(0.1, gt=0.0, description="η, local learning rate")
    local_sampling: Literal["wor", "wr"] = Field("wor", description="mini-batches without/with replacement")


class CohortParams(LocalTrainingParams):
    """Server-side client sampling: a fixed-size cohort or Poisson sampling."""

    client_sampling: Literal["fixed", "poisson"] = "fixed"
    cohort_size: int = Field(10, ge=1, description="clients per round (client_sampling = 'fixed')")
    sampling_rate: float | None = Field(
        None, gt=0.0, le=1.0, description="q, client inclusion probability (client_sampling = 'poisson')"
    )

    @model_validator(mode="after")
    def _sampling_complete(self) -> CohortParams:
        if self.client_sampling == "poisson" and self.sampling_rate is None:
            raise ValueError("sampling_rate is required when client_sampling = 'poisson'")
        return self


class FederatedAlgorithm(Algorithm):
    """An :class:`Algorithm` with a global flat model, a functional model and the task's data as tensors."""

    def set_up(self) -> None:
        super().set_up()
        task = self.task
        ds = task.dataset
        if task.num_clients < 1:
            raise ValueError("task must have at least one client.")
        self.x_train = torch.from_numpy(np.ascontiguousarray(ds.x_train, dtype=np.float32))
        self.y_train = torch.from_numpy(np.ascontiguousarray(ds.y_train, dtype=np.int64))
        self.x_test = torch.from_numpy(np.ascontiguousarray(ds.x_test, dtype=np.float32))
        self.y_test = torch.from_numpy(np.ascontiguousarray(ds.y_test, dtype=np.int64))
        self.client_indices: Sequence[np.ndarray] = (
            task.client_indices
            if isinstance(task.client_indices, ClientPartition)  # int64 already; no loop over the clients
            else [np.asarray(ix, dtype=np.int64) for ix in task.client_indices]
        )
        input_shape = tuple(int(s) for s in ds.x_train.shape[1:])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(self.seed_sequence(-1, ROLE_INIT).generate_state(1)[0]))
            module = build_model(
                task.model, input_shape=input_shape, num_classes=ds.num_classes, **task.model_options
            )
        self.model = FunctionalModel(module, input_shape)
        self.global_params = self.model.initial()

    # -- helpers --------------------------------------------------------------------------------------
    def sizes_from_data_allowed(self, private: bool) -> bool:
        """Whether a size counted from the data may stand in for a declared public constant: only without a
        guarantee (not ``private``) or under ``[privacy] neighbouring = "replace-one"`` (dataset sizes
        declared public). The one policy of :meth:`public_constant` and of the GDPFed group sizes."""
        return not private or self.privacy.neighbouring == "replace-one"

    def public_constant(self, declared: float | None, *, key: str, from_data: float, private: bool) -> float:
        """The constant a server step divides by: ``declared`` (``algorithm.<key>``, public configuration).

        Under add/remove neighbouring a size computed from the data would change the scale of the released
        noise between neighbours (the scale itself is then a membership signal: docs/threat_model.md), so a
        private run must declare it; ``from_data`` is used only without a guarantee or under ``[privacy]
        neighbouring = "replace-one"`` (dataset sizes declared public).

        Raises:
            ValueError: one line naming ``algorithm.<key>`` when a private add/remove run leaves it unset.
        """
        if declared is not None:
            return float(declared)
        if self.sizes_from_data_allowed(private):
            return float(from_data)
        raise ValueError(
            f"algorithm.{key}: required: the server step divides by it, so a private run must declare it "
            f"as a public constant (from this data it would be {from_data:g}); or set [privacy] "
            'neighbouring = "replace-one" to declare the dataset sizes public'
        )

    def make_cohort_sampler(self, p: CohortParams) -> Sampler:
        """The server-side sampler chosen by ``client_sampling``."""
        n = self.task.num_clients
        if p.client_sampling == "fixed":
            if p.cohort_size > n:
                raise ValueError(f"cohort_size must be <= num_clients = {n}. Found {p.cohort_size}.")
            return FixedSizeSampler(n, p.cohort_size)
        assert p.sampling_rate is not None  # guaranteed by the validator
        return PoissonSampler(n, p.sampling_rate)

    def participants(self, sampler: Sampler, round_index: int) -> np.ndarray:
        """Sorted ids of round ``round_index``'s participants (seeded by the sampling role). A fixed-size
        cohort of all N clients is every client whatever the draws: its generator (used for nothing else)
        is not built."""
        if isinstance(sampler, FixedSizeSampler) and sampler.cohort_size == sampler.num_clients:
            return np.arange(sampler.num_clients, dtype=np.int64)
        return sampler.sample(round_index, self.rng(round_index, ROLE_SAMPLING))

    def batches(self, clients: np.ndarray, round_index: int, p: LocalTrainingParams) -> torch.Tensor:
        """``[K, Q, b]`` mini-batch indices of the participants (seeded by the data role)."""
        return local_batches(
            self.client_indices,
            clients,
            num_steps=p.num_local_steps,
            batch_size=p.batch_size,
            scheme=p.local_sampling,
            rng=self.rng(round_index, ROLE_DATA),
        )

    def cohort_local_sgd(
        self,
        start: torch.Tensor,
        clients: np.ndarray,
        round_index: int,
        p: LocalTrainingParams,
        *,
        grad_hook: GradHook | None = None,
        average: bool = False,
        clip_updates: float | None = None,
    ) -> LocalResult:
        """The Q local SGD steps (000 Eq. 2) of round ``round_index``'s cohort ``clients`` from ``start``
        (``[d]``, shared, or ``[K, d]``) on the simulator's mini-batches (:meth:`batches`); ``grad_hook``,
        ``average`` and ``clip_updates`` as :meth:`~ampfl.fl.engine.vectorised.Engine.local_sgd`'s."""
        batches = self.batches(clients, round_index, p)
        return self.local_sgd(
            start, batches, clients, p, grad_hook=grad_hook, average=average, clip_updates=clip_updates
        )

    def local_sgd(
        self,
        start: torch.Tensor,
        batches: torch.Tensor,
        clients: np.ndarray,
        p: LocalTrainingParams,
        *,
        grad_hook: GradHook | None = None,
        average: bool = False,
        clip_updates: float | None = None,
    ) -> LocalResult:
        """The engine's local SGD on the training data, at ``p``'s learning rate, of the clients ``clients``
        (``[K]``) on the mini-batch indices ``batches`` (``[K, Q, b]``)."""
        return self.engine.local_sgd(
            self.model,
            start,
            self.x_train,
            self.y_train,
            batches,
            learning_rate=p.learning_rate,
            client_ids=clients,
            grad_hook=grad_hook,
            average=average,
            clip_updates=clip_updates,
        )

    # -- pieces of the round protocol (ampfl.fl.algorithms.round_protocol) --------------------------------
    def broadcast(self) -> torch.Tensor:
        """The flat model the server sends the asked clients: the global model."""
        return self.global_params

    def local_update(
        self,
        start: torch.Tensor,
        instructions: ClientInstructions,
        p: LocalTrainingParams,
        rng: np.random.Generator | None,
        *,
        grad_hook: GradHook | None = None,
    ) -> LocalResult:
        """One client's Q local SGD steps from ``start`` (000 Eq. 2): with ``rng`` None, the mini-batches the
        simulator draws for it in the round's cohort (:meth:`batches`); else from ``rng``. ``grad_hook``:
        the engine's hook on each step's gradients (002: the client's secret mask)."""
        client = np.array([instructions.client])
        if rng is None:
            cohort, row = instructions.cohort_row()
            batches = self.batches(cohort, instructions.round_index, p)[row : row + 1]
            client = cohort[row : row + 1]
        else:
            batches = local_batches(
                self.client_indices,
                client,
                num_steps=p.num_local_steps,
                batch_size=p.batch_size,
                scheme=p.local_sampling,
                rng=rng,
            )
        return self.local_sgd(start, batches, client, p, grad_hook=grad_hook)

    def client_update(
        self,
        broadcast: torch.Tensor,
        instructions: ClientInstructions,
        client_state: torch.Tensor | None,
        rng: np.random.Generator,
    ) -> tuple[ClientMessage, torch.Tensor | None]:
        """The round protocol's client half where the client runs Q local steps from ``broadcast`` (``params``
        are :class:`LocalTrainingParams`) and sends a vector formed from the trained model
        (:meth:`local_message`), keeping no private state: the steps use the simulator's mini-batches of the
        round's cohort when the server sampled it, else (the client joined by its own coin) mini-batches from
        ``rng``. A client that trains a secret subset of the coordinates (002) draws it from ``rng`` first
        (:meth:`trained_coordinates`), and its steps' gradients are zeroed outside it. An algorithm whose
        client does other work overrides it."""
        p = cast("LocalTrainingParams", self.params)
        trained = self.trained_coordinates(broadcast, rng)
        hook = None if trained is None else masked_gradients(trained)
        own = rng if instructions.own_coin else None  # else the simulator's batches in the round's cohort
        result = self.local_update(broadcast, instructions, p, own, grad_hook=hook)
        return self.local_message(broadcast, instructions.client, result, trained), None

    def trained_coordinates(self, broadcast: torch.Tensor, rng: np.random.Generator) -> torch.Tensor | None:
        """The 0/1 mask ``[d]`` (dtype of ``broadcast``) of the coordinates a client of :meth:`client_update`
        trains, drawn from its own ``rng``; None (the default): every coordinate, nothing drawn."""
        return None

    def local_message(
        self, broadcast: torch.Tensor, client: int, result: LocalResult, trained: torch.Tensor | None
    ) -> ClientMessage:
        """The message of :meth:`client_update` from the trained model of ``client`` (``result``, one row)
        and the coordinates it trained (:meth:`trained_coordinates`)."""
        raise NotImplementedError(f"{type(self).__name__} forms no message from a local model.")

    def num_examples(self, client: int) -> float:
        """How many training records ``client`` holds (the ``num-examples`` diagnostic of its message)."""
        return float(len(self.client_indices[client]))

    def reduce_metrics(self, metrics: Sequence[Mapping[str, float]]) -> dict[str, float]:
        """The round's diagnostics from the clients' messages: mean train loss (and clipped fraction)."""
        from ampfl.fl.algorithms.round_protocol import mean_metrics

        return mean_metrics(metrics, clipped=self.privacy_unit is not None)

    def server_evaluate(self) -> dict[str, Any]:
        """Evaluation of what the server holds: :meth:`evaluate`."""
        return self.evaluate()

    def global_accuracy(self, params: torch.Tensor | None = None) -> float:
        """Test accuracy of ``params`` (default: the global model)."""
        flat = self.global_params if params is None else params
        return float(self.engine.accuracy(self.model, flat, self.x_test, self.y_test))

    def eval_clients(self) -> np.ndarray:
        """The clients the per-client metrics score: all, or a fixed random subset of ``MAX_EVAL_CLIENTS``."""
        if not hasattr(self, "_eval_clients"):
            n = self.task.num_clients
            if n <= MAX_EVAL_CLIENTS:
                self._eval_clients = np.arange(n)
            else:
                chosen = self.rng(-1, ROLE_EVAL).choice(n, MAX_EVAL_CLIENTS, replace=False)
                self._eval_clients = np.sort(chosen)
            classes = self.task.dataset.num_classes
            y = self.task.dataset.y_train
            counts = np.stack(
                [np.bincount(y[self.client_indices[int(c)]], minlength=classes) for c in self._eval_clients]
            ).astype(np.float64)
            self._eval_proportions = counts / np.maximum(counts.sum(1, keepdims=True), 1.0)
        return self._eval_clients

    def model_metrics(self, models: torch.Tensor) -> dict[str, np.ndarray]:
        """Test accuracy of the model(s) each evaluated client uses (:meth:`eval_clients`).

        ``models`` is one model ``[d]`` used by every client (a global model) or one row per evaluated
        client ``[K, d]`` (personal models of the first K evaluated clients). Returns ``test``: accuracy on
        the whole test set and ``local``: accuracy on the client's own data distribution (the test examples
        of each label weighted by the label's share in the client's training data: the score of a test split
        drawn like the client's own data, 000's personal metric), one value per evaluated client (``test``
        has one value for one model). Float64 NumPy arrays: the per-label accuracies are the engine's; the
        few weighted sums after them are cheaper in NumPy than as torch calls (a global model is
        evaluated every round).
        """
        self.eval_clients()
        stacked = models[None] if models.dim() == 1 else models
        classes = self.task.dataset.num_classes
        per_class = self.engine.class_accuracy(self.model, stacked, self.x_test, self.y_test, classes)
        per_label = per_class.cpu().numpy().astype(np.float64)
        if getattr(self, "_test_counts", (None, None))[0] is not self.y_test:  # per label, and their total
            counts = np.bincount(self.y_test.cpu().numpy(), minlength=classes)[:classes].astype(np.float64)
            self._test_counts = (self.y_test, counts, max(float(counts.sum()), 1.0))
        _, counts, total = self._test_counts
        test = (per_label * counts).sum(1) / total
        proportions = self._eval_proportions if models.dim() == 1 else self._eval_proportions[: len(models)]
        local = (per_label * proportions).sum(1)
        return {"test": test, "local": local}

    def evaluate(self) -> dict[str, float]:
        """Global-model accuracy on the test set and, per client, on its own distribution (``local_*``)."""
        scores = self.model_metrics(self.global_params)
        local = scores["local"]
        return {
            "accuracy": float(scores["test"][0]),
            "local_accuracy_mean": float(local.mean()),
            "local_accuracy_std": float(local.std()),
        }

    def parameters_finite(self) -> bool:
        return bool(torch.isfinite(self.global_params).all())

    def state_dict(self) -> dict[str, Any]:
        return {"algorithm": self.name, "global_params": self.global_params.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("algorithm") != self.name:
            raise ValueError(
                f"state must come from algorithm {self.name!r}. Found {state.get('algorithm')!r}."
            )
        params = state["global_params"]
        if params.shape != self.global_params.shape:
            raise ValueError(f"global_params must have shape {tuple(self.global_params.shape)}.")
        self.global_params = params.clone()
