"""The PLD accountant's ε is never below the exact ε of the Gaussian mechanism composed T times.

With q = 1 the composition is a Gaussian mechanism with μ = √T / z and δ(ε) = Φ(-ε/μ + μ/2) −
e^ε Φ(-ε/μ − μ/2) (Balle–Wang 2018, Thm 8); the reference solves it with mpmath at 60 digits, independent of
the package's own closed form.
"""

from __future__ import annotations

import json
import math

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.accountants import PLDAccountant
from ampfl.accounting.accountants.pld import PLD_DELTA_FLOOR
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent


def exact_epsilon(z: float, steps: int, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ delta (bisection in mpmath, returned rounded down)."""
    with mp.workdps(60):
        mu = mp.sqrt(steps) / mp.mpf(z)

        def d(e: mp.mpf) -> mp.mpf:
            return mp.ncdf(-e / mu + mu / 2) - mp.e**e * mp.ncdf(-e / mu - mu / 2)

        lo, hi = mp.mpf(0), mp.mpf(1)
        while d(hi) > delta:
            hi *= 2
        for _ in range(120):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
        return float(mp.nstr(lo, 30)) * (1 - 1e-15)


def exact_delta(z: float, steps: int, eps: float) -> float:
    with mp.workdps(60):
        mu = mp.sqrt(steps) / mp.mpf(z)
        return float(mp.ncdf(-eps / mu + mu / 2) - mp.e**eps * mp.ncdf(-eps / mu - mu / 2))


def test_reported_case() -> None:
    # z = 0.6, T = 50, δ = 1e-10: the closed form gives ε = 143.614648999844...
    acc = PLDAccountant().compose(
        PoissonSampledEvent(sampling_rate=1.0, event=GaussianEvent(noise_multiplier=0.6)), 50
    )
    assert acc.get_epsilon(1e-10) >= exact_epsilon(0.6, 50, 1e-10)
    assert exact_epsilon(0.6, 50, 1e-10) == pytest.approx(143.614649, abs=1e-6)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    z=st.floats(0.4, 5.0),
    steps=st.integers(1, 200),
    log10_delta=st.floats(-12.0, -3.0),
    poisson=st.booleans(),
)
def test_epsilon_never_below_exact(z: float, steps: int, log10_delta: float, poisson: bool) -> None:
    delta = 10.0**log10_delta
    event = GaussianEvent(noise_multiplier=z)
    if poisson:
        event = PoissonSampledEvent(sampling_rate=1.0, event=event)  # type: ignore[assignment]
    acc = PLDAccountant().compose(event, steps)
    eps = acc.get_epsilon(delta)
    truth = exact_epsilon(z, steps, delta)
    assert eps >= truth
    assert eps <= truth + 0.05 + 1e-3 * truth  # and still tight
    reading, _ = acc.epsilon_reading(delta)
    assert reading >= truth
    # δ(ε) is never below the exact δ either
    probe = truth * 0.9
    assert acc.get_delta(probe) >= exact_delta(z, steps, probe)


@pytest.mark.parametrize(
    ("z", "steps", "delta"),
    [
        (4.658892464535431, 133, 1.3563030697037275e-12),
        (0.5752697635844135, 48, 1.0593843304354618e-09),
        (2.2013936471611824, 199, 6.5580905761482486e-12),
        (3.5356996336834183, 141, 1.6438740704674556e-11),
    ],
)
def test_cases_that_were_below(z: float, steps: int, delta: float) -> None:
    # each of these read ε below the closed form before the reading's δ floor
    acc = PLDAccountant().compose(GaussianEvent(noise_multiplier=z), steps)
    assert acc.get_epsilon(delta) >= exact_epsilon(z, steps, delta)


def test_delta_at_the_floor_is_refused() -> None:
    from ampfl.accounting._checks import NumericalError

    acc = PLDAccountant().compose(GaussianEvent(noise_multiplier=1.0), 3)
    with pytest.raises(NumericalError, match="delta must be above"):
        acc.get_epsilon(2 * PLD_DELTA_FLOOR)


def test_cli_account_poisson_not_below(capsys: pytest.CaptureFixture[str]) -> None:
    from ampfl.cli import main

    rc = main(
        [
            "account",
            "poisson",
            "--rate",
            "1",
            "--noise-multiplier",
            "0.6",
            "--steps",
            "50",
            "--delta",
            "1e-10",
            "--json",
        ]
    )
    assert rc in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon"] >= exact_epsilon(0.6, 50, 1e-10)
    assert math.isfinite(out["epsilon"])
