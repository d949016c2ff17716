"""The algorithm interface shared by every federated method of the simulator.

An :class:`Algorithm` holds one paper's math (client step, privatisation, server step) and nothing about I/O
or accounting: ``ampfl.fl.run.experiment`` asks :meth:`Algorithm.round_events` for round r's privacy events,
composes them in the run's one accountant (``ampfl.fl.privacy.run_accountant``), calls
:meth:`Algorithm.run_round`, :meth:`Algorithm.evaluate` every few rounds, and checkpoints with
:meth:`Algorithm.state_dict`. Algorithms never compute ε themselves.

Randomness rule: every random draw of round r comes from a generator seeded by
``np.random.SeedSequence([root, r, role])`` (see :meth:`Algorithm.rng` and :meth:`Algorithm.torch_generator`),
one per role (sampling, data, noise, ...), never from a global RNG. A run resumed from a checkpoint after
round r therefore continues bit-identically to an uninterrupted one.

Two roots (docs/threat_model.md): the *public* roles (:data:`PUBLIC_ROLES`: initialisation and
evaluation) use the run's ``seed``, which the config and the summary publish; every other role — the
randomness a privacy guarantee rests on: participation, cohort and local sampling, noise, secret blocks and
masks — uses :attr:`Algorithm.privacy_key`, a 128-bit key drawn from the operating system's entropy unless
``[privacy] reproducible = true`` (then the key is the seed: a simulation, not a release). A new role is
secret unless it is added to :data:`PUBLIC_ROLES`. The run keeps the key only in its private checkpoint.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import BaseModel

from ampfl.accounting.accountants.base import NeighboringRelation

if TYPE_CHECKING:
    import torch

    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms.round_protocol import RoundProtocol
    from ampfl.fl.config import PrivacyConfig
    from ampfl.fl.engine.vectorised import Engine
    from ampfl.fl.privacy.calibration import CalibratedNoise, NoiseTarget
    from ampfl.fl.task import Task

#: The units a guarantee can protect (``privacy_unit`` of an algorithm, ``summary.json``).
PRIVACY_UNITS = ("record", "client")

# Role ids for the per-round seed sequences (never reorder: stored runs depend on them).
ROLE_INIT = 0
ROLE_SAMPLING = 1
ROLE_DATA = 2
ROLE_NOISE = 3
ROLE_CHECKIN = 4
ROLE_EVAL = 5

#: Roles whose draws are public (derived from the published ``seed``); every other role is privacy randomness.
PUBLIC_ROLES = frozenset({ROLE_INIT, ROLE_EVAL})


def new_privacy_key() -> int:
    """A fresh 128-bit privacy key from the operating system's entropy (:mod:`secrets`)."""
    import secrets

    return secrets.randbits(128)


