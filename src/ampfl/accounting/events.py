"""Privacy events: what ran, as frozen, validated data (no math). Accountants say how to bound them.

Every mechanism of the five papers is one event class. An event's docstring fixes its semantics: the unit
it protects, the neighbouring relation its accountants use (add/remove one unit unless stated) and what the
observer sees. Never change the meaning of an event or a field; add a new event instead (dp-accounting's
rule). Noise is always a noise multiplier z = noise std / L2 sensitivity (docs/units.md).

Where dp-accounting has the same event, :meth:`PrivacyEvent.to_dp_accounting` converts to it, and the
accountants hand it to dp-accounting instead of re-deriving it. Every event serialises to a plain dict
(:meth:`PrivacyEvent.to_dict`, :func:`event_from_dict`), so a run's checkpoint can store what it composed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, ClassVar

from ampfl.accounting._checks import check_choice, check_int, check_positive, check_probability

__all__ = [
    "BalancedIterationSubsamplingEvent",
    "BernoulliMaskEvent",
    "ComposedEvent",
    "DropoutEvent",
    "GaussianEvent",
    "GroupRoundEvent",
    "LaplaceEvent",
    "MSPAFLRoundEvent",
    "ModelSplitEvent",
    "PoissonSampledEvent",
    "PrivacyEvent",
    "PublicParticipationEvent",
    "RandomCheckInEvent",
    "SampledWithoutReplacementEvent",
    "SelfComposedEvent",
    "event_from_dict",
    "from_dp_accounting",
]

_REGISTRY: dict[str, type[PrivacyEvent]] = {}


def _check_event(name: str, value: object) -> PrivacyEvent:
    if not isinstance(value, PrivacyEvent):
        raise ValueError(f"{name} must be an ampfl PrivacyEvent. Found {type(value).__name__}.")
    return value


def _check_noise(name: str, value: object) -> float:
    """A noise multiplier: positive, or ``inf`` (no privacy loss at all)."""
    if isinstance(value, float | int) and not isinstance(value, bool) and value == math.inf:
        return math.inf
    return check_positive(name, value)


#: Event type -> a function of an event: its fields' values, in order, as a tuple (filled on first use).
_FIELD_VALUES: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _values_getter(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    names = [f.name for f in dataclasses.fields(cls)]
    if len(names) == 1:  # attrgetter of one name returns the value, not a 1-tuple
        name = names[0]
        return lambda event: (getattr(event, name),)
    return attrgetter(*names)


class PrivacyEvent:
    """Base class of ampfl's events. Subclasses are frozen, slotted, keyword-only dataclasses.

    Their ``==``, ``hash`` and ``repr`` are this class's, the same as a dataclass's (the fields' values
    compared as a tuple between events of the same type, ``hash`` of that tuple, ``Type(field=value!r,
    ...)``): subclasses pass ``eq=False, repr=False`` so that ``@dataclass`` does not generate (``exec``) the
    three methods for each of them, about a third of this module's import (``ampfl account``'s
    start-up)."""

    __slots__ = ()
    #: The ``type`` key of the event's dict form.
    kind: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            _REGISTRY[cls.kind] = cls

    def _field_values(self) -> tuple[Any, ...]:
        get = _FIELD_VALUES.get(type(self))
        if get is None:
            get = _FIELD_VALUES[type(self)] = _values_getter(type(self))
        return get(self)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._field_values() == other._field_values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._field_values())

    def __repr__(self) -> str:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        values = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields)
        return f"{type(self).__qualname__}({values})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict: ``{"type": kind, field: value, ...}``; nested events become dicts."""
        out: dict[str, Any] = {"type": self.kind}
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if isinstance(value, PrivacyEvent):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = [v.to_dict() if isinstance(v, PrivacyEvent) else v for v in value]
            out[field.name] = value
        return out

    def to_dp_accounting(self) -> Any:
        """The equivalent dp-accounting ``DpEvent``, or ``None`` where dp-accounting has none."""
        return None


def event_from_dict(data: dict[str, Any]) -> PrivacyEvent:
    """Rebuild an event written by :meth:`PrivacyEvent.to_dict`."""
    if not isinstance(data, dict) or data.get("type") not in _REGISTRY:
        raise ValueError(f"data must be an event dict with type in {sorted(_REGISTRY)}. Found {data!r}.")
    cls = _REGISTRY[data["type"]]
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name not in data:
            continue
        value = data[field.name]
        if isinstance(value, dict) and "type" in value:
            value = event_from_dict(value)
        elif isinstance(value, list):
            value = tuple(event_from_dict(v) if isinstance(v, dict) else v for v in value)
        kwargs[field.name] = value
    return cls(**kwargs)


