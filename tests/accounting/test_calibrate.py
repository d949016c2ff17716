"""Generic decreasing-function calibration (ampfl.accounting.calibrate)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting._checks import NumericalError
from ampfl.accounting.calibrate import calibrate_decreasing


@settings(max_examples=40, deadline=None)
@given(root=st.floats(min_value=1e-4, max_value=1e4), initial=st.floats(min_value=1e-3, max_value=1e3))
def test_finds_smallest_value_meeting_target(root, initial):
    # f(x) = root / x is decreasing; f(x) <= 1 exactly when x >= root.
    x = calibrate_decreasing(lambda v: root / v, 1.0, initial=initial, rtol=1e-9)
    assert root / x <= 1.0
    assert x <= root * (1 + 1e-8)


def test_works_on_log_targets():
    # log δ targets are negative; the search must accept any real target.
    x = calibrate_decreasing(lambda v: -v, -3.0)
    assert x == pytest.approx(3.0, rel=1e-6)
    assert -x <= -3.0


def test_unreachable_target_raises_numerical_error():
    with pytest.raises(NumericalError, match="unreachable"):
        calibrate_decreasing(lambda v: 1.0 + 1.0 / v, 0.5, upper_limit=1e3)


def test_lower_limit_is_returned_when_target_met_everywhere():
    x = calibrate_decreasing(lambda v: 0.0, 1.0, lower_limit=1e-3)
    assert x == pytest.approx(1e-3)
    assert math.isfinite(x)
