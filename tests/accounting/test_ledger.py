"""The composable RDP ledger: heterogeneous composition, dp-accounting events, serialisation."""

import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.ledger import Ledger
from ampfl.accounting.partition import rdp_bis, rdp_model_split
from ampfl.accounting.rdp import DEFAULT_ORDERS, epsilon_from_rdp, rdp_gaussian
from ampfl.io import dumps_json


def test_empty_ledger_is_zero():
    ledger = Ledger()
    assert ledger.epsilon(1e-5).epsilon == 0.0
    assert ledger.delta(0.0).delta == 0.0


def test_partial_split_over_several_runs_equals_hand_sum():
    # partial split (002 Sec. 3.2.2): Gaussian non-split part (a dp-accounting event) + Thm 3.4 split part,
    # 3 training runs of 50 steps, plus one BIS fine-tuning run; compare with summing by hand
    orders = list(range(2, 65))
    ledger = Ledger(orders)
    split = rdp_model_split(orders=orders, num_submodels=3, noise_multiplier=1.5, steps=50)
    for _ in range(3):
        ledger.compose_rdp(orders, split, label="split part, 50 steps")
        ledger.compose_event(dp_event.GaussianDpEvent(4.0), count=50, label="non-split part")
    bis = rdp_bis(orders=orders, iterations=20, participations=1, noise_multiplier=1.0)
    ledger.compose_rdp(orders, bis, count=2, label="BIS, 2 epochs")

    by_hand = 3 * (split + rdp_gaussian(orders=orders, noise_multiplier=4.0, steps=50)) + 2 * bis
    np.testing.assert_allclose(ledger.rdp, by_hand, rtol=1e-12)
    eps, order = ledger.epsilon(1e-5)
    ref = epsilon_from_rdp(orders=orders, rdp=by_hand, delta=1e-5)
    assert eps == pytest.approx(ref.epsilon, rel=1e-12) and order == ref.order
    dlt, _ = ledger.delta(eps)
    assert dlt == pytest.approx(1e-5, rel=1e-6)
    assert [e["count"] for e in ledger.entries] == [1, 50, 1, 50, 1, 50, 2]


def test_compose_event_matches_dp_accounting():
    event = dp_event.PoissonSampledDpEvent(0.02, dp_event.GaussianDpEvent(1.1))
    ledger = Ledger().compose_event(event, count=500)
    acc = dp_rdp.RdpAccountant(orders=[float(o) for o in DEFAULT_ORDERS]).compose(event, 500)
    eps, order = acc.get_epsilon_and_optimal_order(1e-6)
    assert ledger.epsilon(1e-6).epsilon == pytest.approx(eps, rel=1e-12)
    assert ledger.epsilon(1e-6).order == order


def test_curves_on_other_orders_are_moved_up_soundly():
    ledger = Ledger([2, 3, 4, 10, 100])
    ledger.compose_rdp([2, 4, 12], [0.1, 0.2, 0.5])
    # α = 3 uses the value at 4, α = 10 the value at 12, α = 100 is beyond the given orders: inf
    np.testing.assert_array_equal(ledger.rdp, [0.1, 0.2, 0.2, 0.5, math.inf])
    assert math.isfinite(ledger.epsilon(1e-5).epsilon)


def test_compose_dispatches_dp_events_and_rdp_objects():
    class SplitStep:
        def rdp(self, orders):
            return rdp_model_split(orders=orders, num_submodels=8, noise_multiplier=2.0)

    ledger = Ledger([2, 4, 8]).compose(SplitStep(), count=10).compose(dp_event.GaussianDpEvent(3.0), count=10)
    expected = 10 * rdp_model_split(orders=[2, 4, 8], num_submodels=8, noise_multiplier=2.0) + rdp_gaussian(
        orders=[2, 4, 8], noise_multiplier=3.0, steps=10
    )
    np.testing.assert_allclose(ledger.rdp, expected, rtol=1e-12)
    assert [e["label"] for e in ledger.entries] == ["SplitStep", "GaussianDpEvent"]
    with pytest.raises(ValueError, match="rdp\\(orders\\) method"):
        ledger.compose(42)


