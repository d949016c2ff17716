"""The run's calibration (ampfl.fl.privacy.calibration): one accountant for every target, chosen once; a
target with alternative descriptions takes the one needing the least noise; the values equal a direct
calibration."""

from __future__ import annotations

import pytest

from ampfl.accounting.calibrate import calibrate
from ampfl.accounting.events import BernoulliMaskEvent, ComposedEvent, GaussianEvent, PoissonSampledEvent
from ampfl.fl.config import PrivacyConfig
from ampfl.fl.privacy.calibration import NoiseTarget, calibrate_targets, calibration_accountant


def _poisson(q: float) -> NoiseTarget:
    return NoiseTarget(
        "z", lambda z: PoissonSampledEvent(sampling_rate=q, event=GaussianEvent(noise_multiplier=z)), 2.0, 10
    )


def _masked(z: float) -> ComposedEvent:  # PM-SFL's mask bits have no PLD: "auto" must fall back to RDP
    return ComposedEvent(events=(GaussianEvent(noise_multiplier=z), BernoulliMaskEvent(c=0.3, dim=2)))


def test_one_accountant_for_every_target() -> None:
    auto = PrivacyConfig()
    assert calibration_accountant([_poisson(0.1)], auto) == "pld"
    masked = NoiseTarget("m", _masked, 2.0, 10)
    assert calibration_accountant([_poisson(0.1), masked], auto) == "rdp"  # one target without PLD: RDP
    with_choice = NoiseTarget(
        "c", _poisson(0.1).event_at, 2.0, 10, choices={"a": _poisson(0.1).event_at, "b": _masked}
    )
    assert calibration_accountant([with_choice], auto) == "rdp"  # every choice must be accountable
    assert calibration_accountant([_poisson(0.1)], PrivacyConfig(accountant="rdp")) == "rdp"


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_the_smallest_noise_among_choices_and_equal_to_a_direct_calibration(accountant: str) -> None:
    low, high = _poisson(0.05), _poisson(0.5)
    target = NoiseTarget("z", high.event_at, 2.0, 10, choices={"high": high.event_at, "low": low.event_at})
    (resolved,) = calibrate_targets([target], PrivacyConfig(), accountant).values()
    direct = {
        name: calibrate(t.event_at, target_epsilon=2.0, target_delta=1e-5, accountant=accountant, count=10)
        for name, t in (("high", high), ("low", low))
    }
    assert direct["low"] < direct["high"]  # less sampling, less noise for the same ε
    assert (resolved.choice, resolved.noise_multiplier, resolved.accountant) == (
        "low",
        direct["low"],
        accountant,
    )
    (plain,) = calibrate_targets([high], PrivacyConfig(), accountant).values()
    assert plain.choice is None and plain.noise_multiplier == direct["high"]
