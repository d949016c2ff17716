"""The one root finder of the accounting layer (ampfl.accounting._numerics.find_root, issue 26 item 6).

It checks its bracket, expands it geometrically when the root lies outside, raises NumericalError when it
cannot bracket, and returns the end of the final bracket the caller asks for (the conservative side).
"""

import math

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting._checks import NumericalError
from ampfl.accounting._numerics import find_root
from ampfl.accounting.gaussian import gaussian_epsilon
from ampfl.accounting.random_checkin.count_split import mixture_delta
from ampfl.accounting.random_checkin.pld_pairs import best_hidden_epsilon, hidden_components

# The known case: tiny noise, so one round's ε lies far above the old fixed bracket [0, 64].
KNOWN = {"participation": 0.9, "sampling_rate": 0.5, "local_dataset_size": 10, "noise_multiplier": 0.05}


def test_one_round_epsilon_above_the_old_bracket_is_found():
    eps, name = best_hidden_epsilon(**KNOWN, iterations=1, delta=1e-5)
    assert name == "refined"
    comps = hidden_components(
        KNOWN["participation"], KNOWN["sampling_rate"], KNOWN["local_dataset_size"], KNOWN["noise_multiplier"]
    )
    # independent check with the module's own δ(ε): the old answer 64 misses δ, the new one meets it
    assert mixture_delta(comps, 64.0) > 1e-5
    assert mixture_delta(comps, eps) <= 1e-5
    assert mixture_delta(comps, eps * (1.0 - 1e-9)) > 1e-5  # and it is the smallest such ε (to 1e-9)
    assert eps > 250.0
    # cross-checks: below the unsubsampled Gaussian's ε (a worse mechanism), close to dp_accounting's
    # pessimistic PLD of the q-subsampled Gaussian (the pair's dominant component, weight ≈ 0.9)
    assert eps <= gaussian_epsilon(sigma=0.05, delta=1e-5)
    # (a 1e-2 grid: ε ≈ 280 is then off by at most ~1e-2; the default 1e-4 grid takes ~20 s)
    reference = pld_lib.from_gaussian_mechanism(
        standard_deviation=0.05, sampling_prob=0.5, value_discretization_interval=1e-2
    )
    assert eps == pytest.approx(reference.get_epsilon_for_delta(1e-5), rel=0.01)


# One-round ε(1e-5) of the pair (remove direction; the add direction's δ is 0 there), from the same closed
# form evaluated with mpmath at 60 digits and mpmath.findroot: an independent reference for the rounding.
MPMATH_EPSILON = {0.05: 280.05584442162631006, 0.03: 690.01815347934716546}


@pytest.mark.parametrize("noise", [0.05, 0.03])
def test_one_round_epsilon_matches_a_high_precision_reference(noise: float):
    eps, _ = best_hidden_epsilon(**{**KNOWN, "noise_multiplier": noise}, iterations=1, delta=1e-5)
    reference = MPMATH_EPSILON[noise]
    assert reference <= eps <= reference * (1.0 + 1e-9)  # never below the true ε, and within 1e-9


def test_one_round_epsilon_beyond_the_closed_forms_raises():
    # at noise 0.02 the root lies above ε ≈ 709 where e^ε overflows: an error, never a capped ε
    with pytest.raises(NumericalError, match="not bracketed"):
        best_hidden_epsilon(**{**KNOWN, "noise_multiplier": 0.02}, iterations=1, delta=1e-5)


def test_root_inside_the_bracket():
    root = find_root(lambda x: x * x - 2.0, 0.0, 2.0, rtol=1e-14)
    assert root == pytest.approx(math.sqrt(2.0), rel=1e-13)
    assert root * root - 2.0 >= 0.0  # the upper end keeps the sign of f(hi)


def test_root_outside_the_bracket_is_found_by_expansion():
    root = find_root(lambda x: x - 1234.5, 0.0, 1.0, expand="upper", rtol=1e-12)
    assert root == pytest.approx(1234.5, rel=1e-11)
    low = find_root(lambda x: x + 777.0, 0.0, 1.0, expand="lower", min_lo=-1e4, rtol=1e-12, end="lower")
    assert low == pytest.approx(-777.0, rel=1e-11) and low <= -777.0
    both = find_root(lambda x: x - 50.0, -1.0, 1.0, expand="both", rtol=1e-12)
    assert both == pytest.approx(50.0, rel=1e-11)


def test_unbracketed_root_raises_numerical_error():
    with pytest.raises(NumericalError, match="not bracketed"):
        find_root(lambda x: x - 5.0, 0.0, 1.0)  # no expansion allowed
    with pytest.raises(NumericalError, match="not bracketed"):
        find_root(lambda x: x - 2e6, 0.0, 1.0, expand="upper", max_hi=1e6)
    with pytest.raises(NumericalError, match="not bracketed"):
        find_root(lambda x: 1.0 + x * x, -1.0, 1.0, expand="both")  # no root at all
    with pytest.raises(NumericalError, match="nan"):
        find_root(lambda x: math.nan if x > 3.0 else 1.0, 0.0, 1.0, expand="upper")
    with pytest.raises(ValueError, match="bracket"):
        find_root(lambda x: x, 1.0, 0.0)


def test_infinite_values_count_by_their_sign():
    def f(x: float) -> float:
        return math.inf if x < 10.0 else -math.inf

    root = find_root(f, 0.0, 1.0, expand="upper", rtol=1e-12)
    assert root == pytest.approx(10.0, rel=1e-11) and f(root) < 0.0


def test_decreasing_function_and_the_chosen_end():
    def f(x: float) -> float:  # δ-like: decreasing, root at 3.3
        return math.exp(-x) - math.exp(-3.3)

    upper = find_root(f, 0.0, 1.0, expand="upper", rtol=1e-10, end="upper")
    lower = find_root(f, 0.0, 1.0, expand="upper", rtol=1e-10, end="lower")
    assert f(upper) <= 0.0 < f(lower)  # each end keeps its side of the root
    assert lower <= 3.3 <= upper and upper - lower <= 1e-10 * upper


def test_step_function_is_bracketed_at_its_jump():
    root = find_root(lambda x: -1.0 if x < 0.3 else 1.0, 0.0, 1.0, xtol=1e-15, rtol=0.0)
    assert root == pytest.approx(0.3, abs=2e-15) and root >= 0.3


@settings(max_examples=200, deadline=None)
@given(c=st.floats(min_value=-20.0, max_value=13.0), start=st.floats(min_value=1e-3, max_value=1.0))
def test_matches_the_closed_form_root_of_log(c: float, start: float):
    # f(x) = log(x) − c has the root eᶜ, anywhere in [2e-9, 4.4e5]: found from [start/2, start] by expansion
    root = find_root(
        lambda x: math.log(x) - c, start / 2.0, start, expand="both", min_lo=1e-12, rtol=1e-12, end="upper"
    )
    assert root == pytest.approx(math.exp(c), rel=1e-11)
    assert math.log(root) - c >= 0.0