# ------------------------------------------------------------------------------------------ mechanisms
@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class GaussianEvent(PrivacyEvent):
    """One Gaussian mechanism: noise std = ``noise_multiplier`` × L2 sensitivity."""

    kind: ClassVar[str] = "gaussian"
    noise_multiplier: float

    def __post_init__(self) -> None:
        _check_noise("noise_multiplier", self.noise_multiplier)

    def to_dp_accounting(self) -> Any:
        from dp_accounting import dp_event

        return dp_event.GaussianDpEvent(float(self.noise_multiplier))


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class LaplaceEvent(PrivacyEvent):
    """One Laplace mechanism: scale b = ``noise_multiplier`` × L1 sensitivity (pure ε = 1/z)."""

    kind: ClassVar[str] = "laplace"
    noise_multiplier: float

    def __post_init__(self) -> None:
        _check_noise("noise_multiplier", self.noise_multiplier)

    def to_dp_accounting(self) -> Any:
        from dp_accounting import dp_event

        return dp_event.LaplaceDpEvent(float(self.noise_multiplier))


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class PoissonSampledEvent(PrivacyEvent):
    """Each unit is included independently with probability ``sampling_rate``; ``event`` runs on them."""

    kind: ClassVar[str] = "poisson_sampled"
    sampling_rate: float
    event: PrivacyEvent

    def __post_init__(self) -> None:
        check_probability("sampling_rate", self.sampling_rate, allow_zero=True)
        _check_event("event", self.event)

    def to_dp_accounting(self) -> Any:
        from dp_accounting import dp_event

        inner = self.event.to_dp_accounting()
        return None if inner is None else dp_event.PoissonSampledDpEvent(float(self.sampling_rate), inner)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class SampledWithoutReplacementEvent(PrivacyEvent):
    """``sample_size`` of ``source_size`` units drawn without replacement; relation: replace one unit."""

    kind: ClassVar[str] = "sampled_without_replacement"
    source_size: int
    sample_size: int
    event: PrivacyEvent

    def __post_init__(self) -> None:
        n = check_int("source_size", self.source_size, minimum=1)
        check_int("sample_size", self.sample_size, minimum=1, maximum=n)
        _check_event("event", self.event)

    def to_dp_accounting(self) -> Any:
        from dp_accounting import dp_event

        inner = self.event.to_dp_accounting()
        if inner is None:
            return None
        return dp_event.SampledWithoutReplacementDpEvent(int(self.source_size), int(self.sample_size), inner)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class PublicParticipationEvent(PrivacyEvent):
    """With probability ``participation`` the unit's ``event`` runs; the observer sees whether it ran.

    The privacy loss is the inner event's with probability p and exactly 0 otherwise (the outcomes "ran"
    and "did not run" have disjoint supports and the same probability under both datasets). This is the
    server's view in MS-PAFL (000: each client's upload and its sender are visible) and the dominating pair
    of the worst-case-sampling analysis of 004 (Thm 5.2, ``wcs``). No dp-accounting equivalent.
    """

    kind: ClassVar[str] = "public_participation"
    participation: float
    event: PrivacyEvent

    def __post_init__(self) -> None:
        check_probability("participation", self.participation, allow_zero=True)
        _check_event("event", self.event)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class RandomCheckInEvent(PrivacyEvent):
    """One round of DP-DSGD with random participation (004 Algorithm 1), record level.

    Each client joins with probability ``participation`` (p), hidden from the observer; a joining client
    includes each of its records with probability ``sampling_rate`` (q); clipped per-record gradients are
    summed and Gaussian noise with multiplier ``noise_multiplier`` (σ/C) is added to the sum. Relation:
    add/remove one record x′ at a client holding at most ``local_dataset_size`` (d) other records (any upper
    bound is sound: missing records are records with gradient 0; ``None``, the default: unknown, any number,
    so the PLD accountant uses Thm 5.2's pair, the d → ∞ limit). The observer sees the noisy sum only
    (``participation_hidden``, the default: 004 §3.1, trusted server, secure channels; a participant whose
    local sample is empty sends 0, like a non-participant). ``participation_hidden=False``: the observer also
    learns who joined.

    Accounting: :meth:`dominating` is the worst-case-sampling pair (004 Thm 5.2), sound in both cases, used by
    the RDP accountant. The PLD accountant uses :func:`ampfl.accounting.random_checkin.pld_pairs.
    random_checkin_pld`: with hidden participation a tighter pair that depends on d, and also composes a
    second one (:func:`~ampfl.accounting.random_checkin.pld_pairs.count_split_alternative`), reporting the
    smaller ε (docs/pld_random_checkin.md).
    Thm 4.1's d-dependent bound is not sound (docs/audit.md).
    """

    kind: ClassVar[str] = "random_checkin"
    participation: float
    sampling_rate: float
    noise_multiplier: float
    local_dataset_size: int | None = None
    participation_hidden: bool = True

    def __post_init__(self) -> None:
        check_probability("participation", self.participation)
        check_probability("sampling_rate", self.sampling_rate)
        _check_noise("noise_multiplier", self.noise_multiplier)
        if self.local_dataset_size is not None:
            check_int("local_dataset_size", self.local_dataset_size, minimum=0)
        if not isinstance(self.participation_hidden, bool):
            raise ValueError(f"participation_hidden must be a bool. Found {self.participation_hidden!r}.")

    def dominating(self) -> PrivacyEvent:
        """Worst-case sampling (004 Thm 5.2): participation revealed; sound whether or not it is hidden."""
        inner = PoissonSampledEvent(
            sampling_rate=self.sampling_rate, event=GaussianEvent(noise_multiplier=self.noise_multiplier)
        )
        return PublicParticipationEvent(participation=self.participation, event=inner)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ModelSplitEvent(PrivacyEvent):
    """One step of model-split DP-SGD (002 Alg. 1, Thms 3.4/3.5): each unit updates one of d blocks at random.

    The split part is clipped to its own norm and noised with ``noise_multiplier``; a partial split
    (002 §3.2.2) adds a non-split part noised with ``nonsplit_noise_multiplier`` (``None``: no such part).
    The block choice is secret. Relation: add/remove one unit.
    """

    kind: ClassVar[str] = "model_split"
    num_submodels: int
    noise_multiplier: float
    nonsplit_noise_multiplier: float | None = None

    def __post_init__(self) -> None:
        check_int("num_submodels", self.num_submodels, minimum=1)
        _check_noise("noise_multiplier", self.noise_multiplier)
        if self.nonsplit_noise_multiplier is not None:
            _check_noise("nonsplit_noise_multiplier", self.nonsplit_noise_multiplier)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class DropoutEvent(PrivacyEvent):
    """One step with dropout at rate exactly 1/2 (002 Alg. 2, Thm 3.7): a model split with d = 2 blocks."""

    kind: ClassVar[str] = "dropout"
    noise_multiplier: float
    nonsplit_noise_multiplier: float | None = None

    def __post_init__(self) -> None:
        _check_noise("noise_multiplier", self.noise_multiplier)
        if self.nonsplit_noise_multiplier is not None:
            _check_noise("nonsplit_noise_multiplier", self.nonsplit_noise_multiplier)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class BalancedIterationSubsamplingEvent(PrivacyEvent):
    """A WHOLE epoch of Balanced Iteration Subsampling (002 Thm 3.8): compose once per epoch, not per step.

    Each unit joins exactly ``participations`` (k) of ``iterations`` (T) steps, chosen uniformly and in
    secret, independently across units; every step is a Gaussian mechanism with ``noise_multiplier``.
    """

    kind: ClassVar[str] = "balanced_iteration_subsampling"
    iterations: int
    participations: int
    noise_multiplier: float

    def __post_init__(self) -> None:
        t = check_int("iterations", self.iterations, minimum=1)
        check_int("participations", self.participations, minimum=1, maximum=t)
        _check_noise("noise_multiplier", self.noise_multiplier)


