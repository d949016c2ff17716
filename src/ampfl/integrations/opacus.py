"""ampfl's accountants behind Opacus's accountant interface (Opacus 1.6, extra ``opacus``).

Opacus's :class:`~opacus.privacy_engine.PrivacyEngine` names its accountant by a mechanism string and
builds it with no arguments (also inside ``make_private_with_epsilon``'s noise search, which sets
``history`` directly), so every accountant here is a registered :class:`~opacus.accountants.IAccountant`
subclass whose whole state is Opacus's ``history`` of ``(noise_multiplier, sample_rate, steps)``; ε is
ampfl's PLD accountant (:class:`ampfl.accounting.accountants.PLDAccountant`) over the events that history
stands for. Three analyses match Opacus's loop (one Gaussian step per batch, noise multiplier z):

- ``"ampfl_pld"`` (:class:`AmpflPLDAccountant`, registered on import): Opacus's own mechanism, each record
  in a batch independently at ``sample_rate`` (Poisson), ``PoissonSampledEvent(q, GaussianEvent(z))``.
- :func:`random_checkin_accountant`: 004 Algorithm 1 seen from one client running Opacus: each step the
  client takes part with probability p, on a coin kept secret, and samples its records at ``sample_rate``;
  a step it skips still releases the noised (empty) sum. ``RandomCheckInEvent`` per step. The loop needs
  the coin: :func:`with_check_in` wraps the private loader's batch sampler in :class:`CheckInBatchSampler`.
- :func:`bis_accountant`: Balanced Iteration Subsampling (002 Thm 3.8): each record in exactly k of every T
  steps, chosen in secret; one ``BalancedIterationSubsamplingEvent`` per started epoch of T steps (a partial
  epoch releases part of a full one's outputs, so it costs a full one). The loader's batches come from
  :class:`BalancedIterationBatchSampler`.

Each accountant's guarantee is record level under add/remove one record, the relation of the events above.
The random check-in and BIS accountants are classes made for one configuration (p, d or T, k) and
registered under a mechanism name that spells it, which is what ``PrivacyEngine(accountant=...)`` takes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
from opacus.accountants import IAccountant
from opacus.accountants.registry import _ACCOUNTANTS, register_accountant

from ampfl.accounting._checks import check_delta, check_int, check_probability
from ampfl.accounting.accountants import PLDAccountant
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    GaussianEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    RandomCheckInEvent,
)
from ampfl.fl.sampling import BalancedIterationSampler

__all__ = [
    "AmpflPLDAccountant",
    "BalancedIterationBatchSampler",
    "CheckInBatchSampler",
    "bis_accountant",
    "random_checkin_accountant",
    "with_check_in",
]


class AmpflPLDAccountant(IAccountant):  # type: ignore[misc]  # opacus has no type hints
    """Poisson-sampled DP-SGD (Opacus's mechanism) accounted by ampfl's PLD accountant."""

    MECHANISM: ClassVar[str] = "ampfl_pld"

    def __init__(self) -> None:
        self.history: list[tuple[float, float, int]] = []

    @classmethod
    def mechanism(cls) -> str:
        return cls.MECHANISM

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """One optimizer step; consecutive steps with equal values are one history entry (Opacus's form)."""
        z, q = float(noise_multiplier), float(sample_rate)
        self.events_of(z, q)  # refuses values the analysis has no event for, before anything is recorded
        if self.history and self.history[-1][:2] == (z, q):
            self.history[-1] = (z, q, self.history[-1][2] + 1)
        else:
            self.history.append((z, q, 1))

    def __len__(self) -> int:
        return sum(int(steps) for _, _, steps in self.history)

    def events_of(self, noise_multiplier: float, sample_rate: float) -> PrivacyEvent:
        """The privacy event of one step with these values."""
        q = check_probability("sample_rate", sample_rate)
        return PoissonSampledEvent(sampling_rate=q, event=GaussianEvent(noise_multiplier=noise_multiplier))

    def events(self) -> list[tuple[PrivacyEvent, int]]:
        """The history as ampfl events and counts (what :meth:`get_epsilon` composes)."""
        return [(self.events_of(z, q), int(n)) for z, q, n in self.history]

    def ampfl_accountant(self) -> PLDAccountant:
        """A fresh ampfl PLD accountant that composed :meth:`events`."""
        accountant = PLDAccountant()
        for event, count in self.events():
            if count:
                accountant.compose(event, count)
        return accountant

    def get_epsilon(self, delta: float, *args: Any, **kwargs: Any) -> float:
        """ε at ``delta`` after the history (extra arguments of Opacus's other accountants are ignored)."""
        dlt = check_delta("delta", delta)
        if not self.history:
            return 0.0
        return float(self.ampfl_accountant().get_epsilon(dlt))


def _register(cls: type[IAccountant]) -> type[IAccountant]:
    existing = _ACCOUNTANTS.get(cls.mechanism())
    if existing is not None and existing is not cls and existing.__qualname__ != cls.__qualname__:
        raise ValueError(f"mechanism {cls.mechanism()!r} is already registered by {existing.__qualname__}")
    register_accountant(cls.mechanism(), cls, force=True)
    return cls


_register(AmpflPLDAccountant)


class _RandomCheckIn(AmpflPLDAccountant):
    participation: ClassVar[float]
    local_dataset_size: ClassVar[int | None]
    participation_hidden: ClassVar[bool]

    def events_of(self, noise_multiplier: float, sample_rate: float) -> PrivacyEvent:
        return RandomCheckInEvent(
            participation=self.participation,
            sampling_rate=check_probability("sample_rate", sample_rate),
            noise_multiplier=noise_multiplier,
            local_dataset_size=self.local_dataset_size,
            participation_hidden=self.participation_hidden,
        )


def random_checkin_accountant(
    participation: float, *, local_dataset_size: int | None = None, participation_hidden: bool = True
) -> type[IAccountant]:
    """The Opacus accountant of DP-DSGD with random check-in (004 Alg. 1) for this configuration.

    Args:
        participation: p, the probability that the client takes part in a step (its coin kept secret).
        local_dataset_size: d, an upper bound on the client's records besides the one protected (``None``:
            unknown, Thm 5.2's pair, sound for any d).
        participation_hidden: whether the observer sees only the noised sums (004 §3.1); ``False`` when it
            also learns in which steps the client took part.

    Returns:
        A registered accountant class: pass ``cls.mechanism()`` to ``PrivacyEngine(accountant=...)``.
    """
    p = check_probability("participation", participation)
    d = None if local_dataset_size is None else check_int("local_dataset_size", local_dataset_size, minimum=0)
    if not isinstance(participation_hidden, bool):
        raise ValueError(f"participation_hidden must be a bool. Found {participation_hidden!r}.")
    name = f"ampfl_random_checkin(p={p!r},d={d!r},hidden={participation_hidden})"
    attrs = {"MECHANISM": name, "participation": p, "local_dataset_size": d, "participation_hidden": bool(
        participation_hidden)}  # fmt: skip
    return _register(type(name, (_RandomCheckIn,), attrs))


class _BalancedIterations(AmpflPLDAccountant):
    iterations: ClassVar[int]
    participations: ClassVar[int]

    def events_of(self, noise_multiplier: float, sample_rate: float) -> PrivacyEvent:
        t, k = self.iterations, self.participations
        rate = float(sample_rate)
        if not (math.isclose(rate * t, 1.0, rel_tol=1e-9) or math.isclose(rate * t, k, rel_tol=1e-9)):
            raise ValueError(
                f"sample_rate must be 1/iterations (Opacus's rate for a loader of {t} batches) or "
                f"participations/iterations ({k}/{t}) for this BIS accountant. Found {sample_rate}."
            )
        return BalancedIterationSubsamplingEvent(
            iterations=t, participations=k, noise_multiplier=noise_multiplier
        )

    def events(self) -> list[tuple[PrivacyEvent, int]]:
        """One epoch event per started epoch of T steps, at the smallest noise multiplier of its steps (a step
        with more noise is a post-processing of one with less, so a mixed epoch costs at most that)."""
        t = self.iterations
        epochs: list[list[float]] = []  # [noise multiplier, count] runs of epochs
        filled = 0  # steps into the last started epoch
        for z, q, n in self.history:
            self.events_of(z, q)  # checks the sample rate
            n = int(n)
            if filled and n:  # the last started epoch goes on with these steps
                last = epochs[-1]
                if z < last[0] and last[1] > 1:
                    last[1] -= 1
                    epochs.append([z, 1])
                elif z < last[0]:
                    last[0] = z
                take = min(n, t - filled)
                n, filled = n - take, (filled + take) % t
            if n:
                started = -(-n // t)
                if epochs and epochs[-1][0] == z and filled == 0:
                    epochs[-1][1] += started
                else:
                    epochs.append([z, started])
                filled = n % t
        return [(self.events_of(z, 1.0 / t), int(c)) for z, c in epochs]


def bis_accountant(iterations: int, participations: int = 1) -> type[IAccountant]:
    """The Opacus accountant of Balanced Iteration Subsampling (002 Thm 3.8): each record in exactly
    ``participations`` (k) of every ``iterations`` (T) steps, the k chosen uniformly and in secret.

    With k = 1 this is a shuffled loader (every record in exactly one batch per epoch), accounted with its
    amplification. Returns a registered accountant class (pass ``cls.mechanism()`` to ``PrivacyEngine``)."""
    t = check_int("iterations", iterations, minimum=1)
    k = check_int("participations", participations, minimum=1, maximum=t)
    name = f"ampfl_bis(T={t},k={k})"
    return _register(
        type(name, (_BalancedIterations,), {"MECHANISM": name, "iterations": t, "participations": k})
    )


def _secret_rng(generator: np.random.Generator | None) -> np.random.Generator:
    return np.random.default_rng() if generator is None else generator  # OS entropy unless given


class CheckInBatchSampler:
    """Random check-in for an Opacus loader: each step, with probability 1 − ``participation`` (a secret
    coin), the batch is empty, so the step releases noise only.

    Wraps the loader's batch sampler (``DPDataLoader``'s Poisson sampler: ``loader.batch_sampler``);
    ``generator`` draws the coins (default: fresh OS entropy, never a published seed)."""

    def __init__(
        self, batch_sampler: Any, participation: float, generator: np.random.Generator | None = None
    ) -> None:
        self.batch_sampler = batch_sampler
        self.participation = check_probability("participation", participation)
        self._rng = _secret_rng(generator)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batch_sampler:
            yield list(batch) if self._rng.random() < self.participation else []


def with_check_in(loader: Any, participation: float, generator: np.random.Generator | None = None) -> Any:
    """``loader`` (the ``DPDataLoader`` that ``make_private`` returned) with random check-in: the same data,
    collate function (which turns an empty batch into empty tensors) and workers, its batch sampler wrapped in
    :class:`CheckInBatchSampler`."""
    from torch.utils.data import DataLoader

    return DataLoader(
        loader.dataset,
        batch_sampler=CheckInBatchSampler(loader.batch_sampler, participation, generator),
        collate_fn=loader.collate_fn,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
    )


class BalancedIterationBatchSampler:
    """Batches of Balanced Iteration Subsampling: every epoch, each of ``num_records`` records joins exactly
    ``participations`` of the ``iterations`` batches, chosen uniformly at random and in secret (ampfl's
    :class:`~ampfl.fl.sampling.BalancedIterationSampler` schedule, drawn anew each epoch from ``generator``,
    default fresh OS entropy). Pass as ``DataLoader(dataset, batch_sampler=...)``; ``make_private`` with
    ``poisson_sampling=False`` keeps it."""

    def __init__(
        self,
        num_records: int,
        iterations: int,
        participations: int = 1,
        generator: np.random.Generator | None = None,
    ) -> None:
        self.num_records = check_int("num_records", num_records, minimum=1)
        self.iterations = check_int("iterations", iterations, minimum=1)
        self.participations = check_int("participations", participations, minimum=1, maximum=self.iterations)
        self._rng = _secret_rng(generator)

    def __len__(self) -> int:
        return self.iterations

    def __iter__(self) -> Iterator[list[int]]:
        schedule = BalancedIterationSampler(self.num_records, self.iterations, self.participations, self._rng)
        for step in range(self.iterations):
            yield schedule.sample(step).tolist()
