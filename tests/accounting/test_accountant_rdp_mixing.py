"""The RDP accountant composes heterogeneous mechanisms of a run: hand sums of independent curves (002)."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting import dp_event

from ampfl.accounting.accountants import RDPAccountant
from ampfl.accounting.events import BalancedIterationSubsamplingEvent, ModelSplitEvent
from ampfl.accounting.partition import rdp_bis, rdp_model_split
from ampfl.accounting.rdp import epsilon_from_rdp, rdp_gaussian

ORDERS = list(range(2, 65))


def test_partial_split_runs_plus_bis_equal_the_hand_sum():
    # Partial split (002 Sec. 3.2.2): Thm 3.4 split part + a Gaussian non-split part (a dp-accounting event),
    # 3 runs of 50 steps, plus 2 epochs of BIS fine-tuning; compare with summing the curves by hand.
    acc = RDPAccountant(orders=ORDERS)
    for _ in range(3):
        acc.compose(ModelSplitEvent(num_submodels=3, noise_multiplier=1.5), 50)
        acc.compose(dp_event.GaussianDpEvent(4.0), 50)
    acc.compose(BalancedIterationSubsamplingEvent(iterations=20, participations=1, noise_multiplier=1.0), 2)

    split = rdp_model_split(orders=ORDERS, num_submodels=3, noise_multiplier=1.5, steps=50)
    bis = rdp_bis(orders=ORDERS, iterations=20, participations=1, noise_multiplier=1.0)
    by_hand = 3 * (split + rdp_gaussian(orders=ORDERS, noise_multiplier=4.0, steps=50)) + 2 * bis
    np.testing.assert_allclose(acc.rdp, by_hand, rtol=1e-12)
    ref = epsilon_from_rdp(orders=ORDERS, rdp=by_hand, delta=1e-5)
    assert acc.get_epsilon(1e-5) == pytest.approx(ref.epsilon, rel=1e-12)
    assert acc.get_delta(ref.epsilon) == pytest.approx(1e-5, rel=1e-6)
    assert [n for _, n in acc.events()] == [50, 50, 50, 50, 50, 50, 2]


def test_count_zero_adds_nothing():
    acc = RDPAccountant(orders=ORDERS).compose(ModelSplitEvent(num_submodels=2, noise_multiplier=1.0), 0)
    assert np.all(acc.rdp == 0.0)


def test_expensive_kernels_stop_at_order_256_soundly():
    # The α²-cost Theorem 3.1 kernel is evaluated up to α = 256; larger orders are +inf (never used by the
    # minimising conversion), so the full default grid gives the same ε as the cheap prefix.
    from ampfl.accounting.orders import CHEAP_ORDERS

    split = ModelSplitEvent(num_submodels=4, noise_multiplier=1.0)
    full = RDPAccountant().compose(split, 100)
    cheap = RDPAccountant(orders=CHEAP_ORDERS).compose(split, 100)
    assert np.all(np.isinf(full.rdp[full.orders > 256]))
    assert full.get_epsilon(1e-5) == cheap.get_epsilon(1e-5)