MS_PAFL_PRIVATE_STATES = ("persistent", "reset")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class MSPAFLRoundEvent(PrivacyEvent):
    """One MS-PAFL round (000 Eqs. 9–14) for one record, seen by the server.

    The record's client uploads with probability ``participation`` (p) and the server sees who uploaded;
    the upload is the clipped public update (norm ≤ C, so sensitivity 2C under replace-one) plus Gaussian
    noise with ``noise_multiplier`` = σ/(2C) (Lemma 1's σ). With ``private_state="persistent"`` the private
    submodel carries records into later rounds, so local subsampling does not amplify (the
    counterexample in :mod:`ampfl.accounting.audit.ms_pafl`); the
    accountants bound the round as :class:`PublicParticipationEvent` of a Gaussian. ``"reset"`` (private
    part re-initialised every round) would allow local-sampling amplification; it is accounted the same
    way here (sound, not tightest) until an analysis for it is checked.
    """

    kind: ClassVar[str] = "ms_pafl_round"
    participation: float
    noise_multiplier: float
    private_state: str = "persistent"

    def __post_init__(self) -> None:
        check_probability("participation", self.participation)
        _check_noise("noise_multiplier", self.noise_multiplier)
        check_choice("private_state", self.private_state, MS_PAFL_PRIVATE_STATES)

    def dominating(self) -> PrivacyEvent:
        """Participation public, each participated round a Gaussian mechanism."""
        return PublicParticipationEvent(
            participation=self.participation, event=GaussianEvent(noise_multiplier=self.noise_multiplier)
        )


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class GroupRoundEvent(PrivacyEvent):
    """One GDPFed round for one privacy group (001 Alg. 1), client level.

    Clients of group ``group`` are sampled at rate ``sampling_rate`` (q_g) and their clipped updates' sum
    gets Gaussian noise with ``noise_multiplier`` (σ_g / C). Accounted as a Poisson-subsampled Gaussian
    (the planner's sound analysis, docs/planner.md).
    """

    kind: ClassVar[str] = "group_round"
    sampling_rate: float
    noise_multiplier: float
    group: int = 0

    def __post_init__(self) -> None:
        check_probability("sampling_rate", self.sampling_rate, allow_zero=True)
        _check_noise("noise_multiplier", self.noise_multiplier)
        check_int("group", self.group, minimum=0)

    def dominating(self) -> PrivacyEvent:
        return PoissonSampledEvent(
            sampling_rate=self.sampling_rate, event=GaussianEvent(noise_multiplier=self.noise_multiplier)
        )


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class BernoulliMaskEvent(PrivacyEvent):
    """Release of ``dim`` Bernoulli mask bits whose keep-probabilities lie in [c, 1 − c] (003, PM-SFL).

    Exact RDP d·D_α(Bern(1 − c) ‖ Bern(c)) whatever the input (docs/pm_sfl.md).
    """

    kind: ClassVar[str] = "bernoulli_mask"
    c: float
    dim: int

    def __post_init__(self) -> None:
        c = check_positive("c", self.c)
        if not c < 0.5:
            raise ValueError(f"c must be in (0, 0.5). Found {c}.")
        check_int("dim", self.dim, minimum=1)