class Algorithm(ABC):
    """A federated learning algorithm on the simulator.

    Subclasses set ``name`` (the key in ``ampfl.fl.algorithms.ALGORITHMS``) and ``Params`` (a pydantic model
    with ``model_config = ConfigDict(extra="forbid")`` holding the hyper-parameters), and implement
    :meth:`run_round`, :meth:`evaluate`, :meth:`state_dict` and :meth:`load_state_dict`. The constructor is
    the same for every algorithm: it checks and stores its arguments, then calls :meth:`set_up`, where each
    class builds its own state (calling ``super().set_up()`` first). A private algorithm also sets
    :attr:`privacy_unit` (and :attr:`neighboring_relation` where it is not add/remove-one) and overrides
    :meth:`round_events`.

    Attributes:
        privacy_unit: what the guarantee protects, ``"record"`` or ``"client"``; ``None`` for an algorithm
            (or a configuration, e.g. zero noise) without any guarantee: the run reports ε = ∞.
        neighboring_relation: the relation of :meth:`round_events`'s events; the run's accountant uses it.
        released_metrics: the keys of :meth:`evaluate` that are released (computed from released models on
            held-out data); the rest of :meth:`evaluate` and all of :meth:`run_round` are diagnostics.
        privacy_key: the secret root of the privacy randomness (module docstring).

    Args:
        params: an instance of ``type(self).Params``.
        task: dataset, client partition and model name.
        seed: root seed of every random draw of the run.
        engine: the engine running the clients' local work; a default vectorised engine when None.
        privacy: the run's ``[privacy]`` settings (δ, neighbouring relation, reproducibility; a paper's
            closed-form calibration uses δ); the defaults when None. A ``target_epsilon`` is not calibrated
            here: the algorithm states it in :meth:`noise_targets` and the run calibrates it
            (:mod:`ampfl.fl.privacy.calibration`).
        privacy_key: the root of the privacy randomness (module docstring); when None, the seed if
            ``privacy.reproducible`` else a fresh key from the operating system (:func:`new_privacy_key`).
    """

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]]
    #: Evaluation keys computed from released models on held-out data only: they go to ``metrics.jsonl``;
    #: every other metric is a diagnostic (``diagnostics.jsonl``, not differentially private).
    released_metrics: ClassVar[tuple[str, ...]] = ("accuracy",)
    privacy_unit: str | None = None
    neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE
    #: ``ampfl deploy`` runs it (its :meth:`round_protocol` splits a round into a client and a server half).
    deploys: ClassVar[bool] = False
    #: Its Gaussian noise may be added by the clients, each a share, before a secure sum (the round
    #: protocol's ``gaussian_shares``): ``ampfl deploy --secure-aggregation secaggplus`` runs it so.
    noise_shares: ClassVar[bool] = False
    #: Each client noises its own message in full (MS-PAFL, SplitFed-DP): a secure sum of the messages is
    #: noised already, and ε holds against the server, who sees who sends (:meth:`threat_model`).
    noised_on_client: ClassVar[bool] = False

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
        if not isinstance(params, self.Params):
            raise ValueError(
                f"params must be an instance of {type(self).__name__}.Params. Found {type(params).__name__}."
            )
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer. Found {seed!r}.")
        if engine is None:
            from ampfl.fl.engine.vectorised import Engine

            engine = Engine()
        if privacy is None:
            from ampfl.fl.config import PrivacyConfig

            privacy = PrivacyConfig.model_validate({})
        if privacy_key is None:
            privacy_key = int(seed) if privacy.reproducible else new_privacy_key()
        elif isinstance(privacy_key, bool) or not isinstance(privacy_key, int) or privacy_key < 0:
            raise ValueError(f"privacy_key must be a non-negative integer. Found {privacy_key!r}.")
        self.params = params
        self.task = task
        self.seed = int(seed)
        #: Root of the privacy randomness: secret (never in the config, summary or metrics).
        self.privacy_key = int(privacy_key)
        self.engine = engine
        self.privacy = privacy
        self.set_up()

    def set_up(self) -> None:  # noqa: B027 (a hook with a default, not abstract)
        """Build the algorithm's own state from the stored ``params`` and ``task`` (the last step of the
        constructor). Each subclass that has state extends it, calling ``super().set_up()`` first, so that a
        base's state is ready before its subclass's. Default: nothing."""

    # -- randomness -----------------------------------------------------------------------------------
    def seed_sequence(self, round_index: int, role: int) -> np.random.SeedSequence:
        """The seed sequence of one role in one round (``round_index = -1`` for initialisation): rooted at the
        public ``seed`` for :data:`PUBLIC_ROLES`, at the secret :attr:`privacy_key` otherwise."""
        root = self.seed if role in PUBLIC_ROLES else self.privacy_key
        return np.random.SeedSequence([root, int(round_index) + 1, int(role)])

    def rng(self, round_index: int, role: int) -> np.random.Generator:
        """A numpy generator for one role in one round."""
        return np.random.Generator(np.random.PCG64(self.seed_sequence(round_index, role)))

    def torch_generator(self, round_index: int, role: int) -> torch.Generator:
        """A CPU torch generator for one role in one round."""
        import torch

        state = self.seed_sequence(round_index, role).generate_state(2, dtype=np.uint32)
        return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))

    def compute_device(self) -> str | None:
        """Where the clients' work runs (``summary.json``'s ``device``): the engine's resolved device."""
        return getattr(self.engine, "device", None)

    # -- the interface --------------------------------------------------------------------------------
    @abstractmethod
    def run_round(self, round_index: int) -> dict[str, float]:
        """Run round ``round_index`` (0-based) and return its metrics (participants, train_loss, ...)."""

    @abstractmethod
    def evaluate(self) -> dict[str, float]:
        """Test metrics; always ``"accuracy"`` of the global (public) model on the test set."""

    def parameters_finite(self) -> bool:
        """Whether the model's parameters are all finite (the run stops with a one-line error otherwise)."""
        return True

    def round_events(self, round_index: int) -> list[tuple[PrivacyEvent, int]]:
        """The privacy events of round ``round_index`` as ``(event, count)`` pairs (default: none).

        The run composes them once, before the round runs (so a budget can stop it); they must not depend
        on the round's random draws. Their noise multipliers are relative to the sensitivity under
        :attr:`neighboring_relation` (docs/units.md).
        """
        return []

    def noise_targets(self) -> list[NoiseTarget]:
        """The noise multipliers the run calibrates for this algorithm (:mod:`ampfl.fl.privacy.calibration`):
        one :class:`~ampfl.fl.privacy.calibration.NoiseTarget` per target ε (default: none, the noise is
        configured). A target's noise is set by :meth:`set_noise` before the first round."""
        return []

    def set_noise(self, resolved: Mapping[str, CalibratedNoise]) -> None:
        """Receive the calibrated noise of :meth:`noise_targets` (by key); may be called again (the run then
        calibrated with another accountant). Default: an algorithm without targets receives nothing."""
        if resolved:
            raise ValueError(f"{self.name} has no noise target; got {sorted(resolved)}.")

    def threat_model(self) -> dict[str, list[str]]:
        """``protects_against`` and ``participation_hidden_from`` of this algorithm on the simulator
        (:func:`ampfl.fl.run.release.threat_model`). Default: noise added by the (trusted) server, so ε
        protects against the consumers of the released models, from whom participation is hidden; with
        :attr:`noised_on_client`, ε holds against the server too (each client noises its own upload before
        it leaves) and no amplification by hidden participation is claimed (the server sees who uploads)."""
        from ampfl.fl.run.release import threat_model

        if self.noised_on_client:  # each client noises what it sends; the server sees who sends
            return threat_model(
                private=self.privacy_unit is not None,
                server_sees_only_noised_sum=True,
                participation_hidden=False,
            )
        return threat_model(private=self.privacy_unit is not None)

    def group_budgets(self) -> dict[int, float]:
        """Per-group ε budgets of an algorithm whose events are per-group (``GroupRoundEvent``; default none).

        The run keeps one accountant per group, reports ``epsilon_by_group`` against these budgets and calls
        :meth:`retire_groups` before a round that would take a group over its budget (paper 001).
        """
        return {}

    def round_protocol(self) -> RoundProtocol:
        """This algorithm's round as a client half and a server half, for an engine that runs the clients
        elsewhere (``ampfl deploy``; :mod:`ampfl.fl.algorithms.round_protocol`). Default: none.

        Raises:
            ValueError: one line naming ``algorithm.name`` for an algorithm that runs on the simulator only.
        """
        raise ValueError(
            f"algorithm.name: {self.name} runs on the simulator only (its round has no client/server split)."
        )

    @classmethod
    def deploy_problem(cls, params: BaseModel, *, secure_aggregation: bool) -> str | None:
        """One line naming the setting of ``params`` with which ``ampfl deploy`` cannot run this algorithm
        (``secure_aggregation``: under SecAgg+), or None. Default: none beyond :attr:`deploys`."""
        return None

    def retire_groups(self, groups: list[int]) -> None:
        """Stop sampling ``groups`` (their next round would exceed their budget); default: nothing to do."""
        return None

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume (``torch.save``-able)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state written by :meth:`state_dict`."""
