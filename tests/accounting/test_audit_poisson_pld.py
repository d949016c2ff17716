"""Issue 11 targets for the Poisson-subsampled Gaussian on the PLD accountant: within 2% of the exact ε
(dp-accounting's pessimistic PLD at a 20× finer grid as the reference), never below it, and the
``calibrate poisson`` example of the issue (ε = 0.01, δ = 1e-5, q = 0.001, T = 100: z near 2.70)."""

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from ampfl.accounting.accountants import PLDAccountant
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent


def _fine_epsilon(rate, z, steps, delta, interval=5e-6):
    one = pld_lib.from_gaussian_mechanism(
        standard_deviation=z, sampling_prob=rate, value_discretization_interval=interval
    )
    return one.self_compose(steps).get_epsilon_for_delta(delta)


def _ours(rate, z, steps, delta):
    event = PoissonSampledEvent(sampling_rate=rate, event=GaussianEvent(noise_multiplier=z))
    return PLDAccountant().compose(event, steps).get_epsilon(delta)


@pytest.mark.parametrize(
    ("rate", "z", "steps", "delta"),
    [(0.0001, 3.0, 1000, 1e-5), (0.001, 2.6731, 100, 1e-5), (0.01, 3.0, 10, 1e-12), (0.1, 5.0, 10, 1e-3)],
)
def test_pld_epsilon_within_two_percent_of_the_fine_reference(rate, z, steps, delta):
    """The first case was 1.62× the reference on the plain 1e-4 grid (ε 0.0035 vs 0.00217): refinement."""
    ours, ref = _ours(rate, z, steps, delta), _fine_epsilon(rate, z, steps, delta)
    assert ref / 1.005 <= ours <= 1.02 * ref  # both pessimistic (upper bounds), different grids


def test_calibrate_poisson_issue_example(cli_json):
    out = cli_json(
        ["calibrate", "poisson", "--epsilon", "0.01", "--delta", "1e-5", "--rate", "0.001", "--steps", "100"]
    )
    z = out["noise_multiplier"]
    assert out["accountant"] == "pld" and out["epsilon"] <= 0.01
    assert 2.60 <= z <= 2.75  # the issue: "near 2.70"
    # the exact smallest z (fine reference) is within 2% below the returned one
    assert _fine_epsilon(0.001, z, 100, 1e-5) <= 0.01 < _fine_epsilon(0.001, z / 1.02, 100, 1e-5)