# ----------------------------------------------------------------------------------------- composition
@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class SelfComposedEvent(PrivacyEvent):
    """``event`` applied ``count`` times (adaptively)."""

    kind: ClassVar[str] = "self_composed"
    event: PrivacyEvent
    count: int

    def __post_init__(self) -> None:
        _check_event("event", self.event)
        check_int("count", self.count, minimum=0)

    def to_dp_accounting(self) -> Any:
        from dp_accounting import dp_event

        inner = self.event.to_dp_accounting()
        return None if inner is None else dp_event.SelfComposedDpEvent(inner, int(self.count))


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ComposedEvent(PrivacyEvent):
    """The events applied in order (adaptively)."""

    kind: ClassVar[str] = "composed"
    events: tuple[PrivacyEvent, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.events, tuple):
            object.__setattr__(self, "events", tuple(self.events))
        for i, e in enumerate(self.events):
            _check_event(f"events[{i}]", e)

    def to_dp_accounting(self) -> Any:
        from dp_accounting import dp_event

        inner = [e.to_dp_accounting() for e in self.events]
        return None if any(e is None for e in inner) else dp_event.ComposedDpEvent(inner)


def from_dp_accounting(event: Any) -> PrivacyEvent:
    """Convert a standard dp-accounting event to ampfl's (Gaussian, Laplace, sampling, composition).

    Raises:
        ValueError: for a dp-accounting event ampfl has no counterpart of (naming its type).
    """
    from dp_accounting import dp_event as d

    if isinstance(event, d.GaussianDpEvent):
        return GaussianEvent(noise_multiplier=float(event.noise_multiplier))
    if isinstance(event, d.LaplaceDpEvent):
        return LaplaceEvent(noise_multiplier=float(event.noise_multiplier))
    if isinstance(event, d.PoissonSampledDpEvent):
        return PoissonSampledEvent(
            sampling_rate=float(event.sampling_probability), event=from_dp_accounting(event.event)
        )
    if isinstance(event, d.SampledWithoutReplacementDpEvent):
        return SampledWithoutReplacementEvent(
            source_size=int(event.source_dataset_size),
            sample_size=int(event.sample_size),
            event=from_dp_accounting(event.event),
        )
    if isinstance(event, d.SelfComposedDpEvent):
        return SelfComposedEvent(event=from_dp_accounting(event.event), count=int(event.count))
    if isinstance(event, d.ComposedDpEvent):
        return ComposedEvent(events=tuple(from_dp_accounting(e) for e in event.events))
    raise ValueError(f"event must be a supported dp-accounting event. Found {type(event).__name__}.")