def test_count_zero_adds_nothing_even_for_inf():
    ledger = Ledger([2, 3]).compose_rdp([2], [0.5], count=0)
    np.testing.assert_array_equal(ledger.rdp, [0.0, 0.0])


def test_round_trip_through_json():
    ledger = Ledger([2, 3, 5])
    ledger.compose_rdp([2, 3], [0.1, 0.2], count=4, label="x")
    ledger.compose_event(dp_event.GaussianDpEvent(2.0), count=2)
    data = json.loads(dumps_json(ledger.to_dict()))
    back = Ledger.from_dict(data)
    np.testing.assert_array_equal(back.rdp, ledger.rdp)
    np.testing.assert_array_equal(back.orders, ledger.orders)
    assert back.entries == ledger.entries
    assert back.epsilon(1e-5) == ledger.epsilon(1e-5)
    assert math.isinf(back.rdp[-1])


def test_bad_input():
    ledger = Ledger([2, 3])
    with pytest.raises(ValueError, match="one value per order"):
        ledger.compose_rdp([2, 3], [0.1])
    with pytest.raises(ValueError, match="non-negative"):
        ledger.compose_rdp([2], [-0.1])
    with pytest.raises(ValueError, match="DpEvent"):
        ledger.compose_event("gaussian")
    with pytest.raises(ValueError, match="not supported"):
        ledger.compose_event(dp_event.UnsupportedDpEvent())
    with pytest.raises(ValueError, match="format"):
        Ledger.from_dict({"orders": [2], "rdp": [0.0]})
    with pytest.raises(ValueError, match=r"orders must be an integer in \[2, inf\]"):
        Ledger([1, 2])


@settings(max_examples=20, deadline=None)
@given(
    z=st.floats(0.5, 20.0),
    count=st.integers(1, 50),
    stride=st.integers(1, 8),
)
def test_ledger_monotone_and_regridding_is_conservative(z, count, stride):
    """ε grows with composition count; a curve given on a coarser grid never gives a smaller ε."""
    fine = Ledger().compose_event(dp_event.GaussianDpEvent(z), count)
    more = Ledger().compose_event(dp_event.GaussianDpEvent(z), count + 1)
    assert more.epsilon(1e-5).epsilon >= fine.epsilon(1e-5).epsilon
    coarse_orders = list(DEFAULT_ORDERS[::stride])
    coarse = Ledger().compose_rdp(
        coarse_orders, rdp_gaussian(orders=coarse_orders, noise_multiplier=z), count
    )
    assert coarse.epsilon(1e-5).epsilon >= fine.epsilon(1e-5).epsilon * (1 - 1e-9)


def test_bis_event_composes_into_the_ledger_as_one_whole_run():
    # A BIS run (002 Thm 3.8) with T = 50, k = 1 and Gaussian steps of noise multiplier 1 enters the ledger
    # once for the whole run; its curve must be rdp_bis's, independently computed here.
    import dp_accounting

    from ampfl.accounting.partition import BalancedIterationSubsamplingEvent, rdp_bis

    event = BalancedIterationSubsamplingEvent(50, 1, dp_accounting.GaussianDpEvent(1.0))
    ledger = Ledger(orders=[2, 4, 8, 16]).compose(event, 2)
    expected = 2 * rdp_bis(orders=[2, 4, 8, 16], iterations=50, participations=1, noise_multiplier=1.0)
    np.testing.assert_allclose(ledger.rdp, expected, rtol=1e-12)


def test_bis_event_refuses_non_gaussian_inner_event():
    import dp_accounting

    from ampfl.accounting.partition import BalancedIterationSubsamplingEvent

    event = BalancedIterationSubsamplingEvent(10, 2, dp_accounting.LaplaceDpEvent(1.0))
    with pytest.raises(ValueError, match="GaussianDpEvent"):
        Ledger(orders=[2, 3]).compose(event)
