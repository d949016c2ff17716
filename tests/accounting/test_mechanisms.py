"""The mechanism registry (issue 29): every event type has an entry, every entry resolves and is sound, the
accountants dispatch through it, and adding a mechanism is one entry (the worked example of
docs/architecture.md, run here)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting import events as ev
from ampfl.accounting import mechanisms
from ampfl.accounting.accountants import PLDAccountant, RDPAccountant, UnsupportedEventError, event_rdp
from ampfl.accounting.accountants.pld import event_pld, has_second_pair
from ampfl.accounting.accountants.rdp import unsupported
from ampfl.accounting.mechanisms import REGISTRY, Bound, Mechanism, lookup
from ampfl.accounting.unamplified import without_amplification


def _event_types() -> list[type[ev.PrivacyEvent]]:
    return [
        cls
        for cls in vars(ev).values()
        if isinstance(cls, type) and issubclass(cls, ev.PrivacyEvent) and cls.kind
    ]


def _bounds(mech: Mechanism) -> list[Bound]:
    out = [
        getattr(mech, f.name) for f in dataclasses.fields(mech) if isinstance(getattr(mech, f.name), Bound)
    ]
    for alt in mech.alternatives.values():
        out += [alt.applies, alt.pld]
    return out


def test_every_event_type_has_an_entry() -> None:
    missing = [cls.__name__ for cls in _event_types() if cls not in REGISTRY]
    assert not missing


@pytest.mark.parametrize("kind", sorted(REGISTRY, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_bound_resolves_cites_its_source_and_is_sound(kind: type[ev.PrivacyEvent]) -> None:
    mech = REGISTRY[kind]
    assert mech.rdp or mech.pld or mech.dominating, f"{kind.__name__} has no bound at all"
    for bound in _bounds(mech):
        assert callable(mechanisms.resolve(bound.ref)), bound.ref
        assert bound.source
        assert bound.sound  # the accountants call sound bounds only


def test_an_unsound_bound_refuses_to_run() -> None:
    bound = Bound("ampfl.accounting.core_bounds:itself", "as printed", sound=False)
    with pytest.raises(ValueError, match="not a sound bound"):
        bound(ev.GaussianEvent(noise_multiplier=1.0))


def test_an_event_without_an_entry_is_unsupported_with_its_name() -> None:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Unknown(ev.PrivacyEvent):
        kind: ClassVar[str] = ""

    event = Unknown()
    assert lookup(event) == Mechanism()
    assert unsupported(event) == "no RDP bound for Unknown."
    with pytest.raises(UnsupportedEventError, match="no RDP bound for Unknown"):
        event_rdp(event, [2, 3])
    with pytest.raises(UnsupportedEventError, match="no PLD for Unknown"):
        event_pld(event)
    with pytest.raises(ValueError, match="Unknown has no guarantee without its randomness"):
        without_amplification(event)


@settings(max_examples=25, deadline=None)
@given(
    z=st.floats(0.3, 20.0),
    q=st.floats(1e-3, 1.0),
    p=st.floats(0.01, 1.0),
)
def test_dispatch_matches_the_closed_forms(z: float, q: float, p: float) -> None:
    """Through the registry, the accountants compute what the formulas say: α/(2z²) for the Gaussian, the
    public-participation mixture of the subsampled Gaussian's curve, and composition adds."""
    orders = np.arange(2, 40)
    gauss = event_rdp(ev.GaussianEvent(noise_multiplier=z), orders)
    np.testing.assert_allclose(gauss, orders / (2 * z * z), rtol=1e-15)
    sub = ev.PoissonSampledEvent(sampling_rate=q, event=ev.GaussianEvent(noise_multiplier=z))
    inner = event_rdp(sub, orders)
    mixed = event_rdp(ev.PublicParticipationEvent(participation=p, event=sub), orders)
    expected = np.maximum(
        np.logaddexp(math.log1p(-p) if p < 1 else -np.inf, math.log(p) + (orders - 1) * inner), 0
    )
    np.testing.assert_allclose(mixed, expected / (orders - 1), rtol=1e-12, atol=1e-300)
    both = event_rdp(ev.ComposedEvent(events=(sub, ev.GaussianEvent(noise_multiplier=z))), orders)
    np.testing.assert_allclose(both, inner + gauss, rtol=1e-14)


def test_dominating_pairs_and_second_pairs_come_from_the_registry() -> None:
    rc = ev.RandomCheckInEvent(
        participation=0.2, sampling_rate=0.9, noise_multiplier=0.6, local_dataset_size=2
    )
    np.testing.assert_array_equal(event_rdp(rc, [2, 8]), event_rdp(rc.dominating(), [2, 8]))
    assert has_second_pair(rc) == bool(
        mechanisms.resolve("ampfl.accounting.random_checkin.pld_pairs:count_split_alternative")(rc)
    )
    revealed = dataclasses.replace(rc, participation_hidden=False)
    assert not has_second_pair(revealed)
    rnd = ev.MSPAFLRoundEvent(participation=0.5, noise_multiplier=1.0)
    assert without_amplification(rnd) == ev.GaussianEvent(noise_multiplier=1.0)


# ----------------------------------------------------------- the worked example (docs/architecture.md)
@dataclass(frozen=True, slots=True, kw_only=True)
class ScaledGaussianEvent(ev.PrivacyEvent):
    """A Gaussian release whose sensitivity is ``scale`` clip norms (noise multiplier relative to one)."""

    kind: ClassVar[str] = ""  # not serialisable: a test-only event
    noise_multiplier: float
    scale: float


def scaled_gaussian_rdp(event: ScaledGaussianEvent, alphas: np.ndarray, relation: object) -> np.ndarray:
    return alphas * event.scale**2 / (2.0 * event.noise_multiplier**2)


def scaled_gaussian_pld(event: ScaledGaussianEvent, h: float) -> object:
    from ampfl.accounting.core_bounds import gaussian_pld

    return gaussian_pld(ev.GaussianEvent(noise_multiplier=event.noise_multiplier / event.scale), h)


def scaled_gaussian_unamplified(event: ScaledGaussianEvent) -> ev.PrivacyEvent:
    return event


def test_adding_a_mechanism_is_one_registry_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    here = f"{__name__}:"
    entry = Mechanism(
        rdp=Bound(here + "scaled_gaussian_rdp", "Mironov 2017, Prop. 7 at sensitivity s"),
        pld=Bound(here + "scaled_gaussian_pld", "the Gaussian at z / s"),
        unamplified=Bound(here + "scaled_gaussian_unamplified", "no amplification"),
    )
    monkeypatch.setattr(mechanisms, "REGISTRY", MappingProxyType({**REGISTRY, ScaledGaussianEvent: entry}))
    scaled = ScaledGaussianEvent(noise_multiplier=2.0, scale=2.0)
    plain = ev.GaussianEvent(noise_multiplier=1.0)  # the same mechanism
    for make in (RDPAccountant, PLDAccountant):
        a, b = make(), make()
        a.compose(scaled, 50)
        b.compose(plain, 50)
        assert a.get_epsilon(1e-5) == pytest.approx(b.get_epsilon(1e-5), rel=1e-9)
    # composed and sampled forms work without further entries (the generic rules of core_bounds)
    sampled = ev.PoissonSampledEvent(sampling_rate=0.1, event=scaled)
    assert np.all(np.isfinite(event_rdp(sampled, [2, 4, 8])))
    assert without_amplification(ev.SelfComposedEvent(event=sampled, count=3)) == ev.SelfComposedEvent(
        event=scaled, count=3
    )
